/*
 * sse: event-stream parsing over chunks that may split lines (and CRLF
 * pairs) anywhere. A line that arrives whole is read in place; only a line
 * split between chunks is gathered in p->line first.
 */
#include "wire/sse.h"

#include <errno.h>
#include <string.h>

void sse_init(struct sse_parser *p, size_t max)
{
    memset(p, 0, sizeof(*p));
    if (!max)
        max = (size_t)64 << 20;
    buf_init(&p->line, max);
    buf_init(&p->data, max);
    buf_init(&p->event, 4096);
}

void sse_release(struct sse_parser *p)
{
    buf_release(&p->line);
    buf_release(&p->data);
    buf_release(&p->event);
}

void sse_reset(struct sse_parser *p, size_t keep)
{
    buf_reuse(&p->line, keep);
    buf_reuse(&p->data, keep);
    buf_reuse(&p->event, keep);
    p->has_data = p->after_cr = p->failed = false;
}

/* One complete line s[0..n) (without its terminator), in the input or in
 * p->line. */
static int on_line(struct sse_parser *p, const char *s, size_t n,
                   sse_event_fn fn, void *ud)
{
    int rc = 0;

    if (n == 0) { /* blank line: dispatch */
        if (p->has_data)
            rc = fn(buf_str(&p->event), buf_str(&p->data), p->data.len, ud);
        buf_reset(&p->data);
        buf_reset(&p->event);
        p->has_data = false;
        return rc;
    }
    if (s[0] == ':') /* comment */
        goto out;
    const char *colon = memchr(s, ':', n);
    size_t name_len = colon ? (size_t)(colon - s) : n;
    const char *val = colon ? colon + 1 : s + n;
    if (colon && *val == ' ')
        val++;
    size_t val_len = n - (size_t)(val - s);
    if (name_len == 4 && !memcmp(s, "data", 4)) {
        if (p->has_data && buf_addch(&p->data, '\n'))
            return -ENOBUFS;
        if (buf_add(&p->data, val, val_len))
            return -ENOBUFS;
        p->has_data = true;
    } else if (name_len == 5 && !memcmp(s, "event", 5)) {
        buf_reset(&p->event);
        if (buf_add(&p->event, val, val_len))
            return -ENOBUFS;
    }
out:
    return 0;
}

/* The first CR or LF in s[0..n), or s + n. memchr for LF (events end with
 * LF lines), then for CR before it (rare). */
static const char *line_end(const char *s, size_t n)
{
    const char *lf = memchr(s, '\n', n);
    size_t upto = lf ? (size_t)(lf - s) : n;
    const char *cr = memchr(s, '\r', upto);
    return cr ? cr : s + upto;
}

int sse_feed(struct sse_parser *p, const char *s, size_t n, sse_event_fn fn,
             void *ud)
{
    if (p->failed)
        return -ENOBUFS;
    size_t i = 0;
    while (i < n) {
        if (p->after_cr && s[i] == '\n') {
            p->after_cr = false;
            i++;
            continue;
        }
        p->after_cr = false;
        const char *e = line_end(s + i, n - i);
        size_t j = (size_t)(e - s);
        if (j == n) { /* unfinished: kept for the next piece */
            if (j > i && buf_add(&p->line, s + i, j - i)) {
                p->failed = true;
                return -ENOBUFS;
            }
            break;
        }
        int rc;
        if (p->line.len == 0) { /* the whole line is here: read in place */
            if (p->line.max && j - i > p->line.max) { /* the line cap */
                p->failed = true;
                return -ENOBUFS;
            }
            rc = on_line(p, s + i, j - i, fn, ud);
        } else {
            if (j > i && buf_add(&p->line, s + i, j - i)) {
                p->failed = true;
                return -ENOBUFS;
            }
            rc = on_line(p, p->line.data, p->line.len, fn, ud);
            buf_reset(&p->line);
        }
        p->after_cr = s[j] == '\r';
        i = j + 1;
        if (rc == -ENOBUFS)
            p->failed = true;
        if (rc)
            return rc;
    }
    return 0;
}
