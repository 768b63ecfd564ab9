/*
 * dec2dbl: exact conversion of a decimal m * 10^e10 (m < 2^64, that is the
 * first 19 significant digits are all there are) to the nearest double,
 * for the allocation-free reader (fastparse.c). It follows the algorithm
 * published by Daniel Lemire, "Number Parsing at a Gigabyte per Second",
 * Software: Practice and Experience 51(8), 2021 (the Eisel-Lemire method):
 * the significand normalised to 64 bits times a 128-bit truncated power of
 * five, the result rounded from the top bits of the product, and a refusal
 * (the caller uses strtod) whenever the truncation error could change the
 * rounding. The fast path is inline in dec2dbl.h (with the derivation
 * of its error bound and refusal test); this file computes the table of
 * powers of five at first use with exact big-integer arithmetic and
 * settles the rare results next to a halfway point.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "drift/dec2dbl.h"

#define Q_MIN DRIFT_DEC_Q_MIN
#define Q_MAX DRIFT_DEC_Q_MAX

/*
 * For every q in [Q_MIN, Q_MAX]: 5^q = X * 2^e5[q] for a real X in
 * [2^127, 2^128), and t[q] = floor(X) as (hi, lo). X is an integer (t
 * exact) when 5^q has at most 128 bits and q >= 0.
 */
struct drift_dec_pow5 drift_dec_t[Q_MAX - Q_MIN + 1];
int16_t drift_dec_e5[Q_MAX - Q_MIN + 1];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Big unsigned integers, 32-bit limbs, least significant first. */
#define LIMBS 40 /* 1280 bits: 2^1024 and 5^308 (716 bits) fit */
struct big {
    uint32_t l[LIMBS];
    int n; /* limbs in use; l[n - 1] != 0 */
};

static int big_bits(const struct big *b)
{
    return (b->n - 1) * 32 + (32 - __builtin_clz(b->l[b->n - 1]));
}

/* floor(b / 2^s) truncated to its top 128 bits when b has more, else
 * b * 2^(128 - bits) (exact); *e gets the power of two of the scale. */
static void big_top128(const struct big *b, uint64_t *hi, uint64_t *lo, int *e)
{
    int bits = big_bits(b);
    int sh = bits - 128; /* b = X * 2^sh, X in [2^127, 2^128) */
    uint64_t w[2] = {0, 0};
    for (int k = 0; k < 128; k++) {
        int src = sh + k; /* bit k of X is bit src of b, 0 below 0 */
        if (src < 0)
            continue;
        if (b->l[src / 32] >> (src % 32) & 1)
            w[k / 64] |= 1ULL << (k % 64);
    }
    *hi = w[1];
    *lo = w[0];
    *e = sh;
}

static void big_mul_small(struct big *b, uint32_t m)
{
    uint64_t c = 0;
    for (int i = 0; i < b->n; i++) {
        uint64_t v = (uint64_t)b->l[i] * m + c;
        b->l[i] = (uint32_t)v;
        c = v >> 32;
    }
    if (c)
        b->l[b->n++] = (uint32_t)c;
}

/* b = floor(b / d) */
static void big_div_small(struct big *b, uint32_t d)
{
    uint64_t r = 0;
    for (int i = b->n - 1; i >= 0; i--) {
        uint64_t v = r << 32 | b->l[i];
        b->l[i] = (uint32_t)(v / d);
        r = v % d;
    }
    while (b->n > 1 && b->l[b->n - 1] == 0)
        b->n--;
}

/*
 * q >= 0: P = 5^q exactly (times 5 each step); its top 128 bits are
 * floor(5^q / 2^sh). q < 0: B = floor(2^1024 / 5^n), divided by 5 each
 * step, which stays exact because floor(floor(a / b) / c) = floor(a / bc);
 * its top 128 bits are floor(2^(1024 - sh) / 5^n) for the same reason
 * (B has more than 128 bits for n <= 342: 5^342 < 2^795).
 */
static void build(void)
{
    struct big b;
    int e;
    memset(&b, 0, sizeof(b));
    b.l[0] = 1;
    b.n = 1;
    for (int q = 0; q <= Q_MAX; q++) {
        big_top128(&b, &drift_dec_t[q - Q_MIN].hi, &drift_dec_t[q - Q_MIN].lo,
                   &e);
        drift_dec_e5[q - Q_MIN] = (int16_t)e;
        big_mul_small(&b, 5);
    }
    memset(&b, 0, sizeof(b));
    b.l[32] = 1; /* 2^1024 */
    b.n = 33;
    for (int n = 1; n <= -Q_MIN; n++) {
        big_div_small(&b, 5);
        big_top128(&b, &drift_dec_t[-n - Q_MIN].hi, &drift_dec_t[-n - Q_MIN].lo,
                   &e);
        drift_dec_e5[-n - Q_MIN] = (int16_t)(e - 1024);
    }
}

void drift_dec_init(void)
{
    pthread_once(&once, build);
}

/* mm * 2^k (mm > 0), exactly rounded, ties to even. */
static bool dyadic(uint64_t mm, int k, double *out)
{
    int lz = __builtin_clzll(mm);
    uint64_t w = mm << lz, mant = w >> 11, rem = w & 0x7ff;
    if (rem > 0x400 || (rem == 0x400 && (mant & 1)))
        mant++;
    return drift_dec_assemble(mant, 63 - lz + k, out);
}

/*
 * W's remainder is within 2^64 of H. With an exact table entry (q in
 * [0, 55]: 5^q < 2^128) W is V: a tie when the low word is 0 as well,
 * else above or below H as it says. Otherwise V can equal H only when it
 * is a dyadic rational m * 10^q = (m / 5^-q) * 2^q, so q >= -27 (5^28 >
 * 2^64 > m), 5^-q divides m, and the value is then converted exactly
 * (W, from a truncated entry, is then just below H); for
 * q > 55 no tie exists (the value's odd part is a multiple of 5^q, longer
 * than 54 bits). A V that cannot be H lies above it when W's remainder
 * is at H or past it; just below H nothing is known (refused).
 */
bool drift_dec_near_half(uint64_t m, int q, bool above, uint64_t lo,
                         uint64_t mant, int be, double *out)
{
    if (q >= 0 && q <= 55) {
        if (above && (lo != 0 || (mant & 1)))
            mant++;
        return drift_dec_assemble(mant, be, out);
    }
    if (q < 0 && q >= -27) {
        uint64_t p5 = 1;
        for (int i = 0; i < -q; i++)
            p5 *= 5;
        if (m % p5 == 0)
            return dyadic(m / p5, q, out);
    }
    return above && drift_dec_assemble(mant + 1, be, out);
}

bool drift_dec_full(uint64_t m, int q, double *out)
{
    const struct drift_dec_pow5 *t = &drift_dec_t[q - DRIFT_DEC_Q_MIN];
    int lz = __builtin_clzll(m);
    uint64_t w = m << lz;
    unsigned __int128 a = (unsigned __int128)w * t->hi;
    unsigned __int128 b = (unsigned __int128)w * t->lo;
    uint64_t hi = (uint64_t)(a >> 64), mid = (uint64_t)a;
    uint64_t bm = (uint64_t)(b >> 64);
    mid += bm;
    hi += mid < bm;
    int top = (int)(hi >> 63); /* L = 190 + top */
    int s = 10 + top;
    uint64_t half = 1ULL << (s - 1), r = hi & ((1ULL << s) - 1);
    uint64_t mant = hi >> s; /* 53 bits, bit 52 set */
    int be = 190 + top + drift_dec_e5[q - DRIFT_DEC_Q_MIN] + q - lz;
    if (r == half && mid == 0)
        return drift_dec_near_half(m, q, true, (uint64_t)b, mant, be, out);
    if (r == half - 1 && mid == UINT64_MAX)
        return drift_dec_near_half(m, q, false, (uint64_t)b, mant, be, out);
    return drift_dec_assemble(mant + (r >= half), be, out);
}
