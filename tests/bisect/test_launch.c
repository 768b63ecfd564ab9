/*
 * Tests for bisect/local, the local launcher: a server that exits at once,
 * one never ready, one that ignores SIGTERM, one that forks through sh -c,
 * a real one (fidelity sim), and the owner killed with SIGKILL. Each must
 * be handled within its timeout, and afterwards no process of it may be
 * left: every server is started with a unique environment marker and the
 * test reads the process table (/proc/PID/environ) for it.
 */
#include <dirent.h>
#include <errno.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "bisect/launch.h"
#include "util/marked.h"
#include "util/proc.h"

static char dir[64];
static char mark[64];

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/fidelity-launch-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(mark, sizeof(mark), "FIDELITY_LAUNCH_TEST=%d.%ld", (int)getpid(),
             (long)time(NULL));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

struct run {
    struct launch_spec spec;
    char log[128], url[128], cmd[512];
    char *env[1];
};

static void spec_for(struct run *r, const char *cmd, double timeout,
                     double grace)
{
    memset(r, 0, sizeof(*r));
    int port = free_port();
    snprintf(r->log, sizeof(r->log), "%s/server.log", dir);
    snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d/v1/models", port);
    snprintf(r->cmd, sizeof(r->cmd), cmd, port);
    r->env[0] = mark;
    r->spec = (struct launch_spec){
        .name = "t",
        .command = r->cmd,
        .env = r->env,
        .n_env = 1,
        .log_path = r->log,
        .ready_url = r->url,
        .ready_timeout = timeout,
        .stop_signal = SIGTERM,
        .stop_grace = grace,
    };
}

/* Submits and waits; returns wait_ready's result, cancels, and checks no
 * marked process is left. */
static int launch_and_stop(struct run *r, double *wait_s, double *stop_s,
                           char *addr)
{
    struct launcher *l = launch_local_new();
    struct launch *x;
    struct diag d = {0};
    assert_int_equal(l->ops->submit(l, &r->spec, &x, &d), 0);
    double t0 = marked_now();
    char a[128] = "";
    int rc = l->ops->wait_ready(x, NULL, a, sizeof(a), &d);
    double t1 = marked_now();
    assert_int_equal(l->ops->cancel(x, &d), 0);
    *wait_s = t1 - t0;
    *stop_s = marked_now() - t1;
    if (addr)
        strcpy(addr, a);
    l->ops->free(l);
    assert_int_equal(marked_after(mark, 1), 0);
    return rc;
}

static void test_exits_at_once(void **state)
{
    (void)state;
    struct run r;
    spec_for(&r, "echo 'fatal: no GPU on port %d'; exit 3", 10, 5);
    double w, s;
    assert_int_equal(launch_and_stop(&r, &w, &s, NULL), -ECHILD);
    assert_true(w < 2);
    struct buf tail = BUF_INIT;
    assert_int_equal(launch_log_tail(r.log, 5, &tail), 0);
    assert_non_null(strstr(buf_str(&tail), "fatal: no GPU on port"));
    buf_release(&tail);
}

static void test_never_ready(void **state)
{
    (void)state;
    struct run r;
    spec_for(&r, "echo loading %d; echo still loading; exec sleep 300", 1, 5);
    double w, s;
    assert_int_equal(launch_and_stop(&r, &w, &s, NULL), -ETIMEDOUT);
    assert_true(w >= 1 && w < 3);
    assert_true(s < 2); /* sleep dies on SIGTERM, no grace needed */
    struct buf tail = BUF_INIT;
    assert_int_equal(launch_log_tail(r.log, 1, &tail), 0);
    assert_string_equal(buf_str(&tail), "still loading\n");
    buf_release(&tail);
}

static void test_ignores_sigterm(void **state)
{
    (void)state;
    struct run r;
    spec_for(&r, "trap '' TERM; sleep 300 & echo %d; wait", 0.5, 0.5);
    double w, s;
    assert_int_equal(launch_and_stop(&r, &w, &s, NULL), -ETIMEDOUT);
    assert_true(s >= 0.45 && s < 3); /* the grace, then SIGKILL */
}

static void test_forking_server(void **state)
{
    (void)state;
    struct run r;
    spec_for(&r,
             "sh -c 'sleep 300 & sleep 301 & echo %d; wait' & "
             "sleep 302; wait",
             0.5, 2);
    struct launcher *l = launch_local_new();
    struct launch *x;
    struct diag d = {0};
    assert_int_equal(l->ops->submit(l, &r.spec, &x, &d), 0);
    double end = marked_now() + 5;
    while (marked_count(mark) < 5 && marked_now() < end) /* sh, sh, 3 sleeps */
        usleep(20000);
    assert_int_equal(marked_count(mark), 5);
    assert_int_equal(l->ops->cancel(x, &d), 0);
    l->ops->free(l);
    assert_int_equal(marked_after(mark, 1), 0);
}

static void test_ready_sim(void **state)
{
    (void)state;
    struct run r;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "exec '%s' sim --listen 127.0.0.1:%%d",
             fidelity_bin());
    spec_for(&r, cmd, 10, 5);
    double w, s;
    char addr[128];
    assert_int_equal(launch_and_stop(&r, &w, &s, addr), 0);
    char want[64];
    launch_base_url(r.url, want, sizeof(want));
    assert_string_equal(addr, want);
    assert_true(s < 3);
}

/* The process that launched dies by SIGKILL: its watchdog stops the
 * whole group, children of children included. */
static void test_owner_killed(void **state)
{
    (void)state;
    struct run r;
    spec_for(&r, "sh -c 'sleep 300 & echo %d; wait' & sleep 301; wait", 60, 1);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t owner = fork();
    if (owner == 0) {
        struct launcher *l = launch_local_new();
        struct launch *x;
        struct diag d;
        if (l->ops->submit(l, &r.spec, &x, &d))
            _exit(1);
        ssize_t k = write(p[1], "s", 1);
        (void)k;
        for (;;)
            pause();
    }
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    double end = marked_now() + 5;
    while (marked_count(mark) < 4 && marked_now() < end)
        usleep(20000);
    assert_int_equal(marked_count(mark), 4);
    kill(owner, SIGKILL);
    waitpid(owner, NULL, 0);
    double t0 = marked_now();
    assert_int_equal(marked_after(mark, 3), 0);
    assert_true(marked_now() - t0 < 2);
    close(p[0]);
    close(p[1]);
}

static void test_base_url(void **state)
{
    (void)state;
    char b[64];
    launch_base_url("http://127.0.0.1:30000/health", b, sizeof(b));
    assert_string_equal(b, "http://127.0.0.1:30000");
    launch_base_url("https://h:1", b, sizeof(b));
    assert_string_equal(b, "https://h:1");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exits_at_once),
        cmocka_unit_test(test_never_ready),
        cmocka_unit_test(test_ignores_sigterm),
        cmocka_unit_test(test_forking_server),
        cmocka_unit_test(test_ready_sim),
        cmocka_unit_test(test_owner_killed),
        cmocka_unit_test(test_base_url),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
