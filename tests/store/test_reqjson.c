/*
 * Tests for store/xchg's xchg_req_json_msgs: the recorder finds a request
 * body's "messages" and "tools" members in the same validating walk as
 * jscan_doc (jscan_doc_pick) and hands it over, instead of xchg_req_json
 * walking the body again to find it. Both must give the same value (key order
 * included), the same message hashes and the same hash of the rest of the
 * body, and share messages alike (the tools value, also found in that
 * walk, is shared by its bytes too): for a chat body, repeated
 * "messages" or "tools" members, a "messages" that is not an array or
 * only nested deeper, no messages, an array body, and a history longer
 * than the span buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "store/xchg.h"
#include "wire/jdump.h"
#include "wire/jscan.h"

static const struct jscan_pick TOP = {
    {"messages", "tools"}, {0, 1}, {-1, -1}, false, 0};

/* A chat body with n messages */
static char *history(size_t n)
{
    struct buf b = BUF_INIT;
    buf_adds(&b, "{\"model\":\"m\",\"messages\":[");
    for (size_t i = 0; i < n; i++)
        buf_printf(&b, "%s{\"role\":\"%s\",\"content\":\"turn %zu\"}",
                   i ? "," : "", i % 2 ? "assistant" : "user", i);
    buf_adds(&b, "],\"tools\":[{\"type\":\"function\"}]}");
    return buf_detach(&b, NULL);
}

static void check(struct xchg_cache *a, struct xchg_cache *b, const char *s)
{
    struct jspan doc, at[2], doc2;
    size_t n = strlen(s);
    assert_int_equal(jscan_doc_pick(s, n, &TOP, at, 2, &doc), 0);
    assert_int_equal(jscan_doc(s, n, &doc2), 0);
    struct xchg x, y;
    xchg_init(&x);
    xchg_init(&y);
    json_t *got = xchg_req_json_msgs(a, &doc, &at[0], &at[1], &x);
    json_t *want = xchg_req_json(b, &doc2, &y);
    char *gs = jdump_str(got, false, NULL), *ws = jdump_str(want, false, NULL);
    if (!gs || !ws || strcmp(gs, ws))
        fail_msg("%s:\n got  %s\n want %s", s, gs, ws);
    assert_true(json_equal(got, want));
    assert_int_equal(x.req_msg_n, y.req_msg_n);
    for (size_t i = 0; i < x.req_msg_n; i++) {
        assert_true(XXH128_isEqual(x.req_msg_raw[i], y.req_msg_raw[i]));
        assert_int_equal(x.req_msg_new[i], y.req_msg_new[i]);
    }
    assert_true(XXH128_isEqual(x.req_rest_raw, y.req_rest_raw));
    free(gs);
    free(ws);
    json_decref(got);
    json_decref(want);
    xchg_release(&x);
    xchg_release(&y);
}

static void test_picked_messages_read_alike(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"model\":\"m\",\"temperature\":0,\"messages\":[{\"role\":\"user\","
        "\"content\":\"Let X = 5. What is the value of X?\"}],"
        "\"max_tokens\":16}",
        /* the last "messages" wins, as with jansson */
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"messages\":"
        "[{\"role\":\"user\",\"content\":\"b\"},{\"role\":\"user\"}]}",
        "{\"messages\":[{\"role\":\"user\"}],\"messages\":\"no\"}",
        "{\"messages\":\"no\",\"messages\":[{\"role\":\"user\"}]}",
        /* not at the top */
        "{\"input\":{\"messages\":[{\"role\":\"user\"}]}}",
        "{\"messages\":{\"role\":\"user\"}}", "{\"messages\":[]}",
        "{\"model\":\"m\"}", "{}", "[{\"messages\":[]}]",
        " { \"messages\" : [ { \"content\" : \"x\\ny\" , \"role\" : \"user\" } "
        ", 1 , null , \"s\" ] , \"stream\" : true } ",
        NULL};
    struct xchg_cache *a = xchg_cache_new(), *b = xchg_cache_new();
    for (int round = 0; round < 2; round++) /* first seen, then shared */
        for (int i = 0; bodies[i]; i++)
            check(a, b, bodies[i]);
    /* longer than the span buffer, then longer again */
    for (size_t n = 1; n <= 300; n = n * 3 + 1) {
        char *h = history(n);
        check(a, b, h);
        check(a, b, h);
        free(h);
    }
    xchg_cache_free(a);
    xchg_cache_free(b);
}

/* Two requests with the same tools bytes share one tools value; other
 * bytes get their own */
static void test_tools_shared(void **state)
{
    (void)state;
    struct xchg_cache *c = xchg_cache_new();
    char *h1 = history(3), *h2 = history(5);
    static const char other[] =
        "{\"messages\":[{\"role\":\"user\"}],\"tools\":[{\"type\":\"x\"}]}";
    const char *bodies[] = {h1, h2, other};
    json_t *got[3];
    for (int i = 0; i < 3; i++) {
        struct jspan doc, at[2];
        struct xchg x;
        xchg_init(&x);
        assert_int_equal(
            jscan_doc_pick(bodies[i], strlen(bodies[i]), &TOP, at, 2, &doc), 0);
        got[i] = xchg_req_json_msgs(c, &doc, &at[0], &at[1], &x);
        xchg_release(&x);
    }
    json_t *t0 = json_object_get(got[0], "tools");
    assert_non_null(t0);
    assert_ptr_equal(t0, json_object_get(got[1], "tools"));
    assert_ptr_not_equal(t0, json_object_get(got[2], "tools"));
    for (int i = 0; i < 3; i++)
        json_decref(got[i]);
    free(h1);
    free(h2);
    xchg_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picked_messages_read_alike),
        cmocka_unit_test(test_tools_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
