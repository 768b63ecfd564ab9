/*
 * export: one recorded exchange as a HAR 1.2 entry, a JSONL object or an
 * OpenAI-style conversation (export.h). The HAR field list followed is
 * http://www.softwareishard.com/blog/har-12-spec/ (every required field
 * written, times in milliseconds, -1 for what is not known); the request
 * body is the stored one, compact, and the response body the raw bytes as
 * received, base64 when they are not UTF-8.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/utf8.h"
#include "core/xalloc.h"
#include "store/export.h"
#include "store/xchg_int.h"
#include "version.h"

static double ms_or_0(double v)
{
    return isfinite(v) && v > 0 ? v : 0;
}

static json_t *timings(const struct xchg *x)
{
    return json_pack("{s:f, s:f, s:f, s:f}", "up_ttfb_ms", x->up_ttfb_ms,
                     "up_total_ms", x->up_total_ms, "down_ttfb_ms",
                     x->down_ttfb_ms, "down_total_ms", x->down_total_ms);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* o with its members in bytewise key order (the store's canonical order;
 * its reader appends "messages" and "tools" after the other fields), the
 * values shared. Nested objects are read from canonical text already. */
static json_t *sorted(json_t *o)
{
    size_t n = json_object_size(o), i = 0;
    const char **keys = xcalloc(n + 1, sizeof(*keys));
    const char *k;
    json_t *v, *out = json_object();
    json_object_foreach(o, k, v) keys[i++] = k;
    qsort(keys, n, sizeof(*keys), by_key);
    for (i = 0; i < n; i++)
        json_object_set(out, keys[i], json_object_get(o, keys[i]));
    free(keys);
    return out;
}

/* The request body as stored: the JSON value, else the raw bytes as text
 * or base64, under the key that says which. */
static void body_into(json_t *o, const struct xchg *x)
{
    if (json_is_object(x->req_body)) {
        json_object_set_new(o, "body", sorted(x->req_body));
    } else if (x->req_body) {
        json_object_set(o, "body", x->req_body);
    } else if (x->req_raw && utf8_valid(x->req_raw, x->req_raw_len)) {
        json_object_set_new(o, "body_text",
                            json_stringn(x->req_raw, x->req_raw_len));
    } else if (x->req_raw) {
        char *b =
            xchg_b64_encode((const unsigned char *)x->req_raw, x->req_raw_len);
        json_object_set_new(o, "body_base64", json_string(b));
        free(b);
    }
}

static const char *kind_or(const struct xchg *x, const char *kind)
{
    return kind ? kind : x->kind ? x->kind : "other";
}

json_t *export_jsonl(const struct xchg *x, const char *session,
                     const char *kind)
{
    json_t *req =
        json_pack("{s:o}", "headers",
                  x->req_headers ? json_incref(x->req_headers) : json_object());
    body_into(req, x);
    json_t *o = json_pack(
        "{s:I, s:s, s:s, s:f, s:s, s:s, s:o, s:{s:i, s:o, s:b, s:I}, "
        "s:O, s:o, s:s}",
        "id", (json_int_t)x->id, "session", session, "kind", kind_or(x, kind),
        "started", x->started, "method", x->method ? x->method : "", "path",
        x->path ? x->path : "", "request", req, "response", "status", x->status,
        "headers",
        x->resp_headers ? json_incref(x->resp_headers) : json_object(),
        "streamed", x->streamed, "bytes", (json_int_t)x->resp_raw_len, "reply",
        x->reply ? x->reply : json_null(), "timings", timings(x), "end",
        xchg_end_name(x->end));
    return o;
}

/* ISO 8601 in UTC with milliseconds, as HAR's startedDateTime. */
static json_t *iso_time(double t)
{
    char s[64];
    struct tm tm;
    time_t sec = (time_t)floor(t > 0 ? t : 0);
    int ms = (int)((t - (double)sec) * 1000.0);
    gmtime_r(&sec, &tm);
    size_t n = strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(s + n, sizeof(s) - n, ".%03dZ", ms < 0 ? 0 : ms > 999 ? 999 : ms);
    return json_string(s);
}

json_t *export_har_creator(void)
{
    return json_pack("{s:s, s:s}", "name", "fidelity", "version",
                     FIDELITY_VERSION);
}

json_t *export_har_page(const char *session, double started)
{
    return json_pack("{s:o, s:s, s:s, s:{s:i, s:i}}", "startedDateTime",
                     iso_time(started), "id", session, "title", session,
                     "pageTimings", "onContentLoad", -1, "onLoad", -1);
}

/* [{"name", "value"}] of a headers object. */
static json_t *har_headers(json_t *h)
{
    json_t *a = json_array(), *v;
    const char *k;
    json_object_foreach(h, k, v)
    {
        if (json_is_string(v))
            json_array_append_new(
                a, json_pack("{s:s, s:O}", "name", k, "value", v));
    }
    return a;
}

static const char *header(json_t *h, const char *name)
{
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v)
    {
        if (!strcasecmp(k, name) && json_is_string(v))
            return json_string_value(v);
    }
    return NULL;
}

/* The query string of path as [{"name", "value"}] (not decoded). */
static json_t *query(const char *path)
{
    json_t *a = json_array();
    const char *q = path ? strchr(path, '?') : NULL;
    while (q && *q) {
        q++;
        size_t n = strcspn(q, "&"), eq = strcspn(q, "=&");
        json_array_append_new(a, json_pack("{s:s%, s:s%}", "name", q, eq,
                                           "value", q + (eq < n ? eq + 1 : n),
                                           eq < n ? n - eq - 1 : 0));
        q += n;
        if (!*q)
            break;
    }
    return a;
}

static json_t *har_request(const struct xchg *x)
{
    const char *host = header(x->req_headers, "host");
    const char *path = x->path ? x->path : "/";
    json_t *r =
        json_pack("{s:s, s:s++, s:s, s:[], s:o, s:o, s:i}", "method",
                  x->method ? x->method : "GET", "url", "http://",
                  host ? host : "record.invalid", path, "httpVersion",
                  "HTTP/1.1", "cookies", "headers", har_headers(x->req_headers),
                  "queryString", query(path), "headersSize", -1);
    json_t *tmp = json_object();
    body_into(tmp, x);
    json_t *b = json_object_get(tmp, "body");
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    const char *raw = json_string_value(json_object_get(tmp, "body_text"));
    const char *b64 = json_string_value(json_object_get(tmp, "body_base64"));
    const char *ct = header(x->req_headers, "content-type");
    const char *t = text ? text : raw ? raw : b64;
    json_object_set_new(r, "bodySize",
                        json_integer(t ? (json_int_t)strlen(t) : 0));
    if (t) {
        json_t *pd = json_pack("{s:s, s:s}", "mimeType",
                               ct ? ct : "application/json", "text", t);
        if (b64)
            json_object_set_new(pd, "_encoding", json_string("base64"));
        json_object_set_new(r, "postData", pd);
    }
    free(text);
    json_decref(tmp);
    return r;
}

static const char *reason(int status)
{
    static const struct {
        int code;
        const char *text;
    } t[] = {{200, "OK"},
             {400, "Bad Request"},
             {401, "Unauthorized"},
             {404, "Not Found"},
             {408, "Request Timeout"},
             {413, "Payload Too Large"},
             {429, "Too Many Requests"},
             {500, "Internal Server Error"},
             {502, "Bad Gateway"},
             {503, "Service Unavailable"},
             {504, "Gateway Timeout"}};
    for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++)
        if (t[i].code == status)
            return t[i].text;
    return "";
}

static json_t *har_content(const struct xchg *x)
{
    const char *ct = header(x->resp_headers, "content-type");
    json_t *c = json_pack("{s:I, s:s}", "size", (json_int_t)x->resp_raw_len,
                          "mimeType", ct ? ct : "");
    if (!x->resp_raw)
        return c;
    if (utf8_valid(x->resp_raw, x->resp_raw_len)) {
        json_object_set_new(c, "text",
                            json_stringn(x->resp_raw, x->resp_raw_len));
    } else {
        char *b = xchg_b64_encode((const unsigned char *)x->resp_raw,
                                  x->resp_raw_len);
        json_object_set_new(c, "text", json_string(b));
        json_object_set_new(c, "encoding", json_string("base64"));
        free(b);
    }
    return c;
}

json_t *export_har_entry(const struct xchg *x, const char *pageref,
                         const char *kind)
{
    int st = xchg_status_sent(x);
    double wait = ms_or_0(x->down_ttfb_ms);
    double recv = ms_or_0(x->down_total_ms - x->down_ttfb_ms);
    json_t *resp = json_pack(
        "{s:i, s:s, s:s, s:[], s:o, s:o, s:s, s:i, s:I}", "status", st,
        "statusText", reason(st), "httpVersion", "HTTP/1.1", "cookies",
        "headers", har_headers(x->resp_headers ? x->resp_headers : NULL),
        "content", har_content(x), "redirectURL", "", "headersSize", -1,
        "bodySize", (json_int_t)x->resp_raw_len);
    return json_pack(
        "{s:s, s:o, s:f, s:o, s:o, s:{}, s:{s:f, s:f, s:f}, s:I, s:s, "
        "s:O, s:s}",
        "pageref", pageref, "startedDateTime", iso_time(x->started), "time",
        wait + recv, "request", har_request(x), "response", resp, "cache",
        "timings", "send", 0.0, "wait", wait, "receive", recv, "_id",
        (json_int_t)x->id, "_kind", kind_or(x, kind), "_reply",
        x->reply ? x->reply : json_null(), "_end", xchg_end_name(x->end));
}

/* The reply as the assistant message a harness would send back. */
static json_t *reply_message(json_t *reply)
{
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_t *c = json_object_get(reply, "content");
    json_t *r = json_object_get(reply, "reasoning_content");
    json_t *tc = json_object_get(reply, "tool_calls");
    json_object_set(m, "content", json_is_string(c) ? c : json_null());
    if (json_is_string(r) && json_string_length(r))
        json_object_set(m, "reasoning_content", r);
    if (json_array_size(tc))
        json_object_set(m, "tool_calls", tc);
    return m;
}

json_t *export_openai(const struct xchg *x, json_t *messages,
                      const char *session)
{
    json_t *msgs = json_array(), *v;
    size_t i;
    json_array_foreach(messages, i, v) json_array_append(msgs, v);
    json_t *c = json_object_get(x->reply, "content");
    if ((json_is_string(c) && json_string_length(c)) ||
        json_array_size(json_object_get(x->reply, "tool_calls")))
        json_array_append_new(msgs, reply_message(x->reply));
    json_t *o = json_pack("{s:o}", "messages", msgs);
    json_t *tools = json_object_get(x->req_body, "tools");
    if (json_array_size(tools))
        json_object_set(o, "tools", tools);
    json_t *model = json_object_get(x->req_body, "model");
    json_object_set(o, "model", json_is_string(model) ? model : json_null());
    json_object_set_new(o, "session", json_string(session));
    return o;
}
