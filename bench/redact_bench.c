/*
 * redact_bench: what record's body redaction (src/record/redact.c) costs
 * per exchange, on the loop's thread, for the request bodies given (the
 * opencode captures in tests/fixtures/ when run by bench/record.sh): each
 * body is copied and redacted ITERS times; the copy alone is timed too and
 * subtracted. Prints, per body, its bytes, the microseconds per exchange
 * and the throughput, then the mean over the bodies.
 *
 *   build/redact_bench [ITERS] FILE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "record/redact.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 0;
    if (iters <= 0 || argc < 3) {
        fprintf(stderr, "usage: redact_bench ITERS FILE...\n");
        return 2;
    }
    double sum_us = 0;
    int files = 0;
    size_t hidden = 0;
    for (int a = 2; a < argc; a++) {
        size_t len;
        char *src = slurp(argv[a], &len);
        if (!src) {
            fprintf(stderr, "redact_bench: cannot read '%s'\n", argv[a]);
            return 2;
        }
        char *w = malloc(len + 1);
        double t0 = now_s();
        for (int i = 0; i < iters; i++) {
            memcpy(w, src, len);
            __asm__ volatile("" : : "r"(w) : "memory");
        }
        double t1 = now_s();
        for (int i = 0; i < iters; i++) {
            memcpy(w, src, len);
            hidden += redact_body(w, len, NULL, 0);
        }
        double t2 = now_s();
        double us = ((t2 - t1) - (t1 - t0)) / iters * 1e6;
        const char *name = strrchr(argv[a], '/');
        printf("redact %-60s %7zu bytes %8.2f us/exchange %7.0f MB/s\n",
               name ? name + 1 : argv[a], len, us,
               us > 0 ? (double)len / us : 0);
        sum_us += us;
        files++;
        free(w);
        free(src);
    }
    printf("redact mean over %d bodies: %.2f us/exchange (%zu values "
           "hidden)\n",
           files, sum_us / files, hidden);
    return 0;
}
