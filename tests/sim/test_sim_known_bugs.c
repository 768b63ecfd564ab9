/*
 * End-to-end: places where `fidelity sim` disagrees with docs/SIM.md and
 * the sim is at fault. Each test states the contract; it fails until the
 * sim is fixed, and then moves to the file of its subject. Kept apart so
 * the rest of tests/sim stays green meanwhile.
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

#include "util/simtest.h"

static void expect(char *got, const char *want)
{
    /* free before failing: fail_msg does not return */
    char msg[1024];
    bool bad = strcmp(got, want) != 0;
    snprintf(msg, sizeof(msg), "%s", got);
    free(got);
    if (bad)
        fail_msg("reply '%s', expected '%s'", msg, want);
}

/*
 * SIM.md, "Facts": the answer is "The ATTRIBUTE for ENTITY is VALUE." with
 * the entity as stated. The sim inserts an article: "door 5" comes back as
 * "the door 5".
 */
static void test_entity_without_article_is_answered_as_stated(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    expect(simt_ask(t, p,
                    simt_chat1("The code for door 5 is 3. What is the "
                               "code for door 5?")),
           "The code for door 5 is 3.");
}

/*
 * SIM.md, "Facts": a statement inside tool-call arguments is visible. The
 * arguments are rendered as JSON, so the statement's closing quote is
 * escaped, and the sim takes the backslash into VALUE:
 * "The room number for the guest is 214.\." instead of "... is 214.".
 */
static void test_fact_in_tool_arguments_value_is_clean(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *msgs =
        json_pack("[o,{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},o]",
                  simt_msg("user", "Look it up."), "role", "assistant",
                  "content", "tool_calls", "id", "call_1", "type", "function",
                  "function", "name", "lookup", "arguments",
                  "{\"note\": \"The room number for the guest is 214.\"}",
                  "role", "tool", "tool_call_id", "call_1", "content", "done",
                  simt_msg("user", "What is the room number for the guest?"));
    expect(simt_ask(t, p, simt_chat(msgs)),
           "The room number for the guest is 214.");
}

/*
 * SIM.md, "Endpoints": over the limit the sim gives vLLM's 400, "you
 * requested M tokens (P in the messages, C in the completion)". vLLM
 * checks P + max_tokens against max_model_len; the sim checks only P, so
 * a prompt that fits with a max_tokens that does not is served.
 */
static void test_overflow_error_counts_max_tokens(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--max-model-len", "64", "--overflow", "error", NULL);
    json_t *m = json_pack("[o]", simt_msg("user", "Rain fell on quiet hills."));
    long prompt = simt_count_messages(t, p, m);
    assert_true(prompt < 64);
    json_t *b = simt_chat(m);
    json_object_set_new(b, "max_tokens", json_integer(64 - prompt + 1));
    long st = 0;
    json_t *r = simt_postj(t, p, "/v1/chat/completions", b, &st);
    if (st != 400) {
        json_decref(r);
        fail_msg("%ld prompt tokens + %ld max_tokens > 64 answered HTTP %ld",
                 prompt, 64 - prompt + 1, st);
    }
    simt_assert_error(r, "maximum context length is 64 tokens");
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_entity_without_article_is_answered_as_stated),
        T(test_fact_in_tool_arguments_value_is_clean),
        T(test_overflow_error_counts_max_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
