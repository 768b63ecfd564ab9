/*
 * Tests of the readiness request (src/cmd/ready.c) as a user meets it
 * through `fidelity probe` and `fidelity drift`: a server that answers
 * HTML gets one line naming URL, status, content type and its first bytes,
 * with exit 3 from both commands; a server that accepts connections and
 * never answers is reported within --ready-timeout, not after the
 * per-request timeout; on a terminal the wait says what it waits for, and
 * through a pipe it does not.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/fakesrv.h"
#include "util/proc.h"

static char dir[64], db[128];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fidelity-ready-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(db, sizeof(db), "%s/r.db", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static size_t lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void html_answer(void *ud, const char *method, const char *path,
                        const char *body, size_t len, long *status,
                        const char **ctype, struct buf *out)
{
    (void)ud, (void)method, (void)path, (void)body, (void)len;
    *status = 200;
    *ctype = "text/html; charset=utf-8";
    buf_adds(out, "<html>\n<body>\r\n\tIt works! This is the default web page "
                  "for this server; nothing else is here.</body></html>\n");
}

/* A socket that listens and never accepts: the kernel completes the
 * handshake, so a client connects, sends, and waits for an answer that
 * never comes. */
static int silent_listener(int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

struct run {
    int code;
    struct buf out, err;
    double secs;
};

static void run(struct run *r, const char *const argv[])
{
    buf_init(&r->out, 0);
    buf_init(&r->err, 0);
    double t0 = now_s();
    r->code = proc_run(argv, NULL, &r->out, &r->err, 60);
    r->secs = now_s() - t0;
}

static void run_release(struct run *r)
{
    buf_release(&r->out);
    buf_release(&r->err);
}

/* probe and drift at url with extra args (NULL-terminated, may be NULL). */
static void run_both(struct run r[2], const char *url, const char *ready)
{
    const char *probe[] = {"probe", "--endpoint",      url,   "--db",
                           db,      "--ready-timeout", ready, NULL};
    const char *drift[] = {"drift",       "--golden",   url,
                           "--candidate", url,          "--ready-timeout",
                           ready,         "--no-store", NULL};
    run(&r[0], probe);
    run(&r[1], drift);
}

static void test_html_endpoint_one_line_exit_3(void **state)
{
    (void)state;
    int port;
    struct fakesrv *fs = fakesrv_start(html_answer, NULL, &port);
    assert_non_null(fs);
    char url[64], models[96];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    snprintf(models, sizeof(models), "'%s/v1/models'", url);
    struct run r[2];
    run_both(r, url, "30");
    fakesrv_stop(fs);
    for (int i = 0; i < 2; i++) {
        const char *e = buf_str(&r[i].err);
        print_message("%s", e);
        assert_int_equal(r[i].code, 3);
        assert_int_equal(lines(e), 1);
        assert_non_null(strstr(e, i ? "fidelity drift: golden: "
                                    : "fidelity probe: endpoint: "));
        assert_non_null(strstr(e, models));
        assert_non_null(strstr(e, "HTTP 200 (text/html)"));
        assert_non_null(strstr(e, "not an OpenAI-compatible LLM server"));
        /* the first 80 printable bytes, white space folded */
        assert_non_null(strstr(e, "'<html> <body> It works! This is the "
                                  "default web page for this server; "
                                  "nothing el'\n"));
        run_release(&r[i]);
    }
}

static void test_silent_endpoint_reported_within_ready_timeout(void **state)
{
    (void)state;
    int port, fd = silent_listener(&port);
    char url[64], show[64];
    /* a password in the URL is never shown */
    snprintf(url, sizeof(url), "http://me:s3cret@127.0.0.1:%d", port);
    snprintf(show, sizeof(show), "'http://***@127.0.0.1:%d/v1/models'", port);
    struct run r[2];
    run_both(r, url, "2");
    close(fd);
    for (int i = 0; i < 2; i++) {
        const char *e = buf_str(&r[i].err);
        print_message("%.1f s: %s", r[i].secs, e);
        assert_int_equal(r[i].code, 3);
        assert_int_equal(lines(e), 1);
        assert_non_null(strstr(e, "did not answer within 2 s "
                                  "(--ready-timeout)"));
        assert_non_null(strstr(e, show));
        assert_null(strstr(e, "s3cret"));
        /* 2 s, not the 300 s (probe) or 600 s (drift) of --timeout */
        assert_true(r[i].secs >= 1.9 && r[i].secs < 10);
        /* no terminal: no waiting line */
        assert_null(strstr(e, "waiting for"));
        run_release(&r[i]);
    }
}

static void empty_404(void *ud, const char *method, const char *path,
                      const char *body, size_t len, long *status,
                      const char **ctype, struct buf *out)
{
    (void)ud, (void)method, (void)path, (void)body, (void)len, (void)out;
    *status = 404;
    *ctype = "text/plain";
}

/* A 404 without a body (a server that has no /v1/models) is not judged
 * by the readiness request: probe's own fingerprint tells it. */
static void test_empty_404_left_to_the_command(void **state)
{
    (void)state;
    int port;
    struct fakesrv *fs = fakesrv_start(empty_404, NULL, &port);
    assert_non_null(fs);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    struct run r;
    const char *argv[] = {"probe", "--endpoint", url, "--db", db, NULL};
    run(&r, argv);
    fakesrv_stop(fs);
    print_message("%s", buf_str(&r.err));
    assert_int_equal(r.code, 3);
    assert_non_null(strstr(buf_str(&r.err), "/v1/models' answered HTTP 404"));
    assert_null(strstr(buf_str(&r.err), "not an OpenAI-compatible"));
    run_release(&r);
}

/* Runs argv under a pseudo-terminal; everything it wrote into out. */
static int run_pty(const char *const argv[], struct buf *out)
{
    int fd, status;
    char tmp[4096];
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0)
            break;
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n <= 0)
            break;
        buf_add(out, tmp, (size_t)n);
    }
    waitpid(pid, &status, 0);
    close(fd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_wait_line_on_tty(void **state)
{
    (void)state;
    int port, fd = silent_listener(&port);
    char url[64], want[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    const char *probe[] = {
        fidelity_bin(),    "probe", "--endpoint", url, "--db", db,
        "--ready-timeout", "4",     NULL};
    const char *drift[] = {
        fidelity_bin(), "drift",           "--golden", url, "--candidate", url,
        "--no-store",   "--ready-timeout", "4",        NULL};
    const char *const *cmds[] = {probe, drift};
    for (int i = 0; i < 2; i++) {
        struct buf out = BUF_INIT;
        assert_int_equal(run_pty(cmds[i], &out), 3);
        print_message("%s\n", buf_str(&out));
        snprintf(want, sizeof(want), "\rwaiting for %s/v1/models (3 s of 4)",
                 url);
        assert_non_null(strstr(buf_str(&out), want));
        assert_non_null(strstr(buf_str(&out), "did not answer within 4 s"));
        buf_release(&out);
    }
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_html_endpoint_one_line_exit_3),
        cmocka_unit_test(test_empty_404_left_to_the_command),
        cmocka_unit_test(test_silent_endpoint_reported_within_ready_timeout),
        cmocka_unit_test(test_wait_line_on_tty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
