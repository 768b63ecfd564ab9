/*
 * Tests for sim/tok: the documented ids, the round trip for any bytes, and
 * the token rate that makes probe sizing realistic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "sim/tok.h"

static void roundtrip(const char *s, size_t n)
{
    struct tok_vec t;
    struct buf b = BUF_INIT;
    tok_vec_init(&t);
    tok_encode(s, n, &t);
    assert_int_equal(tok_decode(t.v, t.n, &b), 0);
    assert_int_equal(b.len, n);
    assert_memory_equal(b.data ? b.data : "", s, n);
    buf_release(&b);
    tok_vec_release(&t);
}

static void test_documented_ids(void **state)
{
    (void)state;
    struct tok_vec t;
    tok_vec_init(&t);
    tok_encode("<|user|>a Ab\n", 13, &t);
    assert_int_equal(t.n, 4);
    assert_int_equal(t.v[0], TOK_USER);
    /* "a": no space, L=1, index 36 -> 272 + 0 + 0 + 36 */
    assert_int_equal(t.v[1], 272 + 36);
    /* " Ab": space, L=2, A=10, b=37 -> 272 + N + 62 + 10 + 37*62 */
    assert_int_equal(t.v[2], 272 + TOK_WORD_N + 62 + 10 + 37 * 62);
    assert_int_equal(t.v[3], TOK_BYTE0 + '\n');
    tok_vec_release(&t);
}

static void test_long_words_split_every_four(void **state)
{
    (void)state;
    struct tok_vec t;
    char piece[16];
    tok_vec_init(&t);
    tok_encode(" tictactoe", 10, &t);
    assert_int_equal(t.n, 3);
    assert_int_equal(tok_piece(t.v[0], piece), 5);
    assert_memory_equal(piece, " tict", 5);
    assert_int_equal(tok_piece(t.v[2], piece), 1);
    assert_memory_equal(piece, "e", 1);
    tok_vec_release(&t);
}

static void test_roundtrip_random_bytes(void **state)
{
    (void)state;
    struct rng r;
    char s[512];
    rng_seed(&r, 42);
    for (int k = 0; k < 500; k++) {
        size_t n = rng_below(&r, sizeof(s));
        for (size_t i = 0; i < n; i++) {
            /* bias towards text, specials and spaces */
            uint64_t c = rng_below(&r, 10);
            s[i] = c < 6   ? (char)('a' + rng_below(&r, 26))
                   : c < 8 ? ' '
                   : c < 9 ? "<|>/thinkuser"[rng_below(&r, 13)]
                           : (char)rng_below(&r, 256);
        }
        roundtrip(s, n);
    }
    roundtrip("", 0);
    roundtrip("<|assistant|><think></think> é ✓ \xff\x00z", 33);
}

static void test_english_rate(void **state)
{
    (void)state;
    const char *text = "The quick brown fox jumps over the lazy dog while "
                       "the access code for the blue door is 4812.";
    struct tok_vec t;
    tok_vec_init(&t);
    tok_encode(text, strlen(text), &t);
    double per = (double)strlen(text) / (double)t.n;
    assert_true(per > 2.5 && per < 4.5);
    tok_vec_release(&t);
}

static void test_decode_rejects_out_of_range(void **state)
{
    (void)state;
    int32_t ids[] = {300, TOK_VOCAB};
    struct buf b = BUF_INIT;
    assert_int_not_equal(tok_decode(ids, 2, &b), 0);
    assert_false(tok_is_valid(TOK_VOCAB));
    assert_false(tok_is_valid(12));
    assert_true(tok_is_valid(TOK_THINK));
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documented_ids),
        cmocka_unit_test(test_long_words_split_every_four),
        cmocka_unit_test(test_roundtrip_random_bytes),
        cmocka_unit_test(test_english_rate),
        cmocka_unit_test(test_decode_rejects_out_of_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
