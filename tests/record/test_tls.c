/*
 * An https:// upstream through `fidelity record` (libcurl's side of the
 * proxy): a self-signed certificate is made at test time with the openssl
 * CLI, `openssl s_server -WWW` serves a file on 127.0.0.1, and a GET
 * through record must be byte-identical to the file and stored. Without
 * --upstream-cacert the certificate is refused (502); with --insecure it
 * is accepted. Skipped (not passed) when openssl is not installed; failed
 * under CI=true (tests/util/need.h).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/need.h"
#include "util/rec.h"

struct fx {
    char *dir;
    pid_t server;
    int port;
    char upstream[64];
    char cert[300];
    char file[300];
};

static bool has_openssl(void)
{
    return system("openssl version >/dev/null 2>&1") == 0;
}

/* A port free a moment ago (s_server cannot report one it picked). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
        getsockname(fd, (struct sockaddr *)&a, &al)) {
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static bool port_open(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bool ok = fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a));
    close(fd);
    return ok;
}

static int fx_setup(void **state)
{
    if (!has_openssl())
        return 0; /* the test skips */
    struct fx *f = xcalloc(1, sizeof(*f));
    *state = f;
    f->dir = rec_tmpdir();
    snprintf(f->cert, sizeof(f->cert), "%s/cert.pem", f->dir);
    snprintf(f->file, sizeof(f->file), "%s/reply.json", f->dir);
    char *cmd = xasprintf(
        "cd '%s' && openssl req -x509 -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem "
        "-days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
        ">/dev/null 2>&1",
        f->dir);
    int rc = system(cmd);
    free(cmd);
    if (rc)
        return -1;
    FILE *o = fopen(f->file, "wb");
    if (!o)
        return -1;
    fputs("{\"id\": \"tls\", \"choices\": [{\"message\": {\"role\": "
          "\"assistant\", \"content\": \"caf\xc3\xa9 over TLS\"}}]}\n",
          o);
    fclose(o);
    f->port = free_port();
    f->server = fork();
    if (f->server == 0) {
        char acc[32];
        snprintf(acc, sizeof(acc), "127.0.0.1:%d", f->port);
        if (chdir(f->dir))
            _exit(127);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("openssl", "openssl", "s_server", "-WWW", "-quiet", "-accept",
               acc, "-cert", "cert.pem", "-key", "key.pem", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200 && !port_open(f->port); i++)
        usleep(50000);
    if (!port_open(f->port))
        return -1;
    snprintf(f->upstream, sizeof(f->upstream), "https://127.0.0.1:%d", f->port);
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    if (!f)
        return 0;
    if (f->server > 0) {
        kill(f->server, SIGTERM);
        waitpid(f->server, NULL, 0);
    }
    rec_rmdir(f->dir);
    free(f);
    return 0;
}

/* GET /reply.json through record started with extra args; returns the
 * status, body in r. */
static long get_through(struct fx *f, const char *db, const char *const extra[],
                        struct rec_resp *r, json_t **stored)
{
    struct proc rec;
    assert_int_equal(rec_start_record(&rec, f->upstream, db, extra), 0);
    char *u = xasprintf("http://127.0.0.1:%d/reply.json", rec.port);
    rec_resp_init(r);
    assert_int_equal(rec_fetch(u, NULL, 0, NULL, 0, r), 0);
    free(u);
    assert_int_equal(proc_stop(&rec), 0);
    *stored = rec_load(db);
    assert_non_null(*stored);
    return r->status;
}

static void test_https_upstream(void **state)
{
    struct fx *f = *state;
    if (!f)
        need_missing("the openssl command");
    struct buf want = BUF_INIT;
    assert_int_equal(rec_read_file(f->file, &want), 0);
    char db[400];
    json_t *all;
    struct rec_resp r;

    /* trusted through --upstream-cacert: byte-identical, stored */
    const char *const ca[] = {"--upstream-cacert", f->cert, NULL};
    snprintf(db, sizeof(db), "%s/ca.db", f->dir);
    assert_int_equal(get_through(f, db, ca, &r, &all), 200);
    assert_int_equal(r.body.len, want.len);
    assert_memory_equal(r.body.data, want.data, want.len);
    rec_resp_release(&r);
    assert_int_equal(json_array_size(all), 1);
    json_t *x = json_array_get(all, 0);
    assert_string_equal(json_string_value(json_object_get(x, "end")),
                        "complete");
    assert_string_equal(json_string_value(json_object_get(x, "resp_raw")),
                        want.data);
    json_decref(all);

    /* the certificate is checked: not trusted without the CA file */
    snprintf(db, sizeof(db), "%s/none.db", f->dir);
    assert_int_equal(get_through(f, db, NULL, &r, &all), 502);
    assert_true(rec_contains(r.body.data, r.body.len, "upstream_unreachable"));
    rec_resp_release(&r);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(all, 0), "end")),
        "upstream_error");
    json_decref(all);

    /* --insecure: accepted unchecked */
    const char *const insecure[] = {"--insecure", NULL};
    snprintf(db, sizeof(db), "%s/insecure.db", f->dir);
    assert_int_equal(get_through(f, db, insecure, &r, &all), 200);
    assert_int_equal(r.body.len, want.len);
    assert_memory_equal(r.body.data, want.data, want.len);
    rec_resp_release(&r);
    json_decref(all);
    buf_release(&want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_https_upstream, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
