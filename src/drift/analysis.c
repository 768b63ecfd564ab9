/*
 * drift analysis: buckets, accumulators, excess over the noise baseline,
 * verdicts and the worst-positions heap. Contract in analysis.h.
 */
#include "drift/analysis.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

const char *drift_verdict_name(enum drift_verdict v)
{
    static const char *const names[] = {
        [DRIFT_PASS] = "PASS", [DRIFT_INCONCLUSIVE] = "INCONCLUSIVE",
        [DRIFT_WARN] = "WARN", [DRIFT_FAIL] = "FAIL",
        [DRIFT_NA] = "n/a",
    };
    return names[v];
}

bool drift_verdict_off(enum drift_verdict v)
{
    return v == DRIFT_WARN || v == DRIFT_FAIL;
}

void drift_thresholds_default(struct drift_thresholds *t)
{
    *t = (struct drift_thresholds){
        .kl_mean = {1e-4, 1e-3},
        .kl_p999 = {1e-3, 1e-2},
        .top1 = {0.995, 0.975},
        .dp_rms = {0.003, 0.012},
        .growth = {0.585, 1.0},
        .growth_floor = 1e-5,
        .flip_margin = 0.2,
    };
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int drift_analysis_init(struct drift_analysis *a, uint32_t min_bucket,
                        uint32_t max_pos, const uint32_t *extra, size_t n_extra,
                        size_t worst_cap, const struct drift_thresholds *th)
{
    uint32_t e[DRIFT_BUCKETS_MAX * 2 + 2];
    size_t n = 0, cap = sizeof(e) / sizeof(e[0]);
    int ret = 0;

    memset(a, 0, sizeof(*a));
    if (th)
        a->th = *th;
    else
        drift_thresholds_default(&a->th);
    a->worst_cap = worst_cap < DRIFT_WORST_MAX ? worst_cap : DRIFT_WORST_MAX;
    if (min_bucket < 2)
        min_bucket = 2;
    e[n++] = 1;
    for (uint64_t p = min_bucket; n < cap - 1; p *= 2) {
        e[n++] = (uint32_t)p;
        if (p > max_pos || p >= (1U << 31))
            break;
    }
    for (size_t i = 0; i < n_extra && n < cap; i++)
        if (extra[i] > 1)
            e[n++] = extra[i];
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++)
        top = e[i] > top ? e[i] : top;
    if (n < cap && top <= max_pos)
        e[n++] = max_pos + 1;
    qsort(e, n, sizeof(e[0]), cmp_u32);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || e[i] != a->edges[m - 1]) {
            if (m > DRIFT_BUCKETS_MAX) {
                ret = -E2BIG;
                break;
            }
            a->edges[m++] = e[i];
        }
    a->n_buckets = m - 1;
    for (int arm = 0; arm < DRIFT_ARMS; arm++)
        for (size_t b = 0; b < a->n_buckets; b++)
            drift_sketch_init(&a->acc[arm][b].kl);
    return ret;
}

void drift_analysis_release(struct drift_analysis *a)
{
    free(a->seq_sums);
    a->seq_sums = NULL;
    a->n_seq = a->seq_alloc = 0;
}

#define SEQ_STRIDE(a) ((a)->n_buckets * DRIFT_ARMS * DRIFT_SEQ_F)

uint32_t drift_analysis_begin_seq(struct drift_analysis *a)
{
    size_t stride = SEQ_STRIDE(a);
    if (a->n_seq == a->seq_alloc) {
        a->seq_alloc = a->seq_alloc ? a->seq_alloc * 2 : 16;
        a->seq_sums =
            xrealloc(a->seq_sums, a->seq_alloc * stride * sizeof(double));
    }
    memset(a->seq_sums + a->n_seq * stride, 0, stride * sizeof(double));
    return (uint32_t)a->n_seq++;
}

int drift_bucket_of(const struct drift_analysis *a, uint32_t pos)
{
    size_t lo = 0, hi = a->n_buckets;
    if (a->n_buckets == 0 || pos < a->edges[0])
        return -1;
    if (pos >= a->edges[a->n_buckets])
        return (int)a->n_buckets - 1;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (a->edges[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return (int)lo;
}

static void worst_push(struct drift_analysis *a, const struct drift_worst *w)
{
    struct drift_worst *h = a->worst;
    size_t i;
    if (a->worst_cap == 0 || !(w->kl > 0))
        return; /* positions that agree exactly are not "worst" */
    if (a->n_worst < a->worst_cap) {
        i = a->n_worst++;
        while (i > 0 && h[(i - 1) / 2].kl > w->kl) {
            h[i] = h[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        h[i] = *w;
        return;
    }
    if (!(w->kl > h[0].kl))
        return;
    i = 0;
    for (;;) { /* sift the new entry down from the root */
        size_t l = 2 * i + 1, r = l + 1, s = i;
        double ks = w->kl;
        if (l < a->n_worst && h[l].kl < ks) {
            s = l;
            ks = h[l].kl;
        }
        if (r < a->n_worst && h[r].kl < ks)
            s = r;
        if (s == i)
            break;
        h[i] = h[s];
        i = s;
    }
    h[i] = *w;
}

void drift_analysis_add(struct drift_analysis *a, enum drift_arm arm,
                        uint32_t seq, uint32_t pos, uint64_t forced,
                        const struct drift_pm *m)
{
    int b = drift_bucket_of(a, pos);
    if (b < 0)
        return;
    struct drift_acc *c = &a->acc[arm][b];
    c->n++;
    c->pos_sum += pos;
    c->kl_sum += m->kl;
    c->kl_sq += m->kl * m->kl;
    if (m->kl > c->kl_max)
        c->kl_max = m->kl;
    drift_sketch_add(&c->kl, m->kl);
    c->nll_g -= m->lp_g;
    c->nll_c -= m->lp_c;
    c->dp_sum += m->dp;
    c->dp_sq += m->dp * m->dp;
    c->dp_q += m->dp * m->dp * m->dp * m->dp;
    if (m->has_top) {
        c->top_n++;
        c->top1_agree += m->top1_agree;
        c->flips += m->decisive_flip;
        c->overlap_sum += m->overlap;
    }
    if (seq < a->n_seq) {
        double *s = a->seq_sums + seq * SEQ_STRIDE(a) +
                    ((size_t)b * DRIFT_ARMS + arm) * DRIFT_SEQ_F;
        s[0] += m->kl;
        s[1] += 1;
        s[2] += m->dp * m->dp;
        if (m->has_top) {
            s[3] += 1;
            s[4] += m->top1_agree;
        }
    }
    if (arm == DRIFT_ARM_CAND) {
        if (pos > a->pos_max)
            a->pos_max = pos;
        struct drift_worst w = {seq,   pos,    m->kl,     m->dlp,
                                m->dp, forced, m->top1_g, m->top1_c};
        worst_push(a, &w);
    }
}

void drift_analysis_skip(struct drift_analysis *a, enum drift_arm arm,
                         enum drift_skip why, uint64_t count)
{
    a->skipped[arm][why] += count;
}

void drift_bucket_summary(const struct drift_acc *c, struct drift_bsum *s)
{
    memset(s, 0, sizeof(*s));
    s->n = c->n;
    if (c->n == 0) {
        s->kl_mean = s->kl_p50 = s->kl_p99 = s->kl_p999 = s->kl_max = NAN;
        s->log_ppl_ratio = s->dp_mean = s->dp_rms = NAN;
        s->top1 = s->overlap = NAN;
        return;
    }
    double n = (double)c->n;
    s->kl_mean = c->kl_sum / n;
    s->kl_p50 = drift_sketch_quantile(&c->kl, 0.5);
    s->kl_p99 = drift_sketch_quantile(&c->kl, 0.99);
    s->kl_p999 = drift_sketch_quantile(&c->kl, 0.999);
    s->kl_max = c->kl_max;
    s->log_ppl_ratio = (c->nll_c - c->nll_g) / n;
    s->dp_mean = c->dp_sum / n;
    s->dp_rms = sqrt(c->dp_sq / n);
    s->top1 = c->top_n ? (double)c->top1_agree / (double)c->top_n : 1;
    double var =
        c->n > 1 ? (c->kl_sq - n * s->kl_mean * s->kl_mean) / (n - 1) : 0;
    s->kl_se = var > 0 ? sqrt(var / n) : 0;
    double ms = c->dp_sq / n;
    double var2 = c->n > 1 ? (c->dp_q - n * ms * ms) / (n - 1) : 0;
    s->dp_ms_se = var2 > 0 ? sqrt(var2 / n) : 0;
    s->top1_se =
        c->top_n ? sqrt(s->top1 * (1 - s->top1) / (double)c->top_n) : 0;
    s->flips = c->flips;
    s->overlap = c->top_n ? c->overlap_sum / (double)c->top_n : 1;
}

void drift_acc_merge(struct drift_acc *out, const struct drift_acc *c)
{
    out->n += c->n;
    out->pos_sum += c->pos_sum;
    out->kl_sum += c->kl_sum;
    out->kl_sq += c->kl_sq;
    if (c->kl_max > out->kl_max)
        out->kl_max = c->kl_max;
    out->nll_g += c->nll_g;
    out->nll_c += c->nll_c;
    out->dp_sum += c->dp_sum;
    out->dp_sq += c->dp_sq;
    out->dp_q += c->dp_q;
    out->top_n += c->top_n;
    out->top1_agree += c->top1_agree;
    out->flips += c->flips;
    out->overlap_sum += c->overlap_sum;
    out->kl.n += c->kl.n;
    out->kl.zero += c->kl.zero;
    out->kl.under += c->kl.under;
    out->kl.over += c->kl.over;
    if (c->kl.max > out->kl.max)
        out->kl.max = c->kl.max;
    for (size_t i = 0; i < DRIFT_SK_BINS; i++)
        out->kl.bin[i] += c->kl.bin[i];
}

void drift_analysis_total(const struct drift_analysis *a, enum drift_arm arm,
                          struct drift_acc *out)
{
    memset(out, 0, sizeof(*out));
    for (size_t b = 0; b < a->n_buckets; b++)
        drift_acc_merge(out, &a->acc[arm][b]);
}

static double nz(double v)
{
    return isnan(v) ? 0 : v;
}

static double sub0(double c, double base)
{
    double d = nz(c) - base;
    return d > 0 ? d : 0;
}

void drift_bucket_excess(const struct drift_bsum *cand,
                         const struct drift_bsum *ctrl,
                         const struct drift_bsum *self, bool has_self,
                         struct drift_bsum *out)
{
    double w = has_self ? 0.5 : 1;
#define BASE(f)                                                                \
    (w * nz((double)ctrl->f) + (has_self ? 0.5 * nz((double)self->f) : 0))
    *out = *cand;
    if (cand->n == 0)
        return;
    out->kl_mean = sub0(cand->kl_mean, BASE(kl_mean));
    out->kl_p50 = sub0(cand->kl_p50, BASE(kl_p50));
    out->kl_p99 = sub0(cand->kl_p99, BASE(kl_p99));
    out->kl_p999 = sub0(cand->kl_p999, BASE(kl_p999));
    out->kl_max = sub0(cand->kl_max, BASE(kl_max));
    out->log_ppl_ratio = cand->log_ppl_ratio - BASE(log_ppl_ratio);
    out->dp_mean = cand->dp_mean - BASE(dp_mean);
    double r2 = nz(cand->dp_rms) * nz(cand->dp_rms) -
                w * nz(ctrl->dp_rms) * nz(ctrl->dp_rms) -
                (has_self ? 0.5 * nz(self->dp_rms) * nz(self->dp_rms) : 0);
    out->dp_rms = r2 > 0 ? sqrt(r2) : 0;
    double dis = 1 - nz(cand->top1);
    double base_dis = w * (ctrl->n ? 1 - nz(ctrl->top1) : 0) +
                      (has_self && self->n ? 0.5 * (1 - nz(self->top1)) : 0);
    out->top1 = 1 - (dis > base_dis ? dis - base_dis : 0);
    double f = (double)cand->flips - BASE(flips);
    out->flips = f > 0 ? (uint64_t)llround(f) : 0;
    double wt = w * w, ws = has_self ? 0.25 : 0;
    out->kl_se = sqrt(nz(cand->kl_se) * nz(cand->kl_se) +
                      wt * nz(ctrl->kl_se) * nz(ctrl->kl_se) +
                      ws * nz(self->kl_se) * nz(self->kl_se));
    out->dp_ms_se = sqrt(nz(cand->dp_ms_se) * nz(cand->dp_ms_se) +
                         wt * nz(ctrl->dp_ms_se) * nz(ctrl->dp_ms_se) +
                         ws * nz(self->dp_ms_se) * nz(self->dp_ms_se));
    out->top1_se = sqrt(nz(cand->top1_se) * nz(cand->top1_se) +
                        wt * nz(ctrl->top1_se) * nz(ctrl->top1_se) +
                        ws * nz(self->top1_se) * nz(self->top1_se));
    out->overlap =
        1 - sub0(1 - nz(cand->overlap),
                 w * (ctrl->n ? 1 - nz(ctrl->overlap) : 0) +
                     (has_self && self->n ? 0.5 * (1 - nz(self->overlap)) : 0));
#undef BASE
}

static enum drift_verdict above(double v, const double th[2])
{
    if (isnan(v))
        return DRIFT_PASS;
    return v > th[1] ? DRIFT_FAIL : v > th[0] ? DRIFT_WARN : DRIFT_PASS;
}

enum drift_verdict drift_verdict_worse(enum drift_verdict a,
                                       enum drift_verdict b)
{
    if (a == DRIFT_NA)
        return b;
    if (b == DRIFT_NA)
        return a;
    return a > b ? a : b;
}

double drift_more_to_decide(double n, double point, double se, double threshold)
{
    double gap = point - threshold;
    if (!(gap > 0) || !(n > 0))
        return INFINITY;
    double need = n * (2 * se / gap) * (2 * se / gap);
    /* rounded up, past the last bits of floating error */
    return need > n ? ceil(need - n - 1e-6 * need) : 0;
}

void drift_about(double v, char *out, size_t cap)
{
    if (!isfinite(v)) {
        snprintf(out, cap, "an unbounded number of");
        return;
    }
    /* two significant digits, then thousands separators */
    double mag = v >= 100 ? pow(10, floor(log10(v)) - 1) : 1;
    unsigned long long r = (unsigned long long)llround(ceil(v / mag) * mag);
    char digits[32], *o = out;
    int len = snprintf(digits, sizeof(digits), "%llu", r);
    size_t left = cap;
    for (int i = 0; i < len && left > 1; i++) {
        if (i && (len - i) % 3 == 0 && left > 2) {
            *o++ = ',';
            left--;
        }
        *o++ = digits[i];
        left--;
    }
    *o = '\0';
}

/* One figure judged on its lower bound point - 2 se against th: the
 * decided verdict, and into u what its point reaches and its bound does
 * not (the lowest such level, the fewest observations). */
static enum drift_verdict judge_lb(const char *metric, double point, double se,
                                   double n, const double th[2],
                                   struct drift_undecided *u)
{
    if (isnan(point))
        return DRIFT_PASS;
    double lo = point - 2 * se;
    enum drift_verdict dec = above(lo, th), pt = above(point, th);
    if (pt > dec) {
        enum drift_verdict level = dec == DRIFT_PASS ? DRIFT_WARN : DRIFT_FAIL;
        double t = th[level == DRIFT_WARN ? 0 : 1];
        double more = drift_more_to_decide(n, point, se, t);
        if (u->level == DRIFT_NA || level < u->level ||
            (level == u->level && more < u->more))
            *u = (struct drift_undecided){level, metric, point, se, t, n, more};
    }
    return dec;
}

enum drift_verdict drift_bucket_judge(const struct drift_bsum *x,
                                      const struct drift_thresholds *th,
                                      struct drift_undecided *out)
{
    struct drift_undecided u = {.level = DRIFT_NA};
    if (x->n == 0) {
        if (out)
            *out = u;
        return DRIFT_NA;
    }
    double n = (double)x->n;
    enum drift_verdict v =
        judge_lb("mean KL", x->kl_mean, x->kl_se, n, th->kl_mean, &u);
    /* below 1,000 positions the 99.9th percentile is the sample maximum,
     * which noise alone drives up: it is shown but not judged */
    if (x->n >= 1000)
        v = drift_verdict_worse(v, above(x->kl_p999, th->kl_p999));
    /* RMS delta-p in squares: mean dp^2 against the squared thresholds */
    double sq[2] = {th->dp_rms[0] * th->dp_rms[0],
                    th->dp_rms[1] * th->dp_rms[1]};
    v = drift_verdict_worse(v, judge_lb("RMS delta-p squared",
                                        x->dp_rms * x->dp_rms, x->dp_ms_se, n,
                                        sq, &u));
    double dis[2] = {1 - th->top1[0], 1 - th->top1[1]};
    v = drift_verdict_worse(
        v, judge_lb("top-1 disagreement", 1 - x->top1, x->top1_se, n, dis, &u));
    /* undecided below what is decided does not count */
    if (u.level != DRIFT_NA && u.level <= v)
        u.level = DRIFT_NA;
    if (u.level == DRIFT_WARN)
        v = DRIFT_INCONCLUSIVE;
    if (out)
        *out = u;
    return v;
}

enum drift_verdict drift_bucket_verdict(const struct drift_bsum *x,
                                        const struct drift_thresholds *th)
{
    return drift_bucket_judge(x, th, NULL);
}

size_t drift_worst_sorted(const struct drift_analysis *a,
                          struct drift_worst *out, size_t cap)
{
    size_t n = a->n_worst < cap ? a->n_worst : cap;
    struct drift_worst tmp[DRIFT_WORST_MAX];
    memcpy(tmp, a->worst, a->n_worst * sizeof(tmp[0]));
    /* selection of the n largest, in order; n <= 256 */
    for (size_t i = 0; i < a->n_worst; i++)
        for (size_t j = i + 1; j < a->n_worst; j++)
            if (tmp[j].kl > tmp[i].kl ||
                (tmp[j].kl == tmp[i].kl &&
                 (tmp[j].seq < tmp[i].seq ||
                  (tmp[j].seq == tmp[i].seq && tmp[j].pos < tmp[i].pos)))) {
                struct drift_worst t = tmp[i];
                tmp[i] = tmp[j];
                tmp[j] = t;
            }
    memcpy(out, tmp, n * sizeof(tmp[0]));
    return n;
}
