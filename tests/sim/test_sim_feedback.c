/*
 * End-to-end: the feedback-loop fault (docs/SIM.md, "The feedback loop")
 * and GET /sim/last-request. The fault's reasoning grows with the
 * reasoning already in the conversation, with reasoning_effort and at low
 * temperature; once the reasoning in context passes the budget, a fact
 * from the first turn is no longer recalled. Without --feedback-base the
 * sim's reasoning stays what it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

#define FACT "The access code for the blue door is 4812."
#define ASK "What is the access code for the blue door?"

/* A conversation: the fact, then `k` assistant turns each carrying
 * `rtok` tokens of reasoning (approximately: 'step ' is one token and a
 * space), then the question. */
static json_t *convo(size_t k, size_t rtok, const char *effort, double temp)
{
    json_t *m = json_array();
    json_array_append_new(m, simt_msg("user", FACT));
    for (size_t i = 0; i < k; i++) {
        char *r = xcalloc(rtok * 5 + 1, 1);
        for (size_t j = 0; j < rtok; j++)
            memcpy(r + j * 5, "step ", 5);
        json_t *a = simt_msg("assistant", "Done.");
        json_object_set_new(a, "reasoning_content", json_string(r));
        free(r);
        json_array_append_new(m, a);
        json_array_append_new(m, simt_msg("user", "Now refactor it."));
    }
    json_array_append_new(m, simt_msg("user", ASK));
    json_t *b = simt_chat(m);
    json_object_set_new(b, "temperature", json_real(temp));
    json_object_set_new(b, "seed", json_integer(7));
    if (effort)
        json_object_set_new(b, "reasoning_effort", json_string(effort));
    return b;
}

struct ans {
    size_t reasoning; /* bytes */
    bool recalled;
};

static struct ans ask(struct simt *t, const struct proc *p, json_t *body)
{
    json_t *r = simt_ok(t, p, "/v1/chat/completions", body);
    json_t *m = json_object_get(
        json_array_get(json_object_get(r, "choices"), 0), "message");
    const char *rc = json_string_value(json_object_get(m, "reasoning_content"));
    const char *c = json_string_value(json_object_get(m, "content"));
    struct ans a = {rc ? strlen(rc) : 0, c && strstr(c, "4812")};
    json_decref(r);
    return a;
}

static void
test_reasoning_grows_with_context_effort_and_low_temperature(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--feedback-base", "40", "--feedback-budget", "100000",
                   "--feedback-jitter", "0", "--feedback-max", "100000", NULL);
    struct ans none = ask(t, p, convo(0, 0, "high", 0.6));
    struct ans some = ask(t, p, convo(2, 200, "high", 0.6));
    struct ans more = ask(t, p, convo(4, 200, "high", 0.6));
    assert_true(none.reasoning > 0);
    assert_true(some.reasoning > none.reasoning * 3 / 2);
    assert_true(more.reasoning > some.reasoning * 5 / 4);
    struct ans max = ask(t, p, convo(2, 200, "max", 0.6));
    assert_true(max.reasoning > some.reasoning * 3 / 2);
    struct ans cold = ask(t, p, convo(2, 200, "high", 0.2));
    assert_true(cold.reasoning > some.reasoning * 5 / 4);
    /* all recall: the budget is far away */
    assert_true(none.recalled && some.recalled && more.recalled &&
                max.recalled && cold.recalled);
}

static void test_recall_fails_past_the_budget(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--feedback-base", "40", "--feedback-budget",
                                "1000", "--feedback-window", "256", NULL);
    /* 4 x 200 = 800 tokens of reasoning in context: within the budget */
    assert_true(ask(t, p, convo(4, 200, "high", 0.2)).recalled);
    /* 6 x 200 = 1200: past it, the first turn is out of sight */
    assert_false(ask(t, p, convo(6, 200, "high", 0.2)).recalled);
    /* the same conversation with its reasoning dropped by the template */
    struct proc *q = simt_start(t, "--feedback-base", "40", "--feedback-budget",
                                "1000", "--feedback-window", "256",
                                "--reasoning-history", "drop", NULL);
    assert_true(ask(t, q, convo(6, 200, "high", 0.2)).recalled);
}

static void test_off_by_default(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    struct ans a = ask(t, p, convo(0, 0, "max", 0.2));
    struct ans b = ask(t, p, convo(8, 400, "max", 0.2));
    assert_true(a.recalled && b.recalled);
    /* the plain rule reasoning: one sentence, the same length */
    assert_true(a.reasoning > 0 && a.reasoning < 120);
    assert_true(b.reasoning < 120);
}

static void test_last_request_is_the_body_received(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long status = 0;
    json_t *none = simt_get(t, p, "/sim/last-request", &status);
    assert_int_equal(status, 404);
    json_decref(none);
    json_t *body = convo(1, 3, "high", 0.2);
    json_object_set_new(body, "chat_template_kwargs",
                        json_pack("{s:b}", "thinking", 1));
    json_t *copy = json_deep_copy(body);
    json_decref(simt_ok(t, p, "/v1/chat/completions", body));
    json_t *got = simt_get(t, p, "/sim/last-request", &status);
    assert_int_equal(status, 200);
    assert_true(json_equal(got, copy));
    json_decref(got);
    json_decref(copy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_reasoning_grows_with_context_effort_and_low_temperature,
            simt_setup, simt_teardown),
        cmocka_unit_test_setup_teardown(test_recall_fails_past_the_budget,
                                        simt_setup, simt_teardown),
        cmocka_unit_test_setup_teardown(test_off_by_default, simt_setup,
                                        simt_teardown),
        cmocka_unit_test_setup_teardown(test_last_request_is_the_body_received,
                                        simt_setup, simt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
