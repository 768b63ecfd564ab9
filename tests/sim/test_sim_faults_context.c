/*
 * End-to-end: the faults that change what the "model" can see (docs/SIM.md,
 * "Faults"): context limits with each overflow policy, --keep-last-turns,
 * --ignore-system, --reasoning-history, --forget-after and the
 * sparse-indexer preset. Each test asks about facts placed where the fault
 * should and should not hide them, against a healthy sim that answers all,
 * and checks usage.prompt_tokens against what the model should have seen.
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

#include "audit/audit.h"

#include "core/xalloc.h"
#include "util/simtest.h"

#define FACT_A "The access code for the blue door is 4812."
#define FACT_B "The locker code for the gym is 9090."
#define FACT_C "The gate code for the farm is 5150."
#define ASK_A "What is the access code for the blue door?"
#define ASK_B "What is the locker code for the gym?"
#define ASK_C "What is the gate code for the farm?"

/* One long user message: A, about `gap` tokens, B, `gap` tokens, C; then
 * "Noted." and the question. */
static json_t *long_chat(size_t gap, const char *question)
{
    char *f1 = simt_filler(gap, 11);
    char *f2 = simt_filler(gap, 12);
    char *text = xasprintf(FACT_A " %s " FACT_B " %s " FACT_C, f1, f2);
    json_t *m =
        json_pack("[o,o,o]", simt_msg("user", text),
                  simt_msg("assistant", "Noted."), simt_msg("user", question));
    free(text);
    free(f1);
    free(f2);
    return simt_chat(m);
}

/* Asks question after long_chat(gap); returns the reply, *ptok the
 * prompt_tokens. */
static char *ask_long(struct simt *t, const struct proc *p, size_t gap,
                      const char *question, long *ptok)
{
    json_t *r = simt_ok(t, p, "/v1/chat/completions", long_chat(gap, question));
    char *s = xstrdup(simt_reply(r));
    if (ptok)
        *ptok = simt_prompt_tokens(r);
    json_decref(r);
    return s;
}

static void expect(char *got, const char *want, const char *what)
{
    /* free before failing: fail_msg does not return */
    char msg[1024];
    bool bad = strcasecmp(got, want) != 0;
    snprintf(msg, sizeof(msg), "%s", got);
    free(got);
    if (bad)
        fail_msg("%s: reply '%s', expected '%s'", what, msg, want);
}

static void test_healthy_sim_sees_all_three_facts(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long n = 0;
    expect(ask_long(t, p, 6000, ASK_A, &n), FACT_A, "A");
    assert_true(n > 12000);
    expect(ask_long(t, p, 6000, ASK_B, NULL), FACT_B, "B");
    expect(ask_long(t, p, 6000, ASK_C, NULL), FACT_C, "C");
}

static void test_overflow_middle_removes_the_middle(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--context-limit", "8192", "--overflow", "middle", NULL);
    long n = 0;
    expect(ask_long(t, p, 6000, ASK_A, &n), FACT_A, "A, at the start");
    assert_int_equal(n, 8192);
    expect(ask_long(t, p, 6000, ASK_B, NULL), SIM_DONT_SEE, "B, mid-prompt");
    expect(ask_long(t, p, 6000, ASK_C, NULL), FACT_C, "C, near the end");
    /* under the limit nothing changes */
    json_t *r =
        simt_ok(t, p, "/v1/chat/completions", simt_chat1(FACT_A " " ASK_A));
    assert_string_equal(simt_reply(r), FACT_A);
    assert_true(simt_prompt_tokens(r) < 100);
    json_decref(r);
}

static void test_overflow_middle_on_completions_keeps_both_ends(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--context-limit", "8192", "--overflow", "middle", NULL);
    char *fill = simt_filler(12000, 21);
    int32_t *ids = xcalloc(16384, sizeof(int32_t));
    size_t n = simref_tokenize(fill, strlen(fill), ids, 16384);
    assert_true(n > 12000 && n <= 16384);
    json_t *r =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:o, s:b, s:i, s:i, s:f}", "model", "sim",
                          "prompt", simt_ids(ids, n), "echo", 1, "logprobs", 1,
                          "max_tokens", 1, "temperature", 0.0));
    assert_int_equal(simt_prompt_tokens(r), 8192);
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    const char *text = json_string_value(json_object_get(c, "text"));
    assert_non_null(text);
    /* the echoed prompt starts like the original and ends like it */
    int32_t head[64], tail[64];
    size_t hn = simref_tokenize(text, 200, head, 64);
    size_t fn = simref_tokenize(fill, 200, tail, 64);
    assert_true(hn > 10 && fn > 10);
    assert_memory_equal(head, tail, 10 * sizeof(int32_t));
    json_t *toks = json_object_get(json_object_get(c, "logprobs"), "tokens");
    assert_int_equal(json_array_size(toks), 8192 + 1);
    /* the last 50 prompt tokens are the original's last 50 */
    struct buf lastp = BUF_INIT, lasto = BUF_INIT;
    for (size_t i = 8192 - 50; i < 8192; i++)
        buf_adds(&lastp, json_string_value(json_array_get(toks, i)));
    json_t *d =
        simt_ok(t, p, "/detokenize",
                json_pack("{s:o}", "tokens", simt_ids(ids + n - 50, 50)));
    buf_adds(&lasto, json_string_value(json_object_get(d, "prompt")));
    assert_string_equal(buf_str(&lastp), buf_str(&lasto));
    buf_release(&lastp);
    buf_release(&lasto);
    json_decref(d);
    json_decref(r);
    free(ids);
    free(fill);
}

static void test_overflow_oldest_drops_the_front(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--context-limit", "8192", "--overflow", "oldest", NULL);
    long n = 0;
    expect(ask_long(t, p, 6000, ASK_A, &n), SIM_DONT_SEE, "A, cut");
    assert_int_equal(n, 8192);
    expect(ask_long(t, p, 6000, ASK_B, NULL), FACT_B, "B, kept");
    expect(ask_long(t, p, 6000, ASK_C, NULL), FACT_C, "C, kept");
}

static void test_overflow_newest_drops_the_question(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--context-limit", "8192", "--overflow", "newest", NULL);
    long n = 0;
    char *r = ask_long(t, p, 6000, ASK_C, &n);
    assert_int_equal(n, 8192);
    /* the question at the end is gone, so it is not answered */
    assert_string_not_equal(r, FACT_C);
    free(r);
}

static void test_overflow_error_is_vllm_400(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--max-model-len", "8192", "--overflow", "error", NULL);
    long st = 0;
    json_t *r =
        simt_postj(t, p, "/v1/chat/completions", long_chat(6000, ASK_A), &st);
    assert_int_equal(st, 400);
    simt_assert_error(r, "This model's maximum context length is 8192 tokens. "
                         "However, you requested ");
    json_decref(r);
    simt_assert_alive(t, p);
    /* under the limit it answers */
    r = simt_ok(t, p, "/v1/chat/completions", simt_chat1(FACT_A " " ASK_A));
    assert_string_equal(simt_reply(r), FACT_A);
    json_decref(r);
}

/*
 * SIM.md, "Endpoints": over the limit the sim gives vLLM's 400, "you
 * requested M tokens (P in the messages, C in the completion)". vLLM
 * checks P + max_tokens against max_model_len. Regression: the sim once
 * checked only P and served a prompt that fits with a max_tokens that does
 * not.
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

static json_t *turns(bool with_system)
{
    json_t *m = json_array();
    if (with_system)
        json_array_append_new(
            m, simt_msg("system", "The vault number for the bank is 77."));
    json_array_append_new(m, simt_msg("user", FACT_A));
    json_array_append_new(m, simt_msg("assistant", "Noted."));
    json_array_append_new(m, simt_msg("user", FACT_C));
    json_array_append_new(m, simt_msg("assistant", "Noted."));
    return m;
}

static char *ask_turns(struct simt *t, const struct proc *p, bool sys,
                       const char *q, long *ptok)
{
    json_t *m = turns(sys);
    json_array_append_new(m, simt_msg("user", q));
    json_t *r = simt_ok(t, p, "/v1/chat/completions", simt_chat(m));
    char *s = xstrdup(simt_reply(r));
    if (ptok)
        *ptok = simt_prompt_tokens(r);
    json_decref(r);
    return s;
}

static void test_keep_last_turns(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--keep-last-turns", "2", NULL);
    long n = 0;
    expect(ask_turns(t, p, true, ASK_A, &n), SIM_DONT_SEE, "turn 1");
    expect(ask_turns(t, p, true, ASK_C, NULL), FACT_C, "turn 2");
    expect(
        ask_turns(t, p, true, "What is the vault number for the bank?", NULL),
        "The vault number for the bank is 77.", "system");
    expect(ask_turns(t, p, true, "What did my first message ask for?", NULL),
           "Your first message asked: \"" FACT_C "\".", "first visible");
    /* prompt_tokens counts only the system message and the last 2 turns */
    json_t *seen = json_pack(
        "[o,o,o,o]", simt_msg("system", "The vault number for the bank is 77."),
        simt_msg("user", FACT_C), simt_msg("assistant", "Noted."),
        simt_msg("user", ASK_A));
    assert_int_equal(n, simt_count_messages(t, p, seen));
    json_decref(seen);
}

static void test_ignore_system(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--ignore-system", NULL);
    long n = 0;
    expect(ask_turns(t, p, true, "What is the vault number for the bank?", &n),
           SIM_DONT_SEE, "system fact");
    expect(ask_turns(t, p, true, ASK_A, NULL), FACT_A, "user fact");
    json_t *seen = turns(false);
    json_array_append_new(seen, simt_msg("user", "What is the vault number "
                                                 "for the bank?"));
    assert_int_equal(n, simt_count_messages(t, p, seen));
    json_decref(seen);
}

#define SAFE_FACT "The PIN for the safe is 1234."

static json_t *reasoning_chat(bool tools)
{
    json_t *m = json_pack(
        "[o,{s:s,s:s,s:s},o]", simt_msg("user", "Think about the safe."),
        "role", "assistant", "content", "Done.", "reasoning_content", SAFE_FACT,
        simt_msg("user", "What is the PIN for the safe?"));
    json_t *b = simt_chat(m);
    if (tools)
        json_object_set_new(
            b, "tools",
            json_pack("[{s:s,s:{s:s,s:{s:s}}}]", "type", "function", "function",
                      "name", "open_safe", "parameters", "type", "object"));
    return b;
}

static char *ask_reasoning(struct simt *t, const struct proc *p, bool tools,
                           long *ptok)
{
    json_t *r = simt_ok(t, p, "/v1/chat/completions", reasoning_chat(tools));
    char *s = xstrdup(simt_reply(r));
    if (ptok)
        *ptok = simt_prompt_tokens(r);
    json_decref(r);
    return s;
}

static void test_reasoning_history_policies(void **state)
{
    struct simt *t = *state;
    struct proc *keep = simt_start(t, NULL);
    struct proc *drop = simt_start(t, "--reasoning-history", "drop", NULL);
    struct proc *kwt =
        simt_start(t, "--reasoning-history", "keep-with-tools", NULL);
    long nk = 0, nd = 0;
    expect(ask_reasoning(t, keep, false, &nk), SAFE_FACT, "keep");
    expect(ask_reasoning(t, drop, false, &nd), SIM_DONT_SEE, "drop");
    expect(ask_reasoning(t, drop, true, NULL), SIM_DONT_SEE, "drop, tools");
    /* dropping removes exactly <think>REASONING</think> */
    assert_int_equal(nk - nd, 2 + (long)simref_count(SAFE_FACT));
    /* /tokenize applies the template's own reasoning policy */
    json_t *b = reasoning_chat(false);
    assert_int_equal(
        simt_count_messages(t, drop, json_object_get(b, "messages")), nd);
    assert_int_equal(
        simt_count_messages(t, keep, json_object_get(b, "messages")), nk);
    json_decref(b);
    expect(ask_reasoning(t, kwt, false, NULL), SIM_DONT_SEE,
           "keep-with-tools, no tools");
    expect(ask_reasoning(t, kwt, true, NULL), SAFE_FACT,
           "keep-with-tools, tools");
}

static void test_forget_after(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--forget-after", "2048", NULL);
    long n = 0;
    /* A is ~6000 tokens before the end, C within the last 2048 */
    expect(ask_long(t, p, 3000, ASK_A, &n), SIM_DONT_SEE, "A, far");
    expect(ask_long(t, p, 3000, ASK_C, NULL), FACT_C, "C, near");
    /* nothing is truncated: the model was sent every token */
    struct proc *h = simt_start(t, NULL);
    long nh = 0;
    free(ask_long(t, h, 3000, ASK_A, &nh));
    assert_int_equal(n, nh);
}

/* Prefill noise growing with position hurts recall once it passes
 * --noise-recall-limit: 0.05 ((t + 1) / 1024) passes 0.1 at 2,047 tokens,
 * so facts farther than that from the end are lost; a short prompt and
 * constant noise below the limit lose nothing. */
static void test_noise_recall_limit(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--noise-recall-limit", "0.1", "--prefill-noise", "0.05",
                   "--noise-growth", "1", NULL);
    expect(ask_long(t, p, 3000, ASK_A, NULL), SIM_DONT_SEE, "A, far");
    expect(ask_long(t, p, 3000, ASK_C, NULL), FACT_C, "C, near");
    expect(ask_long(t, p, 300, ASK_A, NULL), FACT_A, "A, short prompt");
    struct proc *c = simt_start(t, "--noise-recall-limit", "0.1",
                                "--prefill-noise", "0.05", NULL);
    expect(ask_long(t, c, 3000, ASK_A, NULL), FACT_A, "A, constant noise");
}

/* The pair fault: --pair-a or --pair-b alone change nothing; both add
 * --pair-noise (0.3) to the prefill noise, past the recall limit. */
static void test_pair_fault_needs_both(void **state)
{
    struct simt *t = *state;
    struct proc *a =
        simt_start(t, "--noise-recall-limit", "0.1", "--pair-a", NULL);
    expect(ask_long(t, a, 3000, ASK_A, NULL), FACT_A, "A, pair-a alone");
    struct proc *b =
        simt_start(t, "--noise-recall-limit", "0.1", "--pair-b", NULL);
    expect(ask_long(t, b, 3000, ASK_A, NULL), FACT_A, "A, pair-b alone");
    struct proc *ab = simt_start(t, "--noise-recall-limit", "0.1", "--pair-a",
                                 "--pair-b", NULL);
    expect(ask_long(t, ab, 3000, ASK_A, NULL), SIM_DONT_SEE, "A, both");
    expect(ask_long(t, ab, 300, ASK_C, NULL), SIM_DONT_SEE, "C, both");
}

static void test_sparse_indexer_preset(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--preset", "sparse-indexer", NULL);
    long st = 0;
    json_t *c = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(json_integer_value(json_object_get(c, "forget_after")),
                     2048);
    json_decref(c);
    expect(ask_long(t, p, 3000, ASK_A, NULL), SIM_DONT_SEE, "A, far");
    expect(ask_long(t, p, 3000, ASK_C, NULL), FACT_C, "C, near");
}

static void test_forget_after_at_run_time_and_reset(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    expect(ask_long(t, p, 3000, ASK_A, NULL), FACT_A, "healthy");
    json_decref(
        simt_ok(t, p, "/sim/config", json_pack("{s:i}", "forget_after", 2048)));
    expect(ask_long(t, p, 3000, ASK_A, NULL), SIM_DONT_SEE, "configured");
    json_decref(simt_ok(t, p, "/sim/config", json_pack("{s:b}", "reset", 1)));
    expect(ask_long(t, p, 3000, ASK_A, NULL), FACT_A, "after reset");
}

/* --lose-summary: a summary request is answered "no earlier message"
 * although its transcript holds the fact; other requests are not. */
static void test_lose_summary(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--lose-summary", NULL);
    json_t *sum = simt_chat(json_pack(
        "[o,o,o]", simt_msg("user", SAFE_FACT), simt_msg("assistant", "Noted."),
        simt_msg("user", "Summarize our conversation so far.")));
    char *a = simt_ask(t, p, sum);
    assert_true(audit_is_first_message_claim(a));
    free(a);
    json_t *sys = simt_chat(json_pack(
        "[o,o]", simt_msg("system", "You are a context summarization agent."),
        simt_msg("user", "[User]: " SAFE_FACT)));
    a = simt_ask(t, p, sys);
    assert_true(audit_is_first_message_claim(a));
    free(a);
    a = simt_ask(t, p,
                 simt_chat(json_pack("[o,o,o]", simt_msg("user", SAFE_FACT),
                                     simt_msg("assistant", "Noted."),
                                     simt_msg("user", "What is the PIN for "
                                                      "the safe?"))));
    assert_non_null(strstr(a, "1234"));
    free(a);
}

/* Without --lose-summary a summary request is answered with the facts
 * its transcript states (a healthy summary): in the conversation, and in
 * a transcript quoted into one user message (Kilo, opencode). */
static void test_summary_keeps_the_facts(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    char *a =
        simt_ask(t, p,
                 simt_chat(json_pack(
                     "[o,o,o]", simt_msg("user", SAFE_FACT),
                     simt_msg("assistant", "Noted."),
                     simt_msg("user", "Summarize our conversation so far."))));
    assert_string_equal(a, "Summary of our conversation: The pin for safe "
                           "is 1234.");
    free(a);
    a = simt_ask(t, p,
                 simt_chat(json_pack(
                     "[o]", simt_msg("user", "Here is the conversation so "
                                             "far: [User]: " SAFE_FACT
                                             " Write a summary of it."))));
    assert_non_null(strstr(a, "is 1234."));
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_healthy_sim_sees_all_three_facts),
        T(test_overflow_middle_removes_the_middle),
        T(test_overflow_middle_on_completions_keeps_both_ends),
        T(test_overflow_oldest_drops_the_front),
        T(test_overflow_newest_drops_the_question),
        T(test_overflow_error_is_vllm_400),
        T(test_overflow_error_counts_max_tokens),
        T(test_keep_last_turns),
        T(test_ignore_system),
        T(test_reasoning_history_policies),
        T(test_forget_after),
        T(test_noise_recall_limit),
        T(test_pair_fault_needs_both),
        T(test_sparse_indexer_preset),
        T(test_forget_after_at_run_time_and_reset),
        T(test_lose_summary),
        T(test_summary_keeps_the_facts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
