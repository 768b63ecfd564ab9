/*
 * stats: the statistics probe and drift report. Pure functions, no I/O.
 * Formulas are cited where they are defined in stats.c.
 */
#ifndef CORE_STATS_H
#define CORE_STATS_H

#include <stddef.h>

/* 95% (z = 1.959964) Wilson score interval for k successes of n.
 * n == 0 gives [0, 1]. */
void stats_wilson(unsigned k, unsigned n, double z, double *lo, double *hi);
/* Two-sided exact McNemar p-value from the discordant counts b and c
 * (binomial test of b against Bin(b + c, 1/2)). b + c == 0 gives 1. */
double stats_mcnemar_exact(unsigned b, unsigned c);
/* Quantile q in [0, 1] of v[0..n) by linear interpolation (type 7); sorts v
 * in place. n == 0 gives NAN. */
double stats_quantile_sort(double *v, size_t n, double q);
/* Least-squares slope of y on x; NAN when fewer than two distinct x. */
double stats_slope(const double *x, const double *y, size_t n);

/* Running mean and variance (Welford). */
struct stats_run {
    size_t n;
    double mean;
    double m2;
    double min;
    double max;
};
void stats_run_init(struct stats_run *r);
void stats_run_add(struct stats_run *r, double x);
double stats_run_var(const struct stats_run *r);

#endif
