/*
 * bench/bisect_launches: the launches adaptive bisect makes against
 * one-at-a-time, for n = 4, 8, 16 toggles holding d = 1, 2, 3 culprits
 * (each harmful alone), over every placement of the culprits: the planner
 * of src/bisect/plan.c run against an oracle, so the counts are exact and
 * no server is started. Printed as the table of docs/PERFORMANCE.md, the
 * golden included in both columns.
 *   cc -O2 -Isrc bench/bisect_launches.c build/libfidelity.a ... (bench/bisect.sh)
 */
#include <math.h>
#include <stdio.h>

#include "bisect/plan.h"

static int oracle(bisect_set s, bool *harmful, void *ud)
{
    *harmful = (s & *(const bisect_set *)ud) != 0;
    return 0;
}

/* Every set of d toggles of n, in turn, as the culprits. */
static void placements(size_t n, size_t d, size_t from, bisect_set cur,
                       size_t *sum, size_t *max, size_t *count)
{
    if (!d) {
        struct bisect_adaptive_result r;
        bisect_adaptive(n, oracle, &cur, &r);
        *sum += r.tests;
        *max = r.tests > *max ? r.tests : *max;
        (*count)++;
        return;
    }
    for (size_t i = from; i < n; i++)
        placements(n, d - 1, i + 1, cur | (bisect_set)1 << i, sum, max,
                   count);
}

int main(void)
{
    static const size_t ns[] = {4, 8, 16};
    printf("| n | d | one-at-a-time | adaptive mean | adaptive worst | bound "
           "1 + d (ceil(log2 n) + 2) | d log2(n/d) + 2d |\n"
           "|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < 3; i++)
        for (size_t d = 1; d <= 3; d++) {
            size_t sum = 0, max = 0, count = 0;
            placements(ns[i], d, 0, 0, &sum, &max, &count);
            printf("| %zu | %zu | %zu | %.1f | %zu | %zu | %.1f |\n", ns[i],
                   d, 1 + ns[i], 1 + (double)sum / (double)count, 1 + max,
                   1 + bisect_adaptive_bound(ns[i], d),
                   1 + (double)d * log2((double)ns[i] / (double)d) +
                       2.0 * (double)d);
        }
    printf("(launches, the golden included; adaptive over every placement "
           "of d culprits among n)\n");
    return 0;
}
