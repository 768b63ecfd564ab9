/*
 * Tests for core/url: the one masking rule for URLs that are shown. The
 * userinfo goes whole, with or without a scheme; an '@' outside the
 * authority stays; nothing of a secret survives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/url.h"

static void expect_mask(const char *in, const char *want)
{
    char *got = url_mask(in);
    assert_string_equal(got, want);
    free(got);
}

static void test_userinfo_masked(void **state)
{
    (void)state;
    expect_mask("https://user:pw@host:8000/v1?x=@y",
                "https://***@host:8000/v1?x=@y");
    expect_mask("http://me:s3cret@127.0.0.1:9/v1/models",
                "http://***@127.0.0.1:9/v1/models");
    expect_mask("postgres://app:hunter2@db.local/prod",
                "postgres://***@db.local/prod");
    expect_mask("http://u:p@[::1]:8000", "http://***@[::1]:8000");
}

static void test_token_as_user_masked(void **state)
{
    (void)state;
    expect_mask("https://ghp_token@host/", "https://***@host/");
    expect_mask("https://:pw@host", "https://***@host");
}

static void test_at_in_password_not_leaked(void **state)
{
    (void)state;
    char *s = url_mask("http://u:p@ss:w@rd@host:1/x");
    assert_string_equal(s, "http://***@host:1/x");
    assert_null(strstr(s, "ss"));
    assert_null(strstr(s, "rd"));
    free(s);
}

static void test_without_scheme(void **state)
{
    (void)state;
    expect_mask("user:pw@host:8000", "***@host:8000");
    expect_mask("host:8000/v1", "host:8000/v1");
}

static void test_at_outside_authority_kept(void **state)
{
    (void)state;
    expect_mask("http://host/a@b", "http://host/a@b");
    expect_mask("http://host?q=a@b", "http://host?q=a@b");
    expect_mask("http://host#a@b", "http://host#a@b");
    expect_mask("org/model@rev", "org/model@rev");
}

static void test_plain_copied(void **state)
{
    (void)state;
    expect_mask("", "");
    expect_mask("http://127.0.0.1:8000", "http://127.0.0.1:8000");
    expect_mask("--max-tokens", "--max-tokens");
}

static void test_scheme_inside_word(void **state)
{
    (void)state;
    /* a command-line word such as --golden=URL keeps its option */
    expect_mask("--golden=http://u:pw@g:1", "--golden=http://***@g:1");
}

static void test_mask_in_text(void **state)
{
    (void)state;
    char msg[64] = "Failed to connect to http://u:pw@h:1/v1/models: refused";
    url_mask_in(msg, sizeof(msg), "http://u:pw@h:1/v1/models");
    assert_string_equal(
        msg, "Failed to connect to http://***@h:1/v1/models: refused");
    char small[17] = "at http://u:pw@h";
    url_mask_in(small, sizeof(small), "http://u:pw@h");
    assert_string_equal(small, "at http://***@h");
    char cut[13] = "x http://a@h";
    url_mask_in(cut, sizeof(cut), "http://a@h");
    assert_string_equal(cut, "x http://***"); /* cut to fit, nothing leaked */
    char plain[32] = "no url here";
    url_mask_in(plain, sizeof(plain), "http://u:pw@h");
    assert_string_equal(plain, "no url here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_userinfo_masked),
        cmocka_unit_test(test_token_as_user_masked),
        cmocka_unit_test(test_at_in_password_not_leaked),
        cmocka_unit_test(test_without_scheme),
        cmocka_unit_test(test_at_outside_authority_kept),
        cmocka_unit_test(test_plain_copied),
        cmocka_unit_test(test_scheme_inside_word),
        cmocka_unit_test(test_mask_in_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
