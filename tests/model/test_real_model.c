/*
 * fidelity drift against a small real transformer (tests/model/: a
 * byte-level model with hyper-connection mixing, a KV-cache decode path,
 * mixture-of-experts and a sparse top-k attention indexer, trained on
 * generated text, served by tests/model/serve.py on the CPU). A golden
 * with every switch off is compared with candidates that each turn one
 * patch on; the expectations are the ones that hold with drift's rules
 * today, on real numerics rather than the sim's additive noise:
 *
 *   - the inert switch: every distribution bit-identical, PASS;
 *   - split-K decode attention: prefill exactly equal, decode differs;
 *   - the sparse indexer keeping k positions: exactly equal where a query
 *     sees k positions or fewer, different past them;
 *   - a changed routed-scaling factor: different from the first bucket,
 *     FAIL, both paths flat from the start;
 *   - a correct prefix cache: the warm request reports its hit and the
 *     cache arm passes.
 *
 *   - bf16 mixing: small within the trained length, never a FAIL on a
 *     growth rule alone, the same verdict (or INCONCLUSIVE) at 2 and 4
 *     sequences;
 *   - warm-path faults (the cache arm, 4 conversations): cached K/V in
 *     bf16 below fp8 in harm; positions offset after a hit found on the
 *     warm path by the greedy tokens' divergence.
 *
 * The inert switch's harm is exactly 0: harm takes decode steps over the
 * golden's own decode-vs-prefill gap and warm positions over the golden's
 * own warm path. What drift says about every switch, with the figures,
 * is in tests/model/README.md.
 *
 * Contexts are short (2 sequences of 256 tokens, 16 or 32 decode tokens)
 * so the file takes well under a minute on a 2-core machine. Every server
 * is stopped by teardown, also when an assertion fails; without PyTorch
 * the tests skip naming `make deps` (under CI=true they fail).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/jfield.h"
#include "util/modelsrv.h"
#include "util/proc.h"

static struct modelsrv G, C; /* the golden (shared), this test's candidate */
static json_t *inert_run;    /* the inert run's summary, for the cache test */

static int teardown(void **state)
{
    (void)state;
    modelsrv_stop(&C);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    modelsrv_stop(&C);
    modelsrv_stop(&G);
    json_decref(inert_run);
    inert_run = NULL;
    return 0;
}

/* The golden (every switch off), started once; the candidate with args. */
static void start(const char *const *args)
{
    if (!G.pid)
        modelsrv_start(&G, NULL);
    modelsrv_start(&C, args);
}

struct run {
    int rc;
    struct buf out, err;
    json_t *j;
    char jsonl[64]; /* with want_jsonl: the per-position records */
};

/* fidelity drift golden vs candidate with the test's options (the short
 * corpus below unless they override it), --json read back. */
static void drift(struct run *r, const char *const *opts, bool want_jsonl)
{
    char json[] = "/tmp/drift-model-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    memset(r, 0, sizeof(*r));
    const char *av[64] = {
        "drift",       "--golden",   G.url,           "--candidate",
        C.url,         "--no-store", "--json",        json,
        "--sequences", "2",          "--max-context", "256",
        "--bootstrap", "50",         "--worst",       "0"};
    size_t n = 16;
    if (want_jsonl) {
        snprintf(r->jsonl, sizeof(r->jsonl), "/tmp/drift-model-pos-XXXXXX");
        fd = mkstemp(r->jsonl);
        assert_true(fd >= 0);
        close(fd);
        av[n++] = "--jsonl";
        av[n++] = r->jsonl;
    }
    for (size_t k = 0; opts && opts[k] && n < 63; k++)
        av[n++] = opts[k];
    av[n] = NULL;
    buf_init(&r->out, 0);
    buf_init(&r->err, 0);
    time_t t0 = time(NULL);
    r->rc = proc_run(av, NULL, &r->out, &r->err, 300);
    json_error_t e;
    r->j = json_load_file(json, 0, &e);
    unlink(json);
    /* what drift said, kept in the test's log (a line at a time:
     * print_message cuts long messages) */
    print_message("drift (exit %d, %lds):\n", r->rc, (long)(time(NULL) - t0));
    for (char *p = r->out.data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        print_message("  %.*s\n", nl ? (int)(nl - p) : (int)strlen(p), p);
    }
    if (!r->j)
        fail_msg("drift wrote no JSON (exit %d): %s", r->rc, buf_str(&r->err));
}

static void run_free(struct run *r)
{
    json_decref(r->j);
    buf_release(&r->out);
    buf_release(&r->err);
    if (r->jsonl[0])
        unlink(r->jsonl);
}

/* The candidate's /get_server_info, as drift fingerprinted it: the
 * switch under test is on. */
static const json_t *switches(const json_t *j)
{
    const json_t *fp = jfield_get(j, "candidate", "fingerprint");
    const json_t *s =
        jfield_get(json_object_get(fp, "/get_server_info"), "switches", NULL);
    if (!json_is_object(s))
        fail_msg("the candidate's /get_server_info has no 'switches'");
    return s;
}

/* Every prefill bucket: the candidate's KL exactly 0, all positions. */
static void prefill_identical(const json_t *j)
{
    const json_t *b = json_object_get(j, "buckets");
    assert_true(json_array_size(b) >= 3);
    for (size_t i = 0; i < json_array_size(b); i++) {
        const json_t *x = json_array_get(b, i);
        assert_true(jfield_num(x, "candidate", "kl_max") == 0.0);
        assert_true(jfield_num(x, "candidate", "top1_agreement") == 1.0);
        assert_true(jfield_num(x, "excess", "kl_mean") == 0.0);
    }
    assert_true(jfield_num(j, "total", "kl_max") == 0.0);
    assert_true(jfield_num(j, "total", "log_ppl_ratio") == 0.0);
}

/* The inert switch (another code path, the same numerics): every
 * distribution of both paths bit-identical. The run keeps the cache arm
 * for the prefix-cache test below. */
static void test_inert_switch_is_bit_identical(void **state)
{
    (void)state;
    struct run r;
    const char *sw[] = {"--inert", NULL};
    start(sw);
    const char *o[] = {"--decode-tokens", "16", NULL};
    drift(&r, o, false);
    assert_true(json_is_true(json_object_get(switches(r.j), "inert")));
    assert_int_equal(r.rc, 0);
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "PASS");
    prefill_identical(r.j);
    assert_string_equal(jfield_str(r.j, "growth", "shape"), "none");
    /* decode: the candidate's prefill is the golden's to the bit, so its
     * decode compares with both alike; the prefills there agree too */
    const json_t *dc = jfield_get(r.j, "decode", NULL);
    assert_true(jfield_num(dc, "prefill_vs_prefill", "kl_max") == 0.0);
    assert_true(jfield_num(dc, "decode_vs_golden_prefill", "kl_mean") ==
                jfield_num(dc, "decode_vs_prefill", "kl_mean"));
    assert_true(jfield_num(dc, "decode_vs_golden_prefill", "kl_max") ==
                jfield_num(dc, "decode_vs_prefill", "kl_max"));
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "none");
    assert_true(jfield_num(r.j, "harm", "flips_per_1k") == 0.0);
    /* harm takes the decode steps over the golden's own decode-vs-prefill
     * gap and the warm positions over the golden's own warm path: the
     * real server's rounding between its paths is no harm, and a
     * candidate identical to the golden has none at all */
    assert_true(jfield_num(r.j, "harm", "excess_kl_mean") == 0.0);
    assert_true(jfield_num(r.j, "harm", "hi") == 0.0);
    assert_true(jfield_num(jfield_get(r.j, "harm", "arm_positions"), NULL,
                           "decode") > 0);
    assert_true(jfield_num(jfield_get(r.j, "harm", "arm_positions"), NULL,
                           "cache-warm") > 0);
    assert_string_equal(jfield_str(r.j, "harm", "warm_baseline"),
                        "golden warm vs cold");
    /* both sides decode from an empty cache: the golden served earlier
     * runs (bisect's serves every configuration) and would otherwise
     * decode over cached K/V, another rounding than a fresh candidate */
    const json_t *fl = jfield_get(r.j, "decode", "flushed");
    assert_string_equal(jfield_str(fl, NULL, "golden"), "/flush_cache");
    assert_string_equal(jfield_str(fl, NULL, "candidate"), "/flush_cache");
    inert_run = json_incref(r.j);
    run_free(&r);
}

/* A correct prefix cache: the warm request is served from the cache
 * (cached_tokens reported) and warm against cold passes. From the inert
 * run when it ran, else from a run of its own. */
static void test_correct_prefix_cache_reports_hit_and_passes(void **state)
{
    (void)state;
    struct run r = {0};
    const json_t *j = inert_run;
    if (!j) {
        start(NULL);
        const char *o[] = {"--decode-tokens", "16", "--sequences", "1", NULL};
        drift(&r, o, false);
        j = r.j;
    }
    const json_t *c = json_object_get(j, "cache");
    assert_true(json_is_true(json_object_get(c, "ran")));
    assert_string_equal(jfield_str(c, NULL, "flush"), "/flush_cache");
    assert_true(json_is_true(json_object_get(c, "generated_in_history")));
    assert_true(jfield_num(c, "cached_tokens", "warm") > 0);
    assert_true(jfield_num(c, "cached_tokens", "warm") <
                jfield_num(c, "cached_tokens", "prompt"));
    assert_true(jfield_num(c, "cached_tokens", "cold") == 0);
    assert_non_null(strstr(jfield_str(c, NULL, "hit"), "hit ("));
    assert_true(jfield_num(c, "cold_vs_cold", "kl_max") ==
                0.0); /* deterministic */
    assert_true(jfield_num(c, "warm_vs_cold", "count") > 0);
    assert_true(json_is_null(json_object_get(c, "diverged_at")));
    assert_string_equal(jfield_str(c, NULL, "verdict"), "PASS");
    assert_string_equal(jfield_str(c, NULL, "attribution"), "none");
    if (r.j)
        run_free(&r);
}

/* Split-K decode attention (bf16 partials): a decode-path kernel. Every
 * prefill position is exactly the golden's; the decode steps differ. */
static void test_splitk_is_decode_only_prefill_exact(void **state)
{
    (void)state;
    struct run r;
    const char *sw[] = {"--splitk", "32", NULL};
    start(sw);
    const char *o[] = {"--no-cache-arm", NULL};
    drift(&r, o, false);
    assert_int_equal(jfield_num(switches(r.j), "splitk", NULL), 32);
    prefill_identical(r.j);
    const json_t *dc = jfield_get(r.j, "decode", NULL);
    assert_true(jfield_num(dc, "prefill_vs_prefill", "kl_max") == 0.0);
    assert_true(jfield_num(dc, "decode_vs_golden_prefill", "kl_mean") > 0.0);
    const json_t *p = json_array_get(json_object_get(dc, "points"), 0);
    assert_true(jfield_num(p, "gap", "candidate") >
                jfield_num(p, "gap", "golden"));
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "PASS");
    /* below the WARN thresholds drift attributes decode by the gap when
     * it is clear of its error; with 2 sequences of 32 steps it is */
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "decode");
    run_free(&r);
}

/* The sparse indexer keeping the top 64 key positions: a query that sees
 * 64 positions or fewer is computed exactly as dense attention, so every
 * position up to 64 is bit-identical; past it the selection drops keys. */
static void test_indexer_exact_below_k_differs_past_it(void **state)
{
    (void)state;
    struct run r;
    const char *sw[] = {"--indexer-topk", "64", NULL};
    start(sw);
    const char *o[] = {"--decode-tokens", "16", "--no-cache-arm", NULL};
    drift(&r, o, true);
    assert_int_equal(jfield_num(switches(r.j), "indexer_topk", NULL), 64);
    /* position p is predicted by a query over p positions */
    FILE *f = fopen(r.jsonl, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    long below = 0, past = 0, differs = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *x = json_loads(line, 0, NULL);
        assert_non_null(x);
        if (!strcmp(jfield_str(x, NULL, "arm"), "candidate")) {
            double pos = jfield_num(x, NULL, "pos"),
                   kl = jfield_num(x, NULL, "kl");
            if (pos <= 64) {
                below++;
                if (kl != 0.0 || jfield_num(x, NULL, "dlogp") != 0.0)
                    fail_msg("position %.0f (a query over at most 64 "
                             "positions) differs: KL %g",
                             pos, kl);
            } else {
                past++;
                differs += kl > 0.0;
            }
        }
        json_decref(x);
    }
    free(line);
    fclose(f);
    assert_int_equal(below, 2 * 64);
    assert_true(past > 0);
    assert_true(differs > past / 2);
    /* the buckets: [1,64) exact, every later one FAIL */
    const json_t *b = json_object_get(r.j, "buckets");
    const json_t *b0 = json_array_get(b, 0);
    assert_true(jfield_num(json_array_get(b, 0), "excess", "kl_mean") == 0.0);
    assert_true(jfield_num(json_array_get(b, json_array_size(b) - 1), "excess",
                           "kl_mean") > 0.0);
    assert_string_equal(jfield_str(b0, NULL, "verdict"), "PASS");
    /* past k never PASS; the last bucket FAIL ([64,128) rests on a few
     * positions with 2 sequences and may be INCONCLUSIVE) */
    for (size_t i = 1; i < json_array_size(b); i++)
        assert_string_not_equal(
            jfield_str(json_array_get(b, i), NULL, "verdict"), "PASS");
    assert_string_equal(
        jfield_str(json_array_get(b, json_array_size(b) - 1), NULL, "verdict"),
        "FAIL");
    assert_string_not_equal(jfield_str(r.j, NULL, "verdict"), "PASS");
    assert_true(jfield_num(r.j, "harm", "excess_kl_mean") > 0.0);
    run_free(&r);
}

/* The routed-scaling factor dropped (1.0 where the model was trained with
 * 2.5): every MoE layer at every position, on both paths. */
static void test_routed_scaling_differs_from_first_bucket(void **state)
{
    (void)state;
    struct run r;
    const char *sw[] = {"--routed-scaling", "1.0", NULL};
    start(sw);
    const char *o[] = {"--decode-tokens", "16", "--no-cache-arm", NULL};
    drift(&r, o, false);
    assert_true(jfield_num(switches(r.j), "routed_scaling", NULL) == 1.0);
    const json_t *b0 = json_array_get(json_object_get(r.j, "buckets"), 0);
    assert_int_equal(jfield_num(b0, NULL, "from"), 1);
    assert_true(jfield_num(b0, "excess", "kl_mean") > 1e-3);
    assert_string_equal(jfield_str(b0, NULL, "verdict"), "FAIL");
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "FAIL");
    assert_int_equal(r.rc, 1);
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "both-flat");
    assert_true(jfield_num(r.j, "harm", "excess_kl_mean") > 1e-3);
    run_free(&r);
}

/* A saved golden on the real model: the comparison of routed scaling
 * against the file gives the live comparison's summary, figure for figure
 * (the model is deterministic on the CPU). docs/DRIFT.md, "Saved
 * goldens". */
static void test_saved_golden_gives_the_live_figures(void **state)
{
    (void)state;
    const char *sw[] = {"--routed-scaling", "1.0", NULL};
    start(sw);
    char dir[] = "/tmp/drift-model-gold-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char gf[96], live[96], file[96];
    snprintf(gf, sizeof(gf), "%s/g.fgold", dir);
    snprintf(live, sizeof(live), "%s/live.json", dir);
    snprintf(file, sizeof(file), "%s/file.json", dir);
    struct buf out = BUF_INIT, err = BUF_INIT;
    /* without the decode path, as the live run below */
    const char *save[] = {"drift",
                          "--golden",
                          G.url,
                          "--save-golden",
                          gf,
                          "--sequences",
                          "2",
                          "--max-context",
                          "256",
                          "--no-cache-arm",
                          "--decode-tokens",
                          "0",
                          "--bootstrap",
                          "50",
                          NULL};
    int rc = proc_run(save, NULL, &out, &err, 300);
    if (rc)
        fail_msg("save: exit %d: %s", rc, buf_str(&err));
    const char *l[] = {"drift",
                       "--golden",
                       G.url,
                       "--candidate",
                       C.url,
                       "--sequences",
                       "2",
                       "--max-context",
                       "256",
                       "--no-cache-arm",
                       "--decode-tokens",
                       "0",
                       "--bootstrap",
                       "50",
                       "--no-store",
                       "--json",
                       live,
                       NULL};
    int rl = proc_run(l, NULL, &out, &err, 300);
    const char *f[] = {
        "drift", "--golden-file", gf,       "--candidate", C.url, "--bootstrap",
        "50",    "--no-store",    "--json", file,          NULL};
    int rf = proc_run(f, NULL, &out, &err, 300);
    assert_int_equal(rf, rl);
    json_error_t e;
    json_t *a = json_load_file(live, 0, &e), *b = json_load_file(file, 0, &e);
    assert_non_null(a);
    assert_non_null(b);
    json_object_del(b, "golden_file");
    char *sa = json_dumps(a, JSON_SORT_KEYS),
         *sb = json_dumps(b, JSON_SORT_KEYS);
    if (strcmp(sa, sb))
        fail_msg("the summaries differ:\nlive %.300s\nfile %.300s", sa, sb);
    assert_string_equal(jfield_str(b, NULL, "verdict"), "FAIL");
    free(sa);
    free(sb);
    json_decref(a);
    json_decref(b);
    buf_release(&out);
    buf_release(&err);
    char *rm = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
    free(rm);
}

/* The largest excess KL mean of any prefill bucket. */
static double max_bucket_excess(const json_t *j)
{
    const json_t *b = json_object_get(j, "buckets");
    double m = 0;
    for (size_t i = 0; i < json_array_size(b); i++) {
        double x = jfield_num(json_array_get(b, i), "excess", "kl_mean");
        m = x > m ? x : m;
    }
    return m;
}

/* Hyper-connection mixing in bf16: within the trained length its excess
 * stays below the WARN threshold, so no FAIL may rest on a growth rule
 * alone, and the verdict does not flip between 2 and 4 sequences (the
 * same, or INCONCLUSIVE). */
static void test_mix_bf16_no_growth_fail_same_at_2_and_4(void **state)
{
    (void)state;
    struct run r2, r4;
    const char *sw[] = {"--mix-bf16", NULL};
    start(sw);
    const char *o2[] = {"--decode-tokens", "16", "--no-cache-arm", NULL};
    const char *o4[] = {"--decode-tokens", "16", "--no-cache-arm",
                        "--sequences",     "4",  NULL};
    drift(&r2, o2, false);
    drift(&r4, o4, false);
    assert_true(json_is_true(json_object_get(switches(r2.j), "mix_bf16")));
    const json_t *js[2] = {r2.j, r4.j};
    for (int k = 0; k < 2; k++) {
        const char *v = jfield_str(js[k], NULL, "verdict");
        double m = max_bucket_excess(js[k]);
        print_message("mix-bf16 at %d sequences: %s, largest bucket excess "
                      "%.3g, harm %.3g\n",
                      k ? 4 : 2, v, m,
                      jfield_num(js[k], "harm", "excess_kl_mean"));
        if (!strcmp(v, "FAIL"))
            assert_true(m >= 1e-4); /* a FAIL needs a measured size */
        assert_true(jfield_num(js[k], "harm", "excess_kl_mean") < 1e-3);
    }
    const char *a = jfield_str(r2.j, NULL, "verdict"),
               *b = jfield_str(r4.j, NULL, "verdict");
    assert_true(!strcmp(a, b) || !strcmp(a, "INCONCLUSIVE") ||
                !strcmp(b, "INCONCLUSIVE"));
    run_free(&r2);
    run_free(&r4);
}

/* Warm-path faults: cached K/V rounded to bf16, then to fp8 e4m3 without
 * scales; the cache arm with 4 conversations. Prefill and decode never
 * read the cache, so harm is the warm positions': bf16 below fp8. */
static void test_cache_kv_bf16_below_fp8_in_harm(void **state)
{
    (void)state;
    struct run rb, rf;
    const char *o[] = {
        "--decode-tokens", "16",        "--sequences", "1", "--cache-arm", "4",
        "--no-control",    "--no-self", NULL};
    const char *swb[] = {"--cache-kv-dtype", "bf16", NULL};
    start(swb);
    drift(&rb, o, false);
    modelsrv_stop(&C);
    const char *swf[] = {"--cache-kv-dtype", "fp8", NULL};
    start(swf);
    drift(&rf, o, false);
    double hb = jfield_num(rb.j, "harm", "excess_kl_mean");
    double hf = jfield_num(rf.j, "harm", "excess_kl_mean");
    print_message("harm: bf16 K/V %.3g (cache %s), fp8 K/V %.3g (cache %s)\n",
                  hb, jfield_str(rb.j, "cache", "verdict"), hf,
                  jfield_str(rf.j, "cache", "verdict"));
    assert_true(json_is_true(jfield_get(rb.j, "cache", "ran")));
    assert_true(json_is_true(jfield_get(rf.j, "cache", "ran")));
    assert_true(jfield_num(jfield_get(rf.j, "harm", "arm_positions"), NULL,
                           "cache-warm") > 0);
    assert_true(hb < hf);
    assert_true(hf > 0);
    run_free(&rb);
    run_free(&rf);
}

/* Positions offset by one block after a cache hit: the warm request's
 * greedy tokens leave the cold ones where cold was sure, which never
 * happens cold against cold on this deterministic server. That is
 * evidence in itself: the cache arm FAILs, attributed to the warm path,
 * and the run FAILs. */
static void test_cache_pos_offset_found_on_warm_path(void **state)
{
    (void)state;
    struct run r;
    const char *sw[] = {"--cache-pos-offset", NULL};
    start(sw);
    /* the arm's default budget (4 to 16 conversations, stopping once
     * decided): with 4 the heavy tail leaves it undecided */
    const char *o[] = {"--decode-tokens", "16", "--sequences", "1", NULL};
    drift(&r, o, false);
    const json_t *c = json_object_get(r.j, "cache");
    assert_true(json_is_true(json_object_get(c, "ran")));
    assert_true(jfield_num(c, "cached_tokens", "warm") > 0);
    assert_string_equal(jfield_str(c, NULL, "verdict"), "FAIL");
    assert_string_equal(jfield_str(c, NULL, "attribution"),
                        "warm path differs from cold");
    assert_true(jfield_num(c, "cold_vs_cold", "kl_max") == 0.0);
    assert_true(jfield_num(c, "divergence", "warm") >
                0); /* greedy tokens left */
    assert_true(jfield_num(c, "divergence", "decisive") > 0);
    assert_true(jfield_num(c, "divergence", "cold") == 0);
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "FAIL");
    assert_int_equal(r.rc, 1);
    assert_true(jfield_num(r.j, "harm", "excess_kl_mean") > 0.0);
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_inert_switch_is_bit_identical, teardown),
        cmocka_unit_test_teardown(
            test_correct_prefix_cache_reports_hit_and_passes, teardown),
        cmocka_unit_test_teardown(test_splitk_is_decode_only_prefill_exact,
                                  teardown),
        cmocka_unit_test_teardown(test_indexer_exact_below_k_differs_past_it,
                                  teardown),
        cmocka_unit_test_teardown(test_saved_golden_gives_the_live_figures,
                                  teardown),
        cmocka_unit_test_teardown(test_routed_scaling_differs_from_first_bucket,
                                  teardown),
        cmocka_unit_test_teardown(test_mix_bf16_no_growth_fail_same_at_2_and_4,
                                  teardown),
        cmocka_unit_test_teardown(test_cache_kv_bf16_below_fp8_in_harm,
                                  teardown),
        cmocka_unit_test_teardown(test_cache_pos_offset_found_on_warm_path,
                                  teardown),
    };
    /* TEST_FILTER=test_bisect* runs the tests matching a pattern (cmocka's
     * * and ?), to rerun one without the whole file's time */
    const char *filter = getenv("TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
