/*
 * buf: a growable byte buffer with a hard cap, in the manner of git's strbuf.
 * The contents are always NUL-terminated (data[len] == 0) so they can be
 * used as a C string when they hold text.
 *
 * Lifecycle: buf_init() does not allocate; buf_release() frees the contents
 * and leaves an empty, reusable buffer. A buffer whose cap would be exceeded
 * is left unaltered and the append returns -ENOBUFS; callers name the limit
 * and the option that raises it in their own message.
 */
#ifndef CORE_BUF_H
#define CORE_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len;
    size_t alloc;
    size_t max; /* 0: no cap */
};

#define BUF_INIT                                                               \
    {                                                                          \
        NULL, 0, 0, 0                                                          \
    }

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
void buf_reset(struct buf *b);
/* Empties b for reuse, keeping its memory unless it grew past keep bytes
 * (then released; the cap stays). */
void buf_reuse(struct buf *b, size_t keep);
/* 0, or -ENOBUFS when len would exceed the cap (buffer unaltered). */
int buf_grow(struct buf *b, size_t extra);
int buf_add(struct buf *b, const void *data, size_t len);
int buf_adds(struct buf *b, const char *s);
int buf_addch(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Hands the contents to the caller (who frees them); b becomes empty. */
char *buf_detach(struct buf *b, size_t *len);
/* A C string that never is NULL: "" for an empty, unallocated buffer. */
const char *buf_str(const struct buf *b);

#endif
