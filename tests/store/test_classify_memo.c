/*
 * Tests for store/classify's memo (classify_session_memo,
 * classify_kind_memo, classify_request_memo): the recorder's writer classifies
 * each request by the bytes of the messages the session key and the kind depend
 * on, as xchg_req_json hashed them. Whatever order requests come in, first seen
 * or remembered, the memo must give what classify_session_hl and
 * classify_kind give: requests that share their first messages but differ
 * in the last user message, in tools or in the session header, title and
 * compaction requests, and a subagent learnt between two calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/classify.h"
#include "store/xchg.h"
#include "wire/jscan.h"

static const char *const BODIES[] = {
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are an agent.\"},"
    "{\"role\":\"user\",\"content\":\"hello\"}]}",
    /* same first messages, a later user message asking for a summary */
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are an agent.\"},"
    "{\"role\":\"user\",\"content\":\"hello\"},{\"role\":\"assistant\","
    "\"content\":\"hi\"},{\"role\":\"user\",\"content\":\"Summarize the "
    "conversation so far.\"}]}",
    /* the same with tools: not a compaction */
    "{\"tools\":[{\"type\":\"function\"}],\"messages\":[{\"role\":\"system\","
    "\"content\":\"You are an agent.\"},{\"role\":\"user\",\"content\":"
    "\"hello\"},{\"role\":\"assistant\",\"content\":\"hi\"},{\"role\":"
    "\"user\",\"content\":\"Summarize the conversation so far.\"}]}",
    /* a title request */
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a title "
    "generator.\"},{\"role\":\"user\",\"content\":\"Generate a title for "
    "this conversation:\\nhello\"}]}",
    /* no system message; the user message as parts */
    "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
    "\"text\":\"List the config files under src/\"}]}]}",
    /* the same user message as a plain string */
    "{\"messages\":[{\"role\":\"user\",\"content\":\"List the config files "
    "under src/\"}]}",
    /* the system message alone; then the user message alone */
    "{\"messages\":[{\"role\":\"system\",\"content\":\"hello\"}]}",
    "{\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}",
    /* the same messages, other bytes */
    "{\"messages\":[ {\"content\":\"You are an agent.\",\"role\":\"system\"},"
    "{\"role\":\"user\",\"content\":\"hello\"} ]}",
    "{\"messages\":[]}",
    "{\"model\":\"m\"}",
};
#define NBODIES (sizeof(BODIES) / sizeof(BODIES[0]))

/* Classifies every body with and without the memo and compares; with
 * headers when session is set. */
static void check_all(struct classify_state *memo, struct classify_state *ref,
                      struct xchg_cache *cache, const char *session)
{
    struct hdrs h = {0};
    hdrs_start(&h);
    if (session)
        hdrs_add(&h, "X-Session-Id", 12, session, strlen(session));
    for (size_t i = 0; i < NBODIES; i++) {
        struct jspan doc;
        struct xchg x;
        xchg_init(&x);
        assert_int_equal(jscan_doc(BODIES[i], strlen(BODIES[i]), &doc), 0);
        json_t *j = xchg_req_json(cache, &doc, &x);
        assert_non_null(j);
        char *a =
            classify_session_memo(memo, &h, j, x.req_msg_raw, x.req_msg_n);
        char *b = classify_session_hl(&h, j);
        if (strcmp(a, b))
            fail_msg("body %zu: session '%s', want '%s'", i, a, b);
        const char *ka =
            classify_kind_memo(memo, j, x.req_msg_raw, x.req_msg_n);
        const char *kb = classify_kind(ref, j);
        if (strcmp(ka, kb))
            fail_msg("body %zu: kind '%s', want '%s'", i, ka, kb);
        char *sc = NULL;
        const char *kc =
            classify_request_memo(memo, &h, j, x.req_msg_raw, x.req_msg_n, &sc);
        if (strcmp(sc, b) || strcmp(kc, kb))
            fail_msg("body %zu: both at once '%s' '%s', want '%s' '%s'", i, sc,
                     kc, b, kb);
        free(sc);
        free(a);
        free(b);
        json_decref(j);
        xchg_release(&x);
    }
    hdrs_release(&h);
}

static void test_memo_agrees(void **state)
{
    (void)state;
    struct classify_state *memo = classify_new(), *ref = classify_new();
    struct xchg_cache *cache = xchg_cache_new();
    /* first seen, then remembered, then with a session header */
    check_all(memo, ref, cache, NULL);
    check_all(memo, ref, cache, NULL);
    check_all(memo, ref, cache, "ses_1");
    /* a task prompt learnt: the user-only request becomes a subagent's,
     * remembered verdicts or not */
    json_t *reply = json_loads(
        "{\"tool_calls\":[{\"function\":{\"name\":\"task\",\"arguments\":"
        "\"{\\\"prompt\\\":\\\"List the config files under src/\\\"}\"}}]}",
        0, NULL);
    assert_non_null(reply);
    classify_learn(memo, NULL, reply);
    classify_learn(ref, NULL, reply);
    json_decref(reply);
    check_all(memo, ref, cache, NULL);
    json_t *sub = json_loads(BODIES[5], 0, NULL);
    assert_string_equal(classify_kind(ref, sub), "subagent");
    json_decref(sub);
    /* the kinds the bodies cover */
    json_t *j = json_loads(BODIES[1], 0, NULL);
    assert_string_equal(classify_kind(ref, j), "compaction");
    json_decref(j);
    j = json_loads(BODIES[2], 0, NULL);
    assert_string_equal(classify_kind(ref, j), "main");
    json_decref(j);
    j = json_loads(BODIES[3], 0, NULL);
    assert_string_equal(classify_kind(ref, j), "title");
    json_decref(j);
    xchg_cache_free(cache);
    classify_free(memo);
    classify_free(ref);
}

/* Without message hashes (a body jansson parsed) or with hashes that do
 * not describe the body, nothing is remembered and the answer is still
 * the plain one. */
static void test_memo_without_hashes(void **state)
{
    (void)state;
    struct classify_state *c = classify_new();
    struct hdrs h = {0};
    hdrs_start(&h);
    XXH128_hash_t raw[1] = {{1, 2}}; /* n 99: not this body's */
    for (size_t i = 0; i < NBODIES; i++) {
        json_t *j = json_loads(BODIES[i], 0, NULL);
        for (int k = 0; k < 2; k++) {
            char *a =
                classify_session_memo(c, &h, j, k ? raw : NULL, k ? 99 : 0);
            char *b = classify_session_hl(&h, j);
            assert_string_equal(a, b);
            assert_string_equal(
                classify_kind_memo(c, j, k ? raw : NULL, k ? 99 : 0),
                classify_kind(NULL, j));
            free(a);
            free(b);
        }
        json_decref(j);
    }
    hdrs_release(&h);
    classify_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memo_agrees),
        cmocka_unit_test(test_memo_without_hashes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
