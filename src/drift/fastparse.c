/*
 * fastparse: the allocation-free reader of drift's hot path. A prompt
 * answer of a few thousand positions with top-20 logprobs is megabytes of
 * JSON; building a jansson tree for it costs a malloc per value. This file
 * validates the text as jansson would (grammar of RFC 8259, UTF-8, no
 * \u0000, nesting under 2048, integers that fit, reals that do not
 * overflow, one top-level object or array) without a tree: it first reads
 * the arrays it needs, found by their keys, with the validator's own grammar
 * functions, then validates the rest of the document, jumping over the
 * arrays already read. Anything unusual returns
 * -EAGAIN and the jansson parser in dialect.c decides. The fuzz harness
 * checks both paths agree.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/utf8.h"
#include "drift/dec2dbl.h"
#include "drift/fastparse.h"
#include "drift/scan.h"

/*
 * A scanner. The validator may jump over spans [skip_b, skip_e) that the
 * reader has already consumed with the same grammar (arrays it read to
 * their closing bracket), when it meets them at a shallow depth.
 */
#define PATH_MAX_ 3

struct sc {
    const char *p, *end;
    int depth;
    int n_skip;
    const char *skip_b[2], *skip_e[2];
    bool keys; /* it read an object's keys with the general grammar */
    /* the validator's place in the document down to depth PATH_MAX_:
     * each container's kind, an object's current key, an array's current
     * index; a read array is skipped only where jansson would look for it
     * (want: PATH_SGLANG or PATH_VLLM), and every one must be (taken) */
    unsigned char want;
    int taken;
    char kind[PATH_MAX_ + 1];
    const char *key_b[PATH_MAX_ + 1], *key_e[PATH_MAX_ + 1];
    size_t idx[PATH_MAX_ + 1];
};

/* A reader's arrays' places: {"meta_info": {KEY: [...]}} for sglang,
 * {"choices": [{KEY: [...]}, ...]} for vLLM (KEY is the unique key the
 * reader found). */
enum { PATH_SGLANG = 1, PATH_VLLM = 2 };

/* The reader starts its depth count here: whatever it accepts is then
 * nested at most 2048 - READ_DEPTH deep inside its array, which the
 * validator may skip only at a depth under READ_DEPTH / 2. */
#define READ_DEPTH 64

static inline __attribute__((always_inline)) void ws(struct sc *s)
{
    while (s->p < s->end && (unsigned char)*s->p <= ' ' &&
           (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16;
        if (d > 15)
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* Bytes that a string holds as they are: printable ASCII but '"', '\\'. */
static const unsigned char str_plain[256] = {
    [0x20 ... 0x21] = 1, [0x23 ... 0x5b] = 1, [0x5d ... 0x7f] = 1};

/* A string; *plain says whether it had no escapes (then [*b, *e) is it). */
static int str(struct sc *s, const char **b, const char **e, bool *plain)
{
    if (s->p >= s->end || *s->p != '"')
        return -1;
    s->p++;
    *b = s->p;
    *plain = true;
    while (s->p < s->end) {
        while (s->p < s->end && str_plain[(unsigned char)*s->p])
            s->p++;
        if (s->p >= s->end)
            break;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            *e = s->p++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            *plain = false;
            if (s->end - s->p < 2)
                return -1;
            char x = s->p[1];
            if (x == 'u') {
                unsigned v, w;
                if (s->end - s->p < 6 || hex4(s->p + 2, &v) || v == 0)
                    return -1;
                s->p += 6;
                if (v >= 0xdc00 && v <= 0xdfff)
                    return -1;
                if (v >= 0xd800 && v <= 0xdbff) {
                    if (s->end - s->p < 6 || s->p[0] != '\\' ||
                        s->p[1] != 'u' || hex4(s->p + 2, &w) || w < 0xdc00 ||
                        w > 0xdfff)
                        return -1;
                    s->p += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", x) || !x)
                return -1;
            s->p += 2;
            continue;
        }
        size_t n =
            utf8_seq_len((const unsigned char *)s->p, (size_t)(s->end - s->p));
        if (!n)
            return -1;
        s->p += n;
    }
    return -1;
}

static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/*
 * Eight ASCII digits at p as their value, or false when one is not a
 * digit: the classic SWAR conversion (three multiplies for eight digits)
 * on little-endian machines, false elsewhere (the caller goes on a digit
 * at a time).
 */
static inline __attribute__((always_inline)) bool eight_digits(const char *p,
                                                               uint64_t *v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, sizeof(x));
    if (((x & 0xF0F0F0F0F0F0F0F0ULL) |
         (((x + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) !=
        0x3333333333333333ULL)
        return false;
    x -= 0x3030303030303030ULL;
    x = x * 10 + (x >> 8);
    x = ((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
         ((x >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))) >>
        32;
    *v = (uint32_t)x;
    return true;
#else
    (void)p;
    (void)v;
    return false;
#endif
}

/*
 * Sixteen ASCII digits at p as their value, or false when one is not a
 * digit. SSE2 only: the digits as 16-bit lanes, then pairs, fours and
 * eights combined by multiply-adds (pmaddwd) and packs; elsewhere false
 * (the caller goes on eight at a time).
 */
static inline __attribute__((always_inline)) bool sixteen_digits(const char *p,
                                                                 uint64_t *v)
{
#if defined(__SSE2__) && defined(__x86_64__)
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    x = _mm_sub_epi8(x, _mm_set1_epi8('0'));
    /* a digit is now 0..9; every other byte is above 9 or negative */
    __m128i bad = _mm_or_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8(9)),
                               _mm_cmplt_epi8(x, _mm_setzero_si128()));
    if (_mm_movemask_epi8(bad))
        return false;
    __m128i z = _mm_setzero_si128();
    __m128i lo = _mm_unpacklo_epi8(x, z), hi = _mm_unpackhi_epi8(x, z);
    /* lanes (10, 1): d[2i] * 10 + d[2i+1], and so on up */
    lo = _mm_madd_epi16(lo, _mm_set1_epi32(0x0001000A));
    hi = _mm_madd_epi16(hi, _mm_set1_epi32(0x0001000A));
    __m128i t = _mm_packs_epi32(lo, hi); /* 8 values < 100 */
    t = _mm_madd_epi16(t, _mm_set1_epi32(0x00010064));
    t = _mm_packs_epi32(t, t); /* 4 values < 10000, twice */
    t = _mm_madd_epi16(t, _mm_set1_epi32(0x00012710));
    uint64_t r = (uint64_t)_mm_cvtsi128_si64(t); /* 2 values < 10^8 */
    *v = (r & 0xFFFFFFFFULL) * 100000000 + (r >> 32);
    return true;
#else
    (void)p;
    (void)v;
    return false;
#endif
}

static const uint64_t pow10_u64[17] = {1ULL,
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
                                       10000000000000000ULL};

/*
 * The run of ASCII digits at p, up to sixteen: their count, and their value
 * in *v. Reads 16 bytes. SSE2: the lanes from the first non-digit on are
 * zeroed, the sixteen lanes combined as in sixteen_digits() into V * 10^k
 * (k = 16 - count), and V recovered exactly: V * 10^k >> k is V * 5^k, and
 * 5^k is odd, so times its inverse modulo 2^64 it gives V. Elsewhere a
 * digit at a time.
 */
#if defined(__SSE2__) && defined(__x86_64__)
/* 5^-k modulo 2^64, k = 0..16 (5^k * inv5_u64[k] = 1 mod 2^64:
 * test_fast_numbers_match_jansson, tests/drift/test_dialect.c) */
static const uint64_t inv5_u64[17] = {
    0x0000000000000001ULL, 0xcccccccccccccccdULL, 0x8f5c28f5c28f5c29ULL,
    0x1cac083126e978d5ULL, 0xd288ce703afb7e91ULL, 0x5d4e8fb00bcbe61dULL,
    0x790fb65668c26139ULL, 0xe5032477ae8d46a5ULL, 0xc767074b22e90e21ULL,
    0x8e47ce423a2e9c6dULL, 0x4fa7f60d3ed61f49ULL, 0x0fee64690c913975ULL,
    0x3662e0e1cf503eb1ULL, 0xa47a2cf9f6433fbdULL, 0x54186f653140a659ULL,
    0x7738164770402145ULL, 0xe4a4d1417cd9a041ULL};
static const unsigned char lane_keep[32] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                            0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                            0xff, 0xff, 0xff, 0xff};
#endif

static inline __attribute__((always_inline)) int digit_run16(const char *p,
                                                             uint64_t *v)
{
#if defined(__SSE2__) && defined(__x86_64__)
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    x = _mm_sub_epi8(x, _mm_set1_epi8('0'));
    __m128i bad = _mm_or_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8(9)),
                               _mm_cmplt_epi8(x, _mm_setzero_si128()));
    int n = __builtin_ctz((unsigned)_mm_movemask_epi8(bad) | 0x10000u);
    x = _mm_and_si128(
        x,
        _mm_loadu_si128((const __m128i *)(const void *)(lane_keep + 16 - n)));
    __m128i z = _mm_setzero_si128();
    __m128i lo = _mm_unpacklo_epi8(x, z), hi = _mm_unpackhi_epi8(x, z);
    lo = _mm_madd_epi16(lo, _mm_set1_epi32(0x0001000A));
    hi = _mm_madd_epi16(hi, _mm_set1_epi32(0x0001000A));
    __m128i t = _mm_packs_epi32(lo, hi);
    t = _mm_madd_epi16(t, _mm_set1_epi32(0x00010064));
    t = _mm_packs_epi32(t, t);
    t = _mm_madd_epi16(t, _mm_set1_epi32(0x00012710));
    uint64_t r = (uint64_t)_mm_cvtsi128_si64(t);
    uint64_t w = (r & 0xFFFFFFFFULL) * 100000000 + (r >> 32);
    *v = (w >> (16 - n)) * inv5_u64[16 - n];
    return n;
#else
    uint64_t x = 0;
    int n = 0;
    while (n < 16 && p[n] >= '0' && p[n] <= '9')
        x = x * 10 + (uint64_t)(p[n++] - '0');
    *v = x;
    return n;
#endif
}

/*
 * A number per RFC 8259. With want, *v is its value exactly as jansson
 * gives it: integers through long long, reals correctly rounded (Clinger's
 * fast path when the decimal mantissa fits in 53 bits and the power of ten
 * is exact, else Eisel-Lemire (dec2dbl.c) for up to 19 significant
 * digits, strtod when that refuses or for longer mantissas). Integers of more
 * than 18 digits and reals that overflow return -2 (left to jansson).
 */
static int number_v(struct sc *s, double *v, bool want, long long *iv)
{
    const char *b = s->p, *p = s->p;
    bool real = false, neg = false;
    uint64_t m = 0;
    int sig = 0, frac = 0, ex = 0, idig = 0;
    if (p < s->end && *p == '-')
        p++, neg = true;
    if (p >= s->end)
        return -1;
    if (*p == '0') {
        p++;
        idig = 1;
    } else if (*p >= '1' && *p <= '9') {
        for (; p < s->end && *p >= '0' && *p <= '9'; p++, idig++)
            if (sig < 20)
                m = m * 10 + (uint64_t)(*p - '0'), sig++;
            else
                sig++;
    } else {
        return -1;
    }
    if (p < s->end && *p == '.') {
        real = true;
        p++;
        if (p >= s->end || *p < '0' || *p > '9')
            return -1;
        for (; p < s->end && *p >= '0' && *p <= '9'; p++) {
            uint64_t d8;
            /* eight at once while they all fit in m's 19 digits; the
             * same m, frac and sig as a digit at a time */
            while (sig > 0 && sig <= 11 && s->end - p >= 8 &&
                   eight_digits(p, &d8)) {
                m = m * 100000000 + d8;
                frac += 8;
                sig += 8;
                p += 8;
            }
            if (p >= s->end || *p < '0' || *p > '9')
                break;
            if (sig == 0 && *p == '0') {
                frac++;
                continue;
            }
            if (sig < 20)
                m = m * 10 + (uint64_t)(*p - '0'), frac++;
            sig++;
        }
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        bool eneg = false;
        real = true;
        p++;
        if (p < s->end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        if (p >= s->end || *p < '0' || *p > '9')
            return -1;
        for (; p < s->end && *p >= '0' && *p <= '9'; p++)
            if (ex < 100000)
                ex = ex * 10 + (*p - '0');
        ex = eneg ? -ex : ex;
    }
    if (!real && p - b > 18)
        return -2;
    if (real && idig + ex > 300) {
        /* might overflow: jansson rejects those, let it */
        double x = strtod(b, NULL);
        if (isinf(x))
            return -2;
    }
    s->p = p;
    if (!want)
        return 0;
    if (!real) {
        long long x = neg ? -(long long)m : (long long)m;
        *v = (double)x;
        if (iv)
            *iv = x;
        return 0;
    }
    int e10 = ex - frac;
    if (sig <= 19 && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double x = (double)m;
        x = e10 < 0 ? x / pow10_exact[-e10] : x * pow10_exact[e10];
        *v = neg ? -x : x;
        return 0;
    }
    if (sig <= 19 && drift_dec_to_double(m, e10, v)) {
        *v = neg ? -*v : *v;
        return 0;
    }
    *v = strtod(b, NULL); /* the text is NUL-terminated and validated */
    return 0;
}

static int number(struct sc *s, double *v)
{
    return number_v(s, v, true, NULL);
}

static int lit(struct sc *s, const char *w, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
        return -1;
    s->p += n;
    return 0;
}

static int value(struct sc *s);

static bool key_is(const struct sc *s, int d, const char *k)
{
    size_t n = strlen(k);
    return s->key_b[d] && (size_t)(s->key_e[d] - s->key_b[d]) == n &&
           !memcmp(s->key_b[d], k, n);
}

/* Is the validator at a read array's place, where jansson's reader
 * (dialect.c: meta(), choice0()) would look for it? */
static bool path_ok(const struct sc *s)
{
    if (s->want == PATH_SGLANG)
        return s->depth == 2 && s->kind[1] == '{' &&
               key_is(s, 1, "meta_info") && s->kind[2] == '{';
    if (s->want == PATH_VLLM)
        return s->depth == 3 && s->kind[1] == '{' && key_is(s, 1, "choices") &&
               s->kind[2] == '[' && s->idx[2] == 0 && s->kind[3] == '{';
    return false;
}

static int container(struct sc *s, char open)
{
    char close = open == '{' ? '}' : ']';
    size_t idx = 0;
    s->keys |= open == '{';
    if (++s->depth > 2048)
        return -2;
    if (s->depth <= PATH_MAX_)
        s->kind[s->depth] = open;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        int r;
        if (open == '{') {
            const char *b, *e;
            bool plain;
            if (str(s, &b, &e, &plain))
                return -1;
            if (s->depth <= PATH_MAX_) {
                s->key_b[s->depth] = plain ? b : NULL;
                s->key_e[s->depth] = e;
            }
            ws(s);
            if (s->p >= s->end || *s->p++ != ':')
                return -1;
            ws(s);
        } else if (s->depth <= PATH_MAX_) {
            s->idx[s->depth] = idx++;
        }
        r = value(s);
        if (r)
            return r;
        ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == ',') {
            s->p++;
            ws(s);
            continue;
        }
        if (*s->p++ != close)
            return -1;
        s->depth--;
        return 0;
    }
}

static int value(struct sc *s)
{
    const char *b, *e;
    bool plain;
    double v;
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '[':
        for (int j = 0; j < s->n_skip; j++)
            if (s->p == s->skip_b[j] && s->depth < READ_DEPTH / 2) {
                if (!path_ok(s))
                    return -1;
                s->taken++;
                s->p = s->skip_e[j];
                return 0;
            }
        return container(s, '[');
    case '{':
        return container(s, *s->p);
    case '"':
        return str(s, &b, &e, &plain);
    case 't':
        return lit(s, "true", 4);
    case 'f':
        return lit(s, "false", 5);
    case 'n':
        return lit(s, "null", 4);
    default:
        return number_v(s, &v, false, NULL);
    }
}

/* Is text one valid JSON object or array, as jansson would accept it? */
static bool valid_doc(const char *text, size_t len, const struct sc *read)
{
    struct sc s = *read;
    s.p = text;
    s.end = text + len;
    s.depth = 0;
    ws(&s);
    if (s.p >= s.end || (*s.p != '{' && *s.p != '['))
        return false;
    if (value(&s))
        return false;
    ws(&s);
    return s.p == s.end && s.taken == read->n_skip;
}

/*
 * For each of n (<= 4) keys that all begin with prefix (which either
 * cannot overlap itself or is the only key), the position after `"key":` when
 * the key occurs exactly once (counting occurrences as memmem from the start,
 * each search going on after the previous occurrence), else NULL. The text
 * is searched in steps: ks_scan() up to a point, possibly stopping once the
 * keys it wants are found, ks_skip() over an array the reader has read
 * without reading any object's keys with the general grammar (sc.keys
 * false), ks_done() for the answer. Such an array holds no occurrence that
 * counts: in valid JSON the bytes of `"key"` followed by `:` are an
 * object's key (a '"' inside a string is escaped), the reader's shortcuts
 * take only keys of digits and vLLM's own ("logprob", "rank",
 * "decoded_token"), and none of those begin with the prefixes used here;
 * no occurrence crosses the array's brackets, which the keys do not
 * contain. So skipping it changes no count, and the whole text need not be
 * searched: the arrays are nearly all of it.
 */
struct keyscan {
    const char *p, *end; /* occurrences before p are counted */
    const char *prefix;
    size_t pl, n;
    const char *const *keys;
    const char *hit[4], *next_ok[4];
    bool dup[4];
};

static void ks_init(struct keyscan *k, const char *text, size_t len,
                    const char *prefix, const char *const *keys, size_t n)
{
    k->p = text;
    k->end = text + len;
    k->prefix = prefix;
    k->pl = strlen(prefix);
    k->keys = keys;
    k->n = n;
    for (size_t j = 0; j < n; j++) {
        k->hit[j] = NULL;
        k->next_ok[j] = text;
        k->dup[j] = false;
    }
}

/* Counts the occurrences in [k->p, to); with want (a mask of keys), stops
 * after the one that leaves every wanted key found. */
static void ks_scan(struct keyscan *k, const char *to, unsigned want)
{
    const char *h;
    while (k->p < to && (h = drift_scan_find(k->p, to, k->prefix, k->pl))) {
        unsigned found = 0;
        for (size_t j = 0; j < k->n; j++) {
            size_t kl = strlen(k->keys[j]);
            if (h >= k->next_ok[j] && (size_t)(k->end - h) >= kl &&
                !memcmp(h, k->keys[j], kl)) {
                k->next_ok[j] = h + kl;
                const char *q = h + kl;
                while (q < k->end &&
                       (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t'))
                    q++;
                if (q < k->end && *q == ':') {
                    k->dup[j] = k->dup[j] || k->hit[j];
                    k->hit[j] = q + 1;
                }
            }
            found |= k->hit[j] ? 1u << j : 0;
        }
        k->p = h + k->pl;
        if (want && (found & want) == want)
            return;
    }
    if (k->p < to)
        k->p = to;
}

/* [b, e): an array the reader read (see above); nothing in it counts. */
static void ks_skip(struct keyscan *k, const char *b, const char *e)
{
    ks_scan(k, b, 0);
    if (k->p < e)
        k->p = e;
}

/* Searches the rest; hit[j] as the comment above says. */
static void ks_done(struct keyscan *k, const char **hit)
{
    ks_scan(k, k->end, 0);
    for (size_t j = 0; j < k->n; j++)
        hit[j] = k->dup[j] ? NULL : k->hit[j];
}

/* A value that jansson's num() reads: a number, else NAN (any value). */
static int num_or_nan(struct sc *s, double *v)
{
    ws(s);
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')))
        return number(s, v);
    *v = NAN;
    return value(s);
}

/* An integer id >= 0 as jansson's get_id() reads it; -1 when it is not. */
static int id_of(struct sc *s, uint64_t *id, bool *ok)
{
    ws(s);
    double v;
    *ok = false;
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) {
        long long x = -1;
        int r = number_v(s, &v, true, &x);
        if (r)
            return r;
        /* number_v sets x only for integers (no '.', 'e' or 'E') */
        if (x >= 0) {
            *id = (uint64_t)x;
            *ok = true;
        }
        return 0;
    }
    return value(s);
}

static inline __attribute__((always_inline)) int next(struct sc *s, char close,
                                                      bool *more)
{
    ws(s);
    if (s->p >= s->end)
        return -1;
    if (*s->p == ',') {
        s->p++;
        *more = true;
        return 0;
    }
    if (*s->p == close) {
        s->p++;
        *more = false;
        return 0;
    }
    return -1;
}

/* The first byte at or after p (before end) that str_plain does not take
 * as it is: sixteen bytes a round (SSE2) while sixteen are left, then a
 * byte at a time. */
static inline __attribute__((always_inline)) const char *
plain_run(const char *p, const char *end)
{
#if defined(__SSE2__)
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* not plain: '"', '\\', below 0x20 or above 0x7f (signed: < 0x20
         * catches 0x80-0xff too) */
        __m128i bad =
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                      _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                         _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
        unsigned mk = (unsigned)_mm_movemask_epi8(bad);
        if (mk)
            return p + __builtin_ctz(mk);
        p += 16;
    }
#endif
    while (p < end && str_plain[(unsigned char)*p])
        p++;
    return p;
}

/* When the text at s is the plain string literal k (n bytes with its
 * quotes), steps over it, sets [*b, *e) to its contents and says true. */
static inline bool lit_key(struct sc *s, const char *k, size_t n,
                           const char **b, const char **e)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, k, n))
        return false;
    *b = s->p + 1;
    *e = s->p + n - 1;
    s->p += n;
    return true;
}

/*
 * The run of 1-8 ASCII digits at p (followed by a non-digit), its value in
 * *v: the count, or 0 when p has no digit or nine or more (the caller
 * reads those another way). Reads 8 bytes; little-endian SWAR, else a
 * digit at a time.
 */
static inline __attribute__((always_inline)) int id_digits(const char *p,
                                                           uint64_t *v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    /* a byte is a digit when its high nibble is 3 and adding 6 keeps it
     * 3; a carry out of a non-digit byte only spoils bytes after it */
    uint64_t z = ((w & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL) |
                 (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) ^
                  0x3030303030303030ULL);
    if (z == 0)
        return 0;
    int n = __builtin_ctzll(z) / 8;
    if (n == 0)
        return 0;
    uint64_t x = (w - 0x3030303030303030ULL) << (8 * (8 - n));
    x = x * 10 + (x >> 8);
    x = ((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32)) +
         ((x >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32))) >>
        32;
    *v = (uint32_t)x;
    return n;
#else
    uint64_t x = 0;
    int n = 0;
    while (n < 9 && p[n] >= '0' && p[n] <= '9')
        x = x * 10 + (uint64_t)(p[n++] - '0');
    *v = x;
    return n < 9 ? n : 0;
#endif
}

/*
 * A number of the form -?(0|[1-9][0-9]*)(.[0-9]+)? with at most 19
 * significant digits at p: *v gets its value, the same as number_v()
 * gives (both conversions are correctly rounded, so the bits agree), and
 * the byte after it is returned; NULL for anything it does not take (the
 * caller then reads the text with the general grammar), and a 20th digit
 * or an exponent is left for the caller's check of what follows. Reads at
 * most 60 bytes from p (at most 20 leading zeros of a fraction are
 * skipped).
 */
static inline __attribute__((always_inline)) const char *
fast_real(const char *p, double *v)
{
    uint64_t m = 0, d8;
    int sig = 0, frac = 0;
    bool neg = *p == '-';
    p += neg;
    /* the usual shape, D.F with 1-18 fraction digits F (a server's 17
     * significant digits, fewer when %g dropped trailing zeros): the same
     * m and frac as the loops below give (leading zeros of the fraction
     * add nothing to m; at most 19 digits in all, so none is dropped),
     * else those loops */
    if ((unsigned)(p[0] - '0') < 10 && p[1] == '.') {
        int n = digit_run16(p + 2, &d8);
        const char *q = p + 2 + n;
        m = (uint64_t)(p[0] - '0') * pow10_u64[n] + d8;
        frac = n;
        if (n == 16 && (unsigned)(q[0] - '0') < 10) {
            m = m * 10 + (uint64_t)(q[0] - '0');
            q++, frac++;
            if ((unsigned)(q[0] - '0') < 10) {
                m = m * 10 + (uint64_t)(q[0] - '0');
                q++, frac++;
            }
        }
        if (n > 0 && (unsigned)(q[0] - '0') >= 10) {
            double x;
            if (m <= (1ULL << 53))
                x = (double)m / pow10_exact[frac];
            else
                x = drift_dec_small(m, -frac);
            *v = neg ? -x : x;
            return q;
        }
        m = 0, frac = 0;
    }
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (*p >= '0' && *p <= '9' && sig < 19)
            m = m * 10 + (uint64_t)(*p++ - '0'), sig++;
    } else {
        return NULL;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return NULL;
        if (m == 0)
            while (*p == '0' && frac < 20)
                p++, frac++;
        /* sixteen at once when they fit in m's 19 digits: the same m,
         * frac and sig as two rounds of eight */
        if (sig <= 3 && sixteen_digits(p, &d8)) {
            m = m * 10000000000000000ULL + d8;
            p += 16, frac += 16, sig += 16;
        }
        while (sig <= 11 && eight_digits(p, &d8)) {
            m = m * 100000000 + d8;
            p += 8, frac += 8, sig += 8;
        }
        while (*p >= '0' && *p <= '9' && sig < 19)
            m = m * 10 + (uint64_t)(*p++ - '0'), frac++, sig++;
    }
    double x;
    int e10 = -frac;
    if (m <= (1ULL << 53) && e10 >= -22)
        x = (double)m / pow10_exact[-e10];
    else if (!drift_dec_to_double(m, e10, &x))
        return NULL;
    /* "-0" is an integer, which jansson reads as 0, and +0 (number_v()
     * too); "-0.0" is a real, -0 */
    *v = neg && (m || frac) ? -x : x;
    return p;
}

/* A token id or rank as the shapes below take it: 1-8 digits, no leading
 * zero; the byte after it, or NULL. */
static inline __attribute__((always_inline)) const char *
fast_uint(const char *p, uint64_t *v)
{
    int n = id_digits(p, v);
    if (n == 0 || (n > 1 && *p == '0'))
        return NULL;
    return p + n;
}

/*
 * The shape of nearly every vLLM entry,
 * `"ID":{"logprob":LP,"rank":R,"decoded_token":"TEXT"}` without spaces, ID
 * and R as fast_uint() takes them, LP as fast_real(), TEXT of printable
 * ASCII without escapes: read without the general grammar, giving what
 * the loop of vllm_obj() gives for it. Needs VLLM_ENTRY_MAX bytes after
 * s->p (the entry's fixed part and its number are shorter; the text is
 * bounded by s->end). Anything else returns false with s unchanged.
 */
#define VLLM_ENTRY_MAX 128
static inline __attribute__((always_inline)) bool
vllm_entry_fast(struct sc *s, uint64_t *id, double *x)
{
    static const char k1[] = "\":{\"logprob\":", k2[] = ",\"rank\":",
                      k3[] = ",\"decoded_token\":\"";
    const char *p = s->p;
    uint64_t rank;
    if (*p++ != '"')
        return false;
    p = fast_uint(p, id);
    if (!p || memcmp(p, k1, sizeof(k1) - 1))
        return false;
    p = fast_real(p + sizeof(k1) - 1, x);
    if (!p || memcmp(p, k2, sizeof(k2) - 1))
        return false;
    p += sizeof(k2) - 1;
    /* a rank of one or two digits at once, else as an id */
    if ((unsigned)(p[0] - '0') < 10 && (unsigned)(p[1] - '0') >= 10)
        p++;
    else if (p[0] != '0' && (unsigned)(p[0] - '0') < 10 &&
             (unsigned)(p[1] - '0') < 10 && (unsigned)(p[2] - '0') >= 10)
        p += 2;
    else
        p = fast_uint(p, &rank);
    if (!p || memcmp(p, k3, sizeof(k3) - 1))
        return false;
    p += sizeof(k3) - 1;
    p = plain_run(p, s->end);
    if (p[0] != '"' || p[1] != '}') /* (at the end: the NUL stops it) */
        return false;
    s->p = p + 2;
    return true;
}

/*
 * fast_real() for a vLLM logprob, taking first the shape of most of them
 * (Python's repr() of a double in [-10, 10] with 17 significant digits):
 * -?D.FFFFFFFFFFFFFFFF, exactly sixteen fraction digits, read with the
 * exponent a constant. The same value and end as fast_real() gives: m =
 * D * 10^16 + F and frac = 16 are what its D.F path computes for that
 * text, and the conversion the same. Reads 19 bytes after the sign.
 */
static inline __attribute__((always_inline)) const char *lp_real(const char *p,
                                                                 double *v)
{
#if defined(__SSE2__) && defined(__x86_64__)
    const char *q = p + (*p == '-');
    uint64_t f;
    if ((unsigned)(q[0] - '0') < 10 && q[1] == '.' &&
        (unsigned)(q[18] - '0') >= 10 && sixteen_digits(q + 2, &f)) {
        uint64_t m = (uint64_t)(q[0] - '0') * 10000000000000000ULL + f;
        double x =
            m <= (1ULL << 53) ? (double)m / 1e16 : drift_dec_small(m, -16);
        *v = q != p ? -x : x;
        return q + 18;
    }
#endif
    return fast_real(p, v);
}

/*
 * plain_run() for a string whose first sixteen bytes may be read (the
 * usual short token text ends in them): one round, then plain_run().
 */
static inline __attribute__((always_inline)) const char *
plain_run16(const char *p, const char *end)
{
#if defined(__SSE2__)
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i bad =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                  _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                     _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
    unsigned mk = (unsigned)_mm_movemask_epi8(bad);
    if (__builtin_expect(mk != 0, 1))
        return p + __builtin_ctz(mk);
    return plain_run(p + 16, end);
#else
    return plain_run(p, end);
#endif
}

/*
 * vllm_entry_fast() on a bare pointer: the entry at p (which has at least
 * VLLM_POS_ENTRY_MAX bytes after it before end: what is read before the
 * token text is at most 116 bytes, then sixteen), the byte after its '}'
 * or NULL. For vllm_pos_fast(), whose loop keeps everything in registers.
 */
#define VLLM_POS_ENTRY_MAX 160
static inline __attribute__((always_inline)) const char *
vllm_entry_at(const char *p, const char *end, uint64_t *id, double *x)
{
    static const char k1[] = "\":{\"logprob\":", k2[] = ",\"rank\":",
                      k3[] = ",\"decoded_token\":\"";
    uint64_t rank;
    if (*p++ != '"')
        return NULL;
    p = fast_uint(p, id);
    if (!p || memcmp(p, k1, sizeof(k1) - 1))
        return NULL;
    p = lp_real(p + sizeof(k1) - 1, x);
    if (!p || memcmp(p, k2, sizeof(k2) - 1))
        return NULL;
    p += sizeof(k2) - 1;
    if ((unsigned)(p[0] - '0') < 10 && (unsigned)(p[1] - '0') >= 10)
        p++;
    else if (p[0] != '0' && (unsigned)(p[0] - '0') < 10 &&
             (unsigned)(p[1] - '0') < 10 && (unsigned)(p[2] - '0') >= 10)
        p += 2;
    else if (!(p = fast_uint(p, &rank)))
        return NULL;
    if (memcmp(p, k3, sizeof(k3) - 1))
        return NULL;
    p = plain_run16(p + sizeof(k3) - 1, end);
    if (p[0] != '"' || p[1] != '}') /* (at the end: the NUL stops it) */
        return NULL;
    return p + 2;
}

/*
 * A whole vLLM position object {ENTRY,ENTRY,...} (s->p at its '{') whose
 * entries all have vllm_entry_fast()'s shape, separated by bare commas, at
 * most VLLM_POS_MAX of them: read in one loop with the pool cursor, the
 * forced token's logprob and the list checks in locals, the bookkeeping
 * of the position done once at its end. The result is what vllm_obj()
 * gives for the same text: the same entries in the pool, and the same
 * close (an ordered list without a duplicate key is closed here as
 * drift_lp_pos_close() closes it, anything else by drift_lp_pos_close()
 * itself; pool_bad from the list's largest logprob, its first when in
 * order). Returns 1 when read (s->p past the '}'), 0 when the object is
 * not of that shape (nothing of lp changed but off[i] and pos[i].forced,
 * which vllm_obj() sets the same), -2 when it has a duplicate key (as
 * vllm_obj()).
 */
#define VLLM_POS_MAX 64
static __attribute__((noinline)) int vllm_pos_fast(struct sc *s,
                                                   struct drift_lp *lp,
                                                   uint32_t i, uint64_t forced,
                                                   unsigned top_k)
{
    size_t off = lp->pool_len;
    lp->off[i] = off;
    lp->pos[i].forced = forced;
    while (lp->pool_alloc - off < VLLM_POS_MAX)
        drift_lp_pool_grow(lp);
    struct drift_tok *t0 = lp->pool + off, *t = t0, *tend = t0 + VLLM_POS_MAX;
    const char *p = s->p + 1, *end = s->end;
    if (end - p < VLLM_POS_ENTRY_MAX)
        return 0;
    const char *lim = end - VLLM_POS_ENTRY_MAX;
    double fx = NAN, prev = INFINITY;
    uint64_t seen = 0;
    /* not strictly decreasing, or a duplicate key: then
     * drift_lp_pos_close() decides (ties included) */
    bool odd = false;
    for (;;) {
        uint64_t id;
        double x;
        p = vllm_entry_at(p, end, &id, &x);
        if (!p)
            return 0;
        if (id == forced)
            fx = x;
        odd |= !(prev > x);
        uint64_t bit = 1ULL << (id & 63);
        if (__builtin_expect((seen & bit) != 0, 0))
            for (const struct drift_tok *u = t0; u < t; u++)
                odd |= u->key == id;
        seen |= bit;
        *t++ = (struct drift_tok){id, x};
        prev = x;
        if (*p == ',' && p + 1 <= lim && t < tend) {
            p++;
            continue;
        }
        if (*p != '}')
            return 0; /* (a comma at the limits, spaces, ...) */
        break;
    }
    size_t n = (size_t)(t - t0);
    lp->pool_len = off + n;
    if (__builtin_expect(odd, 0)) {
        for (const struct drift_tok *u = t0; u < t; u++)
            lp->pool_bad |= !(u->lp <= 1e-6);
        if (drift_lp_pos_close(lp, i, top_k))
            return -2;
    } else {
        lp->pool_bad |= !(t0->lp <= 1e-6); /* the largest */
        lp->pos[i].n_top = (uint32_t)(n > top_k ? top_k : n);
        lp->pos[i].n_known = (uint32_t)n;
    }
    lp->pos[i].forced_lp = fx;
    lp->valid[i] = (uint8_t)!isnan(fx);
    s->p = p + 1;
    return 1;
}

/* One vLLM {"ID": {"logprob": x, ...} | x, ...} object into position i. */
static int vllm_obj(struct sc *s, struct drift_lp *lp, uint32_t i,
                    uint64_t forced, unsigned top_k)
{
    bool more = true;
    lp->off[i] = lp->pool_len;
    lp->pos[i].forced = forced;
    lp->pos[i].forced_lp = NAN;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        more = false;
    }
    while (more) {
        const char *kb, *ke;
        bool plain;
        double x;
        uint64_t fid;
        if ((unsigned char)*s->p <= ' ') /* (the text ends in a NUL) */
            ws(s);
        if (s->end - s->p >= VLLM_ENTRY_MAX && vllm_entry_fast(s, &fid, &x)) {
            if (fid == forced)
                lp->pos[i].forced_lp = x;
            drift_lp_pool_add(lp, fid, x);
            if (s->p < s->end && *s->p == ',') { /* the usual: no space */
                s->p++;
                continue;
            }
            if (next(s, '}', &more))
                return -2;
            continue;
        }
        x = NAN; /* unless the entry gives one */
        if (str(s, &kb, &ke, &plain) || !plain || ke - kb > 63)
            return -2;
        /* a key the key search could take (see struct keyscan) */
        s->keys |= kb == ke || (unsigned)(*kb - '0') >= 10;
        ws(s);
        if (s->p >= s->end || *s->p++ != ':')
            return -1;
        ws(s);
        if (s->p < s->end && *s->p == '{') {
            bool m2 = true;
            s->p++;
            ws(s);
            if (s->p < s->end && *s->p == '}') {
                s->p++;
                m2 = false;
            }
            while (m2) {
                const char *fb, *fe;
                bool fp;
                ws(s);
                /* vLLM's own keys at once: the same slice str() gives */
                if (!lit_key(s, "\"logprob\"", 9, &fb, &fe) &&
                    !lit_key(s, "\"rank\"", 6, &fb, &fe) &&
                    !lit_key(s, "\"decoded_token\"", 15, &fb, &fe) &&
                    ((s->keys = true), str(s, &fb, &fe, &fp) || !fp))
                    return -2;
                ws(s);
                if (s->p >= s->end || *s->p++ != ':')
                    return -1;
                int r;
                if (fe - fb == 7 && !memcmp(fb, "logprob", 7))
                    r = num_or_nan(s, &x);
                else
                    r = (ws(s), value(s));
                if (r || next(s, '}', &m2))
                    return -2;
            }
        } else if (num_or_nan(s, &x)) {
            return -2;
        }
        unsigned long long id = 0;
        bool is_id = ke > kb && ke - kb <= 19;
        for (const char *q = kb; is_id && q < ke; q++)
            if (*q >= '0' && *q <= '9')
                id = id * 10 + (unsigned long long)(*q - '0');
            else
                is_id = false;
        if (!is_id) { /* anything else as strtoull reads it */
            char key[64], *end;
            memcpy(key, kb, (size_t)(ke - kb));
            key[ke - kb] = '\0';
            id = strtoull(key, &end, 10);
            is_id = end != key && !*end;
        }
        if (is_id) {
            if ((uint64_t)id == forced)
                lp->pos[i].forced_lp = x;
            drift_lp_pool_add(lp, id, x);
        }
        if (next(s, '}', &more))
            return -2;
    }
    if (drift_lp_pos_close(lp, i, top_k))
        return -2; /* duplicate keys: jansson keeps the last one */
    lp->valid[i] = (uint8_t)!isnan(lp->pos[i].forced_lp);
    return 0;
}

/* Notes [b, e) as a span the validator may skip. */
static void add_skip(struct sc *read, const char *b, const char *e)
{
    read->skip_b[read->n_skip] = b;
    read->skip_e[read->n_skip++] = e;
}

/* At the value of a key the reader found: steps into its array. *arr is
 * its '[', *more whether it has an element; -2 when it is not an array. */
static int open_array(struct sc *s, const char **arr, bool *more)
{
    ws(s);
    if (s->p >= s->end || *s->p != '[')
        return -2;
    *arr = s->p++;
    ws(s);
    *more = !(s->p < s->end && *s->p == ']');
    if (!*more)
        s->p++;
    return 0;
}

static int fast_vllm(const char *text, size_t len, const struct drift_req *r,
                     struct drift_lp *lp, struct sc *read)
{
    static const char *const key = "\"prompt_logprobs\"";
    struct keyscan ks;
    const char *at, *hit;
    ks_init(&ks, text, len, key, &key, 1);
    ks_scan(&ks, text + len, 1);
    if (!ks.hit[0])
        return -2;
    at = ks.hit[0];
    struct sc s = {.p = at, .end = text + len, .depth = READ_DEPTH};
    const char *arr;
    bool more;
    if (open_array(&s, &arr, &more))
        return -2;
    uint32_t i = 0;
    for (; more; i++) {
        ws(&s);
        if (i >= 1 && i < r->n && s.p < s.end && *s.p == '{') {
            int k = vllm_pos_fast(&s, lp, i, r->ids[i], r->top_k);
            if (k < 0 || (k == 0 && vllm_obj(&s, lp, i, r->ids[i], r->top_k)))
                return -2;
        } else {
            if (i < r->n)
                lp->off[i] = lp->pool_len;
            if (value(&s))
                return -2;
        }
        if (next(&s, ']', &more))
            return -2;
    }
    lp->n_returned = i < r->n ? i : (uint32_t)r->n;
    add_skip(read, arr, s.p);
    if (!s.keys)
        ks_skip(&ks, arr, s.p);
    ks_done(&ks, &hit);
    return hit == at ? 0 : -2; /* else it occurs twice */
}

/* One sglang [lp, id, ...] triple; *ok false when it has no valid id. */
static int triple(struct sc *s, double *lp, uint64_t *id, bool *ok)
{
    bool more;
    *ok = false;
    *lp = NAN;
    ws(s);
    if (s->p >= s->end || *s->p != '[')
        return value(s) ? -2 : 0;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    if (num_or_nan(s, lp) || next(s, ']', &more))
        return -2;
    if (!more)
        return 0;
    if (id_of(s, id, ok) || next(s, ']', &more))
        return -2;
    while (more)
        if ((ws(s), value(s)) || next(s, ']', &more))
            return -2;
    return 0;
}

/*
 * The shape nearly every sglang triple has, `[LP,ID,null]` without
 * spaces, LP as fast_real() takes it and ID as fast_uint(), read without
 * the general grammar: the same values as number_v() and id_of() give.
 * Needs TRIPLE_MAX bytes of text after s->p (a triple it accepts is
 * shorter). Anything else returns false with s unchanged, and triple()
 * reads it.
 */
#define TRIPLE_MAX 80
static inline __attribute__((always_inline)) bool
triple_fast(struct sc *s, double *lp, uint64_t *id)
{
    const char *p = s->p;
    if (*p++ != '[')
        return false;
    p = fast_real(p, lp);
    if (!p || *p++ != ',')
        return false; /* a 20th digit, an exponent, a space, ... */
    p = fast_uint(p, id);
    if (!p || memcmp(p, ",null]", 6))
        return false;
    s->p = p + 6;
    return true;
}

/*
 * A whole sglang top list [TRIPLE,TRIPLE,...] of position k (t->p at its
 * '[', lp->off[k] at the pool's end) whose triples all have
 * triple_fast()'s shape, separated by bare commas, at most VLLM_POS_MAX of
 * them: read in one loop as vllm_pos_fast() reads a vLLM object (the
 * logprob by lp_real()), and closed as the loop over triple_fast() and
 * drift_lp_pos_close() would: the same entries, n_top, n_known and
 * pool_bad. Returns true when read (t->p past the ']'), false with lp and
 * t unchanged otherwise.
 */
static __attribute__((noinline)) bool
sglang_pos_fast(struct sc *ts, struct drift_lp *lp, uint32_t k, unsigned top_k)
{
    size_t off = lp->pool_len;
    while (lp->pool_alloc - off < VLLM_POS_MAX)
        drift_lp_pool_grow(lp);
    struct drift_tok *t0 = lp->pool + off, *t = t0, *tend = t0 + VLLM_POS_MAX;
    const char *p = ts->p + 1, *end = ts->end;
    if (end - p < TRIPLE_MAX)
        return false;
    const char *lim = end - TRIPLE_MAX;
    double prev = INFINITY;
    uint64_t seen = 0;
    bool odd = false; /* as in vllm_pos_fast() */
    for (;;) {
        uint64_t id;
        double x;
        if (*p != '[')
            return false;
        p = lp_real(p + 1, &x);
        if (!p || *p != ',')
            return false;
        p = fast_uint(p + 1, &id);
        if (!p || memcmp(p, ",null]", 6))
            return false;
        p += 6;
        odd |= !(prev > x);
        uint64_t bit = 1ULL << (id & 63);
        if (__builtin_expect((seen & bit) != 0, 0))
            for (const struct drift_tok *u = t0; u < t; u++)
                odd |= u->key == id;
        seen |= bit;
        *t++ = (struct drift_tok){id, x};
        prev = x;
        if (*p == ',' && p + 1 <= lim && t < tend) {
            p++;
            continue;
        }
        if (*p != ']')
            return false;
        break;
    }
    size_t n = (size_t)(t - t0);
    lp->pool_len = off + n;
    if (__builtin_expect(odd, 0)) {
        for (const struct drift_tok *u = t0; u < t; u++)
            lp->pool_bad |= !(u->lp <= 1e-6);
        drift_lp_pos_close(lp, k, top_k);
    } else {
        lp->pool_bad |= !(t0->lp <= 1e-6); /* the largest */
        lp->pos[k].n_top = (uint32_t)(n > top_k ? top_k : n);
        lp->pos[k].n_known = (uint32_t)n;
    }
    ts->p = p + 1;
    return true;
}

static int fast_sglang(const char *text, size_t len, const struct drift_req *r,
                       struct drift_lp *lp, struct sc *read)
{
    static const char *const keys[4] = {
        "\"input_token_ids_logprob\"", "\"input_token_ids_logprobs\"",
        "\"input_token_logprobs\"", "\"input_top_logprobs\""};
    const char *hit[4];
    if (text[0] != '{')
        return -2; /* batched answers: let jansson pick the first */
    struct keyscan ks;
    ks_init(&ks, text, len, "\"input_to", keys, 4);
    ks_scan(&ks, text + len, 1u << 2 | 1u << 3);
    if (ks.hit[0] || ks.hit[1])
        return -2;
    const char *at = ks.hit[2], *tp = ks.hit[3];
    if (!at)
        return -2;
    struct sc s = {.p = at, .end = text + len, .depth = READ_DEPTH};
    const char *arr;
    bool more;
    if (open_array(&s, &arr, &more))
        return -2;
    uint32_t i = 0;
    for (; more; i++) {
        double x;
        uint64_t id;
        bool ok;
        if (s.end - s.p >= TRIPLE_MAX && triple_fast(&s, &x, &id)) {
            ok = true;
            if (*s.p == ',') /* the usual: no space */
                s.p++;
            else if (next(&s, ']', &more))
                return -2;
        } else if (triple(&s, &x, &id, &ok) || next(&s, ']', &more)) {
            return -2;
        }
        if (i >= r->n)
            continue;
        lp->off[i] = lp->pool_len;
        if (!ok)
            continue;
        if (id != r->ids[i]) {
            drift_lp_mark_mismatch(lp, i);
            continue;
        }
        lp->ids[i] = (uint32_t)id;
        lp->pos[i].forced = id;
        lp->pos[i].forced_lp = x;
        lp->valid[i] = 2; /* provisional: top to come */
    }
    lp->n_returned = i < r->n ? i : (uint32_t)r->n;
    add_skip(read, arr, s.p);
    /* the top lists, in a second pass, position by position */
    struct sc t = {
        .p = tp ? tp : text + len, .end = text + len, .depth = READ_DEPTH};
    bool have = false;
    const char *top = NULL;
    if (tp) {
        ws(&t);
        if (t.p >= t.end)
            return -2;
        if (*t.p == '[') {
            top = t.p++;
            ws(&t);
            have = !(t.p < t.end && *t.p == ']');
            if (!have)
                top = NULL;
        } else if (value(&t)) {
            return -2;
        }
    }
    for (uint32_t k = 0; k < lp->n_returned; k++) {
        bool is_list = false;
        if (have) {
            ws(&t);
            is_list = t.p < t.end && *t.p == '[';
        }
        if (lp->valid[k] == 2 && is_list &&
            (lp->off[k] = lp->pool_len, sglang_pos_fast(&t, lp, k, r->top_k))) {
            lp->valid[k] = (uint8_t)!isnan(lp->pos[k].forced_lp);
        } else if (lp->valid[k] == 2) {
            lp->off[k] = lp->pool_len;
            if (is_list) {
                bool m2 = true;
                t.p++;
                ws(&t);
                if (t.p < t.end && *t.p == ']') {
                    t.p++;
                    m2 = false;
                }
                while (m2) {
                    double x;
                    uint64_t id;
                    bool ok;
                    if (t.end - t.p >= TRIPLE_MAX && triple_fast(&t, &x, &id)) {
                        drift_lp_pool_add(lp, id, x);
                        if (*t.p == ',') { /* the usual: no space */
                            t.p++;
                            continue;
                        }
                        if (next(&t, ']', &m2))
                            return -2;
                        continue;
                    }
                    if (triple(&t, &x, &id, &ok) || next(&t, ']', &m2))
                        return -2;
                    if (ok)
                        drift_lp_pool_add(lp, id, x);
                }
            } else if (have && value(&t)) {
                return -2;
            }
            drift_lp_pos_close(lp, k, r->top_k);
            lp->valid[k] = (uint8_t)!isnan(lp->pos[k].forced_lp);
        } else if (have && value(&t)) {
            return -2;
        }
        if (have && next(&t, ']', &have))
            return -2;
    }
    if (lp->n)
        lp->valid[0] = 0;
    if (top && have) /* more top lists than positions: jansson's */
        return -2;
    if (top) /* read to its closing bracket */
        add_skip(read, top, t.p);
    /* the rest of the key search, over neither array when it can skip them */
    const char *sb[2] = {NULL, NULL}, *se[2] = {NULL, NULL};
    int ns = 0;
    if (!s.keys)
        sb[ns] = arr, se[ns++] = s.p;
    if (top && !have && !t.keys)
        sb[ns] = top, se[ns++] = t.p;
    if (ns == 2 && sb[1] < sb[0]) {
        const char *x = sb[0], *y = se[0];
        sb[0] = sb[1], se[0] = se[1], sb[1] = x, se[1] = y;
    }
    for (int j = 0; j < ns; j++)
        ks_skip(&ks, sb[j], se[j]);
    ks_done(&ks, hit);
    return hit[0] || hit[1] || hit[2] != at || hit[3] != tp ? -2 : 0;
}

int drift_fast_prompt(enum drift_dialect d, const char *text, size_t len,
                      const struct drift_req *r, struct drift_lp *lp)
{
    int ret;
    struct sc read = {0};
    if (d != DRIFT_DIALECT_VLLM && d != DRIFT_DIALECT_SGLANG)
        return -EAGAIN;
    read.want = d == DRIFT_DIALECT_VLLM ? PATH_VLLM : PATH_SGLANG;
    /* read first, then validate the rest of the document: what the
     * reader consumed it checked with the validator's own grammar */
    drift_dec_init();
    drift_lp_reset(lp, (uint32_t)r->n);
    ret = d == DRIFT_DIALECT_VLLM ? fast_vllm(text, len, r, lp, &read)
                                  : fast_sglang(text, len, r, lp, &read);
    if (ret || !valid_doc(text, len, &read))
        return -EAGAIN;
    for (uint32_t i = lp->n_returned; i < lp->n; i++)
        lp->off[i] = lp->pool_len;
    drift_lp_finish(lp);
    return 0;
}
