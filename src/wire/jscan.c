/*
 * jscan: RFC 8259 JSON, checked the way jansson 2.14's lexer checks it
 * (load.c and utf8.c: strict UTF-8, no control characters in strings,
 * escapes \" \\ \/ \b \f \n \r \t \uXXXX with paired surrogates), minus
 * the cases listed in jscan.h where it answers "unsure" instead.
 */
#include "wire/jscan.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

struct scan {
    const char *p, *end;
    /* jscan_json_with: the value starting at byte `at` is `with`; with
     * jscan_json_with2, also the one at `at2` is `with2` */
    const char *at;
    size_t at_n;
    json_t *with;
    const char *at2;
    size_t at2_n;
    json_t *with2;
    /* jscan_doc_pick: the levels and where their values go */
    const struct jscan_pick *pk;
    struct jspan *out;
    size_t nout;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end &&
           (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at p (p + 4 <= end checked by the caller), or -1. */
static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v << 4 | h;
    }
    return v;
}

/* A \uXXXX escape at s->p (after the backslash and 'u'), with its low
 * surrogate when it is a high one; *cp gets the code point. */
static int scan_uescape(struct scan *s, unsigned long *cp)
{
    if (s->end - s->p < 4)
        return -1;
    long v = hex4(s->p);
    s->p += 4;
    if (v <= 0) /* invalid, or NUL (jansson refuses it without ALLOW_NUL) */
        return -1;
    if (v >= 0xdc00 && v <= 0xdfff)
        return -1;
    if (v >= 0xd800 && v <= 0xdbff) {
        if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u')
            return -1;
        long lo = hex4(s->p + 2);
        if (lo < 0xdc00 || lo > 0xdfff)
            return -1;
        s->p += 6;
        v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
    }
    *cp = (unsigned long)v;
    return 0;
}

/* 1: a byte that needs no look in a string (printable ASCII but the quote
 * and the backslash) */
static const unsigned char plain[256] = {
    [0x20 ... 0x21] = 1, /* 0x22 is '"' */
    [0x23 ... 0x5b] = 1, /* 0x5c is '\\' */
    [0x5d ... 0x7f] = 1,
};

/* A string at s->p (on the opening quote). */
static int scan_string(struct scan *s, struct jspan *v)
{
    const char *start = s->p++;
    bool esc = false;
    while (s->p < s->end) {
        while (s->p < s->end && plain[(unsigned char)*s->p])
            s->p++;
        if (s->p >= s->end)
            break;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            v->p = start;
            v->n = (size_t)(s->p - start);
            v->t = JS_STRING;
            v->esc = esc;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            esc = true;
            if (++s->p >= s->end)
                return -1;
            char e = *s->p++;
            if (e == 'u') {
                unsigned long cp;
                if (scan_uescape(s, &cp))
                    return -1;
            } else if (!e || !strchr("\"\\/bfnrt", e)) {
                return -1;
            }
            continue;
        }
        if (c >= 0x80) {
            size_t n = utf8_seq_len((const unsigned char *)s->p,
                                    (size_t)(s->end - s->p));
            if (!n)
                return -1;
            s->p += n;
            continue;
        }
        s->p++;
    }
    return -1;
}

static bool is_digit(const struct scan *s)
{
    return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

/* A number with at most 18 integer digits and no exponent: jansson reads
 * those without overflow, exactly as written. */
static int scan_number(struct scan *s, struct jspan *v)
{
    const char *start = s->p;
    if (*s->p == '-')
        s->p++;
    if (!is_digit(s))
        return -1;
    const char *digits = s->p;
    if (*s->p == '0') {
        s->p++;
        if (is_digit(s))
            return -1;
    } else {
        while (is_digit(s))
            s->p++;
    }
    if (s->p - digits > 18)
        return -1;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        if (!is_digit(s))
            return -1;
        while (is_digit(s))
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E'))
        return -1;
    v->p = start;
    v->n = (size_t)(s->p - start);
    v->t = JS_NUMBER;
    v->esc = false;
    return 0;
}

static int scan_lit(struct scan *s, const char *lit, size_t n,
                    enum jscan_type t, struct jspan *v)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n))
        return -1;
    v->p = s->p;
    v->n = n;
    v->t = t;
    v->esc = false;
    s->p += n;
    return 0;
}

static int scan_value(struct scan *s, struct jspan *v, int depth, int lvl);

/* Where the value about to be read goes (jscan_doc_pick): its slot in
 * s->out (-1: none) and the level it is read with, whose spans are
 * cleared first (the last member of a name wins, with its own values). */
static int pick_slot(struct scan *s, int lvl, const struct jspan *key,
                     size_t idx, int *child)
{
    const struct jscan_pick *L = &s->pk[lvl];
    size_t i = 0;
    *child = -1;
    if (L->array0) {
        if (idx)
            return -1;
    } else {
        for (; i < 4 && L->keys[i]; i++) {
            size_t kl = strlen(L->keys[i]);
            if (key->n == kl + 2 && !memcmp(key->p + 1, L->keys[i], kl))
                break;
        }
        if (i == 4 || !L->keys[i])
            return -1;
    }
    *child = L->child[i];
    if (*child >= 0)
        for (size_t k = (size_t)s->pk[*child].clear_from; k < s->nout; k++)
            s->out[k].t = JS_NONE;
    return L->out[i];
}

static int scan_container(struct scan *s, struct jspan *v, int depth, int lvl)
{
    const char *start = s->p;
    char close = *s->p == '{' ? '}' : ']';
    bool obj = close == '}';
    struct jspan tmp, key = {0};
    size_t idx = 0;
    if (lvl >= 0 && s->pk[lvl].array0 == obj)
        lvl = -1; /* not the kind of container the level reads */
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        goto done;
    }
    for (;;) {
        if (obj) {
            if (s->p >= s->end || *s->p != '"' || scan_string(s, &key))
                return -1;
            if (lvl >= 0 && key.esc)
                return -1; /* as jscan_members */
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':')
                return -1;
            s->p++;
        }
        int child = -1;
        int slot = lvl >= 0 ? pick_slot(s, lvl, &key, idx, &child) : -1;
        if (scan_value(s, &tmp, depth + 1, child))
            return -1;
        if (slot >= 0)
            s->out[slot] = tmp;
        idx++;
        skip_ws(s);
        if (s->p >= s->end)
            return -1;
        if (*s->p == close) {
            s->p++;
            break;
        }
        if (*s->p != ',')
            return -1;
        s->p++;
        skip_ws(s);
    }
done:
    v->p = start;
    v->n = (size_t)(s->p - start);
    v->t = obj ? JS_OBJECT : JS_ARRAY;
    v->esc = false;
    return 0;
}

static int scan_value(struct scan *s, struct jspan *v, int depth, int lvl)
{
    if (depth > JSCAN_MAX_DEPTH)
        return -1;
    skip_ws(s);
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '{':
    case '[':
        return scan_container(s, v, depth, lvl);
    case '"':
        return scan_string(s, v);
    case 't':
        return scan_lit(s, "true", 4, JS_TRUE, v);
    case 'f':
        return scan_lit(s, "false", 5, JS_FALSE, v);
    case 'n':
        return scan_lit(s, "null", 4, JS_NULL, v);
    default:
        return scan_number(s, v);
    }
}

int jscan_doc(const char *str, size_t n, struct jspan *v)
{
    struct scan s = {.p = str, .end = str + n};
    if (scan_value(&s, v, 0, -1))
        return -1;
    skip_ws(&s);
    return s.p == s.end ? 0 : -1;
}

int jscan_doc_pick(const char *str, size_t n, const struct jscan_pick *levels,
                   struct jspan *out, size_t nout, struct jspan *v)
{
    struct scan s = {
        .p = str, .end = str + n, .pk = levels, .out = out, .nout = nout};
    for (size_t i = 0; i < nout; i++)
        out[i].t = JS_NONE;
    if (scan_value(&s, v, 0, 0))
        return -1;
    skip_ws(&s);
    return s.p == s.end ? 0 : -1;
}

/* Past the value at s->p inside a span jscan_doc validated: strings by
 * their closing quote, containers by bracket depth, scalars by their
 * delimiter. Fills v like scan_value. */
static void skip_valid(struct scan *s, struct jspan *v)
{
    const char *start = s->p;
    char c = *s->p;
    v->esc = false;
    if (c == '"') {
        s->p++;
        for (;;) {
            const char *q = memchr(s->p, '"', (size_t)(s->end - s->p));
            size_t bs = 0;
            while (q - bs > s->p && q[-1 - (ptrdiff_t)bs] == '\\')
                bs++;
            if (memchr(s->p, '\\', (size_t)(q - s->p)))
                v->esc = true;
            s->p = q + 1;
            if (!(bs & 1))
                break;
        }
        v->t = JS_STRING;
    } else if (c == '{' || c == '[') {
        /* one table look-up per byte rather than five comparisons */
        static const signed char step[256] = {
            ['{'] = 1, ['['] = 1, ['}'] = -1, [']'] = -1, ['"'] = 2};
        int depth = 0;
        do {
            signed char k = step[(unsigned char)*s->p++];
            if (k == 2) {
                struct jspan str;
                s->p--;
                skip_valid(s, &str);
            } else {
                depth += k;
            }
        } while (depth);
        v->t = start[0] == '{' ? JS_OBJECT : JS_ARRAY;
    } else {
        while (s->p < s->end && *s->p != ',' && *s->p != '}' && *s->p != ']' &&
               *s->p != ' ' && *s->p != '\n' && *s->p != '\r' && *s->p != '\t')
            s->p++;
        v->t = c == 't'   ? JS_TRUE
               : c == 'f' ? JS_FALSE
               : c == 'n' ? JS_NULL
                          : JS_NUMBER;
    }
    v->p = start;
    v->n = (size_t)(s->p - start);
}

void jscan_trusted(const char *str, size_t n, struct jspan *v)
{
    struct scan s = {.p = str, .end = str + n};
    skip_ws(&s);
    skip_valid(&s, v);
}

int jscan_members(const struct jspan *obj, const char *const *keys, size_t nk,
                  struct jspan *out)
{
    size_t kl[8]; /* the keys' lengths, once rather than per member */
    for (size_t i = 0; i < nk; i++) {
        out[i].t = JS_NONE;
        if (i < 8)
            kl[i] = strlen(keys[i]);
    }
    if (obj->t != JS_OBJECT)
        return -1;
    struct scan s = {.p = obj->p + 1, .end = obj->p + obj->n - 1};
    struct jspan k, val;
    for (;;) {
        skip_ws(&s);
        if (s.p >= s.end)
            return 0;
        skip_valid(&s, &k);
        if (k.esc)
            return -1;
        skip_ws(&s);
        s.p++; /* ':' (validated) */
        skip_ws(&s);
        skip_valid(&s, &val);
        for (size_t i = 0; i < nk; i++) {
            size_t len = i < 8 ? kl[i] : strlen(keys[i]);
            if (k.n == len + 2 && !memcmp(k.p + 1, keys[i], len))
                out[i] = val;
        }
        skip_ws(&s);
        if (s.p < s.end)
            s.p++; /* ',' */
    }
}

long jscan_member_elements(const struct jspan *obj, const char *key,
                           struct jspan *arr, struct jspan *out, size_t max)
{
    size_t kl = strlen(key);
    long n = -1;
    arr->t = JS_NONE;
    if (obj->t != JS_OBJECT)
        return -2;
    struct scan s = {.p = obj->p + 1, .end = obj->p + obj->n - 1};
    struct jspan k, val;
    for (;;) {
        skip_ws(&s);
        if (s.p >= s.end)
            return n;
        skip_valid(&s, &k);
        if (k.esc)
            return -2;
        skip_ws(&s);
        s.p++; /* ':' (validated) */
        skip_ws(&s);
        bool hit = k.n == kl + 2 && !memcmp(k.p + 1, key, kl);
        if (hit && *s.p == '[') {
            /* split while walking, as jscan_elements would */
            const char *start = s.p++;
            long m = 0;
            for (;;) {
                skip_ws(&s);
                if (*s.p == ']')
                    break;
                skip_valid(&s, &val);
                if ((size_t)m < max)
                    out[m] = val;
                m++;
                skip_ws(&s);
                if (*s.p == ',')
                    s.p++;
            }
            s.p++; /* ']' */
            arr->p = start;
            arr->n = (size_t)(s.p - start);
            arr->t = JS_ARRAY;
            arr->esc = false;
            n = m;
        } else {
            skip_valid(&s, &val);
            if (hit) {
                *arr = val;
                n = -1;
            }
        }
        skip_ws(&s);
        if (s.p < s.end)
            s.p++; /* ',' */
    }
}

int jscan_index(const struct jspan *arr, size_t i, struct jspan *out)
{
    out->t = JS_NONE;
    if (arr->t != JS_ARRAY)
        return -1;
    struct scan s = {.p = arr->p + 1, .end = arr->p + arr->n - 1};
    struct jspan val;
    for (size_t k = 0;; k++) {
        skip_ws(&s);
        if (s.p >= s.end)
            return 0;
        skip_valid(&s, &val);
        if (k == i) {
            *out = val;
            return 0;
        }
        skip_ws(&s);
        if (s.p < s.end)
            s.p++; /* ',' */
    }
}

long jscan_elements(const struct jspan *arr, struct jspan *out, size_t max)
{
    if (arr->t != JS_ARRAY)
        return -1;
    struct scan s = {.p = arr->p + 1, .end = arr->p + arr->n - 1};
    struct jspan val;
    long n = 0;
    for (;;) {
        skip_ws(&s);
        if (s.p >= s.end)
            return n;
        skip_valid(&s, &val);
        if ((size_t)n < max)
            out[n] = val;
        n++;
        skip_ws(&s);
        if (s.p < s.end)
            s.p++; /* ',' */
    }
}

static void put_utf8(char *o, size_t *n, unsigned long cp)
{
    if (cp < 0x80) {
        o[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*n)++] = (char)(0xc0 | cp >> 6);
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xe0 | cp >> 12);
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*n)++] = (char)(0xf0 | cp >> 18);
        o[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

int jscan_str(const struct jspan *v, struct buf *b)
{
    const char *p = v->p + 1, *end = v->p + v->n - 1;
    if (!v->esc)
        return buf_add(b, p, (size_t)(end - p));
    /* decoded text is never longer than the escaped text */
    if (buf_grow(b, (size_t)(end - p)))
        return -ENOBUFS;
    char *o = b->data + b->len;
    size_t n = 0;
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = bs ? (size_t)(bs - p) : (size_t)(end - p);
        memcpy(o + n, p, run);
        n += run;
        p += run;
        if (!bs)
            break;
        char e = p[1];
        p += 2;
        switch (e) {
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'u': {
            struct scan s = {.p = p, .end = end};
            unsigned long cp = 0;
            scan_uescape(&s, &cp); /* validated by scan_string */
            put_utf8(o, &n, cp);
            p = s.p;
            break;
        }
        default:
            o[n++] = e;
            break; /* " \ / */
        }
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static json_t *build(struct scan *s);

static json_t *build_string(const struct jspan *v)
{
    if (!v->esc)
        return json_stringn_nocheck(v->p + 1, v->n - 2);
    struct buf b = BUF_INIT;
    jscan_str(v, &b);
    json_t *j = json_stringn_nocheck(b.data ? b.data : "", b.len);
    buf_release(&b);
    return j;
}

/* A number as jansson reads it: integers with strtoll, the rest with
 * strtod (no exponent and at most 18 integer digits: no overflow). */
static json_t *build_number(const struct jspan *v)
{
    char tmp[64];
    char *t = v->n < sizeof(tmp) ? tmp : malloc(v->n + 1);
    if (!t)
        abort();
    memcpy(t, v->p, v->n);
    t[v->n] = '\0';
    json_t *j = memchr(v->p, '.', v->n)
                    ? json_real(strtod(t, NULL))
                    : json_integer((json_int_t)strtoll(t, NULL, 10));
    if (t != tmp)
        free(t);
    return j;
}

static json_t *build_container(struct scan *s, bool obj)
{
    json_t *j = obj ? json_object() : json_array();
    s->p++;
    for (;;) {
        skip_ws(s);
        if (*s->p == ']' || *s->p == '}') {
            s->p++;
            return j;
        }
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (!obj) {
            json_array_append_new(j, build(s));
            continue;
        }
        struct jspan k;
        skip_valid(s, &k);
        skip_ws(s);
        s->p++; /* ':' */
        json_t *v = build(s);
        if (!k.esc) {
            json_object_setn_new_nocheck(j, k.p + 1, k.n - 2, v);
        } else {
            struct buf b = BUF_INIT;
            jscan_str(&k, &b);
            json_object_setn_new_nocheck(j, b.data ? b.data : "", b.len, v);
            buf_release(&b);
        }
    }
}

static json_t *build(struct scan *s)
{
    struct jspan v;
    skip_ws(s);
    if (s->p == s->at) {
        json_t *w = s->with;
        s->p += s->at_n; /* its end is known: not walked again */
        s->with = NULL;
        return w ? w : json_null();
    }
    if (s->p == s->at2) {
        json_t *w = s->with2;
        s->p += s->at2_n;
        s->with2 = NULL;
        return w ? w : json_null();
    }
    switch (*s->p) {
    case '{':
        return build_container(s, true);
    case '[':
        return build_container(s, false);
    default:
        skip_valid(s, &v);
        switch (v.t) {
        case JS_STRING:
            return build_string(&v);
        case JS_NUMBER:
            return build_number(&v);
        case JS_TRUE:
            return json_true();
        case JS_FALSE:
            return json_false();
        default:
            return json_null();
        }
    }
}

json_t *jscan_json(const struct jspan *v)
{
    struct scan s = {.p = v->p, .end = v->p + v->n};
    return build(&s);
}

json_t *jscan_json_with(const struct jspan *v, const struct jspan *at,
                        json_t *with)
{
    struct scan s = {.p = v->p,
                     .end = v->p + v->n,
                     .at = at->p,
                     .at_n = at->n,
                     .with = with};
    json_t *j = build(&s);
    json_decref(s.with); /* at was not inside v */
    return j;
}

json_t *jscan_json_with2(const struct jspan *v, const struct jspan *at,
                         json_t *with, const struct jspan *at2, json_t *with2)
{
    struct scan s = {.p = v->p,
                     .end = v->p + v->n,
                     .at = at->p,
                     .at_n = at->n,
                     .with = with,
                     .at2 = at2->p,
                     .at2_n = at2->n,
                     .with2 = with2};
    json_t *j = build(&s);
    json_decref(s.with); /* not inside v */
    json_decref(s.with2);
    return j;
}

/* An integer in the form jansson's dump gives it back: no fraction, no
 * exponent, not "-0" (which loads as 0). */
static bool is_plain_int(const struct jspan *v)
{
    for (size_t i = 0; i < v->n; i++)
        if (v->p[i] == '.' || v->p[i] == 'e' || v->p[i] == 'E')
            return false;
    return !(v->n == 2 && v->p[0] == '-' && v->p[1] == '0');
}

static int dump_plain(struct scan *s, struct buf *b, int depth);

static int dump_plain_container(struct scan *s, struct buf *b, bool obj,
                                int depth)
{
    /* the keys written so far, for duplicates (jansson keeps the first
     * one's place with the last one's value: left to jansson) */
    struct jspan keys[16];
    size_t nk = 0;
    bool first = true;
    if (depth > 8 || buf_addch(b, obj ? '{' : '['))
        return -1;
    s->p++;
    for (;;) {
        skip_ws(s);
        if (*s->p == ']' || *s->p == '}') {
            s->p++;
            return buf_addch(b, obj ? '}' : ']') ? -1 : 0;
        }
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (!first && buf_addch(b, ','))
            return -1;
        first = false;
        if (obj) {
            struct jspan k;
            skip_valid(s, &k);
            if (k.esc || nk == sizeof(keys) / sizeof(keys[0]))
                return -1;
            for (size_t i = 0; i < nk; i++)
                if (keys[i].n == k.n && !memcmp(keys[i].p, k.p, k.n))
                    return -1;
            keys[nk++] = k;
            if (buf_add(b, k.p, k.n) || buf_addch(b, ':'))
                return -1;
            skip_ws(s);
            s->p++; /* ':' */
        }
        if (dump_plain(s, b, depth + 1))
            return -1;
    }
}

static int dump_plain(struct scan *s, struct buf *b, int depth)
{
    struct jspan v;
    skip_ws(s);
    if (*s->p == '{' || *s->p == '[')
        return dump_plain_container(s, b, *s->p == '{', depth);
    skip_valid(s, &v);
    /* a string without escapes is its own dump: the bytes jdump escapes
     * (controls, quote, backslash) cannot stand unescaped in valid JSON */
    if ((v.t == JS_STRING && v.esc) || (v.t == JS_NUMBER && !is_plain_int(&v)))
        return -1;
    return buf_add(b, v.p, v.n) ? -1 : 0;
}

int jscan_dump_plain(const struct jspan *v, struct buf *b)
{
    struct scan s = {.p = v->p, .end = v->p + v->n};
    size_t mark = b->len;
    if (v->t == JS_NONE || dump_plain(&s, b, 0)) {
        b->len = mark;
        if (b->data)
            b->data[mark] = '\0';
        return -1;
    }
    return 0;
}
