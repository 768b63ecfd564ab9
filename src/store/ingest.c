/*
 * ingest: a captured exchange made into a store row (ingest.h). The
 * request is read with jscan in one validating walk that also finds its
 * messages and tools; the reply is read from an inflated copy when the
 * upstream compressed the body (RFC 9110 8.4.1), the stored body staying
 * as it was sent.
 */
#include "store/ingest.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "wire/coding.h"
#include "wire/jscan.h"
#include "wire/reply.h"
#include "wire/sse.h"

/* the most a compressed reply is inflated to for reading it (the stored
 * body stays as sent): a gzip bomb (1,000 to 1 at most) grows no further */
#define INFLATE_MAX ((size_t)16 << 20)

/* bytes of a stream parser's or reply's buffer kept for the next stream */
#define STREAM_KEEP (64u << 10)

struct ingest {
    struct xchg_cache *cache;
    struct classify_state *cls;
    size_t max_capture;
    /* a stream's parser and reply, kept from one stream to the next so
     * that their buffers are not grown again each time; set up when
     * first used */
    struct sse_parser sp;
    struct reply_acc ra;
    bool stream_state;
};

struct ingest *ingest_new(struct xchg_cache *cache, size_t max_capture)
{
    struct ingest *g = xcalloc(1, sizeof(*g));
    g->cache = cache;
    g->cls = classify_new();
    g->max_capture = max_capture;
    return g;
}

void ingest_free(struct ingest *g)
{
    if (!g)
        return;
    classify_free(g->cls);
    if (g->stream_state) {
        reply_release(&g->ra);
        sse_release(&g->sp);
    }
    free(g);
}

static bool looks_json(const struct ingest_src *s)
{
    return s->ct_json || s->body_len == 0;
}

static void parse_request(struct ingest *g, struct xchg *x,
                          const struct ingest_src *s)
{
    json_t *j = NULL;
    if (s->body_len) {
        /* in place when the scanner is sure, else jansson (same value) */
        /* the validating walk also finds "messages" and "tools" (unless
         * a key has escapes: then plain jscan_doc, and xchg_req_json
         * finds the messages) */
        static const struct jscan_pick top = {
            {"messages", "tools"}, {0, 1}, {-1, -1}, false, 0};
        struct jspan doc, at[2];
        bool picked = !jscan_doc_pick(s->body, s->body_len, &top, at, 2, &doc);
        if ((picked || !jscan_doc(s->body, s->body_len, &doc)) &&
            (doc.t == JS_OBJECT || doc.t == JS_ARRAY)) {
            /* messages and tools seen in an earlier request are shared
             * with it */
            j = picked ? xchg_req_json_msgs(g->cache, &doc, &at[0], &at[1], x)
                       : xchg_req_json(g->cache, &doc, x);
            /* the store hashes messages by these bytes */
            x->req_src = s->body;
            x->req_src_len = s->body_len;
        } else {
            j = json_loadb(s->body, s->body_len, JSON_ALLOW_NUL, NULL);
        }
        if (!j && looks_json(s))
            x->req_malformed = true;
    }
    bool chat =
        json_is_object(j) && json_is_array(json_object_get(j, "messages"));
    if (!chat && s->body_len) {
        x->req_raw = xmalloc(s->body_len + 1);
        memcpy(x->req_raw, s->body, s->body_len + 1);
        x->req_raw_len = s->body_len;
    }
    x->req_body = j;
    /* remembered by the bytes of the messages they read (set by
     * xchg_req_json) */
    x->kind = xstrdup(classify_request_memo(
        g->cls, &x->req_hl, j, x->req_msg_raw, x->req_msg_n, &x->session));
    if (chat && x->req_msg_new) {
        /* a message shared with an earlier request was learnt from then */
        json_t *msgs = json_object_get(j, "messages");
        for (size_t i = 0; i < x->req_msg_n; i++)
            if (x->req_msg_new[i])
                classify_learn_message(g->cls, json_array_get(msgs, i));
    } else if (chat) {
        classify_learn(g->cls, j, NULL);
    }
}

/* Feeds the captured stream body[0..len) to the writer's parser and
 * accumulator (g->sp, g->ra: kept from one stream to the next), which then
 * hold its reply but for "max_gap_ms". */
static struct reply_acc *stream_parse(struct ingest *g, const char *body,
                                      size_t len)
{
    struct sse_parser *p = &g->sp;
    struct reply_acc *a = &g->ra;
    if (!g->stream_state) {
        sse_init(p, g->max_capture);
        reply_init(a);
        g->stream_state = true;
    } else {
        sse_reset(p, STREAM_KEEP);
        reply_reset(a, STREAM_KEEP);
    }
    if (body)
        sse_feed(p, body, len, reply_sse_event, a);
    return a;
}

/* The reply reassembled from a captured stream the store cannot derive it
 * from (content-encoded or cut at the capture cap: see ingest_build), with
 * the gaps the loop measured as the events arrived: its text in
 * x->reply_text (the task prompts of its tool calls learnt here), or, when
 * the text cannot be written, the object in x->reply (learnt by the
 * caller). */
static void stream_reply(struct ingest *g, struct xchg *x, double max_gap_ms,
                         const char *body, size_t len)
{
    struct reply_acc *a = stream_parse(g, body, len);
    struct buf t;
    /* what reply_take gives, with "max_gap_ms" the loop's */
    a->max_gap_ms = max_gap_ms;
    buf_init(&t, 0);
    if (!reply_finish_text(a, &t)) {
        x->reply_text_len = t.len;
        x->reply_text = buf_detach(&t, NULL);
        classify_learn_calls(g->cls, a->tool_calls);
    } else {
        buf_release(&t);
        x->reply = reply_take(a);
    }
}

/* x->reply_text from a JSON body of the common shape
 * (reply_text_from_body): 0, or -1 with x unaltered. */
static int reply_body_text(struct xchg *x, const char *body, size_t len)
{
    struct buf t;
    buf_init(&t, 0);
    if (reply_text_from_body(body, len, &t)) {
        buf_release(&t);
        return -1;
    }
    x->reply_text_len = t.len;
    x->reply_text = buf_detach(&t, NULL);
    return 0;
}

/* Adds "NAME": true to the reply, as json_object_set_new(reply, name,
 * json_true()) would (at the end of the text). */
static void reply_flag(struct xchg *x, const char *name)
{
    if (x->reply) {
        json_object_set_new(x->reply, name, json_true());
        return;
    }
    if (!x->reply_text || !x->reply_text_len)
        return;
    char *s = xasprintf("%.*s,\"%s\":true}", (int)(x->reply_text_len - 1),
                        x->reply_text, name);
    free(x->reply_text);
    x->reply_text = s;
    x->reply_text_len = strlen(s);
}

/* The response's Content-Encoding when it is one record can undo (RFC
 * 9110 8.4.1: gzip, x-gzip, deflate), else NULL. */
static int is_coding(const char *name, const char *c, size_t len, void *ud)
{
    (void)len;
    if (strcasecmp(name, "content-encoding"))
        return 0;
    if (strcasecmp(c, "gzip") && strcasecmp(c, "x-gzip") &&
        strcasecmp(c, "deflate"))
        return 0;
    *(const char **)ud = (c[0] | 0x20) == 'g'   ? "gzip"
                         : (c[0] | 0x20) == 'x' ? "x-gzip"
                                                : "deflate";
    return 1;
}

static const char *body_coding(const struct xchg *x)
{
    const char *c = NULL;
    hdrs_each(&x->resp_hl, is_coding, &c);
    return c;
}

/* The response body decoded into out when the upstream compressed it: 0,
 * 1 (cut at the capture cap), -1 (not compressed: use resp_raw as it is)
 * or -2 (compressed but undecodable). */
static int decode_body(const struct xchg *x, struct buf *out)
{
    const char *coding = body_coding(x);
    if (!coding || !x->resp_raw)
        return -1;
    return coding_inflate(x->resp_raw, x->resp_raw_len, coding, out);
}

void ingest_build(struct ingest *g, struct xchg *x, const struct ingest_src *s)
{
    parse_request(g, x, s);
    /* the reply is read from an inflated copy when the upstream
     * compressed the body; the stored body stays as it was sent */
    struct buf plain;
    buf_init(&plain,
             g->max_capture < INFLATE_MAX ? g->max_capture : INFLATE_MAX);
    const char *body = x->resp_raw;
    size_t len = x->resp_raw_len;
    int dec = decode_body(x, &plain);
    if (dec >= 0) {
        body = buf_str(&plain);
        len = plain.len;
    }
    if (x->streamed && dec == -1 && !s->resp_capped) {
        /* the stream as sent, whole: its reply is reply_from_stream
         * of the stored bytes and the loop's gap, derived when the
         * row is read; parsed here only when it may hold tool calls
         * for classify_learn_calls */
        x->reply_of_raw = true;
        x->stream_gap_ms = s->max_gap_ms;
        if (body && reply_may_call_tools(body, len))
            classify_learn_calls(g->cls,
                                 stream_parse(g, body, len)->tool_calls);
    } else if (x->streamed) {
        stream_reply(g, x, s->max_gap_ms, body, len);
    } else if (body && dec == -1 && !s->resp_capped) {
        /* the body as sent, whole: its reply is reply_from_body of
         * the stored bytes, derived when the row is read (xchg.h,
         * reply_of_raw); built here only when it may hold tool calls
         * for classify_learn */
        x->reply_of_raw = true;
        if (reply_may_call_tools(body, len)) {
            json_t *rv = reply_from_body(body, len);
            classify_learn(g->cls, NULL, rv);
            json_decref(rv);
        }
    } else if (body) {
        /* the object, but for an inflated body, whole and of the
         * common shape, whose column text is written without it (it
         * has no tool calls for classify_learn to read) */
        if (dec != 0 || s->resp_capped || reply_body_text(x, body, len))
            x->reply = reply_from_body(body, len);
    }
    if (s->resp_capped || dec == 1)
        reply_flag(x, "resp_truncated");
    if (dec < -1)
        reply_flag(x, "resp_undecodable");
    buf_release(&plain);
    classify_learn(g->cls, NULL, x->reply);
}
