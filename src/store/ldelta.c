/*
 * ldelta: records coded against the record before them (ldelta.h). The
 * encoder is one pass of prefix and suffix comparisons, a few thousand
 * instructions on a small event stream where deflate takes about a
 * hundred thousand.
 */
#include "store/ldelta.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* The end of the record starting at p (p < end): after its blank line, or
 * end. */
static const unsigned char *record_end(const unsigned char *p,
                                       const unsigned char *end)
{
    while (p < end) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return end;
        p = nl + 1;
        if (p < end && *p == '\n')
            return p + 1;
        if (p + 1 < end && p[0] == '\r' && p[1] == '\n')
            return p + 2;
    }
    return end;
}

static size_t common_prefix(const unsigned char *a, const unsigned char *b,
                            size_t n)
{
    size_t i = 0;
    while (i + 8 <= n) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return i + (size_t)(__builtin_ctzll(x ^ y) >> 3);
        i += 8;
    }
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Bytes equal at the ends of a[0..na) and b[0..nb), at most lim. */
static size_t common_suffix(const unsigned char *a, size_t na,
                            const unsigned char *b, size_t nb, size_t lim)
{
    size_t i = 0;
    while (i + 8 <= lim) {
        uint64_t x, y;
        memcpy(&x, a + na - i - 8, 8);
        memcpy(&y, b + nb - i - 8, 8);
        if (x != y)
            return i + (size_t)(__builtin_clzll(x ^ y) >> 3);
        i += 8;
    }
    while (i < lim && a[na - i - 1] == b[nb - i - 1])
        i++;
    return i;
}

static size_t put_num(unsigned char *d, size_t v)
{
    size_t k = 0;
    while (v >= 0x80) {
        d[k++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    d[k++] = (unsigned char)v;
    return k;
}

size_t ldelta_encode(const void *src, size_t n, unsigned char *dst, size_t cap)
{
    const unsigned char *p = src, *end = p + n;
    const unsigned char *prev = p;
    size_t plen = 0, o = 0;

    while (p < end) {
        const unsigned char *e = record_end(p, end);
        size_t clen = (size_t)(e - p);
        size_t lim = clen < plen ? clen : plen;
        size_t pre = common_prefix(prev, p, lim);
        size_t suf = common_suffix(prev, plen, p, clen, lim - pre);
        size_t mid = clen - pre - suf;
        if (o + 30 + mid > cap) /* three numbers take at most 30 bytes */
            return 0;
        o += put_num(dst + o, pre);
        o += put_num(dst + o, suf);
        o += put_num(dst + o, mid);
        memcpy(dst + o, p + pre, mid);
        o += mid;
        prev = p;
        plen = clen;
        p = e;
    }
    return o;
}

/* Reads a number at z[*i..zlen) into *v: 0, or -EINVAL. */
static int get_num(const unsigned char *z, size_t zlen, size_t *i, size_t *v)
{
    size_t r = 0;
    for (unsigned shift = 0; *i < zlen && shift < 64; shift += 7) {
        unsigned char c = z[(*i)++];
        r |= (size_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -EINVAL;
}

int ldelta_decode(const unsigned char *z, size_t zlen, char *out,
                  size_t raw_len)
{
    size_t i = 0, o = 0, prev = 0, plen = 0;
    while (i < zlen) {
        size_t pre, suf, mid;
        if (get_num(z, zlen, &i, &pre) || get_num(z, zlen, &i, &suf) ||
            get_num(z, zlen, &i, &mid))
            return -EINVAL;
        if (pre > plen || suf > plen - pre || mid > zlen - i ||
            mid > raw_len - o || pre + suf > raw_len - o - mid)
            return -EINVAL;
        /* the previous record ends at o: no copy overlaps */
        memcpy(out + o, out + prev, pre);
        memcpy(out + o + pre, z + i, mid);
        memcpy(out + o + pre + mid, out + prev + plen - suf, suf);
        i += mid;
        prev = o;
        plen = pre + mid + suf;
        o += plen;
    }
    return o == raw_len ? 0 : -EINVAL;
}
