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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/xalloc.h"
#include "store/jdump.h"

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

void hdrs_add(struct hdrs *h, const char *name, size_t nl, const char *value,
              size_t vl)
{
    const char *z = memchr(name, '\0', nl);
    if (z)
        nl = (size_t)(z - name);
    z = memchr(value, '\0', vl);
    if (z)
        vl = (size_t)(z - value);
    if (buf_grow(&h->b, nl + vl + 2))
        abort(); /* no cap on the list */
    buf_add(&h->b, name, nl);
    buf_add(&h->b, "", 1);
    buf_add(&h->b, value, vl);
    buf_add(&h->b, "", 1);
    h->n++;
}

struct field {
    const char *name, *value;
    size_t nl, vl;
    signed char role; /* 0 left out, 1 a key, 2 joined to an earlier key */
};

/* Whether jansson accepts s[0..n) as a string (valid UTF-8). */
static bool is_utf8(const char *s, size_t n)
{
    unsigned char hi = 0;
    for (size_t i = 0; i < n; i++)
        hi |= (unsigned char)s[i];
    if (hi < 0x80)
        return true;
    json_t *j = json_stringn(s, n); /* rare: its own check, exactly */
    json_decref(j);
    return j != NULL;
}

#define HDRS_STACK 48

/* The fields with their roles; f has room for h->n. */
static void roles(const struct hdrs *h, struct field *f)
{
    const char *p = h->b.data;
    for (size_t i = 0; i < h->n; i++) {
        f[i].name = p;
        f[i].nl = strlen(p);
        p += f[i].nl + 1;
        f[i].value = p;
        f[i].vl = strlen(p);
        p += f[i].vl + 1;
        bool key_before = false;
        for (size_t j = 0; j < i && !key_before; j++)
            key_before = f[j].role == 1 && f[j].nl == f[i].nl &&
                         !memcmp(f[j].name, f[i].name, f[i].nl);
        bool ok = is_utf8(f[i].value, f[i].vl);
        if (key_before)
            f[i].role = ok ? 2 : 0;
        else
            f[i].role = ok && is_utf8(f[i].name, f[i].nl) ? 1 : 0;
    }
}

int hdrs_each(const struct hdrs *h,
              int (*fn)(const char *name, const char *value, size_t vlen,
                        void *ud),
              void *ud)
{
    if (!h->set || !h->n)
        return 0;
    struct field stack[HDRS_STACK];
    struct field *f = h->n <= HDRS_STACK ? stack : xcalloc(h->n, sizeof(*f));
    roles(h, f);
    struct buf join = BUF_INIT;
    int rc = 0;
    for (size_t i = 0; i < h->n && !rc; i++) {
        if (f[i].role != 1)
            continue;
        const char *v = f[i].value;
        size_t vl = f[i].vl;
        for (size_t j = i + 1; j < h->n; j++) {
            if (f[j].role != 2 || f[j].nl != f[i].nl ||
                memcmp(f[j].name, f[i].name, f[i].nl))
                continue;
            if (v != join.data) {
                buf_reset(&join);
                buf_add(&join, f[i].value, f[i].vl);
            }
            buf_add(&join, ", ", 2);
            buf_add(&join, f[j].value, f[j].vl);
            v = join.data;
            vl = join.len;
        }
        rc = fn(f[i].name, v, vl, ud);
    }
    buf_release(&join);
    if (f != stack)
        free(f);
    return rc;
}

struct get_ci {
    const char *name;
    struct buf *out;
};

static int get_one(const char *name, const char *value, size_t vlen, void *ud)
{
    struct get_ci *g = ud;
    if (!vlen || strcasecmp(name, g->name))
        return 0;
    buf_add(g->out, value, vlen);
    return 1;
}

const char *hdrs_get_ci(const struct hdrs *h, const char *name, struct buf *out)
{
    struct get_ci g = {name, out};
    buf_reset(out);
    return hdrs_each(h, get_one, &g) ? buf_str(out) : NULL;
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
    if (jdump_string(d->out, name, strlen(name)) || buf_addch(d->out, ':') ||
        jdump_string(d->out, value, vlen))
        return -ENOBUFS;
    return 0;
}

int hdrs_json(const struct hdrs *h, struct buf *out)
{
    struct dump d = {out, true};
    if (buf_addch(out, '{'))
        return -ENOBUFS;
    int rc = hdrs_each(h, dump_one, &d);
    if (rc)
        return rc;
    return buf_addch(out, '}');
}
