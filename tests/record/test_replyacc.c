/*
 * Tests for record/reply: the answer reassembled from a real opencode-era
 * SSE reply (../shared/fixtures/opencode-1.18.33/
 * mock-sse-reply-reasoning-toolcall.txt), parallel tool calls merged by
 * index, the "reasoning" field variant, errors in a stream, gaps, and
 * non-streamed JSON bodies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "record/reply.h"
#include "record/sse.h"
#include "util/rec.h"

static int feed(const char *event, const char *data, size_t len, void *ud)
{
    (void)event;
    reply_chunk(ud, data, len, 0);
    return 0;
}

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void test_fixture_reasoning_and_tool_call(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    assert_int_equal(rec_read_file("../shared/fixtures/opencode-1.18.33/"
                                   "mock-sse-reply-reasoning-toolcall.txt",
                                   &b),
                     0);
    struct sse_parser p;
    struct reply_acc a;
    sse_init(&p, 0);
    reply_init(&a);
    assert_int_equal(sse_feed(&p, b.data, b.len, feed, &a), 0);
    json_t *r = reply_finish(&a);
    assert_non_null(
        strstr(str(r, "reasoning_content"), "SECRET-REASONING-TURN1-TOOLCALL"));
    assert_string_equal(str(r, "reasoning_field"), "reasoning_content");
    assert_string_equal(str(r, "content"), "");
    assert_string_equal(str(r, "finish_reason"), "tool_calls");
    assert_true(json_is_true(json_object_get(r, "done")));
    json_t *calls = json_object_get(r, "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    json_t *f = json_object_get(json_array_get(calls, 0), "function");
    assert_string_equal(str(f, "name"), "write");
    json_t *args = json_loads(str(f, "arguments"), 0, NULL);
    assert_non_null(args);
    assert_string_equal(str(args, "filePath"), "/home/user/proj/tictactoe.py");
    json_decref(args);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "usage"), "prompt_tokens")),
                     2685);
    json_decref(r);
    reply_release(&a);
    sse_release(&p);
    buf_release(&b);
}

static void chunk(struct reply_acc *a, const char *s, double t)
{
    reply_chunk(a, s, strlen(s), t);
}

static void test_parallel_calls_reasoning_field_gaps(void **state)
{
    (void)state;
    struct reply_acc a;
    reply_init(&a);
    chunk(&a,
          "{\"choices\":[{\"delta\":{\"reasoning\":\"hm\",\"tool_calls\":["
          "{\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"ls\","
          "\"arguments\":\"{\"}},{\"index\":0,\"id\":\"a\",\"function\":{"
          "\"name\":\"cat\",\"arguments\":\"[\"}}]}}]}",
          10);
    chunk(&a, "not json", 15);
    chunk(&a,
          "{\"choices\":[{\"delta\":{\"reasoning\":\"m\",\"tool_calls\":["
          "{\"index\":0,\"function\":{\"arguments\":\"1]\"}},{\"index\":1,"
          "\"function\":{\"arguments\":\"}\"}}]}}]}",
          60);
    chunk(&a, "{\"error\":{\"message\":\"overloaded\"}}", 70);
    json_t *r = reply_finish(&a);
    assert_string_equal(str(r, "reasoning_content"), "hmm");
    assert_string_equal(str(r, "reasoning_field"), "reasoning");
    assert_false(json_is_true(json_object_get(r, "done")));
    assert_int_equal(json_integer_value(json_object_get(r, "chunks")), 3);
    assert_int_equal(json_integer_value(json_object_get(r, "bad_chunks")), 1);
    assert_true(json_real_value(json_object_get(r, "max_gap_ms")) == 45.0);
    assert_string_equal(str(json_object_get(r, "error"), "message"),
                        "overloaded");
    json_t *calls = json_object_get(r, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(calls, i);
        const char *id = str(c, "id");
        const char *args = str(json_object_get(c, "function"), "arguments");
        if (!strcmp(id, "a"))
            assert_string_equal(args, "[1]");
        else
            assert_string_equal(args, "{}");
    }
    assert_string_equal(str(r, "content"), "");
    json_decref(r);
    reply_release(&a);
}

static void test_non_streamed_body(void **state)
{
    (void)state;
    static const char body[] =
        "{\"choices\":[{\"message\":{\"content\":\"hi\",\"reasoning_content\":"
        "\"why\",\"tool_calls\":[{\"id\":\"x\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{}\"}}]},\"finish_reason\":\"length\"}],\"usage\":{"
        "\"prompt_tokens\":5}}";
    json_t *r = reply_from_body(body, strlen(body));
    assert_string_equal(str(r, "content"), "hi");
    assert_string_equal(str(r, "reasoning_content"), "why");
    assert_string_equal(str(r, "finish_reason"), "length");
    assert_int_equal(json_array_size(json_object_get(r, "tool_calls")), 1);
    json_decref(r);
    assert_null(reply_from_body("[1]", 3));
    assert_null(reply_from_body("<html>", 6));
    /* /v1/completions */
    static const char comp[] = "{\"choices\":[{\"text\":\"4\",\"finish_reason\""
                               ":\"stop\"}]}";
    r = reply_from_body(comp, strlen(comp));
    assert_string_equal(str(r, "content"), "4");
    assert_true(json_is_null(json_object_get(r, "reasoning_content")));
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_reasoning_and_tool_call),
        cmocka_unit_test(test_parallel_calls_reasoning_field_gaps),
        cmocka_unit_test(test_non_streamed_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
