/*
 * End-to-end: the sim's tokenizer and chat template against the contract
 * (docs/SIM.md, "Tokenizer" and "Chat template"). The reference tokenizer
 * in tests/util/simtest.c is written from the document alone; the first
 * test pins it to the numbers the document states.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/simtest.h"

static const char *const samples[] = {
    "hello world",
    "The access code for the blue door is 4812.",
    "  two  spaces,\ttabs\tand\nnewlines\r\n",
    "naïve café, Zürich, Ελληνικά, 東京, emoji 🙂👍🏽",
    "<|user|>special tokens in text<|end|> and <think>thoughts</think>",
    "<|bogus|> <|bos <|tool_call|>{\"a\":1}",
    "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ",
    "",
    " ",
    "x",
    "\x01\x02 control bytes \x7f",
};

static void test_reference_matches_documented_numbers(void **state)
{
    (void)state;
    int32_t ids[16];
    assert_int_equal(SIMREF_VOCAB, 30037412);
    assert_int_equal(simref_tokenize("<|bos|>", 7, ids, 16), 1);
    assert_int_equal(ids[0], 0);
    assert_int_equal(simref_tokenize("</think>", 8, ids, 16), 1);
    assert_int_equal(ids[0], 7);
    /* single letter: 272 + index('a') = 272 + 36 */
    assert_int_equal(simref_tokenize("a", 1, ids, 16), 1);
    assert_int_equal(ids[0], 272 + 36);
    /* leading space sets s: + N */
    assert_int_equal(simref_tokenize(" a", 2, ids, 16), 1);
    assert_int_equal(ids[0], 272 + SIMREF_N + 36);
    /* two characters: off(2) = 62; "0a" = 0 + 36 * 62 */
    assert_int_equal(simref_tokenize("0a", 2, ids, 16), 1);
    assert_int_equal(ids[0], 272 + 62 + 36 * 62);
    /* runs split every 4 characters, the space goes with the first piece */
    assert_int_equal(simref_tokenize(" hello", 6, ids, 16), 2);
    assert_true(ids[0] >= 272 + SIMREF_N && ids[1] < 272 + SIMREF_N);
    /* a byte: 16 + byte; a space before punctuation is a byte too */
    assert_int_equal(simref_tokenize(" !", 2, ids, 16), 2);
    assert_int_equal(ids[0], 16 + ' ');
    assert_int_equal(ids[1], 16 + '!');
    assert_int_equal(simref_tokenize("\xff", 1, ids, 16), 1);
    assert_int_equal(ids[0], 16 + 255);
    /* the largest id: " zzzz" */
    assert_int_equal(simref_tokenize(" zzzz", 5, ids, 16), 1);
    assert_int_equal(ids[0], SIMREF_VOCAB - 1);
}

static json_t *tokenize(struct simt *t, const struct proc *p, const char *s)
{
    json_t *r =
        simt_ok(t, p, "/tokenize",
                json_pack("{s:s, s:b}", "prompt", s, "add_special_tokens", 0));
    json_t *toks = json_incref(json_object_get(r, "tokens"));
    assert_true(json_is_array(toks));
    json_decref(r);
    return toks;
}

static void test_tokenize_ids_follow_the_formula(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    for (size_t k = 0; k < sizeof(samples) / sizeof(*samples); k++) {
        int32_t want[256];
        size_t n = simref_tokenize(samples[k], strlen(samples[k]), want, 256);
        json_t *got = tokenize(t, p, samples[k]);
        if (json_array_size(got) != n)
            fail_msg("'%s': %zu tokens, the contract gives %zu", samples[k],
                     json_array_size(got), n);
        for (size_t i = 0; i < n; i++)
            if (json_integer_value(json_array_get(got, i)) != want[i])
                fail_msg("'%s': token %zu is %lld, the contract gives %d",
                         samples[k], i,
                         (long long)json_integer_value(json_array_get(got, i)),
                         want[i]);
        json_decref(got);
    }
}

static void test_round_trip_including_non_ascii_and_specials(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    for (size_t k = 0; k < sizeof(samples) / sizeof(*samples); k++) {
        json_t *toks = tokenize(t, p, samples[k]);
        json_t *d =
            simt_ok(t, p, "/detokenize", json_pack("{s:o}", "tokens", toks));
        const char *back = json_string_value(json_object_get(d, "prompt"));
        assert_non_null(back);
        assert_string_equal(back, samples[k]);
        json_decref(d);
    }
}

/* Random valid UTF-8 made of ASCII, 2-, 3- and 4-byte sequences and
 * special-token fragments. */
static char *random_text(uint32_t *x, size_t len)
{
    static const char *const parts[] = {
        "a",  "Z",     "9",  " ",  "  ",      "\n", "é",     "ß",
        "中", "🙂",  "<|", "|>", "<|end|>", "<",  "think", ">",
        ".",  " word", "\t", "\"", "\\",      "{}", "Ω",     "x1y2"};
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < len; i++) {
        *x ^= *x << 13;
        *x ^= *x >> 17;
        *x ^= *x << 5;
        buf_adds(&b, parts[*x % (sizeof(parts) / sizeof(*parts))]);
    }
    return buf_detach(&b, NULL);
}

static void test_round_trip_random_text(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    uint32_t x = 12345;
    for (int k = 0; k < 40; k++) {
        char *s = random_text(&x, 1 + (size_t)k * 7);
        json_t *toks = tokenize(t, p, s);
        assert_int_equal(json_array_size(toks), simref_count(s));
        json_t *d =
            simt_ok(t, p, "/detokenize", json_pack("{s:o}", "tokens", toks));
        assert_string_equal(json_string_value(json_object_get(d, "prompt")), s);
        json_decref(d);
        free(s);
    }
}

static json_t *conversation(void)
{
    json_t *a = json_pack("{s:s, s:s, s:s}", "role", "assistant", "content",
                          "Noted, the code is stored.", "reasoning_content",
                          "The user gave a code; remember it.");
    return json_pack("[o,o,o,o]",
                     simt_msg("system", "You are a careful assistant."),
                     simt_msg("user", "The access code for the blue door is "
                                      "4812. Please remember it."),
                     a,
                     simt_msg("user", "What is the access code for the blue "
                                      "door?"));
}

static void test_prompt_tokens_equal_tokenize_count(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *msgs = conversation();
    long counted = simt_count_messages(t, p, msgs);
    json_t *r =
        simt_ok(t, p, "/v1/chat/completions", simt_chat(json_incref(msgs)));
    assert_int_equal(simt_prompt_tokens(r), counted);
    json_decref(r);
    json_decref(msgs);
}

/* The same with tool calls and tool results in the history. */
static void test_prompt_tokens_with_tool_calls(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *msgs =
        json_pack("[o,{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},o]",
                  simt_msg("user", "What is the weather in Paris?"), "role",
                  "assistant", "content", "tool_calls", "id", "call_1", "type",
                  "function", "function", "name", "get_weather", "arguments",
                  "{\"city\": \"Paris\"}", "role", "tool", "tool_call_id",
                  "call_1", "content", "sunny", simt_msg("user", "Thanks."));
    long counted = simt_count_messages(t, p, msgs);
    json_t *r =
        simt_ok(t, p, "/v1/chat/completions", simt_chat(json_incref(msgs)));
    assert_int_equal(simt_prompt_tokens(r), counted);
    json_decref(r);
    json_decref(msgs);
}

static void test_template_renders_as_documented(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *msgs = conversation();
    char *text = simref_render(msgs, true);
    long want = (long)simref_count(text);
    json_t *r =
        simt_ok(t, p, "/v1/chat/completions", simt_chat(json_incref(msgs)));
    if (simt_prompt_tokens(r) != want)
        fail_msg("prompt_tokens %ld, the documented template gives %ld for "
                 "'%s'",
                 simt_prompt_tokens(r), want, text);
    free(text);
    json_decref(r);
    json_decref(msgs);
}

static void test_content_parts_render_like_a_string(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *parts =
        json_pack("[{s:s,s:s},{s:s,s:s}]", "type", "text", "text",
                  "Rain fell on ", "type", "text", "text", "quiet hills.");
    json_t *a = simt_ok(
        t, p, "/v1/chat/completions",
        simt_chat(json_pack("[{s:s,s:o}]", "role", "user", "content", parts)));
    json_t *b = simt_ok(t, p, "/v1/chat/completions",
                        simt_chat1("Rain fell on quiet hills."));
    assert_int_equal(simt_prompt_tokens(a), simt_prompt_tokens(b));
    json_decref(a);
    json_decref(b);
}

static void test_two_sims_tokenize_identically(void **state)
{
    struct simt *t = *state;
    struct proc *p1 = simt_start(t, NULL);
    struct proc *p2 = simt_start(t, "--seed", "99", NULL);
    for (size_t k = 0; k < sizeof(samples) / sizeof(*samples); k++) {
        json_t *a = tokenize(t, p1, samples[k]);
        json_t *b = tokenize(t, p2, samples[k]);
        assert_true(json_equal(a, b));
        json_decref(a);
        json_decref(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        cmocka_unit_test(test_reference_matches_documented_numbers),
        T(test_tokenize_ids_follow_the_formula),
        T(test_round_trip_including_non_ascii_and_specials),
        T(test_round_trip_random_text),
        T(test_prompt_tokens_equal_tokenize_count),
        T(test_prompt_tokens_with_tool_calls),
        T(test_template_renders_as_documented),
        T(test_content_parts_render_like_a_string),
        T(test_two_sims_tokenize_identically),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
