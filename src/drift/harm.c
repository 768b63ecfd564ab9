/*
 * drift harm: the one number that ranks candidates. The excess KL (the
 * candidate's KL over the noise baseline, docs/DRIFT.md) averaged over
 * every compared position of both paths: prefill positions, bucket by
 * bucket, and the decode steps (candidate decode against golden prefill,
 * over the golden's own decode-against-prefill gap where it was measured,
 * else over the noise baseline), each weighted by its count; a 95% percentile
 * bootstrap interval that resamples whole sequences (a sequence's prefill
 * positions and its decode steps together); and the excess decisive top-1 flips
 * per 1,000 positions beside it. Contract in drift.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/xalloc.h"
#include "drift/drift.h"

/* (sum, n) of the three arms per prefill bucket, then of DG and its
 * control and self baselines: the state a replicate needs. */
struct hsums {
    double pre[DRIFT_BUCKETS_MAX][DRIFT_ARMS][2];
    double dec[DRIFT_HS_N][2];
    double warm[3][2]; /* the cache arm: warm vs cold, cold vs cold, and
                          the golden's warm vs cold */
};

const char *drift_harm_arm_name(enum drift_harm_arm a)
{
    static const char *const n[] = {[DRIFT_HARM_PREFILL] = "prefill",
                                    [DRIFT_HARM_DECODE] = "decode",
                                    [DRIFT_HARM_CACHE_WARM] = "cache-warm"};
    return n[a];
}

static double mean_or0(const double *s)
{
    return s[1] > 0 ? s[0] / s[1] : 0;
}

static double baseline(const double *ctrl, const double *self, bool has_ctrl,
                       bool has_self)
{
    double c = has_ctrl ? mean_or0(ctrl) : 0;
    if (!has_self)
        return c;
    return 0.5 * c + 0.5 * mean_or0(self);
}

/* Excess KL mean over all positions; *n gets their count. */
static double harm_of(const struct hsums *h, size_t nb, bool has_ctrl,
                      bool has_self, bool warm_self, double *n)
{
    double num = 0, den = 0;
    for (size_t b = 0; b < nb; b++) {
        const double *c = h->pre[b][DRIFT_ARM_CAND];
        if (c[1] == 0)
            continue;
        double base = baseline(h->pre[b][DRIFT_ARM_CTRL],
                               h->pre[b][DRIFT_ARM_SELF], has_ctrl, has_self);
        num += c[0] - c[1] * base;
        den += c[1];
    }
    const double *dg = h->dec[DRIFT_HS_DG], *gap = h->dec[DRIFT_HS_GAP];
    if (dg[1] > 0 && gap[1] > 0) {
        /* over the golden's own decode-vs-prefill gap (what a candidate
         * identical to the golden shows): written so that equal sums over
         * equal counts cancel to exactly 0 */
        num += dg[0] - gap[0] * (dg[1] / gap[1]);
        den += dg[1];
    } else if (dg[1] > 0) {
        double base = baseline(h->dec[DRIFT_HS_CTRL], h->dec[DRIFT_HS_SELF],
                               has_ctrl, has_self);
        num += dg[0] - dg[1] * base;
        den += dg[1];
    }
    const double *w = h->warm[0], *gw = h->warm[2];
    if (w[1] > 0 && gw[1] > 0) { /* over the golden's own warm path */
        num += w[0] - gw[0] * (w[1] / gw[1]);
        den += w[1];
    } else if (w[1] > 0) { /* warm and cold both carry the noise */
        num += w[0] - w[1] * (warm_self ? mean_or0(h->warm[1]) : 0);
        den += w[1];
    }
    *n = den;
    return den > 0 ? num / den : NAN;
}

/* Adds unit i's sums into h: sequence i (prefill buckets, decode), or
 * past the sequences, conversation i - nseq of the cache arm. */
static void add_seq(const struct drift_result *r,
                    const struct drift_harm_warm *warm, size_t nseq, size_t i,
                    struct hsums *h)
{
    const struct drift_analysis *a = &r->an;
    if (i >= nseq) {
        const double *s = warm->sums + (i - nseq) * 4;
        for (int k = 0; k < 4; k++)
            h->warm[k / 2][k % 2] += s[k];
        if (warm->golden) {
            h->warm[2][0] += warm->golden[(i - nseq) * 2];
            h->warm[2][1] += warm->golden[(i - nseq) * 2 + 1];
        }
        return;
    }
    if (i < a->n_seq) {
        const double *s =
            a->seq_sums + i * a->n_buckets * DRIFT_ARMS * DRIFT_SEQ_F;
        for (size_t b = 0; b < a->n_buckets; b++)
            for (int arm = 0; arm < DRIFT_ARMS; arm++) {
                h->pre[b][arm][0] += s[(b * DRIFT_ARMS + arm) * DRIFT_SEQ_F];
                h->pre[b][arm][1] +=
                    s[(b * DRIFT_ARMS + arm) * DRIFT_SEQ_F + 1];
            }
    }
    if (r->dec.seq_sums && i < r->dec.n_seq) {
        const double *s = r->dec.seq_sums + i * DRIFT_HS_N * 2;
        for (int k = 0; k < DRIFT_HS_N; k++) {
            h->dec[k][0] += s[k * 2];
            h->dec[k][1] += s[k * 2 + 1];
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Excess decisive flips of the prefill total and of DG. */
static double excess_flips(const struct drift_result *r)
{
    double f = 0;
    if (r->prefill) {
        struct drift_acc c, t, s;
        struct drift_bsum bc, bt, bs, x;
        drift_analysis_total(&r->an, DRIFT_ARM_CAND, &c);
        drift_analysis_total(&r->an, DRIFT_ARM_CTRL, &t);
        drift_analysis_total(&r->an, DRIFT_ARM_SELF, &s);
        drift_bucket_summary(&c, &bc);
        drift_bucket_summary(&t, &bt);
        drift_bucket_summary(&s, &bs);
        drift_bucket_excess(&bc, &bt, &bs, r->has_self, &x);
        f += (double)x.flips;
    }
    if (r->dec.ran)
        f += (double)r->dec.excess[DRIFT_DP_DG].flips;
    return f;
}

void drift_harm_compute(const struct drift_result *r,
                        const struct drift_harm_warm *warm, unsigned replicates,
                        uint64_t seed, struct drift_harm *h)
{
    size_t nb = r->an.n_buckets;
    size_t nseq = r->an.n_seq > r->dec.n_seq ? r->an.n_seq : r->dec.n_seq;
    size_t units = nseq + (warm && warm->sums ? warm->n : 0);
    bool hc = r->has_control, hs = r->has_self;
    bool ws = warm && warm->has_self;
    struct hsums *all = xcalloc(1, sizeof(*all));
    struct hsums *rep = xcalloc(1, sizeof(*rep));
    double n;

    memset(h, 0, sizeof(*h));
    for (size_t i = 0; i < units; i++)
        add_seq(r, warm, nseq, i, all);
    double v = harm_of(all, nb, hc, hs, ws, &n);
    h->positions = (uint64_t)n;
    for (size_t b = 0; b < nb; b++)
        h->arm_positions[DRIFT_HARM_PREFILL] +=
            (uint64_t)all->pre[b][DRIFT_ARM_CAND][1];
    h->arm_positions[DRIFT_HARM_DECODE] = (uint64_t)all->dec[DRIFT_HS_DG][1];
    h->arm_positions[DRIFT_HARM_CACHE_WARM] = (uint64_t)all->warm[0][1];
    h->warm_golden = all->warm[0][1] > 0 && all->warm[2][1] > 0;
    h->excess_kl_mean = isnan(v) ? NAN : v > 0 ? v : 0;
    h->flips_per_1k =
        n > 0 ? 1000.0 * (excess_flips(r) + (warm ? warm->flips : 0)) / n : NAN;
    h->lo = h->hi = NAN;
    if ((nseq >= 2 || units - nseq >= 2) && replicates >= 2 && !isnan(v)) {
        double *vals = xmalloc(replicates * sizeof(double));
        unsigned ok = 0;
        struct rng g;
        rng_seed(&g, seed ^ 0x6861726dULL);
        for (unsigned k = 0; k < replicates; k++) {
            memset(rep, 0, sizeof(*rep));
            /* stratified: sequences among sequences, conversations
             * among conversations, so every replicate has the same mix */
            for (size_t i = 0; i < nseq; i++)
                add_seq(r, warm, nseq, rng_below(&g, nseq), rep);
            for (size_t i = nseq; i < units; i++)
                add_seq(r, warm, nseq, nseq + rng_below(&g, units - nseq), rep);
            double x = harm_of(rep, nb, hc, hs, ws, &n);
            if (!isnan(x))
                vals[ok++] = x > 0 ? x : 0;
        }
        if (ok >= 2) {
            qsort(vals, ok, sizeof(double), cmp_double);
            h->lo = vals[(size_t)floor(0.025 * (ok - 1))];
            h->hi = vals[(size_t)ceil(0.975 * (ok - 1))];
        }
        h->replicates = ok;
        free(vals);
    }
    free(rep);
    free(all);
}
