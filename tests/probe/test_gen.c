/*
 * Tests for probe's generation, grid, scoring, classification and the
 * effective-length rules (src/probe/filler.c, gen.c, grid.c, score.c,
 * report.c), without any server.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

static char *all_text(const struct probe_case *c)
{
    char *s = json_dumps(c->messages, JSON_COMPACT);
    return s;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_filler_sources_differ_and_hold_no_facts(void **state)
{
    (void)state;
    struct buf b[FILLER_NSOURCES];
    for (int s = 0; s < FILLER_NSOURCES; s++) {
        buf_init(&b[s], 0);
        assert_int_equal(probe_filler(&b[s], s, 42, 20000), 0);
        assert_int_equal(b[s].len, 20000);
        assert_null(strstr(b[s].data, " is "));
        assert_null(strstr(b[s].data, "Let "));
        for (const char *p = b[s].data; *p; p++) {
            assert_true(*p == '\n' || (*p >= 32 && *p < 127));
            if (p[0] >= '0' && p[0] <= '9' && p[1] >= '0' && p[1] <= '9' &&
                p[2] >= '0' && p[2] <= '9' && p[3] >= '0' && p[3] <= '9')
                assert_false(p[4] >= '0' && p[4] <= '9');
        }
    }
    for (int s = 1; s < FILLER_NSOURCES; s++)
        assert_memory_not_equal(b[0].data, b[s].data, 200);
    /* Seeded: the same seed gives the same text, another seed other text. */
    struct buf again = BUF_INIT, other = BUF_INIT;
    probe_filler(&again, FILLER_PROSE, 42, 20000);
    probe_filler(&other, FILLER_PROSE, 43, 20000);
    assert_memory_equal(again.data, b[0].data, 20000);
    assert_memory_not_equal(other.data, b[0].data, 200);
    /* Not one sentence repeated: many distinct lines. */
    size_t lines = count(b[0].data, "\n");
    assert_true(lines > 50);
    buf_release(&again);
    buf_release(&other);
    for (int s = 0; s < FILLER_NSOURCES; s++)
        buf_release(&b[s]);
}

static struct probe_spec spec(enum probe_kind k, unsigned target, int depth,
                              int variant)
{
    struct probe_spec s = {.kind = k,
                           .length = target,
                           .target = target,
                           .depth = depth,
                           .variant = variant,
                           .seed = 0x1234 + (uint64_t)k * 7 + (uint64_t)depth};
    return s;
}

static void test_needle_fact_at_depth(void **state)
{
    (void)state;
    struct probe_case c;
    memset(&c, 0, sizeof(c));
    for (int depth = 0; depth <= 100; depth += 50) {
        struct probe_spec s = spec(PROBE_NEEDLE, 8192, depth, 0);
        probe_case_build(&c, &s, 24000);
        char *t = all_text(&c);
        char fact[64];
        snprintf(fact, sizeof(fact), " is %s.", c.expect);
        assert_int_equal(count(t, fact), 1);
        /* The fact sits at about `depth` of the filler. */
        double at = (double)(strstr(t, fact) - t) / (double)strlen(t);
        assert_true(at > depth / 100.0 - 0.12 && at < depth / 100.0 + 0.12);
        /* The question is the last user message, in the sim's grammar. */
        json_t *last =
            json_array_get(c.messages, json_array_size(c.messages) - 1);
        const char *q = json_string_value(json_object_get(last, "content"));
        assert_true(!strncmp(q, "What is the ", 12));
        assert_int_equal(c.filler, 24000);
        free(t);
    }
    /* Deterministic: the same spec builds the same messages. */
    struct probe_case d;
    memset(&d, 0, sizeof(d));
    struct probe_spec s = spec(PROBE_NEEDLE, 8192, 50, 0);
    probe_case_build(&c, &s, 24000);
    probe_case_build(&d, &s, 24000);
    assert_true(json_equal(c.messages, d.messages));
    probe_case_release(&c);
    probe_case_release(&d);
}

static void test_multi_needle_ordinal_and_distractors(void **state)
{
    (void)state;
    struct probe_case c;
    memset(&c, 0, sizeof(c));
    static const char *const ord[] = {"first", "second", "third", "fourth"};
    for (int depth = 0; depth <= 100; depth += 50) {
        struct probe_spec s = spec(PROBE_MULTI, 8192, depth, 0);
        probe_case_build(&c, &s, 24000);
        assert_int_equal(c.n_distract, 3);
        char *t = all_text(&c);
        /* The statements appear in order and the asked one is the k-th. */
        const char *pos[4];
        const char *vals[4] = {NULL};
        size_t k = 0;
        const char *want = ord[(depth * 3 + 50) / 100];
        json_t *last =
            json_array_get(c.messages, json_array_size(c.messages) - 1);
        const char *q = json_string_value(json_object_get(last, "content"));
        assert_non_null(strstr(q, want));
        for (size_t i = 0; i < 3; i++)
            vals[i] = c.distract[i];
        for (size_t i = 0; i < 4; i++) {
            const char *v = i < 3 ? vals[i] : c.expect;
            pos[i] = strstr(t, v);
            assert_non_null(pos[i]);
        }
        for (size_t i = 0; i < 3; i++)
            if (pos[i] < pos[3])
                k++;
        assert_int_equal(k, (size_t)((depth * 3 + 50) / 100));
        free(t);
    }
    probe_case_release(&c);
}

static void test_kinds_build(void **state)
{
    (void)state;
    struct probe_case c;
    memset(&c, 0, sizeof(c));
    /* Reasoning: the fact is only in reasoning_content for the field
     * variants, in <think> content inline, absent when omitted. */
    for (int v = 0; v < PROBE_RV_COUNT; v++) {
        struct probe_spec s = spec(PROBE_REASONING, 4096, 50, v);
        probe_case_build(&c, &s, 10000);
        char *t = all_text(&c);
        size_t n = count(t, c.expect);
        if (v == PROBE_RV_OMITTED) {
            assert_int_equal(n, 0);
            assert_true(c.control);
        } else {
            assert_int_equal(n, 1);
            const char *at = strstr(t, c.expect);
            const char *rc = strstr(t, "reasoning_content");
            const char *th = strstr(t, "<think>");
            if (v == PROBE_RV_FIELD || v == PROBE_RV_FIELD_TOOLS)
                assert_true(rc && rc < at && !th);
            else
                assert_true(th && th < at);
        }
        assert_int_equal(c.tools != NULL, v == PROBE_RV_FIELD_TOOLS ||
                                              v == PROBE_RV_INLINE_TOOLS);
        free(t);
    }
    /* Tool: the fact in the arguments of a tool call, or in a tool result. */
    struct probe_spec s = spec(PROBE_TOOL, 4096, 50, PROBE_TV_ARGS);
    probe_case_build(&c, &s, 10000);
    char *t = all_text(&c);
    assert_non_null(strstr(t, "\"arguments\":\"{\\\"note\\\": \\\"The"));
    assert_non_null(c.tools);
    free(t);
    s = spec(PROBE_TOOL, 4096, 50, PROBE_TV_RESULT);
    probe_case_build(&c, &s, 10000);
    t = all_text(&c);
    assert_non_null(strstr(t, "\"role\":\"tool\",\"tool_call_id\""));
    free(t);
    /* First message: the request comes first, follow-ups build on it. */
    s = spec(PROBE_FIRST, 4096, -1, 0);
    probe_case_build(&c, &s, 10000);
    const char *first = json_string_value(
        json_object_get(json_array_get(c.messages, 1), "content"));
    assert_non_null(strstr(first, c.expect));
    assert_true(c.expect_words);
    /* Canary: a nonce in every message. */
    s = spec(PROBE_CANARY, 4096, 50, PROBE_CV_USER);
    probe_case_build(&c, &s, 10000);
    size_t i;
    json_t *m;
    json_array_foreach(c.messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *ct = json_string_value(json_object_get(m, "content"));
        if (i + 1 == json_array_size(c.messages) ||
            json_object_get(m, "tool_calls"))
            continue;
        assert_non_null(strstr(ct, "The canary for"));
        if (!strcmp(role, "assistant"))
            assert_non_null(strstr(
                json_string_value(json_object_get(m, "reasoning_content")),
                "The canary for reasoning turn"));
    }
    /* Variables: a chain of assignments and a distractor chain. */
    s = spec(PROBE_VARIABLES, 4096, 0, 0);
    probe_case_build(&c, &s, 10000);
    t = all_text(&c);
    assert_int_equal(count(t, "Let Q"), 7);
    assert_int_equal(count(t, c.expect), 1);
    assert_int_equal(count(t, c.distract[0]), 1);
    free(t);
    probe_case_release(&c);
}

static void test_score(void **state)
{
    (void)state;
    struct probe_case c;
    memset(&c, 0, sizeof(c));
    strcpy(c.expect, "482913");
    assert_true(probe_score(&c, "The access code for the blue door is "
                                "482913."));
    assert_true(probe_score(&c, "It is 482,913."));
    assert_false(probe_score(&c, "It is 1482913."));
    assert_false(probe_score(&c, "It is 4829130."));
    assert_false(probe_score(&c, NULL));
    strcpy(c.distract[0], "555111");
    c.n_distract = 1;
    /* A distractor is never counted as correct, even next to the answer. */
    assert_false(probe_score(&c, "Either 555111 or 482913."));
    assert_false(probe_score(&c, "555111"));
    c.control = true;
    assert_true(probe_score(&c, "I don't see any earlier message."));
    assert_false(probe_score(&c, "482913"));
    memset(&c, 0, sizeof(c));
    strcpy(c.expect, "snake game");
    c.expect_words = true;
    assert_true(probe_score(&c, "You asked for a Snake Game."));
    assert_false(probe_score(&c, "You asked for a score counter."));

    assert_true(probe_has_no_context(
        "I don't see any earlier message about that; this looks like the "
        "start of our conversation."));
    assert_true(probe_has_no_context("This is the very first message of "
                                     "our conversation, so I don't know"));
    assert_true(probe_has_no_context("I don\xe2\x80\x99t have access to "
                                     "previous messages."));
    assert_false(probe_has_no_context("The access code is 482913."));
    assert_false(probe_has_no_context(NULL));
}

static void test_classify(void **state)
{
    (void)state;
    struct probe_reply r;
    memset(&r, 0, sizeof(r));
    r.prompt_tokens = 8192;
    assert_int_equal(probe_classify(false, &r, 16000, 0.02), PROBE_TRUNCATED);
    assert_int_equal(probe_classify(true, &r, 16000, 0.02), PROBE_PASS);
    r.prompt_tokens = 16000;
    assert_int_equal(probe_classify(false, &r, 16000, 0.02), PROBE_MISSED);
    strcpy(r.finish, "length");
    assert_int_equal(probe_classify(false, &r, 16000, 0.02), PROBE_CLIPPED);
    r.err = -ECONNREFUSED;
    assert_int_equal(probe_classify(false, &r, 16000, 0.02), PROBE_ERROR);
    /* No usage reported: cannot call it truncated. */
    memset(&r, 0, sizeof(r));
    r.prompt_tokens = -1;
    assert_int_equal(probe_classify(false, &r, 16000, 0.02), PROBE_MISSED);
}

static void test_grid_profiles(void **state)
{
    (void)state;
    struct probe_grid_opts o = {.profile = PROBE_QUICK,
                                .max_context = 131072,
                                .max_tokens = 256,
                                .seed = 1,
                                .model_len = 131072};
    struct probe_spec *s;
    size_t n, nq, ns;
    struct diag d;
    assert_int_equal(probe_grid_build(&o, &s, &nq, &d), 0);
    /* quick: about 60 requests, at 1k, the middle and the longest length */
    assert_true(nq <= 60);
    bool has1k = false, has128k = false;
    for (size_t i = 0; i < nq; i++) {
        has1k |= s[i].length == 1024;
        has128k |= s[i].length == 131072;
        /* room for the reply at the model's limit */
        assert_true(s[i].target + 256 <= 131072);
    }
    assert_true(has1k && has128k);
    free(s);
    o.profile = PROBE_STANDARD;
    assert_int_equal(probe_grid_build(&o, &s, &ns, &d), 0);
    assert_true(ns > nq);
    free(s);
    /* Options narrow the grid; temperature > 0 repeats 3 times. */
    unsigned L[] = {1024, 2048};
    int D[] = {0, 100};
    double T[] = {0, 0.7};
    o.lengths = L;
    o.n_lengths = 2;
    o.depths = D;
    o.n_depths = 2;
    o.temps = T;
    o.n_temps = 2;
    o.kinds = 1u << PROBE_NEEDLE;
    assert_int_equal(probe_grid_build(&o, &s, &n, &d), 0);
    assert_int_equal(n, 2 * 2 * (1 + 3));
    /* The same case at both temperatures has the same content seed. */
    assert_true(s[0].seed == s[1].seed && s[0].temperature != s[1].temperature);
    char k1[17], k2[17], k3[17];
    probe_spec_key(&s[0], "m", 256, "", "fpA", k1);
    probe_spec_key(&s[1], "m", 256, "", "fpA", k2);
    probe_spec_key(&s[0], "m", 256, "", "fpB", k3);
    assert_string_not_equal(k1, k2);
    assert_string_not_equal(k1, k3);
    probe_spec_key(&s[0], "m", 256, "", "fpA", k2);
    assert_string_equal(k1, k2);
    free(s);
    unsigned bad[] = {100};
    o.lengths = bad;
    o.n_lengths = 1;
    assert_int_equal(probe_grid_build(&o, &s, &n, &d), -EINVAL);
    assert_non_null(strstr(d.msg, "100"));
}

static void test_effective_length(void **state)
{
    (void)state;
    unsigned L[] = {1024, 2048, 4096, 8192, 16384};
    double r1[] = {1, 1, 0.9, 0.5, 0.9};
    /* RULER: the longest length before the first one below 85.6%. */
    assert_int_equal(probe_effective_ruler(L, r1, 5, 0.856), 4096);
    double r2[] = {0.8, 1, 1, 1, 1};
    assert_int_equal(probe_effective_ruler(L, r2, 5, 0.856), 0);
    /* NoLiMa: 85% of the mean of the three shortest (0.6): 0.51. */
    double r3[] = {0.6, 0.6, 0.6, 0.52, 0.5}, base;
    assert_int_equal(probe_effective_nolima(L, r3, 5, &base), 8192);
    assert_true(base > 0.5999 && base < 0.6001);
    assert_int_equal(probe_effective_ruler(L, r3, 5, 0.856), 0);
    /* 5% and 0% pass rates at every length: below the shortest length
     * tested by both rules (NoLiMa's 85% of a 5% base is 4.25%, which every
     * length reaches: not an effective length) */
    double r5[] = {0.05, 0.05, 0.05, 0.05, 0.05}, r0[] = {0, 0, 0, 0, 0};
    assert_int_equal(probe_effective_ruler(L, r5, 5, 0.856), 0);
    assert_int_equal(probe_effective_nolima(L, r5, 5, &base), 0);
    assert_true(base > 0.0499 && base < 0.0501);
    assert_int_equal(probe_effective_ruler(L, r0, 5, 0.856), 0);
    assert_int_equal(probe_effective_nolima(L, r0, 5, &base), 0);
    /* a 5% rate that rises later does not make an effective length */
    double r6[] = {0.05, 0.05, 0.05, 1, 1};
    assert_int_equal(probe_effective_ruler(L, r6, 5, 0.856), 0);
    assert_int_equal(probe_effective_nolima(L, r6, 5, &base), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filler_sources_differ_and_hold_no_facts),
        cmocka_unit_test(test_needle_fact_at_depth),
        cmocka_unit_test(test_multi_needle_ordinal_and_distractors),
        cmocka_unit_test(test_kinds_build),
        cmocka_unit_test(test_score),
        cmocka_unit_test(test_classify),
        cmocka_unit_test(test_grid_profiles),
        cmocka_unit_test(test_effective_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
