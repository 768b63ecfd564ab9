/*
 * fuzz_h1req: record's HTTP/1.1 request parser (h1_parse_request and the
 * request framing rules in src/http/h1.c, used by front.c) on arbitrary
 * bytes; the first byte picks a cut. Invariants: the verdict is -1, -2,
 * -3 or a length inside the input; a parsed head's method is a token, its
 * target holds no space or control byte, its version is 1.0 or 1.1, its names
 * are tokens and its values hold no CR or LF, all inside the head; one byte
 * short of a complete head is "need more"; a cut of the input never gives a
 * different head (only "need more", or the same length); the framing is
 * 0 or -1, and a sized body is never empty.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/h1.h"

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool inside(const char *s, size_t n, const char *p, int hl)
{
    return s >= p && s + n <= p + hl;
}

static void check(const char *p, size_t n, int hl, const struct h1_req *q)
{
    if (hl == -1 || hl == -2 || hl == -3)
        return;
    if (hl <= 0 || (size_t)hl > n || q->minor < 0 || q->minor > 1 ||
        q->nheaders > H1_MAX_HEADERS || !q->method_len || !q->target_len ||
        !inside(q->method, q->method_len, p, hl) ||
        !inside(q->target, q->target_len, p, hl))
        abort();
    for (size_t i = 0; i < q->method_len; i++)
        if (!is_tchar((unsigned char)q->method[i]))
            abort();
    for (size_t i = 0; i < q->target_len; i++) {
        unsigned char c = (unsigned char)q->target[i];
        if (c <= 0x20 || c == 0x7f)
            abort();
    }
    for (size_t i = 0; i < q->nheaders; i++) {
        const struct h1_header *f = &q->headers[i];
        if (!f->name_len || !inside(f->name, f->name_len, p, hl) ||
            !inside(f->value, f->value_len, p, hl))
            abort();
        for (size_t k = 0; k < f->name_len; k++)
            if (!is_tchar((unsigned char)f->name[k]))
                abort();
        if (memchr(f->value, '\r', f->value_len) ||
            memchr(f->value, '\n', f->value_len))
            abort();
    }
    enum h1_framing fr;
    uint64_t len;
    int rc = h1_req_framing(q, &fr, &len);
    if (rc != 0 && rc != -1)
        abort();
    if (!rc && fr != H1_NONE && fr != H1_SIZED && fr != H1_CHUNKED)
        abort();
    if (!rc && fr == H1_SIZED && !len)
        abort();
    (void)h1_req_keep_alive(q);
    int host = h1_req_host_ok(q);
    if (host != 0 && host != -1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    struct h1_req *q = malloc(sizeof(*q));
    struct h1_req *q2 = malloc(sizeof(*q2));
    int hl = h1_parse_request(p, n, q);
    check(p, n, hl, q);
    if (hl > 0 && h1_parse_request(p, (size_t)hl - 1, q2) != -2)
        abort();
    size_t cut = n ? data[0] * 257u % (n + 1) : 0;
    int hc = h1_parse_request(p, cut, q2);
    if (hc > 0 && hc != hl)
        abort(); /* a prefix found a head the whole input disagrees with */
    if (hl > 0 && hc != -2 && hc != hl)
        abort();
    free(q);
    free(q2);
    return 0;
}
