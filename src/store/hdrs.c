/*
 * hdrs: the flat header list and its JSON object (hdrs.h). The object's
 * rules are those of the jansson object the recorder built before: keys
 * are case-sensitive, a repeated key keeps its first place and gets the
 * joined value, a field jansson would refuse (invalid UTF-8) is dropped,
 * and a refused repeat leaves the earlier value as it was.
 */
#include "store/hdrs.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/utf8.h"
#include "core/xalloc.h"
#include "wire/jdump.h"

void hdrs_start(struct hdrs *h)
{
    buf_reset(&h->b);
    h->n = 0;
    h->set = true;
}

void hdrs_release(struct hdrs *h)
{
    buf_release(&h->b);
    h->n = 0;
    h->set = false;
}

void hdrs_reserve(struct hdrs *h, size_t n, size_t bytes)
{
    if (buf_grow(&h->b, n * (sizeof(struct hdr_field) + 2) + bytes))
        abort(); /* no cap on the list */
}

/* The field at offset o of h's buffer; its name follows it. */
static struct hdr_field field_at(const struct hdrs *h, size_t o)
{
    struct hdr_field f;
    memcpy(&f, h->b.data + o, sizeof(f));
    return f;
}

static size_t field_size(const struct hdr_field *f)
{
    return sizeof(*f) + f->nl + f->vl + 2;
}

void hdrs_add(struct hdrs *h, const char *name, size_t nl, const char *value,
              size_t vl)
{
    const char *z = memchr(name, '\0', nl);
    if (z)
        nl = (size_t)(z - name);
    z = memchr(value, '\0', vl);
    if (z)
        vl = (size_t)(z - value);
    struct hdr_field f = {(uint32_t)nl, (uint32_t)vl, 0, 0, {0, 0}};
    if (nl > UINT32_MAX / 4 || vl > UINT32_MAX / 4 ||
        buf_grow(&h->b, sizeof(f) + nl + vl + 2))
        abort(); /* no cap on the list; a header is far below these */
    /* its place: joined to an earlier member of the same name (bytes), or
     * a member of its own; left out when jansson would refuse it */
    char *d = h->b.data;
    size_t key = SIZE_MAX;
    for (size_t o = 0, i = 0; i < h->n; i++) {
        struct hdr_field g = field_at(h, o);
        if (g.role == 1 && g.nl == nl && !memcmp(d + o + sizeof(g), name, nl)) {
            key = o;
            break;
        }
        o += field_size(&g);
    }
    bool ok = utf8_valid(value, vl);
    if (key != SIZE_MAX) {
        f.role = ok ? 2 : 0;
        d[key + offsetof(struct hdr_field, joined)] |= ok;
    } else {
        f.role = ok && utf8_valid(name, nl) ? 1 : 0;
    }
    char *o = d + h->b.len;
    memcpy(o, &f, sizeof(f));
    o += sizeof(f);
    memcpy(o, name, nl);
    o[nl] = '\0';
    memcpy(o + nl + 1, value, vl);
    o[nl + 1 + vl] = '\0';
    h->b.len += field_size(&f);
    d[h->b.len] = '\0';
    h->n++;
}

int hdrs_each(const struct hdrs *h,
              int (*fn)(const char *name, const char *value, size_t vlen,
                        void *ud),
              void *ud)
{
    if (!h->set)
        return 0;
    const char *d = h->b.data;
    struct buf join = BUF_INIT;
    int rc = 0;
    for (size_t o = 0, i = 0; i < h->n && !rc; i++) {
        struct hdr_field f = field_at(h, o);
        const char *name = d + o + sizeof(f), *value = name + f.nl + 1;
        size_t next = o + field_size(&f);
        o = next;
        if (f.role != 1)
            continue;
        if (!f.joined) {
            rc = fn(name, value, f.vl, ud);
            continue;
        }
        buf_reset(&join);
        buf_add(&join, value, f.vl);
        for (size_t p = next, j = i + 1; j < h->n; j++) {
            struct hdr_field g = field_at(h, p);
            const char *gn = d + p + sizeof(g);
            if (g.role == 2 && g.nl == f.nl && !memcmp(gn, name, f.nl)) {
                buf_add(&join, ", ", 2);
                buf_add(&join, gn + g.nl + 1, g.vl);
            }
            p += field_size(&g);
        }
        rc = fn(name, join.data, join.len, ud);
    }
    buf_release(&join);
    return rc;
}

struct get_ci {
    const char *name;
    size_t nl;
    struct buf *out;
};

static int get_one(const char *name, const char *value, size_t vlen, void *ud)
{
    struct get_ci *g = ud;
    if (!vlen || (name[0] | 0x20) != (g->name[0] | 0x20) ||
        strcasecmp(name, g->name))
        return 0;
    buf_add(g->out, value, vlen);
    return 1;
}

const char *hdrs_get_ci(const struct hdrs *h, const char *name, struct buf *out)
{
    buf_reset(out);
    /* a quick pass: no member of that length, no walk */
    size_t nl = strlen(name);
    bool any = false;
    for (size_t o = 0, i = 0; i < h->n && !any; i++) {
        struct hdr_field f = field_at(h, o);
        any = f.role == 1 && f.nl == nl;
        o += field_size(&f);
    }
    if (!h->set || !any)
        return NULL;
    struct get_ci g = {name, nl, out};
    return hdrs_each(h, get_one, &g) ? buf_str(out) : NULL;
}

/* Whether s[0..n) needs no escape in a JSON string (no control byte, no
 * '"', no backslash), 8 bytes at a time. */
static bool plain(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w, q, b;
        memcpy(&w, s + i, 8);
        q = w ^ (ones * '"');
        b = w ^ (ones * '\\');
        /* a byte below 0x20, or a zero byte in q or b (a borrow may flag
         * a clean word: it then takes the escaping path, never the other
         * way round) */
        if (((w - ones * 0x20) & ~w & high) || ((q - ones) & ~q & high) ||
            ((b - ones) & ~b & high))
            return false;
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            return false;
    }
    return true;
}

/* Appends s[0..n) as a JSON string; out has room (hdrs_json). */
static int put_string(struct buf *out, const char *s, size_t n)
{
    if (!plain(s, n))
        return jdump_string(out, s, n);
    if (buf_grow(out, n + 2))
        return -ENOBUFS;
    char *o = out->data + out->len;
    o[0] = '"';
    memcpy(o + 1, s, n);
    o[n + 1] = '"';
    out->len += n + 2;
    out->data[out->len] = '\0';
    return 0;
}

struct dump {
    struct buf *out;
    bool first;
};

static int dump_one(const char *name, const char *value, size_t vlen, void *ud)
{
    struct dump *d = ud;
    if (!d->first && buf_addch(d->out, ','))
        return -ENOBUFS;
    d->first = false;
    if (put_string(d->out, name, strlen(name)) || buf_addch(d->out, ':') ||
        put_string(d->out, value, vlen))
        return -ENOBUFS;
    return 0;
}

/* Writes s[0..n) quoted at o when it needs no escape; the end, or NULL */
static char *put_plain(char *o, const char *s, size_t n)
{
    if (!plain(s, n))
        return NULL;
    *o++ = '"';
    memcpy(o, s, n);
    o += n;
    *o++ = '"';
    return o;
}

/* hdrs_json for a list without joined fields whose names and values need
 * no escape, written in one pass into the room hdrs_json made: 0, or -1
 * (out unaltered) for any other list. */
static int json_plain(const struct hdrs *h, struct buf *out)
{
    const char *d = h->b.data;
    char *start = out->data + out->len, *o = start;
    for (size_t off = 0, i = 0; i < h->n; i++) {
        struct hdr_field f = field_at(h, off);
        const char *name = d + off + sizeof(f);
        off += field_size(&f);
        if (f.role != 1)
            continue;
        if (f.joined)
            return -1;
        if (o != start)
            *o++ = ',';
        if (!(o = put_plain(o, name, f.nl)))
            return -1;
        *o++ = ':';
        if (!(o = put_plain(o, name + f.nl + 1, f.vl)))
            return -1;
    }
    *o++ = '}';
    *o = '\0';
    out->len = (size_t)(o - out->data);
    return 0;
}

int hdrs_json(const struct hdrs *h, struct buf *out)
{
    struct dump d = {out, true};
    /* room for every string escaped at worst, so that no string of the
     * walk grows the buffer */
    if (buf_grow(out, 6 * h->b.len + 2) || buf_addch(out, '{'))
        return -ENOBUFS;
    if (!h->set || !json_plain(h, out))
        return h->set ? 0 : buf_addch(out, '}');
    int rc = hdrs_each(h, dump_one, &d);
    if (rc)
        return rc;
    return buf_addch(out, '}');
}
