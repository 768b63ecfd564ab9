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
        json_pack("[o, o, o]", xb_msg("system", "You are a title generator."),
                  xb_msg("user", "Generate a title for this conversation:"),
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

/* A stateless client sending one request 20 times: the same request sent
 * again is a retry of it (docs/AUDIT.md), one session, nothing above info;
 * one-shot requests that differ are sessions of their own, nothing
 * chained: a first message is no evidence by itself. */
static void test_one_shots_are_not_chained(void **state)
{
    (void)state;
    struct xchg xs[20];
    struct audit_list l;
    for (int k = 0; k < 20; k++)
        req(&xs[k], k + 1, json_pack("[o]", xb_msg("user", "What is 2+2?")),
            "4");
    struct audit_set *set = grouped(xs, 20, &l);
    assert_int_equal(set->n, 1);
    assert_int_equal(set->s[0].n, 20);
    assert_int_equal(audit_list_count(&l, AUDIT_WARN), 0);
    assert_int_equal(count_prefix(&l, "history.retry"), 19);
    done(set, &l, xs, 20);

    static const char *const asks[4] = {"What is 2+2?", "What is 3+3?",
                                        "Name a colour.", "What is 2+2? "};
    for (int k = 0; k < 4; k++)
        req(&xs[k], k + 1, json_pack("[o]", xb_msg("user", asks[k])), "4");
    set = grouped(xs, 4, &l);
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

/* Three conversations of one client without session headers, their
 * requests interleaved at random (seed), each request after the first
 * carrying its conversation's history and replies; turns 2 and 3 are
 * alike in every conversation ("yes", "go on", replies "OK."). The
 * variants: every
 * conversation starts differently; all three start with the same message
 * and get the same first reply; the first compacts its history after turn
 * 3 (a compaction request, then the summary in place of the history); the
 * second's first request is refused with 429 and sent again. */
enum shape_variant { V_DIFFERENT, V_SAME_START, V_COMPACTION, V_RETRY };

#define NCONV 3
#define NTURN 5
#define MAXREQ (NCONV * (NTURN + 2))

struct conv {
    json_t *msgs;
    int turn, step;
};

static unsigned lcg(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 16) & 0x7fff;
}

/* req() with the prompt tokens a server would count for the body. */
static void conv_req(struct xchg *x, long long id, json_t *msgs,
                     const char *reply)
{
    req(x, id, msgs, reply);
    json_object_set_new(json_object_get(x->reply, "usage"), "prompt_tokens",
                        json_integer(xb_tokens(x->req_body)));
    x->started = (double)id;
}

static size_t interleaved(struct xchg *xs, enum shape_variant v, unsigned seed)
{
    struct conv c[NCONV];
    size_t n = 0;
    for (int k = 0; k < NCONV; k++) {
        c[k].msgs = json_pack("[o]", xb_msg("system", SYS));
        c[k].turn = c[k].step = 0;
    }
    for (;;) {
        int live[NCONV], nl = 0;
        for (int k = 0; k < NCONV; k++)
            if (c[k].turn < NTURN)
                live[nl++] = k;
        if (!nl)
            break;
        int k = live[lcg(&seed) % (unsigned)nl];
        struct conv *cv = &c[k];
        struct xchg *x = &xs[n];
        char user[96], reply[96];
        if (v == V_SAME_START && cv->turn == 0) {
            snprintf(user, sizeof(user), "hello");
            snprintf(reply, sizeof(reply), "Hello! What shall we work on?");
        } else if (cv->turn == 1 || cv->turn == 2) {
            /* turns every conversation has alike: short replies and
             * answers that carry nothing of their own */
            snprintf(user, sizeof(user), cv->turn == 1 ? "yes" : "go on");
            snprintf(reply, sizeof(reply), "OK.");
        } else {
            snprintf(user, sizeof(user), "conversation %d, turn %d: do %c", k,
                     cv->turn, 'a' + (char)(cv->turn + 3 * k));
            snprintf(reply, sizeof(reply), "Done %c for conversation %d.",
                     'a' + (char)(cv->turn + 3 * k), k);
        }
        if (v == V_COMPACTION && k == 0 && cv->turn == 3 && cv->step == 0) {
            /* the compaction request: the history and an instruction */
            json_t *m = json_deep_copy(cv->msgs);
            json_array_append_new(
                m, xb_msg("user", "Summarize the conversation so far."));
            conv_req(x, (long long)n + 1, m,
                     "Summary: conversation 0 did a and d.");
            free(x->kind);
            x->kind = xstrdup("compaction");
            x->started = (double)n + 1;
            cv->step = 1;
            json_decref(cv->msgs);
            cv->msgs = json_pack(
                "[o, o]", xb_msg("system", SYS),
                xb_msg("user", "Summary: conversation 0 did a and d."));
            n++;
            continue;
        }
        json_array_append_new(cv->msgs, xb_msg("user", user));
        conv_req(x, (long long)n + 1, json_deep_copy(cv->msgs), reply);
        x->started = (double)n + 1;
        if (v == V_RETRY && k == 1 && cv->turn == 0 && cv->step == 0) {
            /* refused: no reply; the client sends the same again */
            x->status = 429;
            json_decref(x->reply);
            x->reply = json_object();
            json_array_remove(cv->msgs, json_array_size(cv->msgs) - 1);
            cv->step = 1;
            n++;
            continue;
        }
        json_array_append_new(cv->msgs, xb_msg("assistant", reply));
        cv->turn++;
        n++;
    }
    for (int k = 0; k < NCONV; k++)
        json_decref(c[k].msgs);
    return n;
}

static void test_interleaved_headerless_sessions(void **state)
{
    (void)state;
    static const char *const names[] = {"different starts", "same start",
                                        "compaction", "retried first"};
    for (int v = V_DIFFERENT; v <= V_RETRY; v++)
        for (unsigned seed = 1; seed <= 5; seed++) {
            struct xchg xs[MAXREQ];
            struct audit_list l;
            size_t n = interleaved(xs, (enum shape_variant)v, seed);
            struct audit_set *set = grouped(xs, n, &l);
            /* the compaction is found once (a warn, as with a header),
             * and nothing else is above info */
            size_t bad =
                audit_list_count(&l, AUDIT_WARN) -
                (v == V_COMPACTION ? count_prefix(&l, "history.compaction")
                                   : 0);
            bool short_one = false;
            for (size_t i = 0; i < set->n; i++)
                short_one |= set->s[i].n < NTURN;
            if (set->n != NCONV || bad || short_one) {
                fprintf(stderr, "%s, seed %u: %zu sessions, %zu warn+\n",
                        names[v], seed, set->n, bad);
                for (size_t i = 0; i < set->n; i++) {
                    fprintf(stderr, "  session %zu:", i);
                    for (size_t j = 0; j < set->s[i].n; j++)
                        fprintf(stderr, " %lld", (long long)set->s[i].x[j]->id);
                    fprintf(stderr, "\n");
                }
                for (size_t i = 0; i < l.n; i++)
                    if (l.v[i].sev >= AUDIT_WARN)
                        fprintf(stderr, "  %s %lld: %s\n", l.v[i].rule,
                                (long long)l.v[i].request, l.v[i].summary);
            }
            assert_int_equal(set->n, NCONV);
            assert_int_equal(bad, 0);
            /* each session holds one conversation's requests */
            for (size_t i = 0; i < set->n; i++)
                assert_true(set->s[i].n >= NTURN);
            if (v == V_COMPACTION) {
                const struct audit_finding *f =
                    find_rule(&l, "history.compaction");
                assert_non_null(f);
                assert_int_equal(count_prefix(&l, "history.compaction"), 1);
                assert_true(json_is_true(
                    json_object_get(f->evidence, "summary_found")));
            }
            if (v == V_RETRY)
                assert_non_null(find_rule(&l, "history.retry"));
            done(set, &l, xs, n);
        }
}

/* A parent whose reply calls tool `tool` with `prompt`, a session (its
 * own header) whose first user message is `child_text`, and the parent
 * getting the call's result back; checks whether the child was linked. */
static void subagent_case(const char *tool, const char *prompt,
                          const char *child_text, bool linked)
{
    struct xchg xs[4];
    struct audit_set set;
    json_t *m = json_pack("[o, o]", xb_msg("system", SYS),
                          xb_msg("user", "fix the crash"));
    json_t *args =
        json_pack("{s:s, s:s}", "description", "find", "prompt", prompt);
    char *arg_text = json_dumps(args, JSON_COMPACT);
    xb_init(&xs[0], 1, "ses_parent", xb_body("m", json_deep_copy(m)));
    xb_reply(&xs[0], "", NULL,
             json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", "call_task_1",
                       "type", "function", "function", "name", tool,
                       "arguments", arg_text),
             10, 5, "tool_calls");
    free(arg_text);
    json_decref(args);
    xb_init(&xs[1], 2, "ses_child",
            xb_body("m", json_pack("[o, o]", xb_msg("system", "Subagent."),
                                   xb_msg("user", child_text))));
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
    assert_null(audit_set_find(&set, "ses_parent")->parent);
    assert_null(audit_set_find(&set, "ses_other")->parent);
    if (!linked) {
        assert_null(c->parent);
    } else {
        assert_non_null(c->parent);
        assert_string_equal(c->parent, "ses_parent");
        assert_string_equal(c->parent_call, "call_task_1");
        assert_true(c->result_returned);
        json_t *row = audit_session_json(c, NULL);
        assert_string_equal(json_string_value(json_object_get(
                                json_object_get(row, "parent"), "session")),
                            "ses_parent");
        json_decref(row);
    }
    audit_set_release(&set);
    free_xs(xs, 4);
}

/* opencode's task tool: the child's first message is the call's prompt. */
static void test_subagent_linked_to_parent(void **state)
{
    (void)state;
    subagent_case("task", "Find the bug in main.c", "Find the bug in main.c",
                  true);
}

/* Continue names its tool "Subagent": tool names compare without case. */
static void test_subagent_tool_name_any_case(void **state)
{
    (void)state;
    subagent_case("Subagent", "Find the bug in main.c",
                  "Find the bug in main.c", true);
    subagent_case("read_file", "Find the bug in main.c",
                  "Find the bug in main.c", false);
}

/* Kilo appends <environment_details> to the subagent's first message: the
 * prompt followed by a line break and more is the same call; a prompt that
 * is only a word, or text that merely starts like it, is not. */
static void test_subagent_prompt_with_appended_block(void **state)
{
    (void)state;
    subagent_case("task", "Find the bug in main.c",
                  "Find the bug in main.c\n\n<environment_details>\n# cwd\n"
                  "/home/u/p\n</environment_details>",
                  true);
    subagent_case("task", "Find the bug", "Find the bug\nin main.c", false);
    subagent_case("task", "Find the bug in main.c",
                  "Find the bug in main.cpp and fix it", false);
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

/* Without a header, a title request sent before the turn it names
 * (opencode sends it beside the first turn): it quotes the next
 * conversation's first message, not the one under way, and joins the
 * next conversation, first in time, a title by its structure. */
static void test_title_before_its_turn_joins_it(void **state)
{
    (void)state;
    struct xchg xs[5];
    struct audit_list l;
    json_t *a = json_pack("[o, o]", xb_msg("system", SYS),
                          xb_msg("user", "fix the parser"));
    req(&xs[0], 1, json_deep_copy(a), "Fixed.");
    json_array_append_new(a, xb_echo(&xs[0]));
    json_array_append_new(a, xb_msg("user", "add a test for it"));
    req(&xs[1], 2, a, "Added.");
    xb_init(&xs[2], 3, "p:title",
            xb_body("m", json_pack("[o, o, o]",
                                   xb_msg("system", "You are a title "
                                                    "generator."),
                                   xb_msg("user", "Generate a title for this "
                                                  "conversation:"),
                                   xb_msg("user", "write a snake game"))));
    xs[2].kind = xstrdup("title");
    xs[2].started = 3;
    xb_reply(&xs[2], "Snake game", NULL, NULL, 10, 2, "stop");
    json_t *b = json_pack("[o, o]", xb_msg("system", SYS),
                          xb_msg("user", "write a snake game"));
    req(&xs[3], 4, json_deep_copy(b), "Here is the game.");
    json_array_append_new(b, xb_echo(&xs[3]));
    json_array_append_new(b, xb_msg("user", "save it to a file"));
    req(&xs[4], 5, b, "Saved.");
    struct audit_set *set = grouped(xs, 5, &l);
    assert_int_equal(set->n, 2);
    const struct audit_session *s = NULL;
    for (size_t i = 0; i < set->n; i++)
        if (set->s[i].n == 3)
            s = &set->s[i];
    assert_non_null(s);
    assert_int_equal(s->x[0]->id, 3);
    assert_int_equal(s->x[1]->id, 4);
    json_t *turns = audit_session_turns(s);
    static const char *const kinds[] = {"title", "main", "main"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(
                                json_array_get(turns, i), "kind")),
                            kinds[i]);
    json_decref(turns);
    done(set, &l, xs, 5);
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
            json_pack("[o, o, o]",
                      xb_msg("system", "You are a title generator."),
                      xb_msg("user", "Generate a title for this chat:"),
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
        cmocka_unit_test(test_interleaved_headerless_sessions),
        cmocka_unit_test(test_subagent_linked_to_parent),
        cmocka_unit_test(test_subagent_tool_name_any_case),
        cmocka_unit_test(test_subagent_prompt_with_appended_block),
        cmocka_unit_test(test_side_attached_by_exact_id),
        cmocka_unit_test(test_title_by_structure_not_by_word),
        cmocka_unit_test(test_title_before_its_turn_joins_it),
        cmocka_unit_test(test_title_needs_the_quote_not_the_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
