/*
 * End-to-end tests of `fidelity probe` against real `fidelity sim`
 * processes on ephemeral 127.0.0.1 ports (and, for answers the sim cannot
 * give, a fake server from tests/util/fakesrv.h). Each test reads the
 * --json report and asserts the acceptance list of issue 4. Grids are
 * small (1k-32k tokens) to keep `make test` fast.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/fakesrv.h"
#include "util/proc.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fidelity-probe-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tpath(const char *name)
{
    static char p[8][320];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof(p[i]), "%s/%s", tmpdir, name);
    return p[i];
}

/* Starts a sim with extra options (NULL-terminated list). */
static void start_sim(struct proc *p, ...)
{
    const char *argv[32] = {"sim", "--listen", "127.0.0.1:0"};
    int n = 3;
    va_list ap;
    va_start(ap, p);
    for (const char *a; (a = va_arg(ap, const char *)) && n < 31;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    assert_int_equal(proc_start(p, argv), 0);
}

struct run {
    int code;
    struct buf out, err;
    json_t *j;
};

static void run_release(struct run *r)
{
    buf_release(&r->out);
    buf_release(&r->err);
    json_decref(r->j);
}

/* Runs `fidelity probe --endpoint URL --db DB --json FILE ARGS...`. */
static void run_probe(struct run *r, const char *url, const char *db, ...)
{
    const char *argv[48] = {"probe",  "--endpoint",     url, "--db", tpath(db),
                            "--json", tpath("out.json")};
    int n = 7;
    va_list ap;
    va_start(ap, db);
    for (const char *a; (a = va_arg(ap, const char *)) && n < 47;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    memset(r, 0, sizeof(*r));
    unlink(tpath("out.json"));
    r->code = proc_run(argv, NULL, &r->out, &r->err, 120);
    r->j = json_load_file(tpath("out.json"), 0, NULL);
    if (r->code != 0 && r->code != 1)
        fprintf(stderr, "probe exited %d:\n%s\n", r->code, buf_str(&r->err));
}

static json_t *cases(const struct run *r, const char *side)
{
    json_t *c = json_object_get(json_object_get(r->j, side), "case_results");
    assert_true(json_is_array(c) && json_array_size(c) > 0);
    return c;
}

static const char *sget(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static long iget(json_t *o, const char *k)
{
    return (long)json_integer_value(json_object_get(o, k));
}

static long sim_chat_count(const struct proc *p)
{
    struct http_client *c = http_client_new();
    char url[128];
    long status = 0;
    json_t *j = NULL;
    struct diag d;
    snprintf(url, sizeof(url), "%s/sim/stats", proc_url(p));
    int r = http_json(c, url, NULL, NULL, 5000, &status, &j, &d);
    long n = r ? -1
               : (long)json_integer_value(
                     json_object_get(json_object_get(j, "requests"), "chat"));
    json_decref(j);
    http_client_free(c);
    return n;
}

static void test_healthy_sim_passes_every_kind(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    start_sim(&sim, NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "healthy.db", "--lengths", "1k,2k,4k,8k", "--fail-under",
              "100", "--junit", tpath("junit.xml"), NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 0);
    size_t i;
    json_t *c;
    unsigned kinds = 0;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_string_equal(sget(c, "outcome"), "pass");
        /* achieved within 2% of target, never above it */
        double ratio = (double)iget(c, "expected_tokens") /
                       (double)iget(c, "target_tokens");
        assert_true(ratio >= 0.98 && ratio <= 1.0);
        /* the sim kept every token: usage.prompt_tokens == /tokenize */
        assert_int_equal(iget(c, "prompt_tokens"), iget(c, "expected_tokens"));
        /* only the control (reasoning not sent back) sees no context */
        assert_int_equal(json_is_true(json_object_get(c, "no_context")),
                         !strcmp(sget(c, "variant"), "omitted(control)"));
        const char *k = sget(c, "kind");
        static const char *const names[] = {
            "needle",    "multi-needle", "canary",   "first-message",
            "reasoning", "tool",         "variables"};
        for (unsigned x = 0; x < 7; x++)
            if (!strcmp(k, names[x]))
                kinds |= 1u << x;
    }
    assert_int_equal(kinds, 0x7f);
    /* four lengths of the quick profile: 4 x 20 cases */
    assert_int_equal(json_array_size(cases(&r, "results")), 80);
    assert_non_null(strstr(buf_str(&r.out), "every finished case passed"));
    struct buf x = BUF_INIT;
    FILE *f = fopen(tpath("junit.xml"), "r");
    assert_non_null(f);
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        buf_add(&x, tmp, n);
    fclose(f);
    assert_non_null(strstr(x.data, "tests=\"80\" failures=\"0\""));
    buf_release(&x);
    run_release(&r);
}

static void test_middle_truncation_is_truncated_by_server(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    start_sim(&sim, "--context-limit", "8192", "--overflow", "middle", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "middle.db", "--lengths", "4k,8k,16k,32k", "--kinds",
              "needle,multi-needle,variables,canary", "--fail-under", "100",
              NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 1);
    size_t i, fail16 = 0, fail32 = 0;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        long len = iget(c, "length");
        const char *o = sget(c, "outcome");
        if (len <= 8192) {
            assert_string_equal(o, "pass");
            continue;
        }
        if (strcmp(o, "pass")) {
            assert_string_equal(o, "truncated-by-server");
            assert_true(iget(c, "prompt_tokens") <= 8192);
            fail16 += len == 16384;
            fail32 += len == 32768;
        }
    }
    assert_true(fail16 > 0 && fail32 > 0);
    assert_non_null(strstr(buf_str(&r.out), "truncated-by-server"));
    assert_null(strstr(buf_str(&r.out), " missed ("));
    run_release(&r);
}

static void test_forget_window_is_missed_with_tokens_intact(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    start_sim(&sim, "--forget-after", "4096", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "forget.db", "--lengths", "2k,4k,8k,16k", "--kinds",
              "needle,multi-needle,variables", NULL);
    /* exit 1: the pass rate is below the default --fail-under 90, and the
     * summary line says that this rule decided */
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(buf_str(&r.out), "FAIL: the pass rate "));
    assert_non_null(strstr(buf_str(&r.out), "is below --fail-under 90%"));
    size_t i, fails = 0;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_int_equal(iget(c, "prompt_tokens"), iget(c, "expected_tokens"));
        const char *o = sget(c, "outcome");
        if (iget(c, "length") <= 4096) {
            assert_string_equal(o, "pass");
        } else if (strcmp(o, "pass")) {
            assert_string_equal(o, "missed");
            fails++;
        }
    }
    assert_true(fails >= 6);
    /* the depth-0 needle at 16k is beyond the window */
    json_array_foreach(cases(&r, "results"), i,
                       c) if (!strcmp(sget(c, "kind"), "needle") &&
                              iget(c, "length") == 16384 &&
                              iget(c, "depth") == 0)
        assert_string_equal(sget(c, "outcome"), "missed");
    run_release(&r);
    /* --fail-under 0: the same results (from the store) pass */
    run_probe(&r, url, "forget.db", "--lengths", "2k,4k,8k,16k", "--kinds",
              "needle,multi-needle,variables", "--fail-under", "0", NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(buf_str(&r.out), "PASS: the pass rate "));
    assert_non_null(strstr(buf_str(&r.out), "--fail-under 0: not a rule"));
    run_release(&r);
}

static void test_reasoning_drop_fails_only_reasoning_field(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    start_sim(&sim, "--reasoning-history", "drop", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "drop.db", "--lengths", "1k,4k", NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 0);
    size_t i, fails = 0;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        bool field = !strcmp(sget(c, "kind"), "reasoning") &&
                     !strncmp(sget(c, "variant"), "reasoning_content", 17);
        assert_string_equal(sget(c, "outcome"), field ? "missed" : "pass");
        fails += field;
    }
    assert_int_equal(fails, 4); /* 2 lengths x (with, without tools) */
    /* the grid's conclusion in words: the field is dropped, with and
     * without tools, while <think> inside content passes */
    json_t *k = json_array_get(
        json_object_get(json_object_get(r.j, "results"), "kinds"), 4);
    assert_string_equal(sget(k, "kind"), "reasoning");
    json_t *rf = json_object_get(k, "reasoning_fields");
    json_t *field = json_object_get(rf, "reasoning_content");
    json_t *inl = json_object_get(rf, "inline_think");
    assert_string_equal(sget(field, "without_tools"), "dropped");
    assert_string_equal(sget(field, "with_tools"), "dropped");
    assert_string_equal(sget(inl, "without_tools"), "kept");
    assert_string_equal(sget(inl, "with_tools"), "kept");
    assert_non_null(strstr(buf_str(&r.out),
                           "reasoning_content: dropped without tools, "
                           "dropped with tools; <think> in content: kept "
                           "without tools, kept with tools; so the path or "
                           "template drops the reasoning_content field, with "
                           "and without tools"));
    run_release(&r);

    /* DeepSeek V3.2's rule: kept only when tools are offered */
    start_sim(&sim, "--reasoning-history", "keep-with-tools", NULL);
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "kwt.db", "--lengths", "1k", "--kinds", "reasoning",
              "--fail-under", "0", NULL);
    proc_stop(&sim);
    assert_non_null(strstr(buf_str(&r.out),
                           "reasoning_content: dropped without tools, kept "
                           "with tools"));
    assert_non_null(strstr(buf_str(&r.out), "drops prior reasoning_content "
                                            "unless the request offers tools"));
    run_release(&r);
}

static void test_keep_last_turns_shows_in_canary_map(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    start_sim(&sim, "--keep-last-turns", "3", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "keep.db", "--lengths", "16k", "--kinds", "canary",
              "--depths", "0,50,80,100", NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 1);
    size_t i;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        /* 12 turns at 16k: only the last two before the question stay */
        long d = iget(c, "depth");
        assert_string_equal(sget(c, "outcome"),
                            d >= 90 ? "pass" : "dropped-before-the-model");
        if (d < 90) /* the shape: whole turns gone from the front */
            assert_string_equal(sget(c, "drop"), "window");
    }
    const char *out = buf_str(&r.out);
    const char *map = strstr(out, "canary [user] (pass % by length x turn");
    assert_non_null(map);
    assert_non_null(strstr(map, "16k    0D    0D    0D  100"));
    /* and the explanation says it is a window, not a token limit */
    assert_non_null(strstr(out, "looks like a window (whole messages gone, "
                                "none replaced, from the oldest)"));
    run_release(&r);
}

static double overall_p(const struct run *r, bool *sig)
{
    json_t *o = json_object_get(json_object_get(r->j, "comparison"), "overall");
    assert_non_null(o);
    *sig = json_is_true(json_object_get(o, "significant"));
    return json_real_value(json_object_get(o, "p_value"));
}

static void test_baseline_comparison(void **state)
{
    (void)state;
    struct proc a, b, f;
    struct run r;
    bool sig;
    start_sim(&a, NULL);
    start_sim(&b, NULL);
    start_sim(&f, "--context-limit", "8192", "--overflow", "middle", NULL);
    char ua[64], ub[64], uf[64];
    snprintf(ua, sizeof(ua), "%s", proc_url(&a));
    snprintf(ub, sizeof(ub), "%s", proc_url(&b));
    snprintf(uf, sizeof(uf), "%s", proc_url(&f));
    run_probe(&r, ua, "cmp.db", "--baseline", ub, "--kinds", "needle,variables",
              "--lengths", "2k,16k", NULL);
    assert_int_equal(r.code, 0);
    assert_true(overall_p(&r, &sig) == 1.0);
    assert_false(sig);
    assert_non_null(strstr(buf_str(&r.out), "no significant difference"));
    assert_non_null(strstr(buf_str(&r.out), "PASS: the pass rate 100.0% meets "
                                            "--fail-under 90%; not "
                                            "significantly worse"));
    run_release(&r);

    /* --fail-under 0: the baseline alone decides, and it fails the run */
    run_probe(&r, uf, "cmp.db", "--baseline", ua, "--kinds", "needle,variables",
              "--lengths", "2k,16k,32k", "--depths", "0,20,40,60,80,100",
              "--fail-under", "0", NULL);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(buf_str(&r.out),
                           "FAIL: significantly worse than the baseline "
                           "(McNemar p = "));
    double p = overall_p(&r, &sig);
    assert_true(sig);
    assert_true(p > 0 && p < 0.05);
    assert_non_null(strstr(buf_str(&r.out), "the endpoint and the baseline "
                                            "differ (p = "));
    json_t *o = json_object_get(json_object_get(r.j, "comparison"), "overall");
    assert_int_equal(iget(o, "endpoint_only_pass"), 0);
    assert_true(iget(o, "baseline_only_pass") >= 6);
    run_release(&r);
    proc_stop(&a);
    proc_stop(&b);
    proc_stop(&f);
}

/* The counts come from what the run keeps (one result for the cases of a
 * cell that passed alike, with their number), case_results from every
 * case's result read back one by one: with repeats, failures and a
 * baseline the two agree, outcome by outcome and pair by pair. */
static void test_kept_counts_match_every_case(void **state)
{
    (void)state;
    struct proc a, f;
    struct run r;
    start_sim(&a, NULL);
    start_sim(&f, "--context-limit", "8192", "--overflow", "middle", NULL);
    char ua[64], uf[64];
    snprintf(ua, sizeof(ua), "%s", proc_url(&a));
    snprintf(uf, sizeof(uf), "%s", proc_url(&f));
    run_probe(&r, uf, "kept.db", "--baseline", ua, "--kinds", "needle",
              "--lengths", "2k,16k", "--depths", "0,50,100", "--repeats", "4",
              "--fail-under", "0", NULL);
    assert_true(r.code == 0 || r.code == 1);
    assert_non_null(r.j);
    static const char *const sides[] = {"results", "baseline_results"};
    json_t *pass[2] = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        json_t *side = json_object_get(r.j, sides[s]);
        json_t *cs = cases(&r, sides[s]), *c;
        size_t i;
        assert_int_equal(json_array_size(cs), 24);
        long passed = 0, out[8] = {0};
        static const char *const names[] = {
            "pass",           "truncated-by-server",
            "output-clipped", "server-error",
            "missed",         "dropped-before-the-model"};
        pass[s] = json_array();
        json_array_foreach(cs, i, c)
        {
            passed += json_is_true(json_object_get(c, "passed"));
            json_array_append_new(pass[s], json_boolean(json_is_true(
                                               json_object_get(c, "passed"))));
            for (int o = 0; o < 6; o++)
                out[o] += !strcmp(sget(c, "outcome"), names[o]);
        }
        assert_int_equal(iget(side, "cases"), 24);
        assert_int_equal(iget(side, "passed"), passed);
        json_t *oc = json_object_get(side, "outcomes");
        for (int o = 0; o < 6; o++)
            assert_int_equal(iget(oc, names[o]), out[o]);
    }
    long both = 0, a_only = 0, b_only = 0, none = 0;
    for (size_t i = 0; i < 24; i++) {
        bool pa = json_is_true(json_array_get(pass[0], i));
        bool pb = json_is_true(json_array_get(pass[1], i));
        both += pa && pb;
        a_only += pa && !pb;
        b_only += !pa && pb;
        none += !pa && !pb;
    }
    assert_true(both > 0 && b_only > 0); /* the long cases fail */
    json_t *o = json_object_get(json_object_get(r.j, "comparison"), "overall");
    assert_int_equal(iget(o, "both_pass"), both);
    assert_int_equal(iget(o, "endpoint_only_pass"), a_only);
    assert_int_equal(iget(o, "baseline_only_pass"), b_only);
    assert_int_equal(iget(o, "both_fail"), none);
    json_decref(pass[0]);
    json_decref(pass[1]);
    run_release(&r);
    proc_stop(&a);
    proc_stop(&f);
}

static json_t *get_json(const struct proc *p, const char *path)
{
    struct http_client *c = http_client_new();
    char url[128];
    long status = 0;
    json_t *j = NULL;
    struct diag d;
    snprintf(url, sizeof(url), "%s%s", proc_url(p), path);
    int r = http_json(c, url, NULL, NULL, 5000, &status, &j, &d);
    http_client_free(c);
    assert_int_equal(r, 0);
    assert_int_equal(status, 200);
    return j;
}

/* A server restarted on the same port with a fault its info endpoints do
 * not show: the canary tells it apart, the cases run again and find the
 * fault, and the output says the stored results were for another
 * server. */
static void test_restarted_server_is_not_read_from_the_store(void **state)
{
    (void)state;
    struct proc a, b;
    struct run r;
    const char *argv_a[] = {"sim", "--listen", "127.0.0.1:0", "--hide-faults",
                            NULL};
    assert_int_equal(proc_start(&a, argv_a), 0);
    char url[64], listen[64];
    snprintf(url, sizeof(url), "%s", proc_url(&a));
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", a.port);
    run_probe(&r, url, "restart.db", "--kinds", "needle,variables", "--lengths",
              "4k,16k", NULL);
    json_t *info_a = get_json(&a, "/get_server_info");
    json_t *cfg_a = get_json(&a, "/sim/config");
    proc_stop(&a);
    assert_int_equal(r.code, 0);
    run_release(&r);

    const char *argv_b[] = {"sim",           "--listen",        listen,
                            "--hide-faults", "--context-limit", "8192",
                            "--overflow",    "middle",          NULL};
    assert_int_equal(proc_start(&b, argv_b), 0);
    json_t *info_b = get_json(&b, "/get_server_info");
    json_t *cfg_b = get_json(&b, "/sim/config");
    run_probe(&r, url, "restart.db", "--kinds", "needle,variables", "--lengths",
              "4k,16k", NULL);
    /* the info endpoints cannot tell the two apart */
    assert_true(json_equal(info_a, info_b));
    assert_true(json_equal(cfg_a, cfg_b));
    assert_null(json_object_get(cfg_b, "context_limit"));
    assert_non_null(strstr(buf_str(&r.out), "stored results for the "
                                            "endpoint"));
    assert_non_null(strstr(buf_str(&r.out), "were for a different server"));
    assert_int_equal(r.code, 1);
    size_t i, truncated = 0;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_false(json_is_true(json_object_get(c, "cached")));
        truncated += !strcmp(sget(c, "outcome"), "truncated-by-server");
    }
    assert_true(truncated >= 2);
    run_release(&r);
    /* the same server again: its own results are read back, no note */
    run_probe(&r, url, "restart.db", "--kinds", "needle,variables", "--lengths",
              "4k,16k", NULL);
    proc_stop(&b);
    assert_null(strstr(buf_str(&r.out), "different server"));
    json_array_foreach(cases(&r, "results"), i, c)
        assert_true(json_is_true(json_object_get(c, "cached")));
    run_release(&r);
    json_decref(info_a);
    json_decref(info_b);
    json_decref(cfg_a);
    json_decref(cfg_b);
}

static void test_interrupt_then_resume_sends_nothing_twice(void **state)
{
    (void)state;
    struct proc sim;
    start_sim(&sim, "--latency-ms", "150", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    const char *argv[] = {fidelity_bin(),
                          "probe",
                          "--endpoint",
                          url,
                          "--db",
                          tpath("resume.db"),
                          "--kinds",
                          "needle",
                          "--lengths",
                          "1k,2k",
                          "--depths",
                          "0,25,50,75,100",
                          "-j",
                          "1",
                          NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *devnull = freopen("/dev/null", "w", stdout);
        (void)devnull;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    long n = 0;
    for (int i = 0; i < 200 && n < 3; i++) {
        usleep(20000);
        n = sim_chat_count(&sim);
    }
    assert_true(n >= 3);
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130); /* interrupted */
    /* each run sends the canary twice before its cases */
    long first = sim_chat_count(&sim) - 2;
    assert_true(first >= 1 && first < 10);

    struct run r;
    run_probe(&r, url, "resume.db", "--kinds", "needle", "--lengths", "1k,2k",
              "--depths", "0,25,50,75,100", "-j", "1", NULL);
    assert_int_equal(r.code, 0);
    /* every case sent exactly once over the two runs */
    assert_int_equal(sim_chat_count(&sim), 10 + 2 * 2);
    size_t i, cached = 0;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_string_equal(sget(c, "outcome"), "pass");
        cached += json_is_true(json_object_get(c, "cached"));
    }
    assert_int_equal(cached, (size_t)first);
    run_release(&r);
    /* --fresh redoes them */
    run_probe(&r, url, "resume.db", "--kinds", "needle", "--lengths", "1k",
              "--depths", "0", "--fresh", NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(sim_chat_count(&sim), 11 + 3 * 2);
    run_release(&r);
    proc_stop(&sim);
}

static void html_answer(void *ud, const char *method, const char *path,
                        const char *body, size_t len, long *status,
                        const char **ctype, struct buf *out)
{
    (void)ud, (void)method, (void)path, (void)body, (void)len;
    *status = 200;
    *ctype = "text/html";
    buf_adds(out, "<html><body>It works!</body></html>\n");
}

/* Forwards everything to the sim at ud, except /tokenize: 404. */
static void no_tokenize_forward(void *ud, const char *method, const char *path,
                                const char *body, size_t len, long *status,
                                const char **ctype, struct buf *out)
{
    const struct proc *sim = ud;
    *ctype = "application/json";
    char url[600];
    snprintf(url, sizeof(url), "%s%s", proc_url(sim), path);
    const char *h[] = {"Content-Type: application/json", NULL};
    struct http_req req = {.method = method,
                           .url = url,
                           .body = len ? body : NULL,
                           .body_len = len,
                           .headers = h,
                           .timeout_ms = 30000};
    struct http_resp resp;
    struct diag d;
    http_resp_init(&resp);
    struct http_client *c = http_client_new();
    if (http_do(c, &req, &resp, &d)) {
        *status = 502;
    } else {
        *status = resp.status;
        buf_add(out, resp.body.data ? resp.body.data : "", resp.body.len);
    }
    http_client_free(c);
    http_resp_release(&resp);
}

static void no_tokenize(void *ud, const char *method, const char *path,
                        const char *body, size_t len, long *status,
                        const char **ctype, struct buf *out)
{
    if (!strcmp(path, "/tokenize")) {
        *ctype = "application/json";
        *status = 404;
        buf_adds(out, "{\"detail\":\"Not Found\"}");
        return;
    }
    no_tokenize_forward(ud, method, path, body, len, status, ctype, out);
}

/* Forwards to the sim, numbering each chat answer: a server that never
 * answers the same request the same way. */
static void numbered(void *ud, const char *method, const char *path,
                     const char *body, size_t len, long *status,
                     const char **ctype, struct buf *out)
{
    static int counter;
    struct buf raw = BUF_INIT;
    no_tokenize_forward(ud, method, path, body, len, status, ctype, &raw);
    json_t *j = json_loadb(raw.data ? raw.data : "", raw.len, 0, NULL);
    json_t *m = json_object_get(
        json_array_get(json_object_get(j, "choices"), 0), "message");
    if (strcmp(path, "/v1/chat/completions") || !m) {
        buf_add(out, raw.data ? raw.data : "", raw.len);
    } else {
        char *t = NULL;
        if (asprintf(&t, "[%d] %s", ++counter,
                     json_string_value(json_object_get(m, "content"))) > 0) {
            json_object_set_new(m, "content", json_string(t));
            free(t);
        }
        char *d = json_dumps(j, JSON_COMPACT);
        buf_adds(out, d);
        free(d);
    }
    json_decref(j);
    buf_release(&raw);
}

static void test_nondeterministic_canary(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    int port;
    start_sim(&sim, NULL);
    struct fakesrv *fs = fakesrv_start(numbered, &sim, &port);
    assert_non_null(fs);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    run_probe(&r, url, "nondet.db", "--kinds", "needle", "--lengths", "1k",
              "-j", "1", NULL);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(buf_str(&r.out), "two ways: it is "
                                            "nondeterministic, and is "
                                            "fingerprinted by the canary's "
                                            "prompt token count alone"));
    run_release(&r);
    /* without the answer in it, the fingerprint is stable: read back */
    run_probe(&r, url, "nondeterministic.db", "--kinds", "needle", "--lengths",
              "1k", "-j", "1", NULL);
    run_release(&r);
    run_probe(&r, url, "nondeterministic.db", "--kinds", "needle", "--lengths",
              "1k", "-j", "1", NULL);
    fakesrv_stop(fs);
    proc_stop(&sim);
    size_t i;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
        assert_true(json_is_true(json_object_get(c, "cached")));
    run_release(&r);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct run r;
    /* unreachable */
    run_probe(&r, "http://127.0.0.1:1", "bad.db", NULL);
    assert_int_equal(r.code, 3);
    assert_non_null(strstr(buf_str(&r.err), "cannot reach"));
    run_release(&r);
    /* invalid option values and unknown options */
    static const char *const bad[][2] = {
        {"--depths", "0,150"},
        {"--kinds", "needle,bogus"},
        {"--lengths", "1k,x"},
        {"--profile", "huge"},
        {"-j", "0"},
        {"--extra-body", "[1]"},
        {"--temperature", "-1"},
        {"--frobnicate", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        run_probe(&r, "http://127.0.0.1:1", "bad.db", bad[i][0], bad[i][1],
                  NULL);
        assert_int_equal(r.code, 2);
        assert_non_null(strstr(buf_str(&r.err), bad[i][0]));
        assert_non_null(strstr(buf_str(&r.err), "hint:"));
        run_release(&r);
    }
    /* an answer that is not JSON */
    int port;
    struct fakesrv *fs = fakesrv_start(html_answer, NULL, &port);
    assert_non_null(fs);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    run_probe(&r, url, "bad.db", NULL);
    fakesrv_stop(fs);
    assert_int_equal(r.code, 3);
    assert_non_null(strstr(buf_str(&r.err), "not JSON"));
    assert_non_null(strstr(buf_str(&r.err), "OpenAI-compatible"));
    run_release(&r);
    /* a 404 on /tokenize: said clearly, then sized by calibration */
    struct proc sim;
    start_sim(&sim, NULL);
    fs = fakesrv_start(no_tokenize, &sim, &port);
    assert_non_null(fs);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    run_probe(&r, url, "bad.db", "--kinds", "needle", "--lengths", "2k,4k",
              "-j", "1", NULL);
    fakesrv_stop(fs);
    proc_stop(&sim);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(buf_str(&r.err), "tokenize' answered HTTP 404"));
    assert_non_null(strstr(buf_str(&r.err), "calibration"));
    assert_string_equal(sget(json_object_get(r.j, "endpoint"), "tokenizer"),
                        "calibrated");
    size_t i;
    json_t *c;
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_string_equal(sget(c, "outcome"), "pass");
        double ratio =
            (double)iget(c, "prompt_tokens") / (double)iget(c, "target_tokens");
        /* sized by the line fitted from usage.prompt_tokens */
        assert_true(ratio >= 0.97 && ratio <= 1.0);
    }
    run_release(&r);
}

static void test_dry_run_sends_nothing(void **state)
{
    (void)state;
    struct proc sim;
    start_sim(&sim, NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    struct run r;
    run_probe(&r, url, "dry.db", "--dry-run", NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(sim_chat_count(&sim), 0);
    const char *out = buf_str(&r.out);
    /* quick profile against max_model_len 131072: 60 requests, 3 lengths */
    assert_non_null(strstr(out, "plan: 60 cases x 1 endpoint = 60 chat "
                                "requests"));
    assert_non_null(strstr(out, "lengths: 1024 16384 131072"));
    assert_non_null(strstr(out, "\"messages\""));
    run_release(&r);
    proc_stop(&sim);
}

static void test_api_key_never_printed_or_stored(void **state)
{
    (void)state;
    struct proc sim;
    start_sim(&sim, NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    struct run r;
    run_probe(&r, url, "key.db", "--api-key", "sk-SECRET-123", "--header",
              "X-Api-Key: hdr-SECRET-456", "--kinds", "needle", "--lengths",
              "1k", NULL);
    assert_int_equal(r.code, 0);
    assert_null(strstr(buf_str(&r.out), "SECRET"));
    assert_null(strstr(buf_str(&r.err), "SECRET"));
    char *j = json_dumps(r.j, 0);
    assert_null(strstr(j, "SECRET"));
    free(j);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "grep -c SECRET %s* >/dev/null 2>&1",
             tpath("key.db"));
    assert_int_not_equal(system(cmd), 0);
    run_release(&r);
    proc_stop(&sim);
}

static void test_retries_then_server_error_and_clipped(void **state)
{
    (void)state;
    struct proc sim;
    struct run r;
    size_t i, retried = 0;
    json_t *c;
    /* Half the model requests fail with 503: retried until they pass. */
    start_sim(&sim, "--rate-503", "0.5", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "retry.db", "--kinds", "needle", "--lengths", "1k",
              "--depths", "0,25,50,75,100", "-j", "1", "--retries", "8", NULL);
    proc_stop(&sim);
    assert_int_equal(r.code, 0);
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_string_equal(sget(c, "outcome"), "pass");
        retried += iget(c, "attempts") > 1;
    }
    assert_true(retried > 0);
    run_release(&r);
    /* Every request fails: server-error after the retries, never missed. */
    start_sim(&sim, "--rate-500", "1", NULL);
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    run_probe(&r, url, "retry.db", "--kinds", "needle,variables", "--lengths",
              "1k", "--retries", "1", NULL);
    proc_stop(&sim);
    json_array_foreach(cases(&r, "results"), i, c)
    {
        assert_string_equal(sget(c, "outcome"), "server-error");
        assert_int_equal(iget(c, "attempts"), 2);
        assert_int_equal(iget(c, "http_status"), 500);
    }
    assert_non_null(strstr(buf_str(&r.out), "server-error"));
    run_release(&r);
    /* A reply cut at max_tokens is output-clipped; --extra-body is merged
     * into every request (here it overrides max_tokens). */
    start_sim(&sim, NULL);
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    static const char *const clip[][2] = {
        {"--max-tokens", "3"}, {"--extra-body", "{\"max_tokens\": 3}"}};
    for (size_t k = 0; k < 2; k++) {
        run_probe(&r, url, "retry.db", "--kinds", "needle", "--lengths", "1k",
                  clip[k][0], clip[k][1], NULL);
        json_array_foreach(cases(&r, "results"), i, c)
        {
            assert_string_equal(sget(c, "finish_reason"), "length");
            assert_string_equal(sget(c, "outcome"), "output-clipped");
        }
        /* probe asked for 3 itself: its own --max-tokens is the cause */
        assert_non_null(strstr(buf_str(&r.out), "raise --max-tokens"));
        run_release(&r);
    }
    proc_stop(&sim);
}

/* The progress line is drawn on a terminal only. */
static void test_progress_line_on_tty_only(void **state)
{
    (void)state;
    struct proc sim;
    start_sim(&sim, NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&sim));
    const char *argv[] = {
        fidelity_bin(), "probe",  "--endpoint", url,  "--db", tpath("tty.db"),
        "--kinds",      "needle", "--lengths",  "1k", NULL};
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    struct buf out = BUF_INIT;
    char tmp[4096];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0)
            break;
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n <= 0)
            break;
        buf_add(&out, tmp, (size_t)n);
    }
    int status;
    waitpid(pid, &status, 0);
    close(fd);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_non_null(strstr(buf_str(&out), "\r3/3 cases  pass 100%  eta"));
    buf_release(&out);
    /* and none through pipes */
    struct run r;
    run_probe(&r, url, "tty.db", "--kinds", "needle", "--lengths", "1k",
              "--fresh", NULL);
    assert_int_equal(r.code, 0);
    assert_null(strstr(buf_str(&r.err), "eta"));
    assert_null(strstr(buf_str(&r.out), "eta"));
    run_release(&r);
    proc_stop(&sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_healthy_sim_passes_every_kind),
        cmocka_unit_test(test_middle_truncation_is_truncated_by_server),
        cmocka_unit_test(test_forget_window_is_missed_with_tokens_intact),
        cmocka_unit_test(test_reasoning_drop_fails_only_reasoning_field),
        cmocka_unit_test(test_keep_last_turns_shows_in_canary_map),
        cmocka_unit_test(test_baseline_comparison),
        cmocka_unit_test(test_kept_counts_match_every_case),
        cmocka_unit_test(test_interrupt_then_resume_sends_nothing_twice),
        cmocka_unit_test(test_restarted_server_is_not_read_from_the_store),
        cmocka_unit_test(test_nondeterministic_canary),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_dry_run_sends_nothing),
        cmocka_unit_test(test_api_key_never_printed_or_stored),
        cmocka_unit_test(test_retries_then_server_error_and_clipped),
        cmocka_unit_test(test_progress_line_on_tty_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
