/*
 * End-to-end tests of bisect's Slurm launcher against a one-node Slurm
 * cluster the tests start themselves (util/slurm): the five-toggle sim
 * config of test_cmd_bisect ranked the same way through batch jobs, a
 * golden whose command fails at start, a golden pending past
 * --queue-timeout behind a blocker job, SIGINT mid-run, SIGKILL then
 * --resume, and --dry-run's batch scripts. After each, squeue lists no
 * job of bisect's and no process carries the test's environment marker.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/bisectfx.h"
#include "util/marked.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/slurm.h"

static struct slurm_cluster cl;
static bool cluster_up;
static char dir[64];
static char mark[64];
static pid_t bg;

/* bisect's jobs ("fb-" names) squeue still lists. */
static int our_jobs(void)
{
    return slurm_jobs_named("fb-");
}

static int group_setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/fidelity-bslurm-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(mark, sizeof(mark), "FIDELITY_SLURM_TEST=%d", (int)getpid());
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    slurm_cluster_stop(&cl);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Each test: the cluster (started by the first that needs it). */
static int setup(void **state)
{
    (void)state;
    return 0;
}

static void need_cluster(void)
{
    slurm_need();
    if (cluster_up)
        return;
    struct buf why = BUF_INIT;
    if (slurm_cluster_start(&cl, &why))
        fail_msg("%s", buf_str(&why));
    buf_release(&why);
    cluster_up = true;
}

static int teardown(void **state)
{
    (void)state;
    if (bg > 0) {
        kill(bg, SIGKILL);
        waitpid(bg, NULL, 0);
        bg = 0;
    }
    if (cluster_up)
        slurm_sh("scancel --user=root", NULL, 10);
    return 0;
}

/* DIR/name/config.ini: a Slurm config running server (with {port}), the
 * marker in its environment, then extra text (more [slurm] keys first,
 * then toggles). */
static void write_config(const char *name, const char *server,
                         const char *extra, char *cfg, size_t len)
{
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/%s", dir, name);
    mkdir(sub, 0755);
    snprintf(cfg, len, "%s/config.ini", sub);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f,
            "[server]\n"
            "launcher = slurm\n"
            "command = echo launch >> %s/count; %s\n"
            "env = %s\n"
            "ready_timeout = 20\n"
            "stop_grace = 2\n\n"
            "[measure]\nprofile = test\n\n"
            "[slurm]\nhost = 127.0.0.1\ntime = 10\n%s",
            sub, server, mark, extra);
    fclose(f);
}

static char *sim_server(const char *extra)
{
    static char s[512];
    snprintf(s, sizeof(s), "exec '%s' sim --listen 127.0.0.1:{port} %s",
             fidelity_bin(), extra);
    return s;
}

/* The sim server, except with HANG set: a process that never answers. */
static char *hanging_server(void)
{
    static char s[512];
    snprintf(s, sizeof(s),
             "[ -n \"$HANG\" ] && exec sleep 300; exec '%s' sim "
             "--listen 127.0.0.1:{port}",
             fidelity_bin());
    return s;
}

static void test_five_ranked_through_slurm(void **state)
{
    (void)state;
    need_cluster();
    char cfg[128], od[128], jp[128];
    write_config("five", sim_server("--noise-recall-limit 0.1"), bisectfx_five,
                 cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/five/out", dir);
    snprintf(jp, sizeof(jp), "%s/five/out.json", dir);
    const char *argv[] = {"bisect", cfg, "--out",     od,
                          "--json", jp,  "--slots=2", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 400);
    if (rc != 1)
        fail_msg("exit %d\n%s\n%s", rc, buf_str(&out), buf_str(&err));
    assert_int_equal(our_jobs(), 0);
    assert_int_equal(marked_after(mark, 5), 0);
    assert_int_equal(bisectfx_launches(dir, "five"), 6);
    assert_true(!strncmp(buf_str(&out), "culprit: mhc-bf16: excess KL ", 29));
    json_t *j = json_load_file(jp, 0, NULL);
    assert_non_null(j);
    /* a row not measured: its error and bisect's log, to tell why */
    size_t k;
    json_t *row;
    json_array_foreach(json_object_get(j, "configurations"), k, row)
    {
        if (strcmp(bisectfx_str(row, "verdict"), "not measured"))
            continue;
        char *shown = json_dumps(row, JSON_INDENT(1));
        char *mlog =
            xasprintf("%s/%s.measure.log", od, bisectfx_str(row, "name"));
        struct buf lg = BUF_INIT;
        rec_read_file(mlog, &lg);
        fail_msg("%s was not measured:\n%s\n%s\n%s:\n%s",
                 bisectfx_str(row, "name"), shown, buf_str(&err), mlog,
                 buf_str(&lg));
    }
    const json_t *c = json_array_get(json_object_get(j, "configurations"), 0);
    assert_string_equal(bisectfx_str(c, "name"), "mhc-bf16");
    assert_string_equal(bisectfx_str(c, "verdict"), "CULPRIT");
    assert_string_equal(bisectfx_str(c, "attribution"), "prefill only");
    assert_true(json_is_true(json_object_get(c, "path_mismatch")));
    const json_t *d = bisectfx_row(j, "splitk-decode");
    assert_string_equal(bisectfx_str(d, "attribution"), "decode only");
    assert_string_equal(bisectfx_str(d, "verdict"),
                        "drifts (recall unchanged)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "fp8-gemm"), "verdict"),
                        "harmless (below thresholds)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "overlap"), "verdict"),
                        "harmless (below thresholds)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "unread-flag"), "verdict"),
                        "inert");
    /* each configuration ran as a job: its script and the job's output */
    char path[192];
    snprintf(path, sizeof(path), "%s/mhc-bf16.sbatch", od);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/mhc-bf16.server.log", od);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512] = "";
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_non_null(strstr(line, "fidelity bisect: starting on 127.0.0.1:"));
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
}

static void test_golden_failing_at_start(void **state)
{
    (void)state;
    need_cluster();
    char cfg[128], od[128];
    write_config("bad", "exec /nonexistent/llm-server --port {port}",
                 "[toggle a]\nargs = -a\n", cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/bad/out", dir);
    const char *argv[] = {"bisect", cfg, "--out", od, NULL};
    struct buf err = BUF_INIT;
    double t0 = marked_now();
    assert_int_equal(proc_run(argv, NULL, NULL, &err, 60), 3);
    assert_true(marked_now() - t0 < 30);
    const char *e = buf_str(&err);
    if (!strstr(e, "the golden did not start: job ") ||
        !strstr(e, "before the server was ready") ||
        !strstr(e, "the golden's log ends with:") ||
        !strstr(e, "/nonexistent/llm-server"))
        fail_msg("unexpected report:\n%s", e);
    assert_int_equal(our_jobs(), 0);
    buf_release(&err);
}

static void test_pending_past_queue_timeout(void **state)
{
    (void)state;
    need_cluster();
    /* a blocker holding every CPU of the node */
    struct buf o = BUF_INIT;
    assert_int_equal(slurm_sh("sbatch --parsable --exclusive -J blocker "
                              "-o /dev/null --wrap 'sleep 120'",
                              &o, 10),
                     0);
    for (int i = 0; i < 100; i++) {
        struct buf s = BUF_INIT;
        slurm_sh("squeue -h -n blocker -o %T", &s, 5);
        bool run = strstr(buf_str(&s), "RUNNING") != NULL;
        buf_release(&s);
        if (run)
            break;
        usleep(100000);
    }
    char cfg[128], od[128];
    write_config("pend", sim_server(""), "[toggle a]\nargs = --seed 1\n", cfg,
                 sizeof(cfg));
    snprintf(od, sizeof(od), "%s/pend/out", dir);
    const char *argv[] = {"bisect",          cfg, "--out", od,
                          "--queue-timeout", "3", NULL};
    struct buf err = BUF_INIT;
    double t0 = marked_now();
    assert_int_equal(proc_run(argv, NULL, NULL, &err, 60), 3);
    double took = marked_now() - t0;
    assert_true(took >= 3 && took < 20);
    const char *e = buf_str(&err);
    if (!strstr(e, "still pending after 3 s (reason: "))
        fail_msg("unexpected report:\n%s", e);
    assert_int_equal(our_jobs(), 0);
    assert_int_equal(bisectfx_launches(dir, "pend"), 0);
    assert_int_equal(slurm_jobs_named("blocker"), 1);
    slurm_sh("scancel -n blocker", NULL, 10);
    buf_release(&o);
    buf_release(&err);
}

static pid_t spawn_bisect(const char *cfg, const char *od, const char *extra)
{
    pid_t p = fork();
    if (p == 0) {
        int fd = open("/dev/null", O_RDWR);
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(fidelity_bin(), fidelity_bin(), "bisect", cfg, "--out", od, extra,
              (char *)NULL);
        _exit(127);
    }
    bg = p;
    return p;
}

/* Waits until n of bisect's jobs run; false after secs. */
static bool jobs_running(int n, double secs)
{
    double end = marked_now() + secs;
    while (marked_now() < end) {
        struct buf s = BUF_INIT;
        slurm_sh("squeue -h -t RUNNING -o %j", &s, 5);
        int k = 0;
        for (const char *p = buf_str(&s); (p = strstr(p, "fb-")); p++)
            k++;
        buf_release(&s);
        if (k >= n)
            return true;
        usleep(100000);
    }
    return false;
}

static void test_sigint_mid_run(void **state)
{
    (void)state;
    need_cluster();
    char cfg[128], od[128];
    /* the golden is ready; toggle a's server never is */
    write_config("sigint", hanging_server(), "[toggle a]\nenv = HANG=1\n", cfg,
                 sizeof(cfg));
    snprintf(od, sizeof(od), "%s/sigint/out", dir);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    assert_true(jobs_running(2, 30));
    usleep(500000);
    kill(b, SIGINT);
    double t0 = marked_now();
    int st;
    waitpid(b, &st, 0);
    bg = 0;
    assert_true(marked_now() - t0 < 20);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 130);
    assert_int_equal(our_jobs(), 0);
    assert_int_equal(marked_after(mark, 5), 0);
}

static void test_resume_cancels_and_resubmits(void **state)
{
    (void)state;
    need_cluster();
    char cfg[128], od[128];
    write_config("resume", hanging_server(), "[toggle a]\nenv = HANG=1\n", cfg,
                 sizeof(cfg));
    snprintf(od, sizeof(od), "%s/resume/out", dir);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    assert_true(jobs_running(2, 30));
    kill(b, SIGKILL); /* nothing of bisect's cancels them */
    waitpid(b, NULL, 0);
    bg = 0;
    assert_int_equal(our_jobs(), 2);
    /* resumed with a config whose toggle starts: the old jobs go */
    write_config("resume", sim_server(""), "[toggle a]\nargs = --seed 1\n", cfg,
                 sizeof(cfg));
    const char *argv[] = {"bisect", cfg, "--out", od, "--resume", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 200);
    if (rc != 0)
        fail_msg("exit %d\n%s\n%s", rc, buf_str(&out), buf_str(&err));
    assert_non_null(strstr(buf_str(&err), "cancelled 2 job(s) of the earlier "
                                          "run"));
    assert_non_null(strstr(buf_str(&out), "launches: 2"));
    assert_int_equal(our_jobs(), 0);
    assert_int_equal(marked_after(mark, 5), 0);
    buf_release(&out);
    buf_release(&err);
}

/* The port from the job's first log line ("fidelity bisect: starting on
 * 127.0.0.1:PORT: ..."), waiting up to secs for it; 0 when it never
 * came. */
static int port_in_log(const char *log, double secs)
{
    double end = marked_now() + secs;
    while (marked_now() < end) {
        FILE *f = fopen(log, "r");
        char line[512] = "";
        int port = 0;
        if (f) {
            const char *k = "starting on 127.0.0.1:";
            if (fgets(line, sizeof(line), f) && strstr(line, k))
                port = atoi(strstr(line, k) + strlen(k));
            fclose(f);
        }
        if (port > 0)
            return port;
        usleep(50000);
    }
    return 0;
}

/* A server that never listens, and a stranger (a sim this test starts,
 * outside the job) that takes the job's port after the job picked it:
 * the port answers, but not from the server bisect launched. The job
 * sees that its port's listener is no process it started and stops, so
 * bisect reports the golden not started (exit 3) and measures nothing. */
static void test_stranger_on_the_jobs_port(void **state)
{
    (void)state;
    need_cluster();
    char cfg[128], od[128], log[192], errf[192];
    write_config("stranger", "exec sleep 300 # {port}",
                 "[toggle a]\nargs = -a\n", cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/stranger/out", dir);
    snprintf(log, sizeof(log), "%s/golden.server.log", od);
    snprintf(errf, sizeof(errf), "%s/stranger/bisect.err", dir);
    pid_t b = fork();
    if (b == 0) {
        int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(fd, 2);
        execl(fidelity_bin(), fidelity_bin(), "bisect", cfg, "--out", od,
              (char *)NULL);
        _exit(127);
    }
    bg = b;
    int port = port_in_log(log, 30);
    assert_true(port > 0);
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    struct proc stranger;
    const char *sa[] = {"sim", "--listen", listen, NULL};
    assert_int_equal(proc_start(&stranger, sa), 0);
    int st = 0;
    double t0 = marked_now();
    while (waitpid(b, &st, WNOHANG) == 0 && marked_now() - t0 < 60)
        usleep(100000);
    proc_stop(&stranger);
    struct buf err = BUF_INIT;
    rec_read_file(errf, &err);
    if (waitpid(b, &st, WNOHANG) == 0 && kill(b, 0) == 0)
        fail_msg("bisect still runs after 60 s:\n%s", buf_str(&err));
    bg = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 3 ||
        !strstr(buf_str(&err), "the golden did not start") ||
        !strstr(buf_str(&err), "this job did not start"))
        fail_msg("exit %d, unexpected report:\n%s",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, buf_str(&err));
    assert_int_equal(our_jobs(), 0);
    buf_release(&err);
}

static void test_dry_run_prints_the_scripts(void **state)
{
    (void)state;
    char cfg[128], od[128];
    write_config("dry", sim_server(""),
                 "partition = gpu\naccount = llm\n"
                 "gpus_per_node = 8\nsbatch = --exclusive\n\n"
                 "[toggle a]\nargs = --seed 1\nenv = X=on{port}\n",
                 cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/dry/out", dir);
    const char *argv[] = {"bisect", cfg, "--out", od, "--dry-run", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 20);
    if (rc != 0)
        fail_msg("exit %d: %s", rc, buf_str(&err));
    const char *s = buf_str(&out);
    const char *g = strstr(s, "--- golden.sbatch\n#!/bin/bash\n");
    const char *a = strstr(s, "--- a.sbatch\n#!/bin/bash\n");
    assert_true(g && a && g < a);
    assert_non_null(strstr(a, "#SBATCH --partition=gpu\n"));
    assert_non_null(strstr(a, "#SBATCH --account=llm\n"));
    assert_non_null(strstr(a, "#SBATCH --gres=gpu:8\n"));
    assert_non_null(strstr(a, "#SBATCH --exclusive\n"));
    assert_non_null(strstr(a, "#SBATCH --job-name=fb-"));
    assert_non_null(strstr(a, "e='X=on{port}'"));
    assert_non_null(strstr(a, "sim --listen 127.0.0.1:{port} --seed 1'"));
    char *golden = strndup(g, (size_t)(a - g));
    assert_null(strstr(golden, "--seed 1'"));
    free(golden);
    assert_int_equal(bisectfx_launches(dir, "dry"), 0);
    struct stat st;
    assert_true(stat(od, &st) != 0); /* nothing written */
    buf_release(&out);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dry_run_prints_the_scripts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_golden_failing_at_start, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pending_past_queue_timeout, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sigint_mid_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_cancels_and_resubmits,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_five_ranked_through_slurm, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stranger_on_the_jobs_port, setup,
                                        teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
