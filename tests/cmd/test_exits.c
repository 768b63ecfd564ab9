/*
 * Exit codes and messages every command shares (src/cmd/cli.c, ready.c,
 * main.c): an unknown option names the closest known one; a URL given
 * with its API path names the base URL, before any request; sim says an
 * unknown option is unknown; inspect exits 3 for a server that is not an
 * LLM server and names each column's URL; --ready-timeout waits for a
 * server that starts listening 2 s later, where without it a refused
 * connection fails at once; Ctrl-C ends a command with 130; stdout lines
 * come before later stderr lines in one file.
 */
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

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/fakesrv.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/simtest.h"

static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rec_rmdir(dir);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs argv; asserts the exit code and that stderr holds says. */
static void expect(const char *const *argv, int code, const char *says)
{
    struct buf err = BUF_INIT;
    int rc = proc_run(argv, NULL, NULL, &err, 60);
    if (rc != code || !strstr(buf_str(&err), says))
        print_message("fidelity %s: exit %d: %s\n", argv[0], rc, buf_str(&err));
    assert_int_equal(rc, code);
    assert_non_null(strstr(buf_str(&err), says));
    buf_release(&err);
}

static void test_did_you_mean(void **state)
{
    (void)state;
    const char *a[] = {"probe", "--endpont", "http://127.0.0.1:1", NULL};
    expect(a, 2, "unknown option '--endpont'; did you mean '--endpoint'?");
    const char *b[] = {"drift", "--candiate=http://x", NULL};
    expect(b, 2, "unknown option '--candiate'; did you mean '--candidate'?");
    const char *c[] = {"inspect", "--jsn", "x", NULL};
    expect(c, 2, "did you mean '--json'?");
    /* nothing close: no guess */
    const char *d[] = {"report", "--zzzzzzzz", NULL};
    struct buf err = BUF_INIT;
    assert_int_equal(proc_run(d, NULL, NULL, &err, 30), 2);
    assert_non_null(strstr(buf_str(&err), "unknown option '--zzzzzzzz'\n"));
    buf_release(&err);
    /* sim: an unknown option is called unknown, not "needs a value" */
    const char *e[] = {"sim", "--bogus", NULL};
    expect(e, 2, "fidelity sim: unknown option '--bogus'\n");
    const char *f[] = {"sim", "--contex-limit", "5", NULL};
    expect(f, 2, "did you mean '--context-limit'?");
    const char *g[] = {"sim", "--context-limit", NULL};
    expect(g, 2, "option '--context-limit' needs a value");
}

static void test_api_path_names_the_base_url(void **state)
{
    struct simt *t = *state;
    struct proc *sim = simt_start(t, NULL);
    char *chat = xasprintf("%s/v1/chat/completions", proc_url(sim));
    char *models = xasprintf("%s/v1/models/", proc_url(sim));
    char *want =
        xasprintf("give the server's base URL instead: %s\n", proc_url(sim));
    const char *a[] = {"probe", "--endpoint", chat, "--no-store", NULL};
    expect(a, 2, want);
    const char *b[] = {"drift", "--golden",   proc_url(sim), "--candidate",
                       models,  "--no-store", NULL};
    expect(b, 2, want);
    const char *c[] = {"inspect", chat, NULL};
    expect(c, 2, want);
    const char *d[] = {"record", "--upstream", chat, NULL};
    expect(d, 2, want);
    /* none of them sent a request */
    long status;
    json_t *st = simt_get(t, sim, "/sim/stats", &status);
    json_t *req = json_object_get(st, "requests");
    assert_int_equal(json_integer_value(json_object_get(req, "models")), 0);
    assert_int_equal(json_integer_value(json_object_get(req, "chat")), 0);
    assert_int_equal(
        json_integer_value(json_object_get(req, "get_server_info")), 0);
    json_decref(st);
    free(chat);
    free(models);
    free(want);
}

static void html(void *ud, const char *method, const char *path,
                 const char *body, size_t len, long *status, const char **ctype,
                 struct buf *out)
{
    (void)ud, (void)method, (void)path, (void)body, (void)len;
    *status = 200;
    *ctype = "text/html";
    buf_adds(out, "<html><body>a web page</body></html>");
}

static void test_inspect_not_llm_exit_3_and_columns(void **state)
{
    struct simt *t = *state;
    int port;
    struct fakesrv *web = fakesrv_start(html, NULL, &port);
    assert_non_null(web);
    char *url = xasprintf("http://127.0.0.1:%d", port);
    const char *a[] = {"inspect", url, NULL};
    expect(a, 3, "not JSON: not an OpenAI-compatible LLM server");
    fakesrv_stop(web);

    struct proc *s1 = simt_start(t, NULL);
    struct proc *s2 = simt_start(t, "--context-limit", "4096", NULL);
    char *u1 = xstrdup(proc_url(s1)), *u2 = xstrdup(proc_url(s2));
    const char *b[] = {"inspect", u1, u2, NULL};
    struct buf out = BUF_INIT;
    assert_int_equal(proc_run(b, NULL, &out, NULL, 30), 0);
    char *k1 = xasprintf("[1] %s\n", u1), *k2 = xasprintf("[2] %s\n", u2);
    assert_non_null(strstr(buf_str(&out), k1));
    assert_non_null(strstr(buf_str(&out), k2));
    assert_true(strstr(buf_str(&out), k1) < strstr(buf_str(&out), k2));
    buf_release(&out);
    free(k1);
    free(k2);
    free(u1);
    free(u2);
    free(url);
}

/* A port nothing listens on (yet). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static void test_ready_timeout_waits_for_a_late_server(void **state)
{
    (void)state;
    int port = free_port();
    char *url = xasprintf("http://127.0.0.1:%d", port);
    char *listen = xasprintf("127.0.0.1:%d", port);
    /* without --ready-timeout: refused fails at once, exit 3 */
    const char *a[] = {"probe", "--endpoint", url, "--no-store", NULL};
    double t0 = now_s();
    expect(a, 3, "cannot reach");
    assert_true(now_s() - t0 < 2);

    pid_t late = fork();
    assert_true(late >= 0);
    if (late == 0) {
        usleep(2000000);
        if (!freopen("/dev/null", "w", stdout))
            _exit(127);
        execl(fidelity_bin(), "fidelity", "sim", "--listen", listen,
              (char *)NULL);
        _exit(127);
    }
    const char *b[] = {
        "probe",           "--endpoint", url,  "--no-store", "--kinds",
        "needle",          "--lengths",  "1k", "--depths",   "0",
        "--ready-timeout", "20",         NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    t0 = now_s();
    int rc = proc_run(b, NULL, &out, &err, 60);
    double took = now_s() - t0;
    kill(late, SIGTERM);
    waitpid(late, NULL, 0);
    if (rc)
        print_message("%s", buf_str(&err));
    assert_int_equal(rc, 0);
    assert_true(took >= 1.5);
    assert_non_null(strstr(buf_str(&out), "1 of 1 case finished"));
    buf_release(&out);
    buf_release(&err);

    /* with it, a server that never comes: exit 3 when it is over */
    const char *c[] = {"drift",      "--golden",        url, "--candidate", url,
                       "--no-store", "--ready-timeout", "1", NULL};
    t0 = now_s();
    expect(c, 3, "still so at the end of --ready-timeout");
    took = now_s() - t0;
    assert_true(took >= 0.8 && took < 5);
    free(url);
    free(listen);
}

/* Starts `fidelity ARGV...` with stdout and stderr to files. */
static pid_t spawn(const char *const *argv)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *out = xasprintf("%s/spawn.out", dir);
        if (!freopen(out, "w", stdout) || !freopen(out, "a", stderr))
            _exit(127);
        const char *av[32] = {"fidelity"};
        for (int i = 0; argv[i] && i < 30; i++)
            av[i + 1] = argv[i];
        execv(fidelity_bin(), (char *const *)av);
        _exit(127);
    }
    return pid;
}

static int interrupt_after(pid_t pid, unsigned ms)
{
    usleep(ms * 1000);
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_interrupt_is_130(void **state)
{
    struct simt *t = *state;
    struct proc *slow = simt_start(t, "--latency-ms", "2000", NULL);
    char *url = xstrdup(proc_url(slow));
    const char *d[] = {"drift", "--golden",   url, "--candidate",
                       url,     "--no-store", NULL};
    assert_int_equal(interrupt_after(spawn(d), 1000), 130);
    char *db = xasprintf("%s/int.db", dir);
    const char *p[] = {"probe",   "--endpoint", url,         "--db", db,
                       "--kinds", "needle",     "--lengths", "1k",   NULL};
    assert_int_equal(interrupt_after(spawn(p), 1500), 130);
    free(db);
    free(url);
}

static void test_stdout_before_stderr_in_one_file(void **state)
{
    struct simt *t = *state;
    struct proc *sim =
        simt_start(t, "--context-limit", "600", "--overflow", "oldest", NULL);
    char *cmd = xasprintf(
        "'%s' probe --endpoint %s --no-store --kinds needle --lengths 1k "
        "--depths 0 > '%s/both.txt' 2>&1",
        fidelity_bin(), proc_url(sim), dir);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    char *path = xasprintf("%s/both.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    struct buf b = BUF_INIT;
    char line[4096];
    while (fgets(line, sizeof(line), f))
        buf_adds(&b, line);
    fclose(f);
    /* the verdict (stdout) comes before the error line (stderr) */
    const char *verdict = strstr(buf_str(&b), "\nFAIL");
    const char *error = strstr(buf_str(&b), "fidelity probe: a check failed");
    if (!verdict || !error || verdict > error)
        print_message("%s", buf_str(&b));
    assert_non_null(verdict);
    assert_non_null(error);
    assert_true(verdict < error);
    buf_release(&b);
    free(path);
    free(cmd);
}

/* --quiet: the verdict line alone on stdout */
static void test_quiet_prints_the_verdict_alone(void **state)
{
    struct simt *t = *state;
    struct proc *sim = simt_start(t, NULL);
    char *url = xstrdup(proc_url(sim));
    const char *p[] = {"probe",    "--endpoint", url,         "--no-store",
                       "--kinds",  "needle",     "--lengths", "1k",
                       "--depths", "0",          "-q",        NULL};
    const char *d[] = {"drift",
                       "--golden",
                       url,
                       "--candidate",
                       url,
                       "--no-store",
                       "--sequences",
                       "1",
                       "--max-context",
                       "512",
                       "--decode-tokens",
                       "4",
                       "--no-cache-arm",
                       "--quiet",
                       NULL};
    const char *const *cmds[] = {p, d};
    const char *want[] = {"PASS: the pass rate 100.0% meets --fail-under 90%\n",
                          "verdict: PASS\n"};
    for (int i = 0; i < 2; i++) {
        struct buf out = BUF_INIT;
        assert_int_equal(proc_run(cmds[i], NULL, &out, NULL, 120), 0);
        assert_string_equal(buf_str(&out), want[i]);
        buf_release(&out);
    }
    free(url);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_did_you_mean, simt_setup,
                                        simt_teardown),
        cmocka_unit_test_setup_teardown(test_api_path_names_the_base_url,
                                        simt_setup, simt_teardown),
        cmocka_unit_test_setup_teardown(test_inspect_not_llm_exit_3_and_columns,
                                        simt_setup, simt_teardown),
        cmocka_unit_test_setup_teardown(
            test_ready_timeout_waits_for_a_late_server, simt_setup,
            simt_teardown),
        cmocka_unit_test_setup_teardown(test_interrupt_is_130, simt_setup,
                                        simt_teardown),
        cmocka_unit_test_setup_teardown(test_stdout_before_stderr_in_one_file,
                                        simt_setup, simt_teardown),
        cmocka_unit_test_setup_teardown(test_quiet_prints_the_verdict_alone,
                                        simt_setup, simt_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
