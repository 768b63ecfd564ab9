/*
 * Tests for wire/reply's reply_text: the recorder writes a stream's reply
 * column straight from the accumulator instead of building the reply object
 * and dumping it, so the text must be, byte for byte, what the column held
 * before: jdump of reply_finish with the loop's "max_gap_ms" set in place,
 * and "resp_truncated" / "resp_undecodable" added at the end. Checked on the
 * opencode fixture stream (reasoning and a tool call) and on crafted streams
 * (reasoning under either name, usage, errors, bad chunks, /v1/completions
 * text, escapes, no [DONE], nothing at all).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/fixture.h"
#include "util/rec.h"
#include "util/sse_streams.h"
#include "wire/jdump.h"
#include "wire/reply.h"
#include "wire/sse.h"

static int feed(const char *event, const char *data, size_t len, void *ud)
{
    (void)event;
    reply_chunk(ud, data, len, 0);
    return 0;
}

/* The old column text: the object, max_gap_ms replaced, flags added */
static char *old_text(const struct reply_acc *a, double gap, int flags)
{
    json_t *r = reply_finish(a);
    json_object_set_new(r, "max_gap_ms", json_real(gap));
    if (flags & 1)
        json_object_set_new(r, "resp_truncated", json_true());
    if (flags & 2)
        json_object_set_new(r, "resp_undecodable", json_true());
    char *s = jdump_str(r, false, NULL);
    json_decref(r);
    return s;
}

/* The new one, as store_batch writes it (reply_flag in proxy.c) */
static char *new_text(struct reply_acc *a, double gap, int flags)
{
    struct buf t = BUF_INIT;
    a->max_gap_ms = gap;
    assert_int_equal(reply_finish_text(a, &t), 0);
    if (flags & 1) {
        t.len--;
        buf_adds(&t, ",\"resp_truncated\":true}");
    }
    if (flags & 2) {
        t.len--;
        buf_adds(&t, ",\"resp_undecodable\":true}");
    }
    return buf_detach(&t, NULL);
}

static void check_stream(const char *sse, size_t len)
{
    static const double gaps[] = {0, 12.5, 1e-7, 3.0e15, 1234.000001};
    for (size_t g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++) {
        for (int flags = 0; flags < 4; flags++) {
            struct sse_parser p;
            struct reply_acc a;
            sse_init(&p, 0);
            reply_init(&a);
            sse_feed(&p, sse, len, feed, &a);
            char *want = old_text(&a, gaps[g], flags);
            char *got = new_text(&a, gaps[g], flags);
            assert_non_null(want);
            if (strcmp(got, want))
                fail_msg("stream %.60s...:\n got  %s\n want %s", sse, got,
                         want);
            free(want);
            free(got);
            reply_release(&a);
            sse_release(&p);
        }
    }
}

static void test_fixture_stream(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    fixture_read("mock-sse-reply-reasoning-toolcall.txt", &b);
    check_stream(b.data, b.len);
    buf_release(&b);
}

static void test_crafted_streams(void **state)
{
    (void)state;
    for (size_t i = 0; i < SSE_STREAMS_N; i++)
        check_stream(sse_streams[i], strlen(sse_streams[i]));
}

/* What the recorder writes for a stream (reply_finish_text, and the
 * object's jdump), read by a parser and reply fresh from init */
static void read_fresh(const char *sse, char **text, char **obj)
{
    struct sse_parser p;
    struct reply_acc a;
    sse_init(&p, 0);
    reply_init(&a);
    sse_feed(&p, sse, strlen(sse), feed, &a);
    *text = new_text(&a, 1.5, 0);
    json_t *r = reply_finish(&a);
    *obj = jdump_str(r, true, NULL);
    json_decref(r);
    reply_release(&a);
    sse_release(&p);
}

/* store_batch keeps one parser and reply from stream to stream
 * (sse_reset, reply_reset): after any stream, even one cut inside a line
 * or an event, the next reads exactly as with a fresh pair; keep 0 takes
 * the path that gives the buffers back. */
static void test_reset_reads_like_fresh(void **state)
{
    (void)state;
    size_t n = SSE_STREAMS_N;
    for (size_t keep = 0; keep <= 65536; keep += 65536) {
        struct sse_parser p;
        struct reply_acc a;
        sse_init(&p, 0);
        reply_init(&a);
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < n; j++) {
                size_t li = strlen(sse_streams[i]);
                /* the first stream cut at every third byte, and whole */
                for (size_t cut = 0; cut <= li;
                     cut = cut + 3 > li && cut < li ? li : cut + 3) {
                    sse_reset(&p, keep);
                    reply_reset(&a, keep);
                    sse_feed(&p, sse_streams[i], cut, feed, &a);
                    sse_reset(&p, keep);
                    reply_reset(&a, keep);
                    sse_feed(&p, sse_streams[j], strlen(sse_streams[j]), feed,
                             &a);
                    char *want_text, *want_obj;
                    read_fresh(sse_streams[j], &want_text, &want_obj);
                    char *got_text = new_text(&a, 1.5, 0);
                    json_t *r = reply_finish(&a);
                    char *got_obj = jdump_str(r, true, NULL);
                    json_decref(r);
                    if (strcmp(got_text, want_text) ||
                        strcmp(got_obj, want_obj))
                        fail_msg("after stream %zu (cut %zu), stream %zu:\n"
                                 " got  %s\n want %s",
                                 i, cut, j, got_text, want_text);
                    free(want_text);
                    free(want_obj);
                    free(got_text);
                    free(got_obj);
                }
            }
        }
        reply_release(&a);
        sse_release(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_stream),
        cmocka_unit_test(test_crafted_streams),
        cmocka_unit_test(test_reset_reads_like_fresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
