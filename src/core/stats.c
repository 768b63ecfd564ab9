/*
 * stats: Wilson intervals, McNemar's exact test, quantiles, slopes and
 * running moments.
 */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>

/* Wilson (1927), "Probable inference, the law of succession, and
 * statistical inference", JASA 22:209-212. */
void stats_wilson(unsigned k, unsigned n, double z, double *lo, double *hi)
{
    if (n == 0) {
        *lo = 0.0;
        *hi = 1.0;
        return;
    }
    double p = (double)k / n, z2 = z * z, nn = (double)n;
    double den = 1.0 + z2 / nn;
    double mid = (p + z2 / (2 * nn)) / den;
    double half = z * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / den;
    *lo = mid - half < 0 ? 0 : mid - half;
    *hi = mid + half > 1 ? 1 : mid + half;
    if (k == 0)
        *lo = 0;
    if (k == n)
        *hi = 1;
}

/* log of the binomial coefficient C(n, k) through lgamma. */
static double log_choose(unsigned n, unsigned k)
{
    return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0);
}

/* McNemar (1947); exact form: two-sided binomial test on the discordant
 * pairs, p = min(1, 2 * P[X <= min(b, c)]) with X ~ Bin(b + c, 0.5). */
double stats_mcnemar_exact(unsigned b, unsigned c)
{
    unsigned n = b + c, k = b < c ? b : c;
    if (n == 0)
        return 1.0;
    double p = 0.0;
    for (unsigned i = 0; i <= k; i++)
        p += exp(log_choose(n, i) - n * log(2.0));
    p *= 2.0;
    return p > 1.0 ? 1.0 : p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double stats_quantile_sort(double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof(*v), cmp_double);
    double h = (double)(n - 1) * q;
    size_t i = (size_t)floor(h);
    if (i + 1 >= n)
        return v[n - 1];
    return v[i] + (h - (double)i) * (v[i + 1] - v[i]);
}

double stats_slope(const double *x, const double *y, size_t n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        sxy += x[i] * y[i];
    }
    double dn = (double)n;
    double den = dn * sxx - sx * sx;
    if (n < 2 || fabs(den) < 1e-300)
        return NAN;
    return (dn * sxy - sx * sy) / den;
}

void stats_run_init(struct stats_run *r)
{
    r->n = 0;
    r->mean = 0;
    r->m2 = 0;
    r->min = INFINITY;
    r->max = -INFINITY;
}

/* Welford (1962), Technometrics 4:419-420. */
void stats_run_add(struct stats_run *r, double x)
{
    r->n++;
    double d = x - r->mean;
    r->mean += d / (double)r->n;
    r->m2 += d * (x - r->mean);
    if (x < r->min)
        r->min = x;
    if (x > r->max)
        r->max = x;
}

double stats_run_var(const struct stats_run *r)
{
    return r->n > 1 ? r->m2 / (double)(r->n - 1) : 0.0;
}
