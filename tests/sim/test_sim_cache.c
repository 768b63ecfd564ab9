/*
 * End-to-end: the sim's prefix cache (docs/SIM.md, "Prefix cache"): the
 * cached_tokens every model endpoint reports, block granularity, LRU
 * eviction, generated tokens cached or not, requests with prompt logprobs
 * bypassing it, the flush endpoints switched on and off and answering as
 * sglang and vLLM do (sglang's 400 while a request runs), and the faults
 * whose ground truth drift and audit tests rely on (warm-path noise,
 * recomputation noise after eviction, reuse collapsing after turn N).
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/simtest.h"

#define MAXGEN 64

/* A text prompt of about ntok tokens (fresh). */
static char *text(size_t ntok, unsigned salt)
{
    return simt_filler(ntok, salt);
}

static long cached_of(json_t *r)
{
    json_t *c = json_object_get(
        json_object_get(json_object_get(r, "usage"), "prompt_tokens_details"),
        "cached_tokens");
    assert_true(json_is_integer(c));
    return (long)json_integer_value(c);
}

/* POST /v1/completions with prompt text, greedy, decode logprobs; writes
 * the generated tokens' logprobs to lp (room for MAXGEN); returns the
 * answer. */
static json_t *complete(struct simt *t, const struct proc *p,
                        const char *prompt, double *lp, size_t *n)
{
    json_t *r = simt_ok(t, p, "/v1/completions",
                        json_pack("{s:s,s:s,s:i,s:i,s:i}", "model", "sim",
                                  "prompt", prompt, "max_tokens", 24,
                                  "logprobs", 5, "temperature", 0));
    json_t *a = json_object_get(
        json_object_get(json_array_get(json_object_get(r, "choices"), 0),
                        "logprobs"),
        "token_logprobs");
    size_t i;
    json_t *v;
    *n = 0;
    json_array_foreach(a, i, v)
    {
        if (i < MAXGEN)
            lp[(*n)++] = json_number_value(v);
    }
    return r;
}

static bool same(const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static void test_every_endpoint_reports_cached_tokens(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    char *u = text(300, 1);
    /* chat: the second identical request is served from the cache, in
     * whole 16-token blocks, never its last token */
    json_t *r1 = simt_ok(t, p, "/v1/chat/completions", simt_chat1(u));
    assert_int_equal(cached_of(r1), 0);
    json_t *r2 = simt_ok(t, p, "/v1/chat/completions", simt_chat1(u));
    long pt = simt_prompt_tokens(r2), c2 = cached_of(r2);
    assert_true(c2 > 0 && c2 % 16 == 0 && c2 <= pt - 1 && c2 > pt - 17);
    /* completions */
    double lp[MAXGEN];
    size_t n;
    json_t *c1 = complete(t, p, u, lp, &n);
    assert_int_equal(cached_of(c1), 0); /* no <|bos|>: a different prefix */
    json_decref(c1);
    c1 = complete(t, p, u, lp, &n);
    assert_true(cached_of(c1) >= 256);
    json_decref(c1);
    /* sglang /generate: meta_info.cached_tokens */
    json_t *g = simt_ok(t, p, "/generate",
                        json_pack("{s:s,s:{s:i}}", "text", u, "sampling_params",
                                  "max_new_tokens", 4));
    json_t *m = json_object_get(g, "meta_info");
    assert_true(json_integer_value(json_object_get(m, "cached_tokens")) >= 256);
    json_decref(g);
    json_decref(r1);
    json_decref(r2);
    free(u);
}

static void test_prompt_logprobs_bypass_the_cache(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    char *u = text(200, 2);
    for (int k = 0; k < 2; k++) {
        json_t *r =
            simt_ok(t, p, "/v1/completions",
                    json_pack("{s:s,s:s,s:i,s:i}", "model", "sim", "prompt", u,
                              "max_tokens", 1, "prompt_logprobs", 1));
        assert_int_equal(cached_of(r), 0); /* neither read nor written */
        json_decref(r);
    }
    /* sglang: a prefix of at most logprob_start_len tokens is matched */
    json_t *g = simt_ok(t, p, "/generate",
                        json_pack("{s:s,s:{s:i}}", "text", u, "sampling_params",
                                  "max_new_tokens", 1));
    json_decref(g);
    g = simt_ok(t, p, "/generate",
                json_pack("{s:s,s:{s:i},s:b,s:i}", "text", u, "sampling_params",
                          "max_new_tokens", 1, "return_logprob", 1,
                          "logprob_start_len", 40));
    long c = (long)json_integer_value(
        json_object_get(json_object_get(g, "meta_info"), "cached_tokens"));
    assert_int_equal(c, 32);
    json_decref(g);
    free(u);
}

/* Turn 1, then turn 2 carrying turn 1's reply: how much of turn 2 was
 * cached, against turn 1's prompt length. */
static void two_turns(struct simt *t, const struct proc *p, long *prompt1,
                      long *cached2)
{
    char *u = text(200, 3);
    json_t *msgs = json_pack("[o]", simt_msg("user", u));
    json_t *r1 =
        simt_ok(t, p, "/v1/chat/completions", simt_chat(json_deep_copy(msgs)));
    *prompt1 = simt_prompt_tokens(r1);
    json_array_append_new(msgs, simt_msg("assistant", simt_reply(r1)));
    json_array_append_new(msgs, simt_msg("user", "Now tell me more."));
    json_t *r2 = simt_ok(t, p, "/v1/chat/completions", simt_chat(msgs));
    *cached2 = cached_of(r2);
    json_decref(r1);
    json_decref(r2);
    free(u);
}

static void test_generated_tokens_cached_or_not(void **state)
{
    struct simt *t = *state;
    long p1, c2;
    two_turns(t, simt_start(t, NULL), &p1, &c2);
    assert_true(c2 > p1); /* the reply's blocks were reused */
    two_turns(t, simt_start(t, "--no-cache-output", NULL), &p1, &c2);
    assert_true(c2 <= p1 && c2 > p1 - 17); /* only the prompt's blocks */
}

/* A reply that began with reasoning, sent back with its reasoning_content:
 * its blocks are reused when the template renders the reasoning as it was
 * generated (between its markers), and cannot be when the template drops
 * prior reasoning. Regression: the cache once held the reasoning without
 * its markers, so no reasoning reply was ever reused. */
static void test_reasoning_reply_reused_as_rendered(void **state)
{
    struct simt *t = *state;
    const char *hist[] = {"keep", "drop"};
    for (int k = 0; k < 2; k++) {
        struct proc *p =
            simt_start(t, "--reasoning", "--reasoning-history", hist[k], NULL);
        char *u = text(200, 9);
        json_t *msgs = json_pack("[o]", simt_msg("user", u));
        json_t *r1 = simt_ok(t, p, "/v1/chat/completions",
                             simt_chat(json_deep_copy(msgs)));
        long p1 = simt_prompt_tokens(r1);
        json_t *m1 = json_object_get(
            json_object_get(json_array_get(json_object_get(r1, "choices"), 0),
                            "message"),
            "reasoning_content");
        assert_true(json_is_string(m1) && json_string_length(m1) > 0);
        json_t *a = simt_msg("assistant", simt_reply(r1));
        json_object_set(a, "reasoning_content", m1);
        json_array_append_new(msgs, a);
        json_array_append_new(msgs, simt_msg("user", "Now tell me more."));
        json_t *r2 = simt_ok(t, p, "/v1/chat/completions", simt_chat(msgs));
        long c2 = cached_of(r2);
        if (k == 0)
            assert_true(c2 > p1 + 16); /* the reasoning reply's blocks */
        else
            assert_true(c2 <= p1); /* only the prompt's blocks */
        json_decref(r1);
        json_decref(r2);
        free(u);
    }
}

static void test_lru_eviction(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--cache-tokens", "256", NULL);
    char *a = text(200, 4), *b = text(200, 5);
    double lp[MAXGEN];
    size_t n;
    json_decref(complete(t, p, a, lp, &n));
    json_t *r = complete(t, p, a, lp, &n);
    assert_true(cached_of(r) >= 176);
    json_decref(r);
    json_decref(complete(t, p, b, lp, &n)); /* pushes a out */
    r = complete(t, p, a, lp, &n);
    assert_int_equal(cached_of(r), 0);
    json_decref(r);
    json_t *info = simt_get(t, p, "/get_server_info", NULL);
    assert_int_equal(
        json_integer_value(json_object_get(info, "max_total_num_tokens")), 256);
    assert_int_equal(json_integer_value(json_object_get(info, "page_size")),
                     16);
    json_decref(info);
    free(a);
    free(b);
}

static long flush_status(struct simt *t, const struct proc *p,
                         const char *method, const char *path)
{
    struct http_resp resp;
    http_resp_init(&resp);
    assert_int_equal(simt_raw(t, p, method, path, "", 0, NULL, &resp), 0);
    long st = resp.status;
    http_resp_release(&resp);
    return st;
}

static void test_flush_endpoints_on_and_off(void **state)
{
    struct simt *t = *state;
    static const struct {
        const char *opt;
        long sgl, vllm;
    } cases[] = {
        {"both", 200, 200},
        {"sglang", 200, 404},
        {"vllm", 404, 200},
        {"none", 404, 404},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct proc *p = simt_start(t, "--flush-endpoints", cases[i].opt, NULL);
        assert_int_equal(flush_status(t, p, "POST", "/flush_cache"),
                         cases[i].sgl);
        assert_int_equal(flush_status(t, p, "GET", "/flush_cache"),
                         cases[i].sgl);
        assert_int_equal(flush_status(t, p, "POST", "/reset_prefix_cache"),
                         cases[i].vllm);
        if (i == 0) { /* a flush empties the cache */
            char *u = text(100, 6);
            double lp[MAXGEN];
            size_t n;
            json_decref(complete(t, p, u, lp, &n));
            assert_int_equal(flush_status(t, p, "POST", "/reset_prefix_cache"),
                             200);
            json_t *r = complete(t, p, u, lp, &n);
            assert_int_equal(cached_of(r), 0);
            json_decref(r);
            json_decref(complete(t, p, u, lp, &n));
            assert_int_equal(flush_status(t, p, "GET", "/flush_cache"), 200);
            r = complete(t, p, u, lp, &n);
            assert_int_equal(cached_of(r), 0);
            json_decref(r);
            free(u);
        }
        proc_stop(p);
    }
}

/* The flush answers as the servers give them: sglang's text (200, and
 * 400 with the same text while a model request runs, the cache kept),
 * vLLM's empty 200, neither with a Content-Type (FastAPI's bare
 * Response). */
static void test_flush_answers_shaped_like_the_servers(void **state)
{
    struct simt *t = *state;
    static const char sgl[] =
        "Cache flushed.\nPlease check backend logs for more details. (When "
        "there are running or waiting requests, the operation will not be "
        "performed.)\n";
    struct proc *p = simt_start(t, "--latency-ms", "1500", NULL);
    struct http_resp r;
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "POST", "/flush_cache", "", 0, NULL, &r),
                     0);
    assert_int_equal(r.status, 200);
    assert_string_equal(buf_str(&r.body), sgl);
    assert_null(strcasestr(buf_str(&r.headers), "content-type"));
    http_resp_release(&r);
    http_resp_init(&r);
    assert_int_equal(
        simt_raw(t, p, "POST", "/reset_prefix_cache", "", 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 0);
    assert_null(strcasestr(buf_str(&r.headers), "content-type"));
    http_resp_release(&r);
    /* a chat request in flight (1.5 s of latency): sglang refuses */
    pid_t c = fork();
    if (c == 0) { /* its own client: the parent's connection is not ours */
        struct http_client *hc = http_client_new();
        struct http_resp cr;
        char url[128];
        snprintf(url, sizeof(url), "%s/v1/chat/completions", proc_url(p));
        struct http_req rq = {
            .url = url,
            .method = "POST",
            .body = "{\"messages\":[{\"role\":\"user\",\"content\":"
                    "\"hi\"}],\"max_tokens\":4}",
            .timeout_ms = 10000,
            .max_body = 1 << 20};
        static const char *const hd[] = {"Content-Type: application/json",
                                         NULL};
        rq.headers = hd;
        rq.body_len = strlen(rq.body);
        http_resp_init(&cr);
        int rc = http_do(hc, &rq, &cr, NULL);
        _exit(!rc && cr.status == 200 ? 0 : 1);
    }
    usleep(500000);
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "POST", "/flush_cache", "", 0, NULL, &r),
                     0);
    assert_int_equal(r.status, 400);
    assert_string_equal(buf_str(&r.body), sgl);
    http_resp_release(&r);
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    http_resp_init(&r);
    assert_int_equal(simt_raw(t, p, "GET", "/flush_cache", "", 0, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    http_resp_release(&r);
    proc_stop(p);
}

static void test_no_cache_report(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--no-cache-report", NULL);
    char *u = text(100, 7);
    json_t *r = simt_ok(t, p, "/v1/chat/completions", simt_chat1(u));
    json_decref(r);
    r = simt_ok(t, p, "/v1/chat/completions", simt_chat1(u));
    assert_null(
        json_object_get(json_object_get(r, "usage"), "prompt_tokens_details"));
    json_decref(r);
    json_t *g = simt_ok(t, p, "/generate",
                        json_pack("{s:s,s:{s:i}}", "text", u, "sampling_params",
                                  "max_new_tokens", 2));
    assert_null(
        json_object_get(json_object_get(g, "meta_info"), "cached_tokens"));
    json_decref(g);
    free(u);
}

/* Cold and warm logprobs of the same completion on p. */
static void cold_warm(struct simt *t, const struct proc *p, const char *u,
                      double *cold, double *warm, size_t *n)
{
    size_t n2;
    json_t *r = complete(t, p, u, cold, n);
    assert_int_equal(cached_of(r), 0);
    json_decref(r);
    r = complete(t, p, u, warm, &n2);
    assert_true(cached_of(r) > 0);
    assert_int_equal(n2, *n);
    json_decref(r);
}

static void test_warm_noise_only_on_the_cached_path(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, NULL);
    struct proc *f = simt_start(t, "--warm-noise", "0.5", NULL);
    char *u = text(300, 8);
    double hc[MAXGEN], hw[MAXGEN], fc[MAXGEN], fw[MAXGEN];
    size_t n, m;
    cold_warm(t, h, u, hc, hw, &n);
    cold_warm(t, f, u, fc, fw, &m);
    assert_int_equal(n, m);
    assert_true(same(hc, hw, n)); /* healthy: warm is cold */
    assert_true(same(hc, fc, n)); /* the fault leaves the cold path alone */
    assert_false(same(fc, fw, n));
    free(u);
}

static void test_recompute_noise_after_eviction(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--recompute-noise", "0.5", "--cache-tokens",
                                "512", NULL);
    char *u = text(300, 9), *other = text(500, 10);
    double cold[MAXGEN], warm[MAXGEN], again[MAXGEN];
    size_t n, n2;
    cold_warm(t, p, u, cold, warm, &n);
    assert_true(same(cold, warm, n)); /* cached, not recomputed: healthy */
    json_decref(complete(t, p, other, again, &n2)); /* evicts u */
    json_t *r = complete(t, p, u, again, &n2);
    assert_int_equal(cached_of(r), 0);
    assert_int_equal(n2, n);
    assert_false(same(cold, again, n));
    json_decref(r);
    free(u);
    free(other);
}

static void test_reuse_collapses_after_turn(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--cache-collapse-after", "2", NULL);
    json_t *msgs = json_array();
    long ratio[5];
    for (int turn = 1; turn <= 4; turn++) {
        char *u = text(turn == 1 ? 400 : 30, 20 + (unsigned)turn);
        json_array_append_new(msgs, simt_msg("user", u));
        free(u);
        json_t *r = simt_ok(t, p, "/v1/chat/completions",
                            simt_chat(json_deep_copy(msgs)));
        ratio[turn] = 100 * cached_of(r) / simt_prompt_tokens(r);
        json_array_append_new(msgs, simt_msg("assistant", simt_reply(r)));
        json_decref(r);
    }
    json_decref(msgs);
    assert_int_equal(ratio[1], 0);
    assert_true(ratio[2] > 50);
    assert_true(ratio[3] <= 40 && ratio[3] > 0); /* 40% of the prefix */
    assert_true(ratio[4] <= 40 && ratio[4] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_every_endpoint_reports_cached_tokens),
        T(test_prompt_logprobs_bypass_the_cache),
        T(test_generated_tokens_cached_or_not),
        T(test_reasoning_reply_reused_as_rendered),
        T(test_lru_eviction),
        T(test_flush_endpoints_on_and_off),
        T(test_flush_answers_shaped_like_the_servers),
        T(test_no_cache_report),
        T(test_warm_noise_only_on_the_cached_path),
        T(test_recompute_noise_after_eviction),
        T(test_reuse_collapses_after_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
