/*
 * Tests for wire/jscan: what it accepts it reads as jansson does (the
 * value jscan_json builds dumps to jansson's text, key order and
 * duplicate keys included), and it says "unsure" for what jansson refuses
 * or what it does not read exactly (NUL and lone surrogate escapes,
 * exponents, long integers, bad UTF-8, control characters, trailing bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "wire/jdump.h"
#include "wire/jscan.h"

static void test_accepts_like_jansson(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{}",
        " [ ] ",
        "{\"a\":1,\"b\":[true,false,null],\"a\":2,\"c\":{\"d\":\"e\"}}",
        "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00 \xc3\xa9\"}",
        "[-0, 0.5, -12.25, 123456789012345678, 0.000001, 1.0]",
        "{\"k\\u00e9y\":\"v\"}",
        "\"top-level string\"",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"temperature\":0.7}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct jspan v;
        if (jscan_doc(docs[i], strlen(docs[i]), &v))
            fail_msg("doc %zu refused: %s", i, docs[i]);
        json_t *want =
            json_loadb(docs[i], strlen(docs[i]), JSON_DECODE_ANY, NULL);
        json_t *got = jscan_json(&v);
        assert_non_null(want);
        char *ws = jdump_str(want, false, NULL);
        char *gs = jdump_str(got, false, NULL);
        assert_string_equal(gs, ws);
        free(ws);
        free(gs);
        json_decref(want);
        json_decref(got);
    }
}

static void test_unsure_cases(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "",
        "{",
        "{\"a\":1}x",
        "{\"a\":\"\\u0000\"}",
        "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800\\u0041\"}",
        "{\"a\":1e5}",
        "{\"a\":1234567890123456789}",
        "{\"a\":01}",
        "{\"a\":-}",
        "{\"a\":1.}",
        "{\"a\":\"\xc0\xaf\"}",
        "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xf4\x90\x80\x80\"}",
        "{\"a\":\"\x01\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\" 1}",
        "[1,]",
        "{,}",
        "tru",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct jspan v;
        if (!jscan_doc(docs[i], strlen(docs[i]), &v))
            fail_msg("doc %zu accepted: %s", i, docs[i]);
    }
    /* nesting deeper than JSCAN_MAX_DEPTH */
    char deep[2 * JSCAN_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < JSCAN_MAX_DEPTH + 2; i++)
        deep[n++] = '[';
    for (int i = 0; i < JSCAN_MAX_DEPTH + 2; i++)
        deep[n++] = ']';
    struct jspan v;
    assert_int_equal(jscan_doc(deep, n, &v), -1);
}

static void test_members_and_strings(void **state)
{
    (void)state;
    static const char doc[] =
        "{\"choices\":[{\"delta\":{\"content\":\"a\\\"b\\\\\"}},{}],"
        "\"x\":\"\\\\\",\"choices2\":1,\"x\":\"last\"}";
    struct jspan top, m[3], el;
    static const char *const keys[] = {"choices", "x", "missing"};
    assert_int_equal(jscan_doc(doc, strlen(doc), &top), 0);
    assert_int_equal(jscan_members(&top, keys, 3, m), 0);
    assert_int_equal(m[0].t, JS_ARRAY);
    assert_int_equal(m[1].t, JS_STRING);
    assert_int_equal(m[2].t, JS_NONE);
    struct buf b = BUF_INIT;
    assert_int_equal(jscan_str(&m[1], &b), 0);
    assert_string_equal(b.data, "last");
    assert_int_equal(jscan_index(&m[0], 1, &el), 0);
    assert_int_equal(el.t, JS_OBJECT);
    assert_int_equal(jscan_index(&m[0], 2, &el), 0);
    assert_int_equal(el.t, JS_NONE);
    assert_int_equal(jscan_index(&m[0], 0, &el), 0);
    static const char *const dk[] = {"delta"};
    struct jspan d, c;
    static const char *const ck[] = {"content"};
    assert_int_equal(jscan_members(&el, dk, 1, &d), 0);
    assert_int_equal(jscan_members(&d, ck, 1, &c), 0);
    buf_reset(&b);
    assert_int_equal(jscan_str(&c, &b), 0);
    assert_string_equal(b.data, "a\"b\\");
    buf_release(&b);
}

/* jscan_member_elements gives what jscan_members then jscan_elements
 * give: the last member of that name, its elements, the error cases. */
static void test_member_elements(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{\"messages\":[{\"a\":[1,{\"b\":\"]\"}]}, \"x\\\"]\" , 3 ,[ ] ,{}]}",
        " { \"m\" : 1 , \"messages\" : [ ] } ",
        "{\"messages\":[1,2],\"messages\":[3]}",
        "{\"messages\":[1,2],\"messages\":{\"a\":[1]}}",
        "{\"messages\":[1,2,3,4,5,6,7],\"t\":[\"messages\"]}",
        "{\"other\":[1]}",
        "{\"mess\\u0061ges\":[1]}",
        "[1,2]",
    };
    static const char *const key[] = {"messages"};
    for (size_t d = 0; d < sizeof(docs) / sizeof(*docs); d++) {
        struct jspan doc, want_arr, got_arr, want[8], got[8];
        assert_int_equal(jscan_doc(docs[d], strlen(docs[d]), &doc), 0);
        int mr = jscan_members(&doc, key, 1, &want_arr);
        long gn = jscan_member_elements(&doc, "messages", &got_arr, got, 3);
        if (mr) {
            assert_int_equal(gn, -2);
            continue;
        }
        assert_int_equal(got_arr.t, want_arr.t);
        if (want_arr.t == JS_NONE) {
            assert_int_equal(gn, -1);
            continue;
        }
        assert_ptr_equal(got_arr.p, want_arr.p);
        assert_int_equal(got_arr.n, want_arr.n);
        if (want_arr.t != JS_ARRAY) {
            assert_int_equal(gn, -1);
            continue;
        }
        long wn = jscan_elements(&want_arr, want, 3);
        assert_int_equal(gn, wn);
        for (long i = 0; i < wn && i < 3; i++) {
            assert_ptr_equal(got[i].p, want[i].p);
            assert_int_equal(got[i].n, want[i].n);
            assert_int_equal(got[i].t, want[i].t);
        }
    }
}

/* The reply's fields the two-walk way: jscan_doc, then jscan_members on
 * the document, jscan_index on choices, jscan_members on choices[0] and
 * on its message (-1 as soon as one of them says so). */
static int pick_by_members(const char *d, struct jspan o[7])
{
    static const char *const top[] = {"usage", "choices"};
    static const char *const ch[] = {"message", "finish_reason"};
    static const char *const m[] = {"content", "tool_calls"};
    struct jspan doc, t[2], c[2], choice;
    for (int i = 0; i < 7; i++)
        o[i].t = JS_NONE;
    if (jscan_doc(d, strlen(d), &doc) || doc.t != JS_OBJECT ||
        jscan_members(&doc, top, 2, t))
        return -1;
    o[0] = t[0];
    o[1] = t[1];
    if (t[1].t != JS_ARRAY)
        return 0;
    if (jscan_index(&t[1], 0, &choice))
        return -1;
    o[2] = choice;
    if (choice.t != JS_OBJECT)
        return 0;
    if (jscan_members(&choice, ch, 2, c))
        return -1;
    o[3] = c[0];
    o[4] = c[1];
    if (c[0].t != JS_OBJECT)
        return 0;
    return jscan_members(&c[0], m, 2, o + 5);
}

/* jscan_doc_pick finds, in one walk, what the member walks find (last
 * member of a name wins, with its own sub-values; levels apply to their
 * kind of container only), and refuses escaped keys where it reads. */
static void test_doc_pick_matches_members(void **state)
{
    (void)state;
    const struct jscan_pick levels[] = {
        {{"usage", "choices"}, {0, 1}, {-1, 1}, false, 0},
        {{NULL}, {2}, {2}, true, 2},
        {{"message", "finish_reason"}, {3, 4}, {3, -1}, false, 3},
        {{"content", "tool_calls"}, {5, 6}, {-1, -1}, false, 5},
    };
    static const char *const docs[] = {
        "{\"choices\":[{\"message\":{\"content\":\"a\"},\"finish_reason\":"
        "\"stop\"},{\"message\":{\"content\":\"b\"}}],\"usage\":{\"n\":1}}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"}}],\"choices\":[]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\",\"tool_calls\":[1]}}],"
        "\"choices\":[{\"message\":{\"content\":\"b\"}}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"},\"message\":5}]}",
        "{\"choices\":[{\"message\":{\"content\":\"a\"},\"message\":{}}]}",
        "{\"choices\":{\"message\":{\"content\":\"a\"}}}",
        "{\"choices\":[[{\"message\":1}]]}",
        "{\"choices\":[{\"message\":[{\"content\":1}]}]}",
        "{\"choices\":[{\"mess\\u0061ge\":{\"content\":\"a\"}}]}",
        "{\"usage\":1,\"usage\":{\"a\":[{\"usage\":2}]}}",
        "{\"x\\n\":1}",
        " { \"choices\" : [ { \"message\" : { \"content\" : null } } ] } ",
        "[{\"choices\":[]}]",
        "{\"choices\":[]",
        "{}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        struct jspan want[7], got[7], doc;
        int rw = pick_by_members(docs[i], want);
        int rg = jscan_doc_pick(docs[i], strlen(docs[i]), levels, got, 7, &doc);
        if (!rg && doc.t != JS_OBJECT)
            rg = -1;
        if (rw != rg)
            fail_msg("doc %zu: pick %d, members %d", i, rg, rw);
        for (int k = 0; !rw && k < 7; k++)
            if (got[k].t != want[k].t ||
                (want[k].t != JS_NONE &&
                 (got[k].p != want[k].p || got[k].n != want[k].n)))
                fail_msg("doc %zu, span %d differs", i, k);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts_like_jansson),
        cmocka_unit_test(test_unsure_cases),
        cmocka_unit_test(test_members_and_strings),
        cmocka_unit_test(test_member_elements),
        cmocka_unit_test(test_doc_pick_matches_members),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
