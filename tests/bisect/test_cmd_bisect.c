/*
 * End-to-end tests of `fidelity bisect` against `fidelity sim` servers it
 * launches itself: the five-toggle acceptance config in one-at-a-time mode,
 * adaptive mode with one culprit and with a pair among 8 toggles (launches
 * counted by the server command itself, which appends a line to a file),
 * --dry-run, bad configs, an unreachable golden, --resume after SIGKILL,
 * and SIGINT in the middle of a configuration; a stranger already on a
 * configuration's port (refused, never measured), SIGKILL to bisect's
 * process group, and a killed watchdog. Every server carries an
 * environment marker; after each run the process table must hold none.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "report/report.h"
#include "util/bisectfx.h"
#include "util/marked.h"
#include "util/proc.h"

static struct bisectfx fx;
static char *const dir = fx.dir;
static char *const mark = fx.mark;
static pid_t bg; /* a bisect running in the background, killed in teardown */
static struct proc stranger; /* a server bisect did not start */
static struct proc refsim;   /* the golden a saved golden is made from */

static int setup(void **state)
{
    (void)state;
    return bisectfx_begin(&fx);
}

static int teardown(void **state)
{
    (void)state;
    if (bg > 0) {
        kill(-bg, SIGKILL);
        waitpid(bg, NULL, 0);
    }
    if (stranger.pid > 0)
        proc_stop(&stranger);
    if (refsim.pid > 0)
        proc_stop(&refsim);
    memset(&refsim, 0, sizeof(refsim));
    return bisectfx_end(&fx);
}

static void write_config(const char *name, const char *server_extra,
                         const char *toggles, char *cfg, size_t len)
{
    bisectfx_config(&fx, name, server_extra, toggles, cfg, len);
}

static int run_bisect(const char *name, const char *cfg, const char *mode,
                      const char *extra, struct buf *out, struct buf *err,
                      json_t **j)
{
    return bisectfx_bisect(&fx, name, cfg, mode, extra, out, err, j);
}

static void test_one_at_a_time_ranks_the_five(void **state)
{
    (void)state;
    char cfg[128];
    write_config("five", "--noise-recall-limit 0.1", bisectfx_five, cfg,
                 sizeof(cfg));
    struct buf out = BUF_INIT;
    json_t *j;
    int rc =
        run_bisect("five", cfg, "one-at-a-time", "--slots=2", &out, NULL, &j);
    assert_int_equal(rc, 1);
    assert_non_null(j);
    assert_int_equal(bisectfx_launches(dir, "five"), 6);
    /* the first line names the culprit and the evidence */
    assert_true(!strncmp(buf_str(&out), "culprit: mhc-bf16: excess KL ", 29));
    const char *nl = strchr(buf_str(&out), '\n');
    const char *pf = strstr(buf_str(&out), "(prefill only)");
    assert_true(nl && pf && pf < nl);
    const json_t *c = json_array_get(json_object_get(j, "configurations"), 0);
    assert_string_equal(bisectfx_str(c, "name"), "mhc-bf16");
    assert_string_equal(bisectfx_str(c, "verdict"), "CULPRIT");
    assert_string_equal(bisectfx_str(c, "attribution"), "prefill only");
    assert_true(json_is_true(json_object_get(c, "path_mismatch")));
    assert_true(json_number_value(json_object_get(c, "pass_diff")) < -0.2);
    assert_true(json_number_value(json_object_get(c, "mcnemar_p")) < 0.05);
    const json_t *d = bisectfx_row(j, "splitk-decode");
    assert_string_equal(bisectfx_str(d, "attribution"), "decode only");
    assert_string_equal(bisectfx_str(d, "claimed"), "both");
    assert_true(json_is_true(json_object_get(d, "path_mismatch")));
    assert_string_equal(bisectfx_str(d, "verdict"),
                        "drifts (recall unchanged)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "fp8-gemm"), "verdict"),
                        "harmless (below thresholds)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "overlap"), "verdict"),
                        "harmless (below thresholds)");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "unread-flag"), "verdict"),
                        "inert");
    assert_string_equal(
        bisectfx_str(bisectfx_row(j, "unread-flag"), "server_info_note"),
        "possibly not read by the server");
    assert_string_equal(
        bisectfx_str(bisectfx_row(j, "fp8-gemm"), "server_info_note"), "");
    const json_t *fd =
        json_object_get(bisectfx_row(j, "splitk-decode"), "fingerprint_diff");
    assert_int_equal(json_array_size(fd), 1);
    assert_string_equal(bisectfx_str(json_array_get(fd, 0), "field"),
                        "get_server_info.sim_config.decode_noise");
    assert_true(
        json_is_true(json_object_get(bisectfx_row(j, "unread-flag"), "inert")));
    assert_non_null(strstr(buf_str(&out), "check that the server reads"));
    assert_non_null(strstr(buf_str(&out), "MISMATCH: claims both, but the "
                                          "measured change is decode only"));
    json_decref(j);
    buf_release(&out);
}

/* Three toggles drift alone can rank: an unread flag, a small prefill
 * noise, and a noise growing with position. */
static const char three[] =
    "[toggle unread-flag]\nargs = --seed 0\npath = prefill\n\n"
    "[toggle fp8-gemm]\nargs = --prefill-noise 0.003\npath = prefill\n\n"
    "[toggle mhc-bf16]\nargs = --prefill-noise 0.05 --noise-growth 1\n"
    "path = decode\n";

/* A saved golden in place of the launched one: the golden sim's answers
 * saved once (the test profile's corpus), then bisect with [golden] file
 * launches the three configurations and no golden, and ranks them as the
 * same bisect with a launched golden does: the same culprit, the same
 * order, the same drift verdicts and attribution, the same server-info
 * differences, and the same excess KL within 2 % (a toggle that changes
 * the greedy output has its decode steps compared up to where its output
 * parts from the golden's, docs/DRIFT.md); recall is not measured (no golden to
 * be probe's baseline), which the rows and the first line say. */
static void test_golden_file_launches_no_golden(void **state)
{
    (void)state;
    char cfg[128], gcfg[256], gfile[256], t[1024];
    write_config("glive", "", three, cfg, sizeof(cfg));
    struct buf out = BUF_INIT, gout = BUF_INIT, err = BUF_INIT;
    json_t *j, *gj;
    assert_int_equal(
        run_bisect("glive", cfg, "one-at-a-time", "--slots=2", &out, NULL, &j),
        1);
    assert_int_equal(bisectfx_launches(dir, "glive"), 4);
    /* the golden's answers, once: the sim bisect launches as the golden */
    const char *sa[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&refsim, sa), 0);
    snprintf(gfile, sizeof(gfile), "%s/gfile/ref.fgold", dir);
    snprintf(t, sizeof(t), "[golden]\nfile = ref.fgold\n\n%s", three);
    write_config("gfile", "", t, gcfg, sizeof(gcfg));
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&refsim));
    /* the test profile's drift options */
    const char *save[] = {"drift", "--golden",        url,   "--save-golden",
                          gfile,   "--sequences",     "2",   "--max-context",
                          "1024",  "--decode-tokens", "16",  "--decode-seqs",
                          "1",     "--decode-prompt", "128", NULL};
    int rc = proc_run(save, NULL, NULL, &err, 120);
    if (rc)
        fail_msg("save: exit %d: %s", rc, buf_str(&err));
    proc_stop(&refsim);
    memset(&refsim, 0, sizeof(refsim));
    assert_int_equal(run_bisect("gfile", gcfg, "one-at-a-time", "--slots=2",
                                &gout, NULL, &gj),
                     1);
    assert_non_null(gj);
    /* no golden launched: the three configurations only */
    assert_int_equal(bisectfx_launches(dir, "gfile"), 3);
    assert_int_equal(json_integer_value(json_object_get(gj, "launches")), 3);
    assert_string_equal(
        bisectfx_str(json_object_get(gj, "golden"), "measured_by"), "drift");
    char lc[256], fc[256];
    bisectfx_culprits(j, lc, sizeof(lc));
    bisectfx_culprits(gj, fc, sizeof(fc));
    assert_string_equal(lc, "mhc-bf16");
    assert_string_equal(fc, lc);
    assert_true(!strncmp(buf_str(&gout), "culprit: mhc-bf16: excess KL ", 29));
    const char *nl = strchr(buf_str(&gout), '\n');
    const char *rn =
        strstr(buf_str(&gout), "recall not measured (a saved golden)");
    assert_true(nl && rn && rn < nl);
    const json_t *la = json_object_get(j, "configurations");
    const json_t *fa = json_object_get(gj, "configurations");
    assert_int_equal(json_array_size(fa), 3);
    assert_int_equal(json_array_size(la), 3);
    /* the culprit first in both; the rows below it, whose harm is near
     * 0 (the live golden answers two configurations at once), matched by
     * name, their order being noise */
    assert_string_equal(bisectfx_str(json_array_get(fa, 0), "name"),
                        bisectfx_str(json_array_get(la, 0), "name"));
    for (size_t i = 0; i < 3; i++) {
        const json_t *l = json_array_get(la, i);
        const char *name = bisectfx_str(l, "name");
        const json_t *f = bisectfx_row(gj, name);
        assert_non_null(f);
        assert_string_equal(bisectfx_str(f, "drift_verdict"),
                            bisectfx_str(l, "drift_verdict"));
        double lh = json_number_value(json_object_get(l, "harm"));
        double fh = json_number_value(json_object_get(f, "harm"));
        print_message("%s: excess KL %g against the file, %g live\n", name, fh,
                      lh);
        if (!(fabs(lh - fh) <= 0.02 * fmax(fabs(lh), fabs(fh)) + 1e-12))
            fail_msg("%s: excess KL %g against the file, %g live", name, fh,
                     lh);
        assert_true(json_is_false(json_object_get(f, "recall_measured")));
        assert_true(json_is_null(json_object_get(f, "pass_diff")));
        assert_true(json_is_true(json_object_get(l, "recall_measured")));
        char *lf = json_dumps(json_object_get(l, "fingerprint_diff"),
                              JSON_ENCODE_ANY | JSON_SORT_KEYS);
        char *ff = json_dumps(json_object_get(f, "fingerprint_diff"),
                              JSON_ENCODE_ANY | JSON_SORT_KEYS);
        assert_string_equal(ff, lf);
        free(lf);
        free(ff);
        assert_string_equal(bisectfx_str(f, "attribution"),
                            bisectfx_str(l, "attribution"));
    }
    assert_string_equal(bisectfx_str(bisectfx_row(gj, "mhc-bf16"), "verdict"),
                        "drifts (recall not measured)");
    assert_string_equal(bisectfx_str(bisectfx_row(gj, "fp8-gemm"), "verdict"),
                        "harmless (below thresholds)");
    assert_string_equal(
        bisectfx_str(bisectfx_row(gj, "unread-flag"), "verdict"), "inert");
    assert_non_null(strstr(buf_str(&gout), "answers not compared"));
    /* the report's bisect section says what the command said: a culprit
     * by harm alone, its recall not measured, the one row marked */
    struct buf page = BUF_INIT;
    assert_int_equal(report_bisect_section(gj, &page), 0);
    const char *ps = buf_str(&page);
    assert_non_null(strstr(ps, "<span class=\"v FAIL\">FAIL</span> culprit: "
                               "<b>mhc-bf16</b> (harm "));
    assert_non_null(strstr(ps, ", recall not measured, measured "));
    const char *row = strstr(ps, "<tr class=\"culprit\">");
    assert_non_null(row);
    assert_null(strstr(row + 1, "<tr class=\"culprit\">"));
    buf_release(&page);
    json_decref(j);
    json_decref(gj);
    /* an edited file is refused before anything is launched */
    FILE *f = fopen(gfile, "r+b");
    assert_non_null(f);
    fseek(f, 40, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    buf_reset(&gout);
    assert_int_equal(
        run_bisect("gfile", gcfg, "one-at-a-time", NULL, &gout, &err, NULL), 2);
    assert_int_equal(bisectfx_launches(dir, "gfile"), 3);
    assert_non_null(strstr(buf_str(&err), gfile));
    buf_release(&out);
    buf_release(&gout);
    buf_release(&err);
}

/* n toggles that change nothing but a label, plus the given ones. */
static void eight(char *t, size_t len, const char *special)
{
    size_t off = 0;
    for (int i = 0; i < 6; i++)
        off += (size_t)snprintf(t + off, len - off,
                                "[toggle flag%d]\nenv = FLAG%d=1\n\n", i, i);
    snprintf(t + off, len - off, "%s", special);
}

static void test_adaptive_one_culprit_of_eight(void **state)
{
    (void)state;
    char t[2048], cfg[128];
    eight(t, sizeof(t),
          "[toggle mhc-bf16]\nargs = --prefill-noise 0.05 --noise-growth 1\n"
          "[toggle quiet]\nenv = QUIET=1\n");
    write_config("adapt1", "--noise-recall-limit 0.1", t, cfg, sizeof(cfg));
    struct buf out = BUF_INIT;
    json_t *j;
    assert_int_equal(
        run_bisect("adapt1", cfg, "adaptive", "--slots=1", &out, NULL, &j), 1);
    assert_true(bisectfx_launches(dir, "adapt1") <=
                1 + 1 + 5); /* golden + 1 + (ceil(log2 8) + 2) */
    assert_true(!strncmp(buf_str(&out), "culprit: mhc-bf16: ", 19));
    json_decref(j);
    buf_release(&out);
}

static void test_adaptive_pair_of_eight(void **state)
{
    (void)state;
    char t[2048], cfg[128];
    eight(t, sizeof(t),
          "[toggle overlap]\nargs = --pair-a\n"
          "[toggle fused]\nargs = --pair-b\n");
    write_config("adapt2", "--noise-recall-limit 0.1", t, cfg, sizeof(cfg));
    struct buf out = BUF_INIT;
    json_t *j;
    assert_int_equal(
        run_bisect("adapt2", cfg, "adaptive", "--slots=1", &out, NULL, &j), 1);
    assert_true(bisectfx_launches(dir, "adapt2") <=
                1 + 1 + 10); /* golden + 1 + 2 (ceil(log2 8) + 2) */
    assert_true(!strncmp(buf_str(&out),
                         "culprit: overlap+fused (only "
                         "together): ",
                         40));
    assert_string_equal(bisectfx_str(j, "interaction"), "overlap+fused");
    json_decref(j);
    buf_release(&out);
}

/* A toggle that only sets the environment: the server does not report
 * it, which is said before it is measured. */
static void test_env_only_toggle_not_visible(void **state)
{
    (void)state;
    char cfg[128];
    write_config("envonly", "",
                 "[toggle flashinfer]\nenv = ATTENTION_BACKEND=FLASHINFER\n",
                 cfg, sizeof(cfg));
    struct buf out = BUF_INIT;
    json_t *j;
    assert_int_equal(run_bisect("envonly", cfg, "one-at-a-time", "--slots=1",
                                &out, NULL, &j),
                     0);
    assert_int_equal(bisectfx_launches(dir, "envonly"), 2);
    assert_string_equal(
        bisectfx_str(bisectfx_row(j, "flashinfer"), "server_info_note"),
        "not visible in server info");
    assert_string_equal(bisectfx_str(bisectfx_row(j, "flashinfer"), "verdict"),
                        "inert");
    assert_true(!strncmp(buf_str(&out), "no culprit: ", 12));
    json_decref(j);
    buf_release(&out);
}

/* full mode finds the pair as the smallest harmful set whose toggles are
 * each harmless; leave-one-out, resumed from the same results (its sets
 * were all measured by full mode: only the golden is launched), finds the
 * two toggles each needed. */
static void test_full_and_leave_one_out_show_the_pair(void **state)
{
    (void)state;
    char cfg[128];
    write_config("full", "--noise-recall-limit 0.1",
                 "[toggle overlap]\nargs = --pair-a\n"
                 "[toggle fused]\nargs = --pair-b\n"
                 "[toggle quiet]\nenv = QUIET=1\n",
                 cfg, sizeof(cfg));
    struct buf out = BUF_INIT;
    json_t *j;
    assert_int_equal(
        run_bisect("full", cfg, "full", "--slots=2", &out, NULL, &j), 1);
    assert_int_equal(bisectfx_launches(dir, "full"), 8);
    assert_string_equal(bisectfx_str(j, "interaction"), "overlap+fused");
    assert_true(!strncmp(buf_str(&out),
                         "culprit: overlap+fused (only together): ", 40));
    json_decref(j);
    buf_reset(&out);
    assert_int_equal(
        run_bisect("full", cfg, "leave-one-out", "--resume", &out, NULL, &j),
        1);
    assert_int_equal(bisectfx_launches(dir, "full"), 9);
    assert_string_equal(bisectfx_str(j, "interaction"), "overlap+fused");
    assert_non_null(
        strstr(buf_str(&out), "interaction: overlap+fused hurt only together"));
    json_decref(j);
    buf_release(&out);
}

static void test_dry_run_launches_nothing(void **state)
{
    (void)state;
    char cfg[128];
    write_config("dry", "", bisectfx_five, cfg, sizeof(cfg));
    struct buf out = BUF_INIT;
    const char *argv[] = {"bisect",        cfg, "--dry-run", "--mode",
                          "leave-one-out", NULL};
    assert_int_equal(proc_run(argv, NULL, &out, NULL, 30), 0);
    assert_int_equal(bisectfx_launches(dir, "dry"), 0);
    assert_non_null(strstr(buf_str(&out), "mode leave-one-out, 5 toggles"));
    assert_non_null(strstr(buf_str(&out),
                           "  unread-flag+fp8-gemm+mhc-bf16+splitk-decode: "));
    assert_non_null(strstr(buf_str(&out), "launches: 1 golden + 6\n"));
    buf_reset(&out);
    const char *argv2[] = {"bisect", cfg,        "--dry-run",
                           "--mode", "adaptive", NULL};
    assert_int_equal(proc_run(argv2, NULL, &out, NULL, 30), 0);
    /* 5 toggles: 1 + d (3 + 2) */
    assert_non_null(strstr(buf_str(&out),
                           "launches: 1 golden + 1 (no culprit) to 6 (one "
                           "culprit), 11 (two, or a pair), 16 (three)"));
    buf_release(&out);
}

static void test_bad_config_is_exit_2(void **state)
{
    (void)state;
    char cfg[128];
    write_config("bad", "", "[toggle a]\nargs = -a\nclaim = prefill\n", cfg,
                 sizeof(cfg));
    struct buf err = BUF_INIT;
    const char *argv[] = {"bisect", cfg, NULL};
    assert_int_equal(proc_run(argv, NULL, NULL, &err, 30), 2);
    char want[256];
    snprintf(want, sizeof(want),
             "fidelity bisect: %s:12: unknown key 'claim' in [toggle NAME]",
             cfg);
    assert_non_null(strstr(buf_str(&err), want));
    buf_reset(&err);
    const char *argv2[] = {"bisect", "/nonexistent.ini", NULL};
    assert_int_equal(proc_run(argv2, NULL, NULL, &err, 30), 2);
    assert_non_null(strstr(buf_str(&err), "cannot read '/nonexistent.ini'"));
    assert_int_equal(bisectfx_launches(dir, "bad"), 0);
    buf_release(&err);
}

static void test_golden_that_exits_is_exit_3(void **state)
{
    (void)state;
    char cfg[128], sub[128];
    snprintf(sub, sizeof(sub), "%s/dead", dir);
    mkdir(sub, 0755);
    snprintf(cfg, sizeof(cfg), "%s/config.ini", sub);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "[server]\ncommand = echo 'CUDA error: out of memory "
               "{port}'; exit 1\n[toggle a]\nargs = -a\n");
    fclose(f);
    struct buf err = BUF_INIT;
    char od[160];
    snprintf(od, sizeof(od), "--out=%s/out", sub);
    const char *argv[] = {"bisect", cfg, od, NULL};
    double t0 = marked_now();
    assert_int_equal(proc_run(argv, NULL, NULL, &err, 30), 3);
    assert_true(marked_now() - t0 < 5);
    assert_non_null(strstr(buf_str(&err), "the golden did not start"));
    assert_non_null(strstr(buf_str(&err), "CUDA error: out of memory"));
    buf_release(&err);
}

/* Starts bisect in the background, in a process group of its own, its
 * stderr into err_path (NULL: discarded); its pid. */
static pid_t spawn_bisect_err(const char *cfg, const char *od,
                              const char *extra, const char *err_path)
{
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0);
        int fd = open("/dev/null", O_RDWR);
        int ef =
            err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : fd;
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(ef, 2);
        execl(fidelity_bin(), fidelity_bin(), "bisect", cfg, "--out", od, extra,
              (char *)NULL);
        _exit(127);
    }
    bg = p;
    return p;
}

static pid_t spawn_bisect(const char *cfg, const char *od, const char *extra)
{
    return spawn_bisect_err(cfg, od, extra, NULL);
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void test_resume_after_sigkill(void **state)
{
    (void)state;
    char cfg[128], od[128], first[160];
    write_config("resume", "", bisectfx_five, cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/resume/out", dir);
    snprintf(first, sizeof(first), "%s/unread-flag.json", od);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    double end = marked_now() + 60;
    while (!exists(first) && marked_now() < end)
        usleep(50000);
    assert_true(exists(first));
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    bg = 0;
    assert_int_equal(marked_after(mark, 5), 0); /* the watchdogs stopped them */
    int before = bisectfx_launches(dir, "resume");
    char done[160];
    int finished = 0;
    static const char *const names[] = {"unread-flag", "fp8-gemm", "mhc-bf16",
                                        "splitk-decode", "overlap"};
    for (int i = 0; i < 5; i++) {
        snprintf(done, sizeof(done), "%s/%s.json", od, names[i]);
        finished += exists(done);
    }
    assert_true(finished >= 1 && finished < 5);
    struct buf out = BUF_INIT;
    const char *argv[] = {"bisect", cfg, "--out", od, "--resume", NULL};
    assert_int_equal(proc_run(argv, NULL, &out, NULL, 300), 1);
    assert_int_equal(bisectfx_launches(dir, "resume") - before,
                     1 + 5 - finished);
    /* both drifting configurations are named on the first line (in the
     * order of drift's harm, which counts splitk-decode's decode steps) */
    const char *head = buf_str(&out), *eol = strchr(head, '\n');
    const char *m = strstr(head, "mhc-bf16: "),
               *k = strstr(head, "splitk-decode: ");
    assert_true(!strncmp(head, "culprit: ", 9));
    assert_true(eol && m && k && m < eol && k < eol);
    assert_int_equal(marked_after(mark, 3), 0);
    buf_release(&out);
}

/* A configuration that could not be measured (its server exits at start:
 * an unknown flag) is no evidence that it is harmless: no "no culprit"
 * and no exit 0 while the others are harmless, but exit 1 naming it. */
static void test_unmeasured_is_no_verdict(void **state)
{
    (void)state;
    char cfg[128];
    write_config("unmeasured", "", "[toggle broken]\nargs = --no-such-flag\n",
                 cfg, sizeof(cfg));
    struct buf out = BUF_INIT, err = BUF_INIT;
    json_t *j = NULL;
    int rc =
        run_bisect("unmeasured", cfg, "one-at-a-time", NULL, &out, &err, &j);
    if (rc != 1 || !strstr(buf_str(&out), "no verdict: 1 configuration could "
                                          "not be measured"))
        fail_msg("exit %d:\n%s\n%s", rc, buf_str(&out), buf_str(&err));
    assert_null(strstr(buf_str(&out), "no culprit:"));
    assert_non_null(j);
    assert_true(json_is_false(json_object_get(j, "all_measured")));
    assert_true(json_is_false(json_object_get(j, "culprit")));
    assert_string_equal(bisectfx_str(bisectfx_row(j, "broken"), "verdict"),
                        "not measured");
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
}

static void test_sigint_mid_configuration(void **state)
{
    (void)state;
    char cfg[128], sub[128], od[160];
    snprintf(sub, sizeof(sub), "%s/sigint", dir);
    mkdir(sub, 0755);
    snprintf(cfg, sizeof(cfg), "%s/config.ini", sub);
    FILE *f = fopen(cfg, "w");
    /* never ready, and ignores SIGTERM: the grace then SIGKILL */
    fprintf(f,
            "[server]\ncommand = trap '' TERM; echo launch >> %s/count; "
            "sh -c 'sleep 300' & sleep 301 # {port}\nenv = %s\n"
            "ready_timeout = 60\nstop_grace = 1\n[toggle a]\nargs = -a\n",
            sub, mark);
    fclose(f);
    snprintf(od, sizeof(od), "%s/out", sub);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    double end = marked_now() + 10;
    while (marked_count(mark) < 3 && marked_now() < end)
        usleep(50000);
    assert_true(marked_count(mark) >= 3);
    usleep(200000);
    kill(b, SIGINT);
    double t0 = marked_now();
    int st;
    waitpid(b, &st, 0);
    bg = 0;
    assert_true(marked_now() - t0 < 5);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 130);
    assert_int_equal(marked_after(mark, 1), 0);
}

/* SIGINT while drift measures a slow server: the measurement is stopped
 * too, and so are both servers. */
static void test_sigint_while_comparing(void **state)
{
    (void)state;
    char cfg[128], od[128], mlog[160];
    write_config("sigint2", "--latency-ms 400",
                 "[toggle a]\nargs = --decode-noise 0.1\n", cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/sigint2/out", dir);
    snprintf(mlog, sizeof(mlog), "%s/a.measure.log", od);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    double end = marked_now() + 20;
    while (!exists(mlog) && marked_now() < end)
        usleep(50000);
    assert_true(exists(mlog));
    usleep(300000);
    assert_int_equal(marked_count(mark), 2); /* the golden and the candidate */
    kill(b, SIGINT);
    double t0 = marked_now();
    int st;
    waitpid(b, &st, 0);
    bg = 0;
    assert_true(marked_now() - t0 < 8);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 130);
    assert_int_equal(marked_after(mark, 1), 0);
    char done[160];
    snprintf(done, sizeof(done), "%s/a.json", od);
    assert_false(exists(done)); /* unfinished: --resume measures it */
}

/* A server bisect did not start already listens on the first
 * configuration's port (the golden's + 1). Measuring it would call the
 * toggle harmless (the stranger is a healthy sim); bisect must refuse,
 * naming the port, and leave the stranger alone. */
static void test_stranger_on_a_port_is_refused(void **state)
{
    (void)state;
    char cfg[128], sub[128], od[160], want[64];
    int port = 0;
    for (int i = 0; i < 20 && !port; i++) {
        const char *argv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
        assert_int_equal(proc_start(&stranger, argv), 0);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port =
                                    htons((uint16_t)(stranger.port - 1)),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (!bind(fd, (struct sockaddr *)&a, sizeof(a)))
            port = stranger.port - 1; /* free for the golden */
        else
            proc_stop(&stranger);
        close(fd);
    }
    assert_true(port > 0);
    snprintf(sub, sizeof(sub), "%s/stranger", dir);
    mkdir(sub, 0755);
    snprintf(cfg, sizeof(cfg), "%s/config.ini", sub);
    FILE *f = fopen(cfg, "w");
    /* bisect's own server comes up late: the stranger answers first */
    fprintf(f,
            "[server]\ncommand = sleep 0.5; exec '%s' sim "
            "--listen 127.0.0.1:{port}\nenv = %s\nport = %d\n"
            "ready_timeout = 20\nstop_grace = 3\n\n[measure]\nprofile = test\n"
            "\n[toggle mhc-bf16]\nargs = --prefill-noise 0.05 "
            "--noise-growth 1\n",
            fidelity_bin(), mark, port);
    fclose(f);
    snprintf(od, sizeof(od), "--out=%s/out", sub);
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"bisect", cfg, od, NULL};
    int rc = proc_run(argv, NULL, &out, &err, 120);
    assert_int_equal(marked_after(mark, 5), 0);
    assert_int_equal(rc, 3);
    snprintf(want, sizeof(want), "port %d", stranger.port);
    assert_non_null(strstr(buf_str(&err), want));
    assert_null(strstr(buf_str(&out), "no culprit"));
    assert_int_equal(kill(stranger.pid, 0), 0); /* not bisect's to stop */
    proc_stop(&stranger);
    stranger.pid = 0;
    buf_release(&out);
    buf_release(&err);
}

/* Waits until the golden and the candidate run and drift measures; the
 * pids of the two servers. */
static void wait_measuring(const char *mlog, int pids[2])
{
    double end = marked_now() + 20;
    while ((!exists(mlog) || marked_count(mark) < 2) && marked_now() < end)
        usleep(50000);
    assert_true(exists(mlog));
    assert_int_equal(marked_pids(mark, pids, 2), 2);
}

/* SIGKILL to bisect's whole process group (as a job control shell or a
 * batch system does): the watchdogs are not in it, so they stop both
 * servers. */
static void test_sigkill_to_the_group_leaves_nothing(void **state)
{
    (void)state;
    char cfg[128], od[128], mlog[160];
    write_config("grpkill", "--latency-ms 400",
                 "[toggle a]\nargs = --decode-noise 0.1\n", cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/grpkill/out", dir);
    snprintf(mlog, sizeof(mlog), "%s/a.measure.log", od);
    pid_t b = spawn_bisect(cfg, od, "--slots=1");
    int pids[2];
    wait_measuring(mlog, pids);
    assert_int_equal(kill(-b, SIGKILL), 0);
    waitpid(b, NULL, 0);
    bg = 0;
    assert_int_equal(marked_after(mark, 5), 0);
}

/* A watchdog killed while its server is measured (which: 0 the golden's,
 * 1 the configuration's): bisect stops with an error and stops every
 * server, that one included, instead of going on without a watch. */
static void kill_a_watchdog(int which)
{
    char cfg[128], od[128], mlog[160], errp[160], name[32];
    snprintf(name, sizeof(name), "wdkill%d", which);
    write_config(name, "--latency-ms 400",
                 "[toggle a]\nargs = --decode-noise 0.1\n"
                 "[toggle b]\nargs = --decode-noise 0.2\n",
                 cfg, sizeof(cfg));
    snprintf(od, sizeof(od), "%s/%s/out", dir, name);
    snprintf(mlog, sizeof(mlog), "%s/a.measure.log", od);
    snprintf(errp, sizeof(errp), "%s/%s/err", dir, name);
    pid_t b = spawn_bisect_err(cfg, od, "--slots=1", errp);
    int pids[2];
    wait_measuring(mlog, pids);
    int w = marked_parent(pids[which]);
    assert_true(w > 1 && w != b);
    assert_int_equal(kill(w, SIGKILL), 0);
    double t0 = marked_now();
    int st = 0;
    while (waitpid(b, &st, WNOHANG) == 0 && marked_now() - t0 < 15)
        usleep(50000);
    bg = 0;
    if (!WIFEXITED(st) && kill(b, 0) == 0) {
        kill(-b, SIGKILL);
        waitpid(b, NULL, 0);
        fail_msg("bisect went on after its watchdog %d was killed", w);
    }
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 4);
    assert_int_equal(marked_after(mark, 5), 0);
    char e[2048] = "";
    FILE *f = fopen(errp, "r");
    assert_non_null(f);
    size_t k = fread(e, 1, sizeof(e) - 1, f);
    e[k] = '\0';
    fclose(f);
    assert_non_null(strstr(e, "watchdog"));
    snprintf(cfg, sizeof(cfg), "%s/b.json", od);
    assert_false(exists(cfg)); /* nothing more was measured */
}

static void test_killed_watchdog_of_the_golden_stops_bisect(void **state)
{
    (void)state;
    kill_a_watchdog(0);
}

static void test_killed_watchdog_of_a_configuration_stops_bisect(void **state)
{
    (void)state;
    kill_a_watchdog(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_config_is_exit_2),
        cmocka_unit_test(test_dry_run_launches_nothing),
        cmocka_unit_test(test_golden_that_exits_is_exit_3),
        cmocka_unit_test(test_unmeasured_is_no_verdict),
        cmocka_unit_test(test_sigint_mid_configuration),
        cmocka_unit_test(test_sigint_while_comparing),
        cmocka_unit_test(test_stranger_on_a_port_is_refused),
        cmocka_unit_test(test_sigkill_to_the_group_leaves_nothing),
        cmocka_unit_test(test_killed_watchdog_of_the_golden_stops_bisect),
        cmocka_unit_test(test_killed_watchdog_of_a_configuration_stops_bisect),
        cmocka_unit_test(test_one_at_a_time_ranks_the_five),
        cmocka_unit_test(test_golden_file_launches_no_golden),
        cmocka_unit_test(test_env_only_toggle_not_visible),
        cmocka_unit_test(test_adaptive_one_culprit_of_eight),
        cmocka_unit_test(test_adaptive_pair_of_eight),
        cmocka_unit_test(test_full_and_leave_one_out_show_the_pair),
        cmocka_unit_test(test_resume_after_sigkill),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
