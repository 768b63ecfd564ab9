/*
 * lp: the log-probabilities one server gave for one request (struct
 * drift_lp), and how a reader fills it: entries appended to a pool, each
 * position closed (sorted, deduplicated, cut to top-k), then finished
 * (pointers into the pool, invalid entries counted). The readers of
 * dialect.c and fastparse.c both fill it through these, so neither
 * depends on the other for it.
 */
#ifndef DRIFT_LP_H
#define DRIFT_LP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "drift/metrics.h"

/*
 * Log-probabilities one server gave for one request. pos[i] is the
 * distribution of token i given tokens [0, i) (prefill), or of generated
 * token i (decode). valid[i] is 0 where the entry was missing, null, NaN,
 * or named a different token than was sent (then mismatch[i] is 1).
 */
struct drift_lp {
    uint32_t n;          /* entries expected */
    uint32_t n_returned; /* entries the server gave (may be < n) */
    struct drift_pos *pos;
    uint8_t *valid;
    uint8_t *mismatch;
    uint32_t n_invalid, n_mismatch;
    /* values no logprob can be (NaN, an infinity, above 0), counted by
     * drift_lp_finish; the first at entry bad_at (a top-k entry there when
     * bad_top), its value bad_value as read */
    uint32_t n_bad, bad_at;
    double bad_value;
    bool bad_top;
    struct drift_tok *pool;
    size_t pool_len, pool_alloc;
    bool pool_bad; /* an entry added since the reset is NaN or > 1e-6 */
    uint32_t *ids; /* decode: the generated token ids (n of them) */
    size_t *off;   /* start of pos[i]'s entries in pool while parsing */
    size_t alloc_n;
};

void drift_lp_init(struct drift_lp *lp);
void drift_lp_release(struct drift_lp *lp);
/* Empties lp and sizes it for n entries (all invalid until filled). */
void drift_lp_reset(struct drift_lp *lp, uint32_t n);

/* Appends one (key, logprob) entry to the pool (growing it: _grow). */
void drift_lp_pool_grow(struct drift_lp *lp);
static inline void drift_lp_pool_add(struct drift_lp *lp, uint64_t key,
                                     double v)
{
    if (lp->pool_len == lp->pool_alloc)
        drift_lp_pool_grow(lp);
    lp->pool[lp->pool_len++] = (struct drift_tok){key, v};
    lp->pool_bad |= !(v <= 1e-6) || v <= -1e300;
}
/* Sorts the entries added since off[i] by logprob, drops duplicate keys
 * (returns how many), keeps at most top_k as the top. */
size_t drift_lp_pos_close(struct drift_lp *lp, uint32_t i, unsigned top_k);
/* Points every pos[].top into the (now stable) pool; counts and marks
 * invalid entries (NaN or positive logprobs). */
void drift_lp_finish(struct drift_lp *lp);
void drift_lp_mark_mismatch(struct drift_lp *lp, uint32_t i);

/* A logprob as the server sent it, for messages: "NaN", "Infinity" and
 * "-Infinity" for what drift_json_sanitize rewrote (1e9, +-1e300), "null"
 * for a value that was no number (NAN here), else the number. */
void drift_lp_value_text(double v, char *out, size_t len);
/* Nothing is judged on values no logprob can be: -EBADMSG when lp holds
 * any (NaN, an infinity, above 0), with their count and the first
 * ("position 17: logprob NaN") in d; 0 otherwise. */
int drift_lp_check(const struct drift_lp *lp, struct diag *d);

#endif
