/*
 * Tests for record/redact: which header and query parameter names are
 * secrets, which body members are hidden (each secret name, any case, any
 * depth, tool call arguments), which are not (plain "token", objects such
 * as a tool schema's "password" property, numbers), and that the body
 * keeps its length and stays the same JSON otherwise.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "record/redact.h"

/* Redacts a copy of in; checks the length and that the result parses when
 * the input did; returns the copy (free it). */
static char *redacted(const char *in, const char *const *extra, size_t n,
                      size_t *hidden)
{
    size_t len = strlen(in);
    char *s = xstrdup(in);
    *hidden = redact_body(s, len, extra, n);
    assert_int_equal(strlen(s), len);
    json_t *a = json_loads(in, 0, NULL);
    if (a) {
        json_t *b = json_loads(s, 0, NULL);
        assert_non_null(b);
        json_decref(b);
    }
    json_decref(a);
    return s;
}

static void test_secret_headers(void **state)
{
    (void)state;
    static const char *const secret[] = {
        "Authorization",     "authorization",   "Proxy-Authorization",
        "api-key",           "X-Api-Key",       "Cookie",
        "Set-Cookie",        "x-goog-api-key",  "X-Auth-Token",
        "anthropic-api-key", "X-Client-Secret", NULL};
    static const char *const plain[] = {
        "Content-Type",       "User-Agent", "x-session-id",
        "x-session-affinity", "Accept",     "x-ratelimit-remaining-tokens",
        "Content-Length",     NULL};
    for (int i = 0; secret[i]; i++)
        if (!redact_is_secret_header(secret[i]))
            fail_msg("'%s' should be secret", secret[i]);
    for (int i = 0; plain[i]; i++)
        if (redact_is_secret_header(plain[i]))
            fail_msg("'%s' should not be secret", plain[i]);
}

static void test_redact_path(void **state)
{
    (void)state;
    char *p = redact_path("/v1/models?key=abc&alt=sse&api_key=x&token=");
    assert_string_equal(p, "/v1/models?key=[redacted]&alt=sse&api_key="
                           "[redacted]&token=[redacted]");
    free(p);
    p = redact_path("/v1/chat/completions");
    assert_string_equal(p, "/v1/chat/completions");
    free(p);
    p = redact_path("/x?monkey=1&Key=2");
    assert_string_equal(p, "/x?monkey=1&Key=[redacted]");
    free(p);
}

static void test_each_name_any_depth(void **state)
{
    (void)state;
    static const char *const names[] = {"api_key",       "apiKey",
                                        "api-key",       "API_KEY",
                                        "password",      "Password",
                                        "secret",        "client_secret",
                                        "access_token",  "refresh_token",
                                        "id_token",      "authorization",
                                        "Authorization", NULL};
    for (int i = 0; names[i]; i++) {
        char *in = xasprintf(
            "{\"%s\":\"TOPSECRET-1\",\"model\":\"m\",\"nested\":{\"a\":[1,"
            "{\"%s\" : \"TOPSECRET-22\"}]},\"list\":[{\"x\":{\"%s\":"
            "\"TOPSECRET-333\"}}],\"stream\":true}",
            names[i], names[i], names[i]);
        size_t hidden;
        char *out = redacted(in, NULL, 0, &hidden);
        if (hidden != 3 || strstr(out, "TOPSECRET"))
            fail_msg("'%s': %zu hidden: %s", names[i], hidden, out);
        assert_non_null(strstr(out, "\"model\":\"m\""));
        assert_non_null(strstr(out, "[redacted]*"));
        free(out);
        free(in);
    }
}

static void test_left_alone(void **state)
{
    (void)state;
    /* plain token (logprob entries), a tool schema's password property,
     * a number, a key only containing a secret's name, a value equal to
     * a secret's name */
    static const char in[] =
        "{\"token\":\"keep-1\",\"tools\":[{\"type\":\"function\",\"function\":"
        "{\"parameters\":{\"properties\":{\"password\":{\"type\":\"string\","
        "\"description\":\"keep-2\"}}}}}],\"secret\":12345,"
        "\"my_password_hint\":\"keep-3\",\"x\":\"password\",\"y\":[\"api_key\","
        "\"keep-4\"],\"max_tokens\":5}";
    size_t hidden;
    char *out = redacted(in, NULL, 0, &hidden);
    assert_int_equal(hidden, 0);
    assert_string_equal(out, in);
    free(out);
    /* not a JSON body: left alone */
    static const char form[] = "password=\"hunter2\"";
    out = redacted(form, NULL, 0, &hidden);
    assert_int_equal(hidden, 0);
    assert_string_equal(out, form);
    free(out);
}

static void test_escapes_and_marker(void **state)
{
    (void)state;
    /* an escaped key, a value with escapes, a short value, an empty one */
    static const char in[] =
        "{\"api\\u005fkey\":\"a\\\"b\\\\c\\u00e9XXXXXXXX\","
        "\"secret\":\"abc\",\"password\":\"\"}";
    size_t hidden;
    char *out = redacted(in, NULL, 0, &hidden);
    assert_int_equal(hidden, 2);
    assert_string_equal(out, "{\"api\\u005fkey\":\"[redacted]***********\","
                             "\"secret\":\"***\",\"password\":\"\"}");
    free(out);
}

static void test_tool_call_arguments(void **state)
{
    (void)state;
    static const char in[] =
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"login\",\"arguments\":"
        "\"{\\\"user\\\":\\\"bob\\\",\\\"password\\\":\\\"ARGSECRET-9\\\","
        "\\\"opts\\\":{\\\"apiKey\\\":\\\"ARG\\\\\\\"SECRET-10\\\"}}\"}}]},"
        "{\"role\":\"user\",\"content\":\"{\\\"password\\\":\\\"in-text\\\"}"
        "\"}]}";
    size_t hidden;
    char *out = redacted(in, NULL, 0, &hidden);
    assert_int_equal(hidden, 2);
    assert_null(strstr(out, "SECRET"));
    /* the arguments still parse as JSON, with the user kept */
    json_t *j = json_loads(out, 0, NULL);
    json_t *args = json_object_get(
        json_object_get(
            json_array_get(
                json_object_get(
                    json_array_get(json_object_get(j, "messages"), 0),
                    "tool_calls"),
                0),
            "function"),
        "arguments");
    json_t *a = json_loads(json_string_value(args), 0, NULL);
    assert_non_null(a);
    assert_string_equal(json_string_value(json_object_get(a, "user")), "bob");
    assert_string_equal(json_string_value(json_object_get(a, "password")),
                        "[redacted]*");
    json_decref(a);
    json_decref(j);
    /* message content is not arguments: a user's text is kept */
    assert_non_null(strstr(out, "in-text"));
    free(out);
    /* arguments that are not JSON are kept */
    static const char plain[] = "{\"arguments\":\"password: \\\"x\\\"\"}";
    out = redacted(plain, NULL, 0, &hidden);
    assert_int_equal(hidden, 0);
    assert_string_equal(out, plain);
    free(out);
}

static void test_extra_names(void **state)
{
    (void)state;
    static const char *const extra[] = {"x-custom-cred", "Session_Key"};
    static const char in[] = "{\"X-Custom-Cred\":\"EXTRA-1\",\"a\":[{"
                             "\"session_key\":\"EXTRA-2\"}],\"token\":\"t\"}";
    size_t hidden;
    char *out = redacted(in, extra, 2, &hidden);
    assert_int_equal(hidden, 2);
    assert_null(strstr(out, "EXTRA"));
    free(out);
    assert_true(redact_name_ok("token"));
    assert_false(redact_name_ok(""));
    char long_name[REDACT_NAME_MAX + 2];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_false(redact_name_ok(long_name));
}

/* Torn or hostile bodies: never a read outside the buffer (the sanitizer
 * build checks), and the length kept. */
static void test_truncated_bodies(void **state)
{
    (void)state;
    static const char in[] =
        "{\"password\":\"abc\\\"def\",\"arguments\":\"{\\\"secret\\\":"
        "\\\"s\\\\u00\\\"}\",\"x\":\"\\";
    size_t len = strlen(in);
    for (size_t n = 0; n <= len; n++) {
        char *s = xmalloc(n ? n : 1);
        memcpy(s, in, n);
        redact_body(s, n, NULL, 0);
        free(s);
    }
}

/* The codings undone (one, any case, blanks around), and the cap: a
 * body that inflates past it is reported, not inflated whole. */
static void test_coding_and_inflate_cap(void **state)
{
    (void)state;
    assert_string_equal(redact_coding(" GZip "), "gzip");
    assert_string_equal(redact_coding("x-gzip"), "x-gzip");
    assert_string_equal(redact_coding("deflate"), "deflate");
    assert_null(redact_coding("gzip, gzip"));
    assert_null(redact_coding("identity"));
    assert_null(redact_coding("br"));
    assert_null(redact_coding(NULL));
    /* zlib's own format: 3,000 'a's */
    static char plain[3000];
    memset(plain, 'a', sizeof(plain));
    unsigned char z[256];
    uLongf zl = sizeof(z);
    assert_int_equal(compress(z, &zl, (const Bytef *)plain, sizeof(plain)),
                     Z_OK);
    struct buf out = BUF_INIT;
    assert_int_equal(redact_inflate((const char *)z, zl, "deflate", 0, &out),
                     0);
    assert_int_equal(out.len, sizeof(plain));
    assert_int_equal(redact_inflate((const char *)z, zl, "deflate", 1000, &out),
                     1);
    assert_true(out.len <= 1000);
    assert_int_equal(redact_inflate("{\"a\":1}", 7, "gzip", 0, &out), -1);
    assert_int_equal(out.len, 0);
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_headers),
        cmocka_unit_test(test_redact_path),
        cmocka_unit_test(test_each_name_any_depth),
        cmocka_unit_test(test_left_alone),
        cmocka_unit_test(test_escapes_and_marker),
        cmocka_unit_test(test_tool_call_arguments),
        cmocka_unit_test(test_extra_names),
        cmocka_unit_test(test_truncated_bodies),
        cmocka_unit_test(test_coding_and_inflate_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
