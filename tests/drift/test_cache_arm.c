/*
 * End-to-end tests of drift's cache arm (src/drift/cache_arm.c) against a
 * healthy golden `fidelity sim` and a candidate sim with a prefix-cache
 * fault: warm-path noise, recomputation noise after eviction, no cache
 * figures, and each set of flush endpoints. Corpora are one sequence of
 * 512 tokens so a run takes about a second; every server is stopped, also
 * when an assertion fails.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/xalloc.h"
#include "http/client.h"
#include "util/fakesrv.h"
#include "util/proc.h"

struct pair {
    struct proc g, c;
    bool up;
};

static struct pair P; /* stopped by teardown, also after a failure */

static int teardown(void **state)
{
    (void)state;
    if (P.up) {
        proc_stop(&P.g);
        proc_stop(&P.c);
    }
    P.up = false;
    return 0;
}

/* A healthy golden and a candidate with the given sim options. */
static void start(const char *const *cand_opts)
{
    const char *ga[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    const char *ca[32] = {"sim", "--listen", "127.0.0.1:0"};
    size_t n = 3;
    for (size_t i = 0; cand_opts && cand_opts[i] && n < 31; i++)
        ca[n++] = cand_opts[i];
    ca[n] = NULL;
    assert_int_equal(proc_start(&P.g, ga), 0);
    if (proc_start(&P.c, ca)) {
        proc_stop(&P.g);
        fail_msg("candidate sim did not start");
    }
    P.up = true;
}

struct run {
    int rc;
    struct buf out, err;
    json_t *j;     /* the --json summary */
    json_t *cache; /* its "cache" object (borrowed) */
};

static void drift(struct run *r, const char *const *opts)
{
    char gurl[64], curl[64], json[] = "/tmp/drift-cache-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&P.g));
    snprintf(curl, sizeof(curl), "%s", proc_url(&P.c));
    /* one sequence of 512 tokens, no control arm: about a second */
    const char *av[48] = {"drift",
                          "--golden",
                          gurl,
                          "--candidate",
                          curl,
                          "--no-store",
                          "--json",
                          json,
                          "--bootstrap",
                          "0",
                          "--sequences",
                          "1",
                          "--max-context",
                          "512",
                          "--no-control",
                          "--decode-seqs",
                          "1",
                          "--worst",
                          "0"};
    size_t n = 19;
    for (size_t i = 0; opts && opts[i] && n < 47; i++)
        av[n++] = opts[i];
    av[n] = NULL;
    buf_init(&r->out, 0);
    buf_init(&r->err, 0);
    r->rc = proc_run(av, NULL, &r->out, &r->err, 120);
    json_error_t e;
    r->j = json_load_file(json, 0, &e);
    unlink(json);
    if (!r->j)
        fail_msg("no JSON summary (exit %d): %s", r->rc, buf_str(&r->err));
    r->cache = json_object_get(r->j, "cache");
    assert_true(json_is_object(r->cache));
}

static void run_free(struct run *r)
{
    json_decref(r->j);
    buf_release(&r->out);
    buf_release(&r->err);
}

static const char *str(const json_t *j, const char *k)
{
    const json_t *v = json_object_get(j, k);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static long integer(const json_t *j, const char *k)
{
    const json_t *v = json_object_get(j, k);
    assert_true(json_is_integer(v));
    return (long)json_integer_value(v);
}

/* The prefill buckets and the decode path all PASS. */
static void assert_other_arms_pass(const json_t *j)
{
    const json_t *b = json_object_get(j, "buckets"), *v;
    size_t i;
    assert_true(json_array_size(b) > 0);
    json_array_foreach(b, i, v)
    {
        assert_string_equal(str(v, "verdict"), "PASS");
    }
    const json_t *dec = json_object_get(j, "decode");
    assert_string_equal(
        str(json_object_get(dec, "prefill_vs_prefill"), "verdict"), "PASS");
    assert_string_equal(
        str(json_object_get(dec, "decode_vs_golden_prefill"), "verdict"),
        "PASS");
}

/* The candidate sim's counter of flush calls. */
static long flushes(void)
{
    struct http_client *h = http_client_new();
    char url[96];
    long st;
    json_t *s = NULL;
    struct diag d = {""};
    snprintf(url, sizeof(url), "%s/sim/stats", proc_url(&P.c));
    assert_int_equal(http_json(h, url, NULL, NULL, 5000, &st, &s, &d), 0);
    long n = integer(json_object_get(s, "cache"), "flushes");
    json_decref(s);
    http_client_free(h);
    return n;
}

/* The context figures of sim p's GET /sim/stats: the longest model
 * request (prompt and completion tokens) and how many went past it. */
static void context_stats(const struct proc *p, long *longest, long *over)
{
    struct http_client *h = http_client_new();
    char url[96];
    long st;
    json_t *s = NULL;
    struct diag d = {""};
    snprintf(url, sizeof(url), "%s/sim/stats", proc_url(p));
    assert_int_equal(http_json(h, url, NULL, NULL, 5000, &st, &s, &d), 0);
    const json_t *c = json_object_get(s, "context");
    *longest = integer(c, "longest");
    *over = integer(c, "over");
    json_decref(s);
    http_client_free(h);
}

/* A byte-level tokenizer (one token per byte, as the real model has) and
 * max_model_len 2048 on both servers, --max-context 2048: drift's corpus
 * (prompt and one completion token) and the arm with 1, 4 and 8
 * conversations (sized with the served tokenizer, the generated tokens
 * counted) all run, and the sims saw no request past the limit. */
static void test_arm_fits_a_byte_level_context(void **state)
{
    (void)state;
    const char *ga[] = {
        "sim",  "--listen", "127.0.0.1:0", "--byte-tokens", "--max-model-len",
        "2048", NULL};
    const char *ca[] = {
        "sim",  "--listen", "127.0.0.1:0", "--byte-tokens", "--max-model-len",
        "2048", NULL};
    assert_int_equal(proc_start(&P.g, ga), 0);
    if (proc_start(&P.c, ca)) {
        proc_stop(&P.g);
        fail_msg("candidate sim did not start");
    }
    P.up = true;
    static const char *const n[] = {"1", "4", "8"};
    for (size_t i = 0; i < 3; i++) {
        struct run r;
        const char *o[] = {"--max-context",   "2048", "--cache-arm", n[i],
                           "--decode-tokens", "16",   NULL};
        drift(&r, o);
        assert_int_equal(r.rc, 0);
        assert_true(json_is_true(json_object_get(r.cache, "ran")));
        assert_int_equal(integer(r.cache, "conversations"), atol(n[i]));
        assert_null(json_object_get(r.cache, "failed"));
        /* the corpus filled the context: 2,047 prompt tokens */
        assert_int_equal(integer(r.j, "positions"), 2046);
        run_free(&r);
    }
    for (int k = 0; k < 2; k++) {
        long longest, over;
        context_stats(k ? &P.c : &P.g, &longest, &over);
        assert_int_equal(over, 0);
        assert_true(longest <= 2048 && longest > 1900);
    }
}

static void test_warm_path_noise_fails_on_the_cache_path(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--warm-noise", "1", NULL};
    start(c);
    drift(&r, NULL);
    assert_int_equal(r.rc, 1);
    assert_string_equal(str(r.j, "verdict"), "FAIL");
    assert_string_equal(str(r.cache, "verdict"), "FAIL");
    assert_string_equal(str(r.cache, "attribution"),
                        "warm path differs from cold");
    assert_other_arms_pass(r.j); /* cold prefill and decode are healthy */
    assert_true(integer(json_object_get(r.cache, "cached_tokens"), "warm") > 0);
    assert_true(strstr(buf_str(&r.out), "warm path differs from cold"));
    /* decided within the default budget */
    assert_true(json_is_true(json_object_get(r.cache, "decided")));
    assert_true(integer(r.cache, "conversations") <= 16);
    /* harm counts the warm path, and says so */
    const json_t *h = json_object_get(r.j, "harm");
    assert_true(json_number_value(json_object_get(h, "excess_kl_mean")) > 0);
    const json_t *arms = json_object_get(h, "arms");
    assert_string_equal(
        json_string_value(json_array_get(arms, json_array_size(arms) - 1)),
        "cache-warm");
    assert_true(integer(json_object_get(h, "arm_positions"), "cache-warm") > 0);
    run_free(&r);
}

/* A warm-path fault strong enough to change greedy tokens: every
 * conversation diverges warm against cold, cold against cold never does,
 * and the report counts them with the first position, decisive ones
 * included, as evidence of their own. */
static void test_greedy_divergence_is_reported(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--warm-noise", "5", NULL};
    start(c);
    drift(&r, NULL);
    assert_int_equal(r.rc, 1);
    assert_string_equal(str(r.cache, "verdict"), "FAIL");
    const json_t *dv = json_object_get(r.cache, "divergence");
    long convs = integer(r.cache, "conversations");
    assert_int_equal(integer(dv, "warm"), convs);
    assert_int_equal(integer(dv, "cold"), 0);
    assert_true(integer(dv, "decisive") > 0);
    assert_true(integer(r.cache, "diverged_at") >= 0);
    assert_non_null(strstr(buf_str(&r.out), "evidence in itself"));
    run_free(&r);
}

/* A warm-path fault sized on the WARN threshold (excess mean KL about
 * 1.1e-4 to 1.6e-4): four conversations cannot decide it and say how many
 * more would; sixteen decide WARN. Neither is PASS. */
static void test_warm_fault_on_the_threshold(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--warm-noise", "0.12", NULL};
    start(c);
    const char *four[] = {"--cache-arm", "4", NULL};
    drift(&r, four);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.cache, "verdict"), "INCONCLUSIVE");
    assert_string_equal(str(r.j, "verdict"), "INCONCLUSIVE");
    const json_t *u = json_object_get(r.cache, "undecided");
    assert_true(integer(u, "more_conversations") > 0);
    assert_string_equal(str(u, "level"), "WARN");
    assert_non_null(strstr(buf_str(&r.out), "more conversations would decide"));
    const json_t *all = json_object_get(r.j, "undecided");
    assert_string_equal(str(json_array_get(all, 0), "where"), "cache arm");
    run_free(&r);
    const char *sixteen[] = {"--cache-arm", "16", NULL};
    drift(&r, sixteen);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.cache, "verdict"), "WARN");
    assert_string_equal(str(r.cache, "attribution"),
                        "warm path differs from cold");
    run_free(&r);
}

static void test_healthy_sim_passes_with_the_cache_hit(void **state)
{
    (void)state;
    struct run r;
    start(NULL);
    drift(&r, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.j, "verdict"), "PASS");
    assert_string_equal(str(r.cache, "verdict"), "PASS");
    assert_string_equal(str(r.cache, "attribution"), "none");
    const json_t *ct = json_object_get(r.cache, "cached_tokens");
    long warm = integer(ct, "warm"), prompt = integer(ct, "prompt");
    assert_true(warm > 0 && warm < prompt);
    assert_int_equal(integer(ct, "cold"), 0);
    assert_true(strncmp(str(r.cache, "hit"), "hit (", 5) == 0);
    assert_true(json_is_true(json_object_get(r.cache, "generated_in_history")));
    /* the default arm: four conversations, every position identical, so
     * the interval is clear of WARN and it stops there */
    assert_int_equal(integer(r.cache, "conversations"), 4);
    assert_true(json_is_true(json_object_get(r.cache, "decided")));
    assert_int_equal(integer(r.cache, "budget"), 16);
    assert_int_equal(integer(json_object_get(r.cache, "divergence"), "warm"),
                     0);
    assert_null(json_object_get(r.j, "undecided"));
    run_free(&r);
}

static void test_no_cache_figures_pass_as_unknown(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--no-cache-report", NULL};
    start(c);
    drift(&r, NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.cache, "verdict"), "PASS");
    assert_true(strncmp(str(r.cache, "hit"), "cache use unknown", 17) == 0);
    assert_true(json_is_null(
        json_object_get(json_object_get(r.cache, "cached_tokens"), "warm")));
    assert_true(strstr(buf_str(&r.out), "cache use unknown"));
    run_free(&r);
}

static void test_recomputation_fault_needs_cache_evict(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--recompute-noise", "1", "--cache-tokens", "2048",
                       NULL};
    start(c);
    drift(&r, NULL); /* without --cache-evict: not claimed */
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.cache, "verdict"), "PASS");
    assert_string_equal(str(r.cache, "attribution"), "none");
    assert_null(json_object_get(r.cache, "evict_verdict"));
    run_free(&r);
    const char *o[] = {"--cache-evict", NULL};
    drift(&r, o);
    assert_int_equal(r.rc, 1);
    assert_string_equal(str(r.cache, "verdict"), "PASS"); /* warm is fine */
    assert_string_equal(str(r.cache, "evict_verdict"), "FAIL");
    assert_string_equal(str(r.cache, "attribution"),
                        "recomputed path differs from cold");
    assert_int_equal(integer(r.cache, "capacity"), 2048);
    assert_int_equal(
        integer(json_object_get(r.cache, "cached_tokens"), "evicted"), 0);
    run_free(&r);
}

static void test_cache_evict_on_a_healthy_sim_passes(void **state)
{
    (void)state;
    struct run r;
    const char *c[] = {"--cache-tokens", "2048", NULL};
    start(c);
    const char *o[] = {"--cache-evict", NULL};
    drift(&r, o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.cache, "evict_verdict"), "PASS");
    run_free(&r);
}

/* Each set of flush endpoints: the one present is used; with none the
 * cold request goes first and the history keeps the conversation's own
 * replies. */
static void test_flush_endpoints_present_or_absent(void **state)
{
    (void)state;
    static const struct {
        const char *opt;
        const char *used; /* NULL: none */
    } cases[] = {
        {"sglang", "/flush_cache"},
        {"vllm", "/reset_prefix_cache"},
        {"none", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct run r;
        const char *c[] = {"--flush-endpoints", cases[i].opt, NULL};
        start(c);
        drift(&r, NULL);
        assert_int_equal(r.rc, 0);
        assert_string_equal(str(r.cache, "verdict"), "PASS");
        const json_t *f = json_object_get(r.cache, "flush");
        if (cases[i].used) {
            assert_string_equal(json_string_value(f), cases[i].used);
            assert_true(flushes() >= 3); /* found, before warm, before cold */
        } else {
            assert_true(json_is_null(f));
            assert_int_equal(flushes(), 0);
            assert_false(
                json_is_true(json_object_get(r.cache, "generated_in_history")));
            const json_t *ct = json_object_get(r.cache, "cached_tokens");
            assert_int_equal(integer(ct, "cold"), 0); /* sent first */
            assert_true(integer(ct, "warm") > 0);
        }
        run_free(&r);
        teardown(NULL);
    }
}

static void test_arm_options(void **state)
{
    (void)state;
    struct run r;
    start(NULL);
    const char *off[] = {"--no-cache-arm", NULL};
    drift(&r, off);
    assert_int_equal(r.rc, 0);
    assert_false(json_is_true(json_object_get(r.cache, "ran")));
    assert_string_equal(str(r.cache, "attribution"), "not run");
    run_free(&r);
    const char *two[] = {"--cache-arm", "2", NULL};
    drift(&r, two);
    assert_int_equal(r.rc, 0);
    assert_int_equal(integer(r.cache, "conversations"), 2); /* exactly */
    assert_int_equal(integer(r.cache, "budget"), 2);
    assert_string_equal(str(r.cache, "verdict"), "PASS");
    run_free(&r);
    const char *bad[] = {"--cache-arm", "x", NULL};
    const char *av[] = {"drift",
                        "--golden",
                        "http://127.0.0.1:1",
                        "--candidate",
                        "http://127.0.0.1:1",
                        bad[0],
                        bad[1],
                        NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    assert_int_equal(proc_run(av, NULL, &out, &err, 30), 2);
    buf_release(&out);
    buf_release(&err);
}

/* A candidate without a chat endpoint: sim behind a proxy that answers
 * 404 there. The arm says it did not run; the rest of the run stands. */
static void no_chat(void *ud, const char *method, const char *path,
                    const char *body, size_t len, long *status,
                    const char **ctype, struct buf *out)
{
    *ctype = "application/json";
    if (!strcmp(path, "/v1/chat/completions")) {
        *status = 404;
        buf_adds(out, "{\"error\":{\"message\":\"no chat here\"}}");
        return;
    }
    struct http_client *h = http_client_new();
    struct http_resp resp;
    struct diag d = {""};
    char *url = xasprintf("%s%s", (const char *)ud, path);
    const char *hdr[] = {"Content-Type: application/json", NULL};
    struct http_req rq = {.method = method,
                          .url = url,
                          .body = body,
                          .body_len = len,
                          .headers = hdr,
                          .timeout_ms = 30000};
    http_resp_init(&resp);
    if (http_do(h, &rq, &resp, &d)) {
        *status = 502;
    } else {
        *status = resp.status;
        buf_add(out, resp.body.data ? resp.body.data : "", resp.body.len);
    }
    http_resp_release(&resp);
    free(url);
    http_client_free(h);
}

/* The same proxy with every negative number of its answers (every
 * logprob, in every dialect; token ids, ranks and counts are not
 * negative) sent as null, as a server whose logprobs are broken answers. */
static void null_logprobs(void *ud, const char *method, const char *path,
                          const char *body, size_t len, long *status,
                          const char **ctype, struct buf *out)
{
    struct buf raw = BUF_INIT;
    no_chat(ud, method, path, body, len, status, ctype, &raw);
    const char *p = raw.data ? raw.data : "", *end = p + raw.len;
    bool in_str = false;
    for (; p < end; p++) {
        if (in_str) {
            buf_add(out, p, 1);
            if (*p == '\\' && p + 1 < end)
                buf_add(out, ++p, 1);
            else if (*p == '"')
                in_str = false;
            continue;
        }
        if (*p == '"')
            in_str = true;
        if (*p == '-' && p + 1 < end && p[1] >= '0' && p[1] <= '9') {
            buf_adds(out, "null");
            p += strspn(p + 1, "+-.0123456789eE");
            continue;
        }
        buf_add(out, p, 1);
    }
    buf_release(&raw);
}

/* The same proxy with the third negative number of every answer (a
 * logprob) sent as NaN, or as -Infinity (ud of the proxy: the sim's URL;
 * which one is the static below), as a server with a broken kernel
 * answers: one bad value among good ones. */
static const char *bad_literal = "NaN";
static void one_bad_logprob(void *ud, const char *method, const char *path,
                            const char *body, size_t len, long *status,
                            const char **ctype, struct buf *out)
{
    struct buf raw = BUF_INIT;
    no_chat(ud, method, path, body, len, status, ctype, &raw);
    const char *p = raw.data ? raw.data : "", *end = p + raw.len;
    bool in_str = false;
    int seen = 0;
    for (; p < end; p++) {
        if (in_str) {
            buf_add(out, p, 1);
            if (*p == '\\' && p + 1 < end)
                buf_add(out, ++p, 1);
            else if (*p == '"')
                in_str = false;
            continue;
        }
        if (*p == '"')
            in_str = true;
        if (*p == '-' && p + 1 < end && p[1] >= '0' && p[1] <= '9' &&
            ++seen == 3) {
            buf_adds(out, bad_literal);
            p += strspn(p + 1, "+-.0123456789eE");
            continue;
        }
        buf_add(out, p, 1);
    }
    buf_release(&raw);
}

/* The same proxy answering every chat request with vLLM's 400 for a
 * request over the context. */
static void chat_too_long(void *ud, const char *method, const char *path,
                          const char *body, size_t len, long *status,
                          const char **ctype, struct buf *out)
{
    if (!strcmp(path, "/v1/chat/completions")) {
        *ctype = "application/json";
        *status = 400;
        buf_adds(out, "{\"error\":{\"message\":\"This model's maximum "
                      "context length is 2048 tokens. However, you requested "
                      "4169 tokens\",\"type\":\"BadRequestError\"}}");
        return;
    }
    no_chat(ud, method, path, body, len, status, ctype, out);
}

static void candidate_behind(fakesrv_fn fn, json_t **summary, struct buf *out,
                             int *rc)
{
    start(NULL);
    int port = 0;
    char *sim = xstrdup(proc_url(&P.c));
    struct fakesrv *f = fakesrv_start(fn, sim, &port);
    assert_non_null(f);
    char gurl[64], curl[64], json[] = "/tmp/drift-cache-XXXXXX";
    int fd = mkstemp(json);
    close(fd);
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&P.g));
    snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", port);
    const char *av[] = {"drift",
                        "--golden",
                        gurl,
                        "--candidate",
                        curl,
                        "--no-store",
                        "--json",
                        json,
                        "--bootstrap",
                        "0",
                        "--sequences",
                        "1",
                        "--max-context",
                        "512",
                        "--no-control",
                        "--decode-seqs",
                        "1",
                        NULL};
    struct buf err = BUF_INIT;
    buf_init(out, 0);
    *rc = proc_run(av, NULL, out, &err, 120);
    buf_add(out, err.data ? err.data : "", err.len); /* stderr after stdout */
    fakesrv_stop(f);
    free(sim);
    json_error_t e;
    *summary = json_load_file(json, 0, &e);
    unlink(json);
    buf_release(&err);
}

/* Every arm request refused for its length: INCONCLUSIVE for the cache
 * path with the server's answer quoted once, exit 0, never PASS. */
/* Nothing judged on nothing: a candidate whose logprobs are all null is
 * an error with the counts (exit 1), never PASS over 0 positions. */
static void test_null_logprobs_are_an_error(void **state)
{
    (void)state;
    json_t *summary;
    struct buf out;
    int rc;
    candidate_behind(null_logprobs, &summary, &out, &rc);
    if (rc != 1)
        fail_msg("exit %d:\n%s", rc, buf_str(&out));
    assert_null(summary);
    assert_non_null(strstr(buf_str(&out), "no position could be compared"));
    assert_non_null(strstr(buf_str(&out), "usable logprob"));
    /* with an example of what the server sent */
    if (!strstr(buf_str(&out), ": logprob null"))
        fail_msg("no example:\n%s", buf_str(&out));
    buf_release(&out);
}

/* One NaN (or -Infinity) among good logprobs: the server's fault, an
 * error with the count and the first bad value (exit 1, no summary),
 * never a verdict over the positions left. */
static void test_nan_logprob_is_the_servers_fault(void **state)
{
    (void)state;
    static const char *const lit[] = {"NaN", "-Infinity"};
    static const char *const shown[] = {"logprob NaN", "logprob -Infinity"};
    for (int k = 0; k < 2; k++) {
        json_t *summary;
        struct buf out;
        int rc;
        bad_literal = lit[k];
        candidate_behind(one_bad_logprob, &summary, &out, &rc);
        if (rc != 1)
            fail_msg("exit %d:\n%s", rc, buf_str(&out));
        assert_null(summary);
        assert_non_null(strstr(buf_str(&out), "candidate"));
        assert_non_null(strstr(buf_str(&out), "no logprob can be"));
        assert_non_null(strstr(buf_str(&out), shown[k]));
        assert_non_null(strstr(buf_str(&out), "the server's fault"));
        assert_null(strstr(buf_str(&out), "verdict"));
        buf_release(&out);
        teardown(NULL);
    }
}

static void test_refused_arm_is_never_pass(void **state)
{
    (void)state;
    json_t *j;
    struct buf out;
    int rc;
    candidate_behind(chat_too_long, &j, &out, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(j);
    json_t *c = json_object_get(j, "cache");
    assert_false(json_is_true(json_object_get(c, "ran")));
    assert_string_equal(str(c, "verdict"), "INCONCLUSIVE");
    assert_non_null(strstr(str(c, "failed"), "HTTP 400"));
    assert_non_null(strstr(str(c, "failed"), "maximum context length"));
    assert_string_equal(str(j, "verdict"), "INCONCLUSIVE");
    const char *t = buf_str(&out);
    const char *first = strstr(t, "maximum context length");
    assert_non_null(first);
    assert_non_null(strstr(t, "verdict: INCONCLUSIVE"));
    json_decref(j);
    buf_release(&out);
}

static void test_candidate_without_chat(void **state)
{
    (void)state;
    json_t *j;
    struct buf out;
    int rc;
    candidate_behind(no_chat, &j, &out, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(j);
    json_t *c = json_object_get(j, "cache");
    /* asked for and not measured: never part of a PASS */
    assert_false(json_is_true(json_object_get(c, "ran")));
    assert_string_equal(str(c, "attribution"), "could not run");
    assert_non_null(strstr(str(c, "failed"), "404"));
    assert_string_equal(str(c, "verdict"), "INCONCLUSIVE");
    assert_string_equal(str(j, "verdict"), "INCONCLUSIVE");
    assert_non_null(strstr(buf_str(&out), "could not run"));
    json_decref(j);
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, teardown)
        T(test_warm_path_noise_fails_on_the_cache_path),
        T(test_healthy_sim_passes_with_the_cache_hit),
        T(test_no_cache_figures_pass_as_unknown),
        T(test_recomputation_fault_needs_cache_evict),
        T(test_cache_evict_on_a_healthy_sim_passes),
        T(test_flush_endpoints_present_or_absent),
        T(test_arm_options),
        T(test_candidate_without_chat),
        T(test_refused_arm_is_never_pass),
        T(test_warm_fault_on_the_threshold),
        T(test_greedy_divergence_is_reported),
        T(test_arm_fits_a_byte_level_context),
        T(test_nan_logprob_is_the_servers_fault),
        T(test_null_logprobs_are_an_error),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
