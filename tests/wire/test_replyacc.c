/*
 * Tests for wire/reply: the answer reassembled from a real opencode-era
 * reassembled from a real opencode-era SSE reply
 * (tests/fixtures/opencode-1.18.33/ mock-sse-reply-reasoning-toolcall.txt),
 * parallel tool calls merged by index, the "reasoning" field variant, errors in
 * a stream, gaps, and non-streamed JSON bodies.
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
#include "wire/jdump.h"
#include "wire/reply.h"
#include "wire/sse.h"

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
    fixture_read("mock-sse-reply-reasoning-toolcall.txt", &b);
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

/* reply_chunk and its jansson reference leave the same reply, byte for
 * byte, on the fixture stream; every chunk of it is read in place. */
static int feed_both(const char *event, const char *data, size_t len, void *ud)
{
    struct reply_acc *a = ud;
    (void)event;
    reply_chunk(&a[0], data, len, 0);
    reply_chunk_jansson(&a[1], data, len, 0);
    return 0;
}

static char *reply_text(const struct reply_acc *a)
{
    json_t *r = reply_finish(a);
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}

/* Also: reply_take gives what reply_finish gives (a[0] is then only
 * released). */
static void assert_same_reply(struct reply_acc *a)
{
    char *fast = reply_text(&a[0]), *ref = reply_text(&a[1]);
    assert_string_equal(fast, ref);
    json_t *t = reply_take(&a[0]);
    char *taken = json_dumps(t, JSON_COMPACT);
    json_decref(t);
    assert_string_equal(taken, fast);
    free(taken);
    free(fast);
    free(ref);
}

static void test_in_place_matches_jansson_on_fixture(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    fixture_read("mock-sse-reply-reasoning-toolcall.txt", &b);
    struct sse_parser p;
    struct reply_acc a[2];
    sse_init(&p, 0);
    reply_init(&a[0]);
    reply_init(&a[1]);
    assert_int_equal(sse_feed(&p, b.data, b.len, feed_both, a), 0);
    assert_int_equal(a[0].chunks, 7); /* and [DONE] */
    assert_int_equal(a[0].scanned, a[0].chunks);
    assert_int_equal(a[1].scanned, 0);
    assert_same_reply(a);
    reply_release(&a[0]);
    reply_release(&a[1]);
    sse_release(&p);
    buf_release(&b);
}

/* Chunks outside the common shape, each with whether the scanner reads it
 * itself (1) or hands it to jansson (0). */
static const struct {
    const char *data;
    int scanned;
} odd_chunks[] = {
    {"{\"choices\":[{\"delta\":{\"content\":\"a\\u0000b\"}}]}", 0},
    {"{\"choices\":[{\"delta\":{\"content\":\"\\ud800x\"}}]}", 0},
    {"{\"choices\":[{\"delta\":{\"content\":\"\\ud83d\\ude00\"}}]}", 1},
    {"{\"choices\":[{\"delta\":{\"content\":\"x\",\"content\":\"y\"}}],"
     "\"choices\":[{\"delta\":{\"content\":\"z\"}}]}",
     1},
    {"{\"choices\":[{\"delta\":{\"reasoning_content\":null,"
     "\"reasoning\":\"r\"}}]}",
     1},
    {"{\"choices\":[{\"delta\":{\"content\":1}}],\"x\":1.5E3}", 0},
    {"{\"n\":1234567890123456789012,\"choices\":[]}", 0},
    {"{\"\\u0063hoices\":[{\"delta\":{\"content\":\"k\"}}]}", 0},
    {"{\"choices\":[{\"delta\":{\"content\":\"\xc0\xaf\"}}]}", 0},
    {"{\"choices\":[{\"delta\":{\"content\":\"\xed\xa0\x80\"}}]}", 0},
    {"{\"choices\":[{\"delta\":{\"content\":\"\x01\"}}]}", 0},
    {"{\"choices\":[]} x", 0},
    {" {\"choices\" : [ {\"text\" : \"t\", \"finish_reason\":\"s\\u0074op\"} ] "
     "}\r\n",
     1},
    {"{\"usage\":{\"prompt_tokens\":1},\"usage\":[1],\"error\":null}", 1},
    {"{\"error\":{\"message\":\"boom\"}}", 1},
    {"[1]", 0},
    {"", 0},
};

static void test_in_place_matches_jansson_on_odd_chunks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(odd_chunks) / sizeof(odd_chunks[0]); i++) {
        struct reply_acc a[2];
        reply_init(&a[0]);
        reply_init(&a[1]);
        const char *d = odd_chunks[i].data;
        reply_chunk(&a[0], d, strlen(d), 1);
        reply_chunk_jansson(&a[1], d, strlen(d), 1);
        if (a[0].scanned != odd_chunks[i].scanned)
            fail_msg("chunk %zu: scanned %ld, want %d", i, a[0].scanned,
                     odd_chunks[i].scanned);
        assert_int_equal(a[0].chunks, a[1].chunks);
        assert_int_equal(a[0].bad, a[1].bad);
        assert_same_reply(a);
        reply_release(&a[0]);
        reply_release(&a[1]);
    }
}

/* A stream's chunks differ from the one before only in the token: those
 * are read from the previous chunk's spans (reused), and the reply is the
 * reference's whatever changes between two chunks (a longer or shorter
 * token, an escape, a control character, a change outside the string, the
 * field switching from reasoning to content, usage or finish_reason
 * arriving, a chunk jansson reads). Each row: the chunk, whether it is
 * reused. */
static const struct {
    const char *data;
    int reused;
} seq_chunks[] = {
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
     "\"assistant\",\"reasoning_content\":\"\"},\"finish_reason\":null}]}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
     "\"assistant\",\"reasoning_content\":\"Think\"},\"finish_reason\":null}]}",
     1},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
     "\"assistant\",\"reasoning_content\":\" "
     "\\\"a\\u00e9\\n\"},\"finish_reason\":null}]}",
     1},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
     "\"assistant\",\"reasoning_content\":\"\x01\"},\"finish_reason\":null}]}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The\"},"
     "\"finish_reason\":null}]}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" "
     "value\"},\"finish_reason\":null}]}",
     1},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},"
     "\"finish_reason\":null}]}",
     1},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\","
     "\"b\":\"c\"},\"finish_reason\":null}]}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},"
     "\"finish_reason\":null}],\"x\":1}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":"
     "\"\\u0000\"},\"finish_reason\":null}],\"x\":1}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"},"
     "\"finish_reason\":null}],\"x\":1}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"z\"},"
     "\"finish_reason\":null}],\"x\":1}",
     1},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"},"
     "\"finish_reason\":\"stop\"}],\"x\":1}",
     0},
    {"{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"?\"},"
     "\"finish_reason\":\"stop\"}],\"x\":1}",
     0},
    {"{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3}}", 0},
    {"{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4}}", 0},
};

static void test_reused_spans_match_jansson(void **state)
{
    (void)state;
    struct reply_acc a[2];
    size_t n = sizeof(seq_chunks) / sizeof(seq_chunks[0]);
    reply_init(&a[0]);
    reply_init(&a[1]);
    for (size_t i = 0; i < n; i++) {
        const char *d = seq_chunks[i].data;
        long before = a[0].reused;
        reply_chunk(&a[0], d, strlen(d), (double)i);
        reply_chunk_jansson(&a[1], d, strlen(d), (double)i);
        if (a[0].reused - before != seq_chunks[i].reused)
            fail_msg("chunk %zu: reused %ld, want %d", i, a[0].reused - before,
                     seq_chunks[i].reused);
        char *fast = reply_text(&a[0]), *ref = reply_text(&a[1]);
        if (strcmp(fast, ref))
            fail_msg("after chunk %zu:\n fast %s\n ref  %s", i, fast, ref);
        free(fast);
        free(ref);
    }
    assert_int_equal(a[0].chunks, a[1].chunks);
    assert_int_equal(a[0].bad, a[1].bad);
    assert_same_reply(a);
    reply_release(&a[0]);
    reply_release(&a[1]);
}

static void test_in_place_body_matches_jansson(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
        "\"assistant\",\"content\":\"caf\\u00e9 \xc3\xa9\"},"
        "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3}}",
        "{\"choices\":[{\"message\":{\"content\":null,\"reasoning\":\"r\","
        "\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\"}}]}}],"
        "\"error\":\"e\"}",
        "{\"choices\":[{\"text\":\"4\",\"finish_reason\":\"stop\"}]}",
        "{\"choices\":{}}",
        "{\"choices\":[1e3]}",
        "[1]",
        "<html>",
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        json_t *f = reply_from_body(bodies[i], strlen(bodies[i]));
        json_t *r = reply_from_body_jansson(bodies[i], strlen(bodies[i]));
        char *fs = f ? json_dumps(f, JSON_COMPACT) : NULL;
        char *rs = r ? json_dumps(r, JSON_COMPACT) : NULL;
        if ((fs == NULL) != (rs == NULL) || (fs && strcmp(fs, rs)))
            fail_msg("body %zu: %s vs %s", i, fs ? fs : "NULL",
                     rs ? rs : "NULL");
        free(fs);
        free(rs);
        json_decref(f);
        json_decref(r);
    }
}

/* reply_text_from_body: the text jdump writes for the jansson reference's
 * reply object, byte for byte, where it takes the body (want 0), and a
 * refusal where the object is needed or the copy could differ (want -1). */
static void test_reply_text_matches_jansson(void **state)
{
    (void)state;
    static const struct {
        const char *body;
        int want;
    } cases[] = {
        /* the sim's body */
        {"{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,"
         "\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":"
         "\"assistant\",\"content\":\"The value of X is 5.\"},\"logprobs\":"
         "null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":19,"
         "\"completion_tokens\":8,\"total_tokens\":27}}",
         0},
        /* whitespace, escapes, UTF-8, nested usage, reasoning */
        {" { \"choices\" : [ { \"message\" : { \"content\" : \"a\\n\\\"b\\\" "
         "caf\\u00e9 \xc3\xa9 \\/ \\t\\u001f\" , \"reasoning_content\" : "
         "\"think\\\\\" } , \"finish_reason\" : \"length\" } ] , \"usage\" : "
         "{ \"prompt_tokens\" : 0 , \"details\" : { \"cached\" : -12 , "
         "\"x\" : [ 1 , true , null , \"s\" ] } , \"f\" : false } } ",
         0},
        {"{\"choices\":[{\"message\":{\"content\":null,\"reasoning\":\"r\"}}]}",
         0},
        {"{\"choices\":[{\"message\":{\"content\":\"c\",\"reasoning\":\"r\","
         "\"reasoning_content\":\"rc\",\"tool_calls\":null}}],\"error\":null,"
         "\"usage\":null}",
         0},
        {"{\"choices\":[{\"text\":\"4\",\"finish_reason\":\"stop\"}]}", 0},
        {"{\"choices\":[{\"message\":\"no\",\"text\":\"t\",\"finish_reason\":"
         "null}]}",
         0},
        {"{\"choices\":[{\"message\":{\"content\":5},\"finish_reason\":7}]}",
         0},
        {"{\"choices\":[]}", 0},
        {"{\"choices\":{}}", 0},
        {"{}", 0},
        {"{\"usage\":{}}", 0},
        {"{\"usage\":{\"a\":[]}}", 0},
        {"{\"usage\":[1]}", 0},
        {"{\"choices\":[{\"message\":{\"content\":\"\",\"reasoning_content\":"
         "\"\"},\"finish_reason\":\"\"}]}",
         0},
        /* left to the object path */
        {"{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{\"id\":"
         "\"c\",\"function\":{\"name\":\"f\"}}]}}]}",
         -1},
        {"{\"choices\":[{\"message\":{\"content\":\"c\"}}],\"error\":\"e\"}",
         -1},
        {"{\"choices\":[],\"usage\":{\"cost\":0.5}}", -1},
        {"{\"choices\":[],\"usage\":{\"n\":-0}}", -1},
        {"{\"choices\":[],\"usage\":{\"n\":1,\"n\":2}}", -1},
        {"{\"choices\":[],\"usage\":{\"\\u006e\":1}}", -1},
        {"{\"choices\":[],\"usage\":{\"s\":\"a\\nb\"}}", -1},
        {"{\"choices\":[1e3]}", -1},
        {"[1]", -1},
        {"<html>", -1},
        {"", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *b = cases[i].body;
        struct buf t;
        buf_init(&t, 0);
        int rc = reply_text_from_body(b, strlen(b), &t);
        if (rc != cases[i].want)
            fail_msg("body %zu: %d, want %d", i, rc, cases[i].want);
        if (!rc) {
            json_t *r = reply_from_body_jansson(b, strlen(b));
            char *ref = r ? jdump_str(r, false, NULL) : NULL;
            char *js = r ? json_dumps(r, JSON_COMPACT) : NULL;
            if (!ref || strcmp(t.data, ref) || strcmp(ref, js))
                fail_msg("body %zu:\n text %s\n ref  %s", i, t.data,
                         ref ? ref : "NULL");
            free(ref);
            free(js);
            json_decref(r);
        }
        buf_release(&t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_reasoning_and_tool_call),
        cmocka_unit_test(test_parallel_calls_reasoning_field_gaps),
        cmocka_unit_test(test_non_streamed_body),
        cmocka_unit_test(test_in_place_matches_jansson_on_fixture),
        cmocka_unit_test(test_in_place_matches_jansson_on_odd_chunks),
        cmocka_unit_test(test_in_place_body_matches_jansson),
        cmocka_unit_test(test_reused_spans_match_jansson),
        cmocka_unit_test(test_reply_text_matches_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
