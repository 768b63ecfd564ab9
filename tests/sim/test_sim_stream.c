/*
 * End-to-end: server-sent events from `fidelity sim`. Framing as the HTML
 * standard's SSE grammar and OpenAI's streaming use it: every event is one
 * `data: ` line followed by a blank line, the stream ends with
 * `data: [DONE]`, chunks are chat.completion.chunk / text_completion
 * objects whose pieces add up to the non-streamed answer, and
 * stream_options.include_usage adds a final usage chunk with empty
 * choices. Also the stream faults --cut-stream-after, --token-interval-ms
 * and --latency-ms (lower bounds only: nothing here is a speed target).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

#define QUESTION                                                               \
    "The access code for the blue door is 4812. What is the access code for "  \
    "the blue door?"

/* Splits an SSE body into its data payloads (a JSON array of strings),
 * asserting the framing: events separated by one blank line, each line of
 * an event starting with "data: ", one line per event. */
static json_t *sse_events(const char *body, size_t len)
{
    json_t *out = json_array();
    size_t i = 0;
    while (i < len) {
        const char *end = strstr(body + i, "\n\n");
        if (!end)
            fail_msg("SSE body does not end with a blank line: '%.100s'",
                     body + i);
        size_t elen = (size_t)(end - (body + i));
        if (elen < 6 || memcmp(body + i, "data: ", 6))
            fail_msg("SSE event does not start with 'data: ': '%.100s'",
                     body + i);
        if (memchr(body + i, '\n', elen))
            fail_msg("SSE event with more than one line: '%.100s'", body + i);
        json_array_append_new(out, json_stringn(body + i + 6, elen - 6));
        i += elen + 2;
    }
    return out;
}

/* Streams body (stolen) to path; returns the data payloads with [DONE]
 * checked and removed, each parsed as JSON. */
static json_t *stream(struct simt *t, const struct proc *p, const char *path,
                      json_t *body)
{
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct http_resp r;
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "POST", path, text, strlen(text),
                              "application/json", &r),
                     0);
    free(text);
    assert_int_equal(r.status, 200);
    if (!strstr(buf_str(&r.headers), "text/event-stream"))
        fail_msg("stream answered without text/event-stream: %s",
                 buf_str(&r.headers));
    json_t *ev = sse_events(buf_str(&r.body), r.body.len);
    size_t n = json_array_size(ev);
    assert_true(n >= 2);
    assert_string_equal(json_string_value(json_array_get(ev, n - 1)), "[DONE]");
    json_t *chunks = json_array();
    for (size_t i = 0; i + 1 < n; i++) {
        json_error_t jerr;
        json_t *c =
            json_loads(json_string_value(json_array_get(ev, i)), 0, &jerr);
        if (!c)
            fail_msg("SSE chunk %zu is not JSON: %s", i, jerr.text);
        /* the sim writes token chunks without jansson (sim/chat.c,
         * stream_tokens): each must be the text jansson writes for it */
        char *again = json_dumps(c, JSON_COMPACT);
        assert_string_equal(again, json_string_value(json_array_get(ev, i)));
        free(again);
        json_array_append_new(chunks, c);
    }
    json_decref(ev);
    http_resp_release(&r);
    return chunks;
}

/* The keys of o in their order, comma-separated, into out */
static void keys_of(json_t *o, char *out, size_t n)
{
    const char *k;
    json_t *v;
    out[0] = '\0';
    json_object_foreach(o, k, v)
    {
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", l ? "," : "", k);
    }
}

static void test_chat_stream_framing_and_content(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    char *plain = simt_ask(t, p, simt_chat1(QUESTION));
    json_t *chunks = stream(t, p, "/v1/chat/completions", simt_chat1(QUESTION));
    struct buf text = BUF_INIT;
    const char *id = NULL;
    int finishes = 0;
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c)
    {
        assert_string_equal(json_string_value(json_object_get(c, "object")),
                            "chat.completion.chunk");
        const char *cid = json_string_value(json_object_get(c, "id"));
        assert_non_null(cid);
        if (!id)
            id = cid;
        assert_string_equal(cid, id);
        json_t *u = json_object_get(c, "usage");
        assert_true(u == NULL || json_is_null(u));
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        assert_true(json_is_object(delta));
        /* the same key order in every chunk, whichever way it was written */
        char keys[256];
        keys_of(c, keys, sizeof(keys));
        assert_string_equal(keys, "id,object,created,model,choices");
        keys_of(ch, keys, sizeof(keys));
        assert_string_equal(keys, "index,delta,logprobs,finish_reason");
        if (i == 0)
            assert_string_equal(
                json_string_value(json_object_get(delta, "role")), "assistant");
        const char *piece =
            json_string_value(json_object_get(delta, "content"));
        if (piece)
            buf_adds(&text, piece);
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            finishes++;
            assert_string_equal(json_string_value(fr), "stop");
            assert_int_equal(i, json_array_size(chunks) - 1);
        } else {
            assert_true(fr == NULL || json_is_null(fr));
        }
    }
    assert_int_equal(finishes, 1);
    assert_string_equal(buf_str(&text), plain);
    assert_true(json_array_size(chunks) >= 3);
    buf_release(&text);
    json_decref(chunks);
    free(plain);
}

/* Streams the chat messages m (stolen) and asserts that the content
 * pieces of the chunks add up to plain, the non-streamed answer. */
static void assert_streams_as(struct simt *t, const struct proc *p, json_t *m,
                              const char *plain)
{
    json_t *chunks = stream(t, p, "/v1/chat/completions", simt_chat(m));
    struct buf text = BUF_INIT;
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c)
    {
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        const char *piece = json_string_value(
            json_object_get(json_object_get(ch, "delta"), "content"));
        if (piece)
            buf_adds(&text, piece);
    }
    assert_string_equal(buf_str(&text), plain);
    buf_release(&text);
    json_decref(chunks);
}

/* One chunk per token; a UTF-8 character split across tokens waits for
 * the next chunk, so every chunk is valid JSON and the text adds up. */
static void test_chat_stream_non_ascii(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *m = json_pack("[o,o,o]",
                          simt_msg("user", "Plan a trip to Zürich, 東京 and "
                                           "Ελλάδα 🙂."),
                          simt_msg("assistant", "Sure."),
                          simt_msg("user", "What did my first message ask "
                                           "for?"));
    char *plain = simt_ask(t, p, simt_chat(json_deep_copy(m)));
    assert_non_null(strstr(plain, "東京"));
    assert_streams_as(t, p, m, plain);
    free(plain);
}

/* Text with backslashes, control characters, DEL and U+0085 streams as
 * the non-streamed answer has it, each chunk escaped as jansson escapes it
 * (checked in stream()). */
static void test_chat_stream_escapes(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *m =
        json_pack("[o,o,o]",
                  simt_msg("user", "Say \"a\\b\"\ttab\nline\r\x01\x1f\x7f "
                                   "</script> \xc2\x85 \\u0041 \\\" end."),
                  simt_msg("assistant", "Sure."),
                  simt_msg("user", "What did my first message ask for?"));
    char *plain = simt_ask(t, p, simt_chat(json_deep_copy(m)));
    /* the sim's tokenizer keeps these (it drops some others) */
    assert_non_null(strstr(plain, "a\\b \ttab"));
    assert_non_null(strstr(plain, "\r\x01\x1f\x7f </script> \xc2\x85 "));
    assert_streams_as(t, p, m, plain);
    free(plain);
}

static void test_chat_stream_include_usage(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r = simt_ok(t, p, "/v1/chat/completions", simt_chat1(QUESTION));
    json_t *body = simt_chat1(QUESTION);
    json_object_set_new(body, "stream_options",
                        json_pack("{s:b}", "include_usage", 1));
    json_t *chunks = stream(t, p, "/v1/chat/completions", body);
    size_t n = json_array_size(chunks);
    json_t *last = json_array_get(chunks, n - 1);
    assert_int_equal(json_array_size(json_object_get(last, "choices")), 0);
    json_t *u = json_object_get(last, "usage");
    assert_true(json_is_object(u));
    /* the streamed request came second: its prompt was cached (all but
     * the last partial block), the first one's was not */
    json_t *ru = json_object_get(r, "usage");
    json_t *cu = json_object_get(json_object_get(u, "prompt_tokens_details"),
                                 "cached_tokens");
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(ru, "prompt_tokens_details"), "cached_tokens")),
        0);
    assert_true(json_integer_value(cu) ==
                (json_integer_value(json_object_get(u, "prompt_tokens")) - 1) /
                    16 * 16);
    json_object_del(u, "prompt_tokens_details");
    json_object_del(ru, "prompt_tokens_details");
    assert_true(json_equal(u, ru));
    /* only the last chunk carries usage */
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *ui = json_object_get(json_array_get(chunks, i), "usage");
        assert_true(ui == NULL || json_is_null(ui));
    }
    json_decref(chunks);
    json_decref(r);
}

static void test_chat_stream_logprobs_match_non_stream(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *b = simt_chat1(QUESTION);
    json_object_set_new(b, "logprobs", json_true());
    json_object_set_new(b, "top_logprobs", json_integer(2));
    json_t *want = simt_ok(t, p, "/v1/chat/completions", json_deep_copy(b));
    json_t *wantc = json_object_get(
        json_object_get(json_array_get(json_object_get(want, "choices"), 0),
                        "logprobs"),
        "content");
    assert_true(json_array_size(wantc) > 0);
    json_t *chunks = stream(t, p, "/v1/chat/completions", b);
    json_t *got = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(chunks, i, c)
    {
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        json_t *lc =
            json_object_get(json_object_get(ch, "logprobs"), "content");
        if (json_is_array(lc))
            json_array_extend(got, lc);
    }
    assert_true(json_equal(got, wantc));
    json_decref(got);
    json_decref(chunks);
    json_decref(want);
}

/* The sim streams only chat (docs/SIM.md lists streaming for chat only);
 * a streamed /v1/completions request is refused with a 400 naming
 * "stream", not answered with a body a client would misread. */
static void test_completions_stream_refused_clearly(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long st = 0;
    json_t *r =
        simt_postj(t, p, "/v1/completions",
                   json_pack("{s:s, s:s, s:i, s:b}", "model", "sim", "prompt",
                             "Rain fell", "max_tokens", 3, "stream", 1),
                   &st);
    assert_int_equal(st, 400);
    simt_assert_error(r, "stream");
    json_decref(r);
    simt_assert_alive(t, p);
}

static void test_cut_stream_after_bytes(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--cut-stream-after", "200", NULL);
    json_t *b = simt_chat1(QUESTION);
    json_object_set_new(b, "stream", json_true());
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    struct http_resp r;
    http_resp_init(&r);
    int ret = simt_raw(t, p, "POST", "/v1/chat/completions", text, strlen(text),
                       "application/json", &r);
    /* the transfer is incomplete: curl reports an error, the body has
     * exactly the first 200 bytes and no [DONE] */
    assert_int_not_equal(ret, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 200);
    assert_memory_equal(r.body.data, "data: ", 6);
    assert_null(strstr(buf_str(&r.body), "[DONE]"));
    http_resp_release(&r);
    free(text);
    /* a non-streamed answer is not cut, and the server keeps serving */
    char *plain = simt_ask(t, p, simt_chat1(QUESTION));
    assert_non_null(strstr(plain, "4812"));
    free(plain);
    simt_assert_alive(t, p);
}

static void test_token_interval_spaces_chunks(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--token-interval-ms", "50", NULL);
    json_t *b = simt_chat1(QUESTION);
    json_object_set_new(b, "stream", json_true());
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    struct http_resp r;
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "POST", "/v1/chat/completions", text,
                              strlen(text), "application/json", &r),
                     0);
    json_t *ev = sse_events(buf_str(&r.body), r.body.len);
    size_t n = json_array_size(ev);
    assert_true(n >= 4);
    /* a lower bound only: n-2 gaps of at least 50 ms between the first
     * content chunk and [DONE] */
    assert_true(r.t_total >= 0.05 * (double)(n - 3));
    json_decref(ev);
    http_resp_release(&r);
    free(text);
}

static void test_latency_delays_first_byte(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--latency-ms", "300", NULL);
    json_t *b = simt_chat1(QUESTION);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    struct http_resp r;
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "POST", "/v1/chat/completions", text,
                              strlen(text), "application/json", &r),
                     0);
    assert_int_equal(r.status, 200);
    assert_true(r.t_first_byte >= 0.3);
    http_resp_release(&r);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_chat_stream_framing_and_content),
        T(test_chat_stream_non_ascii),
        T(test_chat_stream_escapes),
        T(test_chat_stream_include_usage),
        T(test_chat_stream_logprobs_match_non_stream),
        T(test_completions_stream_refused_clearly),
        T(test_cut_stream_after_bytes),
        T(test_token_interval_spaces_chunks),
        T(test_latency_delays_first_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
