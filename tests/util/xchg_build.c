/*
 * xchg_build: in-memory exchanges for the audit tests (see the header).
 */
#include "xchg_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

json_t *fixture_body(const char *name)
{
    json_t *j = fixture_json(name),
           *b = json_incref(json_object_get(j, "body"));
    json_decref(j);
    return b;
}

json_t *fixture_headers(const char *name)
{
    json_t *j = fixture_json(name),
           *h = json_incref(json_object_get(j, "headers"));
    json_decref(j);
    return h;
}

void xb_init(struct xchg *x, long long id, const char *session, json_t *body)
{
    memset(x, 0, sizeof(*x));
    x->id = id;
    x->session = xstrdup(session);
    x->method = xstrdup("POST");
    x->path = xstrdup("/v1/chat/completions");
    x->req_headers = json_pack("{s:s}", "User-Agent", "test-harness/1.0");
    x->req_body = body;
    x->status = 200;
    x->streamed = true;
    x->reply = json_pack("{s:s, s:b, s:i, s:f}", "content", "", "done", 1,
                         "chunks", 3, "max_gap_ms", 5.0);
    x->up_ttfb_ms = 10;
    x->down_ttfb_ms = 10.5;
    x->up_total_ms = 30;
    x->down_total_ms = 30.5;
    x->end = XCHG_COMPLETE;
}

void xb_reply(struct xchg *x, const char *content, const char *reasoning,
              json_t *tool_calls, long prompt_tokens, long completion_tokens,
              const char *finish)
{
    json_object_set_new(x->reply, "content",
                        json_string(content ? content : ""));
    if (reasoning)
        json_object_set_new(x->reply, "reasoning_content",
                            json_string(reasoning));
    if (tool_calls)
        json_object_set_new(x->reply, "tool_calls", tool_calls);
    if (prompt_tokens >= 0)
        json_object_set_new(
            x->reply, "usage",
            json_pack("{s:I, s:I, s:I}", "prompt_tokens",
                      (json_int_t)prompt_tokens, "completion_tokens",
                      (json_int_t)completion_tokens, "total_tokens",
                      (json_int_t)(prompt_tokens + completion_tokens)));
    if (finish)
        json_object_set_new(x->reply, "finish_reason", json_string(finish));
}

void xb_release(struct xchg *x)
{
    xchg_release(x);
}

json_t *xb_msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

json_t *xb_body(const char *model, json_t *msgs)
{
    return json_pack("{s:s, s:b, s:o}", "model", model, "stream", 1, "messages",
                     msgs);
}

json_t *xb_echo(const struct xchg *x)
{
    json_t *m = json_pack("{s:s, s:O}", "role", "assistant", "content",
                          json_object_get(x->reply, "content"));
    json_t *tc = json_object_get(x->reply, "tool_calls");
    if (tc)
        json_object_set(m, "tool_calls", tc);
    return m;
}

long xb_tokens(json_t *body)
{
    size_t i, n = 0;
    json_t *m;
    json_array_foreach(json_object_get(body, "messages"), i, m)
    {
        char *s = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
        n += strlen(s);
        free(s);
    }
    char *t = json_dumps(json_object_get(body, "tools"), JSON_COMPACT);
    n += t ? strlen(t) : 0;
    free(t);
    return (long)(n / 4);
}

int xb_put_copy(const struct xchg *x, void *ud)
{
    struct diag d = {{0}};
    struct xchg c;
    xchg_init(&c);
    json_t *j = xchg_to_json(x);
    int rc = xchg_from_json(j, &c, &d);
    json_decref(j);
    c.id = 0;
    if (!rc)
        rc = xchg_put(ud, &c, &d);
    if (rc)
        fprintf(stderr, "cannot store an exchange: %s\n", d.msg);
    xchg_release(&c);
    return rc;
}
