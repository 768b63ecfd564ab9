/*
 * Tests for store/xchg's xchg_req_json_msgs: the recorder finds a request
 * body's "messages" member in the same validating walk as jscan_doc
 * (jscan_doc_pick) and hands it over, instead of xchg_req_json walking the
 * body again to find it. Both must give the same value (key order
 * included), the same message hashes and the same hash of the rest of the
 * body, and share messages alike: for a chat body, repeated "messages"
 * members, a "messages" that is not an array or only nested deeper, no
 * messages, an array body, and a history longer than the span buffer.
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
#include "store/jdump.h"
#include "store/jscan.h"
#include "store/xchg.h"

static const struct jscan_pick TOP = {{"messages"}, {0}, {-1}, false, 0};

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
    struct jspan doc, msgs, doc2;
    size_t n = strlen(s);
    assert_int_equal(jscan_doc_pick(s, n, &TOP, &msgs, 1, &doc), 0);
    assert_int_equal(jscan_doc(s, n, &doc2), 0);
    struct xchg x, y;
    xchg_init(&x);
    xchg_init(&y);
    json_t *got = xchg_req_json_msgs(a, &doc, &msgs, &x);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_picked_messages_read_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
