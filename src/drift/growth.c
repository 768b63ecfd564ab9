/*
 * drift growth: does the candidate's excess KL grow with position? The
 * least-squares slope of ln(excess mean KL) on ln(mean position) over the
 * buckets past the first quarter of the positions (the first buckets are
 * the least stable and a difference that settles after them is not
 * growth), with the excess floored at --growth-floor so that a difference
 * that starts late counts as growth and noise near zero does not; a
 * percentile bootstrap interval that resamples whole sequences (positions
 * within a sequence are correlated, so resampling tokens would give
 * intervals that are too narrow); and, for the record, the last/first
 * bucket ratio. The same replicates give each bucket's interval of its
 * excess mean KL, the candidate's RMS delta-p and top-1 agreement (the
 * report's whiskers).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/stats.h"
#include "core/xalloc.h"
#include "drift/analysis.h"

#define TINY 1e-12

const char *drift_shape_name(enum drift_shape s)
{
    static const char *const n[] = {
        [DRIFT_SHAPE_NONE] = "none",
        [DRIFT_SHAPE_CONSTANT] = "constant",
        [DRIFT_SHAPE_GROWING] = "growing",
    };
    return n[s];
}

/* Excess mean KL per bucket from (sum, n) per arm; NAN when empty. */
static void excess_means(const double *sums, size_t nb, bool has_self,
                         double *ex)
{
    for (size_t b = 0; b < nb; b++) {
        const double *s = sums + b * DRIFT_ARMS * DRIFT_SEQ_F;
        double nc = s[DRIFT_ARM_CAND * DRIFT_SEQ_F + 1];
        if (nc == 0) {
            ex[b] = NAN;
            continue;
        }
        double c = s[DRIFT_ARM_CAND * DRIFT_SEQ_F] / nc;
        double nt = s[DRIFT_ARM_CTRL * DRIFT_SEQ_F + 1];
        double ns = s[DRIFT_ARM_SELF * DRIFT_SEQ_F + 1];
        double ct = nt ? s[DRIFT_ARM_CTRL * DRIFT_SEQ_F] / nt : 0;
        double se = ns ? s[DRIFT_ARM_SELF * DRIFT_SEQ_F] / ns : 0;
        double base = has_self ? 0.5 * ct + 0.5 * se : ct;
        ex[b] = c - base > 0 ? c - base : 0;
    }
}

/* Slope over the trend buckets (use[b]), the excess floored at floor;
 * NAN when fewer than 2 buckets or none above the floor. */
static double slope_of(const double *ex, const double *lx, const bool *use,
                       size_t nb, double floor, unsigned *points)
{
    double x[DRIFT_BUCKETS_MAX], y[DRIFT_BUCKETS_MAX];
    size_t n = 0;
    bool above = false;
    for (size_t b = 0; b < nb; b++)
        if (use[b] && !isnan(ex[b]) && !isnan(lx[b])) {
            above |= ex[b] >= floor;
            x[n] = lx[b];
            y[n] = log(ex[b] > floor ? ex[b] : floor);
            n++;
        }
    if (points)
        *points = (unsigned)n;
    return above ? stats_slope(x, y, n) : NAN;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void ratio_of(const double *ex, size_t nb, struct drift_growth *g)
{
    size_t first = nb, last = nb;
    for (size_t b = 0; b < nb; b++)
        if (!isnan(ex[b])) {
            if (first == nb)
                first = b;
            last = b;
        }
    g->first = first < nb ? ex[first] : NAN;
    g->last = last < nb ? ex[last] : NAN;
    if (first == nb || first == last)
        g->ratio = NAN;
    else if (g->first > TINY)
        g->ratio = g->last / g->first;
    else
        g->ratio = g->last > TINY ? INFINITY : NAN;
}

/* The candidate's RMS delta-p and top-1 agreement of bucket b from the
 * summed arms; NaN when undefined. */
static void cand_metrics(const double *sums, size_t b, double *dp, double *top1)
{
    const double *s = sums + (b * DRIFT_ARMS + DRIFT_ARM_CAND) * DRIFT_SEQ_F;
    *dp = s[1] > 0 ? sqrt(s[2] / s[1]) : NAN;
    *top1 = s[3] > 0 ? s[4] / s[3] : NAN;
}

/* The 2.5% and 97.5% points of the defined values among v[0..n) (sorted
 * in place), NaN when fewer than 2 are defined. */
static void interval(double *v, size_t n, double out[2])
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i]))
            v[k++] = v[i];
    out[0] = out[1] = NAN;
    if (k < 2)
        return;
    qsort(v, k, sizeof(double), cmp_double);
    out[0] = v[(size_t)floor(0.025 * (double)(k - 1))];
    out[1] = v[(size_t)ceil(0.975 * (double)(k - 1))];
}

/* Per-bucket intervals from the replicates' values vals[rep][b][3]. */
static void bucket_intervals(double *vals, unsigned reps, size_t nb,
                             struct drift_growth *g)
{
    double *col = xmalloc((reps ? reps : 1) * sizeof(double));
    for (size_t b = 0; b < nb; b++)
        for (int m = 0; m < 3; m++) {
            for (unsigned k = 0; k < reps; k++)
                col[k] = vals[((size_t)k * nb + b) * 3 + (size_t)m];
            interval(col, reps, g->ci[b][m]);
        }
    free(col);
}

struct trend {
    double lx[DRIFT_BUCKETS_MAX];
    bool use[DRIFT_BUCKETS_MAX];
    double floor;
};

static void bootstrap(const struct drift_analysis *a, bool has_self,
                      unsigned reps, uint64_t seed, const struct trend *tr,
                      struct drift_growth *g)
{
    size_t nb = a->n_buckets, stride = nb * DRIFT_ARMS * DRIFT_SEQ_F;
    double *sums = xmalloc(stride * sizeof(double));
    double *slopes = xmalloc((reps ? reps : 1) * sizeof(double));
    double *vals =
        xmalloc(((size_t)(reps ? reps : 1) * nb * 3 + 1) * sizeof(double));
    double ex[DRIFT_BUCKETS_MAX];
    struct rng r;
    unsigned ok = 0;

    rng_seed(&r, seed);
    for (unsigned k = 0; k < reps; k++) {
        memset(sums, 0, stride * sizeof(double));
        for (size_t i = 0; i < a->n_seq; i++) {
            const double *s = a->seq_sums + rng_below(&r, a->n_seq) * stride;
            for (size_t j = 0; j < stride; j++)
                sums[j] += s[j];
        }
        excess_means(sums, nb, has_self, ex);
        for (size_t b = 0; b < nb; b++) {
            double *v = vals + ((size_t)k * nb + b) * 3;
            v[DRIFT_CI_KL] = ex[b];
            cand_metrics(sums, b, &v[DRIFT_CI_DP], &v[DRIFT_CI_TOP1]);
        }
        double sl = slope_of(ex, tr->lx, tr->use, nb, tr->floor, NULL);
        /* a replicate with nothing above the floor is flat */
        slopes[ok++] = isnan(sl) ? 0 : sl;
    }
    bucket_intervals(vals, reps, nb, g);
    free(vals);
    g->replicates = ok;
    g->lo = g->hi = NAN;
    if (ok >= 2) {
        qsort(slopes, ok, sizeof(double), cmp_double);
        g->lo = slopes[(size_t)floor(0.025 * (ok - 1))];
        g->hi = slopes[(size_t)ceil(0.975 * (ok - 1))];
    }
    free(slopes);
    free(sums);
}

double drift_growth_crossing(double peak, double p_peak, double slope,
                             double level)
{
    if (!(slope > 0) || !(peak > 0) || !(p_peak > 0))
        return NAN;
    if (peak >= level)
        return p_peak;
    return p_peak * pow(level / peak, 1 / slope);
}

/* Whether bucket b's excess mean KL is decided at or above the mean-KL
 * WARN threshold (its lower bound, as the bucket verdict judges it). */
static bool decided_warn(const struct drift_analysis *a, bool has_self,
                         size_t b)
{
    struct drift_bsum c, t, s, x;
    drift_bucket_summary(&a->acc[DRIFT_ARM_CAND][b], &c);
    drift_bucket_summary(&a->acc[DRIFT_ARM_CTRL][b], &t);
    drift_bucket_summary(&a->acc[DRIFT_ARM_SELF][b], &s);
    drift_bucket_excess(&c, &t, &s, has_self, &x);
    return x.n && x.kl_mean - 2 * x.kl_se > a->th.kl_mean[0];
}

/* Growth's verdict and the shape of the difference; see analysis.h and
 * docs/DRIFT.md, "Growth". */
static void judge(const struct drift_analysis *a, bool has_self,
                  const double *ex, const struct trend *tr, size_t nb,
                  uint64_t context, struct drift_growth *g)
{
    const struct drift_thresholds *th = &a->th;
    size_t pk = nb;
    g->peak = 0;
    g->cross[0] = g->cross[1] = NAN;
    g->context = context ? context : (uint64_t)a->pos_max + 1;
    for (size_t b = 0; b < nb; b++)
        if (tr->use[b] && !isnan(ex[b])) {
            if (ex[b] > g->peak) {
                g->peak = ex[b];
                pk = b;
            }
            g->sized |= decided_warn(a, has_self, b);
        }
    if (pk < nb)
        g->peak_pos = (uint32_t)lround(exp(tr->lx[pk]));
    g->verdict = DRIFT_NA;
    g->shape = g->peak >= tr->floor && g->peak > TINY ? DRIFT_SHAPE_CONSTANT
                                                      : DRIFT_SHAPE_NONE;
    if (isnan(g->slope) || g->shape == DRIFT_SHAPE_NONE)
        return;
    g->verdict = DRIFT_PASS;
    g->significant = !isnan(g->lo) && g->lo > 0 && g->slope > 0;
    if (!(g->slope > th->growth[0]))
        return; /* not growth, whatever its interval */
    if (!g->significant) {
        /* a growth-sized slope the interval cannot tell from 0 */
        g->verdict = DRIFT_INCONCLUSIVE;
        if (isnan(g->lo)) {
            g->why = "one sequence gives the slope no interval";
        } else {
            double w = g->slope - g->lo;
            g->seqs_to_decide =
                ceil((double)a->n_seq * (w / g->slope) * (w / g->slope));
            g->why = "the slope's interval includes 0";
        }
        return;
    }
    enum drift_verdict level =
        g->slope > th->growth[1] ? DRIFT_FAIL : DRIFT_WARN;
    if (g->sized) {
        g->verdict = level;
        g->shape = DRIFT_SHAPE_GROWING;
        return;
    }
    /* the excess has not reached WARN where measured: where would it? */
    for (int k = 0; k < 2; k++)
        g->cross[k] = drift_growth_crossing(g->peak, g->peak_pos, g->slope,
                                            th->kl_mean[k]);
    if (g->peak >= th->kl_mean[0]) {
        g->verdict = DRIFT_INCONCLUSIVE;
        g->why = "the excess reaches WARN but its bound does not";
    } else if (g->cross[0] <= (double)g->context) {
        g->verdict = DRIFT_INCONCLUSIVE;
        g->why = "at the measured slope the excess would cross WARN within "
                 "the server's context";
    } else {
        g->why = "at the measured slope the excess would cross WARN only "
                 "beyond the server's context";
    }
}

void drift_growth_compute(const struct drift_analysis *a, bool has_self,
                          unsigned replicates, uint64_t seed, uint64_t context,
                          struct drift_growth *g)
{
    size_t nb = a->n_buckets;
    double sums[DRIFT_BUCKETS_MAX * DRIFT_ARMS * DRIFT_SEQ_F] = {0};
    double ex[DRIFT_BUCKETS_MAX];
    struct trend tr = {.floor = a->th.growth_floor > TINY ? a->th.growth_floor
                                                          : TINY};

    memset(g, 0, sizeof(*g));
    for (size_t b = 0; b < DRIFT_BUCKETS_MAX; b++)
        for (int m = 0; m < 3; m++)
            g->ci[b][m][0] = g->ci[b][m][1] = NAN;
    g->from = (a->pos_max + 3) / 4;
    for (size_t b = 0; b < nb; b++) {
        const struct drift_acc *c = &a->acc[DRIFT_ARM_CAND][b];
        tr.lx[b] = c->n ? log(c->pos_sum / (double)c->n) : NAN;
        /* past the first quarter: the bucket starts at or after it */
        tr.use[b] = (uint64_t)a->edges[b] * 4 >= (uint64_t)a->pos_max + 1;
        for (int arm = 0; arm < DRIFT_ARMS; arm++) {
            sums[(b * DRIFT_ARMS + arm) * DRIFT_SEQ_F] = a->acc[arm][b].kl_sum;
            sums[(b * DRIFT_ARMS + arm) * DRIFT_SEQ_F + 1] =
                (double)a->acc[arm][b].n;
        }
    }
    excess_means(sums, nb, has_self, ex);
    g->slope = slope_of(ex, tr.lx, tr.use, nb, tr.floor, &g->points);
    ratio_of(ex, nb, g);
    /* the replicates also give the buckets' intervals, slope or not */
    bootstrap(a, has_self, a->n_seq >= 2 ? replicates : 0, seed, &tr, g);
    if (isnan(g->slope))
        g->lo = g->hi = NAN;
    judge(a, has_self, ex, &tr, nb, context, g);
}
