/*
 * reply: the model's answer reassembled from what the upstream sent, in the
 * shape xchg.h documents for struct xchg.reply. For a stream, each SSE
 * event's data goes to reply_chunk() as it is forwarded (OpenAI
 * chat.completion.chunk: choices[0].delta.content, .reasoning_content or
 * .reasoning, .tool_calls merged by index, finish_reason, usage; "[DONE]";
 * /v1/completions chunks' choices[0].text). A JSON body goes to
 * reply_from_body() at the end.
 *
 * It lives in src/store because the store uses it too: for a plain JSON
 * response or a plain stream the reply is not stored but derived from the
 * stored body or stream when the row is read (xchg.c, read_row;
 * docs/RECORD.md).
 */
#ifndef WIRE_REPLY_H
#define WIRE_REPLY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"
#include "wire/jscan.h"

struct reply_acc {
    struct buf content;
    struct buf reasoning;
    const char *reasoning_field; /* "reasoning_content" or "reasoning" */
    json_t *tool_calls;          /* array, merged by index */
    json_t *usage;
    /* Or, with usage NULL and usage_text.len set, usage's compact text
     * (what jdump writes for it): a usage object read in place that
     * jscan_dump_plain could copy, built only if reply_finish asks */
    struct buf usage_text;
    json_t *error; /* an {"error": ...} event, as sent */
    char *finish_reason;
    bool done;      /* a data: [DONE] event arrived */
    long chunks;    /* JSON data events */
    long bad;       /* data events that were not JSON */
    long scanned;   /* of chunks, those read in place (wire/jscan.h) */
    long reused;    /* of those, read from the previous chunk's spans */
    double last_ms; /* arrival of the previous event */
    double max_gap_ms;
    /* The last chunk read in place and its spans (into prev): the next
     * chunk, when it differs only inside one of its text fields, is read
     * from them (reply.c, reuse_prev) */
    struct buf prev;
    struct jspan prev_spans[10];
    bool prev_ok;
};

void reply_init(struct reply_acc *a);
void reply_release(struct reply_acc *a);
/* a as reply_init leaves it, keeping the memory of its buffers for the
 * next stream unless one grew past keep bytes. */
void reply_reset(struct reply_acc *a, size_t keep);
/* One SSE data payload that arrived at now_ms. Never fails: what is not
 * understood is counted in a->bad. A chunk of the common shape is read in
 * place (wire/jscan.h); anything else goes to reply_chunk_jansson. */
void reply_chunk(struct reply_acc *a, const char *data, size_t len,
                 double now_ms);
/* The reference: the same, always through a jansson tree. reply_chunk must
 * leave a in the state this one does (tests/record/test_replyacc.c and
 * tests/fuzz/fuzz_reply.c compare them). */
void reply_chunk_jansson(struct reply_acc *a, const char *data, size_t len,
                         double now_ms);
/* The reply object for a stream (new reference). */
json_t *reply_finish(const struct reply_acc *a);
/* reply_finish without copying: the tool calls, usage and error move from
 * a into the result (a keeps empty ones; only reply_release is left to
 * call on it). */
json_t *reply_take(struct reply_acc *a);
/* The text jdump(reply_finish(a), false) writes, appended to out without
 * building the object (the recorder's stream replies). 0, or -1 when the
 * content or reasoning reached the cap (out may hold a partial text then;
 * use reply_finish). */
int reply_finish_text(const struct reply_acc *a, struct buf *out);
/* The reply object for a non-streamed JSON response, or NULL when the body
 * is not a JSON object. */
json_t *reply_from_body(const char *body, size_t len);
/* The text jdump(reply_from_body(body, len), false) writes, appended to
 * out without building the reply object, for the common body: read in
 * place (wire/jscan.h), no error member, no tool calls, a usage object
 * that jscan_dump_plain copies. 0, or -1 for any other body (out may hold
 * a partial text then; use reply_from_body). */
int reply_text_from_body(const char *body, size_t len, struct buf *out);
/* False when body cannot hold a "tool_calls" member, so that the
 * tool_calls of reply_from_body(body, len) is surely empty: neither those
 * bytes nor a \u escape (the only escape that could spell one of its
 * letters) occur in it. True means "maybe". */
bool reply_may_call_tools(const char *body, size_t len);
/* An sse_event_fn (wire/sse.h) that gives each event's data to
 * reply_chunk(ud, data, len, 0): ud is a struct reply_acc. Returns 0. */
int reply_sse_event(const char *event, const char *data, size_t len, void *ud);
/* The reply object for a captured SSE stream raw[0..len) (the whole
 * stream, transfer coding removed, not content-encoded), with
 * "max_gap_ms" the given gap measured as the events arrived: what the
 * recorder's writer would build from the same bytes. The store derives a
 * stream's reply with it when the row is read (xchg.c, read_row). */
json_t *reply_from_stream(const char *raw, size_t len, double max_gap_ms);
/* The reference for reply_from_body, always through a jansson tree. */
json_t *reply_from_body_jansson(const char *body, size_t len);

#endif
