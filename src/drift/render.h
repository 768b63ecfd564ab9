/*
 * drift report: the human summary (a llama.cpp-style statistics block, the
 * per-bucket table with verdicts, the decode path, determinism and the
 * worst positions) and the JSON summary whose schema docs/DRIFT.md gives.
 * Pure formatting into a struct buf / json_t; cmd_drift.c writes them.
 */
#ifndef DRIFT_RENDER_H
#define DRIFT_RENDER_H

#include <jansson.h>

#include "core/buf.h"
#include "drift/cache_arm.h"
#include "drift/drift.h"

/* Text of one worst position, looked up by drift_worst_texts(): the
 * forced and top-1 tokens, and around the position the last
 * DRIFT_CONTEXT_BYTES of the text before it and the text of the
 * DRIFT_CONTEXT_TOKENS tokens after it. */
#define DRIFT_CONTEXT_BYTES 80
#define DRIFT_CONTEXT_TOKENS 8
struct drift_worst_text {
    char *token, *top1_g, *top1_c; /* fresh, may be NULL */
    char *before, *after;          /* fresh, may be NULL */
    long offset;                   /* byte offset in the sequence; -1 */
};

/* Detokenizes the forced and top-1 tokens of w[0..n) and the prefix up to
 * each position (for its byte offset) through the golden's /detokenize
 * (labels.c): one batched request per sequence, after two that check the
 * separator, or one request per label where the tokenizer cannot carry
 * the separator. Failures leave NULL / -1 entries; never fails as a
 * whole. */
void drift_worst_texts(struct drift_side *golden, const struct drift_result *r,
                       const struct drift_worst *w, size_t n,
                       struct drift_worst_text *out);
void drift_worst_texts_free(struct drift_worst_text *t, size_t n);

void drift_report_text(const struct drift_result *r, const struct drift_side *g,
                       const struct drift_side *c, const struct drift_worst *w,
                       const struct drift_worst_text *wt, size_t nw,
                       struct buf *out);
json_t *drift_report_json(const struct drift_result *r,
                          const struct drift_side *g,
                          const struct drift_side *c,
                          const struct drift_worst *w,
                          const struct drift_worst_text *wt, size_t nw);
/* The closing "verdict: X" line, and one line per comparison that could
 * not decide (what would decide it); cr (may be NULL) is the cache arm. */
void drift_report_verdict(const struct drift_result *r,
                          const struct drift_cache_result *cr, struct buf *out);
/* The same comparisons as the JSON summary's "undecided" array. */
json_t *drift_report_undecided_json(const struct drift_result *r,
                                    const struct drift_cache_result *cr);
/* "about N more UNIT would decide (METRIC X ± SE against LEVEL T)". */
void drift_undecided_text(const struct drift_undecided *u, const char *unit,
                          struct buf *out);
/* The "harm" object: figure, interval, positions and the arms counted. */
json_t *drift_harm_json(const struct drift_harm *h);
/* One --jsonl record (a JSON object on one line, no newline). */
void drift_report_rec(const struct drift_rec *rec, struct buf *out);

#endif
