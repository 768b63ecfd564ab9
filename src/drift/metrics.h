/*
 * drift metrics: what one position of a teacher-forced comparison says.
 * Pure functions over two next-token distributions, P (golden) and Q
 * (candidate), each known only through its top-k log-probabilities and the
 * log-probability of the forced token x. No I/O, no allocation: the hot path
 * of `fidelity drift`, unit-tested and benchmarked on its own.
 *
 * Tokens are named by a 64-bit key: the token id when the server gives ids,
 * else DRIFT_KEY_TEXT | hash of the token text (OpenAI echo dialect).
 */
#ifndef DRIFT_METRICS_H
#define DRIFT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DRIFT_KEY_TEXT (1ULL << 63)
#define DRIFT_TOPK_MAX 64

struct drift_tok {
    uint64_t key;
    double lp; /* natural-log probability */
};

/* One side's view of one position: the distribution of token t given
 * tokens [0, t). top[] is sorted by lp, highest first (ties: lower key). */
struct drift_pos {
    uint64_t forced; /* key of the token actually at position t */
    double forced_lp;
    uint32_t n_top;
    uint32_t n_known; /* >= n_top: top[n_top..n_known) are extra entries
                         (sglang token_ids_logprob) used only for lookups */
    const struct drift_tok *top;
    /* set by the answer readers (drift_lp_finish) once forced_lp and every
     * top[] logprob are known valid and top[0..n_top) has distinct keys:
     * drift_pos_compare then skips its own checks. Leave it false (zero)
     * for positions built any other way. */
    bool checked;
};

/* Per-position result. kl is KL(P||Q) over the partition {golden top-k} +
 * {x} + one tail bucket holding everything else; by the data-processing
 * inequality it is a lower bound of the full-vocabulary KL. */
struct drift_pm {
    double kl;
    double dlp;     /* lq(x) - lp(x) */
    double dp;      /* q(x) - p(x) */
    double lp_g;    /* lp(x), for log-perplexity */
    double lp_c;    /* lq(x) */
    double margin;  /* golden p(top1) - p(top2) */
    double overlap; /* |topk(P) and topk(Q)| / min(kP, kQ), 1 when empty */
    bool has_top;   /* both sides gave a top-k (TGI prefill does not) */
    bool top1_agree;
    bool decisive_flip; /* disagreement where margin > flip_margin */
    uint64_t top1_g, top1_c;
};

/* Floor for a candidate probability in the KL sum (a bucket the candidate
 * gives no mass); keeps KL finite and is stated in docs/DRIFT.md. */
#define DRIFT_Q_FLOOR 1e-10

/*
 * Computes the metrics of one position. Returns 0, or -EINVAL when either
 * side's forced logprob or any top-k logprob is NaN, above 0 (by more than
 * 1e-6) or infinite-positive, leaving *out unspecified. Identical inputs
 * give kl == 0, dlp == 0 and dp == 0 exactly.
 */
int drift_pos_compare(const struct drift_pos *g, const struct drift_pos *c,
                      double flip_margin, struct drift_pm *out);

/* exp(x) as the metrics compute it: within 0.52 ulp of the exact value,
 * the same bits for the same x on every call (libm's exp() outside
 * [-707, 0]). */
double drift_exp(double x);
/* drift_exp(a) and drift_exp(b), computed together, the same bits. */
void drift_exp2(double a, double b, double *ea, double *eb);

/* Sorts t[0..n) by lp descending, key ascending on ties. */
void drift_tok_sort(struct drift_tok *t, size_t n);

/* A key for a token named only by its text (echo dialect). The "token_id:N"
 * spelling vLLM uses with return_tokens_as_token_ids gives the id N. */
uint64_t drift_key_text(const char *text, size_t len);

#endif
