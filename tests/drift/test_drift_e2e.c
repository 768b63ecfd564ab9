/*
 * End-to-end tests of `fidelity drift` against pairs of `fidelity sim`
 * servers on ephemeral 127.0.0.1 ports, one healthy golden and a candidate
 * with the fault under test. Each test reads the --json summary. Corpora
 * are small (2-3 sequences of at most 1,024 tokens) to keep `make test`
 * fast; every server is stopped, also when an assertion fails.
 */
#define _GNU_SOURCE
#include <math.h>
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

#include "http/client.h"
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

/* Starts a healthy golden and a candidate with the given sim options. */
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
    json_t *j;
};

/* Runs drift golden vs candidate with extra options; reads --json. */
static void drift(struct run *r, const char *const *opts)
{
    char gurl[64], curl[64], json[] = "/tmp/drift-e2e-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&P.g));
    snprintf(curl, sizeof(curl), "%s", proc_url(&P.c));
    const char *av[48] = {"drift",      "--golden", gurl, "--candidate", curl,
                          "--no-store", "--json",   json, "--bootstrap", "100"};
    size_t n = 10;
    for (size_t i = 0; opts && opts[i] && n < 47; i++)
        av[n++] = opts[i];
    av[n] = NULL;
    buf_init(&r->out, 0);
    buf_init(&r->err, 0);
    r->rc = proc_run(av, NULL, &r->out, &r->err, 120);
    json_error_t e;
    r->j = json_load_file(json, 0, &e);
    unlink(json);
}

static void run_free(struct run *r)
{
    json_decref(r->j);
    buf_release(&r->out);
    buf_release(&r->err);
}

static double num(const json_t *j, const char *a, const char *b)
{
    const json_t *v = json_object_get(a ? json_object_get(j, a) : j, b);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

static const char *str(const json_t *j, const char *a, const char *b)
{
    const json_t *v = json_object_get(a ? json_object_get(j, a) : j, b);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static const char *bucket_verdict(const json_t *j, size_t i)
{
    return json_string_value(json_object_get(
        json_array_get(json_object_get(j, "buckets"), i), "verdict"));
}

static void test_healthy_pair_passes_with_zero_kl(void **state)
{
    (void)state;
    struct run r;
    start(NULL);
    const char *o[] = {"--sequences", "2",       "--max-context",
                       "512",         "--jsonl", "/tmp/drift-e2e-pos.jsonl",
                       NULL};
    drift(&r, o);
    assert_int_equal(r.rc, 0);
    assert_non_null(r.j);
    /* one JSONL record per compared position and arm */
    FILE *f = fopen("/tmp/drift-e2e-pos.jsonl", "r");
    assert_non_null(f);
    char line[1024];
    int cand = 0, ctrl = 0, bad = 0;
    while (fgets(line, sizeof(line), f)) {
        json_error_t e;
        json_t *rec = json_loads(line, 0, &e);
        bad += !rec;
        const char *arm = json_string_value(json_object_get(rec, "arm"));
        cand += arm && !strcmp(arm, "candidate");
        ctrl += arm && !strcmp(arm, "control");
        if (arm && !strcmp(arm, "candidate"))
            bad += json_number_value(json_object_get(rec, "kl")) != 0.0;
        json_decref(rec);
    }
    fclose(f);
    unlink("/tmp/drift-e2e-pos.jsonl");
    assert_int_equal(bad, 0);
    assert_int_equal(cand, 1022);
    assert_int_equal(ctrl, 1022);
    size_t nb = json_array_size(json_object_get(r.j, "buckets"));
    assert_true(nb >= 4);
    for (size_t i = 0; i < nb; i++)
        assert_string_equal(bucket_verdict(r.j, i), "PASS");
    assert_true(num(r.j, "total", "kl_mean") == 0.0);
    assert_true(num(r.j, "total", "kl_max") == 0.0);
    assert_true(num(r.j, "total", "count") == 1022);
    assert_true(num(r.j, "control_total", "kl_max") == 0.0);
    assert_true(num(r.j, "control_total", "top1_agreement") == 1.0);
    assert_string_equal(str(r.j, "decode", "attribution"), "none");
    assert_string_equal(str(r.j, NULL, "verdict"), "PASS");
    assert_non_null(strstr(r.out.data, "Mean    KLD: 0.000000e+00"));
    run_free(&r);
}

/* The /detokenize requests the golden sim has answered. */
static long golden_detokenizes(void)
{
    struct http_client *h = http_client_new();
    char url[96];
    long st;
    json_t *s = NULL;
    struct diag d = {""};
    snprintf(url, sizeof(url), "%s/sim/stats", proc_url(&P.g));
    assert_int_equal(http_json(h, url, NULL, NULL, 5000, &st, &s, &d), 0);
    long n = (long)json_integer_value(
        json_object_get(json_object_get(s, "requests"), "detokenize"));
    json_decref(s);
    http_client_free(h);
    return n;
}

static void test_growing_prefill_noise_fails_late(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise", "0.1", "--noise-growth", "1", NULL};
    start(f);
    const char *o[] = {"--sequences", "3", "--max-context", "1024", NULL};
    drift(&r, o);
    assert_int_equal(r.rc, 1);
    assert_non_null(r.j);
    size_t nb = json_array_size(json_object_get(r.j, "buckets"));
    assert_string_equal(bucket_verdict(r.j, 0), "PASS");
    assert_string_equal(bucket_verdict(r.j, 1), "PASS");
    assert_string_equal(bucket_verdict(r.j, nb - 1), "FAIL");
    double slope = num(r.j, "growth", "slope");
    double lo = num(r.j, "growth", "slope_lo");
    assert_true(slope > 1.0);
    assert_true(lo > 0.0); /* the interval excludes 0 */
    assert_true(num(r.j, "growth", "ratio") > 2);
    assert_string_equal(str(r.j, "growth", "verdict"), "FAIL");
    assert_string_equal(str(r.j, "decode", "attribution"), "prefill only");
    /* the 50 worst positions, highest KL first, with text and offsets */
    const json_t *w = json_object_get(r.j, "worst");
    assert_int_equal(json_array_size(w), 50);
    double prev = INFINITY;
    for (size_t i = 0; i < 50; i++) {
        const json_t *x = json_array_get(w, i);
        assert_true(num(x, NULL, "kl") <= prev);
        prev = num(x, NULL, "kl");
        assert_true(num(x, NULL, "pos") >= 256); /* late positions */
        assert_true(num(x, NULL, "offset") > 0);
        assert_true(json_is_string(json_object_get(x, "text")));
    }
    assert_non_null(strstr(r.out.data, "50 worst positions"));
    /* their labels: one /detokenize per sequence and the separator's
     * check (two), not five per position */
    assert_true(golden_detokenizes() <= 3 + 2);
    run_free(&r);
}

static void test_decode_only_noise_is_caught_by_decode_path(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--decode-noise", "0.2", NULL};
    start(f);
    const char *o[] = {
        "--sequences", "2", "--max-context", "512", "--decode-tokens",
        "48",          NULL};
    drift(&r, o);
    assert_non_null(r.j);
    assert_true(num(r.j, "total", "kl_max") == 0.0); /* prefill identical */
    const json_t *dc = json_object_get(r.j, "decode");
    assert_true(num(dc, "prefill_vs_prefill", "kl_max") == 0.0);
    assert_true(num(dc, "decode_vs_golden_prefill", "kl_mean") > 1e-4);
    assert_string_not_equal(str(dc, "decode_vs_golden_prefill", "verdict"),
                            "PASS");
    assert_string_equal(str(r.j, "decode", "attribution"), "decode only");
    run_free(&r);
}

static void test_nondeterminism_is_not_drift(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--nondeterminism", "0.05", NULL};
    start(f);
    const char *o[] = {
        "--sequences", "3", "--max-context", "1024", "--determinism",
        "3",           NULL};
    drift(&r, o);
    assert_non_null(r.j);
    /* the raw KL is well above the threshold, yet no bucket warns or
     * fails (a small bucket whose noisy point lands above a threshold is
     * INCONCLUSIVE: the noise cannot decide it) ... */
    assert_true(num(r.j, "total", "kl_mean") > 3e-4);
    size_t nb = json_array_size(json_object_get(r.j, "buckets"));
    for (size_t i = 0; i < nb; i++)
        assert_true(!strcmp(bucket_verdict(r.j, i), "PASS") ||
                    !strcmp(bucket_verdict(r.j, i), "INCONCLUSIVE"));
    assert_int_equal(r.rc, 0);
    /* ... because it is reported as the candidate's nondeterminism */
    const json_t *det = json_object_get(r.j, "determinism");
    assert_string_equal(str(det, "candidate", "verdict"), "nondeterministic");
    assert_string_equal(str(det, "golden", "verdict"), "deterministic");
    assert_non_null(strstr(r.out.data, "NONDETERMINISTIC"));
    /* run-to-run noise is put down to neither path */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(r.j, "attribution"), "kind")),
                        "none");
    run_free(&r);
}

static void test_batch_variance_is_reported_apart(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--batch-variance", "0.05", NULL};
    start(f);
    const char *o[] = {"--sequences",
                       "1",
                       "--max-context",
                       "256",
                       "--decode-tokens",
                       "0",
                       "--determinism",
                       "4",
                       NULL};
    drift(&r, o);
    assert_non_null(r.j);
    assert_int_equal(r.rc, 0);
    assert_true(num(r.j, "total", "kl_max") == 0.0); /* sequential: no drift */
    const json_t *det = json_object_get(r.j, "determinism");
    assert_string_equal(str(det, "candidate", "verdict"), "batch-variant");
    run_free(&r);
}

static void test_constant_noise_warns_without_growth(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--logit-scale", "1.02", NULL};
    start(f);
    const char *o[] = {"--sequences", "2", "--max-context", "1024", NULL};
    drift(&r, o);
    assert_non_null(r.j);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.j, NULL, "verdict"), "WARN");
    size_t nb = json_array_size(json_object_get(r.j, "buckets"));
    for (size_t i = 0; i < nb; i++)
        assert_string_equal(bucket_verdict(r.j, i), "WARN");
    assert_true(fabs(num(r.j, "growth", "slope")) < 0.2);
    assert_true(num(r.j, "growth", "ratio") < 1.5);
    assert_string_equal(str(r.j, "growth", "verdict"), "PASS");
    run_free(&r);
}

static void test_dialects_give_identical_metrics(void **state)
{
    (void)state;
    static const char *const dl[] = {"vllm", "sglang", "echo", "tgi"};
    double kl[4], dp[4], ppl[4], top1[4];
    const char *f[] = {"--prefill-noise", "0.1", "--noise-growth", "1", NULL};
    start(f);
    for (int k = 0; k < 4; k++) {
        struct run r;
        const char *o[] = {"--sequences", "2",   "--max-context",   "512",
                           "--dialect",   dl[k], "--decode-tokens", "0",
                           NULL};
        drift(&r, o);
        assert_non_null(r.j);
        assert_string_equal(str(r.j, "candidate", "dialect"), dl[k]);
        kl[k] = num(r.j, "total", "kl_mean");
        dp[k] = num(r.j, "total", "dp_rms");
        ppl[k] = num(r.j, "total", "log_ppl_ratio");
        top1[k] = num(r.j, "total", "top1_agreement");
        assert_true(num(r.j, "total", "count") == 1022);
        run_free(&r);
    }
    for (int k = 1; k < 3; k++) {
        assert_true(kl[k] == kl[0]);
        assert_true(dp[k] == dp[0]);
        assert_true(ppl[k] == ppl[0]);
        assert_true(top1[k] == top1[0]);
    }
    /* sglang with token_ids_logprob: the candidate also reports the
     * golden's top tokens; the bound can only tighten */
    {
        struct run r;
        const char *o[] = {"--sequences",
                           "2",
                           "--max-context",
                           "512",
                           "--dialect",
                           "sglang",
                           "--decode-tokens",
                           "0",
                           "--token-ids-logprob",
                           "64",
                           NULL};
        drift(&r, o);
        assert_non_null(r.j);
        assert_true(num(r.j, "total", "count") == 1022);
        assert_true(num(r.j, "total", "kl_mean") >= kl[1] * (1 - 1e-12));
        assert_true(num(r.j, "total", "dp_rms") == dp[1]);
        run_free(&r);
    }
    /* TGI gives no prompt top-k: forced-token figures are identical, KL is
     * the coarser {x, rest} bound, never above the top-k bound */
    assert_true(dp[3] == dp[0] && ppl[3] == ppl[0]);
    assert_true(kl[3] > 0 && kl[3] <= kl[0]);
}

/* The whole contents of a file, or NULL. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct buf b = BUF_INIT;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        buf_add(&b, tmp, n);
    fclose(f);
    return buf_detach(&b, len);
}

/* Runs drift with --jobs N, --json and --jsonl into fresh files; returns
 * both files' contents. */
static void drift_jobs(const char *jobs, const char *const *opts, char **json,
                       size_t *jl, char **jsonl, size_t *ll)
{
    char jp[] = "/tmp/drift-e2e-jobs-XXXXXX", lp[] = "/tmp/drift-e2e-jl-XXXXXX";
    int fd = mkstemp(jp);
    assert_true(fd >= 0);
    close(fd);
    fd = mkstemp(lp);
    assert_true(fd >= 0);
    close(fd);
    const char *av[48] = {
        "drift",        "--golden",   proc_url(&P.g), "--candidate",
        proc_url(&P.c), "--no-store", "--json",       jp,
        "--jsonl",      lp,           "--jobs",       jobs};
    size_t n = 12;
    for (size_t i = 0; opts[i] && n < 47; i++)
        av[n++] = opts[i];
    av[n] = NULL;
    struct buf out, err;
    buf_init(&out, 0);
    buf_init(&err, 0);
    int rc = proc_run(av, NULL, &out, &err, 120);
    *json = slurp(jp, jl);
    *jsonl = slurp(lp, ll);
    unlink(jp);
    unlink(lp);
    buf_release(&out);
    buf_release(&err);
    assert_true(rc == 0 || rc == 1);
    assert_non_null(*json);
    assert_non_null(*jsonl);
}

/* Sequences are parsed and compared on worker threads and folded in
 * sequence order: one thread and several give byte-identical --json and
 * --jsonl (growing noise, so every figure and record differs from 0). */
static void test_threads_give_identical_output(void **state)
{
    (void)state;
    const char *f[] = {"--prefill-noise", "0.1", "--noise-growth", "1", NULL};
    const char *o1[] = {
        "--sequences", "7", "--max-context", "512", "--decode-tokens",
        "0",           NULL};
    const char *o2[] = {"--sequences",
                        "5",
                        "--max-context",
                        "300",
                        "--dialect",
                        "sglang",
                        "--decode-tokens",
                        "0",
                        "--token-ids-logprob",
                        "32",
                        NULL};
    const char *const *opts[2] = {o1, o2};
    start(f);
    for (int k = 0; k < 2; k++) {
        char *j1, *l1, *j4, *l4;
        size_t jn1, ln1, jn4, ln4;
        drift_jobs("1", opts[k], &j1, &jn1, &l1, &ln1);
        drift_jobs("4", opts[k], &j4, &jn4, &l4, &ln4);
        assert_true(ln1 > 1000 && jn1 > 1000);
        assert_non_null(strstr(l1, "\"control\""));
        assert_true(jn1 == jn4 && !memcmp(j1, j4, jn1));
        assert_true(ln1 == ln4 && !memcmp(l1, l4, ln1));
        free(j1);
        free(l1);
        free(j4);
        free(l4);
    }
}

static void test_no_prompt_logprobs_falls_back_to_decode(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--no-prompt-logprobs", NULL};
    start(f);
    const char *o[] = {"--sequences", "2", "--max-context", "256", NULL};
    drift(&r, o);
    assert_non_null(r.j);
    assert_int_equal(r.rc, 0);
    assert_true(json_is_false(json_object_get(r.j, "prefill")));
    assert_non_null(strstr(str(r.j, NULL, "fallback"), "decode-path"));
    assert_string_equal(str(r.j, "candidate", "dialect"), "none");
    const json_t *dc = json_object_get(r.j, "decode");
    assert_true(num(dc, "decode_vs_golden_prefill", "count") > 0);
    assert_true(num(dc, "decode_vs_golden_prefill", "kl_max") == 0.0);
    assert_non_null(strstr(r.out.data, "no prompt logprobs"));
    run_free(&r);
}

static void test_golden_without_prompt_logprobs_is_usage(void **state)
{
    (void)state;
    struct run r;
    start(NULL);
    char gurl[64], curl[64];
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&P.g));
    snprintf(curl, sizeof(curl), "%s", proc_url(&P.c));
    /* swap: the faulty server as golden */
    proc_stop(&P.g);
    const char *ga[] = {"sim", "--listen", "127.0.0.1:0",
                        "--no-prompt-logprobs", NULL};
    assert_int_equal(proc_start(&P.g, ga), 0);
    drift(&r, NULL);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err.data, "golden server gives no prompt"));
    run_free(&r);
}

static void test_short_answers_are_counted_skips(void **state)
{
    (void)state;
    struct run r;
    /* the candidate silently keeps only 300 tokens: its answers have
     * fewer prompt positions than were sent */
    const char *f[] = {"--context-limit", "300", "--overflow", "newest", NULL};
    start(f);
    const char *o[] = {
        "--sequences", "1", "--max-context", "512", "--decode-tokens",
        "0",           NULL};
    drift(&r, o);
    assert_non_null(r.j);
    const json_t *sk =
        json_object_get(json_object_get(r.j, "skipped"), "candidate");
    double shortn = num(sk, NULL, "short");
    assert_true(shortn >= 200 && shortn <= 212);
    assert_true(num(r.j, "total", "count") + shortn == 511);
    assert_non_null(strstr(r.out.data, "not returned (short answer)"));
    run_free(&r);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_bad_corpus_and_unreachable(void **state)
{
    (void)state;
    struct run r;
    start(NULL);
    write_file("/tmp/drift-e2e-bad.jsonl", "[1, 300, 301]\nnot json\n");
    const char *o1[] = {"--corpus", "/tmp/drift-e2e-bad.jsonl", NULL};
    drift(&r, o1);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err.data, "drift-e2e-bad.jsonl:2: not JSON"));
    run_free(&r);
    write_file("/tmp/drift-e2e-bad.jsonl", "\n\n");
    drift(&r, o1);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err.data, "is empty"));
    run_free(&r);
    unlink("/tmp/drift-e2e-bad.jsonl");

    const char *av[] = {"drift",       "--golden",           proc_url(&P.g),
                        "--candidate", "http://127.0.0.1:1", "--no-store",
                        NULL};
    struct buf err = BUF_INIT;
    assert_int_equal(proc_run(av, NULL, NULL, &err, 60), 3);
    assert_non_null(strstr(err.data, "candidate"));
    buf_release(&err);
}

static void test_tokenizer_mismatch_names_position(void **state)
{
    (void)state;
    struct run r;
    /* the candidate's template drops prior reasoning: /tokenize renders
     * the same conversation to different ids */
    const char *f[] = {"--reasoning-history", "drop", NULL};
    start(f);
    write_file("/tmp/drift-e2e-tok.jsonl",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello "
               "there.\"},{\"role\":\"assistant\",\"content\":\"Hi.\","
               "\"reasoning_content\":\"Greet back.\"},{\"role\":\"user\","
               "\"content\":\"Bye.\"}]}\n");
    const char *o[] = {"--corpus", "/tmp/drift-e2e-tok.jsonl", NULL};
    drift(&r, o);
    unlink("/tmp/drift-e2e-tok.jsonl");
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.err.data, "tokenize"));
    assert_non_null(strstr(r.err.data, "first difference at position"));
    assert_non_null(strstr(r.err.data, "drift-e2e-tok.jsonl:1"));
    run_free(&r);
}

static void test_store_keeps_no_secret(void **state)
{
    (void)state;
    start(NULL);
    char db[] = "/tmp/drift-e2e-db-XXXXXX";
    int fd = mkstemp(db);
    assert_true(fd >= 0);
    close(fd);
    char gurl[64], curl[64];
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&P.g));
    snprintf(curl, sizeof(curl), "%s", proc_url(&P.c));
    const char *av[] = {"drift",
                        "--golden",
                        gurl,
                        "--candidate",
                        curl,
                        "--db",
                        db,
                        "--sequences",
                        "1",
                        "--max-context",
                        "128",
                        "--candidate-api-key",
                        "sk-SECRET-drift-42",
                        "--header",
                        "X-Api-Key: hdr-SECRET-7",
                        NULL};
    assert_int_equal(proc_run(av, NULL, NULL, NULL, 60), 0);
    FILE *f = fopen(db, "rb");
    assert_non_null(f);
    char *all = calloc(1, 1 << 22);
    size_t n = fread(all, 1, (1 << 22) - 1, f);
    fclose(f);
    assert_true(n > 0);
    assert_null(memmem(all, n, "SECRET", 6));
    assert_non_null(memmem(all, n, "drift_run", 9));
    assert_non_null(memmem(all, n, "fidelity.drift/1", 16));
    free(all);
    unlink(db);
    char wal[64];
    snprintf(wal, sizeof(wal), "%s-wal", db);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", db);
    unlink(wal);
}

/* Prefill noise sized on the mean-KL WARN threshold (excess about 1.2e-4
 * against 1e-4): 15 positions cannot decide it, and the report says how
 * many more would; 504 positions decide WARN. A deterministic healthy
 * pair is PASS, never INCONCLUSIVE. */
static void test_threshold_fault_short_inconclusive_long_decided(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise", "0.0168", NULL};
    start(f);
    const char *shortrun[] = {"--sequences",     "1", "--max-context",  "16",
                              "--decode-tokens", "0", "--no-cache-arm", NULL};
    drift(&r, shortrun);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.j, NULL, "verdict"), "INCONCLUSIVE");
    assert_string_equal(bucket_verdict(r.j, 0), "INCONCLUSIVE");
    const json_t *u = json_object_get(
        json_array_get(json_object_get(r.j, "buckets"), 0), "undecided");
    assert_string_equal(str(u, NULL, "metric"), "mean KL");
    assert_true(num(u, NULL, "more") > 0);
    assert_true(num(u, NULL, "point") > 1e-4);
    assert_non_null(strstr(r.out.data, "verdict: INCONCLUSIVE"));
    assert_non_null(strstr(r.out.data, "more positions would decide"));
    run_free(&r);
    const char *longrun[] = {"--sequences",     "8", "--max-context",  "64",
                             "--decode-tokens", "0", "--no-cache-arm", NULL};
    drift(&r, longrun);
    assert_int_equal(r.rc, 0);
    assert_string_equal(str(r.j, NULL, "verdict"), "WARN");
    assert_null(json_object_get(r.j, "undecided"));
    run_free(&r);
}

/* Prefill noise growing with position at a level no threshold calls
 * harmful where measured (excess about 4e-6 at position 767, a slope past
 * the growth FAIL threshold): never WARN or FAIL on growth; the same
 * verdict with 2 and 4 sequences; INCONCLUSIVE while, at the slope, the
 * excess would cross WARN within the server's context (131,072), PASS
 * once it would only past it (max_model_len 4,096). */
static void test_growth_sized_and_stable(void **state)
{
    (void)state;
    static const char *const ctx[] = {"131072", "4096"};
    static const char *const want[] = {"INCONCLUSIVE", "PASS"};
    for (int c = 0; c < 2; c++) {
        const char *f[] = {"--prefill-noise",
                           "0.006",
                           "--noise-growth",
                           "1",
                           "--max-model-len",
                           ctx[c],
                           NULL};
        start(f);
        for (int k = 0; k < 2; k++) {
            struct run r;
            const char *o[] = {"--sequences",
                               k ? "4" : "2",
                               "--max-context",
                               "1024",
                               "--growth-floor",
                               "1e-6",
                               "--decode-tokens",
                               "0",
                               "--no-cache-arm",
                               "--no-control",
                               NULL};
            drift(&r, o);
            assert_int_equal(r.rc, 0);
            const json_t *g = json_object_get(r.j, "growth");
            assert_true(num(g, NULL, "slope") > 1);
            assert_false(json_is_true(json_object_get(g, "reaches_warn")));
            assert_string_equal(str(g, NULL, "verdict"), want[c]);
            double cross = num(json_object_get(g, "crossing"), NULL, "warn");
            assert_true(cross > 1024 && cross < 131072);
            assert_int_equal((long)num(g, NULL, "context"), atol(ctx[c]));
            assert_string_equal(str(r.j, NULL, "verdict"), want[c]);
            run_free(&r);
        }
        teardown(NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_healthy_pair_passes_with_zero_kl,
                                  teardown),
        cmocka_unit_test_teardown(test_growing_prefill_noise_fails_late,
                                  teardown),
        cmocka_unit_test_teardown(
            test_decode_only_noise_is_caught_by_decode_path, teardown),
        cmocka_unit_test_teardown(test_nondeterminism_is_not_drift, teardown),
        cmocka_unit_test_teardown(test_batch_variance_is_reported_apart,
                                  teardown),
        cmocka_unit_test_teardown(test_constant_noise_warns_without_growth,
                                  teardown),
        cmocka_unit_test_teardown(test_dialects_give_identical_metrics,
                                  teardown),
        cmocka_unit_test_teardown(test_no_prompt_logprobs_falls_back_to_decode,
                                  teardown),
        cmocka_unit_test_teardown(test_golden_without_prompt_logprobs_is_usage,
                                  teardown),
        cmocka_unit_test_teardown(test_bad_corpus_and_unreachable, teardown),
        cmocka_unit_test_teardown(test_short_answers_are_counted_skips,
                                  teardown),
        cmocka_unit_test_teardown(test_tokenizer_mismatch_names_position,
                                  teardown),
        cmocka_unit_test_teardown(test_store_keeps_no_secret, teardown),
        cmocka_unit_test_teardown(test_threads_give_identical_output, teardown),
        cmocka_unit_test_teardown(
            test_threshold_fault_short_inconclusive_long_decided, teardown),
        cmocka_unit_test_teardown(test_growth_sized_and_stable, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
