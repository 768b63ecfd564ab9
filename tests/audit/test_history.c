/*
 * Tests for the history rule (audit/history.c): the prefix relation on the
 * real opencode captures, compaction found in compact-02 -> compact-04,
 * and pruning, echo errors, rewrites and orphans injected into crafted or
 * captured requests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "audit_test.h"
#include "core/xalloc.h"

static json_t *msg_at(const char *file, size_t i)
{
    json_t *b = fixture_body(file);
    json_t *m = json_incref(json_array_get(json_object_get(b, "messages"), i));
    json_decref(b);
    return m;
}

/* The streamed form of tool_calls: arguments serialised with spaces, as
 * the server in mock-sse-reply-reasoning-toolcall.txt sent them. */
static json_t *streamed_calls(json_t *calls)
{
    json_t *c = json_deep_copy(calls), *tc;
    size_t i;
    json_array_foreach(c, i, tc)
    {
        json_t *f = json_object_get(tc, "function");
        json_t *a = json_loads(
            json_string_value(json_object_get(f, "arguments")), 0, NULL);
        char *spaced = json_dumps(a, 0);
        json_object_set_new(f, "arguments", json_string(spaced));
        free(spaced);
        json_decref(a);
    }
    return c;
}

/* plain-02, -03, -04, -06 with the replies each one got (taken from the
 * next capture, which echoes them). */
static void plain_chain(struct xchg xs[4])
{
    static const char *const files[] = {
        "plain-02-turn1-first-request.json",
        "plain-03-turn2-after-continue.json",
        "plain-04-turn2-after-write-tool-result.json",
        "plain-06-turn3-after-bash-tool-result.json"};
    for (int i = 0; i < 4; i++) {
        json_t *b = fixture_body(files[i]);
        assert_non_null(b);
        xb_init(&xs[i], i + 1, "ses_REDACTED", b);
    }
    json_t *m2 = msg_at(files[1], 2), *m4 = msg_at(files[2], 4);
    json_t *m6 = msg_at(files[3], 6);
    xb_reply(&xs[0], json_string_value(json_object_get(m2, "content")), NULL,
             NULL, 2600, 300, "stop");
    xb_reply(&xs[1], "", NULL,
             streamed_calls(json_object_get(m4, "tool_calls")), 2900, 240,
             "tool_calls");
    xb_reply(&xs[2], json_string_value(json_object_get(m6, "content")), NULL,
             NULL, 3200, 12, "stop");
    xb_reply(&xs[3], "The file exists.", NULL, NULL, 3400, 6, "stop");
    json_decref(m2);
    json_decref(m4);
    json_decref(m6);
}

static void test_prefix_holds_on_plain_captures(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_step st;
    struct audit_list l;
    plain_chain(xs);
    audit_history_step(&xs[0], &xs[1], NULL, &st);
    assert_int_equal(st.kind, AUDIT_STEP_PREFIX);
    assert_int_equal(st.expected, 3);
    assert_int_equal(st.kept, 3);
    assert_int_equal(st.added, 1);
    audit_history_step(&xs[1], &xs[2], NULL, &st);
    assert_int_equal(st.kind, AUDIT_STEP_PREFIX);
    assert_int_equal(st.kept, 5);
    assert_int_equal(st.added, 1);
    audit_history_step(&xs[2], &xs[3], NULL, &st);
    assert_int_equal(st.kind, AUDIT_STEP_PREFIX);
    assert_int_equal(st.kept, 7);
    assert_int_equal(st.added, 3);
    run_audit(xs, 4, NULL, &l);
    assert_int_equal(count_prefix(&l, "history."), 0);
    assert_non_null(find_rule(&l, "sampling.sent"));
    audit_list_release(&l);
    free_xs(xs, 4);
}

static void test_prune_in_capture(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_step st;
    struct audit_list l;
    plain_chain(xs);
    /* plain-06 with the write tool's result replaced in place */
    json_t *tool =
        json_array_get(json_object_get(xs[3].req_body, "messages"), 5);
    json_object_set_new(tool, "content", json_string("[pruned]"));
    audit_history_step(&xs[2], &xs[3], NULL, &st);
    assert_int_equal(st.kind, AUDIT_STEP_PRUNE);
    assert_int_equal(st.changed, 1);
    assert_int_equal(st.bytes_lost, 24 - 8);
    run_audit(xs, 4, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.prune");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    assert_int_equal(f->sev, AUDIT_WARN);
    json_t *p = json_array_get(json_object_get(f->evidence, "pruned"), 0);
    assert_string_equal(json_string_value(json_object_get(p, "tool_call_id")),
                        "call_267fb068_0");
    assert_int_equal(count_prefix(&l, "history."), 1);
    audit_list_release(&l);
    free_xs(xs, 4);
}

static void test_echo_error_in_capture(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_list l;
    plain_chain(xs);
    /* plain-03 sends back a shortened version of what was streamed */
    json_t *a = json_array_get(json_object_get(xs[1].req_body, "messages"), 2);
    json_object_set_new(a, "content", json_string("Here is a game."));
    run_audit(xs, 4, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.echo");
    assert_non_null(f);
    assert_int_equal(f->request, 2);
    assert_int_equal(f->sev, AUDIT_ERROR);
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "field")), "content");
    assert_true(ev_int(f, "streamed_bytes") > 500);
    assert_int_equal(ev_int(f, "index"), 2);
    audit_list_release(&l);
    free_xs(xs, 4);
}

static void test_rewrite_and_orphan_in_capture(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_list l;
    plain_chain(xs);
    /* plain-06 loses the write tool call (index 4): its result at 5 is
     * left orphaned and the history is rewritten */
    json_array_remove(json_object_get(xs[3].req_body, "messages"), 4);
    run_audit(xs, 4, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.rewrite");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    assert_int_equal(ev_int(f, "first_divergence"), 4);
    assert_true(ev_int(f, "bytes_lost") > 500);
    const struct audit_finding *o = find_rule(&l, "history.orphan");
    assert_non_null(o);
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(o->evidence, "orphans"), 0)),
                        "result:call_267fb068_0");
    audit_list_release(&l);
    free_xs(xs, 4);
}

static void compaction_session(struct xchg xs[3])
{
    json_t *code = msg_at("plain-03-turn2-after-continue.json", 2);
    json_t *summary = msg_at("compact-04-post-compaction-request.json", 2);
    xb_init(&xs[0], 10, "ses_REDACTED",
            fixture_body("compact-02-pre-compaction-request.json"));
    xb_init(&xs[1], 11, "ses_REDACTED",
            fixture_body("compact-03-compaction-summary-request.json"));
    xb_init(&xs[2], 12, "ses_REDACTED",
            fixture_body("compact-04-post-compaction-request.json"));
    xb_reply(&xs[0], json_string_value(json_object_get(code, "content")), NULL,
             NULL, 2600, 300, "stop");
    xb_reply(&xs[1], json_string_value(json_object_get(summary, "content")),
             NULL, NULL, 900, 40, "stop");
    xb_reply(&xs[2], "Nothing left to do.", NULL, NULL, 2500, 8, "stop");
    json_decref(code);
    json_decref(summary);
}

static void test_compaction_found_in_captures(void **state)
{
    (void)state;
    struct xchg xs[3];
    struct audit_step st;
    struct audit_list l;
    compaction_session(xs);
    /* the recorder left kind unset: audit classifies compact-03 itself */
    json_t *turns;
    struct audit_set set;
    audit_set_init(&set);
    for (int i = 0; i < 3; i++)
        audit_set_add(&set, &xs[i]);
    turns = audit_session_turns(&set.s[0]);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(turns, 1), "kind")),
        "compaction");
    json_decref(turns);
    audit_set_release(&set);

    audit_history_step(&xs[0], &xs[2], NULL, &st);
    assert_int_equal(st.kind, AUDIT_STEP_COMPACTION);
    assert_int_equal(st.kept, 1);
    assert_int_equal(st.removed, 2); /* the first user message and reply */
    run_audit(xs, 3, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.compaction");
    assert_non_null(f);
    assert_int_equal(f->request, 12);
    assert_int_equal(ev_int(f, "prev_request"), 10);
    assert_int_equal(ev_int(f, "summary_request"), 11);
    assert_true(json_is_true(json_object_get(f->evidence, "summary_found")));
    assert_true(
        json_is_true(json_object_get(f->evidence, "continue_injected")));
    assert_true(ev_int(f, "bytes_lost") > 500);
    assert_int_equal(count_prefix(&l, "history."), 1);
    audit_list_release(&l);
    free_xs(xs, 3);
}

/* opencode's title request (record left no kind) is a title by its
 * structure: it quotes the first message of the main request sent after
 * it (opencode sends it beside the first turn). Alone, quoting nothing
 * the session sent, its words ("You are a title generator") make it no
 * title: a main request. */
static void test_title_request_classified(void **state)
{
    (void)state;
    struct xchg x[2];
    struct audit_set set;
    xb_init(&x[0], 1, "s", fixture_body("plain-01-title-request.json"));
    xb_reply(&x[0], "Tic tac toe in Python", NULL, NULL, 100, 6, "stop");
    xb_init(&x[1], 2, "s", fixture_body("plain-02-turn1-first-request.json"));
    xb_reply(&x[1], "Here is the game.", NULL, NULL, 200, 6, "stop");
    for (int alone = 1; alone >= 0; alone--) {
        audit_set_init(&set);
        audit_set_add(&set, &x[0]);
        if (!alone)
            audit_set_add(&set, &x[1]);
        assert_int_equal(set.n, 1);
        json_t *turns = audit_session_turns(&set.s[0]);
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(turns, 0), "kind")),
                            alone ? "main" : "title");
        if (!alone)
            assert_string_equal(json_string_value(json_object_get(
                                    json_array_get(turns, 1), "kind")),
                                "main");
        json_decref(turns);
        audit_set_release(&set);
    }
    xb_release(&x[0]);
    xb_release(&x[1]);
}

/* Crafted: a harness that silently drops the oldest user turn. */
static void test_crafted_window_is_rewrite(void **state)
{
    (void)state;
    struct xchg xs[2];
    struct audit_list l;
    xb_init(
        &xs[0], 1, "w",
        xb_body("m", json_pack("[o, o]",
                               xb_msg("user", "The code for the door is 4812."),
                               xb_msg("user", "Remember it."))));
    xb_reply(&xs[0], "Noted.", NULL, NULL, 20, 2, "stop");
    xb_init(&xs[1], 2, "w",
            xb_body("m", json_pack("[o, o, o]", xb_msg("user", "Remember it."),
                                   xb_echo(&xs[0]),
                                   xb_msg("user", "What is the code?"))));
    run_audit(xs, 2, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.rewrite");
    assert_non_null(f);
    assert_int_equal(f->request, 2);
    assert_int_equal(ev_int(f, "first_divergence"), 0);
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(f->evidence, "removed"), 0)),
                     0);
    audit_list_release(&l);
    free_xs(xs, 2);
}

/* A crafted conversation: request k (id k+1) is request k-1's messages,
 * the assistant message echoing its reply (with the streamed reasoning when
 * echo_reasoning), then the user message users[k]. replies[k] and
 * reasoning[k] are what request k streamed. */
static void conversation(struct xchg *xs, size_t n, const char *const *users,
                         const char *const *replies,
                         const char *const *reasoning, bool echo_reasoning)
{
    json_t *msgs = json_pack("[o]", xb_msg("system", "You help."));
    for (size_t k = 0; k < n; k++) {
        if (k) {
            json_t *a = xb_echo(&xs[k - 1]);
            if (echo_reasoning && reasoning && reasoning[k - 1])
                json_object_set_new(a, "reasoning_content",
                                    json_string(reasoning[k - 1]));
            json_array_append_new(msgs, a);
        }
        json_array_append_new(msgs, xb_msg("user", users[k]));
        json_t *body = xb_body("m", json_deep_copy(msgs));
        json_object_set_new(body, "tools",
                            json_pack("[{s:s}]", "type", "function"));
        xb_init(&xs[k], (long long)k + 1, "ses_c", body);
        xb_reply(&xs[k], replies[k], reasoning ? reasoning[k] : NULL, NULL,
                 100 + 10 * (long)k, 5, "stop");
    }
    json_decref(msgs);
}

static size_t warn_or_error(const struct audit_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].sev >= AUDIT_WARN)
            print_message("unexpected: %s %s\n", l->v[i].rule, l->v[i].summary);
    return audit_list_count(l, AUDIT_WARN);
}

/* Agents often answer "Done." several times: each echo is compared with
 * the reply of the request it follows, never with an earlier "Done." whose
 * reasoning was different. */
static void test_equal_short_replies_link_by_structure(void **state)
{
    (void)state;
    enum { N = 5 };
    static const char *const users[N] = {"a", "b", "c", "d", "e"};
    static const char *const replies[N] = {"Done.", "Done.", "Done.", "Done.",
                                           "ok"};
    static const char *const reasoning[N] = {"first thought", "second",
                                             "third thought", "fourth", "x"};
    struct xchg xs[N];
    struct audit_list l;
    struct audit_opts o;
    conversation(xs, N, users, replies, reasoning, true);
    audit_opts_init(&o);
    o.policy = AUDIT_POLICY_KEEP;
    run_audit(xs, N, &o, &l);
    assert_int_equal(warn_or_error(&l), 0);
    const struct audit_finding *f = find_rule(&l, "reasoning.sent");
    assert_non_null(f);
    /* four earlier turns, each judged once, where it first appears */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(f->evidence, "with_tools"), "equal")),
                     4);
    audit_list_release(&l);
    /* requests 4 and 5 send request 3's reply back with request 2's
     * reasoning: changed,
     * and attributed to request 3, the one it follows */
    for (int k = 3; k < 5; k++) {
        json_t *m =
            json_array_get(json_object_get(xs[k].req_body, "messages"), 6);
        json_object_set_new(m, "reasoning_content", json_string("second"));
    }
    run_audit(xs, N, &o, &l);
    f = find_rule(&l, "reasoning.policy");
    assert_non_null(f);
    assert_int_equal(f->request, 4);
    json_t *t = json_array_get(json_object_get(f->evidence, "turns"), 0);
    assert_string_equal(json_string_value(json_object_get(t, "state")),
                        "changed");
    assert_int_equal(json_integer_value(json_object_get(t, "from_request")), 3);
    /* one finding per cause: request 5 repeats the turn as request 4 sent
     * it and is not reported again */
    assert_int_equal(count_prefix(&l, "reasoning.policy"), 1);
    audit_list_release(&l);
    free_xs(xs, N);
}

/* A request sent again after a 429 is a retry (info) naming the 429, not a
 * rewrite; the conversation goes on from the retry's reply. */
static void test_retry_after_429(void **state)
{
    (void)state;
    static const char *const users[3] = {"hi", "and then?", "thanks"};
    static const char *const replies[3] = {"Hello.", "Then this.", "Bye."};
    struct xchg xs[4];
    struct audit_list l;
    conversation(&xs[1], 3, users, replies, NULL, false);
    /* xs[0]: the first request, answered 429 with no reply */
    xb_init(&xs[0], 1, "ses_c", json_deep_copy(xs[1].req_body));
    xs[0].status = 429;
    xs[0].streamed = false;
    for (int k = 1; k < 4; k++)
        xs[k].id = k + 1;
    run_audit(xs, 4, NULL, &l);
    assert_int_equal(warn_or_error(&l), 0);
    const struct audit_finding *f = find_rule(&l, "history.retry");
    assert_non_null(f);
    assert_int_equal(f->sev, AUDIT_INFO);
    assert_int_equal(f->request, 2);
    assert_int_equal(ev_int(f, "prev_status"), 429);
    assert_int_equal(ev_int(f, "prev_request"), 1);
    assert_int_equal(count_prefix(&l, "history."), 1);
    audit_list_release(&l);
    /* the same one-shot request sent three times by a stateless client */
    struct xchg one[3];
    for (int k = 0; k < 3; k++) {
        xb_init(&one[k], k + 1, "p:one",
                xb_body("m", json_pack("[o]", xb_msg("user", "2+2?"))));
        xb_reply(&one[k], "4", NULL, NULL, 10, 1, "stop");
    }
    run_audit(one, 3, NULL, &l);
    assert_int_equal(warn_or_error(&l), 0);
    assert_int_equal(count_prefix(&l, "history.retry"), 2);
    audit_list_release(&l);
    free_xs(one, 3);
    free_xs(xs, 4);
}

/* The user interrupts a stream (the client leaves, the partial reply is
 * dropped, two user messages follow each other): history.interrupted. A
 * client that leaves right after [DONE] got everything: no finding. */
static void test_interrupt_and_close_after_done(void **state)
{
    (void)state;
    static const char *const users[3] = {"one", "two", "stop, do three"};
    static const char *const replies[3] = {"One.", "Tw", "Three."};
    struct xchg xs[3];
    struct audit_list l;
    conversation(xs, 3, users, replies, NULL, false);
    /* request 3 goes on without request 2's partial reply */
    json_t *msgs = json_object_get(xs[2].req_body, "messages");
    json_array_remove(msgs, 4);
    xs[1].end = XCHG_CLIENT_GONE;
    json_object_set_new(xs[1].reply, "done", json_false());
    json_object_del(xs[1].reply, "finish_reason");
    json_object_del(xs[1].reply, "usage");
    /* request 1's client closed right after [DONE] */
    xs[0].end = XCHG_CLIENT_GONE;
    run_audit(xs, 3, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.interrupted");
    assert_non_null(f);
    assert_int_equal(f->sev, AUDIT_INFO);
    assert_int_equal(f->request, 3);
    assert_int_equal(ev_int(f, "prev_request"), 2);
    assert_null(find_rule(&l, "history.rewrite"));
    /* request 1 is complete: no stream finding about it; request 2's
     * stream the user left is history's finding, not stream.incomplete
     * nor stream.no_usage */
    for (size_t i = 0; i < l.n; i++)
        assert_false(!strncmp(l.v[i].rule, "stream.", 7) &&
                     l.v[i].request <= 2);
    audit_list_release(&l);
    free_xs(xs, 3);
}

/* Request 3 after the user interrupted request 2 (the partial reply "Tw")
 * sends back an assistant message with content sent2 in its place: Kilo
 * keeps the reasoning and an empty content. */
static void interrupted_then(const char *sent2, struct audit_list *l)
{
    static const char *const users[3] = {"one", "two", "stop, do three"};
    static const char *const replies[3] = {"One.", "Tw", "Three."};
    static const char *const reasoning[3] = {"r1", "r2", "r3"};
    struct xchg xs[3];
    conversation(xs, 3, users, replies, reasoning, true);
    json_t *a = json_array_get(json_object_get(xs[2].req_body, "messages"), 4);
    json_object_set_new(a, "content", json_string(sent2));
    xs[1].end = XCHG_CLIENT_GONE;
    json_object_set_new(xs[1].reply, "done", json_false());
    json_object_del(xs[1].reply, "finish_reason");
    json_object_del(xs[1].reply, "usage");
    run_audit(xs, 3, NULL, l);
    free_xs(xs, 3);
}

/* A harness that sends back what it had of the interrupted reply (none of
 * its text, or a beginning of it) is the same user interrupt, not an echo
 * error (the Kilo CLI 7.7.7 after Ctrl-C: an empty content with the
 * reasoning); text the stream never carried still is an echo error. */
static void test_interrupt_partial_sent_back(void **state)
{
    (void)state;
    struct audit_list l;
    interrupted_then("", &l);
    const struct audit_finding *f = find_rule(&l, "history.interrupted");
    assert_non_null(f);
    assert_int_equal(f->request, 3);
    assert_int_equal(ev_int(f, "prev_request"), 2);
    assert_int_equal(ev_int(f, "partial_bytes"), 2);
    assert_int_equal(ev_int(f, "partial_sent_bytes"), 0);
    assert_null(find_rule(&l, "history.echo"));
    assert_int_equal(warn_or_error(&l), 0);
    audit_list_release(&l);

    interrupted_then("T", &l);
    f = find_rule(&l, "history.interrupted");
    assert_non_null(f);
    assert_int_equal(ev_int(f, "partial_sent_bytes"), 1);
    assert_non_null(strstr(f->summary, "1 of its partial reply's 2 bytes"));
    assert_int_equal(warn_or_error(&l), 0);
    audit_list_release(&l);

    /* opencode after Esc sends back exactly the text it received */
    interrupted_then("Tw", &l);
    f = find_rule(&l, "history.interrupted");
    assert_non_null(f);
    assert_int_equal(f->request, 3);
    assert_int_equal(ev_int(f, "partial_sent_bytes"), 2);
    for (size_t i = 0; i < l.n; i++)
        assert_false(!strncmp(l.v[i].rule, "stream.", 7) &&
                     l.v[i].request == 2);
    assert_int_equal(warn_or_error(&l), 0);
    audit_list_release(&l);

    interrupted_then("Two, done.", &l);
    assert_null(find_rule(&l, "history.interrupted"));
    assert_non_null(find_rule(&l, "history.echo"));
    audit_list_release(&l);
}

/* The user left before any text came: nothing to drop, still an
 * interrupt, and its stream is not reported again. */
static void test_interrupt_before_any_text(void **state)
{
    (void)state;
    static const char *const users[3] = {"one", "two", "stop, do three"};
    static const char *const replies[3] = {"One.", "", "Three."};
    struct xchg xs[3];
    struct audit_list l;
    conversation(xs, 3, users, replies, NULL, false);
    json_t *msgs = json_object_get(xs[2].req_body, "messages");
    json_array_remove(msgs, 4);
    for (int i = 0; i < 3; i++) {
        xs[i].streamed = true;
        json_object_set_new(xs[i].req_body, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
        json_object_set_new(xs[i].reply, "done", json_true());
    }
    xs[1].end = XCHG_CLIENT_GONE;
    json_object_set_new(xs[1].reply, "done", json_false());
    json_object_del(xs[1].reply, "finish_reason");
    json_object_del(xs[1].reply, "usage");
    run_audit(xs, 3, NULL, &l);
    const struct audit_finding *f = find_rule(&l, "history.interrupted");
    assert_non_null(f);
    assert_int_equal(f->request, 3);
    assert_int_equal(ev_int(f, "prev_request"), 2);
    assert_int_equal(ev_int(f, "partial_bytes"), 0);
    for (size_t i = 0; i < l.n; i++) {
        assert_false(!strncmp(l.v[i].rule, "stream.", 7) &&
                     l.v[i].request == 2);
        assert_true(l.v[i].sev == AUDIT_INFO);
    }
    audit_list_release(&l);
    free_xs(xs, 3);
}

/* A request that prunes a tool result and sends the reply back wrongly
 * gets both findings. */
static void test_prune_and_echo_both_reported(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_list l;
    plain_chain(xs);
    json_t *msgs = json_object_get(xs[3].req_body, "messages");
    json_object_set_new(json_array_get(msgs, 5), "content",
                        json_string("[pruned]"));
    json_object_set_new(json_array_get(msgs, 6), "content",
                        json_string("Something else."));
    run_audit(xs, 4, NULL, &l);
    const struct audit_finding *p = find_rule(&l, "history.prune");
    const struct audit_finding *e = find_rule(&l, "history.echo");
    assert_non_null(p);
    assert_non_null(e);
    assert_int_equal(p->request, 4);
    assert_int_equal(e->request, 4);
    assert_int_equal(ev_int(e, "index"), 6);
    audit_list_release(&l);
    free_xs(xs, 4);
}

#define ASK_SUMMARY                                                            \
    "Please provide a concise summary of our conversation so far"
#define LOST                                                                   \
    "I don't see any earlier message; this looks like the start of our "       \
    "conversation."

/* Continue's /compact, twice: the whole history plus a request to
 * summarise, with tools; its reply heads the next request between system
 * messages. The second summary lost the history. */
static void test_compaction_every_time_and_lost(void **state)
{
    (void)state;
    struct xchg xs[7];
    struct audit_list l;
    json_t *tools = json_pack("[{s:s}]", "type", "function");
    json_t *m = json_pack("[o, o]", xb_msg("system", "You are an agent."),
                          xb_msg("user", "The code is 4812."));
    const char *replies[7] = {
        "Noted.",     "Ok.",   "Summary: the codes are 4812 and 5523.",
        "Next done.", "Fine.", LOST,
        LOST};
    for (int k = 0; k < 7; k++) {
        if (k == 1)
            json_array_append_new(m, xb_msg("user", "Also 5523."));
        if (k == 2 || k == 5)
            json_array_append_new(m, xb_msg("user", ASK_SUMMARY));
        if (k == 3 || k == 6) {
            json_decref(m);
            m = json_pack(
                "[o, o, o, o]", xb_msg("system", "You are an agent."),
                xb_msg("assistant", replies[k - 1]),
                xb_msg("system", "Chat history compacted successfully."),
                xb_msg("user", k == 3 ? "next" : "What was the code?"));
        }
        if (k == 4)
            json_array_append_new(m, xb_msg("user", "and then?"));
        json_t *body = xb_body("m", json_deep_copy(m));
        json_object_set(body, "tools", tools);
        xb_init(&xs[k], k + 1, "ses_k", body);
        xb_reply(&xs[k], replies[k], NULL, NULL, 100 + k, 5, "stop");
        if (k != 2 && k != 5)
            json_array_append_new(m, xb_echo(&xs[k]));
        else
            json_array_remove(m, json_array_size(m) - 1);
    }
    json_decref(m);
    json_decref(tools);
    run_audit(xs, 7, NULL, &l);
    assert_int_equal(count_prefix(&l, "history.compaction"), 3);
    size_t comp = 0;
    for (size_t i = 0; i < l.n; i++)
        comp += !strcmp(l.v[i].rule, "history.compaction");
    assert_int_equal(comp, 2);
    assert_null(find_rule(&l, "history.rewrite"));
    const struct audit_finding *f = find_rule(&l, "history.compaction_lost");
    assert_non_null(f);
    assert_int_equal(f->sev, AUDIT_ERROR);
    assert_int_equal(f->request, 7);
    assert_int_equal(ev_int(f, "summary_request"), 6);
    assert_true(
        json_is_true(json_object_get(f->evidence, "first_message_claim")));
    /* the reply after it points at it and blames the harness */
    f = find_rule(&l, "first_message.claim");
    assert_non_null(f);
    assert_int_equal(f->request, 7);
    assert_int_equal(ev_int(f, "compaction_lost_request"), 6);
    assert_string_equal(
        json_string_value(json_object_get(f->evidence, "blame")), "harness");
    assert_int_equal(count_prefix(&l, "first_message"), 1);
    audit_list_release(&l);
    free_xs(xs, 7);
}

/* Continue's automatic compaction: the summary request carries the
 * history and the turn about to be sent; the history becomes [system,
 * assistant(summary)], then cn's own "continue". A summary that kept the
 * codes carries the history: a "first message" reply to it is the
 * server's doing. A request that then leaves the summary out carries
 * nothing of the earlier turns: the harness's. */
static void build_auto_compaction(struct xchg *xs, bool keep_summary)
{
    static const char *const sum = "Summary: the codes are 4812 and 5523.";
    json_t *sys = xb_msg("system", "You are an agent."), *m;
    m = json_pack("[O, o]", sys, xb_msg("user", "The code is 4812."));
    xb_init(&xs[0], 1, "ses_a", xb_body("m", json_deep_copy(m)));
    xb_reply(&xs[0], "Noted.", NULL, NULL, 100, 5, "stop");
    json_array_append_new(m, xb_echo(&xs[0]));
    json_array_append_new(m, xb_msg("user", "Also 5523."));
    xb_init(&xs[1], 2, "ses_a", xb_body("m", json_deep_copy(m)));
    xb_reply(&xs[1], "Ok.", NULL, NULL, 110, 5, "stop");
    json_array_append_new(m, xb_echo(&xs[1]));
    json_array_append_new(m, xb_msg("user", "A long note."));
    json_array_append_new(m, xb_msg("user", ASK_SUMMARY));
    xb_init(&xs[2], 3, "ses_a", xb_body("m", m));
    xb_reply(&xs[2], sum, NULL, NULL, 120, 9, "stop");
    m = json_pack("[O, o]", sys, xb_msg("assistant", sum));
    xb_init(&xs[3], 4, "ses_a", xb_body("m", json_deep_copy(m)));
    xb_reply(&xs[3], LOST, NULL, NULL, 40, 9, "stop");
    if (keep_summary) {
        json_array_append_new(m, xb_echo(&xs[3]));
    } else {
        json_decref(m);
        m = json_pack("[O]", sys);
    }
    json_array_append_new(m, xb_msg("user", "continue"));
    xb_init(&xs[4], 5, "ses_a", xb_body("m", m));
    xb_reply(&xs[4], LOST, NULL, NULL, 50, 9, "stop");
    json_decref(sys);
}

static const char *blame_of(const struct audit_list *l, int64_t request)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].request == request &&
            !strcmp(l->v[i].rule, "first_message.claim"))
            return json_string_value(
                json_object_get(l->v[i].evidence, "blame"));
    return NULL;
}

static void test_claim_after_kept_summary_blames_server(void **state)
{
    (void)state;
    struct xchg xs[5];
    struct audit_list l;
    build_auto_compaction(xs, true);
    run_audit(xs, 5, NULL, &l);
    const struct audit_finding *c = find_rule(&l, "history.compaction");
    assert_non_null(c);
    assert_int_equal(c->request, 4);
    assert_int_equal(ev_int(c, "summary_request"), 3);
    assert_null(find_rule(&l, "history.compaction_lost"));
    assert_string_equal(blame_of(&l, 4), "server");
    assert_string_equal(blame_of(&l, 5), "server");
    assert_int_equal(
        ev_int(find_rule(&l, "first_message.claim"), "summary_request"), 3);
    audit_list_release(&l);
    free_xs(xs, 5);
    /* the summary left out again: the earlier turns are gone */
    build_auto_compaction(xs, false);
    run_audit(xs, 5, NULL, &l);
    assert_string_equal(blame_of(&l, 4), "server");
    assert_string_equal(blame_of(&l, 5), "harness");
    audit_list_release(&l);
    free_xs(xs, 5);
}

/* Continue's title request: one user message asking for a title, a small
 * max_tokens, no system prompt and no tools: a title request by structure,
 * not a main one (no sampling.expect, no turn of its own). */
static void test_title_by_structure(void **state)
{
    (void)state;
    struct xchg xs[2];
    struct audit_list l;
    xb_init(&xs[0], 1, "ses_t",
            xb_body("m", json_pack("[o, o]", xb_msg("system", "Agent."),
                                   xb_msg("user", "hello"))));
    xb_reply(&xs[0], "Hi.", NULL, NULL, 10, 1, "stop");
    json_t *b = xb_body(
        "m", json_pack("[o]", xb_msg("user", "Given this message: hello, "
                                             "please reply with a title for "
                                             "the chat")));
    json_object_set_new(b, "max_tokens", json_integer(16));
    xb_init(&xs[1], 2, "ses_t", b);
    xb_reply(&xs[1], "Greeting", NULL, NULL, 10, 1, "stop");
    struct audit_opts o;
    audit_opts_init(&o);
    o.expect = json_pack("{s:f}", "temperature", 0.6);
    run_audit(xs, 2, &o, &l);
    const struct audit_finding *f = find_rule(&l, "sampling.expect");
    assert_non_null(f);
    /* only the main request is checked */
    assert_int_equal(ev_int(f, "requests"), 1);
    size_t titles = 0;
    for (size_t i = 0; i < l.n; i++)
        if (!strcmp(l.v[i].rule, "sampling.sent"))
            titles += !strcmp(
                json_string_value(json_object_get(l.v[i].evidence, "kind")),
                "title");
    assert_int_equal(titles, 1);
    audit_list_release(&l);
    json_decref(o.expect);
    free_xs(xs, 2);
}

/* A chat about book titles: record calls its requests "title" by the word
 * in the system prompt; the ones that carry a conversation are main
 * requests, checked like any (a word does not make a title). */
static void test_title_word_alone_is_no_title(void **state)
{
    (void)state;
    struct xchg xs[3];
    struct audit_list l;
    static const char *const users[3] = {"a book about the sea",
                                         "shorter, please", "one more"};
    json_t *m = json_pack("[o]", xb_msg("system", "You suggest titles for "
                                                  "books."));
    for (int k = 0; k < 3; k++) {
        json_array_append_new(m, xb_msg("user", users[k]));
        xb_init(&xs[k], k + 1, "ses_b", xb_body("m", json_deep_copy(m)));
        xs[k].kind = xstrdup("title");
        char reply[32];
        snprintf(reply, sizeof(reply), "The Tide %d", k);
        xb_reply(&xs[k], reply, NULL, NULL, 10 + 5 * k, 3, "stop");
        json_array_append_new(m, xb_msg("assistant", reply));
    }
    json_decref(m);
    struct audit_opts o;
    audit_opts_init(&o);
    o.expect = json_pack("{s:f}", "temperature", 0.6);
    run_audit(xs, 3, &o, &l);
    const struct audit_finding *f = find_rule(&l, "sampling.expect");
    assert_non_null(f);
    /* requests 2 and 3 carry the conversation, and request 1 quotes
     * nothing another request sent: all three are main requests */
    assert_int_equal(ev_int(f, "requests"), 3);
    audit_list_release(&l);
    json_decref(o.expect);
    free_xs(xs, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_holds_on_plain_captures),
        cmocka_unit_test(test_prune_in_capture),
        cmocka_unit_test(test_echo_error_in_capture),
        cmocka_unit_test(test_rewrite_and_orphan_in_capture),
        cmocka_unit_test(test_compaction_found_in_captures),
        cmocka_unit_test(test_title_request_classified),
        cmocka_unit_test(test_crafted_window_is_rewrite),
        cmocka_unit_test(test_equal_short_replies_link_by_structure),
        cmocka_unit_test(test_retry_after_429),
        cmocka_unit_test(test_interrupt_and_close_after_done),
        cmocka_unit_test(test_interrupt_before_any_text),
        cmocka_unit_test(test_interrupt_partial_sent_back),
        cmocka_unit_test(test_prune_and_echo_both_reported),
        cmocka_unit_test(test_compaction_every_time_and_lost),
        cmocka_unit_test(test_claim_after_kept_summary_blames_server),
        cmocka_unit_test(test_title_by_structure),
        cmocka_unit_test(test_title_word_alone_is_no_title),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
