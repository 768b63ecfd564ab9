/*
 * Tests for core/utf8: the sequence length at a position and the
 * whole-text checks, against the cases RFC 3629 names (overlong forms,
 * surrogates, code points past U+10FFFF, truncated and stray bytes) and,
 * for every one- to three-byte input, against jansson's own rule, which
 * the header rules of the recorder followed before.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/utf8.h"

static size_t seq(const char *s)
{
    return utf8_seq_len((const unsigned char *)s, strlen(s));
}

static void test_seq_len_valid(void **state)
{
    (void)state;
    assert_int_equal(seq("a"), 1);
    assert_int_equal(seq("\xc2\x80"), 2);         /* U+0080 */
    assert_int_equal(seq("\xdf\xbf"), 2);         /* U+07FF */
    assert_int_equal(seq("\xe0\xa0\x80"), 3);     /* U+0800 */
    assert_int_equal(seq("\xe2\x80\xa6"), 3);     /* U+2026 */
    assert_int_equal(seq("\xed\x9f\xbf"), 3);     /* U+D7FF */
    assert_int_equal(seq("\xee\x80\x80"), 3);     /* U+E000 */
    assert_int_equal(seq("\xef\xbf\xbf"), 3);     /* U+FFFF */
    assert_int_equal(seq("\xf0\x90\x80\x80"), 4); /* U+10000 */
    assert_int_equal(seq("\xf4\x8f\xbf\xbf"), 4); /* U+10FFFF */
    unsigned char nul = 0;
    assert_int_equal(utf8_seq_len(&nul, 1), 1);
}

static void test_seq_len_invalid(void **state)
{
    (void)state;
    assert_int_equal(seq("\x80"), 0); /* stray continuation */
    assert_int_equal(seq("\xbf"), 0);
    assert_int_equal(seq("\xc0\x80"), 0);         /* overlong NUL */
    assert_int_equal(seq("\xc1\xbf"), 0);         /* overlong */
    assert_int_equal(seq("\xe0\x9f\xbf"), 0);     /* overlong */
    assert_int_equal(seq("\xf0\x8f\xbf\xbf"), 0); /* overlong */
    assert_int_equal(seq("\xed\xa0\x80"), 0);     /* U+D800 */
    assert_int_equal(seq("\xed\xbf\xbf"), 0);     /* U+DFFF */
    assert_int_equal(seq("\xf4\x90\x80\x80"), 0); /* past U+10FFFF */
    assert_int_equal(seq("\xf5\x80\x80\x80"), 0);
    assert_int_equal(seq("\xff"), 0);
    assert_int_equal(seq("\xc3("), 0); /* not a continuation */
    assert_int_equal(seq("\xe2\x80("), 0);
    /* cut short by n, whatever follows in memory */
    assert_int_equal(utf8_seq_len((const unsigned char *)"\xe2\x80\xa6", 2), 0);
    assert_int_equal(utf8_seq_len((const unsigned char *)"\xc3\xa9", 1), 0);
}

static void test_valid_texts(void **state)
{
    (void)state;
    assert_true(utf8_valid("", 0));
    assert_true(utf8_valid_text("", 0));
    const char *t = "plain ASCII text, longer than a word, \xc3\xa9t\xc3\xa9 "
                    "\xe2\x80\xa6 \xf0\x9f\x98\x80 and ASCII again at the end";
    assert_true(utf8_valid(t, strlen(t)));
    assert_true(utf8_valid_text(t, strlen(t)));
    /* a NUL: valid UTF-8, but not a C string's text */
    assert_true(utf8_valid("abcdefgh\0ijklmnop", 17));
    assert_false(utf8_valid_text("abcdefgh\0ijklmnop", 17));
    assert_false(utf8_valid_text("abc\0", 4));
    assert_false(utf8_valid_text("\0", 1));
}

static void test_invalid_at_every_offset(void **state)
{
    (void)state;
    /* one bad byte at each place of a long ASCII text: inside, before and
     * after the word-sized runs */
    char t[40];
    for (size_t at = 0; at < sizeof(t); at++) {
        memset(t, 'x', sizeof(t));
        t[at] = (char)0xc0;
        assert_false(utf8_valid(t, sizeof(t)));
        assert_false(utf8_valid_text(t, sizeof(t)));
        t[at] = '\0';
        assert_true(utf8_valid(t, sizeof(t)));
        assert_false(utf8_valid_text(t, sizeof(t)));
        if (at + 1 < sizeof(t)) {
            t[at] = (char)0xc3;
            t[at + 1] = (char)0xa9;
            assert_true(utf8_valid(t, sizeof(t)));
            assert_true(utf8_valid_text(t, sizeof(t)));
        }
    }
    /* a sequence cut by the end of the text */
    assert_false(utf8_valid("abcdefgh\xe2\x80", 10));
}

static bool jansson_accepts(const unsigned char *s, size_t n)
{
    json_t *j = json_stringn((const char *)s, n);
    json_decref(j);
    return j != NULL;
}

static void test_same_rule_as_jansson(void **state)
{
    (void)state;
    unsigned char b[3];
    for (unsigned x = 0; x < 256; x++) {
        b[0] = (unsigned char)x;
        assert_int_equal(utf8_valid((char *)b, 1), jansson_accepts(b, 1));
        for (unsigned y = 0; y < 256; y++) {
            b[1] = (unsigned char)y;
            assert_int_equal(utf8_valid((char *)b, 2), jansson_accepts(b, 2));
            if (x < 0xe0 || x > 0xef)
                continue;
            for (unsigned z = 0; z < 256; z++) {
                b[2] = (unsigned char)z;
                assert_int_equal(utf8_valid((char *)b, 3),
                                 jansson_accepts(b, 3));
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_len_valid),
        cmocka_unit_test(test_seq_len_invalid),
        cmocka_unit_test(test_valid_texts),
        cmocka_unit_test(test_invalid_at_every_offset),
        cmocka_unit_test(test_same_rule_as_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
