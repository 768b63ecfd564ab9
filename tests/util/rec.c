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
    int fds[2];
    char line[1024];
    size_t len = 0;

    memset(p, 0, sizeof(*p));
    p->out_fd = -1;
    if (pipe(fds))
        return -1;
    p->pid = fork();
    if (p->pid < 0)
        return -1;
    if (p->pid == 0) {
        const char *av[64];
        int n = 0;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        av[n++] = fidelity_bin();
        for (int i = 0; argv[i] && n < 63; i++)
            av[n++] = argv[i];
        av[n] = NULL;
        close(fds[0]);
        dup2(fds[1], 1);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        if (err_path) {
            int e = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
            if (e >= 0)
                dup2(e, 2);
        }
        execv(av[0], (char *const *)av);
        _exit(127);
    }
    close(fds[1]);
    p->out_fd = fds[0];
    for (;;) {
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        if (poll(&pfd, 1, 10000) <= 0)
            break;
        if (read(p->out_fd, line + len, 1) <= 0)
            break;
        if (line[len] == '\n' || len + 2 >= sizeof(line)) {
            line[len] = '\0';
            const char *u = strstr(line, "http://");
            const char *colon = u ? strchr(u + 7, ':') : NULL;
            if (colon)
                p->port = atoi(colon + 1);
            if (p->port > 0)
                return 0;
            break;
        }
        len++;
    }
    proc_stop(p);
    return -1;
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
    sqlite3 *s = NULL;
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
