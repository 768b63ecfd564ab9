/*
 * Tests for drift/dec2dbl (the Eisel-Lemire conversion of the fast reader):
 * differential against glibc's strtod, bit for bit, on millions of random
 * 1-19-digit significands and exponents and on hard cases (exact halfway
 * points and their neighbours, subnormals, the overflow edge, 17-digit
 * prints of float32 values, -0.0), both through drift_dec_to_double and
 * through the reader (drift_fast_prompt), which adds Clinger's path and
 * the strtod fallback. The conversion may refuse (the reader then calls
 * strtod); a test asserts it refuses rarely, so that it cannot pass by
 * refusing everything.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/rng.h"
#include "drift/dec2dbl.h"
#include "drift/dialect.h"
#include "drift/fastparse.h"

static uint64_t bits_of(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof(b));
    return b;
}

static const uint64_t pow10u[20] = {1ULL,
                                    10ULL,
                                    100ULL,
                                    1000ULL,
                                    10000ULL,
                                    100000ULL,
                                    1000000ULL,
                                    10000000ULL,
                                    100000000ULL,
                                    1000000000ULL,
                                    10000000000ULL,
                                    100000000000ULL,
                                    1000000000000ULL,
                                    10000000000000ULL,
                                    100000000000000ULL,
                                    1000000000000000ULL,
                                    10000000000000000ULL,
                                    100000000000000000ULL,
                                    1000000000000000000ULL,
                                    10000000000000000000ULL};

struct tally {
    unsigned long checked, refused;
};

/* m * 10^q both ways; a converted result must be strtod's, bit for bit. */
static void check(uint64_t m, int q, struct tally *t)
{
    char s[64];
    double got, want;
    snprintf(s, sizeof(s), "%llue%d", (unsigned long long)m, q);
    want = strtod(s, NULL);
    if (!drift_dec_to_double(m, q, &got)) {
        t->refused++;
        return;
    }
    t->checked++;
    if (bits_of(got) != bits_of(want))
        fail_msg("%s: got %a (%016llx), strtod %a (%016llx)", s, got,
                 (unsigned long long)bits_of(got), want,
                 (unsigned long long)bits_of(want));
}

/* A random significand of exactly d digits (1..19). */
static uint64_t sig_digits(struct rng *r, int d)
{
    uint64_t lo = pow10u[d - 1], span = d == 20 ? 0 : pow10u[d] - lo;
    if (d == 1)
        return 1 + rng_below(r, 9);
    if (d == 19 || span == 0)
        return lo + rng_below(r, UINT64_MAX - lo); /* < 2^64 */
    return lo + rng_below(r, span);
}

static void test_random_significands_and_exponents(void **state)
{
    (void)state;
    struct rng r;
    struct tally t = {0, 0}, normal = {0, 0};
    drift_dec_init();
    rng_seed(&r, 20211);
    for (long i = 0; i < 2000000; i++) {
        int d = 1 + (int)rng_below(&r, 19);
        uint64_t m = sig_digits(&r, d);
        int q;
        if (i % 2) /* the whole range, past it on both sides */
            q = -360 + (int)rng_below(&r, 690);
        else /* where logprobs live: 1e-30 .. 1e2 at 17 digits */
            q = -d - 30 + (int)rng_below(&r, 33);
        double mag = log10((double)m) + q;
        struct tally *which = mag > -307 && mag < 308 ? &normal : &t;
        check(m, q, which);
    }
    /* every normal result converted but a handful of possible ties */
    assert_true(normal.checked > 1800000);
    assert_true(normal.refused * 100000 < normal.checked);
}

/* Exact midpoints between two doubles that fit 19 digits, and their
 * neighbours one unit of the last digit away. */
static void test_halfway_points(void **state)
{
    (void)state;
    struct rng r;
    struct tally t = {0, 0};
    drift_dec_init();
    rng_seed(&r, 7);
    for (int i = 0; i < 200000; i++) {
        uint64_t M = (1ULL << 52) + rng_below(&r, 1ULL << 52);
        uint64_t N = 2 * M + 1; /* (N / 2) * 2^k is halfway */
        int k = -5 + (int)rng_below(&r, 15);
        uint64_t m;
        int q;
        if (k <= 0) { /* N * 2^k = N * 5^-k / 10^-k */
            m = N;
            for (int j = 0; j < -k; j++)
                m *= 5;
            q = k;
        } else {
            m = N << (k > 9 ? 9 : k);
            q = 0;
        }
        if (m >= pow10u[19])
            continue;
        check(m, q, &t);
        check(m - 1, q, &t);
        check(m + 1, q, &t);
    }
    /* midpoints with a power of ten: N = c * 5^q odd, value N * 2^E */
    for (int i = 0; i < 200000; i++) {
        int q = 1 + (int)rng_below(&r, 22);
        uint64_t p5 = 1;
        for (int j = 0; j < q; j++)
            p5 *= 5;
        uint64_t lo = (1ULL << 53) / p5 + 1, hi = (1ULL << 54) / p5;
        if (hi <= lo)
            continue;
        uint64_t c = (lo + rng_below(&r, hi - lo)) | 1;
        int sh = (int)rng_below(&r, 4);
        uint64_t m = c << sh; /* m * 10^q = (c * 5^q) * 2^(q + sh) */
        check(m, q, &t);
        check(m - 1, q, &t);
        check(m + 1, q, &t);
    }
    assert_true(t.checked > 300000);
    /* 2^53 + 1 is a tie that only an exact product can settle: the
     * conversion must refuse it, or get it right */
    check(9007199254740993ULL, 0, &t);
}

static void test_edges(void **state)
{
    (void)state;
    static const struct {
        uint64_t m;
        int q;
    } e[] = {
        {17976931348623157ULL, 292},
        {17976931348623158ULL, 292},
        {17976931348623159ULL, 292},
        {22250738585072014ULL, -324},
        {22250738585072011ULL, -324},
        {22250738585072012ULL, -324},
        {49406564584124654ULL, -340},
        {24703282292062327ULL, -340},
        {24703282292062328ULL, -340},
        {1, -342},
        {9999999999999999999ULL, -342},
        {1, 308},
        {9999999999999999999ULL, 289},
        {1, 309},
        {1, -400},
        {1, 400},
        {0, 0},
        {0, -400},
        {18446744073709551615ULL, 0},
        {18446744073709551615ULL, -20},
        {1, 0},
        {9007199254740993ULL, 0},
        {9007199254740992ULL, 0},
        {9007199254740994ULL, 0},
        {4503599627370497ULL, -1},
        {7, -1},
        {1, 23},
        {1, -23},
    };
    struct tally t = {0, 0};
    drift_dec_init();
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++)
        check(e[i].m, e[i].q, &t);
    assert_true(t.checked > 15);
    /* subnormals and the underflow edge: refused or right */
    struct rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 100000; i++) {
        int d = 1 + (int)rng_below(&r, 19);
        check(sig_digits(&r, d), -345 + (int)rng_below(&r, 40) - d, &t);
    }
}

/* Splits a decimal text into (m, q) when it has at most 19 significant
 * digits; false otherwise. */
static bool split(const char *s, bool *neg, uint64_t *m, int *q)
{
    int sig = 0, frac = 0, ex = 0;
    bool dot = false;
    *m = 0;
    *neg = *s == '-';
    s += *neg;
    for (; *s && *s != 'e'; s++) {
        if (*s == '.') {
            dot = true;
            continue;
        }
        if (*m == 0 && *s == '0') {
            frac += dot;
            continue;
        }
        if (++sig > 19)
            return false;
        *m = *m * 10 + (uint64_t)(*s - '0');
        frac += dot;
    }
    if (*s == 'e')
        ex = atoi(s + 1);
    *q = ex - frac;
    return true;
}

/* float32 values printed with 17 significant digits, as a server that
 * computed in float32 and printed the double may give them; and through
 * the reader, with the sign, -0.0 included. */
static void test_float32_prints_and_reader(void **state)
{
    (void)state;
    enum { N = 20000 };
    struct rng r;
    struct tally t = {0, 0};
    static uint32_t ids[N];
    static char num[N][48];
    struct buf b = BUF_INIT;
    drift_dec_init();
    rng_seed(&r, 11);
    buf_adds(&b, "{\"meta_info\":{\"input_token_logprobs\":[[null,1,null]");
    ids[0] = 1;
    for (int i = 1; i < N; i++) {
        uint32_t fb = (uint32_t)rng_next(&r) & 0x7fffffffu;
        float f;
        memcpy(&f, &fb, sizeof(f));
        if (isnan(f) || isinf(f))
            f = 1.5f;
        switch (i % 5) {
        case 0:
            snprintf(num[i], sizeof(num[i]), "%.17g", -(double)f);
            break;
        case 1: /* a logprob in float32, then as a double */
            snprintf(num[i], sizeof(num[i]), "%.17g",
                     (double)(float)(-40 * rng_unit(&r)));
            break;
        case 2:
            snprintf(num[i], sizeof(num[i]), "%.17e",
                     -(double)(float)(rng_unit(&r) * 1e-30));
            break;
        case 3:
            snprintf(num[i], sizeof(num[i]), "%s", i % 2 ? "-0.0" : "-0e-400");
            break;
        default:
            snprintf(num[i], sizeof(num[i]), "%.19g",
                     -rng_unit(&r) * pow(10, (double)rng_below(&r, 40) - 30));
        }
        bool neg;
        uint64_t m;
        int q;
        if (split(num[i], &neg, &m, &q))
            check(m, q, &t);
        ids[i] = 16 + (uint32_t)i;
        buf_printf(&b, ",[%s,%u,null]", num[i], ids[i]);
    }
    buf_adds(&b, "]}}");
    assert_true(t.checked > N / 2);
    struct drift_req rq = {.ids = ids, .n = N, .top_k = 20};
    struct drift_lp lp;
    drift_lp_init(&lp);
    assert_int_equal(
        drift_fast_prompt(DRIFT_DIALECT_SGLANG, b.data, b.len, &rq, &lp), 0);
    int negzero = 0;
    for (int i = 1; i < N; i++) {
        double want = strtod(num[i], NULL);
        assert_true(lp.valid[i]);
        if (bits_of(lp.pos[i].forced_lp) != bits_of(want))
            fail_msg("%s: reader %a, strtod %a", num[i], lp.pos[i].forced_lp,
                     want);
        negzero += bits_of(want) == bits_of(-0.0);
    }
    assert_true(negzero > 0);
    drift_lp_release(&lp);
    buf_release(&b);
}

/* drift_dec_small (the reader's conversion of 17-digit prints) against
 * strtod, bit for bit: random significands above 2^53 with 0-22 digits
 * after the point, and halfway points (and their neighbours) in that
 * range, where it must take drift_dec_full's way. */
static void dec_small_check(uint64_t m, int q)
{
    char buf[48];
    snprintf(buf, sizeof(buf), "%llue%d", (unsigned long long)m, q);
    double want = strtod(buf, NULL), got = drift_dec_small(m, q);
    if (bits_of(got) != bits_of(want))
        print_message("%s: %a, strtod %a\n", buf, got, want);
    assert_true(bits_of(got) == bits_of(want));
}

static void test_dec_small_matches(void **state)
{
    (void)state;
    struct rng r;
    drift_dec_init();
    rng_seed(&r, 11);
    for (int i = 0; i < 1000000; i++) {
        int digits = 16 + (int)rng_below(&r, 4); /* 16-19 */
        uint64_t m = pow10u[digits - 1] +
                     rng_below(&r, pow10u[digits] - pow10u[digits - 1]);
        if (m <= 1ULL << 53)
            continue;
        dec_small_check(m, -(int)rng_below(&r, 23));
    }
    int halfway = 0;
    for (int i = 0; i < 400000; i++) {
        /* (2M + 1) * 2^k as a decimal m * 10^q, k <= 0: m = N * 5^-k */
        uint64_t N = 2 * ((1ULL << 52) + rng_below(&r, 1ULL << 52)) + 1;
        int k = -(int)rng_below(&r, 6);
        uint64_t m = N;
        for (int j = 0; j < -k; j++)
            m *= 5;
        if (m >= pow10u[19] || m <= (1ULL << 53) + 1)
            continue;
        dec_small_check(m, k);
        dec_small_check(m - 1, k);
        dec_small_check(m + 1, k);
        halfway++;
    }
    assert_true(halfway > 100000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_significands_and_exponents),
        cmocka_unit_test(test_halfway_points),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_float32_prints_and_reader),
        cmocka_unit_test(test_dec_small_matches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
