/*
 * scan: the two whole-text searches of drift's hot path, run over every
 * byte of every answer before it is read: whether the text holds an 'N' or
 * an 'I' (the sanitizer's shortcut, dialect.c) and the first occurrence of
 * a key (the fast reader's find_keys, fastparse.c). Each has a baseline
 * version (SSE2 on x86-64, else a byte at a time) and an AVX2 version
 * chosen at run time when the CPU has it, so that the build keeps the
 * baseline x86-64 flags. Both give the same answers; tests/drift/
 * test_dialect.c runs both on the same inputs.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SCAN_AVX2 1
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "drift/scan.h"

/* -1: choose by the CPU; 0: baseline; 1: AVX2 when the CPU has it. */
static int forced = -1;

void drift_scan_force(int level)
{
    forced = level;
}

static bool use_avx2(void)
{
#if defined(SCAN_AVX2)
    if (forced == 0)
        return false;
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

bool drift_scan_has_avx2(void)
{
#if defined(SCAN_AVX2)
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

static bool n_or_i_base(const char *s, size_t len)
{
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i vn = _mm_set1_epi8('N'), vi = _mm_set1_epi8('I');
    for (; len - i >= 64; i += 64) {
        __m128i acc = _mm_setzero_si128();
        for (int k = 0; k < 4; k++) {
            __m128i x = _mm_loadu_si128(
                (const __m128i *)(const void *)(s + i + 16 * k));
            acc = _mm_or_si128(acc, _mm_or_si128(_mm_cmpeq_epi8(x, vn),
                                                 _mm_cmpeq_epi8(x, vi)));
        }
        if (_mm_movemask_epi8(acc))
            return true;
    }
#endif
    for (; i < len; i++)
        if (s[i] == 'N' || s[i] == 'I')
            return true;
    return false;
}

#if defined(SCAN_AVX2)
__attribute__((target("avx2"))) static bool n_or_i_avx2(const char *s,
                                                        size_t len)
{
    size_t i = 0;
    const __m256i vn = _mm256_set1_epi8('N'), vi = _mm256_set1_epi8('I');
    for (; len - i >= 128; i += 128) {
        __m256i acc = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i x = _mm256_loadu_si256(
                (const __m256i *)(const void *)(s + i + 32 * k));
            acc =
                _mm256_or_si256(acc, _mm256_or_si256(_mm256_cmpeq_epi8(x, vn),
                                                     _mm256_cmpeq_epi8(x, vi)));
        }
        if (!_mm256_testz_si256(acc, acc))
            return true;
    }
    return n_or_i_base(s + i, len - i);
}
#endif

bool drift_scan_n_or_i(const char *s, size_t len)
{
#if defined(SCAN_AVX2)
    if (use_avx2())
        return n_or_i_avx2(s, len);
#endif
    return n_or_i_base(s, len);
}

/*
 * The candidates are the places where the needle's second and
 * next-to-last bytes both match, 16 (or 32) at a time (its first and last
 * are the key's quotes, too common to filter on); each is then compared
 * whole.
 */
static const char *find_base(const char *p, const char *end, const char *nd,
                             size_t nl)
{
#if defined(__SSE2__)
    const __m128i a = _mm_set1_epi8(nd[1]), b = _mm_set1_epi8(nd[nl - 2]);
    while ((size_t)(end - p) >= nl + 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 1));
        __m128i y =
            _mm_loadu_si128((const __m128i *)(const void *)(p + nl - 2));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(x, a), _mm_cmpeq_epi8(y, b)));
        for (; m; m &= m - 1) {
            const char *c = p + __builtin_ctz(m);
            if (!memcmp(c, nd, nl))
                return c;
        }
        p += 16;
    }
#endif
    return memmem(p, (size_t)(end - p), nd, nl);
}

#if defined(SCAN_AVX2)
/* 64 candidate places a round: two 32-byte halves tested together, the
 * masks taken only when one matched. */
__attribute__((target("avx2"))) static const char *
find_avx2(const char *p, const char *end, const char *nd, size_t nl)
{
    const __m256i a = _mm256_set1_epi8(nd[1]), b = _mm256_set1_epi8(nd[nl - 2]);
    while ((size_t)(end - p) >= nl + 64) {
        const char *x = p + 1, *y = p + nl - 2;
        __m256i m0 = _mm256_and_si256(
            _mm256_cmpeq_epi8(
                _mm256_loadu_si256((const __m256i *)(const void *)x), a),
            _mm256_cmpeq_epi8(
                _mm256_loadu_si256((const __m256i *)(const void *)y), b));
        __m256i m1 = _mm256_and_si256(
            _mm256_cmpeq_epi8(
                _mm256_loadu_si256((const __m256i *)(const void *)(x + 32)), a),
            _mm256_cmpeq_epi8(
                _mm256_loadu_si256((const __m256i *)(const void *)(y + 32)),
                b));
        __m256i any = _mm256_or_si256(m0, m1);
        if (!_mm256_testz_si256(any, any)) {
            unsigned long long m =
                (unsigned)_mm256_movemask_epi8(m0) |
                (unsigned long long)(unsigned)_mm256_movemask_epi8(m1) << 32;
            for (; m; m &= m - 1) {
                const char *c = p + __builtin_ctzll(m);
                if (!memcmp(c, nd, nl))
                    return c;
            }
        }
        p += 64;
    }
    return find_base(p, end, nd, nl);
}
#endif

const char *drift_scan_find(const char *p, const char *end, const char *nd,
                            size_t nl)
{
#if defined(SCAN_AVX2)
    if (use_avx2())
        return find_avx2(p, end, nd, nl);
#endif
    return find_base(p, end, nd, nl);
}
