/*
 * history: rule 1. Request N+1 of a conversation should be request N's
 * messages, plus the reply as it was streamed, plus new tool and user
 * messages. Each step that is not is classified: compaction (history
 * replaced by a summary, "continue" injected), pruning (tool results
 * replaced in place, same tool_call_id), echo error (the assistant message
 * sent back differs from the stream) or rewrite; tool calls and results
 * left without their partner are reported as orphans.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "audit/audit_int.h"
#include "core/plural.h"
#include "core/xalloc.h"

static const char *const step_names[] = {"prefix", "echo", "prune",
                                         "compaction", "rewrite"};

const char *audit_step_name(enum audit_step_kind k)
{
    return step_names[k];
}

static const char *role_of(json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "";
}

static bool has_reply(const struct areq *p)
{
    return (p->content && *p->content) || json_array_size(p->tool_calls) > 0;
}

static size_t reply_bytes(const struct areq *p)
{
    size_t n = p->content ? strlen(p->content) : 0;
    /* an empty tool_calls array is no reply: it counts nothing */
    char *tc = json_array_size(p->tool_calls)
                   ? json_dumps(p->tool_calls, JSON_COMPACT)
                   : NULL;
    n += tc ? strlen(tc) : 0;
    free(tc);
    return n;
}

static bool same_arguments(json_t *a, json_t *b)
{
    const char *sa = json_string_value(a), *sb = json_string_value(b);
    if (!sa || !sb)
        return audit_json_same(a, b);
    if (!strcmp(sa, sb))
        return true;
    /* Harnesses re-serialise arguments ({"a": 1} -> {"a":1}). */
    json_t *ja = json_loads(sa, JSON_DECODE_ANY, NULL);
    json_t *jb = json_loads(sb, JSON_DECODE_ANY, NULL);
    bool same = ja && jb && audit_json_same(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return same;
}

static bool same_tool_calls(json_t *a, json_t *b)
{
    if (json_array_size(a) != json_array_size(b))
        return false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        json_t *fx = json_object_get(x, "function");
        json_t *fy = json_object_get(y, "function");
        if (!audit_json_same(json_object_get(x, "id"),
                             json_object_get(y, "id")) ||
            !audit_json_same(json_object_get(fx, "name"),
                             json_object_get(fy, "name")) ||
            !same_arguments(json_object_get(fx, "arguments"),
                            json_object_get(fy, "arguments")))
            return false;
    }
    return true;
}

/* Which part of the echoed assistant message m differs from p's reply:
 * NULL when none. */
static const char *echo_diff(const struct areq *p, json_t *m)
{
    if (strcmp(role_of(m), "assistant"))
        return "role";
    char *sent = audit_msg_text(m);
    const char *body = sent, *end = strstr(sent, "</think>");
    /* reasoning sent inline before the answer is rule 3's business */
    if (!strncmp(sent, "<think>", 7) && end)
        body = end + 8;
    bool same = !strcmp(body, p->content ? p->content : "");
    free(sent);
    if (!same)
        return "content";
    if (!same_tool_calls(p->tool_calls, json_object_get(m, "tool_calls")))
        return "tool_calls";
    return NULL;
}

static char *excerpt(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return xstrdup(s);
    return xasprintf("%.*s...", (int)max, s);
}

static void echo_evidence(const struct areq *p, const struct areq *r,
                          size_t idx, const char *field, json_t *ev)
{
    json_t *m = json_array_get(r->msgs, idx);
    char *sent = audit_msg_text(m);
    const char *streamed = p->content ? p->content : "";
    char *a = excerpt(streamed, 120), *b = excerpt(sent, 120);
    json_object_set_new(ev, "index", json_integer((json_int_t)idx));
    json_object_set_new(ev, "field", json_string(field));
    json_object_set_new(ev, "streamed_bytes",
                        json_integer((json_int_t)reply_bytes(p)));
    json_object_set_new(ev, "sent_bytes",
                        json_integer((json_int_t)r->mbytes[idx]));
    json_object_set_new(ev, "streamed", json_string(a));
    json_object_set_new(ev, "sent", json_string(b));
    json_object_set_new(
        ev, "streamed_tool_calls",
        json_integer((json_int_t)json_array_size(p->tool_calls)));
    json_object_set_new(ev, "sent_tool_calls",
                        json_integer((json_int_t)json_array_size(
                            json_object_get(m, "tool_calls"))));
    free(a);
    free(b);
    free(sent);
}

static bool has_hash(const struct areq *r, uint64_t h)
{
    for (size_t i = 0; i < r->nmsg; i++)
        if (r->mhash[i] == h)
            return true;
    return false;
}

/* Pruning: every differing message of prev is a tool result whose
 * tool_call_id is unchanged at the same index. */
static bool try_prune(const struct areq *p, const struct areq *r,
                      struct audit_step *st, json_t *ev)
{
    json_t *list = json_array();
    if (r->nmsg < p->nmsg)
        goto no;
    for (size_t i = 0; i < p->nmsg; i++) {
        if (p->mhash[i] == r->mhash[i])
            continue;
        json_t *a = json_array_get(p->msgs, i), *b = json_array_get(r->msgs, i);
        json_t *ida = json_object_get(a, "tool_call_id");
        if (strcmp(role_of(a), "tool") || strcmp(role_of(b), "tool") ||
            !json_is_string(ida) ||
            !audit_json_same(ida, json_object_get(b, "tool_call_id")))
            goto no;
        char *ta = audit_msg_text(a), *tb = audit_msg_text(b),
             *ex = excerpt(tb, 80);
        json_array_append_new(
            list, json_pack("{s:I, s:O, s:I, s:I, s:s}", "index", (json_int_t)i,
                            "tool_call_id", ida, "bytes_before",
                            (json_int_t)strlen(ta), "bytes_after",
                            (json_int_t)strlen(tb), "now", ex));
        st->bytes_lost += (int64_t)strlen(ta) - (int64_t)strlen(tb);
        st->changed++;
        free(ta);
        free(tb);
        free(ex);
    }
    st->kind = AUDIT_STEP_PRUNE;
    if (ev)
        json_object_set(ev, "pruned", list);
    json_decref(list);
    return true;
no:
    json_decref(list);
    st->changed = 0;
    st->bytes_lost = 0;
    return false;
}

static bool is_continue_injection(const char *t)
{
    static const char *const starts[] = {"continue if you have next steps",
                                         "continue from where",
                                         "please continue", "continue."};
    for (size_t i = 0; i < sizeof(starts) / sizeof(*starts); i++)
        if (!strncasecmp(t, starts[i], strlen(starts[i])))
            return true;
    return false;
}

/* Messages of prev (and its reply) that next no longer carries, and the
 * signs of a compaction: the summary, an injected "continue", a new
 * assistant message that no stream produced. */
static void removal(const struct areq *p, const struct areq *r,
                    const char *summary, struct audit_step *st, json_t *ev)
{
    json_t *removed = json_array();
    bool reply_kept = !has_reply(p), summary_seen = false, injected = false;
    bool new_assistant = false;
    for (size_t i = 0; i < p->nmsg; i++)
        if (!has_hash(r, p->mhash[i])) {
            st->removed++;
            st->bytes_lost += (int64_t)p->mbytes[i];
            json_array_append_new(removed, json_integer((json_int_t)i));
        }
    for (size_t i = 0; i < r->nmsg; i++) {
        json_t *m = json_array_get(r->msgs, i);
        char *t = audit_msg_text(m);
        bool from_prev = has_hash(p, r->mhash[i]);
        if (!reply_kept && !echo_diff(p, m))
            reply_kept = true; /* what follows continues normally */
        else if ((!from_prev || i < 4) && summary && *summary &&
                 strstr(t, summary))
            summary_seen = true; /* near the head: the same summary twice */
        else if (!from_prev && !strcmp(role_of(m), "user") &&
                 is_continue_injection(t))
            injected = true;
        else if (!from_prev && !reply_kept &&
                 !strcmp(role_of(m), "assistant") &&
                 !json_object_get(m, "tool_calls") && i + 1 < r->nmsg)
            new_assistant = true; /* a summary no stream produced */
        free(t);
    }
    /* A head replaced in place: the messages removed are one block of
     * two or more starting where the requests part, and a message no
     * earlier request carried (user or assistant) stands there instead:
     * a gateway's or harness's summary, whether or not a summary request
     * was seen. A window or dropped turns leave no such message; an edited
     * first message replaces one. */
    size_t block = 0;
    for (size_t i = st->kept; i < p->nmsg && !has_hash(r, p->mhash[i]); i++)
        block++;
    bool in_place = block >= 2 && block == st->removed && st->kept < r->nmsg &&
                    !has_hash(p, r->mhash[st->kept]) &&
                    (r->mrole[st->kept] == AROLE_USER ||
                     r->mrole[st->kept] == AROLE_ASSISTANT);
    if (!reply_kept) {
        st->removed++;
        st->bytes_lost += (int64_t)reply_bytes(p);
        json_array_append_new(removed, json_string("reply"));
    }
    st->kind =
        (summary_seen || injected || in_place || (new_assistant && st->removed))
            ? AUDIT_STEP_COMPACTION
            : AUDIT_STEP_REWRITE;
    if (ev) {
        json_object_set_new(ev, "removed", removed);
        json_object_set_new(ev, "replaced_in_place", json_boolean(in_place));
        json_object_set_new(ev, "summary_found", json_boolean(summary_seen));
        json_object_set_new(ev, "continue_injected", json_boolean(injected));
    } else {
        json_decref(removed);
    }
}

void audit_step_views(const struct areq *p, const struct areq *r,
                      const char *summary, struct audit_step *st, json_t *ev)
{
    size_t np = p->nmsg, k = areq_common(p, r);
    memset(st, 0, sizeof(*st));
    st->expected = np + has_reply(p);
    st->kept = k;
    if (k == np && (!has_reply(p) || r->nmsg > np)) {
        const char *d =
            has_reply(p) ? echo_diff(p, json_array_get(r->msgs, np)) : NULL;
        st->kept = np + (has_reply(p) && !d);
        st->added = r->nmsg - st->kept;
        if (d && strcmp(d, "role")) {
            st->kind = AUDIT_STEP_ECHO;
            st->changed = 1;
            st->added--;
            st->bytes_lost = (int64_t)reply_bytes(p) - (int64_t)r->mbytes[np];
            if (ev)
                echo_evidence(p, r, np, d, ev);
            return;
        }
        if (!d)
            return; /* AUDIT_STEP_PREFIX */
        st->kept = np;
        st->added = r->nmsg - np;
    }
    if (k == np || !try_prune(p, r, st, ev)) {
        st->added = r->nmsg > k ? r->nmsg - k : 0;
        removal(p, r, summary, st, ev);
        if (ev)
            json_object_set_new(ev, "first_divergence",
                                json_integer((json_int_t)k));
    } else {
        st->added = r->nmsg - np;
    }
}

static struct areq *view_alone(const struct xchg *x)
{
    struct audit_session s = {
        .id = (char *)"", .x = (struct xchg **)&x, .n = 1};
    return areqs_build(&s);
}

void audit_history_step(const struct xchg *prev, const struct xchg *next,
                        const char *summary, struct audit_step *out)
{
    struct areq *p = view_alone(prev), *r = view_alone(next);
    audit_step_views(p, r, summary, out, NULL);
    areqs_free(p, 1);
    areqs_free(r, 1);
}

/* Reply of the latest compaction request between prev and i. */
static const char *summary_between(struct actx *c, long prev, size_t i)
{
    for (size_t j = i; j-- > (size_t)(prev + 1);)
        if (!strcmp(c->r[j].kind, "compaction") && c->r[j].content)
            return c->r[j].content;
    return NULL;
}

static void report_step(struct actx *c, size_t i, const struct audit_step *st,
                        json_t *ev)
{
    struct areq *r = &c->r[i], *p = &c->r[r->prev];
    json_object_set_new(ev, "prev_request", json_integer(p->x->id));
    json_object_set_new(ev, "expected_messages",
                        json_integer((json_int_t)st->expected));
    json_object_set_new(ev, "messages", json_integer((json_int_t)r->nmsg));
    json_object_set_new(ev, "kept", json_integer((json_int_t)st->kept));
    json_object_set_new(ev, "bytes_lost", json_integer(st->bytes_lost));
    json_object_set_new(ev, "bytes_before",
                        json_integer((json_int_t)(p->msg_bytes)));
    json_object_set_new(ev, "bytes_after",
                        json_integer((json_int_t)r->msg_bytes));
    switch (st->kind) {
    case AUDIT_STEP_PREFIX:
        json_decref(ev);
        break;
    case AUDIT_STEP_ECHO:
        audit_finding_add(c, AUDIT_ERROR, "history.echo", r, ev,
                          "assistant message %zu sent back differs from the "
                          "streamed reply of request %lld (%s)",
                          st->kept, (long long)p->x->id,
                          json_string_value(json_object_get(ev, "field")));
        break;
    case AUDIT_STEP_PRUNE:
        audit_finding_add(
            c, AUDIT_WARN, "history.prune", r, ev,
            "%zu tool result%s replaced in place, %lld bytes lost", st->changed,
            plural_s(st->changed), (long long)st->bytes_lost);
        break;
    case AUDIT_STEP_COMPACTION:
        audit_finding_add(c, AUDIT_WARN, "history.compaction", r, ev,
                          "history compacted: %zu of %zu message%s removed, "
                          "%zu -> %zu bytes",
                          st->removed, st->expected, plural_s(st->expected),
                          p->msg_bytes, r->msg_bytes);
        break;
    case AUDIT_STEP_REWRITE:
        audit_finding_add(c, AUDIT_ERROR, "history.rewrite", r, ev,
                          "history rewritten: %zu message%s removed from %zu, "
                          "first difference at message %zu, %lld bytes lost",
                          st->removed, plural_s(st->removed), st->expected,
                          st->kept, (long long)st->bytes_lost);
        break;
    }
}

/* Tool-call ids of r without a result after them, and tool results whose
 * id no earlier assistant message called, as "call:ID" / "result:ID". */
static json_t *orphans(const struct areq *r)
{
    json_t *out = json_array(), *calls = json_object();
    for (size_t i = 0; i < r->nmsg; i++) {
        json_t *m = json_array_get(r->msgs, i), *tc;
        size_t k;
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        if (!strcmp(role_of(m), "tool")) {
            if (!id || !json_object_get(calls, id))
                json_array_append_new(
                    out, json_sprintf("result:%s", id ? id : "(none)"));
            else
                json_object_set_new(calls, id, json_true());
        }
        json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
        {
            const char *cid = json_string_value(json_object_get(tc, "id"));
            if (cid)
                json_object_set_new(calls, cid, json_false());
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach(calls, k, v)
    {
        if (json_is_false(v))
            json_array_append_new(out, json_sprintf("call:%s", k));
    }
    json_decref(calls);
    return out;
}

static bool in_array(json_t *a, json_t *v)
{
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        if (json_equal(x, v))
            return true;
    }
    return false;
}

/* Orphans of r that its predecessor did not have. When r extends its
 * predecessor (link_k), only the messages from link_k on are new: a result
 * there is an orphan when no call of the session so far has its id (called
 * holds every call id the session's requests carried), a call there when
 * no result follows it in r. Otherwise r is compared whole with its
 * predecessor. Linear in the new messages. */
static json_t *fresh_orphans(struct actx *c, size_t i, json_t *called)
{
    struct areq *r = &c->r[i];
    json_t *fresh = json_array();
    size_t from = r->prev >= 0 && r->link_k ? r->link_k : 0;
    if (!from) {
        json_t *now = orphans(r), *before = NULL, *v;
        size_t k;
        if (r->prev >= 0)
            before = orphans(&c->r[r->prev]);
        json_array_foreach(now, k, v)
        {
            if (!before || !in_array(before, v))
                json_array_append(fresh, v);
        }
        json_decref(now);
        json_decref(before);
    }
    json_t *pending = json_object();
    for (size_t k = from; k < r->nmsg; k++) {
        if (r->mrole[k] != AROLE_TOOL && r->mrole[k] != AROLE_ASSISTANT)
            continue;
        json_t *m = json_array_get(r->msgs, k), *tc;
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        size_t t;
        if (r->mrole[k] == AROLE_TOOL) {
            if (from && (!id || !json_object_get(called, id)))
                json_array_append_new(
                    fresh, json_sprintf("result:%s", id ? id : "(none)"));
            if (id)
                json_object_del(pending, id);
        }
        json_array_foreach(json_object_get(m, "tool_calls"), t, tc)
        {
            const char *cid = json_string_value(json_object_get(tc, "id"));
            if (!cid)
                continue;
            json_object_set_new(called, cid, json_true());
            json_object_set_new(pending, cid, json_true());
        }
    }
    const char *k;
    json_t *v;
    json_object_foreach(pending, k, v)
    {
        json_t *s = json_sprintf("call:%s", k);
        if (from)
            json_array_append(fresh, s);
        json_decref(s);
    }
    json_decref(pending);
    return fresh;
}

static void report_orphans(struct actx *c, struct areq *r, json_t *fresh)
{
    if (json_array_size(fresh))
        audit_finding_add(c, AUDIT_ERROR, "history.orphan", r,
                          json_pack("{s:O}", "orphans", fresh),
                          "%zu %s without %s partner", json_array_size(fresh),
                          plural(json_array_size(fresh), "tool call or result",
                                 "tool calls or results"),
                          plural(json_array_size(fresh), "its", "their"));
}

/* Tool results among orphans: with a compaction, their calls went into the
 * summary; they belong to the compaction, not to an orphan finding. */
static json_t *take_results(json_t *orph)
{
    json_t *res = json_array(), *rest = json_array(), *v;
    size_t k;
    json_array_foreach(orph, k, v)
    {
        const char *s = json_string_value(v);
        json_array_append(strncmp(s, "result:", 7) ? rest : res, v);
    }
    json_array_clear(orph);
    json_array_extend(orph, rest);
    json_decref(rest);
    return res;
}

static void report_retry(struct actx *c, struct areq *r)
{
    struct areq *p = &c->r[r->prev];
    const char *end =
        p->x->end == XCHG_COMPLETE ? "" : xchg_end_name(p->x->end);
    audit_finding_add(
        c, AUDIT_INFO, "history.retry", r,
        json_pack("{s:I, s:i, s:s, s:I}", "prev_request", (json_int_t)p->x->id,
                  "prev_status", p->x->status, "prev_end", end, "messages",
                  (json_int_t)r->nmsg),
        "the same request as %lld sent again (that one got %d%s%s)",
        (long long)p->x->id, p->x->status, *end ? ", " : "", end);
}

/* Pruning and a wrong echo are two causes: a pruned request whose
 * message at the reply's position differs from the stream gets its own
 * history.echo too. */
static void echo_after_prune(struct actx *c, size_t i)
{
    struct areq *r = &c->r[i], *p = &c->r[r->prev];
    if (!has_reply(p) || r->nmsg <= p->nmsg)
        return;
    const char *d = echo_diff(p, json_array_get(r->msgs, p->nmsg));
    if (!d || !strcmp(d, "role"))
        return;
    json_t *ev = json_object();
    echo_evidence(p, r, p->nmsg, d, ev);
    json_object_set_new(ev, "prev_request", json_integer(p->x->id));
    audit_finding_add(
        c, AUDIT_ERROR, "history.echo", r, ev,
        "assistant message %zu sent back differs from the streamed "
        "reply of request %lld (%s)",
        p->nmsg, (long long)p->x->id, d);
}

/* Digit runs of 3 or more in t (codes, numbers, years), as keys of obj. */
static void add_facts(json_t *obj, const char *t)
{
    for (const char *p = t; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        size_t n = strspn(p, "0123456789");
        if (n >= 3 && n < 40) {
            char k[40];
            memcpy(k, p, n);
            k[n] = 0;
            json_object_set_new(obj, k, json_true());
        }
        p += n;
    }
}

static const char *user_agent(const struct xchg *x)
{
    const char *k;
    json_t *v;
    json_object_foreach(x->req_headers, k, v)
    {
        if (!strcasecmp(k, "user-agent") && json_is_string(v))
            return json_string_value(v);
    }
    return "unknown";
}

/* history.compaction_lost: the summary request (sj) that the compaction
 * at request i relied on lost what it was given: its reply claims there
 * was no earlier conversation, or it kept none of the facts (digit runs)
 * of the transcript and user turns it summarised. */
static void check_summary(struct actx *c, size_t i, size_t sj)
{
    struct areq *q = &c->r[sj], *r = &c->r[i], *p = &c->r[r->prev];
    const char *sum = q->content ? q->content : "";
    bool claim = audit_is_first_message_claim(sum) ||
                 (q->reasoning && audit_is_first_message_claim(q->reasoning));
    json_t *facts = json_object(), *lost = json_array();
    size_t kept = 0;
    const char *k;
    json_t *v;
    for (size_t m = 0; m < q->nmsg; m++)
        if (q->mrole[m] == AROLE_USER || q->mrole[m] == AROLE_ASSISTANT) {
            char *t = audit_msg_text(json_array_get(q->msgs, m));
            add_facts(facts, t);
            free(t);
        }
    for (size_t m = 0; m < p->nmsg; m++)
        if (p->mrole[m] == AROLE_USER) {
            char *t = audit_msg_text(json_array_get(p->msgs, m));
            add_facts(facts, t);
            free(t);
        }
    json_object_foreach(facts, k, v)
    {
        if (strstr(sum, k))
            kept++;
        else if (json_array_size(lost) < 10)
            json_array_append_new(lost, json_string(k));
    }
    size_t total = json_object_size(facts);
    json_decref(facts);
    if (!claim && (total < 2 || kept > 0)) {
        json_decref(lost);
        return;
    }
    const char *ua = user_agent(q->x);
    size_t ual = strcspn(ua, " ");
    char *ex = excerpt(sum, 160);
    audit_finding_add(
        c, AUDIT_ERROR, "history.compaction_lost", r,
        json_pack("{s:I, s:I, s:b, s:I, s:I, s:o, s:s%, s:s}",
                  "summary_request", (json_int_t)q->x->id, "prev_request",
                  (json_int_t)p->x->id, "first_message_claim", claim, "facts",
                  (json_int_t)total, "facts_kept", (json_int_t)kept, "lost",
                  lost, "harness", ua, ual, "summary", ex),
        "the summary of request %lld that replaced the history %s; "
        "the harness (%.*s) went on with it",
        (long long)q->x->id,
        claim ? "says there was no earlier conversation"
              : "kept none of the facts it was given",
        (int)ual, ua);
    free(ex);
    r->lost_summary = q->x->id;
}

/* The assistant message m a harness sent back in place of p's interrupted
 * reply keeps at most the part of it the client had: no tool calls, and
 * content empty or a beginning of the partial text (Kilo keeps the
 * reasoning and an empty content). */
static bool is_partial_kept(const struct areq *p, json_t *m)
{
    if (strcmp(role_of(m), "assistant") ||
        json_array_size(json_object_get(m, "tool_calls")) > 0)
        return false;
    char *sent = audit_msg_text(m);
    const char *have = p->content ? p->content : "";
    bool part = !strncmp(have, sent, strlen(sent));
    free(sent);
    return part;
}

/* Whether the step from p sent an assistant message back in place of p's
 * reply: a differing one (an echo), or p's partial text verbatim (opencode
 * after Esc), which reads as a plain continuation. */
static bool sent_back(const struct areq *p, const struct audit_step *st)
{
    return st->kind == AUDIT_STEP_ECHO ||
           (st->kind == AUDIT_STEP_PREFIX && has_reply(p) && !p->finish);
}

/* A user interrupt: the predecessor's stream ended with the client gone
 * (no final event), and the request carries everything before it but not
 * its partial reply (or the client left before any text came), or an
 * assistant message in its place that keeps at most the partial text;
 * a user message follows. */
static bool is_interrupt(const struct areq *p, const struct areq *r,
                         const struct audit_step *st)
{
    /* a partial sent back verbatim counts as kept by the step */
    size_t base = p->nmsg + (st->kind == AUDIT_STEP_PREFIX && sent_back(p, st));
    if (p->x->end != XCHG_CLIENT_GONE || st->kept != base)
        return false;
    bool dropped = st->kind == AUDIT_STEP_REWRITE && st->removed == 1;
    bool none = st->kind == AUDIT_STEP_PREFIX && !has_reply(p);
    size_t next = p->nmsg;
    if (sent_back(p, st) &&
        is_partial_kept(p, json_array_get(r->msgs, p->nmsg)))
        next++;
    else if (!dropped && !none)
        return false;
    return r->nmsg > next && r->mrole[next] != AROLE_ASSISTANT;
}

static void report_interrupt(struct actx *c, size_t i,
                             const struct audit_step *st, json_t *ev)
{
    static const char *const echo_keys[] = {"index",
                                            "field",
                                            "streamed_bytes",
                                            "streamed",
                                            "sent",
                                            "sent_bytes",
                                            "removed",
                                            "summary_found",
                                            "continue_injected",
                                            "sent_tool_calls",
                                            "streamed_tool_calls"};
    struct areq *r = &c->r[i], *p = &c->r[r->prev];
    size_t sent = 0;
    if (sent_back(p, st)) {
        char *t = audit_msg_text(json_array_get(r->msgs, p->nmsg));
        sent = strlen(t);
        free(t);
    }
    for (size_t k = 0; k < sizeof(echo_keys) / sizeof(*echo_keys); k++)
        json_object_del(ev, echo_keys[k]);
    json_object_set_new(ev, "prev_request", json_integer(p->x->id));
    json_object_set_new(ev, "partial_bytes",
                        json_integer((json_int_t)reply_bytes(p)));
    json_object_set_new(ev, "partial_sent_bytes",
                        json_integer((json_int_t)sent));
    json_object_set_new(ev, "kept", json_integer((json_int_t)st->kept));
    p->interrupted = true;
    if (sent_back(p, st) && sent)
        audit_finding_add(
            c, AUDIT_INFO, "history.interrupted", r, ev,
            "the user interrupted request %lld: %zu of its partial "
            "reply's %zu bytes were sent back and the conversation "
            "went on",
            (long long)p->x->id, sent, reply_bytes(p));
    else
        audit_finding_add(
            c, AUDIT_INFO, "history.interrupted", r, ev,
            "the user interrupted request %lld: its partial reply "
            "(%zu bytes) was dropped and the conversation went on",
            (long long)p->x->id, reply_bytes(p));
}

void audit_rule_history(struct actx *c)
{
    json_t *called = json_object();
    for (size_t i = 0; i < c->n; i++) {
        struct areq *r = &c->r[i];
        if (!r->msgs || !audit_is_main_kind(r->kind))
            continue;
        json_t *orph = fresh_orphans(c, i, called);
        if (r->prev < 0) {
            r->new_msgs = r->nmsg;
            report_orphans(c, r, orph);
            json_decref(orph);
            continue;
        }
        if (r->retry) {
            r->new_msgs = 0;
            report_retry(c, r);
            report_orphans(c, r, orph);
            json_decref(orph);
            continue;
        }
        struct audit_step st;
        json_t *ev = json_object();
        const char *sid = summary_between(c, r->prev, i);
        audit_step_views(&c->r[r->prev], r, sid, &st, ev);
        r->new_msgs = st.added;
        long sj = -1;
        if (st.kind == AUDIT_STEP_COMPACTION) {
            json_object_set_new(ev, "orphaned_results", take_results(orph));
            if (sid)
                for (size_t j = i; j-- > (size_t)(r->prev + 1);)
                    if (c->r[j].content == sid) {
                        json_object_set_new(ev, "summary_request",
                                            json_integer(c->r[j].x->id));
                        json_object_set_new(
                            ev, "summary_bytes",
                            json_integer((json_int_t)strlen(sid)));
                        sj = (long)j;
                        break;
                    }
        }
        report_orphans(c, r, orph);
        json_decref(orph);
        if (st.kind == AUDIT_STEP_PRUNE)
            echo_after_prune(c, i);
        if (is_interrupt(&c->r[r->prev], r, &st))
            report_interrupt(c, i, &st, ev);
        else
            report_step(c, i, &st, ev);
        if (sj >= 0)
            check_summary(c, i, (size_t)sj);
    }
    json_decref(called);
}
