/*
 * ingest: an exchange as the recording proxy captured it (the request
 * bytes, the response bytes and how they came) made into the row the
 * store keeps (store/xchg.h): the request parsed, its messages and tools
 * shared with earlier requests through the connection's xchg_cache, its
 * session and kind (classify.h, which learns task prompts as it goes),
 * and the reply reassembled from the body or the stream, or marked to be
 * derived from the stored bytes when the row is read. record's writer
 * thread and the intake log's replay (replay.h) both store through it,
 * so an exchange is stored the same way whichever path it takes.
 */
#ifndef STORE_INGEST_H
#define STORE_INGEST_H

#include <stdbool.h>
#include <stddef.h>

#include "store/classify.h"
#include "store/xchg.h"

struct ingest;

/* What the capture knows beyond x's fields. body is the request body
 * (secrets already hidden), NUL-terminated at body_len, and must outlive
 * the store call that follows ingest_build (x->req_src points into it). */
struct ingest_src {
    const char *body;
    size_t body_len;
    bool ct_json;      /* the request's Content-Type said JSON */
    bool resp_capped;  /* the response was cut at the capture cap */
    double max_gap_ms; /* the longest pause between events, as timed */
};

/* cache: the xchg_cache of the connection the rows go to (borrowed, may be
 * NULL); max_capture: the cap of an inflated response copy (16 MiB at
 * most). */
struct ingest *ingest_new(struct xchg_cache *cache, size_t max_capture);
void ingest_free(struct ingest *g);
/* Fills x's request side (req_body, req_raw, req_malformed, session, kind)
 * and its reply from s and x's response fields (method, path, headers,
 * status, resp_raw, streamed set by the caller). Never fails: what cannot
 * be parsed is kept raw (req_malformed, resp_undecodable). */
void ingest_build(struct ingest *g, struct xchg *x, const struct ingest_src *s);

#endif
