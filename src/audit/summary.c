/*
 * summary: what `fidelity sessions` and `fidelity show` print about a
 * session, as JSON built from the same per-request view the rules use:
 * the harness (User-Agent), models, turns, requests by kind and tokens;
 * and the session request by request with sizes.
 */
#include <string.h>
#include <strings.h>

#include "audit/audit_int.h"
#include "core/xalloc.h"

static const char *header(json_t *headers, const char *name)
{
    const char *k;
    json_t *v;
    json_object_foreach(headers, k, v)
    {
        if (!strcasecmp(k, name) && json_is_string(v))
            return json_string_value(v);
    }
    return NULL;
}

/* "opencode/1.18.33" from "opencode/1.18.33 ai-sdk/... runtime/...". */
static json_t *harness(const struct audit_session *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const char *ua = header(s->x[i]->req_headers, "user-agent");
        if (ua && *ua)
            return json_stringn(ua, strcspn(ua, " "));
    }
    return json_string("unknown");
}

json_t *audit_session_json(const struct audit_session *s,
                           const struct audit_list *findings)
{
    struct areq *r = areqs_build(s);
    json_t *models = json_array(), *kinds = json_object();
    json_int_t pt = 0, ct = 0;
    int turns = 0;
    for (size_t i = 0; i < s->n; i++) {
        json_t *k = json_object_get(kinds, r[i].kind);
        json_object_set_new(kinds, r[i].kind,
                            json_integer(json_integer_value(k) + 1));
        bool have = false;
        for (size_t j = 0; j < json_array_size(models) && !have; j++)
            have = !strcmp(json_string_value(json_array_get(models, j)),
                           r[i].model);
        if (!have && *r[i].model)
            json_array_append_new(models, json_string(r[i].model));
        pt += r[i].prompt_tokens > 0 ? r[i].prompt_tokens : 0;
        ct += r[i].completion_tokens > 0 ? r[i].completion_tokens : 0;
        if (r[i].turn > turns)
            turns = r[i].turn;
    }
    int sev[3] = {0, 0, 0};
    for (size_t i = 0; findings && i < findings->n; i++)
        if (!strcmp(findings->v[i].session, s->id))
            sev[findings->v[i].sev]++;
    areqs_free(r, s->n);
    json_t *row =
        json_pack("{s:s, s:o, s:o, s:i, s:I, s:o, s:I, s:I, "
                  "s:{s:i, s:i, s:i}}",
                  "session", s->id, "harness", harness(s), "models", models,
                  "turns", turns, "exchanges", (json_int_t)s->n, "requests",
                  kinds, "prompt_tokens", pt, "completion_tokens", ct,
                  "findings", "info", sev[0], "warn", sev[1], "error", sev[2]);
    json_object_set_new(row, "parent",
                        s->parent
                            ? json_pack("{s:s, s:s, s:b}", "session", s->parent,
                                        "call", s->parent_call,
                                        "result_returned", s->result_returned)
                            : json_null());
    return row;
}

const char **audit_session_kinds(const struct audit_session *s)
{
    struct areq *r = areqs_build(s);
    const char **k = xcalloc(s->n + 1, sizeof(*k));
    for (size_t i = 0; i < s->n; i++)
        k[i] = r[i].kind;
    areqs_free(r, s->n);
    return k;
}

json_t *audit_session_turns(const struct audit_session *s)
{
    struct areq *r = areqs_build(s);
    json_t *rows = json_array();
    /* new_msgs comes from the history rule; run it on a scratch list. */
    struct audit_opts o;
    struct audit_list scratch;
    audit_opts_init(&o);
    audit_list_init(&scratch);
    struct actx c = {.o = &o, .out = &scratch, .s = s, .r = r, .n = s->n};
    audit_rule_history(&c);
    audit_list_release(&scratch);
    for (size_t i = 0; i < s->n; i++) {
        const struct xchg *x = r[i].x;
        json_array_append_new(
            rows,
            json_pack(
                "{s:I, s:s, s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:I, "
                "s:s?, s:i, s:s*, s:f, s:I, s:I, s:I}",
                "request", (json_int_t)x->id, "kind", r[i].kind, "turn",
                r[i].turn, "model", r[i].model, "path", x->path ? x->path : "",
                "messages", (json_int_t)r[i].nmsg, "new_messages",
                (json_int_t)r[i].new_msgs, "request_bytes",
                (json_int_t)r[i].msg_bytes, "prompt_tokens",
                (json_int_t)r[i].prompt_tokens, "completion_tokens",
                (json_int_t)r[i].completion_tokens, "finish_reason",
                r[i].finish, "status", xchg_status_sent(x), "answered_by",
                !x->status && xchg_status_sent(x) ? "record" : NULL, "ttfb_ms",
                x->down_ttfb_ms, "reply_bytes",
                (json_int_t)(r[i].content ? strlen(r[i].content) : 0),
                "reasoning_bytes",
                (json_int_t)(r[i].reasoning ? strlen(r[i].reasoning) : 0),
                "tool_calls", (json_int_t)json_array_size(r[i].tool_calls)));
    }
    areqs_free(r, s->n);
    return rows;
}
