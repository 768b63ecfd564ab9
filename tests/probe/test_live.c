/*
 * End-to-end tests of `fidelity probe --live` and `--vary` against real
 * `fidelity sim` processes on ephemeral 127.0.0.1 ports: the feedback-loop
 * grid names the cell that breaks first, a healthy sim breaks in no cell,
 * tool calls are answered with their ids (read at the sim's side, GET
 * /sim/last-request), an interrupted run resumes without sending finished
 * sessions again (counted at /sim/stats), dotted --vary paths arrive as
 * nested JSON. Sessions have at most 12 turns and 16k tokens of context.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "http/client.h"
#include "util/proc.h"

static char tmpdir[256];
static struct proc sims[2];
static int nsims;

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fidelity-live-XXXXXX");
    nsims = 0;
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    for (int i = 0; i < nsims; i++)
        proc_stop(&sims[i]);
    nsims = 0;
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

/* Starts a sim (stopped in teardown) with extra options. */
static const struct proc *start_sim(const char *first, ...)
{
    const char *argv[32] = {"sim", "--listen", "127.0.0.1:0", "--max-model-len",
                            "16384"};
    int n = 5;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    assert_true(nsims < 2);
    assert_int_equal(proc_start(&sims[nsims], argv), 0);
    return &sims[nsims++];
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

/* Runs `fidelity probe --endpoint URL --json FILE ARGS...`. */
static void run_probe(struct run *r, const struct proc *sim, ...)
{
    static char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(sim));
    const char *argv[64] = {"probe", "--endpoint", url, "--json",
                            tpath("out.json")};
    int n = 5;
    va_list ap;
    va_start(ap, sim);
    for (const char *a; (a = va_arg(ap, const char *)) && n < 63;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    memset(r, 0, sizeof(*r));
    unlink(tpath("out.json"));
    r->code = proc_run(argv, NULL, &r->out, &r->err, 120);
    r->j = json_load_file(tpath("out.json"), 0, NULL);
    if (r->code != 0)
        fprintf(stderr, "probe exited %d:\n%s\n", r->code, buf_str(&r->err));
}

static json_t *get(const struct proc *p, const char *path)
{
    struct http_client *c = http_client_new();
    char url[160];
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

static long chat_count(const struct proc *p)
{
    json_t *j = get(p, "/sim/stats");
    long n = (long)json_integer_value(
        json_object_get(json_object_get(j, "requests"), "chat"));
    json_decref(j);
    return n;
}

static long iget(json_t *o, const char *k)
{
    return (long)json_integer_value(json_object_get(o, k));
}

#define GRID                                                                   \
    "--live", "--turns", "12", "--seeds", "3", "--vary",                       \
        "reasoning_effort=high,max", "--vary", "temperature=0.2,0.6",          \
        "--send-reasoning", "keep,drop", "--no-store"

static json_t *cell_named(json_t *j, const char *effort, double temp,
                          const char *sendr)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "cells"), i, c)
    {
        json_t *v = json_object_get(c, "vary");
        if (!strcmp(json_string_value(json_object_get(v, "reasoning_effort")),
                    effort) &&
            json_number_value(json_object_get(v, "temperature")) == temp &&
            !strcmp(json_string_value(json_object_get(c, "send_reasoning")),
                    sendr))
            return c;
    }
    fail_msg("no cell %s %g %s", effort, temp, sendr);
    return NULL;
}

/* The session (cell index c, seed k) of the report. */
static json_t *session_of(json_t *j, long c, long k)
{
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(j, "sessions"), i, s)
    {
        if (iget(s, "cell") == c && iget(s, "seed_index") == k)
            return s;
    }
    fail_msg("no session %ld/%ld", c, k);
    return NULL;
}

static long cell_index(json_t *j, json_t *cell)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "cells"), i, c)
    {
        if (c == cell)
            return (long)i;
    }
    return -1;
}

/* Reasoning tokens in the context of the request of turn t (1-based) of a
 * keep session: its prompt minus the same seed's drop session's prompt
 * (identical until recall fails), less the two think markers of each
 * earlier assistant message (docs/SIM.md, "Chat template"). */
static long reasoning_in_context(json_t *keep, json_t *drop, long t)
{
    json_t *kt = json_object_get(keep, "turns");
    json_t *dt = json_object_get(drop, "turns");
    long msgs = 0;
    for (long i = 0; i < t - 1; i++)
        msgs += iget(json_array_get(kt, (size_t)i), "requests");
    return iget(json_array_get(kt, (size_t)t - 1), "prompt_tokens") -
           iget(json_array_get(dt, (size_t)t - 1), "prompt_tokens") - 2 * msgs;
}

static void test_feedback_grid_names_max_cold_keep(void **state)
{
    (void)state;
    const struct proc *sim =
        start_sim("--feedback-base", "40", "--feedback-budget", "2000",
                  "--feedback-max", "512", NULL);
    struct run r;
    run_probe(&r, sim, GRID, NULL);
    /* the fault breaks recall: below the default --fail-under, exit 1 */
    assert_int_equal(r.code, 1);
    assert_non_null(r.j);
    json_t *fb = json_object_get(r.j, "first_break");
    assert_true(json_is_object(fb));
    json_t *v = json_object_get(fb, "vary");
    assert_string_equal(
        json_string_value(json_object_get(v, "reasoning_effort")), "max");
    assert_true(json_number_value(json_object_get(v, "temperature")) == 0.2);
    assert_string_equal(
        json_string_value(json_object_get(fb, "send_reasoning")), "keep");
    assert_non_null(strstr(buf_str(&r.out), "breaks first: reasoning_effort="
                                            "\"max\" temperature=0.2 "
                                            "send-reasoning=keep"));
    /* dropping the reasoning never breaks; every session ran 12 turns
     * within 16k tokens */
    size_t i;
    json_t *c, *s;
    json_array_foreach(json_object_get(r.j, "cells"), i, c)
    {
        if (!strcmp(json_string_value(json_object_get(c, "send_reasoning")),
                    "drop"))
            assert_int_equal(iget(c, "broken"), 0);
    }
    json_array_foreach(json_object_get(r.j, "sessions"), i, s)
    {
        assert_int_equal(iget(s, "turns_played"), 12);
        assert_null(json_object_get(s, "error"));
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(s, "turns"), k, t)
            assert_true(iget(t, "prompt_tokens") <= 16384);
    }
    /* the break turn is where the reasoning in context passed the
     * budget: above it at the break, not at the question before */
    json_t *keep = cell_named(r.j, "max", 0.2, "keep");
    json_t *drop = cell_named(r.j, "max", 0.2, "drop");
    long kc = cell_index(r.j, keep), dc = cell_index(r.j, drop);
    for (long k = 0; k < 3; k++) {
        json_t *ks = session_of(r.j, kc, k), *ds = session_of(r.j, dc, k);
        long b = iget(ks, "break_turn");
        assert_true(b >= 6 && b <= 12);
        assert_true(reasoning_in_context(ks, ds, b) > 2000);
        assert_true(reasoning_in_context(ks, ds, b - 2) <= 2000);
        /* at the end neither planted fact is recalled; without the
         * reasoning both are */
        json_t *lk = json_array_get(json_object_get(ks, "turns"), 11);
        json_t *ld = json_array_get(json_object_get(ds, "turns"), 11);
        assert_true(json_is_false(
            json_array_get(json_object_get(lk, "facts_recalled"), 0)));
        assert_true(json_is_false(
            json_array_get(json_object_get(lk, "facts_recalled"), 1)));
        assert_true(json_is_true(
            json_array_get(json_object_get(ld, "facts_recalled"), 0)));
        assert_true(json_is_true(
            json_array_get(json_object_get(ld, "facts_recalled"), 1)));
        /* reasoning grows turn by turn while it is carried forward */
        json_t *kt = json_object_get(ks, "turns");
        assert_true(iget(json_array_get(kt, 3), "reasoning_bytes") >
                    iget(json_array_get(kt, 0), "reasoning_bytes"));
    }
    /* McNemar for every pair of the 8 cells */
    assert_int_equal(json_array_size(json_object_get(r.j, "comparisons")), 28);
    /* the other cells break later or not at all */
    json_array_foreach(json_object_get(r.j, "cells"), i, c)
    {
        if (c == keep || !iget(c, "broken"))
            continue;
        assert_true(json_number_value(json_object_get(
                        json_object_get(c, "break_turn"), "median")) >
                    json_number_value(json_object_get(
                        json_object_get(keep, "break_turn"), "median")));
    }
    run_release(&r);
}

static void test_healthy_sim_breaks_in_no_cell(void **state)
{
    (void)state;
    const struct proc *sim = start_sim(NULL);
    struct run r;
    run_probe(&r, sim, GRID, NULL);
    assert_int_equal(r.code, 0);
    assert_true(json_is_null(json_object_get(r.j, "first_break")));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(r.j, "cells"), i, c)
    {
        assert_int_equal(iget(c, "broken"), 0);
        assert_int_equal(iget(c, "finished"), 3);
        assert_int_equal(iget(c, "recalled"), iget(c, "asked"));
        assert_true(iget(c, "asked") > 0);
    }
    assert_int_equal(json_array_size(json_object_get(r.j, "cells")), 8);
    assert_non_null(strstr(buf_str(&r.out), "no cell breaks within 12"));
    run_release(&r);
}

static void test_tool_calls_answered_with_their_ids(void **state)
{
    (void)state;
    const struct proc *sim = start_sim(NULL);
    struct run r;
    run_probe(&r, sim, "--live", "--turns", "12", "--seeds", "2",
              "--send-reasoning", "keep-with-tools", "--vary",
              "reasoning_effort=high", "-j", "1", "--no-store", NULL);
    assert_int_equal(r.code, 0);
    long calls = 0;
    size_t i, k;
    json_t *s, *t;
    json_array_foreach(json_object_get(r.j, "sessions"), i, s)
    {
        json_array_foreach(json_object_get(s, "turns"), k, t) calls +=
            iget(t, "tool_calls");
    }
    assert_true(calls >= 2);
    /* the conversation the sim received last */
    json_t *body = get(sim, "/sim/last-request");
    json_t *msgs = json_object_get(body, "messages"), *m;
    assert_true(json_array_size(json_object_get(body, "tools")) > 0);
    size_t exchanges = 0, n = json_array_size(msgs);
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *tc = json_object_get(m, "tool_calls");
        if (!strcmp(role, "tool")) {
            /* a tool result follows its call */
            json_t *prev = json_array_get(msgs, i - 1);
            assert_true(json_is_array(json_object_get(prev, "tool_calls")));
        }
        if (strcmp(role, "assistant"))
            continue;
        /* keep-with-tools: reasoning only where the model called a tool */
        assert_int_equal(json_object_get(m, "reasoning_content") != NULL,
                         json_is_array(tc));
        if (!json_is_array(tc))
            continue;
        exchanges++;
        for (k = 0; k < json_array_size(tc); k++) {
            json_t *call = json_array_get(tc, k);
            const char *id = json_string_value(json_object_get(call, "id"));
            assert_non_null(id);
            assert_true(strlen(id) > 5);
            assert_true(i + 1 + k < n);
            json_t *res = json_array_get(msgs, i + 1 + k);
            assert_string_equal(json_string_value(json_object_get(res, "role")),
                                "tool");
            assert_string_equal(
                json_string_value(json_object_get(res, "tool_call_id")), id);
        }
    }
    assert_true(exchanges >= 1);
    json_decref(body);
    run_release(&r);
}

static void test_interrupt_then_rerun_sends_no_finished_session(void **state)
{
    (void)state;
    const struct proc *sim = start_sim("--latency-ms", "40", NULL);
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(sim));
    const char *argv[] = {fidelity_bin(),
                          "probe",
                          "--endpoint",
                          url,
                          "--db",
                          tpath("l.db"),
                          "--live",
                          "--turns",
                          "6",
                          "--seeds",
                          "4",
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
    for (int i = 0; i < 400 && n < 9; i++) {
        usleep(20000);
        n = chat_count(sim);
    }
    assert_true(n >= 9);
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 130); /* interrupted */
    long first = chat_count(sim);

    struct run r;
    run_probe(&r, sim, "--db", tpath("l.db"), "--live", "--turns", "6",
              "--seeds", "4", "-j", "1", NULL);
    assert_int_equal(r.code, 0);
    long second = chat_count(sim) - first, fresh = 0, cached = 0,
         cached_req = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(r.j, "sessions"), i, s)
    {
        assert_int_equal(iget(s, "turns_played"), 6);
        if (json_is_true(json_object_get(s, "cached"))) {
            cached++;
            cached_req += iget(s, "requests");
        } else {
            fresh += iget(s, "requests");
        }
    }
    assert_true(cached >= 1 && cached < 4);
    /* the rerun sent exactly the sessions not stored */
    assert_int_equal(second, fresh);
    /* the first run finished the stored ones (and part of one more) */
    assert_true(first >= cached_req);
    run_release(&r);
    /* a third run sends nothing */
    long before = chat_count(sim);
    run_probe(&r, sim, "--db", tpath("l.db"), "--live", "--turns", "6",
              "--seeds", "4", "-j", "1", NULL);
    assert_int_equal(r.code, 0);
    assert_int_equal(chat_count(sim), before);
    run_release(&r);
}

static void test_vary_dotted_path_reaches_the_sim_nested(void **state)
{
    (void)state;
    const struct proc *sim = start_sim(NULL);
    struct run r;
    run_probe(&r, sim, "--kinds", "needle", "--lengths", "1k", "--depths", "0",
              "--vary", "chat_template_kwargs.thinking=true,false", "--vary",
              "top_p=0.95", "-j", "1", "--no-store", NULL);
    assert_int_equal(r.code, 0);
    json_t *cases =
        json_object_get(json_object_get(r.j, "results"), "case_results");
    assert_int_equal(json_array_size(cases), 2);
    json_t *a = json_array_get(cases, 0), *b = json_array_get(cases, 1);
    assert_string_not_equal(json_string_value(json_object_get(a, "key")),
                            json_string_value(json_object_get(b, "key")));
    assert_true(json_is_true(json_object_get(json_object_get(a, "vary"),
                                             "chat_template_kwargs.thinking")));
    json_t *body = get(sim, "/sim/last-request");
    json_t *k = json_object_get(body, "chat_template_kwargs");
    assert_true(json_is_object(k));
    assert_true(json_is_false(json_object_get(k, "thinking")));
    assert_null(json_object_get(body, "chat_template_kwargs.thinking"));
    assert_true(json_number_value(json_object_get(body, "top_p")) == 0.95);
    json_decref(body);
    run_release(&r);
    /* live sessions too: the first request as the sim received it */
    run_probe(&r, sim, "--live", "--turns", "4", "--seeds", "1", "--vary",
              "chat_template_kwargs.thinking=false", "--no-store", NULL);
    assert_int_equal(r.code, 0);
    body = get(sim, "/sim/last-request");
    assert_true(json_is_false(json_object_get(
        json_object_get(body, "chat_template_kwargs"), "thinking")));
    json_decref(body);
    run_release(&r);
}

static void test_temperature_shorthand_and_usage_errors(void **state)
{
    (void)state;
    const struct proc *sim = start_sim(NULL);
    struct run r;
    run_probe(&r, sim, "--temperature", "0.2", "--vary", "temperature=0.6",
              NULL);
    assert_int_equal(r.code, 2);
    assert_non_null(strstr(buf_str(&r.err), "not both"));
    run_release(&r);
    run_probe(&r, sim, "--vary", "temperature=0.6", "--temperature", "0.2",
              NULL);
    assert_int_equal(r.code, 2);
    run_release(&r);
    run_probe(&r, sim, "--vary", "top_p", NULL);
    assert_int_equal(r.code, 2);
    run_release(&r);
    run_probe(&r, sim, "--turns", "6", NULL);
    assert_int_equal(r.code, 2); /* needs --live */
    run_release(&r);
    run_probe(&r, sim, "--live", "--send-reasoning", "sometimes", NULL);
    assert_int_equal(r.code, 2);
    run_release(&r);
    run_probe(&r, sim, "--live", "--baseline", "http://127.0.0.1:1", NULL);
    assert_int_equal(r.code, 2);
    run_release(&r);
    /* --vary temperature=LIST is --temperature LIST: the same store keys */
    run_probe(&r, sim, "--db", tpath("t.db"), "--kinds", "needle", "--lengths",
              "1k", "--depths", "0", "--temperature", "0.2,0.6", NULL);
    assert_int_equal(r.code, 0);
    run_release(&r);
    long before = chat_count(sim);
    run_probe(&r, sim, "--db", tpath("t.db"), "--kinds", "needle", "--lengths",
              "1k", "--depths", "0", "--vary", "temperature=0.2,0.6", NULL);
    assert_int_equal(r.code, 0);
    /* every case from the store: only the fingerprint's canary, sent twice
     * a run (docs/PROBE.md), reaches the server */
    assert_int_equal(chat_count(sim), before + 2);
    run_release(&r);
}

static void test_live_dry_run_prints_plan_and_first_request(void **state)
{
    (void)state;
    const struct proc *sim = start_sim(NULL);
    struct run r;
    run_probe(&r, sim, "--live", "--dry-run", "--vary",
              "reasoning_effort=high,max", "--send-reasoning", "keep,drop",
              NULL);
    assert_int_equal(r.code, 0);
    const char *out = buf_str(&r.out);
    assert_non_null(strstr(out, "plan: 12 live sessions (4 cells x 3 seeds)"));
    assert_non_null(strstr(out, "first session's first request"));
    assert_non_null(strstr(out, "\"reasoning_effort\": \"high\""));
    assert_non_null(strstr(out, "remember this: The "));
    assert_int_equal(chat_count(sim), 0);
    run_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_feedback_grid_names_max_cold_keep,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_healthy_sim_breaks_in_no_cell,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_calls_answered_with_their_ids,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_interrupt_then_rerun_sends_no_finished_session, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_vary_dotted_path_reaches_the_sim_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_temperature_shorthand_and_usage_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_live_dry_run_prints_plan_and_first_request, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
