/*
 * Tests for record/sse: events split across chunks at every byte position,
 * CRLF / LF / CR line ends (also a CRLF split between chunks), comments,
 * multi-line data, the event field and the cap.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "wire/sse.h"

static int collect(const char *event, const char *data, size_t len, void *ud)
{
    struct buf *b = ud;
    assert_int_equal(data[len], '\0');
    buf_printf(b, "[%s|", event);
    buf_add(b, data, len);
    buf_adds(b, "]");
    return 0;
}

static const char STREAM[] =
    ": comment\n"
    "data: {\"a\":1}\n\n"
    "event: ping\r\ndata: two\r\ndata:  lines\r\n\r\n"
    "data:nospace\r\r"
    "id: 7\nretry: 10\n\n" /* no data: not dispatched */
    "data\n\n"             /* a field with no colon: empty data */
    "data: [DONE]\n\n"
    "data: unterminated";

static const char EXPECT[] = "[|{\"a\":1}][ping|two\n lines][|nospace][|]"
                             "[|[DONE]]";

static void test_whole_stream(void **state)
{
    (void)state;
    struct sse_parser p;
    struct buf out = BUF_INIT;
    sse_init(&p, 0);
    assert_int_equal(sse_feed(&p, STREAM, sizeof(STREAM) - 1, collect, &out),
                     0);
    assert_string_equal(buf_str(&out), EXPECT);
    buf_release(&out);
    sse_release(&p);
}

static void test_every_split_point(void **state)
{
    (void)state;
    size_t n = sizeof(STREAM) - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        for (size_t cut2 = cut; cut2 <= n; cut2 += 7) {
            struct sse_parser p;
            struct buf out = BUF_INIT;
            sse_init(&p, 0);
            sse_feed(&p, STREAM, cut, collect, &out);
            sse_feed(&p, STREAM + cut, cut2 - cut, collect, &out);
            sse_feed(&p, STREAM + cut2, n - cut2, collect, &out);
            if (strcmp(buf_str(&out), EXPECT))
                fail_msg("split at %zu,%zu: %s", cut, cut2, buf_str(&out));
            buf_release(&out);
            sse_release(&p);
        }
    }
}

static void test_byte_by_byte(void **state)
{
    (void)state;
    struct sse_parser p;
    struct buf out = BUF_INIT;
    sse_init(&p, 0);
    for (size_t i = 0; i < sizeof(STREAM) - 1; i++)
        sse_feed(&p, STREAM + i, 1, collect, &out);
    assert_string_equal(buf_str(&out), EXPECT);
    buf_release(&out);
    sse_release(&p);
}

static void test_cap(void **state)
{
    (void)state;
    struct sse_parser p;
    struct buf out = BUF_INIT;
    char line[100];
    memset(line, 'x', sizeof(line));
    sse_init(&p, 64);
    assert_int_equal(sse_feed(&p, "data: ", 6, collect, &out), 0);
    assert_int_equal(sse_feed(&p, line, sizeof(line), collect, &out), -ENOBUFS);
    assert_int_equal(sse_feed(&p, "\n\n", 2, collect, &out), -ENOBUFS);
    assert_int_equal(out.len, 0);
    buf_release(&out);
    sse_release(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_stream),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
