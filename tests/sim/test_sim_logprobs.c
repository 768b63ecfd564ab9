/*
 * End-to-end: log-probabilities of `fidelity sim` (docs/SIM.md,
 * "Log-probabilities"): the shapes of chat logprobs/top_logprobs, that the
 * three ways of asking for prompt logprobs (OpenAI echo, vLLM
 * prompt_logprobs, sglang input_token_logprobs) agree, that two processes
 * give bit-identical values in prefill and decode, that greedy decoding
 * picks the argmax, and that the copy candidate makes logprobs depend on
 * far context.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

#define MAXTOK 8192

static size_t long_prompt(int32_t *ids, size_t ntok, unsigned salt)
{
    char *text = simt_filler(ntok, salt);
    size_t n = simref_tokenize(text, strlen(text), ids, MAXTOK);
    free(text);
    assert_true(n <= MAXTOK);
    return n;
}

static void test_chat_logprobs_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *b = simt_chat1("The access code for the blue door is 4812. What "
                           "is the access code for the blue door?");
    json_object_set_new(b, "logprobs", json_true());
    json_object_set_new(b, "top_logprobs", json_integer(3));
    json_t *r = simt_ok(t, p, "/v1/chat/completions", b);
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    json_t *content =
        json_object_get(json_object_get(c, "logprobs"), "content");
    assert_true(json_array_size(content) > 0);
    assert_int_equal(json_array_size(content),
                     json_integer_value(json_object_get(
                         json_object_get(r, "usage"), "completion_tokens")));
    struct buf text = BUF_INIT;
    size_t i;
    json_t *e;
    json_array_foreach(content, i, e)
    {
        const char *tok = json_string_value(json_object_get(e, "token"));
        assert_non_null(tok);
        buf_adds(&text, tok);
        double lp = json_number_value(json_object_get(e, "logprob"));
        assert_true(json_is_number(json_object_get(e, "logprob")));
        assert_true(lp <= 0.0);
        /* bytes: the UTF-8 bytes of the token as integers */
        json_t *bytes = json_object_get(e, "bytes");
        assert_int_equal(json_array_size(bytes), strlen(tok));
        for (size_t k = 0; k < strlen(tok); k++)
            assert_int_equal(json_integer_value(json_array_get(bytes, k)),
                             (unsigned char)tok[k]);
        json_t *top = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(top), 3);
        double prev = 0.0;
        for (size_t k = 0; k < 3; k++) {
            json_t *tk = json_array_get(top, k);
            assert_true(json_is_string(json_object_get(tk, "token")));
            assert_true(json_is_array(json_object_get(tk, "bytes")));
            double v = json_number_value(json_object_get(tk, "logprob"));
            assert_true(v <= prev);
            prev = v;
        }
        assert_true(lp <= json_number_value(json_object_get(
                              json_array_get(top, 0), "logprob")));
    }
    assert_string_equal(buf_str(&text), simt_reply(r));
    buf_release(&text);
    json_decref(r);
}

static void test_prompt_logprob_apis_agree(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    int32_t *ids = xcalloc(MAXTOK, sizeof(*ids));
    size_t n = long_prompt(ids, 300, 1);
    double *echo = xcalloc(n, sizeof(double));
    simt_prompt_logprobs(t, p, ids, n, echo);

    json_t *r = simt_ok(t, p, "/v1/completions",
                        json_pack("{s:s, s:o, s:i, s:i, s:f}", "model", "sim",
                                  "prompt", simt_ids(ids, n), "prompt_logprobs",
                                  0, "max_tokens", 1, "temperature", 0.0));
    json_t *pl = json_object_get(
        json_array_get(json_object_get(r, "choices"), 0), "prompt_logprobs");
    assert_int_equal(json_array_size(pl), n);
    json_t *g =
        simt_ok(t, p, "/generate",
                json_pack("{s:o, s:{s:i}, s:b, s:i}", "input_ids",
                          simt_ids(ids, n), "sampling_params", "max_new_tokens",
                          1, "return_logprob", 1, "logprob_start_len", 0));
    json_t *itl = json_object_get(json_object_get(g, "meta_info"),
                                  "input_token_logprobs");
    assert_int_equal(json_array_size(itl), n);
    for (size_t i = 1; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "%d", ids[i]);
        double v = json_number_value(json_object_get(
            json_object_get(json_array_get(pl, i), key), "logprob"));
        double w = json_number_value(json_array_get(json_array_get(itl, i), 0));
        if (v != echo[i] || w != echo[i])
            fail_msg("position %zu: echo %.17g, prompt_logprobs %.17g, "
                     "sglang %.17g",
                     i, echo[i], v, w);
    }
    json_decref(g);
    json_decref(r);
    free(echo);
    free(ids);
}

static void test_two_sims_bit_identical(void **state)
{
    struct simt *t = *state;
    struct proc *p1 = simt_start(t, NULL);
    struct proc *p2 = simt_start(t, NULL);
    int32_t *ids = xcalloc(MAXTOK, sizeof(*ids));
    size_t n = long_prompt(ids, 3000, 2);
    double *a = xcalloc(n, sizeof(double));
    double *b = xcalloc(n, sizeof(double));
    simt_prompt_logprobs(t, p1, ids, n, a);
    simt_prompt_logprobs(t, p2, ids, n, b);
    assert_memory_equal(a, b, n * sizeof(double));
    /* not all equal: they really depend on the history */
    size_t distinct = 0;
    for (size_t i = 2; i < n; i++)
        distinct += a[i] != a[i - 1];
    assert_true(distinct > n / 4);

    /* decode: the same chat request gives the same logprobs object */
    json_t *req = simt_chat1("Describe a calm harbour at dawn.");
    json_object_set_new(req, "logprobs", json_true());
    json_object_set_new(req, "top_logprobs", json_integer(5));
    json_t *r1 = simt_ok(t, p1, "/v1/chat/completions", json_deep_copy(req));
    json_t *r2 = simt_ok(t, p2, "/v1/chat/completions", req);
    json_t *l1 = json_object_get(
        json_array_get(json_object_get(r1, "choices"), 0), "logprobs");
    json_t *l2 = json_object_get(
        json_array_get(json_object_get(r2, "choices"), 0), "logprobs");
    assert_true(json_is_object(l1));
    assert_true(json_equal(l1, l2));
    json_decref(r1);
    json_decref(r2);
    free(a);
    free(b);
    free(ids);
}

static void test_greedy_completion_is_argmax(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:s, s:i, s:i, s:f}", "model", "sim", "prompt",
                          "Old boats drift past calm docks under grey "
                          "skies as kids ran home",
                          "logprobs", 5, "max_tokens", 12, "temperature", 0.0));
    json_t *lp = json_object_get(
        json_array_get(json_object_get(r, "choices"), 0), "logprobs");
    json_t *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs");
    assert_int_equal(json_array_size(tlp), 12);
    for (size_t i = 0; i < 12; i++) {
        double v = json_number_value(json_array_get(tlp, i));
        double best = -INFINITY;
        const char *k;
        json_t *x;
        json_object_foreach(json_array_get(top, i), k, x)
        {
            if (json_number_value(x) > best)
                best = json_number_value(x);
        }
        if (v != best)
            fail_msg("generated token %zu has logprob %.17g, the best "
                     "candidate %.17g: not greedy",
                     i, v, best);
    }
    json_decref(r);
}

/* vLLM's return_tokens_as_token_ids: tokens and top-logprob keys are
 * "token_id:N", the same tokens and figures as the text spelling. */
static void test_tokens_as_token_ids(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--cache-tokens", "0", NULL);
    json_t *lp[2];
    json_t *r[2];
    for (int k = 0; k < 2; k++) {
        json_t *b =
            json_pack("{s:s, s:s, s:i, s:i, s:f}", "model", "sim", "prompt",
                      "Old boats drift past calm docks", "logprobs", 3,
                      "max_tokens", 6, "temperature", 0.0);
        if (k)
            json_object_set_new(b, "return_tokens_as_token_ids", json_true());
        r[k] = simt_ok(t, p, "/v1/completions", b);
        lp[k] = json_object_get(
            json_array_get(json_object_get(r[k], "choices"), 0), "logprobs");
    }
    json_t *toks = json_object_get(lp[1], "tokens");
    assert_int_equal(json_array_size(toks), 6);
    for (size_t i = 0; i < 6; i++) {
        const char *s = json_string_value(json_array_get(toks, i));
        int32_t id;
        assert_true(s && sscanf(s, "token_id:%d", &id) == 1);
        const char *text = json_string_value(
            json_array_get(json_object_get(lp[0], "tokens"), i));
        int32_t want = -1;
        assert_int_equal(simref_tokenize(text, strlen(text), &want, 1), 1);
        assert_int_equal(id, want); /* the same token as the text names */
        const char *k;
        json_t *x;
        json_object_foreach(
            json_array_get(json_object_get(lp[1], "top_logprobs"), i), k, x)
        {
            assert_true(strncmp(k, "token_id:", 9) == 0);
        }
    }
    assert_true(json_equal(json_object_get(lp[0], "token_logprobs"),
                           json_object_get(lp[1], "token_logprobs")));
    json_decref(r[0]);
    json_decref(r[1]);
}

static void test_copy_candidate_reaches_far_context(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    char *fill = simt_filler(3000, 3);
    char *ta = xasprintf(" Qzx7 Wvy9 Mmr1. %s Qzx7 Wvy9 Mmr1", fill);
    char *tb = xasprintf(" Qzx7 Wvy9 Ppk2. %s Qzx7 Wvy9 Mmr1", fill);
    int32_t *ia = xcalloc(MAXTOK, sizeof(int32_t));
    int32_t *ib = xcalloc(MAXTOK, sizeof(int32_t));
    size_t na = simref_tokenize(ta, strlen(ta), ia, MAXTOK);
    size_t nb = simref_tokenize(tb, strlen(tb), ib, MAXTOK);
    assert_int_equal(na, nb);
    double *la = xcalloc(na, sizeof(double));
    double *lb = xcalloc(nb, sizeof(double));
    simt_prompt_logprobs(t, p, ia, na, la);
    simt_prompt_logprobs(t, p, ib, nb, lb);
    /* In A, " Mmr1" followed " Qzx7 Wvy9" 3000 tokens back: the copy
     * candidate gets most of the mass. In B something else followed. */
    if (!(la[na - 1] > log(0.5)))
        fail_msg("copy candidate logprob %.6g, expected most of the mass",
                 la[na - 1]);
    assert_true(lb[nb - 1] < la[na - 1] - 1.0);
    free(la);
    free(lb);
    free(ia);
    free(ib);
    free(ta);
    free(tb);
    free(fill);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_chat_logprobs_shape),
        T(test_prompt_logprob_apis_agree),
        T(test_two_sims_bit_identical),
        T(test_greedy_completion_is_argmax),
        T(test_tokens_as_token_ids),
        T(test_copy_candidate_reaches_far_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
