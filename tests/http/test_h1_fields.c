/*
 * h1 field lines (src/http/h1.c, parse_fields): the parser reads the
 * common line ("name:" OWS value OWS CRLF) in one pass, 8 bytes at a time
 * for the value, and every other line the line-by-line way. This test
 * holds it to a reference, the line-by-line reading alone (RFC 9112
 * section 5: a token, a colon, optional whitespace, a value without
 * controls other than HTAB, no obs-fold), on directed cases and on a
 * seeded stream of random header blocks (tabs, DEL, obs-text, bare CR and
 * LF, NUL, truncation, the field count limit), through both
 * h1_parse_request and h1_parse_head.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "http/h1.h"

/* ---- the reference: one line at a time ---- */

static bool ref_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static long ref_line(const char *p, size_t n, size_t *next)
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

static int ref_field(const char *p, size_t n, struct h1_header *f)
{
    size_t i = 0;
    while (i < n && ref_tchar((unsigned char)p[i]))
        i++;
    if (i == 0 || i >= n || p[i] != ':')
        return -1;
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
            return -1;
    }
    f->value = p + i;
    f->value_len = end - i;
    return 0;
}

static int ref_fields(const char *p, size_t n, size_t pos, struct h1_header *hs,
                      size_t *count, int big)
{
    size_t next;
    *count = 0;
    if (n > H1_MAX_HEAD)
        n = H1_MAX_HEAD;
    for (;;) {
        long len = ref_line(p + pos, n - pos, &next);
        if (len == -2)
            return n >= H1_MAX_HEAD ? big : -2;
        if (len == 0)
            return (int)(pos + next);
        if (p[pos] == ' ' || p[pos] == '\t')
            return -1;
        if (*count == H1_MAX_HEADERS)
            return big;
        if (ref_field(p + pos, (size_t)len, &hs[*count]))
            return -1;
        ++*count;
        pos += next;
    }
}

/* ---- comparing ---- */

static const char REQ_LINE[] = "POST /v1/chat/completions HTTP/1.1\r\n";
static const char STATUS_LINE[] = "HTTP/1.1 200 OK\r\n";

static struct h1_req Q;
static struct h1_head H;
static struct h1_header REF[H1_MAX_HEADERS];

/* Parses the field block f (fl bytes) after a request line and after a
 * status line and checks both against the reference, field by field. */
static void compare(const char *f, size_t fl)
{
    static char p[8192];
    const char *lines[2] = {REQ_LINE, STATUS_LINE};
    assert_true(fl + sizeof(REQ_LINE) <= sizeof(p));
    for (int side = 0; side < 2; side++) {
        size_t ll = strlen(lines[side]);
        memcpy(p, lines[side], ll);
        memcpy(p + ll, f, fl);
        size_t n = ll + fl, count;
        int big = side ? -1 : -3;
        int want = ref_fields(p, n, ll, REF, &count, big);
        int got;
        const struct h1_header *hs;
        size_t ngot;
        if (side == 0) {
            got = h1_parse_request(p, n, &Q);
            hs = Q.headers;
            ngot = Q.nheaders;
        } else {
            got = h1_parse_head(p, n, &H);
            hs = H.headers;
            ngot = H.nheaders;
        }
        assert_int_equal(got, want);
        if (want < 0)
            continue;
        assert_int_equal(ngot, count);
        for (size_t i = 0; i < count; i++) {
            assert_ptr_equal(hs[i].name, REF[i].name);
            assert_int_equal(hs[i].name_len, REF[i].name_len);
            assert_ptr_equal(hs[i].value, REF[i].value);
            assert_int_equal(hs[i].value_len, REF[i].value_len);
        }
    }
}

static void compare_s(const char *f)
{
    compare(f, strlen(f));
}

/* ---- directed cases ---- */

static void test_fields_directed(void **state)
{
    (void)state;
    compare_s("Host: a\r\nContent-Type: application/json\r\n\r\n");
    compare_s("A:\r\nB: \t \r\nC:x\r\n\r\n");     /* empty, OWS only */
    compare_s("A: v w \t\r\nB:\tx\ty\t\r\n\r\n"); /* trimmed, inner HTAB */
    compare_s("A: v\nB: w\n\n");                  /* bare LF */
    compare_s("A: v\r\r\nB: w\r\n\r\n");          /* CR CR LF */
    compare_s("A: v\rB: w\r\n\r\n");              /* bare CR */
    compare_s("A: v\r\n w\r\n\r\n");              /* obs-fold */
    compare_s(" A: v\r\n\r\n");                   /* leading space */
    compare_s("A : v\r\n\r\n");                   /* space before : */
    compare_s(": v\r\n\r\n");                     /* no name */
    compare_s("A v\r\n\r\n");                     /* no colon */
    compare_s("A: v");                            /* incomplete */
    compare_s("A: v\r");                          /* incomplete */
    compare_s("A: v\r\n");                        /* no blank line */
    compare_s("A: v\r\n\r");                      /* half a blank line */
    compare_s("A: caf\xc3\xa9 \x80\xff\r\n\r\n"); /* obs-text */
    compare(("A: a\0b\r\n\r\n"), 11);             /* NUL */
    /* DEL, a control and HTAB at each offset of a value longer than the
     * 8-byte words it is read in */
    const char bad[] = {0x7f, 0x01, 0x1f, '\t', '\r', '\n', 0x0b};
    for (size_t b = 0; b < sizeof(bad); b++)
        for (size_t at = 0; at < 40; at++) {
            char f[128];
            size_t n = 0;
            memcpy(f, "X-Long: ", 8);
            n = 8;
            for (size_t k = 0; k < 40; k++)
                f[n++] = k == at ? bad[b] : (char)('a' + k % 26);
            memcpy(f + n, "\r\nY: z\r\n\r\n", 10);
            n += 10;
            compare(f, n);
            compare(f, n - 3); /* cut short */
        }
}

static void test_fields_count_limit(void **state)
{
    (void)state;
    static char f[8192];
    for (size_t lines = H1_MAX_HEADERS - 1; lines <= H1_MAX_HEADERS + 1;
         lines++) {
        size_t n = 0;
        for (size_t i = 0; i < lines; i++)
            n += (size_t)sprintf(f + n, "H%zu: v\r\n", i);
        memcpy(f + n, "\r\n", 2);
        compare(f, n + 2);
        /* a malformed last line past the limit */
        memcpy(f + n, "bad line\r\n\r\n", 12);
        compare(f, n + 12);
    }
}

/* ---- random blocks ---- */

static char pick_byte(struct rng *r)
{
    static const char common[] = "abcXYZ09-_.:;,/=\"' \t";
    switch (rng_below(r, 16)) {
    case 0:
        return (char)(0x80 + rng_below(r, 128)); /* obs-text */
    case 1:
        return (char)rng_below(r, 0x20); /* a control, CR and LF included */
    case 2:
        return 0x7f;
    case 3:
        return "\r\n"[rng_below(r, 2)];
    default:
        return common[rng_below(r, sizeof(common) - 1)];
    }
}

static size_t random_block(struct rng *r, char *f, size_t cap)
{
    size_t n = 0, lines = rng_below(r, 8);
    if (!rng_below(r, 50))
        lines = H1_MAX_HEADERS - 2 + rng_below(r, 4);
    for (size_t i = 0; i < lines && n + 80 < cap; i++) {
        if (!rng_below(r, 30))
            f[n++] = rng_below(r, 2) ? ' ' : '\t'; /* obs-fold */
        size_t nl = rng_below(r, 12);
        for (size_t k = 0; k < nl; k++)
            f[n++] =
                rng_below(r, 20) ? "aZ-9!~x"[rng_below(r, 7)] : pick_byte(r);
        if (rng_below(r, 20))
            f[n++] = ':';
        size_t ows = rng_below(r, 3);
        for (size_t k = 0; k < ows; k++)
            f[n++] = rng_below(r, 2) ? ' ' : '\t';
        bool clean = rng_below(r, 3);
        size_t vl = rng_below(r, 40);
        for (size_t k = 0; k < vl; k++)
            f[n++] = clean ? (char)('a' + rng_below(r, 26)) : pick_byte(r);
        switch (rng_below(r, 6)) {
        case 0:
            f[n++] = '\n';
            break;
        case 1:
            f[n++] = '\r';
            break;
        default:
            f[n++] = '\r';
            f[n++] = '\n';
        }
    }
    if (rng_below(r, 4)) {
        f[n++] = '\r';
        f[n++] = '\n';
    }
    return n;
}

static void test_fields_random(void **state)
{
    (void)state;
    static char f[8192];
    struct rng r;
    rng_seed(&r, 20261130);
    for (int i = 0; i < 20000; i++) {
        size_t n = random_block(&r, f, sizeof(f) - 2);
        compare(f, n);
        if (n)
            compare(f, rng_below(&r, n)); /* a prefix */
    }
}

/* ---- the request line ---- */

/* The reference reading of "method SP target SP HTTP/1.d", byte by byte:
 * 0 with the slices, or -1. */
static int ref_request_line(const char *p, size_t n, struct h1_req *q)
{
    size_t i = 0;
    while (i < n && ref_tchar((unsigned char)p[i]))
        i++;
    if (!i || i >= n || p[i] != ' ')
        return -1;
    q->method = p;
    q->method_len = i;
    size_t t = ++i;
    while (i < n && p[i] != ' ') {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c == 0x7f)
            return -1;
        i++;
    }
    if (i == t || n - i != 9 || memcmp(p + i, " HTTP/1.", 8) ||
        p[i + 8] < '0' || p[i + 8] > '9')
        return -1;
    q->target = p + t;
    q->target_len = i - t;
    q->minor = p[i + 8] - '0';
    return 0;
}

/* Request lines with targets of every length up to 40 holding, at a
 * random place, a control, DEL, a tab, a space, obs-text or nothing odd:
 * h1_parse_request accepts exactly those the reference does, with the
 * same slices. */
static void test_request_line_random(void **state)
{
    (void)state;
    static char p[256];
    struct rng r;
    struct h1_req want;
    rng_seed(&r, 7);
    for (int k = 0; k < 20000; k++) {
        size_t n = 0, tl = rng_below(&r, 41);
        memcpy(p, "GET ", 4);
        n = 4;
        for (size_t i = 0; i < tl; i++)
            p[n++] = (char)('a' + rng_below(&r, 26));
        if (tl && rng_below(&r, 3))
            p[4 + rng_below(&r, tl)] = pick_byte(&r);
        const char *tail = rng_below(&r, 10) ? " HTTP/1.1" : " HTTP/1.x";
        memcpy(p + n, tail, 9);
        n += 9;
        int ref = ref_request_line(p, n, &want);
        memcpy(p + n, "\r\n\r\n", 4);
        int got = h1_parse_request(p, n + 4, &Q);
        if (ref < 0 || memchr(p, '\n', n) || memchr(p, '\r', n)) {
            /* a CR or LF in the target ends the line early: the
             * reference, given the line, cannot say; both refuse */
            if (ref < 0 && !memchr(p, '\n', n))
                assert_int_equal(got, -1);
            continue;
        }
        assert_int_equal(got, (int)n + 4);
        assert_ptr_equal(Q.target, want.target);
        assert_int_equal(Q.target_len, want.target_len);
        assert_int_equal(Q.minor, want.minor);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields_directed),
        cmocka_unit_test(test_fields_count_limit),
        cmocka_unit_test(test_fields_random),
        cmocka_unit_test(test_request_line_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
