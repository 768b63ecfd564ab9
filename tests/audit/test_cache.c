/*
 * End-to-end tests of audit's prefix-cache rule (src/audit/cache.c): a
 * scripted multi-turn client talks to `fidelity sim` through `fidelity
 * record`; `fidelity audit --json -` reads the store. The sim's cache
 * faults give the ground truth: generated tokens never cached, reuse that
 * collapses after turn N. Controls must give no cache finding: a healthy
 * sim, a small cache that other sessions evict only after the idle time,
 * a session with a compaction; and a server without cache figures gets
 * one info finding. In-process tests over built exchanges pin the idle
 * time's default, the DeepSeek field and the "reused once" exception.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "audit_test.h"
#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/xchg_build.h"

static char dir[64];
static struct proc SIM, REC;
static bool up;
static long completion; /* completion tokens of the last exchange */

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fidelity-audit-cache-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static void stop(void)
{
    if (up) {
        proc_stop(&REC); /* first: it stores what finished */
        proc_stop(&SIM);
    }
    up = false;
}

static int teardown(void **state)
{
    (void)state;
    stop();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (getenv("AUDIT_TEST_KEEP")) /* to look at a failure */
        return 0;
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

static void start(const char *const faults[], const char *db)
{
    const char *argv[16] = {"sim", "--listen", "127.0.0.1:0"};
    int n = 3;
    for (int i = 0; faults && faults[i]; i++)
        argv[n++] = faults[i];
    argv[n] = NULL;
    assert_int_equal(proc_start(&SIM, argv), 0);
    char *u = xstrdup(proc_url(&SIM));
    if (rec_start_record(&REC, u, db, NULL)) {
        proc_stop(&SIM);
        free(u);
        fail_msg("fidelity record did not start");
    }
    up = true;
    free(u);
}

/* One streamed chat request through record; the reply text. */
static char *exchange(const char *session, json_t *msgs)
{
    struct http_client *hc = http_client_new();
    struct http_resp resp;
    struct diag d;
    struct buf text = BUF_INIT;
    char *url = xasprintf("%s/v1/chat/completions", proc_url(&REC));
    char *sid = xasprintf("X-Session-Id: %s", session);
    const char *hdr[] = {"Content-Type: application/json",
                         "User-Agent: cache-client/1.0", sid, NULL};
    json_t *body =
        json_pack("{s:s, s:O, s:f, s:i, s:b, s:{s:b}}", "model", "fidelity-sim",
                  "messages", msgs, "temperature", 0.0, "max_tokens", 256,
                  "stream", 1, "stream_options", "include_usage", 1);
    char *s = json_dumps(body, JSON_COMPACT), *save = NULL;
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = s,
                           .body_len = strlen(s),
                           .headers = hdr,
                           .timeout_ms = 20000};
    http_resp_init(&resp);
    assert_int_equal(http_do(hc, &req, &resp, &d), 0);
    assert_int_equal(resp.status, 200);
    for (char *line = strtok_r(resp.body.data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *c =
            strncmp(line, "data: {", 7) ? NULL : json_loads(line + 6, 0, NULL);
        json_t *delta = json_object_get(
            json_array_get(json_object_get(c, "choices"), 0), "delta");
        const char *t = json_string_value(json_object_get(delta, "content"));
        if (t)
            buf_adds(&text, t);
        json_t *u = json_object_get(c, "usage");
        if (json_is_object(u))
            completion = (long)json_integer_value(
                json_object_get(u, "completion_tokens"));
        json_decref(c);
    }
    http_resp_release(&resp);
    json_decref(body);
    free(s);
    free(sid);
    free(url);
    http_client_free(hc);
    return buf_detach(&text, NULL);
}

/* A user message of about n tokens of notes (about 8 tokens a note),
 * its own to the session. */
static char *notes(const char *session, int turn, int n)
{
    struct buf b = BUF_INIT;
    buf_printf(&b, "Session %s turn %d notes follow. ", session, turn);
    for (int i = 0; i < n / 8; i++)
        buf_printf(&b, "Note %d: room %d moved. ", i, 100 * turn + i);
    return buf_detach(&b, NULL);
}

/* Turns [from, to] of a conversation kept in msgs (the replies appended
 * as the harness sends them back); the completion tokens of the replies
 * sent back (turns from..to-1) are added to *carried when not NULL. */
static void turns(const char *session, json_t *msgs, int from, int to,
                  int tokens, long *carried)
{
    for (int t = from; t <= to; t++) {
        char *u = notes(session, t, tokens);
        json_array_append_new(msgs, xb_msg("user", u));
        free(u);
        char *reply = exchange(session, msgs);
        json_array_append_new(msgs, xb_msg("assistant", reply));
        free(reply);
        if (carried && t < to)
            *carried += completion;
    }
}

static json_t *conversation(void)
{
    return json_pack("[{s:s, s:s}]", "role", "system", "content",
                     "You are a helpful assistant.");
}

static json_t *audit(const char *db, const char *const extra[])
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[16] = {"audit", "--db",      db,     "--json",
                            "-",     "--fail-on", "never"};
    int n = 7;
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc)
        fail_msg("audit exited %d: %s", rc, buf_str(&err));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    buf_release(&out);
    buf_release(&err);
    return j;
}

/* The findings whose rule starts with prefix, in a new array. */
static json_t *findings(json_t *report, const char *prefix)
{
    json_t *a = json_array(), *f;
    size_t i;
    json_array_foreach(json_object_get(report, "findings"), i, f)
    {
        const char *r = json_string_value(json_object_get(f, "rule"));
        if (!strncmp(r, prefix, strlen(prefix)))
            json_array_append(a, f);
    }
    return a;
}

static double ev_num(json_t *f, const char *k)
{
    json_t *v = json_object_get(json_object_get(f, "evidence"), k);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static void assert_no_cache_findings(json_t *report)
{
    json_t *c = findings(report, "cache.");
    if (json_array_size(c)) {
        char *s = json_dumps(c, JSON_INDENT(1));
        fail_msg("unexpected cache findings: %s", s);
    }
    json_decref(c);
}

static void test_generated_tokens_never_cached(void **state)
{
    (void)state;
    char *db = xasprintf("%s/nooutput.db", dir);
    const char *f[] = {"--no-cache-output", NULL};
    start(f, db);
    json_t *m = conversation();
    long carried = 0;
    turns("no-output", m, 1, 5, 200, &carried);
    json_decref(m);
    stop();
    json_t *j = audit(db, NULL);
    json_t *c = findings(j, "cache.reply_not_reused");
    assert_int_equal(json_array_size(c), 1);
    json_t *x = json_array_get(c, 0);
    assert_string_equal(json_string_value(json_object_get(x, "severity")),
                        "warn");
    /* turns 2-5 carry the previous reply: four turns, every token of
     * the four replies prefilled again */
    assert_int_equal((long)ev_num(x, "turns"), 4);
    assert_int_equal((long)ev_num(x, "reply_tokens_refilled"), carried);
    assert_true(carried >= 4 * 32);
    json_decref(c);
    c = findings(j, "cache.refill"); /* the prompts were reused */
    assert_int_equal(json_array_size(c), 0);
    json_decref(c);
    json_decref(j);
    free(db);
}

static void test_reuse_collapses_after_turn(void **state)
{
    (void)state;
    char *db = xasprintf("%s/collapse.db", dir);
    const char *f[] = {"--cache-collapse-after", "5", NULL};
    start(f, db);
    json_t *m = conversation();
    turns("collapse", m, 1, 8, 480, NULL);
    json_decref(m);
    stop();
    json_t *j = audit(db, NULL);
    json_t *c = findings(j, "cache.reuse_drop");
    assert_int_equal(json_array_size(c), 1);
    json_t *x = json_array_get(c, 0);
    assert_int_equal(json_integer_value(json_object_get(x, "turn")), 8);
    assert_true(ev_num(x, "reuse") < 0.45);
    assert_true(ev_num(x, "session_median") > 0.9);
    assert_true(ev_num(x, "refilled_tokens_in_run") > 3000);
    json_decref(c);
    /* from turn 6 the shared prefix passes 2,048 tokens: each is a
     * refill, three in a row, one cause: one finding, at turn 6 */
    c = findings(j, "cache.refill");
    assert_int_equal(json_array_size(c), 1);
    x = json_array_get(c, 0);
    assert_int_equal(json_integer_value(json_object_get(x, "turn")), 6);
    assert_int_equal((long)ev_num(x, "requests"), 3);
    assert_true(ev_num(x, "shared_tokens") >= 2048);
    assert_true(ev_num(x, "refilled_tokens") > ev_num(x, "shared_tokens") / 2);
    assert_true(ev_num(x, "refilled_tokens_in_run") >
                2 * ev_num(x, "refilled_tokens"));
    assert_true(ev_num(x, "cached_tokens") > 0);
    json_decref(c);
    json_decref(j);
    free(db);
}

static void test_healthy_sim_has_no_cache_findings(void **state)
{
    (void)state;
    char *db = xasprintf("%s/healthy.db", dir);
    start(NULL, db);
    json_t *m = conversation();
    turns("healthy", m, 1, 8, 480, NULL);
    json_decref(m);
    stop();
    json_t *j = audit(db, NULL);
    assert_no_cache_findings(j);
    json_decref(j);
    free(db);
}

/* A session whose bytes per token change as it goes, the shape of an
 * agent's: a long system prompt of words first (about 5 bytes a token in
 * the sim), then dozens of messages of punctuation (one token a byte). Every
 * shared token was served from the cache; measured at the session's
 * median bytes per token, the early requests' shared prefix came out at
 * twice their whole prompt and each was called a refill. */
static void test_changing_bytes_per_token_is_no_refill(void **state)
{
    (void)state;
    char *db = xasprintf("%s/ratio.db", dir);
    start(NULL, db);
    struct buf sys = BUF_INIT;
    for (int i = 0; i < 6000; i++)
        buf_adds(&sys, "abcd ");
    json_t *m =
        json_pack("[{s:s, s:s}]", "role", "system", "content", buf_str(&sys));
    buf_release(&sys);
    for (int t = 1; t <= 60; t++) {
        char u[640];
        int n = snprintf(u, sizeof(u), "%d", t);
        memset(u + n, '.', 600);
        u[n + 600] = 0;
        json_array_append_new(m, xb_msg("user", u));
        char *reply = exchange("ratio", m);
        json_array_append_new(m, xb_msg("assistant", reply));
        free(reply);
    }
    json_decref(m);
    stop();
    json_t *j = audit(db, NULL);
    assert_no_cache_findings(j);
    json_decref(j);
    free(db);
}

/* A small cache other sessions' load evicts while the session is idle:
 * the miss after the gap is excused by --cache-idle; with the default
 * idle time of 10 minutes the same store gives the refill. */
static void test_eviction_after_idle_time_is_excused(void **state)
{
    (void)state;
    char *db = xasprintf("%s/idle.db", dir);
    const char *f[] = {"--cache-tokens", "4096", NULL};
    start(f, db);
    json_t *a = conversation();
    turns("idle-a", a, 1, 6, 480, NULL);
    for (int k = 0; k < 3; k++) { /* other sessions fill the cache */
        json_t *b = conversation();
        char *s = xasprintf("load-%d", k);
        turns(s, b, 1, 1, 1600, NULL);
        free(s);
        json_decref(b);
    }
    usleep(2200 * 1000);
    turns("idle-a", a, 7, 7, 480, NULL);
    json_decref(a);
    stop();
    const char *idle[] = {"--cache-idle", "2", NULL};
    json_t *j = audit(db, idle);
    assert_no_cache_findings(j);
    json_decref(j);
    j = audit(db, NULL);
    json_t *c = findings(j, "cache.refill");
    assert_int_equal(json_array_size(c), 1);
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(c, 0), "turn")), 7);
    /* nothing but the first block, which every session's prompt shares */
    assert_true(ev_num(json_array_get(c, 0), "cached_tokens") <= 16);
    json_decref(c);
    json_decref(j);
    free(db);
}

static void test_compaction_is_compared_with_what_is_shared(void **state)
{
    (void)state;
    char *db = xasprintf("%s/compaction.db", dir);
    start(NULL, db);
    json_t *m = conversation();
    turns("compact", m, 1, 5, 480, NULL);
    /* the harness summarises the history in a side request ... */
    json_t *side = json_pack(
        "[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content",
        "You summarize conversations. Write a summary of the conversation.",
        "role", "user", "content", "Summarize the notes so far.");
    char *summary = exchange("compact", side);
    json_decref(side);
    /* ... and continues from the summary alone */
    json_t *after = conversation();
    json_array_append_new(after, xb_msg("user", summary));
    json_array_append_new(after, xb_msg("assistant", "Understood."));
    turns("compact", after, 6, 9, 480, NULL);
    free(summary);
    json_decref(after);
    json_decref(m);
    stop();
    json_t *j = audit(db, NULL);
    json_t *h = findings(j, "history.");
    assert_true(json_array_size(h) > 0); /* the rewrite was seen */
    json_decref(h);
    assert_no_cache_findings(j);
    json_decref(j);
    free(db);
}

static void test_no_cache_figures_said_once(void **state)
{
    (void)state;
    char *db = xasprintf("%s/nofigures.db", dir);
    const char *f[] = {"--no-cache-report", "--no-cache-output", NULL};
    start(f, db);
    for (int k = 0; k < 2; k++) {
        json_t *m = conversation();
        turns(k ? "quiet-b" : "quiet-a", m, 1, 5, 200, NULL);
        json_decref(m);
    }
    stop();
    json_t *j = audit(db, NULL);
    json_t *c = findings(j, "cache.");
    assert_int_equal(json_array_size(c), 1); /* once, for both sessions */
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(c, 0), "rule")),
        "cache.no_figures");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(c, 0), "severity")),
        "info");
    json_decref(c);
    json_decref(j);
    free(db);
}

static void test_thresholds_are_options(void **state)
{
    (void)state;
    char *db = xasprintf("%s/opts.db", dir);
    const char *f[] = {"--no-cache-output", NULL};
    start(f, db);
    json_t *m = conversation();
    turns("opts", m, 1, 5, 200, NULL);
    json_decref(m);
    stop();
    /* five turns of not reusing are not enough when 5 are asked for */
    const char *five[] = {"--cache-unused-turns", "5", NULL};
    json_t *j = audit(db, five);
    assert_no_cache_findings(j);
    json_t *th = json_object_get(j, "thresholds");
    assert_int_equal(
        json_integer_value(json_object_get(th, "cache_unused_turns")), 5);
    assert_true(json_number_value(json_object_get(th, "cache_idle_s")) == 600);
    json_decref(j);
    const char *bad[] = {"audit", "--db", db, "--cache-drop", "x", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    assert_int_equal(proc_run(bad, NULL, &out, &err, 30), EXIT_USAGE);
    buf_release(&out);
    buf_release(&err);
    free(db);
}

/* ---- in process, over built exchanges ---- */

#define NT 5

/* A session of NT turns of about 900 tokens each (4 bytes a token as
 * xb_tokens counts), every reply sent back; cached[t] is what the server
 * reported for turn t (-1: no figure), gap[t] the seconds between turn
 * t-1's end and turn t; field names the usage key. */
static const char *reply_reasoning; /* each reply's reasoning, or NULL */

static void session(struct xchg xs[NT], const long cached[NT],
                    const double gap[NT], const char *field)
{
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content",
                             "You are a helpful assistant.");
    double t0 = 1.7e9;
    for (int t = 0; t < NT; t++) {
        struct buf u = BUF_INIT;
        buf_printf(&u, "turn %d ", t);
        while (u.len < 3600)
            buf_printf(&u, "note %zu of turn %d. ", u.len, t);
        json_array_append_new(msgs, xb_msg("user", buf_str(&u)));
        buf_release(&u);
        json_t *body = xb_body("m", json_deep_copy(msgs));
        long pt = xb_tokens(body);
        xb_init(&xs[t], t + 1, "s", body);
        char reply[256];
        snprintf(reply, sizeof(reply),
                 "Reply %d: noted, with a few words more to make it long "
                 "enough to be a reply of some forty tokens or so in all.",
                 t);
        xb_reply(&xs[t], reply, reply_reasoning, NULL, pt, 48, "stop");
        json_t *usage = json_object_get(xs[t].reply, "usage");
        if (cached[t] >= 0 && !strcmp(field, "prompt_tokens_details"))
            json_object_set_new(
                usage, field,
                json_pack("{s:I}", "cached_tokens", (json_int_t)cached[t]));
        else if (cached[t] >= 0)
            json_object_set_new(usage, field, json_integer(cached[t]));
        t0 += gap[t];
        xs[t].started = t0;
        xs[t].up_ttfb_ms = 400;
        xs[t].up_total_ms = 1000;
        t0 += 1.0;
        json_t *a = xb_msg("assistant", reply);
        if (reply_reasoning)
            json_object_set_new(a, "reasoning_content",
                                json_string(reply_reasoning));
        json_array_append_new(msgs, a);
    }
    json_decref(msgs);
}

/* Cached figures of a healthy server for session(): each turn reuses the
 * previous prompt and the reply's first 32 tokens. */
static void healthy_cached(long cached[NT])
{
    struct xchg xs[NT];
    const long none[NT] = {0, 0, 0, 0, 0};
    const double gap[NT] = {0, 5, 5, 5, 5};
    session(xs, none, gap, "prompt_tokens_details");
    cached[0] = 0;
    for (int t = 1; t < NT; t++)
        cached[t] =
            (long)json_integer_value(json_object_get(
                json_object_get(xs[t - 1].reply, "usage"), "prompt_tokens")) +
            32;
    free_xs(xs, NT);
}

/* Shared tokens of turn t are about 930 * t: turn 3 shares ~2,800. */
static void test_idle_gap_default_is_ten_minutes(void **state)
{
    (void)state;
    struct xchg xs[NT];
    struct audit_list l;
    long cached[NT];
    double gap[NT] = {0, 5, 5, 9 * 60, 5};
    healthy_cached(cached);
    cached[3] = 0; /* turn 4 found nothing */
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "cache.refill");
    assert_non_null(f); /* 9 minutes: not idle, the miss counts */
    assert_int_equal(f->request, 4);
    assert_int_equal(count_prefix(&l, "cache."), 1);
    assert_int_equal(ev_int(f, "cached_tokens"), 0);
    assert_true(json_number_value(
                    json_object_get(f->evidence, "refilled_tokens")) > 2048);
    audit_list_release(&l);
    free_xs(xs, NT);
    gap[3] = 11 * 60;
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, NULL, &l);
    for (size_t i = 0; i < l.n; i++) /* 11: excused */
        if (!strncmp(l.v[i].rule, "cache.", 6))
            fail_msg("unexpected %s: %s", l.v[i].rule, l.v[i].summary);
    audit_list_release(&l);
    free_xs(xs, NT);
}

/* Refills in a row are one finding; a request that reused its prefix
 * ends the run, and the next run is a finding of its own. */
static void test_refill_runs_are_one_finding_each(void **state)
{
    (void)state;
    struct xchg xs[NT];
    struct audit_list l;
    long cached[NT];
    const double gap[NT] = {0, 5, 5, 5, 5};
    healthy_cached(cached);
    cached[3] = cached[4] = 0; /* turns 4 and 5 found nothing */
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, NULL, &l);
    assert_int_equal(count_prefix(&l, "cache.refill"), 1);
    const struct audit_finding *f = find_rule(&l, "cache.refill");
    assert_int_equal(f->request, 4);
    assert_int_equal(ev_int(f, "requests"), 2);
    assert_int_equal(ev_int(f, "last_request"), 5);
    audit_list_release(&l);
    free_xs(xs, NT);
    healthy_cached(cached);
    cached[2] = cached[4] = 0; /* turn 4 reused its prefix between */
    struct audit_opts o;
    audit_opts_init(&o);
    o.th.cache_min_shared = 1024; /* turn 3 shares about 1,860 */
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, &o, &l);
    assert_int_equal(count_prefix(&l, "cache.refill"), 2);
    for (size_t i = 0; i < l.n; i++)
        if (!strcmp(l.v[i].rule, "cache.refill"))
            assert_int_equal(ev_int(&l.v[i], "requests"), 1);
    audit_list_release(&l);
    free_xs(xs, NT);
}

/* opencode after a compaction: the next request keeps only the system
 * prompt and sends the summary, with 22 kB of tool schemas as before. Where
 * a template renders the schemas is its own (before the system text, after
 * it, before the last user message): past a rewrite they are no evidence of
 * a shared prefix, and a server that reused only the system prompt is no
 * refill. On a plain continuation the same schemas are shared. */
static void compaction_with_tools(struct xchg xs[3], long cached_after,
                                  bool plain)
{
    json_t *tools = json_array();
    for (int k = 0; k < 40; k++) {
        struct buf d = BUF_INIT;
        while (d.len < 500)
            buf_printf(&d, "parameter %zu of tool %d. ", d.len, k);
        char name[16];
        snprintf(name, sizeof(name), "tool_%d", k);
        json_array_append_new(
            tools, json_pack("{s:s, s:{s:s, s:s, s:{s:s}}}", "type", "function",
                             "function", "name", name, "description",
                             buf_str(&d), "parameters", "type", "object"));
        buf_release(&d);
    }
    json_t *sys = xb_msg("system", "You are a coding agent.");
    struct buf u = BUF_INIT;
    while (u.len < 8000)
        buf_printf(&u, "history note %zu. ", u.len);
    json_t *m1 = json_pack("[O, o]", sys, xb_msg("user", buf_str(&u)));
    buf_release(&u);
    json_t *m3 =
        plain ? json_deep_copy(m1)
              : json_pack("[O, o]", sys,
                          xb_msg("user", "Summary: we fixed the parser."));
    if (plain)
        json_array_append_new(m3, xb_msg("assistant", "ok"));
    json_array_append_new(m3, xb_msg("user", "Go on with the tests."));
    json_t *m2 = json_deep_copy(m1);
    json_array_append_new(m2, xb_msg("user", "Summarize the conversation."));
    json_t *bodies[3] = {xb_body("m", m1), xb_body("m", m2), xb_body("m", m3)};
    for (int t = 0; t < 3; t++) {
        json_object_set(bodies[t], "tools", tools);
        long pt = xb_tokens(bodies[t]);
        xb_init(&xs[t], t + 1, "s", bodies[t]);
        if (t == 1)
            xs[t].kind = xstrdup("compaction");
        xb_reply(&xs[t], t == 1 ? "Summary: we fixed the parser." : "ok", NULL,
                 NULL, pt, 8, "stop");
        long cached = t == 2 ? cached_after : 0;
        json_object_set_new(
            json_object_get(xs[t].reply, "usage"), "prompt_tokens_details",
            json_pack("{s:I}", "cached_tokens", (json_int_t)cached));
        xs[t].started = 1.7e9 + 10.0 * t;
        xs[t].up_total_ms = 1000;
    }
    json_decref(sys);
    json_decref(tools);
}

static void test_tools_after_compaction_are_not_shared(void **state)
{
    (void)state;
    struct xchg xs[3];
    struct audit_list l;
    compaction_with_tools(xs, 8, false); /* the system prompt's few tokens */
    run_audit(xs, 3, NULL, &l);
    assert_int_equal(count_prefix(&l, "cache.refill"), 0);
    for (size_t i = 0; i < l.n; i++)
        assert_false(!strncmp(l.v[i].rule, "cache.", 6) &&
                     l.v[i].sev >= AUDIT_WARN);
    audit_list_release(&l);
    free_xs(xs, 3);
    /* the same figures on a plain continuation: the schemas and the
     * history were shared and prefilled again */
    compaction_with_tools(xs, 8, true);
    run_audit(xs, 3, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "cache.refill");
    assert_non_null(f);
    assert_int_equal(f->request, 3);
    audit_list_release(&l);
    free_xs(xs, 3);
}

static void test_deepseek_cache_hit_field(void **state)
{
    (void)state;
    struct xchg xs[NT];
    struct audit_list l;
    long cached[NT];
    const double gap[NT] = {0, 5, 5, 5, 5};
    healthy_cached(cached);
    cached[3] = 0;
    session(xs, cached, gap, "prompt_cache_hit_tokens");
    run_audit(xs, NT, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "cache.refill");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    assert_null(find_rule(&l, "cache.no_figures"));
    audit_list_release(&l);
    free_xs(xs, NT);
}

/* Cached tokens that stop at the previous prompt: the reply was never
 * reused, unless one turn shows the server does keep its output. */
static void test_reply_reused_once_is_not_a_finding(void **state)
{
    (void)state;
    struct xchg xs[NT];
    struct audit_list l;
    const double gap[NT] = {0, 5, 5, 5, 5};
    long cached[NT] = {0, 0, 0, 0, 0};
    session(xs, cached, gap, "prompt_tokens_details"); /* to read sizes */
    for (int t = 1; t < NT; t++)
        cached[t] =
            (long)json_integer_value(json_object_get(
                json_object_get(xs[t - 1].reply, "usage"), "prompt_tokens")) /
            16 * 16;
    free_xs(xs, NT);
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "cache.reply_not_reused");
    assert_non_null(f);
    assert_int_equal(ev_int(f, "turns"), 4);
    assert_int_equal((long)json_number_value(
                         json_object_get(f->evidence, "reply_tokens_refilled")),
                     4 * 48);
    audit_list_release(&l);
    free_xs(xs, NT);
    cached[2] += 32; /* turn 3 reused the reply of turn 2 */
    session(xs, cached, gap, "prompt_tokens_details");
    run_audit(xs, NT, NULL, &l);
    assert_null(find_rule(&l, "cache.reply_not_reused"));
    audit_list_release(&l);
    free_xs(xs, NT);
}

/* Replies that began with reasoning and were never reused make no claim
 * about the server: a template that drops prior reasoning (DeepSeek's
 * rule) makes them unreusable on any server. */
static void test_reasoning_reply_not_reused_is_no_claim(void **state)
{
    (void)state;
    struct xchg xs[NT];
    struct audit_list l;
    const double gap[NT] = {0, 5, 5, 5, 5};
    long cached[NT] = {0, 0, 0, 0, 0};
    session(xs, cached, gap, "prompt_tokens_details");
    for (int t = 1; t < NT; t++)
        cached[t] =
            (long)json_integer_value(json_object_get(
                json_object_get(xs[t - 1].reply, "usage"), "prompt_tokens")) /
            16 * 16;
    free_xs(xs, NT);
    reply_reasoning = "Let me think about what the user asked for here.";
    session(xs, cached, gap, "prompt_tokens_details");
    reply_reasoning = NULL;
    run_audit(xs, NT, NULL, &l);
    assert_null(find_rule(&l, "cache.reply_not_reused"));
    audit_list_release(&l);
    free_xs(xs, NT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, teardown)
        T(test_generated_tokens_never_cached),
        T(test_reuse_collapses_after_turn),
        T(test_healthy_sim_has_no_cache_findings),
        T(test_eviction_after_idle_time_is_excused),
        T(test_compaction_is_compared_with_what_is_shared),
        T(test_no_cache_figures_said_once),
        T(test_thresholds_are_options),
        T(test_changing_bytes_per_token_is_no_refill),
        cmocka_unit_test(test_idle_gap_default_is_ten_minutes),
        cmocka_unit_test(test_tools_after_compaction_are_not_shared),
        cmocka_unit_test(test_deepseek_cache_hit_field),
        cmocka_unit_test(test_refill_runs_are_one_finding_each),
        cmocka_unit_test(test_reply_reused_once_is_not_a_finding),
        cmocka_unit_test(test_reasoning_reply_not_reused_is_no_claim),
    };
    return cmocka_run_group_tests(tests, setup, group_teardown);
}
