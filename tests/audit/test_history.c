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

static void test_title_request_classified(void **state)
{
    (void)state;
    struct xchg x;
    struct audit_set set;
    xb_init(&x, 1, "s", fixture_body("plain-01-title-request.json"));
    audit_set_init(&set);
    audit_set_add(&set, &x);
    json_t *turns = audit_session_turns(&set.s[0]);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(turns, 0), "kind")),
        "title");
    json_decref(turns);
    audit_set_release(&set);
    xb_release(&x);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
