/*
 * dialect_int: what dialect.c (jansson parsers) and fastparse.c (the
 * allocation-free scanner for the hot path) share: filling a struct
 * drift_lp entry by entry.
 */
#ifndef DRIFT_DIALECT_INT_H
#define DRIFT_DIALECT_INT_H

#include "drift/dialect.h"

/* Appends one (key, logprob) entry to the pool. */
void drift_lp_pool_add(struct drift_lp *lp, uint64_t key, double v);
/* Sorts the entries added since off[i] by logprob, drops duplicate keys
 * (returns how many), keeps at most top_k as the top. */
size_t drift_lp_pos_close(struct drift_lp *lp, uint32_t i, unsigned top_k);
/* Points every pos[].top into the (now stable) pool; counts and marks
 * invalid entries (NaN or positive logprobs). */
void drift_lp_finish(struct drift_lp *lp);
void drift_lp_mark_mismatch(struct drift_lp *lp, uint32_t i);

/*
 * Exact decimal to double (dec2dbl.c, Eisel-Lemire): m * 10^q correctly
 * rounded (to nearest, ties to even) into *out and true, or false when it
 * cannot tell cheaply (a possible tie, a result that would be subnormal or
 * overflow, q outside [DRIFT_DEC_Q_MIN, DRIFT_DEC_Q_MAX]): the caller then
 * uses strtod. m must hold every significant digit (m = 0 gives +0).
 * drift_dec_init() (idempotent, thread-safe) must have run first.
 */
#define DRIFT_DEC_Q_MIN (-342)
#define DRIFT_DEC_Q_MAX 308
void drift_dec_init(void);
bool drift_dec_to_double(uint64_t m, int q, double *out);

/*
 * The fast path of drift_parse_prompt_text() for the vllm and sglang
 * dialects: validates the whole text as JSON (RFC 8259 grammar, UTF-8,
 * jansson's limits) without building a tree, then reads the one array it
 * needs. Returns 0 with lp filled exactly as the jansson parser would, or
 * -EAGAIN for anything it does not handle (the caller falls back).
 */
int drift_fast_prompt(enum drift_dialect d, const char *text, size_t len,
                      const struct drift_req *r, struct drift_lp *lp);

#endif
