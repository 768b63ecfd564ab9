/*
 * diff: what `fidelity show --messages` says about each request: what it
 * sent (its messages, its sampling and template fields, its tools by
 * name), the reply the client got, and how it differs from its
 * predecessor in the conversation, found by the same linking the rules use
 * (view.c's predecessor, history.c's step): messages appended, the reply
 * sent back kept or altered (and its reasoning), messages removed or
 * replaced by a summary, fields changed. Pure JSON building; no printing.
 */
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/xalloc.h"

static bool has_reply(const struct areq *p)
{
    return (p->content && *p->content) || json_array_size(p->tool_calls) > 0;
}

static const char *role_of(json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "";
}

/* [{"index": i, "role": r}] for messages [from, to) of r. */
static json_t *span(const struct areq *r, size_t from, size_t to)
{
    json_t *a = json_array();
    for (size_t i = from; i < to && i < r->nmsg; i++)
        json_array_append_new(
            a, json_pack("{s:I, s:s}", "index", (json_int_t)i, "role",
                         role_of(json_array_get(r->msgs, i))));
    return a;
}

/* The tools' function names of a body ("?" for one without). */
static json_t *tool_names(json_t *body)
{
    json_t *names = json_array(), *t;
    size_t i;
    json_array_foreach(json_object_get(body, "tools"), i, t)
    {
        json_t *f = json_object_get(t, "function");
        json_t *n = json_object_get(f ? f : t, "name");
        json_array_append_new(
            names, json_string(json_is_string(n) ? json_string_value(n) : "?"));
    }
    return names;
}

static bool in_names(json_t *names, const char *n)
{
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v)
    {
        if (!strcmp(json_string_value(v), n))
            return true;
    }
    return false;
}

/* Fields of the body other than messages and tools that differ between
 * a (NULL: none) and b: [{"field", "from", "to"}], JSON null for absent;
 * the tools added and removed by name. */
static void fields(json_t *a, json_t *b, json_t *out)
{
    json_t *list = json_array(), *v;
    const char *k;
    json_object_foreach(a, k, v)
    {
        if (strcmp(k, "messages") && strcmp(k, "tools") &&
            !audit_json_same(v, json_object_get(b, k)))
            json_array_append_new(list, json_pack("{s:s, s:O, s:O?}", "field",
                                                  k, "from", v, "to",
                                                  json_object_get(b, k)));
    }
    json_object_foreach(b, k, v)
    {
        if (strcmp(k, "messages") && strcmp(k, "tools") &&
            !json_object_get(a, k))
            json_array_append_new(list, json_pack("{s:s, s:n, s:O}", "field", k,
                                                  "from", "to", v));
    }
    json_object_set_new(out, "fields", list);
    json_t *na = tool_names(a), *nb = tool_names(b);
    json_t *added = json_array(), *removed = json_array();
    size_t i;
    json_array_foreach(nb, i, v)
    {
        if (!in_names(na, json_string_value(v)))
            json_array_append(added, v);
    }
    json_array_foreach(na, i, v)
    {
        if (!in_names(nb, json_string_value(v)))
            json_array_append(removed, v);
    }
    json_object_set_new(out, "tools_added", added);
    json_object_set_new(out, "tools_removed", removed);
    json_decref(na);
    json_decref(nb);
}

/* The latest compaction request between r[prev] and r[i], or -1. */
static long summary_between(const struct areq *r, long prev, size_t i)
{
    for (size_t j = i; j-- > (size_t)(prev + 1);)
        if (!strcmp(r[j].kind, "compaction") && r[j].content && *r[j].content)
            return (long)j;
    return -1;
}

/* Where in r the summary text sits (the first message holding it), -1. */
static long summary_index(const struct areq *r, const char *summary)
{
    for (size_t i = 0; i < r->nmsg; i++) {
        char *t = audit_msg_text(json_array_get(r->msgs, i));
        bool here = strstr(t, summary) != NULL;
        free(t);
        if (here)
            return (long)i;
    }
    return -1;
}

/* The reply of p as r sent it back at index p->nmsg: "kept" or
 * "altered" (with the part that differs), and its reasoning's state. */
static void reply_back(const struct areq *p, const struct areq *r,
                       const struct audit_step *st, json_t *ev, json_t *out)
{
    if (!has_reply(p))
        return;
    json_t *removed = json_object_get(ev, "removed"), *v;
    size_t i;
    json_array_foreach(removed, i, v)
    {
        if (json_is_string(v)) {
            json_object_set_new(out, "reply", json_string("dropped"));
            json_object_set_new(out, "interrupted",
                                json_boolean(p->x->end == XCHG_CLIENT_GONE));
            return;
        }
    }
    if (st->kind != AUDIT_STEP_PREFIX && st->kind != AUDIT_STEP_ECHO)
        return;
    if (r->nmsg <= p->nmsg || r->mrole[p->nmsg] != AROLE_ASSISTANT)
        return;
    json_t *m = json_array_get(r->msgs, p->nmsg);
    json_object_set_new(out, "reply_index", json_integer((json_int_t)p->nmsg));
    json_object_set_new(out, "interrupted",
                        json_boolean(p->x->end == XCHG_CLIENT_GONE));
    if (st->kind == AUDIT_STEP_ECHO) {
        json_object_set_new(out, "reply", json_string("altered"));
        json_object_set(out, "reply_field", json_object_get(ev, "field"));
    } else {
        json_object_set_new(out, "reply", json_string("kept"));
    }
    if (p->reasoning && *p->reasoning)
        json_object_set_new(
            out, "reasoning",
            json_string(audit_reasoning_state(m, p->reasoning)));
}

/* The difference of r[i] from its predecessor r[i].prev. */
static void linked(const struct areq *r, size_t i, json_t *out)
{
    const struct areq *q = &r[i], *p = &r[q->prev];
    json_object_set_new(out, "prev", json_integer(p->x->id));
    if (q->retry) {
        json_object_set_new(out, "step", json_string("retry"));
        return;
    }
    long sj = summary_between(r, q->prev, i);
    const char *sum = sj >= 0 ? r[sj].content : NULL;
    struct audit_step st;
    json_t *ev = json_object();
    audit_step_views(p, q, sum, &st, ev);
    json_object_set_new(out, "step", json_string(audit_step_name(st.kind)));
    json_object_set_new(out, "kept", json_integer((json_int_t)st.kept));
    json_object_set_new(out, "appended", span(q, q->nmsg - st.added, q->nmsg));
    json_t *removed = json_array(), *v;
    size_t k;
    json_array_foreach(json_object_get(ev, "removed"), k, v)
    {
        if (json_is_integer(v))
            json_array_append_new(
                removed,
                json_pack("{s:O, s:s}", "index", v, "role",
                          role_of(json_array_get(
                              p->msgs, (size_t)json_integer_value(v)))));
    }
    json_object_set_new(out, "removed", removed);
    json_object_set(out, "pruned", json_object_get(ev, "pruned"));
    json_object_set_new(out, "bytes_before",
                        json_integer((json_int_t)p->msg_bytes));
    json_object_set_new(out, "bytes_after",
                        json_integer((json_int_t)q->msg_bytes));
    reply_back(p, q, &st, ev, out);
    if (st.kind == AUDIT_STEP_COMPACTION && sum) {
        long at = summary_index(q, sum);
        json_object_set_new(out, "summary_request", json_integer(r[sj].x->id));
        if (at >= 0)
            json_object_set_new(out, "summary_index", json_integer(at));
    }
    json_decref(ev);
}

/* The latest earlier request of r[i]'s kind with messages, or -1. */
static long same_kind_before(const struct areq *r, size_t i)
{
    for (size_t j = i; j-- > 0;)
        if (r[j].msgs && !strcmp(r[j].kind, r[i].kind))
            return (long)j;
    return -1;
}

static json_t *one(const struct areq *r, size_t i)
{
    const struct areq *q = &r[i];
    json_t *out = json_pack("{s:I}", "request", (json_int_t)q->x->id);
    long before = -1;
    if (!q->msgs) {
        json_object_set_new(out, "step", json_string("none"));
    } else if (audit_is_main_kind(q->kind) && q->prev >= 0) {
        linked(r, i, out);
        before = q->prev;
    } else {
        before = same_kind_before(r, i);
        json_object_set_new(
            out, "step",
            json_string(audit_is_main_kind(q->kind) ? "first" : "side"));
        if (before >= 0)
            json_object_set_new(out, "prev", json_integer(r[before].x->id));
        json_object_set_new(out, "appended", span(q, 0, q->nmsg));
    }
    if (before >= 0)
        fields(r[before].x->req_body, q->x->req_body, out);
    else
        json_object_update_missing_new(out, json_pack("{s:[], s:[], s:[]}",
                                                      "fields", "tools_added",
                                                      "tools_removed"));
    return out;
}

json_t *audit_session_diffs(const struct audit_session *s)
{
    struct areq *r = areqs_build(s);
    json_t *rows = json_array();
    for (size_t i = 0; i < s->n; i++)
        json_array_append_new(rows, one(r, i));
    areqs_free(r, s->n);
    return rows;
}

/* {"content", "reasoning_content", "tool_calls", "finish_reason",
 * "usage"} of the reply, null where absent. */
static json_t *reply_json(const struct xchg *x)
{
    static const char *const keys[] = {"content", "reasoning_content",
                                       "tool_calls", "finish_reason", "usage"};
    json_t *o = json_object();
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++) {
        json_t *v = json_object_get(x->reply, keys[i]);
        json_object_set_new(o, keys[i], v ? json_incref(v) : json_null());
    }
    return o;
}

json_t *audit_request_sent(const struct xchg *x)
{
    json_t *params = json_object(), *v, *msgs = json_array();
    const char *k;
    json_object_foreach(x->req_body, k, v)
    {
        if (strcmp(k, "messages") && strcmp(k, "tools"))
            json_object_set(params, k, v);
    }
    for (size_t i = 0; i < xmsg_n(x); i++)
        json_array_append(msgs, xmsg(x, i));
    return json_pack("{s:I, s:o, s:o, s:o, s:o}", "request", (json_int_t)x->id,
                     "messages", msgs, "params", params, "tools",
                     tool_names(x->req_body), "reply", reply_json(x));
}
