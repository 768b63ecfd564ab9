/*
 * buf: growable, capped byte buffer. See buf.h for the contract.
 */
#include "core/buf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void buf_init(struct buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    b->max = max;
}

void buf_release(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void buf_reuse(struct buf *b, size_t keep)
{
    if (b->alloc > keep) {
        size_t max = b->max;
        buf_release(b);
        buf_init(b, max);
    } else {
        buf_reset(b);
    }
}

/* Whether extra more bytes (and the NUL) fit in what b has allocated,
 * within its cap: the common case of an append, decided without a call. */
static inline bool has_room(const struct buf *b, size_t extra)
{
    return b->alloc - b->len > extra &&
           (!b->max || (extra <= b->max && b->len <= b->max - extra));
}

int buf_grow(struct buf *b, size_t extra)
{
    if (b->max && (extra > b->max || b->len > b->max - extra))
        return -ENOBUFS;
    size_t need = b->len + extra + 1;
    if (need <= b->alloc)
        return 0;
    size_t n = b->alloc ? b->alloc : 64;
    while (n < need)
        n = n < (SIZE_MAX / 2) ? n * 2 : need;
    b->data = xrealloc(b->data, n);
    b->alloc = n;
    return 0;
}

int buf_add(struct buf *b, const void *data, size_t len)
{
    if (!has_room(b, len)) {
        int r = buf_grow(b, len);
        if (r)
            return r;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_adds(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

int buf_addch(struct buf *b, char c)
{
    if (!has_room(b, 1)) {
        int r = buf_grow(b, 1);
        if (r)
            return r;
    }
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
    return 0;
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0)
        return -EINVAL;
    int r = buf_grow(b, (size_t)n);
    if (r)
        return r;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

char *buf_detach(struct buf *b, size_t *len)
{
    char *p = b->data ? b->data : xstrdup("");
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = 0;
    b->alloc = 0;
    return p;
}

const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}
