/*
 * Tests for session grouping without a session header (audit/group.c):
 * each request gets record's own key (classify_session, the first system
 * and user message), then audit_set_regroup must put back together what a
 * window, a dropped turn or a summary split, keep concurrent sessions of one
 * harness apart, attach side requests and leave one-shot requests alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "audit_test.h"
#include "core/xalloc.h"
#include "store/classify.h"

#define SYS "You are a coding agent. Use the tools."

/* One request of a header-less harness: record's key for it, the same
 * system prompt and tools for every session. */
static void req(struct xchg *x, long long id, json_t *msgs, const char *reply)
{
    json_t *body = xb_body("m", msgs);
    json_object_set_new(body, "tools",
                        json_pack("[{s:s, s:{s:s}}]", "type", "function",
                                  "function", "name", "bash"));
    json_t *h = json_object();
    char *key = classify_session(h, body);
    json_decref(h);
    xb_init(x, id, key, body);
    free(key);
    x->started = (double)id;
    xb_reply(x, reply, NULL, NULL, 100 * id, 5, "stop");
}

static struct audit_set *grouped(struct xchg *xs, size_t n,
                                 struct audit_list *l)
{
    struct audit_set *set = xmalloc(sizeof(*set));
    struct audit_opts o;
    audit_set_init(set);
    audit_opts_init(&o);
    for (size_t i = 0; i < n; i++)
        audit_set_add(set, &xs[i]);
    audit_set_order(set);
    audit_set_regroup(set);
    audit_list_init(l);
    audit_run(set, &o, l);
    return set;
}

static void done(struct audit_set *set, struct audit_list *l, struct xchg *xs,
                 size_t n)
{
    audit_list_release(l);
    audit_set_release(set);
    free(set);
    free_xs(xs, n);
}

/* The session of the exchange with this id. */
static const char *session_of(const struct audit_set *set, long long id)
{
    for (size_t i = 0; i < set->n; i++)
        for (size_t j = 0; j < set->s[i].n; j++)
            if (set->s[i].x[j]->id == id)
                return set->s[i].id;
    return NULL;
}

/* Three sessions of one harness, interleaved, same system prompt and
 * tools, different users: three sessions, never merged. */
static void test_concurrent_sessions_stay_apart(void **state)
{
    (void)state;
    enum { S = 3, T = 4 };
    struct xchg xs[S * T];
    struct audit_list l;
    json_t *hist[S];
    for (int s = 0; s < S; s++)
        hist[s] = json_pack("[o]", xb_msg("system", SYS));
    for (int t = 0; t < T; t++)
        for (int s = 0; s < S; s++) {
            int k = t * S + s;
            char u[64], a[64];
            snprintf(u, sizeof(u), "session %d asks question %d", s, t);
            snprintf(a, sizeof(a), "Done.");
            json_array_append_new(hist[s], xb_msg("user", u));
            req(&xs[k], k + 1, json_deep_copy(hist[s]), a);
            json_array_append_new(hist[s], xb_echo(&xs[k]));
        }
    struct audit_set *set = grouped(xs, S * T, &l);
    assert_int_equal(set->n, S);
    for (int s = 0; s < S; s++) {
        const char *id = session_of(set, s + 1);
        assert_non_null(id);
        for (int t = 1; t < T; t++)
            assert_string_equal(session_of(set, t * S + s + 1), id);
    }
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 0);
    for (int s = 0; s < S; s++)
        json_decref(hist[s]);
    done(set, &l, xs, S * T);
}

/* A gateway that keeps the last 2 user turns: every request from the third
 * on starts with another user message (another record key), yet they are
 * one session, and each request that lost turns is a rewrite. */
static void test_window_stays_one_session(void **state)
{
    (void)state;
    enum { T = 5 };
    struct xchg xs[T];
    struct audit_list l;
    json_t *full = json_array();
    for (int t = 0; t < T; t++) {
        char u[64];
        snprintf(u, sizeof(u), "turn %d: the code is %d", t, 100 + t);
        json_array_append_new(full, xb_msg("user", u));
        /* system + the last 2 user turns and what follows them */
        size_t n = json_array_size(full), from = 0, users = 0;
        for (size_t i = n; i-- > 0;)
            if (!strcmp(json_string_value(
                            json_object_get(json_array_get(full, i), "role")),
                        "user") &&
                ++users == 2) {
                from = i;
                break;
            }
        json_t *msgs = json_pack("[o]", xb_msg("system", SYS));
        for (size_t i = from; i < n; i++)
            json_array_append(msgs, json_array_get(full, i));
        char a[32];
        snprintf(a, sizeof(a), "Noted %d.", t);
        req(&xs[t], t + 1, msgs, a);
        json_array_append_new(full, xb_echo(&xs[t]));
    }
    struct audit_set *set = grouped(xs, T, &l);
    assert_int_equal(set->n, 1);
    /* requests 3, 4, 5 each lost the oldest turn */
    size_t rewrites = 0;
    for (size_t i = 0; i < l.n; i++)
        if (!strcmp(l.v[i].rule, "history.rewrite")) {
            rewrites++;
            assert_true(l.v[i].request >= 3);
        }
    assert_int_equal(rewrites, 3);
    json_decref(full);
    done(set, &l, xs, T);
}

/* Without a header: a compaction request (record's kind) and the request
 * after it, whose head is the summary: one session, the compaction seen;
 * the title request shares the first user message and joins too. */
static void test_summary_head_stays_one_session(void **state)
{
    (void)state;
    struct xchg xs[5];
    struct audit_list l;
    json_t *m = json_pack("[o, o]", xb_msg("system", SYS),
                          xb_msg("user", "write a game"));
    req(&xs[0], 1, json_deep_copy(m), "Here is the game.");
    json_t *title =
        json_pack("[o, o]", xb_msg("system", "You are a title generator."),
                  xb_msg("user", "write a game"));
    xb_init(&xs[1], 2, "p:title", xb_body("m", title));
    xs[1].kind = xstrdup("title");
    xs[1].started = 2;
    xb_reply(&xs[1], "Game", NULL, NULL, 10, 1, "stop");
    json_array_append_new(m, xb_echo(&xs[0]));
    json_array_append_new(m, xb_msg("user", "save it to a file"));
    req(&xs[2], 3, json_deep_copy(m), "Saved.");
    json_t *sum = json_pack(
        "[o, o]", xb_msg("system", "Summarize the conversation."),
        xb_msg("user",
               "<conversation>[User]: write a game ...</conversation>"));
    xb_init(&xs[3], 4, "p:summary", xb_body("m", sum));
    xs[3].kind = xstrdup("compaction");
    xs[3].started = 4;
    xb_reply(&xs[3], "SUMMARY: a game was written and saved.", NULL, NULL, 50,
             9, "stop");
    req(&xs[4], 5,
        json_pack("[o, o, o, o]", xb_msg("system", SYS),
                  xb_msg("user", "What did we do so far?"),
                  xb_msg("assistant", "SUMMARY: a game was written and saved."),
                  xb_msg("user", "Continue if you have next steps.")),
        "Nothing left.");
    struct audit_set *set = grouped(xs, 5, &l);
    assert_int_equal(set->n, 1);
    const struct audit_finding *f = find_rule(&l, "history.compaction");
    assert_non_null(f);
    assert_int_equal(f->request, 5);
    assert_null(find_rule(&l, "history.rewrite"));
    json_decref(m);
    done(set, &l, xs, 5);
}

/* A stateless client sending the same one-shot request: one session each,
 * nothing chained, no finding above info. */
static void test_one_shots_are_not_chained(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_list l;
    for (int k = 0; k < 4; k++)
        req(&xs[k], k + 1, json_pack("[o]", xb_msg("user", "What is 2+2?")),
            "4");
    struct audit_set *set = grouped(xs, 4, &l);
    assert_int_equal(set->n, 4);
    /* regrouped sessions are whole: no parent, their rows build */
    for (size_t i = 0; i < set->n; i++) {
        assert_null(set->s[i].parent);
        json_t *row = audit_session_json(&set->s[i], &l);
        assert_true(json_is_null(json_object_get(row, "parent")));
        json_decref(row);
    }
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 0);
    assert_null(find_rule(&l, "history.retry"));
    done(set, &l, xs, 4);
}

/* opencode's task tool: the parent's reply calls task with a prompt, a
 * session (its own header) starts with that prompt as its first user
 * message, and the parent gets the call's result back. */
static void test_subagent_linked_to_parent(void **state)
{
    (void)state;
    struct xchg xs[4];
    struct audit_set set;
    json_t *m = json_pack("[o, o]", xb_msg("system", SYS),
                          xb_msg("user", "fix the crash"));
    xb_init(&xs[0], 1, "ses_parent", xb_body("m", json_deep_copy(m)));
    xb_reply(&xs[0], "", NULL,
             json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", "call_task_1",
                       "type", "function", "function", "name", "task",
                       "arguments",
                       "{\"description\": \"find\", \"prompt\": \"Find the "
                       "bug in main.c\"}"),
             10, 5, "tool_calls");
    xb_init(&xs[1], 2, "ses_child",
            xb_body("m", json_pack("[o, o]", xb_msg("system", "Subagent."),
                                   xb_msg("user", "Find the bug in main.c"))));
    xb_reply(&xs[1], "Line 12 divides by zero.", NULL, NULL, 10, 5, "stop");
    json_array_append_new(m, xb_echo(&xs[0]));
    json_array_append_new(m, json_pack("{s:s, s:s, s:s}", "role", "tool",
                                       "tool_call_id", "call_task_1", "content",
                                       "Line 12 divides by zero."));
    xb_init(&xs[2], 3, "ses_parent", xb_body("m", m));
    xb_reply(&xs[2], "Fixed.", NULL, NULL, 10, 5, "stop");
    xb_init(&xs[3], 4, "ses_other",
            xb_body("m", json_pack("[o]", xb_msg("user", "unrelated"))));
    audit_set_init(&set);
    for (int k = 0; k < 4; k++)
        audit_set_add(&set, &xs[k]);
    audit_set_link_subagents(&set);
    const struct audit_session *c = audit_set_find(&set, "ses_child");
    assert_non_null(c);
    assert_string_equal(c->parent, "ses_parent");
    assert_string_equal(c->parent_call, "call_task_1");
    assert_true(c->result_returned);
    assert_null(audit_set_find(&set, "ses_parent")->parent);
    assert_null(audit_set_find(&set, "ses_other")->parent);
    json_t *row = audit_session_json(c, NULL);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(row, "parent"), "session")),
                        "ses_parent");
    json_decref(row);
    audit_set_release(&set);
    free_xs(xs, 4);
}

/* A request under a session header of its own, no tools. */
static void hdr_req(struct xchg *x, long long id, const char *session,
                    const char *kind, json_t *msgs, int max_tokens)
{
    json_t *body = xb_body("m", msgs);
    if (max_tokens)
        json_object_set_new(body, "max_tokens", json_integer(max_tokens));
    xb_init(x, id, session, body);
    x->kind = kind ? xstrdup(kind) : NULL;
    x->started = (double)id;
    xb_reply(x, "ok", NULL, NULL, 10, 1, "stop");
}

static const struct audit_session *session_named(const struct audit_set *set,
                                                 const char *id)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->s[i].id && !strcmp(set->s[i].id, id))
            return &set->s[i];
    return NULL;
}

/* Side sessions join the session their id names exactly ("title-ses_1"
 * joins "ses_1"); a title session "ses_12" whose id only contains
 * "ses_1" stays a session of its own. */
static void test_side_attached_by_exact_id(void **state)
{
    (void)state;
    struct xchg xs[3];
    req(&xs[0], 1,
        json_pack("[o, o]", xb_msg("system", SYS),
                  xb_msg("user", "write a game")),
        "Here is the game.");
    free(xs[0].session);
    xs[0].session = xstrdup("ses_1");
    json_t *t =
        json_pack("[o, o]", xb_msg("system", "You are a title generator."),
                  xb_msg("user", "plan a trip"));
    hdr_req(&xs[1], 2, "ses_12", "title", t, 32);
    hdr_req(&xs[2], 3, "title-ses_1", "title",
            json_pack("[o, o]", xb_msg("system", "You are a title generator."),
                      xb_msg("user", "write a game")),
            32);
    struct audit_set set;
    audit_set_init(&set);
    for (size_t i = 0; i < 3; i++)
        audit_set_add(&set, &xs[i]);
    audit_set_attach_side(&set);
    audit_set_order(&set);
    assert_int_equal(set.n, 2);
    const struct audit_session *a = session_named(&set, "ses_1");
    const struct audit_session *b = session_named(&set, "ses_12");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->n, 2);
    assert_int_equal(b->n, 1);
    audit_set_release(&set);
    free_xs(xs, 3);
}

/* A session whose one short request only mentions a title (a question
 * about a book) is not a title request: under an id that names another
 * session it still stays its own. */
static void test_title_by_structure_not_by_word(void **state)
{
    (void)state;
    struct xchg xs[2];
    req(&xs[0], 1,
        json_pack("[o, o]", xb_msg("system", SYS),
                  xb_msg("user", "write a game")),
        "Here is the game.");
    free(xs[0].session);
    xs[0].session = xstrdup("ses_2");
    hdr_req(&xs[1], 2, "title-ses_2", "main",
            json_pack("[o]", xb_msg("user", "What is the title of the book "
                                            "you mentioned? One line.")),
            64);
    struct audit_set set;
    audit_set_init(&set);
    for (size_t i = 0; i < 2; i++)
        audit_set_add(&set, &xs[i]);
    audit_set_attach_side(&set);
    audit_set_order(&set);
    assert_int_equal(set.n, 2);
    assert_non_null(session_named(&set, "title-ses_2"));
    audit_set_release(&set);
    free_xs(xs, 2);
}

/* A title request is one by structure, not by its words: a request of
 * session "title-ses_3" with a system prompt about titles (record's kind
 * "title", by that word) whose user message quotes nothing ses_3 sent or
 * got is not ses_3's title request, and keeps its own session; the one
 * that quotes ses_3's first message joins it. */
static void test_title_needs_the_quote_not_the_word(void **state)
{
    (void)state;
    struct xchg xs[3];
    req(&xs[0], 1,
        json_pack("[o, o]", xb_msg("system", SYS),
                  xb_msg("user", "write a game")),
        "Here is the game.");
    free(xs[0].session);
    xs[0].session = xstrdup("ses_3");
    hdr_req(&xs[1], 2, "title-ses_3", "title",
            json_pack("[o, o]", xb_msg("system", "You are a title generator."),
                      xb_msg("user", "Name my novel about a lighthouse.")),
            32);
    struct audit_set set;
    audit_set_init(&set);
    for (size_t i = 0; i < 2; i++)
        audit_set_add(&set, &xs[i]);
    audit_set_attach_side(&set);
    audit_set_order(&set);
    assert_int_equal(set.n, 2);
    assert_non_null(session_named(&set, "title-ses_3"));
    audit_set_release(&set);
    /* the same session quoting ses_3's message joins it */
    hdr_req(&xs[2], 3, "title-ses_3", "title",
            json_pack("[o, o, o]",
                      xb_msg("system", "You are a title generator."),
                      xb_msg("user", "Generate a title for this chat:"),
                      xb_msg("user", "write a game")),
            32);
    audit_set_init(&set);
    audit_set_add(&set, &xs[0]);
    audit_set_add(&set, &xs[2]);
    audit_set_attach_side(&set);
    assert_int_equal(set.n, 1);
    assert_int_equal(set.s[0].n, 2);
    audit_set_release(&set);
    free_xs(xs, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_sessions_stay_apart),
        cmocka_unit_test(test_window_stays_one_session),
        cmocka_unit_test(test_summary_head_stays_one_session),
        cmocka_unit_test(test_one_shots_are_not_chained),
        cmocka_unit_test(test_subagent_linked_to_parent),
        cmocka_unit_test(test_side_attached_by_exact_id),
        cmocka_unit_test(test_title_by_structure_not_by_word),
        cmocka_unit_test(test_title_needs_the_quote_not_the_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
