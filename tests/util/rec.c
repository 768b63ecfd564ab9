/*
 * rec: spawning record and sim for end-to-end tests (see rec.h).
 */
#define _GNU_SOURCE
#include "util/rec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"

int rec_start(struct proc *p, const char *const argv[], const char *err_path)
{
    return proc_start_err(p, argv, err_path);
}

int rec_start_record(struct proc *p, const char *upstream, const char *db,
                     const char *const extra[])
{
    const char *av[32] = {
        "record", "--listen", "127.0.0.1:0", "--upstream", upstream,
        "--db",   db};
    int n = 7;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        av[n++] = extra[i];
    av[n] = NULL;
    return rec_start(p, av, NULL);
}

char *rec_tmpdir(void)
{
    char *d = xstrdup("/tmp/fidelity-rec-XXXXXX");
    if (!mkdtemp(d)) {
        free(d);
        return NULL;
    }
    return d;
}

void rec_rmdir(char *dir)
{
    if (!dir)
        return;
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove '%s'\n", dir);
    free(cmd);
    free(dir);
}

int rec_read_file(const char *path, struct buf *b)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    char tmp[65536];
    ssize_t n;
    while ((n = read(fd, tmp, sizeof(tmp))) > 0)
        buf_add(b, tmp, (size_t)n);
    close(fd);
    return 0;
}

int rec_contains(const char *hay, size_t n_hay, const char *needle)
{
    return memmem(hay, n_hay, needle, strlen(needle)) != NULL;
}

void rec_resp_init(struct rec_resp *r)
{
    memset(r, 0, sizeof(*r));
}

void rec_resp_release(struct rec_resp *r)
{
    buf_release(&r->body);
    buf_release(&r->headers);
}

struct fetch_ud {
    struct rec_resp *r;
    size_t abort_after;
};

static size_t fetch_body(char *p, size_t sz, size_t n, void *ud)
{
    struct fetch_ud *f = ud;
    buf_add(&f->r->body, p, sz * n);
    if (f->abort_after && f->r->body.len >= f->abort_after)
        return 0;
    return sz * n;
}

static size_t fetch_header(char *p, size_t sz, size_t n, void *ud)
{
    struct rec_resp *r = ud;
    buf_add(&r->headers, p, sz * n);
    return sz * n;
}

int rec_fetch(const char *url, const char *body, size_t body_len,
              const char *const headers[], size_t abort_after,
              struct rec_resp *r)
{
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    struct fetch_ud f = {r, abort_after};
    for (int i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, fetch_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return (int)rc;
}

static int load_fn(const struct xchg *x, void *ud)
{
    json_array_append_new(ud, xchg_to_json(x));
    return 0;
}

json_t *rec_load(const char *db)
{
    struct db *s = NULL;
    struct diag d = {{0}};
    if (store_open(db, &s, &d))
        return NULL;
    json_t *all = json_array();
    if (xchg_schema(s, &d) || xchg_each(s, NULL, load_fn, all, &d)) {
        fprintf(stderr, "rec_load: %s\n", d.msg);
        json_decref(all);
        all = NULL;
    }
    store_close(s);
    return all;
}
