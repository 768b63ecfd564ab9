/*
 * Tests for wire/jdump: the text is byte for byte jansson's json_dumps
 * (JSON_COMPACT | JSON_ENCODE_ANY, with and without JSON_SORT_KEYS) on
 * hand-picked edge cases (escapes, NUL, reals, integer limits, key order)
 * and on thousands of generated values, so message hashes stay those the
 * store computed with jansson.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "wire/jdump.h"

static void assert_same(const json_t *v)
{
    for (int sort = 0; sort < 2; sort++) {
        size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
        if (sort)
            flags |= JSON_SORT_KEYS;
        char *want = json_dumps(v, flags);
        size_t len = 0;
        char *got = jdump_str(v, sort, &len);
        assert_non_null(want);
        assert_non_null(got);
        if (strcmp(want, got))
            fail_msg("jdump differs from json_dumps:\n want %s\n got  %s", want,
                     got);
        assert_int_equal(len, strlen(want));
        free(want);
        free(got);
    }
}

static void test_edge_cases(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{}",
        "[]",
        "\"\"",
        "{\"b\":1,\"a\":2,\"ab\":3,\"\":4,\"a\\u00e9\":5,\"A\":6}",
        "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\\u001f\\u007f\"]",
        "[\"caf\\u00e9 \\ud83d\\ude00 \xe2\x82\xac\"]",
        "[0, -1, 9223372036854775807, -9223372036854775808]",
        "[0.0, -0.0, 1.5, 1e300, 1e-300, 123456789012345680000.0, 0.1,"
        " 2.5e-5, 1e21, 1e20, 100.0, 3.0e5, 6.02214076e23]",
        /* integral reals around the cut where jdump stops formatting them
         * itself (1e15) */
        "[999999999999999.0, 1e15, -999999999999999.0, 123456789012345.0,"
        " -5.0, 1e14, 4503599627370496.0, 9007199254740993.0, -1e-320]",
        "[true, false, null, [[[]]], {\"x\":{\"y\":{}}}]",
        "{\"model\":\"m\",\"temperature\":0.7,\"top_p\":0.95,\"messages\":"
        "[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        json_error_t e;
        json_t *v = json_loads(texts[i], JSON_DECODE_ANY, &e);
        if (!v)
            fail_msg("case %zu: %s", i, e.text);
        assert_same(v);
        json_decref(v);
    }
    /* a string holding NUL bytes (JSON_ALLOW_NUL) and keys with NUL */
    json_t *o = json_object();
    json_object_set_new(o, "k", json_stringn("a\0b", 3));
    json_object_setn_new(o, "k\0z", 3, json_integer(1));
    json_object_setn_new(o, "k\0a", 3, json_integer(2));
    assert_same(o);
    json_decref(o);
}

static const char *const pieces[] = {
    "a",
    "Z",
    " ",
    "\"",
    "\\",
    "/",
    "\n",
    "\t",
    "\x01",
    "\x1f",
    "\x7f",
    "\xc3\xa9",
    "\xe2\x82\xac",
    "\xf0\x9f\x98\x80",
    "role",
    "content",
};

static json_t *gen(struct rng *r, int depth)
{
    uint64_t kind = rng_below(r, depth > 4 ? 6 : 8);
    switch (kind) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(rng_below(r, 2));
    case 2:
        return json_integer((json_int_t)rng_next(r) >> (int)rng_below(r, 64));
    case 3: {
        double d =
            (rng_unit(r) - 0.5) * pow(10.0, (double)rng_below(r, 40) - 20.0);
        if (rng_below(r, 4) == 0)
            d = (double)(int64_t)rng_below(r, 100000);
        return json_real(d);
    }
    case 4:
    case 5: {
        char s[128];
        size_t n = 0, parts = rng_below(r, 8);
        for (size_t i = 0; i < parts; i++) {
            const char *p =
                pieces[rng_below(r, sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = strlen(p);
            memcpy(s + n, p, pl);
            n += pl;
        }
        return json_stringn(s, n);
    }
    case 6: {
        json_t *a = json_array();
        size_t n = rng_below(r, 5);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, gen(r, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        size_t n = rng_below(r, 6);
        for (size_t i = 0; i < n; i++) {
            char key[16];
            size_t kl = 0, parts = rng_below(r, 3);
            for (size_t j = 0; j < parts; j++)
                key[kl++] = "abAB\"\n\x01"[rng_below(r, 7)];
            key[kl] = 0;
            json_object_set_new(o, key, gen(r, depth + 1));
        }
        return o;
    }
    }
}

static void test_generated_values(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 42);
    for (int i = 0; i < 5000; i++) {
        json_t *v = gen(&r, 0);
        assert_non_null(v);
        assert_same(v);
        json_decref(v);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_generated_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
