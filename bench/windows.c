/*
 * bench/windows.c: how often this machine's CPU runs slow. One thread does
 * the same small piece of work (20,000 steps of a linear congruential
 * generator, about 27 us on the development machine) again and again for
 * S seconds and counts the pieces that took more than three times the
 * fastest one, and the runs they came in (consecutive slow pieces are one
 * window). On a quiet machine both are near zero; docs/PERFORMANCE.md
 * ("Measuring the p99 added") says what such windows do to a p99.
 *
 *   windows [S]          (default 3)
 *
 * Prints: "pieces N fastest US us slow K (P %) in R windows, longest MS ms"
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static volatile unsigned long long sink;

int main(int argc, char **argv)
{
    double dur = (argc > 1 ? atof(argv[1]) : 3) * 1e6;
    if (dur <= 0) {
        fprintf(stderr, "usage: windows [SECONDS]\n");
        return 2;
    }
    unsigned long long x = 1;
    long pieces = 0, slow = 0, windows = 0;
    double fastest = 1e18, run = 0, longest = 0;
    /* the slow test needs a fastest piece: a first second to find it */
    for (int pass = 0; pass < 2; pass++) {
        double start = now_us(), until = pass ? dur : 1e6;
        while (now_us() - start < until) {
            double a = now_us();
            for (int i = 0; i < 20000; i++)
                x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            sink = x;
            double d = now_us() - a;
            if (d < fastest)
                fastest = d;
            if (!pass)
                continue;
            pieces++;
            if (d > 3 * fastest) {
                slow++;
                if (run == 0)
                    windows++;
                run += d;
                if (run > longest)
                    longest = run;
            } else {
                run = 0;
            }
        }
    }
    printf("pieces %ld fastest %.1f us slow %ld (%.2f %%) in %ld windows, "
           "longest %.1f ms\n",
           pieces, fastest, slow,
           pieces ? 100.0 * (double)slow / (double)pieces : 0, windows,
           longest / 1e3);
    return 0;
}
