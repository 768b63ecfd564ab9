/*
 * fuzz_h1: record's HTTP/1.1 response parser (src/http/h1.c) on
 * arbitrary bytes. The first byte picks a split point and whether the
 * response answers a HEAD. Invariants: a parsed head lies inside the
 * input, its names are tokens and its values hold no CR or LF; a strict
 * prefix of a complete head is "need more", never an error or a shorter
 * head; the chunked decoder gives the same data and the same verdict
 * whether the body arrives whole, in two pieces or a byte at a time, and
 * never more data bytes than it was given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "http/h1.h"

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void check_head(const char *p, size_t n, int hl, const struct h1_head *h)
{
    if (hl == -1 || hl == -2)
        return;
    if (hl <= 0 || (size_t)hl > n || h->status < 100 || h->status > 999 ||
        h->nheaders > H1_MAX_HEADERS)
        abort();
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct h1_header *f = &h->headers[i];
        if (f->name < p || f->name + f->name_len > p + hl || f->value < p ||
            f->value + f->value_len > p + hl || !f->name_len)
            abort();
        for (size_t k = 0; k < f->name_len; k++)
            if (!is_tchar((unsigned char)f->name[k]))
                abort();
        if (memchr(f->value, '\r', f->value_len) ||
            memchr(f->value, '\n', f->value_len))
            abort();
    }
    /* one byte short of the blank line is not a head yet */
    struct h1_head *h2 = malloc(sizeof(*h2));
    if (h1_parse_head(p, (size_t)hl - 1, h2) != -2)
        abort();
    free(h2);
}

/* Feeds p[0..n) to a fresh decoder in pieces of at most `step` bytes
 * (0: at cut, then the rest); logs the data and the verdict. */
static void decode(const char *p, size_t n, size_t step, size_t cut,
                   struct buf *log)
{
    struct h1_chunked c;
    h1_chunked_init(&c);
    size_t pos = 0, total = 0;
    int rc = 0;
    while (pos < n) {
        size_t lim = step ? step : (pos < cut ? cut - pos : n - pos);
        if (lim > n - pos)
            lim = n - pos;
        size_t off = 0;
        while (off < lim) {
            size_t used, doff, dl;
            rc = h1_chunked_feed(&c, p + pos + off, lim - off, &used, &doff,
                                 &dl);
            if (rc < 0 || rc == 2)
                break;
            if (used > lim - off || (rc == 0 && used != lim - off))
                abort();
            if (rc == 1) {
                if (!dl || doff + dl > used)
                    abort();
                buf_add(log, p + pos + off + doff, dl);
                total += dl;
            }
            off += used;
        }
        if (rc < 0 || rc == 2) {
            pos += off;
            break;
        }
        pos += lim;
    }
    if (total > n)
        abort();
    buf_printf(log, "|rc=%d", rc < 0 ? -1 : rc == 2 ? 2 : 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct h1_head *h = malloc(sizeof(*h));
    int hl = h1_parse_head(p, n, h);
    check_head(p, n, hl, h);
    const char *body = p;
    size_t bn = n;
    if (hl > 0) {
        enum h1_framing f;
        uint64_t len;
        int rc = h1_framing(h, data[0] & 1, &f, &len);
        if (rc != 0 && rc != -1)
            abort();
        if (!rc && f == H1_NONE && !(data[0] & 1) && h->status >= 200 &&
            h->status != 204 && h->status != 304)
            abort();
        (void)h1_keep_alive(h);
        body = p + hl;
        bn = n - (size_t)hl;
    }
    free(h);
    struct buf whole = BUF_INIT, split = BUF_INIT, bytes = BUF_INIT;
    size_t cut = bn ? data[0] % (bn + 1) : 0;
    decode(body, bn, bn ? bn : 1, 0, &whole);
    decode(body, bn, 0, cut, &split);
    decode(body, bn, 1, 0, &bytes);
    if (whole.len != split.len || whole.len != bytes.len ||
        memcmp(buf_str(&whole), buf_str(&split), whole.len) ||
        memcmp(buf_str(&whole), buf_str(&bytes), whole.len))
        abort();
    buf_release(&whole);
    buf_release(&split);
    buf_release(&bytes);
    return 0;
}
