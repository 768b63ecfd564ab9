/*
 * h1 (src/http/h1.c): the HTTP/1.1 response and request head parsers,
 * the framing rules of RFC 9112 section 6.3 and the chunked decoder, case
 * by case. tests/fuzz/fuzz_h1.c and fuzz_h1req.c check their invariants
 * on arbitrary input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "http/h1.h"

static struct h1_head H;

static int parse(const char *s)
{
    return h1_parse_head(s, strlen(s), &H);
}

static void test_head(void **state)
{
    (void)state;
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: a/b\r\n"
                             "X-Empty:\r\nX-Pad:  v w \t\r\n\r\nBODY";
    assert_int_equal(parse(ok), (int)strlen(ok) - 4);
    assert_int_equal(H.status, 200);
    assert_int_equal(H.minor, 1);
    assert_int_equal(H.reason_len, 2);
    assert_int_equal(H.nheaders, 3);
    assert_true(h1_name_is(&H.headers[0], "content-type"));
    assert_int_equal(H.headers[1].value_len, 0);
    assert_int_equal(H.headers[2].value_len, 3); /* trimmed both sides */
    assert_memory_equal(H.headers[2].value, "v w", 3);
    /* no reason phrase; bare LF line ends */
    assert_int_equal(parse("HTTP/1.0 204\n\n"), 14);
    assert_int_equal(H.status, 204);
    assert_int_equal(H.reason_len, 0);
    /* incomplete: need more, at every cut */
    for (size_t n = 0; n < strlen(ok) - 4; n++)
        assert_int_equal(h1_parse_head(ok, n, &H), -2);
    /* malformed */
    assert_int_equal(parse("HTTP/1.1 2x0 OK\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/2 200 OK\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 099 X\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nName : x\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n"), -1);
    assert_int_equal(parse("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n"), -1);
}

static void test_head_limits(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    buf_adds(&b, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i <= H1_MAX_HEADERS; i++)
        buf_printf(&b, "X-%d: v\r\n", i);
    buf_adds(&b, "\r\n");
    assert_int_equal(h1_parse_head(b.data, b.len, &H), -1); /* 101 fields */
    buf_reset(&b);
    buf_adds(&b, "HTTP/1.1 200 OK\r\nX-Big: ");
    while (b.len < H1_MAX_HEAD + 10)
        buf_addch(&b, 'a');
    assert_int_equal(h1_parse_head(b.data, b.len, &H), -1); /* too long */
    buf_release(&b);
}

static enum h1_framing framing(const char *head, bool head_req, uint64_t *len)
{
    enum h1_framing f;
    assert_true(parse(head) > 0);
    assert_int_equal(h1_framing(&H, head_req, &f, len), 0);
    return f;
}

/* RFC 9112 section 6.3, in its order. */
static void test_framing(void **state)
{
    (void)state;
    uint64_t len;
    const char *sized = "HTTP/1.1 200 OK\r\nContent-Length: 42\r\n\r\n";
    assert_int_equal(framing(sized, false, &len), H1_SIZED);
    assert_int_equal(len, 42);
    assert_int_equal(framing(sized, true, &len), H1_NONE); /* HEAD */
    assert_int_equal(
        framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false,
                &len),
        H1_NONE);
    assert_int_equal(framing("HTTP/1.1 204 No Content\r\n\r\n", false, &len),
                     H1_NONE);
    assert_int_equal(framing("HTTP/1.1 103 Early\r\n\r\n", false, &len),
                     H1_NONE);
    /* Transfer-Encoding wins over Content-Length */
    assert_int_equal(framing("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n",
                             false, &len),
                     H1_CHUNKED);
    assert_int_equal(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, "
                             "Chunked\r\n\r\n",
                             false, &len),
                     H1_CHUNKED);
    /* chunked not last: read until the close */
    assert_int_equal(framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,"
                             " gzip\r\n\r\n",
                             false, &len),
                     H1_CLOSE);
    assert_int_equal(framing("HTTP/1.1 200 OK\r\n\r\n", false, &len), H1_CLOSE);
    /* the same length twice (or as a list) is one length */
    assert_int_equal(framing("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\n"
                             "Content-Length: 7\r\n\r\n",
                             false, &len),
                     H1_SIZED);
    assert_int_equal(len, 7);
    /* differing or malformed lengths are an error (a smuggling vector) */
    enum h1_framing f;
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 7, 8\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
        NULL};
    for (int i = 0; bad[i]; i++) {
        assert_true(parse(bad[i]) > 0);
        assert_int_equal(h1_framing(&H, false, &f, &len), -1);
    }
}

static void test_keep_alive(void **state)
{
    (void)state;
    assert_true(parse("HTTP/1.1 200 OK\r\n\r\n") > 0);
    assert_true(h1_keep_alive(&H));
    assert_true(parse("HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n") > 0);
    assert_false(h1_keep_alive(&H));
    assert_true(parse("HTTP/1.1 200 OK\r\nConnection: te, close\r\n\r\n") > 0);
    assert_false(h1_keep_alive(&H));
    assert_true(parse("HTTP/1.0 200 OK\r\n\r\n") > 0);
    assert_false(h1_keep_alive(&H));
    assert_true(parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n") > 0);
    assert_true(h1_keep_alive(&H));
    assert_true(parse("HTTP/1.1 200 OK\r\nConnection: closed\r\n\r\n") > 0);
    assert_true(h1_keep_alive(&H)); /* a token, not a prefix */
}

static struct h1_req Q;

static int parse_req(const char *s)
{
    return h1_parse_request(s, strlen(s), &Q);
}

static bool slice_is(const char *p, size_t n, const char *s)
{
    return n == strlen(s) && !memcmp(p, s, n);
}

static void test_request(void **state)
{
    (void)state;
    static const char ok[] = "POST /v1/chat?x=1 HTTP/1.1\r\nHost: a\r\n"
                             "Content-Length: 2\r\nX-E:\r\n\r\n{}";
    assert_int_equal(parse_req(ok), (int)strlen(ok) - 2);
    assert_true(slice_is(Q.method, Q.method_len, "POST"));
    assert_true(slice_is(Q.target, Q.target_len, "/v1/chat?x=1"));
    assert_int_equal(Q.minor, 1);
    assert_int_equal(Q.nheaders, 3);
    assert_true(h1_name_is(&Q.headers[1], "content-length"));
    assert_int_equal(Q.headers[2].value_len, 0);
    /* every strict prefix of the head is "need more" */
    for (size_t n = 0; n < strlen(ok) - 2; n++)
        assert_int_equal(h1_parse_request(ok, n, &Q), -2);
    /* empty lines before the request line are skipped (RFC 9112 2.2) */
    assert_int_equal(parse_req("\r\n\r\nGET / HTTP/1.0\n\n"), 20);
    assert_int_equal(Q.minor, 0);
    assert_true(slice_is(Q.target, Q.target_len, "/"));
    static const char *const bad[] = {
        "GET /\r\n\r\n",                        /* HTTP/0.9 */
        "GET / HTTP/2.0\r\n\r\n",               /* not 1.x */
        "GET  / HTTP/1.1\r\n\r\n",              /* two spaces */
        "GET / x HTTP/1.1\r\n\r\n",             /* space in the target */
        "GET /\x01 HTTP/1.1\r\n\r\n",           /* control in the target */
        "G(T / HTTP/1.1\r\n\r\n",               /* method not a token */
        " GET / HTTP/1.1\r\n\r\n",              /* leading space */
        "GET / HTTP/1.1 \r\n\r\n",              /* trailing space */
        "GET / HTTP/1.1\r\nA b: c\r\n\r\n",     /* space in a name */
        "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", /* obs-fold */
        "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",    /* bare CR */
        "\rGET / HTTP/1.1\r\n\r\n",             /* CR alone before */
        NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(parse_req(bad[i]), -1);
}

static void test_request_limits(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    buf_adds(&b, "GET / HTTP/1.1\r\n");
    for (int i = 0; i <= H1_MAX_HEADERS; i++)
        buf_printf(&b, "H%d: v\r\n", i);
    buf_adds(&b, "\r\n");
    assert_int_equal(h1_parse_request(b.data, b.len, &Q), -3);
    buf_reset(&b);
    buf_adds(&b, "GET / HTTP/1.1\r\nBig: ");
    while (b.len < H1_MAX_HEAD + 10)
        buf_addch(&b, 'x');
    assert_int_equal(h1_parse_request(b.data, b.len, &Q), -3);
    /* under the limit and unfinished: more */
    assert_int_equal(h1_parse_request(b.data, 1000, &Q), -2);
    buf_release(&b);
}

static void test_request_framing(void **state)
{
    (void)state;
    enum h1_framing f;
    uint64_t len;
    assert_true(parse_req("GET / HTTP/1.1\r\n\r\n") > 0);
    assert_int_equal(h1_req_framing(&Q, &f, &len), 0);
    assert_int_equal(f, H1_NONE);
    assert_true(parse_req("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n") > 0);
    assert_int_equal(h1_req_framing(&Q, &f, &len), 0);
    assert_int_equal(f, H1_SIZED);
    assert_int_equal(len, 12);
    assert_true(parse_req("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_int_equal(h1_req_framing(&Q, &f, &len), 0);
    assert_int_equal(f, H1_NONE);
    assert_true(
        parse_req(
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n") > 0);
    assert_int_equal(h1_req_framing(&Q, &f, &len), 0);
    assert_int_equal(f, H1_CHUNKED);
    static const char *const bad[] = {
        "POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 3\r\n\r\n",
        NULL};
    for (int i = 0; bad[i]; i++) {
        assert_true(parse_req(bad[i]) > 0);
        assert_int_equal(h1_req_framing(&Q, &f, &len), -1);
    }
    /* keep-alive: 1.1 unless close, 1.0 only when asked */
    assert_true(parse_req("GET / HTTP/1.1\r\n\r\n") > 0);
    assert_true(h1_req_keep_alive(&Q));
    assert_true(parse_req("GET / HTTP/1.1\r\nConnection: close\r\n\r\n") > 0);
    assert_false(h1_req_keep_alive(&Q));
    assert_true(parse_req("GET / HTTP/1.0\r\n\r\n") > 0);
    assert_false(h1_req_keep_alive(&Q));
    assert_true(parse_req("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n") >
                0);
    assert_true(h1_req_keep_alive(&Q));
}

/* Decodes s fed in pieces of `step` bytes; returns the verdict (2 done,
 * 0 more needed, -1 error), the data in out, *rest the bytes after the
 * body. */
static int dechunk(const char *s, size_t n, size_t step, struct buf *out,
                   size_t *rest)
{
    struct h1_chunked c;
    h1_chunked_init(&c);
    size_t pos = 0;
    while (pos < n) {
        size_t lim = n - pos < step ? n - pos : step;
        size_t off = 0;
        while (off < lim) {
            size_t used, doff, dl;
            int rc = h1_chunked_feed(&c, s + pos + off, lim - off, &used, &doff,
                                     &dl);
            if (rc < 0)
                return -1;
            if (rc == 1)
                buf_add(out, s + pos + off + doff, dl);
            off += used;
            if (rc == 2) {
                *rest = n - pos - off;
                return 2;
            }
            if (rc == 0)
                break;
        }
        pos += lim;
    }
    *rest = 0;
    return 0;
}

static void test_chunked(void **state)
{
    (void)state;
    static const char body[] = "5;name=v\r\nhello\r\nA\r\n, world!!\r\r\n"
                               "1\nX\n0\r\nTrailer: t\r\nMore: u\r\n\r\nNEXT";
    for (size_t step = 1; step <= sizeof(body); step++) {
        struct buf out = BUF_INIT;
        size_t rest;
        assert_int_equal(dechunk(body, sizeof(body) - 1, step, &out, &rest), 2);
        assert_int_equal(out.len, 16);
        assert_memory_equal(out.data, "hello, world!!\rX", 16);
        assert_int_equal(rest, 4); /* "NEXT" is not the body's */
        buf_release(&out);
    }
    static const char *const bad[] = {
        "x\r\n",                 /* not hex */
        "\r\n",                  /* no size */
        "3\r\nabcX\r\n",         /* no CRLF after the data */
        "11111111111111111\r\n", /* 17 hex digits */
        "3 \rabc",               /* CR without LF */
        NULL};
    for (int i = 0; bad[i]; i++) {
        struct buf out = BUF_INIT;
        size_t rest;
        assert_int_equal(dechunk(bad[i], strlen(bad[i]), 64, &out, &rest), -1);
        buf_release(&out);
    }
    struct buf out = BUF_INIT;
    size_t rest;
    /* the last chunk without the end of the trailer section: more needed */
    assert_int_equal(dechunk("0\r\nT: x\r\n", 9, 64, &out, &rest), 0);
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_head_limits),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_request_limits),
        cmocka_unit_test(test_request_framing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
