/*
 * reply: merging streamed deltas into one answer. Field names follow the
 * OpenAI chat completions API (choices[].delta, tool_calls[].index,
 * usage) and the reasoning extensions of vLLM/sglang (reasoning_content)
 * and OpenRouter/llama.cpp (reasoning).
 */
#include "wire/reply.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "wire/jdump.h"
#include "wire/jscan.h"
#include "wire/sse.h"

#define REPLY_TEXT_MAX ((size_t)256 << 20)

void reply_init(struct reply_acc *a)
{
    memset(a, 0, sizeof(*a));
    buf_init(&a->content, REPLY_TEXT_MAX);
    buf_init(&a->reasoning, REPLY_TEXT_MAX);
    a->tool_calls = json_array();
    a->last_ms = -1;
}

void reply_release(struct reply_acc *a)
{
    buf_release(&a->content);
    buf_release(&a->reasoning);
    buf_release(&a->prev);
    buf_release(&a->usage_text);
    json_decref(a->tool_calls);
    json_decref(a->usage);
    json_decref(a->error);
    free(a->finish_reason);
    memset(a, 0, sizeof(*a));
}

void reply_reset(struct reply_acc *a, size_t keep)
{
    struct buf content = a->content, reasoning = a->reasoning, prev = a->prev,
               usage_text = a->usage_text;
    json_t *tool_calls = a->tool_calls;
    json_decref(a->usage);
    json_decref(a->error);
    free(a->finish_reason);
    buf_reuse(&content, keep);
    buf_reuse(&reasoning, keep);
    buf_reuse(&prev, keep);
    buf_reuse(&usage_text, keep);
    if (json_array_size(tool_calls)) {
        json_decref(tool_calls);
        tool_calls = json_array();
    }
    memset(a, 0, sizeof(*a));
    a->content = content;
    a->reasoning = reasoning;
    a->prev = prev;
    a->usage_text = usage_text;
    a->tool_calls = tool_calls;
    a->last_ms = -1;
}

static void append_str(struct buf *b, json_t *s)
{
    if (json_is_string(s))
        buf_add(b, json_string_value(s), json_string_length(s));
}

/* Appends s's string to the string member key of o (creating it). */
static void concat_member(json_t *o, const char *key, json_t *s)
{
    if (!json_is_string(s))
        return;
    json_t *old = json_object_get(o, key);
    if (!json_is_string(old)) {
        json_object_set(o, key, s);
        return;
    }
    size_t n1 = json_string_length(old), n2 = json_string_length(s);
    char *cat = xmalloc(n1 + n2 + 1);
    memcpy(cat, json_string_value(old), n1);
    memcpy(cat + n1, json_string_value(s), n2);
    json_object_set_new(o, key, json_stringn_nocheck(cat, n1 + n2));
    free(cat);
}

static json_t *call_at(json_t *calls, json_int_t index)
{
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        if (json_integer_value(json_object_get(c, "index")) == index)
            return c;
    }
    c = json_pack("{s:I, s:{}}", "index", index, "function");
    json_array_append_new(calls, c);
    return c;
}

static void merge_tool_calls(json_t *calls, json_t *deltas)
{
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d)
    {
        json_t *ix = json_object_get(d, "index");
        json_t *c = call_at(calls, json_is_integer(ix) ? json_integer_value(ix)
                                                       : (json_int_t)i);
        json_t *v;
        if ((v = json_object_get(d, "id")) && json_is_string(v))
            json_object_set(c, "id", v);
        if ((v = json_object_get(d, "type")) && json_is_string(v))
            json_object_set(c, "type", v);
        json_t *f = json_object_get(d, "function");
        json_t *cf = json_object_get(c, "function");
        if (json_is_object(f)) {
            concat_member(cf, "name", json_object_get(f, "name"));
            concat_member(cf, "arguments", json_object_get(f, "arguments"));
        }
    }
}

static void take_reasoning(struct reply_acc *a, json_t *obj)
{
    json_t *r = json_object_get(obj, "reasoning_content");
    const char *field = "reasoning_content";
    if (!json_is_string(r)) {
        r = json_object_get(obj, "reasoning");
        field = "reasoning";
    }
    if (json_is_string(r)) {
        a->reasoning_field = field;
        append_str(&a->reasoning, r);
    }
}

static void take_finish(struct reply_acc *a, json_t *choice)
{
    const char *fr =
        json_string_value(json_object_get(choice, "finish_reason"));
    if (fr) {
        free(a->finish_reason);
        a->finish_reason = xstrdup(fr);
    }
}

static void note_time(struct reply_acc *a, double now_ms)
{
    if (a->last_ms >= 0 && now_ms - a->last_ms > a->max_gap_ms)
        a->max_gap_ms = now_ms - a->last_ms;
    a->last_ms = now_ms;
}

/* The spans of one chunk or body that the reply is made of. */
struct scanned {
    struct jspan usage, error, choice, msg, text, finish;
    struct jspan content, rc, r, tool_calls;
};

/* Finds the reply's fields in data without building a tree; msg_key is
 * "delta" (a stream chunk) or "message" (a whole response). -1: not the
 * common shape, or not sure to read it as jansson would. */
static int scan_reply(const char *data, size_t len, const char *msg_key,
                      struct scanned *sc)
{
    /* out: 0 usage, 1 error, 2 choices, 3 choices[0], 4 its message or
     * delta, 5 text, 6 finish_reason, 7 content, 8 reasoning_content,
     * 9 reasoning, 10 tool_calls; one validating walk */
    const struct jscan_pick levels[] = {
        {{"usage", "error", "choices"}, {0, 1, 2}, {-1, -1, 1}, false, 0},
        {{NULL}, {3}, {2}, true, 3},
        {{msg_key, "text", "finish_reason"}, {4, 5, 6}, {3, -1, -1}, false, 4},
        {{"content", "reasoning_content", "reasoning", "tool_calls"},
         {7, 8, 9, 10},
         {-1, -1, -1, -1},
         false,
         7},
    };
    struct jspan doc, o[11];

    memset(sc, 0, sizeof(*sc));
    if (jscan_doc_pick(data, len, levels, o, 11, &doc) || doc.t != JS_OBJECT)
        return -1;
    sc->usage = o[0];
    sc->error = o[1];
    sc->choice = o[3]; /* element 0 of choices when an array */
    if (sc->choice.t != JS_OBJECT)
        return 0;
    sc->msg = o[4];
    sc->text = o[5];
    sc->finish = o[6];
    if (sc->msg.t != JS_OBJECT)
        return 0;
    sc->content = o[7];
    sc->rc = o[8];
    sc->r = o[9];
    sc->tool_calls = o[10];
    return 0;
}

#define NSPANS (sizeof(struct scanned) / sizeof(struct jspan))
_Static_assert(sizeof(struct scanned) == 10 * sizeof(struct jspan),
               "struct scanned is reply_acc.prev_spans");

/* Keeps data and its spans as the chunk the next one is compared with. */
static void keep_prev(struct reply_acc *a, const char *data, size_t len,
                      const struct scanned *sc)
{
    struct jspan *v = a->prev_spans;
    buf_reset(&a->prev);
    a->prev_ok = !buf_add(&a->prev, data, len);
    memcpy(v, sc, sizeof(*sc));
    for (size_t i = 0; i < NSPANS; i++)
        if (v[i].t != JS_NONE)
            v[i].p = a->prev.data + (v[i].p - data);
}

/* Reads a chunk that equals the previous one but inside one string value
 * of its content, reasoning_content or reasoning (a stream's events
 * differ only in the token they carry): the same bytes up to and with the
 * string's opening quote, the same bytes from its closing quote on, and a
 * valid string between. Then data is valid JSON of the same shape and *sc
 * is the previous spans moved to data, the string's replaced. The
 * previous chunk must carry nothing that is taken whole (usage, error,
 * tool calls, finish_reason), so that only text is appended. false: read
 * it in full. */
static bool reuse_prev(const struct reply_acc *a, const char *data, size_t len,
                       struct scanned *sc)
{
    const struct jspan *v = a->prev_spans;
    const char *prev = a->prev.data;
    size_t plen = a->prev.len;
    memcpy(sc, v, sizeof(*sc));
    if (!a->prev_ok || sc->usage.t == JS_OBJECT ||
        (sc->error.t != JS_NONE && sc->error.t != JS_NULL) ||
        sc->finish.t == JS_STRING || sc->text.t == JS_STRING ||
        sc->msg.t != JS_OBJECT || sc->tool_calls.t == JS_ARRAY)
        return false;
    struct jspan *hot[] = {&sc->content, &sc->rc, &sc->r};
    for (size_t k = 0; k < 3; k++) {
        struct jspan *h = hot[k];
        if (h->t != JS_STRING)
            continue;
        size_t head = (size_t)(h->p - prev) + 1; /* with the quote */
        size_t tail = plen - head - h->n + 2;    /* from the quote */
        if (len < head + tail || memcmp(data, prev, head) ||
            memcmp(data + len - tail, prev + plen - tail, tail))
            continue;
        struct jspan s;
        size_t sn = len - head - tail + 2;
        if (jscan_doc(data + head - 1, sn, &s) || s.t != JS_STRING || s.n != sn)
            continue;
        /* the spans before the string stay, those after it move, those
         * around it (the choice, the delta) grow */
        ptrdiff_t delta = (ptrdiff_t)sn - (ptrdiff_t)h->n;
        struct jspan *all = (struct jspan *)sc;
        for (size_t i = 0; i < NSPANS; i++) {
            if (all[i].t == JS_NONE || &all[i] == h)
                continue;
            size_t off = (size_t)(all[i].p - prev);
            if (off >= head)
                off = (size_t)((ptrdiff_t)off + delta);
            else if (off + all[i].n > head)
                all[i].n = (size_t)((ptrdiff_t)all[i].n + delta);
            all[i].p = data + off;
        }
        *h = s;
        return true;
    }
    return false;
}

/* A validated span as a jansson value (new reference). */
static json_t *span_json(const struct jspan *v)
{
    return jscan_json(v);
}

static void span_str(struct buf *b, const struct jspan *v)
{
    if (v->t == JS_STRING)
        jscan_str(v, b);
}

/* The fields of sc common to chunks and bodies, as reply_chunk_jansson
 * and reply_from_body_jansson take them. */
static void take_scanned(struct reply_acc *a, const struct scanned *sc)
{
    if (sc->usage.t == JS_OBJECT) {
        /* kept as its text when it copies plainly: the recorder writes
         * the text (reply_finish_text), no tree is built */
        json_decref(a->usage);
        a->usage = NULL;
        buf_reset(&a->usage_text);
        if (jscan_dump_plain(&sc->usage, &a->usage_text)) {
            buf_reset(&a->usage_text);
            a->usage = span_json(&sc->usage);
        }
    }
    if (sc->error.t != JS_NONE && sc->error.t != JS_NULL) {
        json_decref(a->error);
        a->error = span_json(&sc->error);
    }
    if (sc->msg.t == JS_OBJECT) {
        span_str(&a->content, &sc->content);
        if (sc->rc.t == JS_STRING || sc->r.t == JS_STRING) {
            bool rc = sc->rc.t == JS_STRING;
            a->reasoning_field = rc ? "reasoning_content" : "reasoning";
            span_str(&a->reasoning, rc ? &sc->rc : &sc->r);
        }
    }
    span_str(&a->content, &sc->text);
    if (sc->finish.t == JS_STRING) {
        struct buf f = BUF_INIT;
        jscan_str(&sc->finish, &f);
        free(a->finish_reason);
        a->finish_reason = f.data ? buf_detach(&f, NULL) : xstrdup("");
    }
}

void reply_chunk(struct reply_acc *a, const char *data, size_t len,
                 double now_ms)
{
    struct scanned sc;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        note_time(a, now_ms);
        a->done = true;
        return;
    }
    bool reused = reuse_prev(a, data, len, &sc);
    a->reused += reused;
    if (!reused && scan_reply(data, len, "delta", &sc)) {
        a->prev_ok = false;
        reply_chunk_jansson(a, data, len, now_ms);
        return;
    }
    keep_prev(a, data, len, &sc);
    note_time(a, now_ms);
    a->chunks++;
    a->scanned++;
    take_scanned(a, &sc);
    if (sc.msg.t == JS_OBJECT && sc.tool_calls.t == JS_ARRAY) {
        json_t *tc = span_json(&sc.tool_calls);
        merge_tool_calls(a->tool_calls, tc);
        json_decref(tc);
    }
}

void reply_chunk_jansson(struct reply_acc *a, const char *data, size_t len,
                         double now_ms)
{
    note_time(a, now_ms);
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        a->done = true;
        return;
    }
    json_t *j = json_loadb(data, len, 0, NULL);
    if (!json_is_object(j)) {
        a->bad++;
        json_decref(j);
        return;
    }
    a->chunks++;
    json_t *v = json_object_get(j, "usage");
    if (json_is_object(v)) {
        json_decref(a->usage);
        a->usage = json_incref(v);
        buf_reset(&a->usage_text);
    }
    if ((v = json_object_get(j, "error")) && !json_is_null(v)) {
        json_decref(a->error);
        a->error = json_incref(v);
    }
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    if (json_is_object(choice)) {
        json_t *delta = json_object_get(choice, "delta");
        if (json_is_object(delta)) {
            append_str(&a->content, json_object_get(delta, "content"));
            take_reasoning(a, delta);
            json_t *tc = json_object_get(delta, "tool_calls");
            if (json_is_array(tc))
                merge_tool_calls(a->tool_calls, tc);
        }
        append_str(&a->content, json_object_get(choice, "text"));
        take_finish(a, choice);
    }
    json_decref(j);
}

static json_t *str_or_null(const struct buf *b, bool present)
{
    if (!present)
        return json_null();
    json_t *s = json_stringn(b->data ? b->data : "", b->len);
    return s ? s : json_null(); /* invalid UTF-8 cannot come from JSON */
}

/* The reply object; with take, a's tool calls, usage and error move into
 * it instead of being copied (a is then only good for reply_release). */
static json_t *finish(struct reply_acc *a, bool take)
{
    json_t *r = json_object();
    json_object_set_new(r, "content", str_or_null(&a->content, true));
    json_object_set_new(r, "reasoning_content",
                        str_or_null(&a->reasoning, a->reasoning_field));
    if (a->reasoning_field)
        json_object_set_new(r, "reasoning_field",
                            json_string(a->reasoning_field));
    json_object_set_new(r, "tool_calls",
                        take ? json_incref(a->tool_calls)
                             : json_deep_copy(a->tool_calls));
    if (!a->usage && a->usage_text.len)
        json_object_set_new(
            r, "usage",
            json_loadb(a->usage_text.data, a->usage_text.len, 0, NULL));
    else
        json_object_set_new(r, "usage",
                            !a->usage ? json_null()
                            : take    ? json_incref(a->usage)
                                      : json_deep_copy(a->usage));
    json_object_set_new(r, "finish_reason",
                        a->finish_reason ? json_string(a->finish_reason)
                                         : json_null());
    json_object_set_new(r, "done", json_boolean(a->done));
    json_object_set_new(r, "chunks", json_integer(a->chunks));
    json_object_set_new(r, "max_gap_ms", json_real(a->max_gap_ms));
    if (a->bad)
        json_object_set_new(r, "bad_chunks", json_integer(a->bad));
    if (a->error)
        json_object_set_new(r, "error",
                            take ? json_incref(a->error)
                                 : json_deep_copy(a->error));
    if (take) { /* a no longer refers to what r holds */
        json_decref(a->tool_calls);
        a->tool_calls = json_array();
        json_decref(a->usage);
        a->usage = NULL;
        json_decref(a->error);
        a->error = NULL;
    }
    return r;
}

json_t *reply_finish(const struct reply_acc *a)
{
    return finish((struct reply_acc *)a, false);
}

json_t *reply_take(struct reply_acc *a)
{
    return finish(a, true);
}

json_t *reply_from_body(const char *body, size_t len)
{
    struct scanned sc;
    if (scan_reply(body, len, "message", &sc))
        return reply_from_body_jansson(body, len);
    struct reply_acc a;
    reply_init(&a);
    take_scanned(&a, &sc);
    if (sc.msg.t == JS_OBJECT && sc.tool_calls.t == JS_ARRAY) {
        json_decref(a.tool_calls);
        a.tool_calls = span_json(&sc.tool_calls);
    }
    json_t *r = reply_take(&a);
    reply_release(&a);
    return r;
}

int reply_sse_event(const char *event, const char *data, size_t len, void *ud)
{
    (void)event;
    reply_chunk(ud, data, len, 0);
    return 0;
}

json_t *reply_from_stream(const char *raw, size_t len, double max_gap_ms)
{
    struct sse_parser p;
    struct reply_acc a;
    /* a cap no line of raw can pass: the recorder's was at least len */
    sse_init(&p, len + 1);
    reply_init(&a);
    sse_feed(&p, raw, len, reply_sse_event, &a);
    a.max_gap_ms = max_gap_ms;
    json_t *r = reply_take(&a);
    reply_release(&a);
    sse_release(&p);
    return r;
}

json_t *reply_from_body_jansson(const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    struct reply_acc a;
    reply_init(&a);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    if (json_is_object(msg)) {
        append_str(&a.content, json_object_get(msg, "content"));
        take_reasoning(&a, msg);
        json_t *tc = json_object_get(msg, "tool_calls");
        if (json_is_array(tc)) {
            json_decref(a.tool_calls);
            a.tool_calls = json_deep_copy(tc);
        }
    }
    append_str(&a.content, json_object_get(choice, "text"));
    take_finish(&a, choice);
    json_t *v = json_object_get(j, "usage");
    if (json_is_object(v))
        a.usage = json_incref(v);
    if ((v = json_object_get(j, "error")) && !json_is_null(v))
        a.error = json_incref(v);
    json_decref(j);
    json_t *r = reply_take(&a);
    reply_release(&a);
    return r;
}

bool reply_may_call_tools(const char *body, size_t len)
{
    /* memchr, not memmem: glibc's memmem sets up a two-way search that
     * cost more than the whole scan of a small body */
    const char *end = body + len;
    for (const char *p = body; (p = memchr(p, '_', (size_t)(end - p))); p++)
        if (p - body >= 4 && end - p >= 6 && !memcmp(p - 4, "tool_calls", 10))
            return true;
    for (const char *p = body; (p = memchr(p, '\\', (size_t)(end - p))); p++)
        if (end - p >= 2 && p[1] == 'u')
            return true;
    return false;
}

/* jdump_string of b's bytes, or null */
static int put_text(struct buf *out, const struct buf *b, bool present)
{
    if (!present)
        return buf_adds(out, "null");
    return jdump_string(out, b->data ? b->data : "", b->len);
}

/* v in decimal, as jansson writes an integer (without snprintf) */
static int put_long(struct buf *out, long v)
{
    char s[24], *p = s + sizeof(s);
    unsigned long u = v < 0 ? 0 - (unsigned long)v : (unsigned long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    return buf_add(out, p, (size_t)(s + sizeof(s) - p));
}

int reply_finish_text(const struct reply_acc *a, struct buf *out)
{
    /* the members in finish()'s order and form; a text at the cap may
     * end inside a character, which json_stringn would refuse */
    if (a->content.len + 8 > REPLY_TEXT_MAX ||
        a->reasoning.len + 8 > REPLY_TEXT_MAX)
        return -1;
    if (buf_adds(out, "{\"content\":") || put_text(out, &a->content, true) ||
        buf_adds(out, ",\"reasoning_content\":") ||
        put_text(out, &a->reasoning, a->reasoning_field != NULL))
        return -1;
    if (a->reasoning_field &&
        (buf_adds(out, ",\"reasoning_field\":") ||
         jdump_string(out, a->reasoning_field, strlen(a->reasoning_field))))
        return -1;
    if (buf_adds(out, ",\"tool_calls\":") || jdump(out, a->tool_calls, false) ||
        buf_adds(out, ",\"usage\":") ||
        (a->usage ? jdump(out, a->usage, false)
         : a->usage_text.len
             ? buf_add(out, a->usage_text.data, a->usage_text.len)
             : buf_adds(out, "null")) ||
        buf_adds(out, ",\"finish_reason\":") ||
        (a->finish_reason
             ? jdump_string(out, a->finish_reason, strlen(a->finish_reason))
             : buf_adds(out, "null")) ||
        buf_adds(out, a->done ? ",\"done\":true" : ",\"done\":false") ||
        buf_adds(out, ",\"chunks\":") || put_long(out, a->chunks) ||
        buf_adds(out, ",\"max_gap_ms\":") || jdump_real(out, a->max_gap_ms))
        return -1;
    if (a->bad && (buf_adds(out, ",\"bad_chunks\":") || put_long(out, a->bad)))
        return -1;
    if (a->error &&
        (buf_adds(out, ",\"error\":") || jdump(out, a->error, false)))
        return -1;
    return buf_addch(out, '}') ? -1 : 0;
}

int reply_text_from_body(const char *body, size_t len, struct buf *out)
{
    struct scanned sc;
    struct buf t;
    int rc = -1;
    if (scan_reply(body, len, "message", &sc) ||
        (sc.error.t != JS_NONE && sc.error.t != JS_NULL) ||
        (sc.msg.t == JS_OBJECT && sc.tool_calls.t == JS_ARRAY))
        return -1;
    /* the same fields, in the order and form finish() gives them */
    buf_init(&t, REPLY_TEXT_MAX);
    if (sc.msg.t == JS_OBJECT)
        span_str(&t, &sc.content);
    span_str(&t, &sc.text);
    if (buf_adds(out, "{\"content\":") || put_text(out, &t, true) ||
        buf_adds(out, ",\"reasoning_content\":"))
        goto out;
    const char *field = NULL;
    if (sc.msg.t == JS_OBJECT &&
        (sc.rc.t == JS_STRING || sc.r.t == JS_STRING)) {
        bool is_rc = sc.rc.t == JS_STRING;
        field = is_rc ? "reasoning_content" : "reasoning";
        buf_reset(&t);
        span_str(&t, is_rc ? &sc.rc : &sc.r);
    }
    if (put_text(out, &t, field != NULL))
        goto out;
    if (field && (buf_adds(out, ",\"reasoning_field\":\"") ||
                  buf_adds(out, field) || buf_addch(out, '"')))
        goto out;
    if (buf_adds(out, ",\"tool_calls\":[],\"usage\":"))
        goto out;
    if (sc.usage.t == JS_OBJECT) {
        if (jscan_dump_plain(&sc.usage, out))
            goto out;
    } else if (buf_adds(out, "null")) {
        goto out;
    }
    buf_reset(&t);
    t.max = 0; /* finish_reason has no cap */
    if (sc.finish.t == JS_STRING)
        jscan_str(&sc.finish, &t);
    /* json_string() of the decoded text stops at a NUL: jscan is unsure
     * of \u0000, so there is none */
    if (buf_adds(out, ",\"finish_reason\":") ||
        put_text(out, &t, sc.finish.t == JS_STRING) ||
        buf_adds(out, ",\"done\":false,\"chunks\":0,\"max_gap_ms\":0.0}"))
        goto out;
    rc = 0;
out:
    buf_release(&t);
    return rc;
}
