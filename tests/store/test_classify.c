/*
 * Tests for store/classify: how sessions are keyed, and the request kinds
 * on real opencode requests (tests/fixtures/opencode-1.18.33/) and crafted
 * ones, including a subagent recognised from the task prompt its parent
 * sent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/hash.h"
#include "store/classify.h"
#include "util/fixture.h"

static json_t *fixture(const char *name)
{
    return fixture_json(name);
}

/* The documented key: "p:" and hash_hex of hash64 over json_dumps of
 * [first system message, first user message] (compact, sorted keys). */
static char *want_prefix_key(json_t *body)
{
    json_t *msgs = json_object_get(body, "messages");
    json_t *sys = NULL, *user = NULL, *m;
    size_t i;
    json_array_foreach(msgs, i, m)
    {
        const char *r = json_string_value(json_object_get(m, "role"));
        if (r && !strcmp(r, "system") && !sys)
            sys = m;
        if (r && !strcmp(r, "user") && !user)
            user = m;
    }
    json_t *key =
        json_pack("[OO]", sys ? sys : json_null(), user ? user : json_null());
    char *s = json_dumps(key, JSON_COMPACT | JSON_SORT_KEYS);
    char hex[17], *out = malloc(19);
    hash_hex(hash64(s, strlen(s), 0), hex);
    snprintf(out, 19, "p:%s", hex);
    free(s);
    json_decref(key);
    return out;
}

static void test_opencode_kinds_and_session(void **state)
{
    (void)state;
    static const struct {
        const char *file, *kind;
    } cases[] = {
        {"plain-01-title-request.json", "title"},
        {"plain-02-turn1-first-request.json", "main"},
        {"plain-06-turn3-after-bash-tool-result.json", "main"},
        {"reasoninter-06-interleaved-reasoning_content-final-request.json",
         "main"},
        {"compact-03-compaction-summary-request.json", "compaction"},
        {"compact-04-post-compaction-request.json", "main"},
    };
    struct classify_state *c = classify_new();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *fx = fixture(cases[i].file);
        json_t *body = json_object_get(fx, "body");
        const char *k = classify_kind(c, body);
        if (strcmp(k, cases[i].kind))
            fail_msg("%s: %s, expected %s", cases[i].file, k, cases[i].kind);
        char *s = classify_session(json_object_get(fx, "headers"), body);
        assert_string_equal(s, "ses_REDACTED");
        free(s);
        /* without the header: the prefix hash, equal across turns of one
         * conversation and different for the title request */
        json_t *none = json_object();
        char *a = classify_session(none, body);
        assert_int_equal(strncmp(a, "p:", 2), 0);
        assert_int_equal(strlen(a), 18);
        char *want = want_prefix_key(body);
        assert_string_equal(a, want);
        free(want);
        json_t *turn1 = fixture("plain-02-turn1-first-request.json");
        char *b = classify_session(none, json_object_get(turn1, "body"));
        if (i == 2 || i == 3)
            assert_string_equal(a, b);
        if (i == 0)
            assert_string_not_equal(a, b);
        free(a);
        free(b);
        json_decref(turn1);
        json_decref(none);
        json_decref(fx);
    }
    classify_free(c);
}

static void test_subagent_from_task_prompt(void **state)
{
    (void)state;
    struct classify_state *c = classify_new();
    json_t *child =
        json_pack("{s:[{s:s}], s:[{s:s, s:s}, {s:s, s:s}]}", "tools", "type",
                  "function", "messages", "role", "system", "content",
                  "You are a "
                  "subagent.",
                  "role", "user", "content", "Find every TODO in src/");
    assert_string_equal(classify_kind(c, child), "main");
    json_t *reply =
        json_pack("{s:[{s:s, s:{s:s, s:s}}]}", "tool_calls", "id", "t1",
                  "function", "name", "task", "arguments",
                  "{\"description\":\"todos\",\"prompt\":\"Find every TODO in "
                  "src/\",\"subagent_type\":\"general\"}");
    classify_learn(c, NULL, reply);
    assert_string_equal(classify_kind(c, child), "subagent");
    /* a different first message is still main */
    json_t *other =
        json_pack("{s:[{s:s}], s:[{s:s, s:s}]}", "tools", "type", "function",
                  "messages", "role", "user", "content", "Find every FIXME");
    assert_string_equal(classify_kind(c, other), "main");
    json_t *empty = json_object();
    assert_string_equal(classify_kind(c, empty), "other");
    json_decref(empty);
    json_decref(child);
    json_decref(reply);
    json_decref(other);
    classify_free(c);
}

/* The kind of a tool-less request with this system prompt. */
static const char *kind_of_system(const char *sys)
{
    json_t *b =
        json_pack("{s:[{s:s, s:s}, {s:s, s:s}]}", "messages", "role", "system",
                  "content", sys, "role", "user", "content", "hello");
    const char *k = classify_kind(NULL, b);
    json_decref(b);
    return k;
}

/* The case-insensitive search for the kind's phrases: at the start, the
 * end, in any case, after near misses that share its first letter, and
 * only within the first bytes (400 for "title" in a system prompt). */
static void test_kind_phrase_search(void **state)
{
    (void)state;
    assert_string_equal(kind_of_system("title"), "title");
    assert_string_equal(kind_of_system("Make a TITLE"), "title");
    assert_string_equal(kind_of_system("tttiTle"), "title");
    assert_string_equal(kind_of_system("tit titl TitlE"), "title");
    assert_string_equal(kind_of_system("ti tle, tit-le, titl"), "main");
    assert_string_equal(kind_of_system("t"), "main");
    assert_string_equal(kind_of_system(""), "main");
    assert_string_equal(kind_of_system("Please SUMMARIZE it"), "compaction");
    char pad[512];
    memset(pad, 'T', sizeof(pad));
    memcpy(pad + 395, "title", 6); /* ends at byte 400: inside */
    assert_string_equal(kind_of_system(pad), "title");
    memset(pad, 't', sizeof(pad));
    memcpy(pad + 396, "title", 6); /* ends at byte 401: outside */
    assert_string_equal(kind_of_system(pad), "main");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opencode_kinds_and_session),
        cmocka_unit_test(test_subagent_from_task_prompt),
        cmocka_unit_test(test_kind_phrase_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
