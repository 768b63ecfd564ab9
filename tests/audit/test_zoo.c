/*
 * The path zoo: the zoo client (tests/util/zoo.h) plays multi-turn
 * sessions, with and without a session header, streamed and not, with
 * tools, through a rewriting gateway (tests/util/gateway.h) placed between
 * the client and `fidelity record`, or between record and `fidelity sim`;
 * then `fidelity audit --json -` reads the store. Each rewrite must give
 * its finding (docs/AUDIT.md), and the healthy controls, over 5 seeds
 * each, exactly zero warn or error findings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "util/gateway.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/zoo.h"

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
    gateway_stop_all();
    if (!getenv("AUDIT_TEST_KEEP"))
        rec_rmdir(dir);
    else
        free(dir);
    dir = NULL;
    return 0;
}

enum where { NO_GATEWAY, BEFORE_RECORD, AFTER_RECORD };

struct path {
    const char *const *sim;       /* extra sim options, may be NULL */
    enum where where;             /* where the gateway sits */
    struct gateway_opts gw;       /* its rewrites */
    const char *const *audit;     /* extra audit options, may be NULL */
    struct gateway_counts counts; /* filled: what the gateway did */
};

/* Runs the conversations zs[0..n) along path p and returns audit's JSON
 * report. */
static json_t *run_path(struct path *p, const struct zoo_opts *zs, size_t n)
{
    static int runs;
    struct proc sim, rec;
    const char *sargv[24] = {"sim", "--listen", "127.0.0.1:0"};
    int k = 3;
    for (int i = 0; p->sim && p->sim[i]; i++)
        sargv[k++] = p->sim[i];
    sargv[k] = NULL;
    char *db = xasprintf("%s/zoo-%d.db", dir, runs++);
    assert_int_equal(proc_start(&sim, sargv), 0);
    char *sim_url = xstrdup(proc_url(&sim));
    struct gateway *g = NULL;
    if (p->where == AFTER_RECORD) {
        g = gateway_start(sim_url, &p->gw);
        assert_non_null(g);
    }
    if (rec_start_record(&rec, g ? gateway_url(g) : sim_url, db, NULL)) {
        proc_stop(&sim);
        fail_msg("fidelity record did not start");
    }
    char *rec_url = xstrdup(proc_url(&rec));
    if (p->where == BEFORE_RECORD) {
        g = gateway_start(rec_url, &p->gw);
        assert_non_null(g);
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++)
        failed |= zoo_converse(g && p->where == BEFORE_RECORD ? gateway_url(g)
                                                              : rec_url,
                               &zs[i]) < 0;
    if (g) {
        gateway_counts(g, &p->counts);
        gateway_stop(g);
    }
    proc_stop(&rec);
    proc_stop(&sim);
    assert_false(failed);
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[24] = {"audit", "--db",      db,     "--json",
                            "-",     "--fail-on", "never"};
    k = 7;
    for (int i = 0; p->audit && p->audit[i]; i++)
        argv[k++] = p->audit[i];
    argv[k] = NULL;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc)
        print_message("audit exited %d: %s\n", rc, buf_str(&err));
    assert_int_equal(rc, EXIT_PASS);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    buf_release(&out);
    buf_release(&err);
    free(db);
    free(sim_url);
    free(rec_url);
    return j;
}

static size_t count_rule(json_t *report, const char *rule)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f) n +=
        !strcmp(json_string_value(json_object_get(f, "rule")), rule);
    return n;
}

static json_t *first_rule(json_t *report, const char *rule)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f)
    {
        if (!strcmp(json_string_value(json_object_get(f, "rule")), rule))
            return f;
    }
    return NULL;
}

/* warn + error findings; each is printed, so a failure says which. Rules
 * named in allowed (NULL-terminated, may be NULL) are not counted. */
static size_t bad(json_t *report, const char *const *allowed)
{
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f)
    {
        const char *sev = json_string_value(json_object_get(f, "severity"));
        const char *rule = json_string_value(json_object_get(f, "rule"));
        bool ok = false;
        for (int a = 0; allowed && allowed[a]; a++)
            ok |= !strcmp(allowed[a], rule);
        if (!strcmp(sev, "info") || ok)
            continue;
        print_message(
            "  %s %s (request %lld): %s\n", sev, rule,
            (long long)json_integer_value(json_object_get(f, "request")),
            json_string_value(json_object_get(f, "summary")));
        n++;
    }
    return n;
}

static size_t sessions(json_t *report)
{
    return json_array_size(json_object_get(report, "sessions"));
}

/* ---- the table of docs/AUDIT.md ---- */

static void test_no_rewrite(void **state)
{
    (void)state;
    struct path p = {.where = BEFORE_RECORD};
    struct zoo_opts z[3] = {
        {.session = "zoo-a", .tools = true, .stream = true},
        {.tools = true, .seed = 1},
        {.session = "zoo-c", .no_stream = true, .seed = 2},
    };
    json_t *j = run_path(&p, z, 3);
    assert_int_equal(bad(j, NULL), 0);
    assert_int_equal(sessions(j), 3);
    json_decref(j);
}

static void test_drop_oldest_turns(void **state)
{
    (void)state;
    struct path p = {.where = BEFORE_RECORD, .gw = {.drop_oldest = 1}};
    struct zoo_opts z = {.session = "zoo-drop", .turns = 4};
    json_t *j = run_path(&p, &z, 1);
    json_t *f = first_rule(j, "history.rewrite");
    assert_non_null(f);
    /* the first user turn (message 1) is named among the removed */
    json_t *removed =
        json_object_get(json_object_get(f, "evidence"), "removed");
    assert_true(json_array_size(removed) >= 1);
    assert_int_equal(json_integer_value(json_array_get(removed, 0)), 1);
    assert_true(p.counts.turns_dropped > 0);
    json_decref(j);
}

static void test_keep_last_turns_without_header(void **state)
{
    (void)state;
    struct path p = {.where = BEFORE_RECORD, .gw = {.keep_last = 2}};
    struct zoo_opts z = {.turns = 6, .seed = 3};
    json_t *j = run_path(&p, &z, 1);
    /* one session although every request starts with another user turn */
    assert_int_equal(sessions(j), 1);
    /* requests of turns 3..6 each lost the turn before the window */
    assert_int_equal(count_rule(j, "history.rewrite"), 4);
    static const char *const allowed[] = {"history.rewrite",
                                          "first_message.claim", NULL};
    assert_int_equal(bad(j, allowed), 0);
    json_t *f = first_rule(j, "first_message.claim");
    if (f) /* the code was windowed away: the harness's doing */
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(f, "evidence"), "blame")),
                            "harness");
    json_decref(j);
}

static void compaction_case(bool every)
{
    struct path p = {.where = BEFORE_RECORD,
                     .gw = {.compact_after = 2, .compact_every = every}};
    struct zoo_opts z = {.session = "zoo-compact", .turns = 7};
    json_t *j = run_path(&p, &z, 1);
    assert_true(p.counts.compactions >= (every ? 2u : 1u));
    assert_int_equal(count_rule(j, "history.compaction"), p.counts.compactions);
    assert_int_equal(count_rule(j, "history.rewrite"), 0);
    json_decref(j);
}

static void test_compact_once(void **state)
{
    (void)state;
    compaction_case(false);
}

static void test_compact_repeatedly(void **state)
{
    (void)state;
    compaction_case(true);
}

/* A harness compaction (summary request, its reply in place of the
 * history) every 3 turns, against a model that loses the history it is
 * asked to summarise. */
static void test_summary_that_lost_the_history(void **state)
{
    (void)state;
    static const char *const sim[] = {"--lose-summary", NULL};
    struct path p = {.sim = sim, .where = NO_GATEWAY};
    struct zoo_opts z = {.session = "zoo-lost", .turns = 8, .compact_every = 3};
    json_t *j = run_path(&p, &z, 1);
    assert_int_equal(count_rule(j, "history.compaction"), 2);
    assert_int_equal(count_rule(j, "history.compaction_lost"), 2);
    assert_int_equal(count_rule(j, "history.rewrite"), 0);
    json_t *f = first_rule(j, "first_message.claim");
    assert_non_null(f);
    json_t *ev = json_object_get(f, "evidence");
    assert_true(
        json_integer_value(json_object_get(ev, "compaction_lost_request")) > 0);
    assert_string_equal(json_string_value(json_object_get(ev, "blame")),
                        "harness");
    json_decref(j);
}

static void test_prune_tool_results(void **state)
{
    (void)state;
    struct path p = {.where = BEFORE_RECORD,
                     .gw = {.prune_tools = true, .prune_keep = 1}};
    struct zoo_opts z = {.session = "zoo-prune", .turns = 6, .tools = true};
    json_t *j = run_path(&p, &z, 1);
    assert_true(p.counts.pruned > 0);
    assert_true(count_rule(j, "history.prune") >= 1);
    static const char *const allowed[] = {"history.prune", NULL};
    assert_int_equal(bad(j, allowed), 0);
    json_decref(j);
}

static void test_strip_reasoning(void **state)
{
    (void)state;
    static const char *const sim[] = {"--reasoning", NULL};
    static const char *const audit[] = {"--reasoning-policy", "keep-with-tools",
                                        NULL};
    struct path p = {.sim = sim,
                     .where = BEFORE_RECORD,
                     .gw = {.strip_reasoning = true},
                     .audit = audit};
    struct zoo_opts z = {.session = "zoo-strip",
                         .turns = 5,
                         .tools = true,
                         .echo_reasoning = true};
    json_t *j = run_path(&p, &z, 1);
    assert_true(p.counts.stripped > 0);
    json_t *f = first_rule(j, "reasoning.policy");
    assert_non_null(f);
    static const char *const allowed[] = {"reasoning.policy", NULL};
    assert_int_equal(bad(j, allowed), 0);
    json_decref(j);
}

static void test_temperature_changed(void **state)
{
    (void)state;
    struct path p = {
        .where = BEFORE_RECORD,
        .gw = {.set_field = "temperature", .set_json = "0.9", .set_from = 3}};
    struct zoo_opts z = {.session = "zoo-temp", .turns = 5};
    json_t *j = run_path(&p, &z, 1);
    json_t *f = first_rule(j, "sampling.changed");
    assert_non_null(f);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(f, "evidence"), "param")),
                        "temperature");
    json_decref(j);
}

/* The gateway between record and sim answers each first attempt 429:
 * record stores the 429 and the retry; audit shows the retry, nothing
 * else. */
static void test_retry_after_429(void **state)
{
    (void)state;
    struct path p = {.where = AFTER_RECORD, .gw = {.fail_first = true}};
    struct zoo_opts z = {.session = "zoo-429", .turns = 3, .retries = 2};
    json_t *j = run_path(&p, &z, 1);
    assert_true(p.counts.refused >= 3);
    assert_int_equal(count_rule(j, "history.retry"), p.counts.refused);
    json_t *f = first_rule(j, "history.retry");
    assert_string_equal(json_string_value(json_object_get(f, "severity")),
                        "info");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(f, "evidence"), "prev_status")),
                     429);
    assert_int_equal(bad(j, NULL), 0);
    json_decref(j);
}

/* ---- healthy controls: 5 seeds each, exactly 0 warn or error ---- */

#define SEEDS 5

static void control(const char *const *sim, const char *const *audit,
                    struct zoo_opts z)
{
    for (unsigned s = 0; s < SEEDS; s++) {
        char seed[16];
        const char *args[16];
        int k = 0;
        for (int i = 0; sim && sim[i]; i++)
            args[k++] = sim[i];
        snprintf(seed, sizeof(seed), "%u", 11 + s);
        args[k++] = "--seed";
        args[k++] = seed;
        args[k] = NULL;
        struct path p = {.sim = args, .where = NO_GATEWAY, .audit = audit};
        z.seed = s;
        json_t *j = run_path(&p, &z, 1);
        assert_int_equal(bad(j, NULL), 0);
        json_decref(j);
    }
}

/* Replies that repeat short texts with different reasoning, sent back as
 * streamed; the DeepSeek rule checked. */
static void test_control_repeated_short_replies(void **state)
{
    (void)state;
    static const char *const sim[] = {"--reasoning", NULL};
    static const char *const audit[] = {"--reasoning-policy", "keep-with-tools",
                                        NULL};
    control(sim, audit,
            (struct zoo_opts){.session = "ctl-short",
                              .turns = 8,
                              .tools = true,
                              .echo_reasoning = true});
}

/* Every request streamed, the connection closed right after [DONE]. */
static void test_control_close_after_done(void **state)
{
    (void)state;
    control(
        NULL, NULL,
        (struct zoo_opts){.session = "ctl-done", .turns = 6, .stream = true});
}

/* The server fails some requests with 429 and 500; the harness retries. */
static void test_control_retries_after_errors(void **state)
{
    (void)state;
    static const char *const sim[] = {"--rate-429", "0.25", "--rate-500",
                                      "0.15", NULL};
    control(sim, NULL,
            (struct zoo_opts){.session = "ctl-err", .turns = 6, .retries = 8});
}

/* The first attempt of every request times out; the harness retries. */
static void test_control_retries_after_timeout(void **state)
{
    (void)state;
    static const char *const sim[] = {"--latency-ms", "300", NULL};
    control(sim, NULL,
            (struct zoo_opts){.session = "ctl-timeout",
                              .turns = 2,
                              .no_stream = true,
                              .retries = 1,
                              .first_timeout_ms = 100});
}

/* A stateless client sending the same one-shot request. */
static void test_control_stateless_one_shots(void **state)
{
    (void)state;
    control(NULL, NULL, (struct zoo_opts){.one_shot = true, .turns = 5});
}

/* No session header, with tools and a title request: nothing above
 * info (a compaction, however healthy, is a warn by design). */
static void test_control_no_session_header(void **state)
{
    (void)state;
    control(NULL, NULL,
            (struct zoo_opts){.turns = 7, .tools = true, .title = true});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_no_rewrite),
        T(test_drop_oldest_turns),
        T(test_keep_last_turns_without_header),
        T(test_compact_once),
        T(test_compact_repeatedly),
        T(test_summary_that_lost_the_history),
        T(test_prune_tool_results),
        T(test_strip_reasoning),
        T(test_temperature_changed),
        T(test_retry_after_429),
        T(test_control_repeated_short_replies),
        T(test_control_close_after_done),
        T(test_control_retries_after_errors),
        T(test_control_retries_after_timeout),
        T(test_control_stateless_one_shots),
        T(test_control_no_session_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
