/*
 * drift analysis: the streaming aggregation behind `fidelity drift`.
 * Per-position metrics (metrics.h) are folded into position buckets, a
 * bounded quantile sketch per bucket, a heap of the worst positions and
 * per-sequence bucket sums for the growth bootstrap. Memory is bounded by
 * the bucket count, the heap size and (for the bootstrap) sequences x
 * buckets, whatever the number of positions. Pure: no I/O.
 *
 * Three arms are compared against golden pass 1:
 *   DRIFT_ARM_CAND  candidate            (the figure under test)
 *   DRIFT_ARM_CTRL  golden pass 2        (the golden's own run-to-run noise)
 *   DRIFT_ARM_SELF  candidate pass 2 vs candidate pass 1 (its own noise)
 * Verdicts are taken on the excess of CAND over the noise baseline; see
 * drift_bucket_excess() and docs/DRIFT.md.
 */
#ifndef DRIFT_ANALYSIS_H
#define DRIFT_ANALYSIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "drift/metrics.h"

enum drift_arm { DRIFT_ARM_CAND, DRIFT_ARM_CTRL, DRIFT_ARM_SELF, DRIFT_ARMS };

/*
 * Log-spaced histogram of nonnegative values: zeros counted exactly, values
 * in [1e-12, 1e4) in 40 bins per decade, smaller positive values in an
 * underflow bin, larger in an overflow bin. A quantile is reported as the
 * geometric middle of its bin (clamped to the observed max), so its
 * relative error is at most 10^(1/80) - 1 = 2.92%; a quantile that falls on
 * the zeros is exactly 0. Fixed size (5 KiB).
 */
#define DRIFT_SK_LO_EXP (-12)
#define DRIFT_SK_DECADES 16
#define DRIFT_SK_PER_DECADE 40
#define DRIFT_SK_BINS (DRIFT_SK_DECADES * DRIFT_SK_PER_DECADE)

struct drift_sketch {
    uint64_t n, zero, under, over;
    double max;
    uint64_t bin[DRIFT_SK_BINS];
};

void drift_sketch_init(struct drift_sketch *s);
/* Adds v >= 0 (negative values count as 0; NaN is ignored). */
void drift_sketch_add(struct drift_sketch *s, double v);
/* Quantile q in [0, 1] (nearest rank); NAN when empty. */
double drift_sketch_quantile(const struct drift_sketch *s, double q);

/* Sums of one arm in one bucket. */
struct drift_acc {
    uint64_t n;
    double pos_sum; /* sum of positions, for the bucket's mean position */
    double kl_sum, kl_sq, kl_max;
    double nll_g, nll_c;        /* sums of -lp(x), -lq(x) */
    double dp_sum, dp_sq, dp_q; /* sums of dp, dp^2, dp^4 */
    uint64_t top_n, top1_agree, flips;
    double overlap_sum;
    struct drift_sketch kl;
};

/* What a bucket table row shows for one arm (or the excess). */
struct drift_bsum {
    uint64_t n;
    double kl_mean, kl_p50, kl_p99, kl_p999, kl_max;
    double log_ppl_ratio; /* mean(-lq(x)) - mean(-lp(x)) = ln(PPL_Q/PPL_P) */
    double dp_mean, dp_rms;
    double top1;     /* agreement in [0, 1]; 1 when no top-k was given */
    double kl_se;    /* standard error of kl_mean */
    double top1_se;  /* standard error of top1 */
    double dp_ms_se; /* standard error of dp_rms^2 (mean of dp^2) */
    uint64_t flips;
    double overlap;
};

/* Ordered: PASS < INCONCLUSIVE < WARN < FAIL; NA (nothing measured)
 * yields to any. INCONCLUSIVE: a point estimate above a threshold whose
 * lower confidence bound is not (the evidence cannot decide; never PASS). */
enum drift_verdict {
    DRIFT_PASS,
    DRIFT_INCONCLUSIVE,
    DRIFT_WARN,
    DRIFT_FAIL,
    DRIFT_NA
};
const char *drift_verdict_name(enum drift_verdict v);
/* WARN or FAIL: a decided difference. */
bool drift_verdict_off(enum drift_verdict v);
/* The worse of two verdicts; NA yields to any other. */
enum drift_verdict drift_verdict_worse(enum drift_verdict a,
                                       enum drift_verdict b);

/* Thresholds on the excess; [0] warn, [1] fail. Defaults from the issue:
 * mean KL 1e-4/1e-3, p99.9 KL 1e-3/1e-2, top-1 agreement 99.5%/97.5%,
 * RMS delta-p 0.3%/1.2%; growth slope 0.585/1 (excess KL times 1.5 / 2
 * per doubling of position). */
struct drift_thresholds {
    double kl_mean[2];
    double kl_p999[2];
    double top1[2];
    double dp_rms[2];
    double growth[2];    /* slope of ln(excess KL) on ln(position) */
    double growth_floor; /* excess below this counts as this, for growth */
    double flip_margin;  /* golden p1 - p2 above which a flip is decisive */
};
void drift_thresholds_default(struct drift_thresholds *t);

#define DRIFT_BUCKETS_MAX 64
/* Per-sequence sums kept per bucket and arm for the bootstrap: KL, count,
 * squared delta-p, positions with a top-k, top-1 agreements. */
#define DRIFT_SEQ_F 5
#define DRIFT_WORST_MAX 256

struct drift_worst {
    uint32_t seq, pos;
    double kl, dlp, dp;
    uint64_t forced, top1_g, top1_c;
};

/* Reasons a position is skipped instead of compared; counted and reported. */
enum drift_skip {
    DRIFT_SKIP_INVALID, /* NaN or positive logprob, or a missing entry */
    DRIFT_SKIP_SHORT,   /* the server returned fewer positions than sent */
    DRIFT_SKIP_TOKEN,   /* the server echoed a different token */
    DRIFT_SKIPS
};

struct drift_analysis {
    uint32_t edges[DRIFT_BUCKETS_MAX + 1]; /* bucket b = [e[b], e[b+1]) */
    size_t n_buckets;
    struct drift_acc acc[DRIFT_ARMS][DRIFT_BUCKETS_MAX];
    uint64_t skipped[DRIFT_ARMS][DRIFT_SKIPS];
    /* worst positions of DRIFT_ARM_CAND: a min-heap on kl */
    struct drift_worst worst[DRIFT_WORST_MAX];
    size_t n_worst, worst_cap;
    uint32_t pos_max; /* largest position folded into DRIFT_ARM_CAND */
    /* per sequence, per bucket, per arm: (kl_sum, n) for the bootstrap */
    double *seq_sums; /* [seq][bucket][arm][DRIFT_SEQ_F] */
    size_t n_seq, seq_alloc;
    struct drift_thresholds th;
};

/*
 * Sets up buckets: [1, min_bucket), then powers of two from min_bucket up
 * to past max_pos, plus every extra edge (sorted, deduplicated; edges
 * beyond DRIFT_BUCKETS_MAX buckets are dropped and -E2BIG returned).
 * worst_cap <= DRIFT_WORST_MAX. th may be NULL for the defaults.
 */
int drift_analysis_init(struct drift_analysis *a, uint32_t min_bucket,
                        uint32_t max_pos, const uint32_t *extra, size_t n_extra,
                        size_t worst_cap, const struct drift_thresholds *th);
void drift_analysis_release(struct drift_analysis *a);
/* Starts a new sequence; returns its index. */
uint32_t drift_analysis_begin_seq(struct drift_analysis *a);
/* Bucket of position pos (>= 1), or -1 when pos is below the first edge. */
int drift_bucket_of(const struct drift_analysis *a, uint32_t pos);
/* Folds one compared position of arm into sequence seq (the current one). */
void drift_analysis_add(struct drift_analysis *a, enum drift_arm arm,
                        uint32_t seq, uint32_t pos, uint64_t forced,
                        const struct drift_pm *m);
void drift_analysis_skip(struct drift_analysis *a, enum drift_arm arm,
                         enum drift_skip why, uint64_t count);

void drift_bucket_summary(const struct drift_acc *acc, struct drift_bsum *s);
/* Adds the sums of c into out (same arm, any buckets or analyses). */
void drift_acc_merge(struct drift_acc *out, const struct drift_acc *c);
/* Totals of one arm over every bucket. */
void drift_analysis_total(const struct drift_analysis *a, enum drift_arm arm,
                          struct drift_acc *out);

/*
 * Excess of the candidate over the noise baseline. With a self arm the
 * baseline is (ctrl + self) / 2, the expected candidate figure under pure
 * run-to-run noise on both sides (see docs/DRIFT.md); without one it is
 * ctrl. Mean and quantile KL, log-PPL and disagreement subtract; RMS
 * delta-p subtracts in squares. Excess values are clamped at 0 (top1 at 1).
 * kl_se and top1_se of the excess combine the arms' standard errors, so
 * that a verdict can ask whether the excess stands out of the noise.
 */
void drift_bucket_excess(const struct drift_bsum *cand,
                         const struct drift_bsum *ctrl,
                         const struct drift_bsum *self, bool has_self,
                         struct drift_bsum *out);
/*
 * What a comparison could not decide: a figure whose point estimate is
 * above a threshold while its lower confidence bound (point - 2 SE) is
 * not. level is the threshold's verdict (WARN: the comparison is
 * INCONCLUSIVE; FAIL: it is WARN, the FAIL side undecided). Standard
 * errors shrink as 1/sqrt(n), so at the measured point and SE the bound
 * clears the threshold at n' = n (2 SE / (point - threshold))^2
 * observations: `more` = n' - n (drift_more_to_decide).
 */
struct drift_undecided {
    enum drift_verdict level; /* WARN or FAIL; NA when all is decided */
    const char *metric;       /* "mean KL", "top-1 disagreement", ... */
    double point, se, threshold;
    double n, more; /* observations measured, more that would decide */
};
/* n (2 se / (point - threshold))^2 - n, at least 0 (rounded up); +inf
 * when point <= threshold (more data would not push it over). */
double drift_more_to_decide(double n, double point, double se,
                            double threshold);
/* "about 5,400" (two significant digits, thousands separated) into out. */
void drift_about(double v, char *out, size_t cap);

/* Verdict of one bucket's excess; NA when it has no positions. Mean KL
 * and top-1 agreement are judged on their lower confidence bound (excess
 * minus 2 standard errors), so run-to-run noise alone does not WARN;
 * so is RMS delta-p (through the standard error of its square). A figure
 * whose point is above WARN while its bound is not makes the bucket
 * INCONCLUSIVE (never PASS); one above FAIL whose bound is only above
 * WARN is WARN with the FAIL side undecided. p99.9 is judged only for
 * buckets of 1,000 positions or more. */
enum drift_verdict drift_bucket_verdict(const struct drift_bsum *excess,
                                        const struct drift_thresholds *th);
/* The same, and what it could not decide (u may be NULL): of the figures
 * left undecided at the lowest level, the one that needs the fewest
 * more observations. */
enum drift_verdict drift_bucket_judge(const struct drift_bsum *excess,
                                      const struct drift_thresholds *th,
                                      struct drift_undecided *u);

/* The shape of the candidate's excess past the first quarter. */
enum drift_shape {
    DRIFT_SHAPE_NONE,     /* no bucket's excess reaches the floor */
    DRIFT_SHAPE_CONSTANT, /* a difference that does not grow: its level is
                             judged by the bucket thresholds */
    DRIFT_SHAPE_GROWING   /* growth WARN or FAIL */
};
const char *drift_shape_name(enum drift_shape s);

/* Growth of the candidate's excess mean KL with position. */
struct drift_growth {
    double slope;        /* of ln(max(excess mean KL, floor)) on
                            ln(mean position), trend buckets only */
    double lo, hi;       /* 95% bootstrap interval over whole sequences */
    double ratio;        /* last / first bucket excess mean KL (shown) */
    double first, last;  /* those two excess means */
    double peak;         /* largest excess among the trend buckets */
    uint32_t from;       /* trend buckets start at or after this position */
    unsigned points;     /* buckets used by the slope */
    unsigned replicates; /* bootstrap replicates */
    enum drift_verdict verdict;
    enum drift_shape shape;
    /* Growth judged with its size: the slope alone never decides. */
    bool significant;      /* interval above 0 (two or more sequences) */
    bool sized;            /* a trend bucket's excess is decided at or
                              above the mean-KL WARN threshold */
    uint32_t peak_pos;     /* mean position of the peak trend bucket */
    double cross[2];       /* positions where, at the slope, the excess
                              would cross mean-KL WARN and FAIL; NaN
                              when not extrapolated */
    uint64_t context;      /* the server's context length judged against */
    const char *why;       /* one line on an INCONCLUSIVE or extrapolated
                              verdict, or NULL */
    double seqs_to_decide; /* INCONCLUSIVE slope: sequences that would
                              decide (0: unknown, one sequence) */
    /* Per bucket, the same whole-sequence bootstrap's 95% percentile
     * intervals of the excess mean KL, the candidate's RMS delta-p and its
     * top-1 agreement ([b][DRIFT_CI_*][lo, hi]); NaN where a bucket has
     * too few replicates (fewer than 2 sequences, or empty). */
    double ci[DRIFT_BUCKETS_MAX][3][2];
};
enum { DRIFT_CI_KL = 0, DRIFT_CI_DP, DRIFT_CI_TOP1 };
/*
 * Computes growth with `replicates` bootstrap draws from seed; context is
 * the server's context length (0: the largest position measured) against
 * which an extrapolated crossing is judged. has_self as
 * in drift_bucket_excess(). The trend buckets are those that start past
 * the first quarter of the positions compared (edge * 4 >= largest
 * position + 1). Growth is judged with its size (docs/DRIFT.md,
 * "Growth"): a slope above th.growth whose bootstrap interval lies above
 * 0 is WARN or FAIL only when a trend bucket's excess is decided at or
 * above the mean-KL WARN threshold; below it, the crossing positions at
 * the measured slope decide: PASS beyond the context, INCONCLUSIVE within
 * it. A slope above th.growth whose interval includes 0 (or with one
 * sequence has none) is INCONCLUSIVE. NA when no trend bucket reaches the
 * floor or fewer than 2 have data.
 */
void drift_growth_compute(const struct drift_analysis *a, bool has_self,
                          unsigned replicates, uint64_t seed, uint64_t context,
                          struct drift_growth *g);
/* Where ex(p) = peak (p / p_peak)^slope reaches level: p_peak
 * (level / peak)^(1 / slope); NaN when slope <= 0 or peak <= 0, p_peak
 * when peak >= level already. */
double drift_growth_crossing(double peak, double p_peak, double slope,
                             double level);

/* Worst positions, highest KL first, into out (at most cap); returns n. */
size_t drift_worst_sorted(const struct drift_analysis *a,
                          struct drift_worst *out, size_t cap);

#endif
