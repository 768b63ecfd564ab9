/*
 * Replays of real harness sessions kept in tests/fixtures/: the exchanges
 * record stored (xchg_to_json lines) are read back, regrouped and audited
 * as `fidelity audit` would. The opencode session
 * (tests/e2e/opencode/record_compaction.sh) compacted twice, the second
 * summary lost the history: two history.compaction, one
 * history.compaction_lost, the "first message" reply pointing at it, no
 * rewrite, and no reasoning.policy under "keep" although every reasoning
 * went back as streamed. Kilo's and Continue's sessions likewise, and each
 * with a tool call round trip and a user interrupt: one session, the side
 * requests attached, and no warn or error beyond what the test names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "audit_test.h"
#include "util/fixture.h"

static int add_positive(const struct xchg *x, void *ud)
{
    struct xchg c = *x;
    c.id = x->id < 0 ? -x->id : x->id; /* line numbers, as record's ids */
    audit_set_add(ud, &c);
    return 0;
}

static void replay(const char *name, struct audit_set *set,
                   const struct audit_opts *o, struct audit_list *l)
{
    struct diag d = {{0}};
    char *path = fixture_path(name);
    audit_set_init(set);
    int rc = xchg_spill_each(path, add_positive, set, &d);
    if (rc)
        fail_msg("cannot replay '%s': %s", path, d.msg);
    free(path);
    audit_set_attach_side(set);
    audit_set_order(set);
    audit_set_regroup(set);
    audit_list_init(l);
    audit_run(set, o, l);
}

static size_t count_rule(const struct audit_list *l, const char *rule)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        n += !strcmp(l->v[i].rule, rule);
    return n;
}

/* Prints every warn or error finding (so that a failure explains itself)
 * and returns how many are of none of the rules in allowed (NULL-ended). */
static size_t other_warnings(const struct audit_list *l,
                             const char *const *allowed)
{
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].sev < AUDIT_WARN)
            continue;
        print_message("%s %s\n", l->v[i].rule, l->v[i].summary);
        bool ok = false;
        for (size_t k = 0; allowed[k]; k++)
            ok |= !strcmp(l->v[i].rule, allowed[k]);
        n += !ok;
    }
    return n;
}

static const struct xchg *xchg_by_id(const struct audit_session *s, int64_t id)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->x[i]->id == id)
            return s->x[i];
    return NULL;
}

/* Prints the warn and error findings, so that a failure explains itself. */
static void print_warnings(const struct audit_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].sev >= AUDIT_WARN)
            print_message("%s %s\n", l->v[i].rule, l->v[i].summary);
}

/* The harness sent earlier reasoning back with tool calls exactly as it
 * was streamed: reasoning.sent counts some equal and none changed. */
static void assert_reasoning_as_streamed(const struct audit_list *l)
{
    const struct audit_finding *r = find_rule(l, "reasoning.sent");
    assert_non_null(r);
    json_t *wt = json_object_get(r->evidence, "with_tools");
    assert_true(json_integer_value(json_object_get(wt, "equal")) > 0);
    assert_int_equal(json_integer_value(json_object_get(wt, "changed")), 0);
}

/* The replay gave one session, with titles title requests and
 * compactions summary requests attached to it. */
static void one_session(const struct audit_set *set, const struct audit_list *l,
                        int titles, int compactions)
{
    assert_int_equal(set->n, 1);
    json_t *row = audit_session_json(&set->s[0], l);
    json_t *kinds = json_object_get(row, "requests");
    assert_int_equal(json_integer_value(json_object_get(kinds, "title")),
                     titles);
    assert_int_equal(json_integer_value(json_object_get(kinds, "compaction")),
                     compactions);
    json_decref(row);
}

/* The id of the first exchange whose reply called a tool whose result a
 * later request of the session sent back (a "tool" message answering
 * that call's id); -1 when none. */
static int64_t tool_round_trip(const struct audit_session *s)
{
    for (size_t i = 0; i < s->n; i++) {
        json_t *tc = json_object_get(s->x[i]->reply, "tool_calls");
        const char *id =
            json_string_value(json_object_get(json_array_get(tc, 0), "id"));
        if (!id)
            continue;
        for (size_t j = i + 1; j < s->n; j++) {
            /* a set's messages are views: the first req_msgs_n */
            for (size_t k = 0; k < s->x[j]->req_msgs_n; k++) {
                json_t *m = json_array_get(s->x[j]->req_msgs, k);
                const char *r = json_string_value(json_object_get(m, "role"));
                const char *c =
                    json_string_value(json_object_get(m, "tool_call_id"));
                if (r && c && !strcmp(r, "tool") && !strcmp(c, id))
                    return s->x[i]->id;
            }
        }
    }
    return -1;
}

/* The one history.interrupted finding: the exchange it names ended with
 * the client gone, and the request that went on is the one after it. */
static void assert_interrupt(const struct audit_list *l,
                             const struct audit_session *s)
{
    assert_int_equal(count_rule(l, "history.interrupted"), 1);
    const struct audit_finding *f = find_rule(l, "history.interrupted");
    assert_int_equal(f->sev, AUDIT_INFO);
    const struct xchg *p = xchg_by_id(s, ev_int(f, "prev_request"));
    assert_non_null(p);
    assert_int_equal(p->end, XCHG_CLIENT_GONE);
    assert_true(f->request > p->id);
}

static void test_opencode_two_compactions(void **state)
{
    (void)state;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_opts_init(&o);
    o.policy = AUDIT_POLICY_KEEP;
    replay("compaction-session.jsonl", &set, &o, &l);
    assert_int_equal(set.n, 1);
    print_warnings(&l);
    assert_int_equal(count_rule(&l, "history.compaction"), 2);
    assert_int_equal(count_rule(&l, "history.compaction_lost"), 1);
    assert_int_equal(count_rule(&l, "history.rewrite"), 0);
    assert_int_equal(count_rule(&l, "reasoning.policy"), 0);
    const struct audit_finding *lost = find_rule(&l, "history.compaction_lost");
    const struct audit_finding *f = find_rule(&l, "first_message.claim");
    assert_non_null(f);
    assert_int_equal(ev_int(f, "compaction_lost_request"),
                     ev_int(lost, "summary_request"));
    /* opencode sent the streamed reasoning back: equal, never changed */
    assert_reasoning_as_streamed(&l);
    audit_list_release(&l);
    audit_set_release(&set);
}

/* The Kilo CLI 7.7.7 (an opencode fork), the same script: its title
 * request comes under a header of its own ("title-ses_..."), and is
 * attached to the session it names. The sim's first summary kept none of
 * the facts (the code), the second claims there was no conversation. */
static void test_kilo_two_compactions(void **state)
{
    (void)state;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_opts_init(&o);
    o.policy = AUDIT_POLICY_KEEP;
    replay("../kilo-7.7.7/compaction-session.jsonl", &set, &o, &l);
    one_session(&set, &l, 1, 2);
    print_warnings(&l);
    assert_int_equal(count_rule(&l, "history.compaction"), 2);
    assert_int_equal(count_rule(&l, "history.compaction_lost"), 2);
    assert_int_equal(count_rule(&l, "first_message.claim"), 1);
    /* nothing else above info */
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 5);
    assert_reasoning_as_streamed(&l);
    audit_list_release(&l);
    audit_set_release(&set);
}

/* The Continue CLI 1.5.47 in its TUI, no session header: its title
 * requests (one user message "...please reply with a title for the chat",
 * max_tokens 16, no system prompt, no tools; record calls them main) whose
 * reasoning used the 16 tokens on every turn, a Read tool call run in
 * --auto and its result sent back, a reply interrupted with Esc while it
 * streamed (the client left, the next request has two user messages in a
 * row), and its /compact (the whole history plus "Please provide a
 * concise summary...", with tools) followed by [system, assistant(summary),
 * system, user]. One session, the title and summary requests attached,
 * the compaction found, the interrupt, the empty titles one budget
 * finding with Continue's 3 further tries, and no other warn or error. */
static void test_continue_titles_and_compact(void **state)
{
    (void)state;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_opts_init(&o);
    replay("../continue-1.5.47/session.jsonl", &set, &o, &l);
    one_session(&set, &l, 4, 1);
    static const char *const expected[] = {"history.compaction",
                                           "reasoning.budget", NULL};
    assert_int_equal(other_warnings(&l, expected), 0);
    assert_true(tool_round_trip(&set.s[0]) > 0);
    assert_interrupt(&l, &set.s[0]);
    assert_int_equal(count_rule(&l, "history.compaction"), 1);
    assert_int_equal(count_rule(&l, "reasoning.budget"), 1);
    const struct audit_finding *b = find_rule(&l, "reasoning.budget");
    assert_int_equal(ev_int(b, "max_tokens"), 16);
    assert_int_equal(ev_int(b, "retries"), 3);
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 2);
    audit_list_release(&l);
    audit_set_release(&set);
}

/* The Continue CLI 1.5.47 compacting by itself
 * (tests/e2e/continue/record_auto.sh: a 3,000-token context): the plain
 * history went out (exchange 9), then, before the next turn, the summary
 * request (exchange 11: the history, the new user turn and "Please provide
 * a concise summary...", with tools), and the history replaced by its
 * reply, [system, assistant(summary)], no user message left (exchange 12).
 * The sim's summary kept both codes; its reply to the summary alone, and
 * to Continue's "continue" after it, claims a first message, which is the
 * server's doing: the request carried the history, in the summary. One
 * session, the titles and the summary request attached, one
 * history.compaction naming the summary request, no rewrite and no lost
 * summary, the two claims blamed on the server with the summary named, the
 * budget finding of the empty titles, and no other warn or error. */
static void test_continue_auto_compaction(void **state)
{
    (void)state;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_opts_init(&o);
    replay("../continue-1.5.47/auto-compaction-session.jsonl", &set, &o, &l);
    one_session(&set, &l, 9, 1);
    static const char *const expected[] = {
        "history.compaction", "first_message.claim", "reasoning.budget", NULL};
    assert_int_equal(other_warnings(&l, expected), 0);
    assert_int_equal(count_rule(&l, "history.compaction"), 1);
    assert_int_equal(count_rule(&l, "history.rewrite"), 0);
    assert_int_equal(count_rule(&l, "history.compaction_lost"), 0);
    const struct audit_finding *c = find_rule(&l, "history.compaction");
    assert_int_equal(c->request, 12);
    assert_int_equal(ev_int(c, "summary_request"), 11);
    assert_non_null(xchg_by_id(&set.s[0], 11));
    assert_int_equal(count_rule(&l, "first_message.claim"), 2);
    for (size_t i = 0; i < l.n; i++) {
        const struct audit_finding *f = &l.v[i];
        if (strcmp(f->rule, "first_message.claim"))
            continue;
        assert_true(f->request == 12 || f->request == 14);
        assert_string_equal(
            json_string_value(json_object_get(f->evidence, "blame")), "server");
        assert_int_equal(ev_int(f, "summary_request"), 11);
        assert_null(json_object_get(f->evidence, "compaction_lost_request"));
    }
    assert_int_equal(count_rule(&l, "reasoning.budget"), 1);
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 4);
    audit_list_release(&l);
    audit_set_release(&set);
}

/* The Kilo CLI 7.7.7 (tests/e2e/kilo/record.sh): `kilo run` turns, the
 * prompts on stdin, a read tool call run and its result sent back, a reply
 * interrupted with Ctrl-C (SIGINT) while it streamed (Kilo sends back the
 * reasoning and an empty content in its place), one compaction whose
 * summary kept the facts, and a title request under a header of its own.
 * One session, the title and summary requests attached, the compaction,
 * the interrupt, and no other warn or error: the title came back with text
 * (max_tokens 1000), so no budget finding. */
static void test_kilo_tool_interrupt_compaction(void **state)
{
    (void)state;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_opts_init(&o);
    o.policy = AUDIT_POLICY_KEEP;
    replay("../kilo-7.7.7/session.jsonl", &set, &o, &l);
    one_session(&set, &l, 1, 1);
    static const char *const expected[] = {"history.compaction", NULL};
    assert_int_equal(other_warnings(&l, expected), 0);
    assert_true(tool_round_trip(&set.s[0]) > 0);
    assert_interrupt(&l, &set.s[0]);
    const struct audit_finding *f = find_rule(&l, "history.interrupted");
    assert_int_equal(ev_int(f, "partial_sent_bytes"), 0);
    assert_int_equal(count_rule(&l, "history.compaction"), 1);
    assert_int_equal(count_rule(&l, "history.compaction_lost"), 0);
    assert_int_equal(count_rule(&l, "reasoning.budget"), 0);
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 1);
    assert_reasoning_as_streamed(&l);
    audit_list_release(&l);
    audit_set_release(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opencode_two_compactions),
        cmocka_unit_test(test_kilo_two_compactions),
        cmocka_unit_test(test_continue_titles_and_compact),
        cmocka_unit_test(test_continue_auto_compaction),
        cmocka_unit_test(test_kilo_tool_interrupt_compaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
