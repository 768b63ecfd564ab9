/*
 * drift sketch: the fixed-size log histogram behind the per-bucket KL
 * quantiles (p50, p99, p99.9). Error bound and layout in analysis.h.
 */
#include <math.h>
#include <string.h>

#include "drift/analysis.h"

void drift_sketch_init(struct drift_sketch *s)
{
    memset(s, 0, sizeof(*s));
}

void drift_sketch_add(struct drift_sketch *s, double v)
{
    if (isnan(v))
        return;
    s->n++;
    if (v <= 0) {
        s->zero++;
        return;
    }
    if (v > s->max)
        s->max = v;
    double e = (log10(v) - DRIFT_SK_LO_EXP) * DRIFT_SK_PER_DECADE;
    if (e < 0)
        s->under++;
    else if (e >= DRIFT_SK_BINS)
        s->over++;
    else
        s->bin[(size_t)e]++;
}

static double bin_mid(size_t i)
{
    double e = ((double)i + 0.5) / DRIFT_SK_PER_DECADE + DRIFT_SK_LO_EXP;
    return pow(10, e);
}

double drift_sketch_quantile(const struct drift_sketch *s, double q)
{
    if (s->n == 0 || isnan(q))
        return NAN;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    /* nearest rank: the smallest value with at least ceil(q n) at or below */
    uint64_t rank = (uint64_t)ceil(q * (double)s->n);
    if (rank == 0)
        rank = 1;
    uint64_t seen = s->zero;
    if (rank <= seen)
        return 0;
    if (rank == s->n)
        return s->max;
    seen += s->under;
    if (rank <= seen)
        return pow(10, DRIFT_SK_LO_EXP) < s->max ? pow(10, DRIFT_SK_LO_EXP)
                                                 : s->max;
    for (size_t i = 0; i < DRIFT_SK_BINS; i++) {
        seen += s->bin[i];
        if (rank <= seen) {
            double m = bin_mid(i);
            return m < s->max ? m : s->max;
        }
    }
    return s->max;
}
