/*
 * Tests for audit rules 2-7 (sampling, reasoning policy, truncation, "first
 * message" replies, degeneration, stream integrity) on a crafted clean
 * session, which must give no finding at warn or above, and on copies of
 * it with one fault injected each.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "audit_test.h"
#include "core/buf.h"
#include "core/xalloc.h"

#define N 4

static json_t *tools(void)
{
    return json_pack("[{s:s, s:{s:s, s:s, s:{s:s}}}]", "type", "function",
                     "function", "name", "lookup", "description",
                     "Look a key up in the team wiki", "parameters", "type",
                     "object");
}

static json_t *body(json_t *msgs)
{
    json_t *b = xb_body("qwen3-test", msgs);
    json_object_set_new(b, "temperature", json_real(0.6));
    json_object_set_new(b, "max_tokens", json_integer(1024));
    json_object_set_new(b, "tools", tools());
    json_object_set_new(b, "stream_options",
                        json_pack("{s:b}", "include_usage", 1));
    return b;
}

static json_t *echo_with_reasoning(const struct xchg *x)
{
    json_t *m = xb_echo(x);
    json_object_set(m, "reasoning_content",
                    json_object_get(x->reply, "reasoning_content"));
    return m;
}

/* Four requests of a well-behaved harness against a well-behaved server:
 * a fact, a tool round trip, the question. Reasoning is sent back. */
static void clean_session(struct xchg xs[N])
{
    json_t *m = json_pack("[o, o]",
                          xb_msg("system", "You are a helpful "
                                           "assistant."),
                          xb_msg("user", "The access code for the blue door "
                                         "is 4812. Please remember it."));
    xb_init(&xs[0], 1, "clean", body(json_deep_copy(m)));
    xb_reply(&xs[0], "I will remember the access code for the blue door.",
             "The user states a fact; acknowledge it.", NULL,
             xb_tokens(xs[0].req_body), 11, "stop");
    json_array_append_new(m, echo_with_reasoning(&xs[0]));
    json_array_append_new(m, xb_msg("user", "Call the lookup tool with "
                                            "{\"key\":\"door\"}."));
    xb_init(&xs[1], 2, "clean", body(json_deep_copy(m)));
    xb_reply(&xs[1], "", "The user wants the lookup tool called.",
             json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", "call_1", "type",
                       "function", "function", "name", "lookup", "arguments",
                       "{\"key\": \"door\"}"),
             xb_tokens(xs[1].req_body), 12, "tool_calls");
    json_array_append_new(m, echo_with_reasoning(&xs[1]));
    json_array_append_new(m, json_pack("{s:s, s:s, s:s}", "role", "tool",
                                       "tool_call_id", "call_1", "content",
                                       "door: painted blue in 2021"));
    xb_init(&xs[2], 3, "clean", body(json_deep_copy(m)));
    xb_reply(&xs[2], "The tool returned: door: painted blue in 2021.",
             "Report the tool result.", NULL, xb_tokens(xs[2].req_body), 12,
             "stop");
    json_array_append_new(m, echo_with_reasoning(&xs[2]));
    json_array_append_new(m, xb_msg("user", "What is the access code for "
                                            "the blue door?"));
    xb_init(&xs[3], 4, "clean", body(m));
    xb_reply(&xs[3], "The access code for the blue door is 4812.",
             "The fact was stated in the first message.", NULL,
             xb_tokens(xs[3].req_body), 12, "stop");
}

static void strict_opts(struct audit_opts *o)
{
    audit_opts_init(o);
    o->expect = json_object();
    audit_expect_add(o->expect, "temperature=0.6", NULL);
    audit_expect_add(o->expect, "max_tokens=1024", NULL);
    o->policy = AUDIT_POLICY_KEEP;
    o->context_length = 131072;
}

static void test_clean_session_has_no_findings(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    clean_session(xs);
    strict_opts(&o);
    run_audit(xs, N, &o, &l);
    for (size_t i = 0; i < l.n; i++)
        if (l.v[i].sev >= AUDIT_WARN)
            print_message("unexpected: %s %s\n", l.v[i].rule, l.v[i].summary);
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 0);
    /* the rules did run: what was sent is reported at info level */
    const struct audit_finding *s = find_rule(&l, "sampling.sent");
    assert_non_null(s);
    assert_true(
        json_real_value(json_object_get(json_object_get(s->evidence, "sent"),
                                        "temperature")) == 0.6);
    const struct audit_finding *r = find_rule(&l, "reasoning.sent");
    assert_non_null(r);
    /* requests 2-4 carry 1 + 2 + 3 earlier turns, all equal, with tools;
     * each turn is judged where it first appears */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r->evidence, "with_tools"), "equal")),
                     3);
    audit_list_release(&l);
    json_decref(o.expect);
    free_xs(xs, N);
}

static void test_sampling_expect_and_change(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    clean_session(xs);
    strict_opts(&o);
    json_object_del(xs[0].req_body, "temperature");
    json_object_set_new(xs[2].req_body, "temperature", json_real(0.2));
    run_audit(xs, N, &o, &l);
    const struct audit_finding *e = find_rule(&l, "sampling.expect");
    assert_non_null(e);
    assert_int_equal(e->request, 1);
    assert_int_equal(ev_int(e, "mismatched"), 2); /* 1 absent, 3 at 0.2 */
    assert_int_equal(ev_int(e, "requests"), 4);
    json_t *sent = json_object_get(e->evidence, "sent");
    assert_true(json_is_null(json_array_get(sent, 0)));
    assert_true(json_real_value(json_array_get(sent, 1)) == 0.2);
    assert_string_equal(
        json_string_value(json_object_get(e->evidence, "param")),
        "temperature");
    assert_string_equal(
        json_string_value(json_object_get(e->evidence, "source")), "--expect");
    const struct audit_finding *c = find_rule(&l, "sampling.changed");
    assert_non_null(c);
    assert_int_equal(c->request, 2); /* absent -> 0.6 */
    /* absent, 0.6, 0.2, 0.6 */
    assert_int_equal(json_array_size(json_object_get(c->evidence, "values")),
                     4);
    audit_list_release(&l);
    json_decref(o.expect);
    free_xs(xs, N);
}

/* opencode with agent temperature 0.2 for a custom model with
 * "temperature": true (sampling-params-by-config.json, config tempT) against
 * a profile asking for 0.6 and top_k 20. */
static void test_sampling_profile_on_capture(void **state)
{
    (void)state;
    struct xchg x;
    struct audit_list l;
    struct audit_opts o;
    struct diag d;
    json_t *cfg = fixture_json("sampling-params-by-config.json");
    json_t *sent = json_deep_copy(json_object_get(
        json_object_get(json_object_get(cfg, "tempT"), "sent_params"),
        "main0"));
    json_object_set_new(sent, "messages",
                        json_pack("[o]", xb_msg("user", "hello")));
    xb_init(&x, 7, "s", sent);
    audit_opts_init(&o);
    json_t *prof = json_loads("{\"models\": {\"qwen3-*\": {\"params\": "
                              "{\"temperature\": 0.6, \"top_k\": 20}, "
                              "\"reasoning_policy\": \"keep\"}}}",
                              0, NULL);
    assert_int_equal(audit_profile_check(prof, &d), 0);
    o.profile = prof;
    run_audit(&x, 1, &o, &l);
    assert_int_equal(count_prefix(&l, "sampling.expect"), 2);
    for (size_t i = 0; i < l.n; i++)
        if (!strcmp(l.v[i].rule, "sampling.expect"))
            assert_string_equal(
                json_string_value(json_object_get(l.v[i].evidence, "source")),
                "profile");
    const struct audit_finding *s = find_rule(&l, "sampling.sent");
    json_t *absent = json_object_get(s->evidence, "absent");
    bool top_k_absent = false;
    for (size_t i = 0; i < json_array_size(absent); i++)
        top_k_absent |=
            !strcmp(json_string_value(json_array_get(absent, i)), "top_k");
    assert_true(top_k_absent);
    audit_list_release(&l);
    json_decref(prof);
    json_decref(prof);
    json_decref(cfg);
    xb_release(&x);
    /* a bad profile names the key */
    json_t *bad = json_loads("{\"models\": {\"x\": {\"temp\": 1}}}", 0, NULL);
    assert_int_equal(audit_profile_check(bad, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "'temp'"));
    json_decref(bad);
}

static void drop_reasoning(struct xchg *x)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(x->req_body, "messages"), i, m)
        json_object_del(m, "reasoning_content");
}

static void test_reasoning_policy(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    clean_session(xs);
    audit_opts_init(&o);
    /* request 4 drops every earlier reasoning */
    drop_reasoning(&xs[3]);
    o.policy = AUDIT_POLICY_KEEP;
    run_audit(xs, N, &o, &l);
    const struct audit_finding *f = find_rule(&l, "reasoning.policy");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    json_t *t0 = json_array_get(json_object_get(f->evidence, "turns"), 0);
    assert_string_equal(json_string_value(json_object_get(t0, "state")),
                        "dropped");
    assert_int_equal(count_prefix(&l, "reasoning.policy"), 1);
    audit_list_release(&l);
    /* keep-with-tools: dropping is right once the request has no tools */
    json_object_del(xs[3].req_body, "tools");
    o.policy = AUDIT_POLICY_KEEP_WITH_TOOLS;
    run_audit(xs, N, &o, &l);
    assert_int_equal(count_prefix(&l, "reasoning.policy"), 0);
    audit_list_release(&l);
    /* drop: every request that sends reasoning back (2, 3) disagrees */
    o.policy = AUDIT_POLICY_DROP;
    run_audit(xs, N, &o, &l);
    assert_int_equal(count_prefix(&l, "reasoning.policy"), 2);
    audit_list_release(&l);
    /* empty string and inline <think> are told apart */
    json_t *a = json_array_get(json_object_get(xs[3].req_body, "messages"), 2);
    json_object_set_new(a, "reasoning_content", json_string(""));
    json_t *a2 = json_array_get(json_object_get(xs[3].req_body, "messages"), 6);
    char *inl = xasprintf("<think>%s</think>%s", "Report the tool result.",
                          "The tool returned: door: painted blue in "
                          "2021.");
    json_object_set_new(a2, "content", json_string(inl));
    free(inl);
    json_object_set_new(xs[3].req_body, "tools", tools());
    o.policy = AUDIT_POLICY_KEEP;
    run_audit(xs, N, &o, &l);
    f = find_rule(&l, "reasoning.policy");
    assert_non_null(f);
    json_t *turns = json_object_get(f->evidence, "turns");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(turns, 0), "state")),
        "empty");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(turns, 2), "state")),
        "inline");
    /* the answer itself was sent back as streamed: no echo error */
    assert_null(find_rule(&l, "history.echo"));
    audit_list_release(&l);
    free_xs(xs, N);
}

/* The streamed reply of mock-sse-reply-reasoning-toolcall.txt (reasoning
 * deltas and a write tool call) as a recorded exchange, and opencode's
 * reason-06 request that sends it back. */
static void reasoning_capture(struct xchg xs[2])
{
    FILE *f = fixture_open("mock-sse-reply-reasoning-toolcall.txt");
    char line[8192];
    struct buf reasoning = BUF_INIT;
    json_t *calls = json_array();
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        json_t *c = strncmp(line, "data: {", 7)
                        ? NULL
                        : json_loads(line + 6, JSON_DISABLE_EOF_CHECK, NULL);
        json_t *delta = json_object_get(
            json_array_get(json_object_get(c, "choices"), 0), "delta");
        const char *r =
            json_string_value(json_object_get(delta, "reasoning_content"));
        if (r)
            buf_adds(&reasoning, r);
        json_t *tc = json_object_get(delta, "tool_calls");
        if (tc)
            json_array_extend(calls, tc);
        json_decref(c);
    }
    fclose(f);
    /* the request before it: reason-06's first four messages, so that
     * reason-06 extends it (audit links by structure, not by text) */
    json_t *b6 = fixture_body("reason-06-reasoning-model-final-request.json");
    json_t *first = json_array();
    for (size_t i = 0; i < 4; i++)
        json_array_append(first,
                          json_array_get(json_object_get(b6, "messages"), i));
    json_decref(b6);
    xb_init(&xs[0], 1, "ses_REDACTED", body(first));
    xb_reply(&xs[0], "", reasoning.data, calls, 2685, 242, "tool_calls");
    xb_init(&xs[1], 2, "ses_REDACTED",
            fixture_body("reason-06-reasoning-model-final-request.json"));
    buf_release(&reasoning);
}

static void test_reasoning_on_opencode_capture(void **state)
{
    (void)state;
    struct xchg xs[2];
    struct audit_list l;
    struct audit_opts o;
    reasoning_capture(xs);
    audit_opts_init(&o);
    o.policy = AUDIT_POLICY_KEEP;
    run_audit(xs, 2, &o, &l);
    /* opencode sent the streamed reasoning back verbatim */
    assert_null(find_rule(&l, "reasoning.policy"));
    const struct audit_finding *s = find_rule(&l, "reasoning.sent");
    assert_non_null(s);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(s->evidence, "with_tools"), "equal")),
                     1);
    audit_list_release(&l);
    /* the DeepSeek rule without tools wants it dropped */
    json_object_del(xs[1].req_body, "tools");
    o.policy = AUDIT_POLICY_KEEP_WITH_TOOLS;
    run_audit(xs, 2, &o, &l);
    const struct audit_finding *f = find_rule(&l, "reasoning.policy");
    assert_non_null(f);
    assert_int_equal(f->request, 2);
    json_t *t = json_array_get(json_object_get(f->evidence, "turns"), 0);
    assert_int_equal(json_integer_value(json_object_get(t, "index")), 4);
    assert_string_equal(json_string_value(json_object_get(t, "state")),
                        "equal");
    assert_int_equal(json_integer_value(json_object_get(t, "reasoning_bytes")),
                     strlen("The user wants the game saved to a file. I "
                            "should call the write tool with tictactoe.py. "
                            "SECRET-REASONING-TURN1-TOOLCALL"));
    audit_list_release(&l);
    free_xs(xs, 2);
}

static void test_truncation_flat_and_below(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    clean_session(xs);
    audit_opts_init(&o);
    /* request 4 is much longer but the server counts what it counted for
     * request 3: it keeps a fixed window */
    json_t *msgs = json_object_get(xs[3].req_body, "messages");
    struct buf b = BUF_INIT;
    for (int i = 0; i < 60; i++)
        buf_printf(&b, "Note %d: the meeting moved to room %d. ", i, 100 + i);
    json_array_insert_new(msgs, json_array_size(msgs) - 1,
                          xb_msg("user", b.data));
    buf_release(&b);
    json_object_set_new(
        json_object_get(xs[3].reply, "usage"), "prompt_tokens",
        json_integer(json_integer_value(json_object_get(
            json_object_get(xs[2].reply, "usage"), "prompt_tokens"))));
    run_audit(xs, N, &o, &l);
    const struct audit_finding *f = find_rule(&l, "truncation.flat");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    assert_int_equal(ev_int(f, "prev_request"), 3);
    const struct audit_finding *below = find_rule(&l, "truncation.below");
    assert_non_null(below);
    assert_int_equal(below->request, 4);
    assert_string_equal(
        json_string_value(json_object_get(below->evidence, "source")),
        "bytes-per-token");
    audit_list_release(&l);
    /* with an exact /tokenize count for request 2 the expectation is
     * exact: 64 tokens short of 1000 (6%, under the estimate's 25%) is
     * reported, 10 short (within the tolerance) and more than counted
     * (tool schemas the count leaves out) are not */
    o.tokenized = json_pack("{s:i}", "2", 1000);
    static const struct {
        long got;
        size_t hits;
    } exact[] = {{936, 1}, {500, 1}, {990, 0}, {1200, 0}};
    for (size_t k = 0; k < sizeof(exact) / sizeof(*exact); k++) {
        size_t hits = 0;
        json_object_set_new(json_object_get(xs[1].reply, "usage"),
                            "prompt_tokens", json_integer(exact[k].got));
        run_audit(xs, N, &o, &l);
        for (size_t i = 0; i < l.n; i++)
            if (!strcmp(l.v[i].rule, "truncation.below") &&
                l.v[i].request == 2) {
                hits++;
                assert_string_equal(json_string_value(json_object_get(
                                        l.v[i].evidence, "source")),
                                    "tokenize");
            }
        assert_int_equal(hits, exact[k].hits);
        audit_list_release(&l);
    }
    json_decref(o.tokenized);
    free_xs(xs, N);
}

/* A server that cuts every prompt to its limit: requests that grow, each
 * counted at exactly the same prompt size. Without --context-length this
 * was nothing; it is one truncation.pinned per run (and no flat finding
 * inside it). A retry at the same size is no growth. */
static void test_truncation_pinned_run(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    clean_session(xs);
    for (int k = 1; k < N; k++)
        json_object_set_new(json_object_get(xs[k].reply, "usage"),
                            "prompt_tokens", json_integer(3000));
    run_audit(xs, N, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "truncation.pinned");
    assert_non_null(f);
    assert_int_equal(count_prefix(&l, "truncation.pinned"), 1);
    assert_int_equal(f->request, 3);
    assert_int_equal(ev_int(f, "requests"), N - 1);
    assert_int_equal(ev_int(f, "prompt_tokens"), 3000);
    assert_int_equal(ev_int(f, "first_request"), 2);
    assert_null(find_rule(&l, "truncation.flat"));
    audit_list_release(&l);
    /* two requests at one size are not a run */
    free_xs(xs, N);
    clean_session(xs);
    json_object_set_new(
        json_object_get(xs[2].reply, "usage"), "prompt_tokens",
        json_integer(json_integer_value(json_object_get(
            json_object_get(xs[1].reply, "usage"), "prompt_tokens"))));
    run_audit(xs, N, NULL, &l);
    assert_null(find_rule(&l, "truncation.pinned"));
    audit_list_release(&l);
    free_xs(xs, N);
}

/* Regression: a server whose template does not render the tool schemas
 * (fidelity sim, some chat templates) counts far fewer tokens than the
 * request's bytes suggest; that constant share is not truncation. The
 * first estimate (bytes / a session ratio) reported every early request of
 * an opencode-shaped session as 35% truncated. */
static void test_unrendered_tools_are_not_truncation(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct buf desc = BUF_INIT;
    clean_session(xs);
    for (int i = 0; i < 200; i++)
        buf_adds(&desc, "Runs a shell command in the project. ");
    for (int i = 0; i < N; i++) {
        json_t *t = json_object_get(xs[i].req_body, "tools");
        for (int k = 0; k < 10; k++)
            json_array_append_new(t,
                                  json_pack("{s:s, s:{s:s, s:s}}", "type",
                                            "function", "function", "name",
                                            "bash", "description", desc.data));
        /* the server counted the messages only, as before */
    }
    run_audit(xs, N, NULL, &l);
    assert_null(find_rule(&l, "truncation.below"));
    audit_list_release(&l);
    /* ... while a request that loses its history still is reported */
    json_object_set_new(json_object_get(xs[3].reply, "usage"), "prompt_tokens",
                        json_integer(40));
    run_audit(xs, N, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "truncation.below");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    audit_list_release(&l);
    buf_release(&desc);
    free_xs(xs, N);
}

static void test_truncation_limits_and_errors(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    clean_session(xs);
    audit_opts_init(&o);
    o.context_length = 4096;
    /* request 2: at the context length, reply cut at 100 of 1024 tokens */
    json_object_set_new(json_object_get(xs[1].reply, "usage"), "prompt_tokens",
                        json_integer(4096));
    json_object_set_new(json_object_get(xs[1].reply, "usage"),
                        "completion_tokens", json_integer(100));
    json_object_set_new(xs[1].reply, "finish_reason", json_string("length"));
    /* request 3: the server refuses; request 4 follows unchanged */
    const char *err = "{\"error\":{\"message\":\"This model's maximum context "
                      "length is 4096 tokens. However, you requested 5000 "
                      "tokens.\",\"type\":\"BadRequestError\"}}";
    xs[2].status = 400;
    xs[2].streamed = false;
    xs[2].resp_raw = strdup(err);
    xs[2].resp_raw_len = strlen(err);
    run_audit(xs, N, &o, &l);
    const struct audit_finding *a = find_rule(&l, "truncation.at_limit");
    assert_non_null(a);
    assert_int_equal(a->request, 2);
    const struct audit_finding *e = find_rule(&l, "truncation.length_early");
    assert_non_null(e);
    assert_int_equal(ev_int(e, "completion_tokens"), 100);
    assert_int_equal(ev_int(e, "max_tokens"), 1024);
    const struct audit_finding *c = find_rule(&l, "truncation.context_error");
    assert_non_null(c);
    assert_int_equal(c->request, 3);
    assert_int_equal(ev_int(c, "next_request"), 4);
    assert_string_equal(json_string_value(json_object_get(c->evidence, "next")),
                        "sent a longer request");
    audit_list_release(&l);
    free_xs(xs, N);
}

static void test_first_message_claims(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    assert_true(audit_is_first_message_claim(
        "I don\xe2\x80\x99t see any earlier message about that; this looks "
        "like the start of our conversation."));
    assert_true(audit_is_first_message_claim(
        "This is the very first message of our conversation, so I don't know "
        "what \"that\" refers to."));
    assert_false(audit_is_first_message_claim(
        "The access code for the blue door is 4812."));
    /* the server forgot: request 4 carried three user turns */
    clean_session(xs);
    json_object_set_new(
        xs[3].reply, "content",
        json_string("I don't see any earlier message about that; this looks "
                    "like the start of our conversation."));
    run_audit(xs, N, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "first_message.claim");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "blame")), "server");
    assert_int_equal(ev_int(f, "user_turns_sent"), 3);
    audit_list_release(&l);
    /* the harness forgot: request 4 carried only the question */
    json_t *msgs = json_object_get(xs[3].req_body, "messages");
    while (json_array_size(msgs) > 2)
        json_array_remove(msgs, 1);
    run_audit(xs, N, NULL, &l);
    f = find_rule(&l, "first_message.claim");
    assert_non_null(f);
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "blame")), "harness");
    audit_list_release(&l);
    /* the same request, which the server cut (the server's own count of
     * its messages is 500 tokens more than it read): the harness may have
     * sent a summary that still held the history; the server is blamed */
    struct audit_opts o;
    audit_opts_init(&o);
    long pt = (long)json_integer_value(json_object_get(
        json_object_get(xs[3].reply, "usage"), "prompt_tokens"));
    o.tokenized = json_pack("{s:I}", "4", (json_int_t)(pt + 500));
    run_audit(xs, N, &o, &l);
    f = find_rule(&l, "first_message.claim");
    assert_non_null(f);
    assert_non_null(find_rule(&l, "truncation.below"));
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "blame")), "server");
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "truncation")),
        "truncation.below");
    assert_non_null(strstr(f->summary, "the server cut this request"));
    audit_list_release(&l);
    json_decref(o.tokenized);
    free_xs(xs, N);
    /* a claim on a true first message is right */
    clean_session(xs);
    json_object_set_new(xs[0].reply, "content",
                        json_string("This looks like the start of our "
                                    "conversation."));
    run_audit(xs, N, NULL, &l);
    assert_null(find_rule(&l, "first_message.claim"));
    audit_list_release(&l);
    free_xs(xs, N);
}

static void test_degeneration(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    struct buf b = BUF_INIT;
    for (int i = 0; i < 40; i++)
        buf_adds(&b, "The access code is 4812 and the door is blue. ");
    assert_true(audit_gzip_ratio(b.data, b.len) > 6);
    assert_true(audit_ngram_share(b.data, b.len) > 0.9);
    /* real prose: opencode's system prompt */
    json_t *sys = fixture_body("plain-02-turn1-first-request.json");
    const char *prose = json_string_value(json_object_get(
        json_array_get(json_object_get(sys, "messages"), 0), "content"));
    assert_true(audit_gzip_ratio(prose, strlen(prose)) < 6);
    assert_true(audit_ngram_share(prose, strlen(prose)) < 0.6);
    json_decref(sys);

    clean_session(xs);
    json_object_set_new(xs[3].reply, "content", json_string(b.data));
    json_object_set_new(xs[1].reply, "reasoning_content", json_string(b.data));
    json_object_set_new(xs[2].reply, "content", json_string(""));
    char *long_r = xmalloc(3001);
    for (int i = 0; i < 3000; i++)
        long_r[i] = "abcdefghij klmnopqrstuvwxyz"[(i * 7 + i / 13) % 27];
    long_r[3000] = 0;
    json_object_set_new(xs[2].reply, "reasoning_content", json_string(long_r));
    free(long_r);
    run_audit(xs, N, NULL, &l);
    size_t content = 0, reasoning = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (strcmp(l.v[i].rule, "degeneration.repetition"))
            continue;
        const char *field =
            json_string_value(json_object_get(l.v[i].evidence, "field"));
        content += l.v[i].request == 4 && !strcmp(field, "content");
        reasoning += l.v[i].request == 2 && !strcmp(field, "reasoning");
        assert_true(json_real_value(json_object_get(l.v[i].evidence,
                                                    "gzip_threshold")) == 6);
    }
    assert_int_equal(content, 1);
    assert_int_equal(reasoning, 1);
    const struct audit_finding *r = find_rule(&l, "degeneration.reasoning");
    assert_non_null(r);
    assert_int_equal(r->request, 3);
    assert_int_equal(r->sev, AUDIT_WARN);
    audit_list_release(&l);
    buf_release(&b);
    free_xs(xs, N);
}

static void test_stream_integrity(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    clean_session(xs);
    json_object_set_new(xs[0].reply, "done", json_false());
    xs[1].end = XCHG_UPSTREAM_RESET;
    json_object_del(xs[2].reply, "usage");
    json_object_set_new(xs[3].reply, "max_gap_ms", json_real(8000));
    xs[3].down_ttfb_ms = 300;
    xs[3].up_ttfb_ms = 10;
    run_audit(xs, N, NULL, &l);
    assert_int_equal(find_rule(&l, "stream.no_done")->request, 1);
    const struct audit_finding *inc = find_rule(&l, "stream.incomplete");
    assert_int_equal(inc->request, 2);
    assert_string_equal(
        json_string_value(json_object_get(inc->evidence, "end")),
        "upstream_reset");
    assert_int_equal(find_rule(&l, "stream.no_usage")->request, 3);
    assert_int_equal(find_rule(&l, "stream.gap")->request, 4);
    const struct audit_finding *t = find_rule(&l, "stream.added_ttfb");
    assert_int_equal(t->request, 4);
    assert_true(json_real_value(json_object_get(t->evidence, "down_ttfb_ms")) ==
                300);
    assert_null(find_rule(&l, "stream.buffered"));
    audit_list_release(&l);
    /* a stream delivered in one burst at its end */
    json_object_set_new(xs[0].reply, "chunks", json_integer(50));
    xs[0].up_ttfb_ms = 1900;
    xs[0].down_ttfb_ms = 1900;
    xs[0].up_total_ms = 2000;
    run_audit(xs, N, NULL, &l);
    assert_int_equal(find_rule(&l, "stream.buffered")->request, 1);
    audit_list_release(&l);
    free_xs(xs, N);
}

static void test_findings_sorted_most_severe_first(void **state)
{
    (void)state;
    struct xchg xs[N];
    struct audit_list l;
    clean_session(xs);
    json_object_set_new(xs[0].reply, "done", json_false());
    xs[2].down_ttfb_ms = 500;
    run_audit(xs, N, NULL, &l);
    const char *order[] = {"clean"};
    audit_list_sort(&l, order, 1);
    assert_true(l.n >= 3);
    for (size_t i = 1; i < l.n; i++)
        assert_true(l.v[i - 1].sev >= l.v[i].sev);
    assert_string_equal(l.v[0].rule, "stream.no_done");
    json_t *j = audit_finding_json(&l.v[0]);
    assert_string_equal(json_string_value(json_object_get(j, "severity")),
                        "error");
    assert_int_equal(json_integer_value(json_object_get(j, "request")), 1);
    json_decref(j);
    audit_list_release(&l);
    free_xs(xs, N);
}

/* A title request whose reasoning used all 16 tokens: empty title,
 * finish_reason "length"; the harness sent it twice more. One finding,
 * naming max_tokens, the reasoning and the retries. */
static void test_reasoning_used_the_budget(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_list l;
    for (int k = 0; k < 3; k++) {
        json_t *b = xb_body(
            "m", json_pack("[o]", xb_msg("user", "Reply with a title for the "
                                                 "chat: hello there")));
        json_object_set_new(b, "max_tokens", json_integer(16));
        xb_init(&xs[k], k + 1, "ses_t", b);
        xs[k].kind = xstrdup("title");
        xb_reply(&xs[k], "", "The user says hello, so a title", NULL, 20, 16,
                 "length");
    }
    xb_init(&xs[3], 4, "ses_t",
            xb_body("m", json_pack("[o]", xb_msg("user", "hello there"))));
    xb_reply(&xs[3], "Hi!", "greet", NULL, 10, 2, "stop");
    run_audit(xs, 4, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "reasoning.budget");
    assert_non_null(f);
    assert_int_equal(f->sev, AUDIT_WARN);
    assert_int_equal(f->request, 1);
    assert_int_equal(ev_int(f, "max_tokens"), 16);
    assert_int_equal(ev_int(f, "retries"), 2);
    assert_int_equal(ev_int(f, "reasoning_bytes"), 31);
    assert_int_equal(count_prefix(&l, "reasoning.budget"), 1);
    audit_list_release(&l);
    free_xs(xs, 4);

    /* a stateless client asking one question (no history) three times
     * with max_tokens 8: it took what came, each time (info); the same
     * with history, sent again, is a harness that needed the text */
    for (int hist = 0; hist < 2; hist++) {
        for (int k = 0; k < 3; k++) {
            json_t *m = hist ? json_pack("[o, o, o]", xb_msg("user", "hi"),
                                         xb_msg("assistant", "Hello."),
                                         xb_msg("user", "What is 2+2?"))
                             : json_pack("[o]", xb_msg("user", "What is 2+2?"));
            json_t *b = xb_body("m", m);
            json_object_set_new(b, "max_tokens", json_integer(8));
            xb_init(&xs[k], k + 1, "ses_q", b);
            xb_reply(&xs[k], "", "Two plus two", NULL, 10, 8, "length");
        }
        run_audit(xs, 3, NULL, &l);
        f = find_rule(&l, "reasoning.budget");
        assert_non_null(f);
        assert_int_equal(f->sev, hist ? AUDIT_WARN : AUDIT_INFO);
        assert_int_equal(ev_int(f, "retries"), 2);
        audit_list_release(&l);
        free_xs(xs, 3);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_session_has_no_findings),
        cmocka_unit_test(test_sampling_expect_and_change),
        cmocka_unit_test(test_sampling_profile_on_capture),
        cmocka_unit_test(test_reasoning_policy),
        cmocka_unit_test(test_reasoning_on_opencode_capture),
        cmocka_unit_test(test_truncation_flat_and_below),
        cmocka_unit_test(test_truncation_pinned_run),
        cmocka_unit_test(test_unrendered_tools_are_not_truncation),
        cmocka_unit_test(test_truncation_limits_and_errors),
        cmocka_unit_test(test_first_message_claims),
        cmocka_unit_test(test_degeneration),
        cmocka_unit_test(test_stream_integrity),
        cmocka_unit_test(test_findings_sorted_most_severe_first),
        cmocka_unit_test(test_reasoning_used_the_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
