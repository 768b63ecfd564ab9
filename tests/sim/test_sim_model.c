/*
 * End-to-end: the sim's rule-based "model" (docs/SIM.md, "The model"): facts
 * and fact questions with ordinals, variable chains, the first-message
 * question, the "don't see" and follow-up replies, tool calls, reasoning and
 * temperature prefixes. A healthy sim sees everything, so every stated fact
 * is answered; the fault tests check what each fault hides.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

#define FOLLOWUP_FIRST                                                         \
    "This is the very first message of our conversation, so I don't know "     \
    "what \"that\" refers to."

/* Sends user, assistant, user, ... (NULL-terminated) and returns the reply. */
static char *ask_turns(struct simt *t, const struct proc *p, ...)
{
    json_t *msgs = json_array();
    va_list ap;
    int i = 0;
    va_start(ap, p);
    for (const char *s; (s = va_arg(ap, const char *)); i++)
        json_array_append_new(msgs, simt_msg(i % 2 ? "assistant" : "user", s));
    va_end(ap);
    return simt_ask(t, p, simt_chat(msgs));
}

static void assert_reply(char *got, const char *want)
{
    /* free before failing: fail_msg does not return */
    char msg[1024];
    bool bad = strcasecmp(got, want) != 0;
    snprintf(msg, sizeof(msg), "%s", got);
    free(got);
    if (bad)
        fail_msg("reply '%s', expected '%s'", msg, want);
}

static void test_fact_is_answered(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_reply(ask_turns(t, p, "The access code for the blue door is 4812.",
                           "Noted.",
                           "What is the access code for the blue door?", NULL),
                 "The access code for the blue door is 4812.");
    /* "of" works like "for"; matching ignores case */
    char *r = ask_turns(t, p, "The Colour of the Old Car is red.", "Noted.",
                        "What is the colour of the old car?", NULL);
    assert_non_null(strstr(r, "red"));
    assert_string_not_equal(r, SIM_DONT_SEE);
    free(r);
}

static void test_fact_ordinals(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    const char *facts = "The PIN for the safe is 1111. Later: The PIN for "
                        "the safe is 2222. Finally: The PIN for the safe is "
                        "3333.";
    static const struct {
        const char *q, *v;
    } cases[] = {
        {"What is the PIN for the safe?", "3333"},
        {"What is the first PIN for the safe?", "1111"},
        {"What is the second PIN for the safe?", "2222"},
        {"What is the third PIN for the safe?", "3333"},
        {"What is the 1st PIN for the safe?", "1111"},
        {"What is the 2nd PIN for the safe?", "2222"},
        {"What is the last PIN for the safe?", "3333"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char *r = ask_turns(t, p, facts, "Noted.", cases[i].q, NULL);
        /* the value; not the ordinal in between ("The 2nd PIN ...") */
        char want[128];
        snprintf(want, sizeof(want), " for the safe is %s.", cases[i].v);
        size_t rl = strlen(r), wl = strlen(want);
        if (rl < wl || strcmp(r + rl - wl, want) || strncmp(r, "The ", 4))
            fail_msg("'%s': reply '%s', expected it to end '%s'", cases[i].q, r,
                     want);
        free(r);
    }
}

static void test_fact_in_every_visible_place(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    /* system */
    json_t *m = json_pack("[o,o]",
                          simt_msg("system", "The vault number for the bank "
                                             "is 77."),
                          simt_msg("user", "What is the vault number for the "
                                           "bank?"));
    assert_reply(simt_ask(t, p, simt_chat(m)),
                 "The vault number for the bank is 77.");
    /* assistant content */
    assert_reply(ask_turns(t, p, "Tell me something.",
                           "The gate code for the farm is 5150.",
                           "What is the gate code for the farm?", NULL),
                 "The gate code for the farm is 5150.");
    /* rendered reasoning (default policy keeps it) */
    m = json_pack("[o,{s:s,s:s,s:s},o]", simt_msg("user", "Think."), "role",
                  "assistant", "content", "Done.", "reasoning_content",
                  "The locker code for the gym is 9090.",
                  simt_msg("user", "What is the locker code for the gym?"));
    assert_reply(simt_ask(t, p, simt_chat(m)),
                 "The locker code for the gym is 9090.");
}

static void test_variable_chain(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_reply(ask_turns(t, p, "Let X = 123.", "Ok.", "Let Y = X.", "Ok.",
                           "Let Z = Y.", "Ok.", "What is the value of Z?",
                           NULL),
                 "The value of Z is 123.");
}

static void test_first_message_question(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_reply(ask_turns(t, p, "Please plan a trip to Rome.", "Sure.",
                           "Add a day in Florence.", "Done.",
                           "What did my first message ask for?", NULL),
                 "Your first message asked: \"Please plan a trip to Rome.\".");
}

static void test_not_visible_replies(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_reply(simt_ask(t, p,
                          simt_chat1("What is the access code for the "
                                     "blue door?")),
                 SIM_DONT_SEE);
    assert_reply(simt_ask(t, p, simt_chat1("What is the value of Q?")),
                 SIM_DONT_SEE);
    assert_reply(simt_ask(t, p,
                          simt_chat1("Now do the same for the red "
                                     "door.")),
                 FOLLOWUP_FIRST);
    assert_reply(simt_ask(t, p, simt_chat1("and then what?")), FOLLOWUP_FIRST);
    /* a chain with a missing link */
    assert_reply(
        ask_turns(t, p, "Let B = A.", "Ok.", "What is the value of B?", NULL),
        SIM_DONT_SEE);
    /* a follow-up with an earlier user message is not the "first" reply */
    char *r = ask_turns(t, p, "Rain fell on quiet hills.", "Ok.",
                        "Now say it again.", NULL);
    assert_string_not_equal(r, FOLLOWUP_FIRST);
    free(r);
}

static void test_other_requests_get_a_deterministic_reply(void **state)
{
    struct simt *t = *state;
    struct proc *p1 = simt_start(t, NULL);
    struct proc *p2 = simt_start(t, NULL);
    char *a = simt_ask(t, p1, simt_chat1("Describe a calm harbour."));
    char *b = simt_ask(t, p2, simt_chat1("Describe a calm harbour."));
    assert_string_equal(a, b);
    assert_true(strlen(a) > 0);
    assert_string_not_equal(a, SIM_DONT_SEE);
    free(a);
    free(b);
}

static json_t *weather_tool(void)
{
    return json_pack("[{s:s,s:{s:s,s:{s:s,s:{s:{s:s}}}}}]", "type", "function",
                     "function", "name", "get_weather", "parameters", "type",
                     "object", "properties", "city", "type", "string");
}

static void test_tool_call_and_tool_result(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    const char *ask = "Call the get_weather tool with {\"city\": \"Paris\"}.";
    json_t *b = simt_chat1(ask);
    json_object_set_new(b, "tools", weather_tool());
    json_t *r = simt_ok(t, p, "/v1/chat/completions", b);
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                        "tool_calls");
    json_t *tc = json_array_get(
        json_object_get(json_object_get(c, "message"), "tool_calls"), 0);
    assert_true(json_is_string(json_object_get(tc, "id")));
    assert_string_equal(json_string_value(json_object_get(tc, "type")),
                        "function");
    json_t *fn = json_object_get(tc, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")),
                        "get_weather");
    /* OpenAI: arguments is a JSON-encoded string */
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    assert_non_null(args);
    json_t *aj = json_loads(args, 0, NULL);
    assert_non_null(aj);
    assert_string_equal(json_string_value(json_object_get(aj, "city")),
                        "Paris");
    json_decref(aj);
    const char *id = json_string_value(json_object_get(tc, "id"));

    /* after the tool's result */
    json_t *msgs =
        json_pack("[o,{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s}]",
                  simt_msg("user", ask), "role", "assistant", "content",
                  "tool_calls", "id", id, "type", "function", "function",
                  "name", "get_weather", "arguments", args, "role", "tool",
                  "tool_call_id", id, "content", "sunny and 21 degrees");
    b = simt_chat(msgs);
    json_object_set_new(b, "tools", weather_tool());
    assert_reply(simt_ask(t, p, b), "The tool returned: sunny and 21 degrees.");
    json_decref(r);

    /* no tools offered: no tool call */
    r = simt_ok(t, p, "/v1/chat/completions", simt_chat1(ask));
    c = json_array_get(json_object_get(r, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                        "stop");
    json_t *none = json_object_get(json_object_get(c, "message"), "tool_calls");
    assert_true(none == NULL || json_is_null(none) ||
                json_array_size(none) == 0);
    json_decref(r);
}

static void test_facts_in_tool_results(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *msgs = json_pack(
        "[o,{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},o]",
        simt_msg("user", "Look it up."), "role", "assistant", "content",
        "tool_calls", "id", "call_1", "type", "function", "function", "name",
        "lookup", "arguments", "{\"q\": \"guest\"}", "role", "tool",
        "tool_call_id", "call_1", "content", "The floor of the guest is 2.",
        simt_msg("user", "What is the floor of the guest?"));
    assert_reply(simt_ask(t, p, simt_chat(msgs)),
                 "The floor for the guest is 2.");
}

/*
 * SIM.md, "Facts": the answer is "The ATTRIBUTE for ENTITY is VALUE." with
 * the entity as stated. Regression: "door 5" once came back as "the door 5".
 */
static void test_entity_without_article_is_answered_as_stated(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_reply(simt_ask(t, p,
                          simt_chat1("The code for door 5 is 3. What is the "
                                     "code for door 5?")),
                 "The code for door 5 is 3.");
}

/*
 * SIM.md, "Facts": a statement inside tool-call arguments is visible. The
 * arguments are rendered as JSON, so the statement's closing quote is
 * escaped; VALUE still ends at the full stop. Regression: the sim once
 * answered "The room number for the guest is 214.\.".
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
    assert_reply(simt_ask(t, p, simt_chat(msgs)),
                 "The room number for the guest is 214.");
}

static json_t *reasoning_of(json_t *r)
{
    json_t *m = json_object_get(
        json_array_get(json_object_get(r, "choices"), 0), "message");
    return json_object_get(m, "reasoning_content");
}

static void test_reasoning_when_asked(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    struct proc *pr = simt_start(t, "--reasoning", NULL);
    json_t *b = simt_chat1("Describe a calm harbour.");
    json_object_set_new(b, "reasoning_effort", json_string("low"));
    json_t *r = simt_ok(t, p, "/v1/chat/completions", b);
    assert_true(json_string_length(reasoning_of(r)) > 0);
    json_decref(r);

    b = simt_chat1("Describe a calm harbour.");
    json_object_set_new(b, "chat_template_kwargs",
                        json_pack("{s:b}", "enable_thinking", 1));
    r = simt_ok(t, p, "/v1/chat/completions", b);
    assert_true(json_string_length(reasoning_of(r)) > 0);
    json_decref(r);

    b = simt_chat1("Describe a calm harbour.");
    json_object_set_new(b, "chat_template_kwargs",
                        json_pack("{s:b}", "thinking", 1));
    r = simt_ok(t, p, "/v1/chat/completions", b);
    assert_true(json_string_length(reasoning_of(r)) > 0);
    json_decref(r);

    r = simt_ok(t, p, "/v1/chat/completions",
                simt_chat1("Describe a calm harbour."));
    json_t *none = reasoning_of(r);
    assert_true(none == NULL || json_is_null(none));
    json_decref(r);

    r = simt_ok(t, pr, "/v1/chat/completions",
                simt_chat1("Describe a calm harbour."));
    assert_true(json_string_length(reasoning_of(r)) > 0);
    json_decref(r);
}

/* Replies for temperature 1 and seeds 0..n-1; returns how many differ from
 * the temperature-0 reply. */
static int prefixed_replies(struct simt *t, const struct proc *p, int n)
{
    const char *q = "The access code for the blue door is 4812. What is the "
                    "access code for the blue door?";
    char *plain = simt_ask(t, p, simt_chat1(q));
    int differ = 0;
    for (int s = 0; s < n; s++) {
        json_t *b = simt_chat1(q);
        json_object_set_new(b, "temperature", json_real(1.0));
        json_object_set_new(b, "seed", json_integer(s));
        char *r = simt_ask(t, p, b);
        if (strcmp(r, plain)) {
            differ++;
            /* a prefix: the plain reply still ends the text */
            assert_true(strlen(r) > strlen(plain));
            assert_string_equal(r + strlen(r) - strlen(plain), plain);
        }
        free(r);
    }
    free(plain);
    return differ;
}

static void test_temperature_prefixes_and_seed(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    assert_true(prefixed_replies(t, p, 8) > 0);
    /* the same seed gives the same reply */
    json_t *b = simt_chat1("Describe a calm harbour.");
    json_object_set_new(b, "temperature", json_real(0.8));
    json_object_set_new(b, "seed", json_integer(5));
    char *a1 = simt_ask(t, p, json_deep_copy(b));
    char *a2 = simt_ask(t, p, b);
    assert_string_equal(a1, a2);
    free(a1);
    free(a2);
}

static void test_ignore_temperature(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--ignore-temperature", NULL);
    assert_int_equal(prefixed_replies(t, p, 8), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_fact_is_answered),
        T(test_fact_ordinals),
        T(test_fact_in_every_visible_place),
        T(test_variable_chain),
        T(test_first_message_question),
        T(test_not_visible_replies),
        T(test_other_requests_get_a_deterministic_reply),
        T(test_tool_call_and_tool_result),
        T(test_facts_in_tool_results),
        T(test_entity_without_article_is_answered_as_stated),
        T(test_fact_in_tool_arguments_value_is_clean),
        T(test_reasoning_when_asked),
        T(test_temperature_prefixes_and_seed),
        T(test_ignore_temperature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
