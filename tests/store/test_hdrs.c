/*
 * Tests for store/hdrs: the flat header list's JSON text is byte for byte
 * what the recorder stored before, when it built a jansson object per
 * exchange (the reference below is that code: repeated names joined with
 * ", " in the first one's place, ASCII set without a check, anything else
 * through jansson's UTF-8 check and left out when refused) and dumped it
 * with jdump. Hand-picked edge cases and thousands of generated lists.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "core/rng.h"
#include "core/xalloc.h"
#include "store/hdrs.h"
#include "wire/jdump.h"

/* The recorder's former json_add_header (repeat: always looked up). */
static void ref_add(json_t *o, const char *name, const char *v)
{
    json_t *old = json_object_get(o, name);
    if (json_is_string(old)) {
        char *j = xasprintf("%s, %s", json_string_value(old), v);
        json_object_set_new(o, name, json_string(j));
        free(j);
        return;
    }
    size_t nl = 0, vl = 0;
    unsigned char hi = 0;
    for (; name[nl]; nl++)
        hi |= (unsigned char)name[nl];
    for (; v[vl]; vl++)
        hi |= (unsigned char)v[vl];
    if (hi < 0x80)
        json_object_set_new_nocheck(o, name, json_stringn_nocheck(v, vl));
    else
        json_object_set_new(o, name, json_string(v));
}

/* The former classify.c header_ci. */
static const char *ref_get_ci(const json_t *headers, const char *name)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)headers, k, v)
    {
        if (!strcasecmp(k, name) && json_is_string(v) && json_string_length(v))
            return json_string_value(v);
    }
    return NULL;
}

/* Checks the list of n (name, value) pairs against the reference. */
static void check_pairs(const char *const *pairs, size_t n)
{
    json_t *o = json_object();
    struct hdrs h;
    memset(&h, 0, sizeof(h));
    hdrs_start(&h);
    for (size_t i = 0; i < n; i++) {
        const char *name = pairs[2 * i], *value = pairs[2 * i + 1];
        ref_add(o, name, value);
        hdrs_add(&h, name, strlen(name), value, strlen(value));
    }
    size_t len = 0;
    char *want = jdump_str(o, false, &len);
    struct buf got = BUF_INIT;
    assert_int_equal(hdrs_json(&h, &got), 0);
    if (strcmp(want, buf_str(&got)))
        fail_msg("hdrs_json differs from the jansson path:\n want %s\n got  %s",
                 want, buf_str(&got));
    assert_int_equal(got.len, len);
    /* the readers' accessor agrees with the object's */
    static const char *const probes[] = {
        "x-session-id", "X-SESSION-ID", "content-encoding", "a", "b", "ab"};
    struct buf v = BUF_INIT;
    for (size_t i = 0; i < sizeof(probes) / sizeof(*probes); i++) {
        const char *w = ref_get_ci(o, probes[i]);
        const char *g = hdrs_get_ci(&h, probes[i], &v);
        if (!w)
            assert_null(g);
        else
            assert_string_equal(g, w);
    }
    buf_release(&v);
    buf_release(&got);
    free(want);
    hdrs_release(&h);
    json_decref(o);
}

#define CHECK(...)                                                             \
    do {                                                                       \
        static const char *const p_[] = {__VA_ARGS__};                         \
        check_pairs(p_, sizeof(p_) / sizeof(*p_) / 2);                         \
    } while (0)

static void test_hand_picked(void **state)
{
    (void)state;
    check_pairs(NULL, 0); /* {} */
    CHECK("Host", "127.0.0.1:8080", "Content-Type", "application/json",
          "Authorization", "[redacted]", "X-Session-Id", "s1");
    /* repeats: joined in the first one's place; case makes another key */
    CHECK("Accept", "a", "X", "1", "Accept", "b", "accept", "c", "Accept", "d");
    CHECK("x-session-id", "", "X-Session-Id", "real", "x-session-id", "late");
    /* escapes: quotes, backslashes, control bytes, DEL, UTF-8 */
    CHECK("q", "say \"hi\" \\ there", "c", "\x01\x1f\t\x7f", "u",
          "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "k\"ey", "v");
    /* invalid UTF-8: the field is left out; a refused repeat keeps the
     * earlier value; a refused first lets a later one be the key */
    CHECK("bad", "\xff\xfe", "good", "ok", "bad", "fine", "good", "\xc3",
          "good", "more");
    CHECK("n\xc3\xa9", "v", "n\xff", "v", "n\xc3\xa9", "\xed\xa0\x80",
          "n\xc3\xa9", "w");
    CHECK("ov", "\xc0\xaf", "big", "\xf4\x90\x80\x80", "trunc", "\xe2\x82");
    CHECK("", "empty name", "e", "", "e", "", "content-encoding", "gzip");
}

static void test_many(void **state)
{
    (void)state;
    /* past the walk's stack array */
    static char names[200][16], values[200][16];
    const char *pairs[400];
    for (size_t i = 0; i < 200; i++) {
        snprintf(names[i], sizeof(names[i]), "h%zu", i % 70);
        snprintf(values[i], sizeof(values[i]), "v%zu", i);
        pairs[2 * i] = names[i];
        pairs[2 * i + 1] = values[i];
    }
    check_pairs(pairs, 200);
}

static void test_generated(void **state)
{
    (void)state;
    static const char *const alpha[] = {
        "a",    "b",    "A",    "ab",       "\"", "\\", "\n",   "\x01",
        "\x7f", "\xc3", "\xa9", "\xc3\xa9", " ",  ",",  "\xff", "\xe2\x82\xac"};
    struct rng g;
    rng_seed(&g, 42);
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)rng_below(&g, 12);
        char *strs[24];
        const char *pairs[24];
        for (size_t i = 0; i < 2 * n; i++) {
            struct buf b = BUF_INIT;
            size_t parts = (size_t)rng_below(&g, i % 2 ? 24 : 3);
            for (size_t k = 0; k < parts; k++) {
                /* names mostly from a small set, so that they repeat */
                size_t a = (size_t)rng_below(&g, i % 2 ? 16 : 4);
                buf_adds(&b, alpha[a]);
            }
            strs[i] = buf_detach(&b, NULL);
            if (!strs[i])
                strs[i] = xstrdup("");
            pairs[i] = strs[i];
        }
        check_pairs(pairs, n);
        for (size_t i = 0; i < 2 * n; i++)
            free(strs[i]);
    }
}

/* A value read up to its first NUL, as the NUL-terminated strings the
 * recorder had; hdrs_start empties a reused list. */
static void test_nul_and_reuse(void **state)
{
    (void)state;
    struct hdrs h;
    memset(&h, 0, sizeof(h));
    hdrs_start(&h);
    hdrs_add(&h, "a\0b", 3, "x\0y", 3);
    struct buf out = BUF_INIT;
    assert_int_equal(hdrs_json(&h, &out), 0);
    assert_string_equal(buf_str(&out), "{\"a\":\"x\"}");
    hdrs_start(&h);
    buf_reset(&out);
    assert_int_equal(hdrs_json(&h, &out), 0);
    assert_string_equal(buf_str(&out), "{}");
    buf_release(&out);
    hdrs_release(&h);
    assert_false(h.set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_picked),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_nul_and_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
