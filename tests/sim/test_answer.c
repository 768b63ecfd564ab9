/*
 * Tests for sim/answer and sim/tmpl: what the model answers from what it can
 * see, after each message-level and token-level fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sim/answer.h"
#include "sim/config.h"
#include "sim/tmpl.h"

/* Renders msgs (JSON text) under cfg, truncates to limit with overflow,
 * and returns the reply content in out (caller releases). */
static void ask(const char *msgs, const struct sim_config *cfg, size_t limit,
                long overflow, struct answer_out *out)
{
    json_error_t e;
    json_t *m = json_loads(msgs, 0, &e);
    struct tok_vec t;
    struct diag d;
    assert_non_null(m);
    tok_vec_init(&t);
    assert_int_equal(tmpl_render(m, false, true, cfg, &t, &d), 0);
    if (limit)
        tmpl_truncate(&t, limit, overflow);
    struct answer_in in = {
        .toks = t.v, .n = t.n, .window = (size_t)cfg->forget_after};
    answer_out_init(out);
    answer_write(&in, out);
    tok_vec_release(&t);
    json_decref(m);
}

static const char FACT[] =
    "[{\"role\":\"user\",\"content\":\"The access code for the blue door "
    "is 4812. Also the access code for the blue door is 7391.\"},"
    "{\"role\":\"assistant\",\"content\":\"Noted.\"},"
    "{\"role\":\"user\",\"content\":\"%s\"}]";

static void check(const char *question, const char *want)
{
    char msgs[1024];
    struct sim_config c;
    struct answer_out r;
    sim_config_defaults(&c);
    snprintf(msgs, sizeof(msgs), FACT, question);
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, want);
    answer_out_release(&r);
}

static void test_fact_questions(void **state)
{
    (void)state;
    check("What is the access code for the blue door?",
          "The access code for the blue door is 7391.");
    check("What is the first access code for the blue door?",
          "The 1st access code for the blue door is 4812.");
    check("What is the 2nd access code for the blue door?",
          "The 2nd access code for the blue door is 7391.");
    check("What is the 3rd access code for the blue door?",
          "I only see 2 access code for the blue door.");
    check("What is the access code for the red door?", ANSWER_NOT_SEEN);
}

static void test_variables_and_first_message(void **state)
{
    (void)state;
    struct sim_config c;
    struct answer_out r;
    sim_config_defaults(&c);
    ask("[{\"role\":\"user\",\"content\":\"Let a = 17.\"},"
        "{\"role\":\"user\",\"content\":\"Let b = a.\"},"
        "{\"role\":\"user\",\"content\":\"What is the value of b?\"}]",
        &c, 0, 0, &r);
    assert_string_equal(r.content.data, "The value of b is 17.");
    answer_out_release(&r);
    ask("[{\"role\":\"user\",\"content\":\"write a tic tac toe game\"},"
        "{\"role\":\"assistant\",\"content\":\"ok\"},"
        "{\"role\":\"user\",\"content\":\"What did my first message ask "
        "for?\"}]",
        &c, 0, 0, &r);
    assert_string_equal(r.content.data,
                        "Your first message asked: \"write a tic tac toe "
                        "game\".");
    answer_out_release(&r);
}

static const char FOLLOW[] =
    "[{\"role\":\"user\",\"content\":\"write a tic tac toe game\"},"
    "{\"role\":\"assistant\",\"content\":\"ok\"},"
    "{\"role\":\"user\",\"content\":\"to a file\"}]";

static void test_keep_last_turns_gives_first_message_reply(void **state)
{
    (void)state;
    struct sim_config c;
    struct answer_out r;
    sim_config_defaults(&c);
    ask(FOLLOW, &c, 0, 0, &r);
    assert_non_null(strstr(r.content.data, "tic tac toe"));
    answer_out_release(&r);
    c.keep_last_turns = 1;
    ask(FOLLOW, &c, 0, 0, &r);
    assert_string_equal(r.content.data, ANSWER_FIRST_MESSAGE);
    answer_out_release(&r);
}

static void test_truncation_and_forgetting(void **state)
{
    (void)state;
    struct sim_config c;
    struct answer_out r;
    char msgs[4096], filler[2048];
    memset(filler, 0, sizeof(filler));
    for (int i = 0; i < 100; i++)
        strcat(filler, "lorem ipsum ");
    snprintf(msgs, sizeof(msgs),
             "[{\"role\":\"user\",\"content\":\"The pin for the safe is "
             "55.\"},{\"role\":\"user\",\"content\":\"%s\"},"
             "{\"role\":\"user\",\"content\":\"What is the pin for the "
             "safe?\"}]",
             filler);
    sim_config_defaults(&c);
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, "The pin for the safe is 55.");
    answer_out_release(&r);
    ask(msgs, &c, 100, OVERFLOW_MIDDLE, &r); /* head and tail survive */
    assert_string_equal(r.content.data, "The pin for the safe is 55.");
    answer_out_release(&r);
    ask(msgs, &c, 100, OVERFLOW_OLDEST, &r); /* the fact is cut */
    assert_string_equal(r.content.data, ANSWER_NOT_SEEN);
    answer_out_release(&r);
    c.forget_after = 50; /* prompt intact, fact out of the window */
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, ANSWER_NOT_SEEN);
    answer_out_release(&r);
}

static void test_reasoning_history_policy(void **state)
{
    (void)state;
    const char *msgs =
        "[{\"role\":\"user\",\"content\":\"hello\"},"
        "{\"role\":\"assistant\",\"content\":\"hi\",\"reasoning_content\":"
        "\"The color of the sky is green.\"},"
        "{\"role\":\"user\",\"content\":\"What is the color of the sky?\"}]";
    struct sim_config c;
    struct answer_out r;
    sim_config_defaults(&c);
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, "The color for the sky is green.");
    answer_out_release(&r);
    c.reasoning_history = RHIST_DROP;
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, ANSWER_NOT_SEEN);
    answer_out_release(&r);
    c.reasoning_history = RHIST_KEEP_WITH_TOOLS; /* ask() offers no tools */
    ask(msgs, &c, 0, 0, &r);
    assert_string_equal(r.content.data, ANSWER_NOT_SEEN);
    answer_out_release(&r);
}

static void test_bad_messages_are_named(void **state)
{
    (void)state;
    struct sim_config c;
    struct tok_vec t;
    struct diag d;
    sim_config_defaults(&c);
    tok_vec_init(&t);
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"a\"},"
                           "{\"role\":\"wizard\",\"content\":\"b\"}]",
                           0, NULL);
    assert_int_not_equal(tmpl_render(m, false, true, &c, &t, &d), 0);
    assert_non_null(strstr(d.msg, "messages[1].role"));
    json_decref(m);
    m = json_loads("[{\"role\":\"user\",\"content\":5}]", 0, NULL);
    assert_int_not_equal(tmpl_render(m, false, true, &c, &t, &d), 0);
    assert_non_null(strstr(d.msg, "messages[0].content"));
    json_decref(m);
    tok_vec_release(&t);
}

/* The reply to one user message text with a "bash" tool offered. */
static void ask_with_tool(const char *text, struct answer_out *out)
{
    struct sim_config c;
    struct tok_vec t;
    struct diag d;
    sim_config_defaults(&c);
    json_t *m = json_pack("[{s:s, s:s}]", "role", "user", "content", text);
    json_t *tools = json_pack("[{s:s, s:{s:s}}]", "type", "function",
                              "function", "name", "bash");
    tok_vec_init(&t);
    assert_int_equal(tmpl_render(m, false, true, &c, &t, &d), 0);
    struct answer_in in = {.toks = t.v, .n = t.n, .tools = tools};
    answer_out_init(out);
    answer_write(&in, out);
    tok_vec_release(&t);
    json_decref(m);
    json_decref(tools);
}

/* The tool-call trigger as typed, and as Continue and Kilo pass the prompt
 * on: wrapped in literal quotes, the quotes inside escaped. */
static void test_tool_trigger_in_quotes(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "Call the bash tool with {\"command\": \"ls\"}.",
        "\"Call the bash tool with {\"command\": \"ls\"}.\"",
        "\"Call the bash tool with {\\\"command\\\": \\\"ls\\\"}.\"",
        "'Call the bash tool with {\"command\": \"ls\"}.'",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
        struct answer_out r;
        ask_with_tool(texts[i], &r);
        assert_non_null(r.tool_name);
        assert_string_equal(r.tool_name, "bash");
        assert_string_equal(r.tool_args, "{\"command\":\"ls\"}");
        answer_out_release(&r);
    }
    /* escaping that still is no JSON object: no call */
    struct answer_out r;
    ask_with_tool("\"Call the bash tool with {\\\"command\\\": ls}.\"", &r);
    assert_null(r.tool_name);
    answer_out_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fact_questions),
        cmocka_unit_test(test_variables_and_first_message),
        cmocka_unit_test(test_keep_last_turns_gives_first_message_reply),
        cmocka_unit_test(test_truncation_and_forgetting),
        cmocka_unit_test(test_reasoning_history_policy),
        cmocka_unit_test(test_bad_messages_are_named),
        cmocka_unit_test(test_tool_trigger_in_quotes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
