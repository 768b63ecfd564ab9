/*
 * rtiming: fixed histograms (10 us buckets up to 100 ms, then one
 * overflow bucket), so adding a sample is an increment and memory stays
 * constant whatever the run's length.
 */
#include "record/rtiming.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

#define BUCKETS 10001 /* 0..9999: [10 us * i, 10 us * (i + 1)); last: more */

static const char *const NAMES[RT_N] = {
    [RT_WAIT] = "wait for store",  [RT_BUILD] = "build row",
    [RT_PUT] = "insert+commit",    [RT_BACK] = "hand back",
    [RT_HELD] = "held end",        [RT_TOTAL] = "request in -> answer",
    [RT_BATCH] = "batch size",     [RT_INLINE] = "stored inline",
    [RT_APPEND] = "intake append",
};

struct rtiming {
    uint32_t hist[RT_N][BUCKETS];
    double vmax[RT_N];
    uint64_t count[RT_N];
};

struct rtiming *rtiming_new(void)
{
    return xcalloc(1, sizeof(struct rtiming));
}

void rtiming_free(struct rtiming *t)
{
    free(t);
}

void rtiming_add(struct rtiming *t, enum rt_metric m, double v)
{
    /* counts go in unit buckets */
    double unit = m == RT_BATCH || m == RT_INLINE ? 1.0 : 0.01;
    double b = v / unit;
    size_t i = b < 0 ? 0 : b >= BUCKETS - 1 ? BUCKETS - 1 : (size_t)b;
    t->hist[m][i]++;
    t->count[m]++;
    if (v > t->vmax[m])
        t->vmax[m] = v;
}

/* The value below which a fraction q of the samples of m fall. */
static double quantile(const struct rtiming *t, enum rt_metric m, double q)
{
    double unit = m == RT_BATCH || m == RT_INLINE ? 1.0 : 0.01;
    uint64_t want = (uint64_t)(q * (double)t->count[m]), seen = 0;
    for (size_t i = 0; i < BUCKETS; i++) {
        seen += t->hist[m][i];
        if (seen > want) /* a count, or a bucket's upper end */
            return unit == 1.0 ? (double)i : (double)(i + 1) * unit;
    }
    return t->vmax[m];
}

void rtiming_report(struct rtiming *t, void (*log)(void *ud, const char *msg),
                    void *ud)
{
    for (int m = 0; m < RT_N; m++) {
        char line[200];
        if (!t->count[m] || !log)
            continue;
        if (m == RT_INLINE) {
            snprintf(line, sizeof(line), "timing: %-18s %llu of %llu", NAMES[m],
                     (unsigned long long)t->hist[m][1],
                     (unsigned long long)t->count[m]);
        } else {
            snprintf(line, sizeof(line),
                     "timing: %-18s n=%llu p50 %.2f p90 %.2f p99 %.2f "
                     "p99.9 %.2f max %.2f%s",
                     NAMES[m], (unsigned long long)t->count[m],
                     quantile(t, (enum rt_metric)m, 0.5),
                     quantile(t, (enum rt_metric)m, 0.9),
                     quantile(t, (enum rt_metric)m, 0.99),
                     quantile(t, (enum rt_metric)m, 0.999), t->vmax[m],
                     m == RT_BATCH ? "" : " ms");
        }
        log(ud, line);
    }
    memset(t, 0, sizeof(*t));
}
