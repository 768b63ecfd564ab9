/*
 * jdump: jansson 2.14's compact dump (dump.c, jsonp_dtostr in strconv.c)
 * rewritten as direct appends to a struct buf: the same escapes (\" \\ \b
 * \f \n \r \t, \u00XX in upper case for other control characters, UTF-8
 * passed through), the same real format ("%.17g", ".0" added to integral
 * values, "+" and leading zeros dropped from exponents) and the same key
 * order (insertion order, or bytewise with the shorter key first on a tie).
 */
#include "wire/jdump.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

#define JDUMP_MAX_DEPTH 2048

/* 1: the byte needs an escape inside a JSON string */
static const unsigned char needs_esc[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
};

/* Appends one byte when there is room: the common case, without a call */
static inline int put_ch(struct buf *b, char c)
{
    if (b->len + 2 > b->alloc)
        return buf_addch(b, c);
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
    return 0;
}

static inline int put_mem(struct buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->alloc)
        return buf_add(b, s, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static int dump_string(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    /* worst case: every byte becomes \u00XX; written in place after one
     * check for room */
    if (n > (SIZE_MAX - 3) / 6 || buf_grow(b, 6 * n + 2))
        return -ENOBUFS;
    char *o = b->data + b->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && !needs_esc[(unsigned char)s[j]])
            j++;
        memcpy(o, s + i, j - i);
        o += j - i;
        if (j == n)
            break;
        unsigned char c = (unsigned char)s[j];
        char e = 0;
        switch (c) {
        case '"':
            e = '"';
            break;
        case '\\':
            e = '\\';
            break;
        case '\b':
            e = 'b';
            break;
        case '\f':
            e = 'f';
            break;
        case '\n':
            e = 'n';
            break;
        case '\r':
            e = 'r';
            break;
        case '\t':
            e = 't';
            break;
        }
        *o++ = '\\';
        if (e) {
            *o++ = e;
        } else {
            memcpy(o, "u00", 3);
            o[3] = hex[c >> 4];
            o[4] = hex[c & 15];
            o += 5;
        }
        i = j + 1;
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return 0;
}

int jdump_string(struct buf *b, const char *s, size_t n)
{
    return dump_string(b, s, n);
}

static int dump_real(struct buf *b, double v)
{
    char s[64];
    if (!isfinite(v))
        return -EINVAL;
    if (v == trunc(v) && fabs(v) < 1e15) {
        /* an integral value: "%.17g" prints its digits, jansson adds
         * ".0" (also "-0.0"); without snprintf, which is most of a small
         * exchange's reply column */
        char *p = s + sizeof(s);
        unsigned long long u = (unsigned long long)fabs(v);
        *--p = '0';
        *--p = '.';
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (signbit(v))
            *--p = '-';
        return put_mem(b, p, (size_t)(s + sizeof(s) - p));
    }
    int n = snprintf(s, sizeof(s) - 3, "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof(s) - 3)
        return -EINVAL;
    if (!strchr(s, '.') && !strchr(s, 'e')) {
        memcpy(s + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(s, 'e');
    if (e) { /* "1e+05" -> "1e5", "1e-05" -> "1e-5" */
        char *start = e + 1, *end = e + 2;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, (size_t)(s + n - end) + 1);
            n -= (int)(end - start);
        }
    }
    return buf_add(b, s, (size_t)n);
}

int jdump_real(struct buf *b, double v)
{
    return dump_real(b, v);
}

struct key_ref {
    const char *key;
    size_t len;
    json_t *v;
};

static int cmp_keys(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int r = memcmp(x->key, y->key, n);
    if (r)
        return r;
    return x->len < y->len ? -1 : x->len > y->len;
}

static int dump_value(struct buf *b, const json_t *v, bool sort, int depth);

static int dump_object(struct buf *b, const json_t *v, bool sort, int depth)
{
    size_t n = json_object_size(v);
    if (!n)
        return buf_add(b, "{}", 2);
    struct key_ref small[16];
    struct key_ref *k = n <= 16 ? small : xmalloc(n * sizeof(*k));
    size_t i = 0;
    for (void *it = json_object_iter((json_t *)v); it && i < n;
         it = json_object_iter_next((json_t *)v, it), i++) {
        k[i].key = json_object_iter_key(it);
        k[i].len = json_object_iter_key_len(it);
        k[i].v = json_object_iter_value(it);
    }
    n = i;
    if (sort && n > 1)
        qsort(k, n, sizeof(*k), cmp_keys);
    int rc = put_ch(b, '{');
    for (i = 0; !rc && i < n; i++) {
        if (i)
            rc = put_ch(b, ',');
        if (!rc)
            rc = dump_string(b, k[i].key, k[i].len);
        if (!rc)
            rc = put_ch(b, ':');
        if (!rc)
            rc = dump_value(b, k[i].v, sort, depth + 1);
    }
    if (!rc)
        rc = put_ch(b, '}');
    if (k != small)
        free(k);
    return rc;
}

static int dump_value(struct buf *b, const json_t *v, bool sort, int depth)
{
    char num[32];
    int rc = 0;

    if (depth > JDUMP_MAX_DEPTH)
        return -EINVAL;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return dump_object(b, v, sort, depth);
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        rc = put_ch(b, '[');
        for (size_t i = 0; !rc && i < n; i++) {
            if (i)
                rc = put_ch(b, ',');
            if (!rc)
                rc = dump_value(b, json_array_get(v, i), sort, depth + 1);
        }
        return rc ? rc : put_ch(b, ']');
    }
    case JSON_STRING:
        return dump_string(b, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: {
        json_int_t x = json_integer_value(v);
        unsigned long long u =
            x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        char *p = num + sizeof(num);
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (x < 0)
            *--p = '-';
        return put_mem(b, p, (size_t)(num + sizeof(num) - p));
    }
    case JSON_REAL:
        return dump_real(b, json_real_value(v));
    case JSON_TRUE:
        return put_mem(b, "true", 4);
    case JSON_FALSE:
        return put_mem(b, "false", 5);
    case JSON_NULL:
        return put_mem(b, "null", 4);
    }
    return -EINVAL;
}

int jdump(struct buf *b, const json_t *v, bool sort)
{
    if (!v)
        return -EINVAL;
    return dump_value(b, v, sort, 0);
}

char *jdump_str(const json_t *v, bool sort, size_t *len)
{
    struct buf b;
    buf_init(&b, 0);
    buf_grow(&b, 511); /* most columns fit: no reallocation on the way */
    if (jdump(&b, v, sort) || !b.data) {
        buf_release(&b);
        return NULL;
    }
    return buf_detach(&b, len);
}
