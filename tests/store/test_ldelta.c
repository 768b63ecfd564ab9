/*
 * Tests for store/ldelta: an event stream codes to a fraction of its size
 * and decodes to the same bytes; any input (random bytes, no blank line,
 * CRLF events, empty records) round-trips or is refused as "no smaller";
 * decoding refuses a truncated or altered coding and a wrong length
 * instead of reading or writing out of bounds.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/rng.h"
#include "store/ldelta.h"

/* n events as an OpenAI-compatible server streams them */
static void make_stream(struct buf *b, int n, const char *eol)
{
    static const char *const words[] = {"The", " value", " of", " X",
                                        " is", " 5",     ".",   " Done"};
    for (int i = 0; i < n; i++)
        buf_printf(b,
                   "data: {\"id\":\"chatcmpl-4b16bdf18d5fa254\",\"object\":"
                   "\"chat.completion.chunk\",\"created\":1796009216,"
                   "\"model\":\"fidelity-sim\",\"choices\":[{\"index\":0,"
                   "\"delta\":{\"content\":\"%s\"},\"logprobs\":null,"
                   "\"finish_reason\":null}]}%s%s",
                   words[i % 8], eol, eol);
    buf_printf(b, "data: [DONE]%s%s", eol, eol);
}

/* Codes and decodes src; the coded length (0: not smaller). */
static size_t round_trip(const char *src, size_t n)
{
    unsigned char *z = malloc(n + 1);
    size_t zlen = ldelta_encode(src, n, z, n ? n - 1 : 0);
    if (zlen) {
        char *out = malloc(n + 1);
        assert_int_equal(ldelta_decode(z, zlen, out, n), 0);
        assert_memory_equal(out, src, n);
        free(out);
    }
    /* with room enough, every input codes and round-trips */
    size_t cap = 31 * n + 31;
    unsigned char *big = malloc(cap);
    size_t blen = ldelta_encode(src, n, big, cap);
    assert_true(blen > 0 || n == 0);
    char *out = malloc(n + 1);
    assert_int_equal(ldelta_decode(big, blen, out, n), 0);
    if (n)
        assert_memory_equal(out, src, n);
    free(out);
    free(big);
    free(z);
    return zlen;
}

static void test_stream_codes_small(void **state)
{
    (void)state;
    const char *eols[] = {"\n", "\r\n"};
    for (int k = 0; k < 2; k++) {
        struct buf b = BUF_INIT;
        make_stream(&b, 12, eols[k]);
        size_t zlen = round_trip(b.data, b.len);
        printf("ldelta: %zu-byte stream of 13 events -> %zu bytes (%s)\n",
               b.len, zlen, k ? "CRLF" : "LF");
        /* each event after the first costs its new bytes and a few more */
        assert_true(zlen > 0);
        assert_true(zlen * 5 < b.len);
        buf_release(&b);
    }
}

static void test_any_input_round_trips(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 42);
    static const char alpha[] = "ab\n\r:{}\" ";
    for (int t = 0; t < 3000; t++) {
        size_t n = (size_t)rng_below(&r, 400);
        char *s = malloc(n + 1);
        bool text = rng_below(&r, 2);
        for (size_t i = 0; i < n; i++)
            s[i] = text ? alpha[rng_below(&r, sizeof(alpha) - 1)]
                        : (char)rng_below(&r, 256);
        round_trip(s, n);
        free(s);
    }
    /* no blank line at all, only blank lines, a lone event */
    round_trip("data: x\ndata: y\n", 16);
    round_trip("\n\n\n\n\n\n\n\n", 8);
    round_trip("data: {}\n\n", 10);
    round_trip("", 0);
}

static void test_corrupt_refused(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    make_stream(&b, 20, "\n");
    unsigned char *z = malloc(b.len);
    size_t zlen = ldelta_encode(b.data, b.len, z, b.len - 1);
    assert_true(zlen > 0);
    char *out = malloc(b.len + 64);
    /* wrong length, either way */
    assert_int_equal(ldelta_decode(z, zlen, out, b.len - 1), -EINVAL);
    assert_int_equal(ldelta_decode(z, zlen, out, b.len + 1), -EINVAL);
    /* every truncation */
    for (size_t cut = 0; cut < zlen; cut++)
        assert_int_equal(ldelta_decode(z, cut, out, b.len), -EINVAL);
    /* every single byte altered: refused, or decodes to other bytes of
     * the same length, never out of bounds (ASan in the sanitized run) */
    for (size_t i = 0; i < zlen; i++) {
        unsigned char keep = z[i];
        z[i] ^= 0x5a;
        int rc = ldelta_decode(z, zlen, out, b.len);
        if (!rc)
            assert_memory_not_equal(out, b.data, b.len);
        z[i] = keep;
    }
    /* a prefix longer than the previous record */
    const unsigned char bad[] = {0, 0, 2, 'a', '\n', 5, 0, 0};
    assert_int_equal(ldelta_decode(bad, sizeof(bad), out, 7), -EINVAL);
    free(out);
    free(z);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_codes_small),
        cmocka_unit_test(test_any_input_round_trips),
        cmocka_unit_test(test_corrupt_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
