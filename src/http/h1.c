/*
 * h1: HTTP/1.1 request and response heads, body framing and the chunked
 * coding, for both sides of the recording proxy (see h1.h). Strict where
 * a lenient reading would let a message smuggle a second one (differing
 * Content-Length values, Content-Length beside Transfer-Encoding in a
 * request, folded or malformed header lines, chunk sizes that overflow),
 * lenient about bare LF line ends.
 */
#include "http/h1.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#define LINE_MAX_ 8192 /* a chunk-size or trailer line longer is an error */

/* RFC 9110 section 5.6.2 token characters, by byte */
static const bool TCHAR[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1,
    ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,
    ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1,
    ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1,
    ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,
    ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1,
    ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static bool is_tchar(unsigned char c)
{
    return TCHAR[c];
}

/* Bytes a field value may hold (RFC 9110 section 5.5: VCHAR, SP, HTAB,
 * obs-text): all but the controls other than HTAB, and DEL */
static bool is_vbyte(unsigned char c)
{
    return (c >= 0x20 && c != 0x7f) || c == '\t';
}

/* The bytes of the 8 at p that a field value may not hold (is_vbyte
 * false), as the high bit of each: exact per byte, no carry crosses from
 * one byte to the next (each sum is of 7-bit halves). */
static uint64_t word_bad(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, low7 = ones * 0x7f,
                   highs = ones << 7;
    uint64_t w, x, t;
    memcpy(&w, p, 8);
    /* high bit set: the byte is 0x20 or above */
    uint64_t printable = (((w & low7) + ones * 0x60) | w) & highs;
    x = w ^ low7; /* zero where the byte is DEL */
    uint64_t not_del = (((x & low7) + low7) | x) & highs;
    t = w ^ (ones * '\t'); /* zero where the byte is HTAB */
    uint64_t tab = ~(((t & low7) + low7) | t) & highs;
    return ~((printable & not_del) | tab) & highs;
}

/* The bytes of the 8 at p that are letters, digits or '-' (most of a field
 * name), as the high bit of each, exactly: each sum below adds to a 7-bit
 * value, so no carry crosses into the next byte. A byte v of 7 bits is in
 * [lo, hi] when v + (0x80 - lo) reaches the high bit and v + (0x7f - hi)
 * does not. */
static uint64_t word_name(const char *p)
{
    const uint64_t ones = 0x0101010101010101ull, low7 = ones * 0x7f,
                   highs = ones << 7;
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t v = w & low7, l = v | ones * 0x20; /* l: letters in lower case */
    uint64_t letter = (l + ones * (0x80 - 'a')) & ~(l + ones * (0x7f - 'z'));
    uint64_t digit = (v + ones * (0x80 - '0')) & ~(v + ones * (0x7f - '9'));
    uint64_t dash = ~((v ^ ones * '-') + low7);
    return (letter | digit | dash) & ~w & highs;
}

/* The end of the run of token bytes (a field name) in p[0..n). */
static size_t name_run(const char *p, size_t n)
{
    size_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (i + 8 <= n) {
        uint64_t other = ~word_name(p + i) & (0x0101010101010101ull << 7);
        if (!other) {
            i += 8;
            continue;
        }
        i += (size_t)__builtin_ctzll(other) / 8;
        if (!is_tchar((unsigned char)p[i]))
            return i;
        i++; /* another token byte: on from the next */
    }
#endif
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    return i;
}

/* The end of the run of request-target bytes (above 0x20, not DEL) in
 * p[i..n): 8 bytes at a time, as word_bad does for values. */
static size_t target_run(const char *p, size_t i, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ull, low7 = ones * 0x7f,
                   highs = ones << 7;
    for (; i + 8 <= n; i += 8) {
        uint64_t w, x;
        memcpy(&w, p + i, 8);
        /* high bit set: the byte is above 0x20 */
        uint64_t above = (((w & low7) + ones * 0x5f) | w) & highs;
        x = w ^ low7; /* zero where the byte is DEL */
        uint64_t not_del = (((x & low7) + low7) | x) & highs;
        uint64_t bad = ~(above & not_del) & highs;
        if (bad)
            return i + (size_t)__builtin_ctzll(bad) / 8;
    }
#endif
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c == 0x7f)
            break;
        i++;
    }
    return i;
}

/* The end of the run of value bytes in p[i..n). */
static size_t value_run(const char *p, size_t i, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint64_t bad = word_bad(p + i);
        if (bad)
            return i + (size_t)__builtin_ctzll(bad) / 8;
    }
#endif
    while (i < n && is_vbyte((unsigned char)p[i]))
        i++;
    return i;
}

/* The line at p[0..n) without its LF (and CR): its length, or -2 when no
 * LF is in reach. *next is the offset after the LF. */
static long line_at(const char *p, size_t n, size_t *next)
{
    const char *lf = memchr(p, '\n', n);
    if (!lf)
        return -2;
    size_t len = (size_t)(lf - p);
    *next = len + 1;
    if (len && p[len - 1] == '\r')
        len--;
    return (long)len;
}

static int parse_status(const char *p, size_t n, struct h1_head *h)
{
    if (n < 12 || memcmp(p, "HTTP/1.", 7) || p[7] < '0' || p[7] > '9' ||
        p[8] != ' ')
        return -1;
    h->minor = p[7] - '0';
    for (int i = 9; i < 12; i++)
        if (p[i] < '0' || p[i] > '9')
            return -1;
    h->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    if (h->status < 100)
        return -1;
    h->reason = p + 12;
    h->reason_len = 0;
    if (n > 12) {
        if (p[12] != ' ')
            return -1;
        h->reason = p + 13;
        h->reason_len = n - 13;
    }
    for (size_t i = 0; i < h->reason_len; i++) {
        unsigned char c = (unsigned char)h->reason[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -1;
    }
    return 0;
}

static int parse_field(const char *p, size_t n, struct h1_header *f)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i >= n || p[i] != ':')
        return -1; /* no name, or whitespace / junk before the colon */
    f->name = p;
    f->name_len = i;
    i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t end = n;
    while (end > i && (p[end - 1] == ' ' || p[end - 1] == '\t'))
        end--;
    for (size_t k = i; k < end; k++) {
        unsigned char c = (unsigned char)p[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return -1; /* CR, NUL and other controls */
    }
    f->value = p + i;
    f->value_len = end - i;
    return 0;
}

/* The common field line, "name:" OWS value OWS CRLF (or LF), read in one
 * pass over its bytes: its length with its line end, or 0 when the line
 * is anything else (incomplete, malformed, a blank line, obs-fold), which
 * the caller then reads line by line. */
static size_t fast_field(const char *p, size_t n, struct h1_header *f)
{
    size_t i = name_run(p, n);
    if (i == 0 || i >= n || p[i] != ':')
        return 0;
    f->name = p;
    f->name_len = i;
    i++;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    size_t start = i;
    i = value_run(p, i, n);
    size_t next;
    if (i + 1 < n && p[i] == '\r' && p[i + 1] == '\n')
        next = i + 2;
    else if (i < n && p[i] == '\n')
        next = i + 1;
    else
        return 0;
    while (i > start && (p[i - 1] == ' ' || p[i - 1] == '\t'))
        i--;
    f->value = p + start;
    f->value_len = i - start;
    return next;
}

/* The field lines from pos to the blank line: the head's length, -2 when
 * it is not all there yet, -1 when malformed, big when it exceeds
 * H1_MAX_HEAD or H1_MAX_HEADERS. A line fast_field reads is read as the
 * line by line reading below would. */
static int parse_fields(const char *p, size_t n, size_t pos,
                        struct h1_header *hs, size_t *count, int big)
{
    size_t next;
    long len;
    struct h1_header f;
    *count = 0;
    for (;;) {
        if (pos < n && p[pos] != '\r' && p[pos] != '\n' &&
            (next = fast_field(p + pos, n - pos, &f)) > 0) {
            if (*count == H1_MAX_HEADERS)
                return big;
            hs[(*count)++] = f;
            pos += next;
            continue;
        }
        len = line_at(p + pos, n - pos, &next);
        if (len == -2)
            return n >= H1_MAX_HEAD ? big : -2;
        if (len == 0)
            return (int)(pos + next);
        if (p[pos] == ' ' || p[pos] == '\t')
            return -1; /* obs-fold */
        if (*count == H1_MAX_HEADERS)
            return big;
        if (parse_field(p + pos, (size_t)len, &hs[*count]))
            return -1;
        ++*count;
        pos += next;
    }
}

int h1_parse_head(const char *p, size_t n, struct h1_head *h)
{
    size_t pos = 0, next;
    long len;
    if (n > H1_MAX_HEAD)
        n = H1_MAX_HEAD;
    len = line_at(p, n, &next);
    if (len == -2)
        return n >= H1_MAX_HEAD ? -1 : -2;
    if (parse_status(p, (size_t)len, h))
        return -1;
    pos = next;
    return parse_fields(p, n, pos, h->headers, &h->nheaders, -1);
}

/* "method SP request-target SP HTTP/1.0" or "HTTP/1.1" (RFC 9112
 * section 3). */
static int parse_request_line(const char *p, size_t n, struct h1_req *q)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i]))
        i++;
    if (!i || i >= n || p[i] != ' ')
        return -1;
    q->method = p;
    q->method_len = i;
    size_t t = ++i;
    i = target_run(p, i, n);
    if (i < n && p[i] != ' ')
        return -1; /* a control, DEL or non-space blank in the target */
    /* HTTP/1.0 and HTTP/1.1 only: no other version is defined, and one
     * whose rules are unknown cannot be framed (RFC 9112 section 2.3) */
    if (i == t || n - i != 9 || memcmp(p + i, " HTTP/1.", 8) ||
        (p[i + 8] != '0' && p[i + 8] != '1'))
        return -1;
    q->target = p + t;
    q->target_len = i - t;
    q->minor = p[i + 8] - '0';
    return 0;
}

int h1_parse_request(const char *p, size_t n, struct h1_req *q)
{
    size_t pos = 0, next;
    long len;
    if (n > H1_MAX_HEAD)
        n = H1_MAX_HEAD;
    /* a client may send an extra CRLF after a body (section 2.2) */
    while (pos < n && (p[pos] == '\r' || p[pos] == '\n')) {
        if (p[pos] == '\r' && pos + 1 < n && p[pos + 1] != '\n')
            return -1;
        pos++;
    }
    len = line_at(p + pos, n - pos, &next);
    if (len == -2)
        return n >= H1_MAX_HEAD ? -3 : -2;
    if (parse_request_line(p + pos, (size_t)len, q))
        return -1;
    pos += next;
    return parse_fields(p, n, pos, q->headers, &q->nheaders, -3);
}

/* The last comma-separated element of v, trimmed. */
static void last_token(const char *v, size_t n, const char **t, size_t *tl)
{
    size_t end = n;
    while (end &&
           (v[end - 1] == ' ' || v[end - 1] == '\t' || v[end - 1] == ','))
        end--;
    size_t start = end;
    while (start && v[start - 1] != ',')
        start--;
    while (start < end && (v[start] == ' ' || v[start] == '\t'))
        start++;
    *t = v + start;
    *tl = end - start;
}

/* Each comma-separated element of a Content-Length value must be the same
 * decimal number (RFC 9110 section 8.6). */
static int content_length(const char *v, size_t n, bool *seen, uint64_t *len)
{
    size_t i = 0;
    do {
        while (i < n && (v[i] == ' ' || v[i] == '\t'))
            i++;
        uint64_t x = 0;
        size_t digits = 0;
        while (i < n && v[i] >= '0' && v[i] <= '9') {
            if (++digits > 18)
                return -1;
            x = x * 10 + (uint64_t)(v[i++] - '0');
        }
        while (i < n && (v[i] == ' ' || v[i] == '\t'))
            i++;
        if (!digits || (i < n && v[i] != ','))
            return -1;
        if (*seen && x != *len)
            return -1;
        *seen = true;
        *len = x;
    } while (i++ < n);
    return 0;
}

int h1_framing(const struct h1_head *h, bool head_req, enum h1_framing *f,
               uint64_t *len)
{
    bool has_cl = false, chunked = false, has_te = false;
    *len = 0;
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct h1_header *x = &h->headers[i];
        if (h1_name_is(x, "transfer-encoding")) {
            const char *t;
            size_t tl;
            last_token(x->value, x->value_len, &t, &tl);
            has_te = true;
            chunked = tl == 7 && !strncasecmp(t, "chunked", 7);
        } else if (h1_name_is(x, "content-length")) {
            if (content_length(x->value, x->value_len, &has_cl, len))
                return -1;
        }
    }
    if (head_req || h->status < 200 || h->status == 204 || h->status == 304)
        *f = H1_NONE;
    else if (has_te)
        *f = chunked ? H1_CHUNKED : H1_CLOSE;
    else if (has_cl)
        *f = H1_SIZED;
    else
        *f = H1_CLOSE;
    return 0;
}

bool h1_has_token(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    for (size_t i = 0; i + tl <= n; i++)
        if (!strncasecmp(v + i, tok, tl) &&
            (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
            (i + tl == n || v[i + tl] == ',' || v[i + tl] == ' '))
            return true;
    return false;
}

/* The close and keep-alive options of the Connection fields among h. */
static void conn_options(const struct h1_header *h, size_t n, bool *close,
                         bool *keep)
{
    *close = *keep = false;
    for (size_t i = 0; i < n; i++) {
        const struct h1_header *x = &h[i];
        if (!h1_name_is(x, "connection"))
            continue;
        *close |= h1_has_token(x->value, x->value_len, "close");
        *keep |= h1_has_token(x->value, x->value_len, "keep-alive");
    }
}

bool h1_keep_alive(const struct h1_head *h)
{
    bool close, keep;
    conn_options(h->headers, h->nheaders, &close, &keep);
    return !close && (h->minor >= 1 || keep);
}

bool h1_req_keep_alive(const struct h1_req *q)
{
    bool close, keep;
    conn_options(q->headers, q->nheaders, &close, &keep);
    return !close && (q->minor >= 1 || keep);
}

int h1_req_framing(const struct h1_req *q, enum h1_framing *f, uint64_t *len)
{
    bool has_cl = false, has_te = false, chunked = false;
    *len = 0;
    for (size_t i = 0; i < q->nheaders; i++) {
        const struct h1_header *x = &q->headers[i];
        if (h1_name_is(x, "transfer-encoding")) {
            const char *t;
            size_t tl;
            last_token(x->value, x->value_len, &t, &tl);
            has_te = true;
            chunked = tl == 7 && !strncasecmp(t, "chunked", 7);
        } else if (h1_name_is(x, "content-length")) {
            if (content_length(x->value, x->value_len, &has_cl, len))
                return -1;
        }
    }
    if (has_te && (!chunked || has_cl))
        return -1;
    *f = has_te ? H1_CHUNKED : has_cl && *len ? H1_SIZED : H1_NONE;
    return 0;
}

/* ---- chunked ---- */

enum {
    C_SIZE,
    C_EXT,
    C_SIZE_LF,
    C_DATA,
    C_DATA_CR,
    C_DATA_LF,
    C_TRAILER,
    C_TLINE,
    C_END_LF,
    C_DONE
};

void h1_chunked_init(struct h1_chunked *c)
{
    c->state = C_SIZE;
    c->left = 0;
    c->line = 0;
}

static int hexval(unsigned char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* The size line ended: data follows, or the trailer section. */
static void size_done(struct h1_chunked *c)
{
    c->state = c->left ? C_DATA : C_TRAILER;
    c->line = 0;
}

int h1_chunked_feed(struct h1_chunked *c, const char *p, size_t n, size_t *used,
                    size_t *data_off, size_t *data_len)
{
    size_t i = 0;
    *data_len = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)p[i];
        switch (c->state) {
        case C_SIZE: {
            int v = hexval(ch);
            if (v >= 0) {
                if (++c->line > 16)
                    return -1;
                c->left = c->left * 16 + (uint64_t)v;
                i++;
                break;
            }
            if (!c->line)
                return -1;
            if (ch == ';' || ch == ' ' || ch == '\t')
                c->state = C_EXT;
            else if (ch == '\r')
                c->state = C_SIZE_LF;
            else if (ch == '\n')
                size_done(c);
            else
                return -1;
            i++;
            break;
        }
        case C_EXT:
            if (ch == '\n')
                size_done(c);
            else if (ch == '\r')
                c->state = C_SIZE_LF; /* a CR ends the line: LF must follow */
            else if (++c->line > LINE_MAX_)
                return -1;
            i++;
            break;
        case C_SIZE_LF:
            if (ch != '\n')
                return -1;
            size_done(c);
            i++;
            break;
        case C_DATA: {
            size_t take = n - i;
            if (take > c->left)
                take = (size_t)c->left;
            *data_off = i;
            *data_len = take;
            c->left -= take;
            if (!c->left)
                c->state = C_DATA_CR;
            *used = i + take;
            return 1;
        }
        case C_DATA_CR:
            if (ch == '\r')
                c->state = C_DATA_LF;
            else if (ch == '\n')
                c->state = C_SIZE;
            else
                return -1;
            i++;
            break;
        case C_DATA_LF:
            if (ch != '\n')
                return -1;
            c->state = C_SIZE;
            i++;
            break;
        case C_TRAILER:
            if (ch == '\r')
                c->state = C_END_LF;
            else if (ch == '\n')
                c->state = C_DONE;
            else
                c->state = C_TLINE;
            c->line = 0;
            i++;
            break;
        case C_TLINE:
            if (ch == '\n')
                c->state = C_TRAILER;
            else if (++c->line > LINE_MAX_)
                return -1;
            i++;
            break;
        case C_END_LF:
            if (ch != '\n')
                return -1;
            c->state = C_DONE;
            i++;
            break;
        default:
            *used = i;
            return 2;
        }
        if (c->state == C_DONE) {
            *used = i;
            return 2;
        }
    }
    *used = i;
    return c->state == C_DONE ? 2 : 0;
}

int h1_req_host_ok(const struct h1_req *q)
{
    size_t hosts = 0;
    for (size_t i = 0; i < q->nheaders; i++)
        hosts += h1_name_is(&q->headers[i], "host");
    return hosts == 1 || (hosts == 0 && q->minor == 0) ? 0 : -1;
}
