/*
 * End-to-end: the faults that change numbers rather than visibility
 * (docs/SIM.md, "Faults"): prefill and decode noise and its growth, logit
 * scale, per-request nondeterminism, batch variance, repetition collapse,
 * --no-prompt-logprobs, error rates, run-time configuration and the
 * presets. Each test compares against a healthy sim and checks that the
 * fault changes what it claims and leaves the rest bit-identical.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

#define PROMPT_TOKENS 600
#define MAXTOK 8192
#define QA                                                                     \
    "The access code for the blue door is 4812. What is the access code "      \
    "for the blue door?"

struct lp {
    int32_t ids[MAXTOK];
    size_t n;
    double v[MAXTOK];
};

/*
 * A prompt of about ntok tokens: one short filler passage repeated, so that
 * from its second copy on most tokens are the copy candidate. (A token in
 * the tail of the distribution has a fixed logprob that logit noise does
 * not move, so noise is only visible on candidates.)
 */
static struct lp *prompt(size_t ntok, unsigned salt)
{
    struct lp *l = xcalloc(1, sizeof(*l));
    char *unit = simt_filler(40, salt);
    struct buf b = BUF_INIT;
    while (simref_tokenize(b.data, b.len, NULL, 0) < ntok)
        buf_adds(&b, unit);
    l->n = simref_tokenize(b.data, b.len, l->ids, MAXTOK);
    assert_true(l->n <= MAXTOK);
    buf_release(&b);
    free(unit);
    return l;
}

static struct lp *prompt_lp(struct simt *t, const struct proc *p, size_t ntok)
{
    struct lp *l = prompt(ntok, 7);
    simt_prompt_logprobs(t, p, l->ids, l->n, l->v);
    return l;
}

static size_t count_diff(const struct lp *a, const struct lp *b)
{
    size_t d = 0;
    assert_int_equal(a->n, b->n);
    for (size_t i = 1; i < a->n; i++)
        d += a->v[i] != b->v[i];
    return d;
}

/* Chat decode logprobs of QA. */
static size_t decode_lp(struct simt *t, const struct proc *p, double *out)
{
    size_t n = simt_decode_logprobs(t, p, simt_chat1(QA), out, 256);
    assert_true(n > 3);
    return n;
}

static bool same_decode(struct simt *t, const struct proc *a,
                        const struct proc *b)
{
    double x[256], y[256];
    size_t n = decode_lp(t, a, x);
    size_t m = decode_lp(t, b, y);
    return n == m && !memcmp(x, y, n * sizeof(double));
}

static void test_decode_noise_leaves_prefill_identical(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--decode-noise", "0.5", NULL);
    struct lp *a = prompt_lp(t, h, PROMPT_TOKENS);
    struct lp *b = prompt_lp(t, p, PROMPT_TOKENS);
    assert_int_equal(count_diff(a, b), 0);
    assert_false(same_decode(t, h, p));
    /* the chat text is the rule's text either way */
    char *x = simt_ask(t, h, simt_chat1(QA));
    char *y = simt_ask(t, p, simt_chat1(QA));
    assert_string_equal(x, y);
    free(x);
    free(y);
    free(a);
    free(b);
}

/* --seed seeds every noise draw: the same seed gives the same noise in
 * two processes, another seed other noise. */
static void test_seed_reproduces_noise(void **state)
{
    struct simt *t = *state;
    struct proc *a =
        simt_start(t, "--decode-noise", "0.5", "--seed", "1", NULL);
    struct proc *b =
        simt_start(t, "--decode-noise", "0.5", "--seed", "1", NULL);
    struct proc *c =
        simt_start(t, "--decode-noise", "0.5", "--seed", "2", NULL);
    assert_true(same_decode(t, a, b));
    assert_false(same_decode(t, a, c));
}

static void test_prefill_noise_leaves_decode_identical(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--prefill-noise", "0.5", NULL);
    struct lp *a = prompt_lp(t, h, PROMPT_TOKENS);
    struct lp *b = prompt_lp(t, p, PROMPT_TOKENS);
    assert_true(count_diff(a, b) > a->n / 2);
    assert_true(same_decode(t, h, p));
    free(a);
    free(b);
}

static double mean_abs_diff(const struct lp *a, const struct lp *b, size_t from,
                            size_t to)
{
    double s = 0;
    for (size_t i = from; i < to; i++)
        s += fabs(a->v[i] - b->v[i]);
    return s / (double)(to - from);
}

static void test_noise_grows_with_position(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p =
        simt_start(t, "--prefill-noise", "0.5", "--noise-growth", "1", NULL);
    struct lp *a = prompt_lp(t, h, 4000);
    struct lp *b = prompt_lp(t, p, 4000);
    double early = mean_abs_diff(a, b, 50, 178);
    double late = mean_abs_diff(a, b, a->n - 128, a->n);
    /* scale ((t+1)/1024)^1: about 0.06 early, about 4 late */
    if (!(late > 5 * early && late > 0))
        fail_msg("noise growth: early %.6g, late %.6g", early, late);
    free(a);
    free(b);
}

/* --noise-from: positions below it are bit-identical, the rest noisy. */
static void test_noise_from_spares_early_positions(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p =
        simt_start(t, "--prefill-noise", "0.5", "--noise-from", "300", NULL);
    struct lp *a = prompt_lp(t, h, PROMPT_TOKENS);
    struct lp *b = prompt_lp(t, p, PROMPT_TOKENS);
    for (size_t i = 1; i < 300; i++)
        assert_true(a->v[i] == b->v[i]);
    size_t late = 0;
    for (size_t i = 300; i < a->n; i++)
        late += a->v[i] != b->v[i];
    assert_true(late > (a->n - 300) / 2);
    free(a);
    free(b);
}

/* --noise-saturate: growth up to the position, flat after it. */
static void test_noise_saturates(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--prefill-noise", "0.5", "--noise-growth",
                                "1", "--noise-saturate", "256", NULL);
    struct lp *a = prompt_lp(t, h, 2000);
    struct lp *b = prompt_lp(t, p, 2000);
    double early = mean_abs_diff(a, b, 20, 120);
    double mid = mean_abs_diff(a, b, 300, 800);
    double late = mean_abs_diff(a, b, a->n - 500, a->n);
    if (!(mid > 2 * early && late < 1.3 * mid && late > mid / 1.3))
        fail_msg("saturation: early %.6g, mid %.6g, late %.6g", early, mid,
                 late);
    free(a);
    free(b);
}

static void test_logit_scale_keeps_the_argmax(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--logit-scale", "1.5", NULL);
    struct lp *a = prompt_lp(t, h, PROMPT_TOKENS);
    struct lp *b = prompt_lp(t, p, PROMPT_TOKENS);
    assert_true(count_diff(a, b) > a->n / 2);
    /* greedy continuation is unchanged by a positive scale */
    json_t *req =
        json_pack("{s:s, s:o, s:i, s:f}", "model", "sim", "prompt",
                  simt_ids(a->ids, 200), "max_tokens", 16, "temperature", 0.0);
    json_t *x = simt_ok(t, h, "/v1/completions", json_deep_copy(req));
    json_t *y = simt_ok(t, p, "/v1/completions", req);
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(x, "choices"), 0), "text")),
        json_string_value(json_object_get(
            json_array_get(json_object_get(y, "choices"), 0), "text")));
    json_decref(x);
    json_decref(y);
    free(a);
    free(b);
}

/* token_logprobs of an echo + 4 generated tokens request. */
static json_t *all_logprobs(struct simt *t, const struct proc *p,
                            const struct lp *l)
{
    json_t *r =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:o, s:b, s:i, s:i, s:f}", "model", "sim",
                          "prompt", simt_ids(l->ids, l->n), "echo", 1,
                          "logprobs", 1, "max_tokens", 4, "temperature", 0.0));
    json_t *v = json_incref(json_object_get(
        json_object_get(json_array_get(json_object_get(r, "choices"), 0),
                        "logprobs"),
        "token_logprobs"));
    assert_true(json_array_size(v) == l->n + 4);
    json_decref(r);
    return v;
}

static void test_nondeterminism_differs_per_request(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--nondeterminism", "0.3", NULL);
    struct lp *l = prompt(300, 3);
    json_t *h1 = all_logprobs(t, h, l), *h2 = all_logprobs(t, h, l);
    assert_true(json_equal(h1, h2));
    json_t *n1 = all_logprobs(t, p, l), *n2 = all_logprobs(t, p, l);
    assert_false(json_equal(n1, n2));
    assert_false(json_equal(n1, h1));
    json_decref(h1);
    json_decref(h2);
    json_decref(n1);
    json_decref(n2);
    free(l);
}

struct batch_arg {
    const struct proc *p;
    const struct lp *l;
    pthread_barrier_t *bar;
    char *text; /* the token_logprobs array as JSON */
};

static void *batch_one(void *ud)
{
    struct batch_arg *a = ud;
    struct http_client *c = http_client_new();
    json_t *body =
        json_pack("{s:s, s:o, s:b, s:i, s:i, s:f}", "model", "sim", "prompt",
                  simt_ids(a->l->ids, a->l->n), "echo", 1, "logprobs", 1,
                  "max_tokens", 4, "temperature", 0.0);
    char *url = xasprintf("%s/v1/completions", proc_url(a->p));
    long st = 0;
    json_t *out = NULL;
    struct diag d;
    pthread_barrier_wait(a->bar);
    if (!http_json(c, url, body, NULL, 60000, &st, &out, &d) && st == 200)
        a->text = json_dumps(
            json_object_get(
                json_object_get(
                    json_array_get(json_object_get(out, "choices"), 0),
                    "logprobs"),
                "token_logprobs"),
            JSON_COMPACT);
    json_decref(out);
    json_decref(body);
    free(url);
    http_client_free(c);
    return NULL;
}

static void test_batch_variance_alone_vs_concurrent(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--batch-variance", "0.3",
                                "--batch-window-ms", "1000", NULL);
    struct lp *l = prompt(300, 4);
    /* alone, one after the other: batch size 1 each time, identical */
    json_t *a1 = all_logprobs(t, p, l), *a2 = all_logprobs(t, p, l);
    assert_true(json_equal(a1, a2));
    char *alone = json_dumps(a1, JSON_COMPACT);
    /* four at once: one batch of 4, different noise */
    enum { K = 4 };
    pthread_t th[K];
    pthread_barrier_t bar;
    struct batch_arg args[K];
    pthread_barrier_init(&bar, NULL, K);
    for (int i = 0; i < K; i++) {
        args[i] = (struct batch_arg){.p = p, .l = l, .bar = &bar};
        pthread_create(&th[i], NULL, batch_one, &args[i]);
    }
    for (int i = 0; i < K; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    /* on a loaded machine one of the four may arrive after the window
     * closed and be served alone (as `alone`); at least two arriving
     * together are enough to show that the batch changes the noise */
    int differ = 0;
    for (int i = 0; i < K; i++) {
        assert_non_null(args[i].text);
        differ += strcmp(args[i].text, alone) != 0;
        free(args[i].text);
    }
    print_message("%d of %d concurrent requests differ from the lone one\n",
                  differ, K);
    assert_true(differ >= 2);
    free(alone);
    json_decref(a1);
    json_decref(a2);
    free(l);
}

static json_t *chat_tokens(struct simt *t, const struct proc *p)
{
    json_t *b = simt_chat1(QA);
    json_object_set_new(b, "logprobs", json_true());
    json_object_set_new(b, "max_tokens", json_integer(24));
    json_t *r = simt_ok(t, p, "/v1/chat/completions", b);
    json_t *content = json_object_get(
        json_object_get(json_array_get(json_object_get(r, "choices"), 0),
                        "logprobs"),
        "content");
    json_t *toks = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(content, i, e)
        json_array_append(toks, json_object_get(e, "token"));
    json_decref(r);
    return toks;
}

/* The smallest period p such that tokens from `from` on repeat with
 * period p for at least two full periods; 0 when there is none. */
static size_t period_after(json_t *toks, size_t from)
{
    size_t n = json_array_size(toks);
    for (size_t p = 1; from + 2 * p <= n; p++) {
        bool ok = true;
        for (size_t i = from; i + p < n && ok; i++)
            ok = json_equal(json_array_get(toks, i),
                            json_array_get(toks, i + p));
        if (ok)
            return p;
    }
    return 0;
}

static void test_collapse_after_repeats(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, "--collapse-after", "4", NULL);
    json_t *good = chat_tokens(t, h);
    json_t *bad = chat_tokens(t, p);
    assert_true(json_array_size(good) > 6);
    assert_false(json_equal(good, bad));
    /* the first 4 tokens are the healthy ones; after them the reply loops
     * (checked a few tokens in, where the loop has started) until
     * max_tokens */
    for (size_t i = 0; i < 4; i++)
        assert_true(
            json_equal(json_array_get(good, i), json_array_get(bad, i)));
    assert_int_equal(json_array_size(bad), 24);
    size_t per = 0;
    for (size_t from = 4; from < 12 && !per; from++)
        per = period_after(bad, from);
    if (per == 0)
        fail_msg("no repetition after the collapse point");
    /* the healthy reply does not loop */
    assert_int_equal(period_after(good, 4), 0);
    json_decref(good);
    json_decref(bad);
}

static void test_no_prompt_logprobs_rejects_each_way(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--no-prompt-logprobs", NULL);
    long st = 0;
    json_t *r = simt_postj(t, p, "/v1/completions",
                           json_pack("{s:s, s:s, s:b, s:i, s:i}", "model",
                                     "sim", "prompt", "Rain fell", "echo", 1,
                                     "logprobs", 1, "max_tokens", 1),
                           &st);
    assert_int_equal(st, 400);
    simt_assert_error(r, "echo");
    json_decref(r);
    r = simt_postj(t, p, "/v1/completions",
                   json_pack("{s:s, s:s, s:i, s:i}", "model", "sim", "prompt",
                             "Rain fell", "prompt_logprobs", 1, "max_tokens",
                             1),
                   &st);
    assert_int_equal(st, 400);
    simt_assert_error(r, "prompt_logprobs");
    json_decref(r);
    r = simt_postj(t, p, "/generate",
                   json_pack("{s:s, s:b, s:i}", "text", "Rain fell",
                             "return_logprob", 1, "logprob_start_len", 0),
                   &st);
    assert_int_equal(st, 400);
    simt_assert_error(r, "logprob_start_len");
    json_decref(r);
    /* decode logprobs still work */
    double v[256];
    assert_true(simt_decode_logprobs(t, p, simt_chat1(QA), v, 256) > 0);
}

static void rate_all(struct simt *t, const char *opt, long want)
{
    struct proc *p = simt_start(t, opt, "1", NULL);
    for (int i = 0; i < 5; i++) {
        long st = 0;
        json_t *r =
            simt_postj(t, p, "/v1/chat/completions", simt_chat1(QA), &st);
        assert_int_equal(st, want);
        simt_assert_error(r, NULL);
        json_decref(r);
    }
}

static void test_error_rates_all(void **state)
{
    struct simt *t = *state;
    rate_all(t, "--rate-429", 429);
    rate_all(t, "--rate-500", 500);
    rate_all(t, "--rate-503", 503);
}

/* Rate faults and latency touch the model endpoints only; /health,
 * /tokenize and the /sim endpoints always answer (docs/SIM.md, "Details"). */
static void test_rate_faults_spare_non_model_endpoints(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--rate-500", "1", NULL);
    long st = 0;
    json_t *r = simt_postj(
        t, p, "/v1/completions",
        json_pack("{s:s, s:i}", "prompt", "Rain fell", "max_tokens", 2), &st);
    assert_int_equal(st, 500);
    json_decref(r);
    r = simt_postj(t, p, "/generate",
                   json_pack("{s:s, s:{s:i}}", "text", "Rain fell",
                             "sampling_params", "max_new_tokens", 2),
                   &st);
    assert_int_equal(st, 500);
    json_decref(r);
    simt_assert_alive(t, p);
    assert_int_equal(simt_count(t, p, "Rain fell"), 2);
    r = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(st, 200);
    json_decref(r);
    r = simt_get(t, p, "/sim/stats", &st);
    assert_int_equal(st, 200);
    json_decref(r);
}

static void test_error_rate_half(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--rate-500", "0.5", "--seed", "1", NULL);
    int fails = 0, oks = 0;
    for (int i = 0; i < 40; i++) {
        long st = 0;
        json_t *r =
            simt_postj(t, p, "/v1/chat/completions", simt_chat1(QA), &st);
        if (st == 500) {
            simt_assert_error(r, NULL);
            fails++;
        } else {
            assert_int_equal(st, 200);
            assert_string_equal(simt_reply(r),
                                "The access code for the blue door is 4812.");
            oks++;
        }
        json_decref(r);
    }
    if (fails < 5 || oks < 5)
        fail_msg("--rate-500 0.5: %d of 40 failed", fails);
}

static void test_config_at_run_time_and_reset(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *p = simt_start(t, NULL);
    assert_true(same_decode(t, h, p));
    json_decref(
        simt_ok(t, p, "/sim/config", json_pack("{s:f}", "decode_noise", 0.5)));
    assert_false(same_decode(t, h, p));
    json_decref(simt_ok(t, p, "/sim/config", json_pack("{s:b}", "reset", 1)));
    assert_true(same_decode(t, h, p));
    /* a rate set at run time */
    json_decref(
        simt_ok(t, p, "/sim/config", json_pack("{s:f}", "rate_503", 1.0)));
    long st = 0;
    json_t *r = simt_postj(t, p, "/v1/chat/completions", simt_chat1(QA), &st);
    assert_int_equal(st, 503);
    json_decref(r);
    json_decref(simt_ok(t, p, "/sim/config", json_pack("{s:b}", "reset", 1)));
    r = simt_postj(t, p, "/v1/chat/completions", simt_chat1(QA), &st);
    assert_int_equal(st, 200);
    json_decref(r);
}

static double config_num(struct simt *t, const struct proc *p, const char *k)
{
    long st = 0;
    json_t *c = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(st, 200);
    json_t *v = json_object_get(c, k);
    if (!json_is_number(v))
        fail_msg("/sim/config has no number '%s'", k);
    double d = json_number_value(v);
    json_decref(c);
    return d;
}

static void test_presets(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *split = simt_start(t, "--preset", "splitk-decode", NULL);
    struct proc *mhc = simt_start(t, "--preset", "mhc-bf16", NULL);
    struct proc *rs = simt_start(t, "--preset", "routed-scaling", NULL);
    assert_true(config_num(t, split, "decode_noise") == 0.05);
    assert_true(config_num(t, mhc, "prefill_noise") == 0.02);
    assert_true(config_num(t, mhc, "noise_growth") == 1.0);
    assert_true(config_num(t, rs, "logit_scale") == 1.02);

    struct lp *a = prompt_lp(t, h, 3000);
    struct lp *s = prompt_lp(t, split, 3000);
    struct lp *m = prompt_lp(t, mhc, 3000);
    struct lp *r = prompt_lp(t, rs, 3000);
    /* splitk-decode: prefill untouched, decode changed */
    assert_int_equal(count_diff(a, s), 0);
    assert_false(same_decode(t, h, split));
    /* mhc-bf16: prefill changed, more at the end than at the start; decode
     * untouched */
    assert_true(count_diff(a, m) > 0);
    assert_true(mean_abs_diff(a, m, a->n - 256, a->n) >
                mean_abs_diff(a, m, 50, 306));
    assert_true(same_decode(t, h, mhc));
    /* routed-scaling: a small shift of every distribution */
    assert_true(count_diff(a, r) > a->n / 2);
    assert_true(mean_abs_diff(a, r, 1, a->n) < 1.0);
    free(a);
    free(s);
    free(m);
    free(r);
}

static void test_presets_combine_and_options_override(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--preset", "splitk-decode,sparse-indexer", NULL);
    assert_true(config_num(t, p, "decode_noise") == 0.05);
    assert_true(config_num(t, p, "forget_after") == 2048);
    struct proc *q = simt_start(t, "--preset", "splitk-decode",
                                "--decode-noise", "0.1", NULL);
    assert_true(config_num(t, q, "decode_noise") == 0.1);
    long st = 0;
    json_t *c = simt_get(t, q, "/sim/config", &st);
    /* a preset is not a fault of its own: the rest stays healthy */
    assert_true(json_number_value(json_object_get(c, "prefill_noise")) == 0.0);
    json_decref(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_decode_noise_leaves_prefill_identical),
        T(test_seed_reproduces_noise),
        T(test_prefill_noise_leaves_decode_identical),
        T(test_noise_grows_with_position),
        T(test_noise_from_spares_early_positions),
        T(test_noise_saturates),
        T(test_logit_scale_keeps_the_argmax),
        T(test_nondeterminism_differs_per_request),
        T(test_batch_variance_alone_vs_concurrent),
        T(test_collapse_after_repeats),
        T(test_no_prompt_logprobs_rejects_each_way),
        T(test_error_rates_all),
        T(test_rate_faults_spare_non_model_endpoints),
        T(test_error_rate_half),
        T(test_config_at_run_time_and_reset),
        T(test_presets),
        T(test_presets_combine_and_options_override),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
