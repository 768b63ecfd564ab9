/*
 * dec2dbl: exact decimal to double for the reader of drift's hot path
 * (fastparse.c), by the Eisel-Lemire method: the inline fast path here,
 * the second product, the halfway cases and the table of powers of five
 * in dec2dbl.c.
 */
#ifndef DRIFT_DEC2DBL_H
#define DRIFT_DEC2DBL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*
 * Exact decimal to double (dec2dbl.c, Eisel-Lemire): m * 10^q correctly
 * rounded (to nearest, ties to even) into *out and true, or false when it
 * cannot tell cheaply (a possible tie, a result that would be subnormal or
 * overflow, q outside [DRIFT_DEC_Q_MIN, DRIFT_DEC_Q_MAX]): the caller then
 * uses strtod. m must hold every significant digit (m = 0 gives +0).
 * drift_dec_init() (idempotent, thread-safe) must have run first.
 */
#define DRIFT_DEC_Q_MIN (-342)
#define DRIFT_DEC_Q_MAX 308
void drift_dec_init(void);
static inline bool drift_dec_to_double(uint64_t m, int q, double *out);

/* For q in [Q_MIN, Q_MAX]: 5^q = X * 2^e5[q] for a real X in [2^127,
 * 2^128), t[q] = floor(X) (exact when q is in [0, 55]); index q - Q_MIN. */
struct drift_dec_pow5 {
    uint64_t hi, lo;
};
extern struct drift_dec_pow5 drift_dec_t[DRIFT_DEC_Q_MAX - DRIFT_DEC_Q_MIN + 1];
extern int16_t drift_dec_e5[DRIFT_DEC_Q_MAX - DRIFT_DEC_Q_MIN + 1];
/* drift_dec_to_double() with both products (dec2dbl.c), for m != 0 and q
 * in range. */
bool drift_dec_full(uint64_t m, int q, double *out);
/* The result when W's remainder is within 2^64 of the halfway point. */
bool drift_dec_near_half(uint64_t m, int q, bool above, uint64_t lo,
                         uint64_t mant, int be, double *out);

/* The double mant * 2^(be - 52) for mant in [2^52, 2^53], or false
 * outside the normal range. */
static inline bool drift_dec_assemble(uint64_t mant, int be, double *out)
{
    if (mant == 1ULL << 53) {
        mant >>= 1;
        be++;
    }
    if (be < -1022 || be > 1023)
        return false;
    uint64_t bits = (uint64_t)(be + 1023) << 52 | (mant & ((1ULL << 52) - 1));
    memcpy(out, &bits, sizeof(bits));
    return true;
}

/*
 * The derivation. m = w * 2^-lz with w in [2^63, 2^64); 10^q = 5^q * 2^q =
 * X * 2^(e5 + q). So m * 10^q = V * 2^(e5 + q - lz) with V = w * X, and
 * W = w * t (192 bits, exact) satisfies W <= V < W + w < W + 2^64. V is in
 * [2^190, 2^192); W's leading bit L is bit 63 or 62 of its high word. The
 * double keeps bits L..L-52 (the high word's bits above s = L - 180); below
 * them lie r (the high word's low s bits), then the middle and low words:
 * the remainder R = r:mid:lo, to compare with the halfway point
 * H = 2^(s-1):0:0. Rounding W and rounding V agree unless [W, W + 2^64)
 * holds H, or holds a value below H and one at or above it: that is when
 * (r, mid) is (2^(s-1) - 1, all ones) or (2^(s-1), 0); those are refused.
 * A carry out of R (V's significand one more than W's, R near 0) changes
 * nothing: W's R is then near its maximum, above H, and W rounds up to the
 * same significand (and, when the carry reaches bit 63, the same value:
 * 2^53 * 2^x = 2^52 * 2^(x+1)). Results that would be subnormal, infinite
 * or rounded up past the largest double are refused too.
 */
static inline __attribute__((always_inline)) bool
drift_dec_to_double(uint64_t m, int q, double *out)
{
    if (m == 0) {
        *out = 0;
        return true;
    }
    if (q < DRIFT_DEC_Q_MIN || q > DRIFT_DEC_Q_MAX)
        return false;
    const struct drift_dec_pow5 *t = &drift_dec_t[q - DRIFT_DEC_Q_MIN];
    int lz = __builtin_clzll(m);
    uint64_t w = m << lz;
    unsigned __int128 a = (unsigned __int128)w * t->hi;
    uint64_t hi = (uint64_t)(a >> 64);
    /* w * t.lo adds less than 2^64 to (hi, mid): at most a carry into hi's
     * r. Unless r's low s - 1 bits are all ones or all zeros (r is then
     * none of 2^(s-1) - 1, 2^(s-1) and all ones), that carry changes
     * neither the leading bit, the significand nor r >= half, and neither
     * refusal test can hold (r == half needs r == half - 1 before the
     * carry; r == half - 1 after one leaves mid below all ones): the result
     * without the second product is the same. Else drift_dec_full(). With
     * h = hi >> (s - 1) (the significand and r's top bit), the significand
     * rounded is (h + 1) >> 1. */
    int top = (int)(hi >> 63), s1 = 9 + top; /* L = 190 + top, s1 = s - 1 */
    uint64_t low = hi & ((1ULL << s1) - 1);
    if (__builtin_expect(((low + 1) & ((1ULL << s1) - 1)) <= 1, 0))
        return drift_dec_full(m, q, out);
    return drift_dec_assemble(
        ((hi >> s1) + 1) >> 1,
        190 + top + drift_dec_e5[q - DRIFT_DEC_Q_MIN] + q - lz, out);
}

/*
 * drift_dec_to_double() for 2^53 < m and q in [-22, 0] (a decimal of up to
 * 19 digits with up to 22 after the point), which always succeeds: the
 * result lies in [2^53 / 10^22, 2^64) and is normal, so the exponent needs
 * no range check, and a significand rounded up to 2^53 is absorbed by
 * adding it (hidden bit included) to the exponent field one lower. The
 * same bits as drift_dec_to_double() (test_dec_small_matches in
 * tests/drift/test_dec2dbl.c).
 */
static inline __attribute__((always_inline)) double drift_dec_small(uint64_t m,
                                                                    int q)
{
    const struct drift_dec_pow5 *t = &drift_dec_t[q - DRIFT_DEC_Q_MIN];
    int lz = __builtin_clzll(m);
    uint64_t w = m << lz;
    uint64_t hi = (uint64_t)(((unsigned __int128)w * t->hi) >> 64);
    int top = (int)(hi >> 63), s1 = 9 + top;
    uint64_t low = hi & ((1ULL << s1) - 1);
    double out;
    if (__builtin_expect(((low + 1) & ((1ULL << s1) - 1)) <= 1, 0)) {
        drift_dec_full(m, q, &out);
        return out;
    }
    uint64_t mant = ((hi >> s1) + 1) >> 1; /* in [2^52, 2^53] */
    int be = 190 + top + drift_dec_e5[q - DRIFT_DEC_Q_MIN] + q - lz;
    uint64_t bits = ((uint64_t)(be + 1022) << 52) + mant;
    memcpy(&out, &bits, sizeof(out));
    return out;
}

#endif
