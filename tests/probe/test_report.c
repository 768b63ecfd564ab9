/*
 * Tests for src/probe/render.c on synthetic results (no server): the text
 * report against a golden file, and the statistics the JSON carries (per
 * cell Wilson intervals, RULER and NoLiMa effective lengths, McNemar
 * against a baseline). Regenerate the golden file with
 * FIDELITY_GOLDEN_UPDATE=1 after a deliberate change of the layout.
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

#include "probe/probe_int.h"

#define GOLDEN "tests/probe/golden/report.txt"

/* needle at 4k, 8k, 16k x depths 0, 50, 100; the endpoint loses the
 * middle beyond 8k (truncated), the baseline passes everything. */
static void fixture(struct probe_spec **specs, size_t *n,
                    struct probe_result **res, struct probe_result **bres)
{
    unsigned L[] = {4096, 8192, 16384, 32768};
    int D[] = {0, 50, 100};
    struct probe_grid_opts o = {.profile = PROBE_QUICK,
                                .kinds = 1u << PROBE_NEEDLE,
                                .lengths = L,
                                .n_lengths = 4,
                                .depths = D,
                                .n_depths = 3,
                                .repeats = 2,
                                .seed = 7};
    struct diag d;
    assert_int_equal(probe_grid_build(&o, specs, n, &d), 0);
    assert_int_equal(*n, 24);
    *res = calloc(*n, sizeof(**res));
    *bres = calloc(*n, sizeof(**bres));
    for (size_t i = 0; i < *n; i++) {
        const struct probe_spec *s = &(*specs)[i];
        struct probe_result *r = &(*res)[i], *b = &(*bres)[i];
        r->done = b->done = true;
        r->expected = b->expected = s->target - 10;
        r->prompt_tokens = b->prompt_tokens = s->target - 10;
        b->outcome = PROBE_PASS;
        r->outcome = PROBE_PASS;
        snprintf(r->key, sizeof(r->key), "%016zx", i);
        if (s->length > 8192 && s->depth == 50) {
            r->outcome = PROBE_TRUNCATED;
            r->prompt_tokens = 8192;
            r->no_context = true;
        }
        if (s->length == 32768 && s->depth == 0 && s->rep == 1)
            r->outcome = PROBE_MISSED;
    }
}

static char *render(const struct probe_report_in *in)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    probe_report_text(in, f);
    fclose(f);
    return text;
}

static void test_text_report_matches_golden(void **state)
{
    (void)state;
    struct probe_spec *specs;
    struct probe_result *res, *bres;
    size_t n;
    fixture(&specs, &n, &res, &bres);
    struct probe_endpoint ep, base;
    probe_endpoint_init(&ep, "http://127.0.0.1:8000/v1/");
    probe_endpoint_init(&base, "http://127.0.0.1:8001");
    ep.model = strdup("m");
    base.model = strdup("m");
    ep.max_model_len = base.max_model_len = 32768;
    ep.has_tokenize = base.has_tokenize = true;
    struct probe_report_in in = {.ep = &ep,
                                 .base = &base,
                                 .specs = specs,
                                 .res = res,
                                 .bres = bres,
                                 .n = n};
    char *text = render(&in);
    if (getenv("FIDELITY_GOLDEN_UPDATE")) {
        FILE *g = fopen(GOLDEN, "w");
        assert_non_null(g);
        fputs(text, g);
        fclose(g);
    }
    FILE *g = fopen(GOLDEN, "r");
    assert_non_null(g);
    char want[16384];
    size_t got = fread(want, 1, sizeof(want) - 1, g);
    want[got] = '\0';
    fclose(g);
    assert_string_equal(text, want);
    free(text);
    probe_endpoint_release(&ep);
    probe_endpoint_release(&base);
    free(specs);
    free(res);
    free(bres);
}

/* One reply that said there was no earlier context: "1 reply said". */
static void test_text_report_plural_of_one(void **state)
{
    (void)state;
    struct probe_spec *specs;
    struct probe_result *res, *bres;
    size_t n, kept = 0;
    fixture(&specs, &n, &res, &bres);
    for (size_t i = 0; i < n; i++)
        if (res[i].no_context && kept++)
            res[i].no_context = false;
    assert_int_equal(kept, 4);
    struct probe_endpoint ep;
    probe_endpoint_init(&ep, "http://127.0.0.1:8000");
    ep.model = strdup("m");
    ep.max_model_len = 32768;
    struct probe_report_in in = {.ep = &ep, .specs = specs, .res = res, .n = n};
    char *text = render(&in);
    assert_non_null(strstr(text, " 1 reply said there was no earlier "
                                 "context;"));
    assert_null(strstr(text, "1 replies"));
    free(text);
    probe_endpoint_release(&ep);
    free(specs);
    free(res);
    free(bres);
}

static json_t *find_cell(json_t *cells, long len, long depth)
{
    size_t i;
    json_t *c;
    json_array_foreach(
        cells, i,
        c) if (json_integer_value(json_object_get(c, "length")) == len &&
               json_integer_value(json_object_get(c, "depth")) ==
                   depth) return c;
    return NULL;
}

static void test_json_statistics(void **state)
{
    (void)state;
    struct probe_spec *specs;
    struct probe_result *res, *bres;
    size_t n;
    fixture(&specs, &n, &res, &bres);
    struct probe_endpoint ep, base;
    probe_endpoint_init(&ep, "http://127.0.0.1:8000");
    probe_endpoint_init(&base, "http://127.0.0.1:8001");
    struct probe_report_in in = {.ep = &ep,
                                 .base = &base,
                                 .specs = specs,
                                 .res = res,
                                 .bres = bres,
                                 .n = n};
    json_t *j = probe_report_json(&in);
    json_t *side = json_object_get(j, "results");
    /* 24 cases, 4 truncated (16k and 32k at depth 50, 2 repeats), 1 missed */
    assert_int_equal(json_integer_value(json_object_get(side, "cases")), 24);
    assert_int_equal(json_integer_value(json_object_get(side, "passed")), 19);
    json_t *out = json_object_get(side, "outcomes");
    assert_int_equal(
        json_integer_value(json_object_get(out, "truncated-by-server")), 4);
    assert_int_equal(json_integer_value(json_object_get(out, "missed")), 1);
    assert_int_equal(
        json_integer_value(json_object_get(side, "no_context_replies")), 4);
    /* per cell Wilson: 0 of 2 at 16k/50% is [0, 0.658] */
    json_t *cell = find_cell(json_object_get(side, "cells"), 16384, 50);
    assert_non_null(cell);
    json_t *w = json_object_get(cell, "wilson95");
    assert_true(json_real_value(json_array_get(w, 0)) == 0.0);
    assert_true(fabs(json_real_value(json_array_get(w, 1)) - 0.6576) < 1e-3);
    /* by length 1, 1, 4/6, 3/6: RULER (85.6%) stops at 8k; NoLiMa's base
     * is the mean of the three shortest, (1 + 1 + 0.667) / 3 = 0.889, its
     * threshold 0.756: also 8k. */
    json_t *k = json_array_get(json_object_get(side, "kinds"), 0);
    json_t *eff = json_object_get(k, "effective_length");
    assert_int_equal(json_integer_value(json_object_get(eff, "ruler")), 8192);
    assert_int_equal(json_integer_value(json_object_get(eff, "nolima")), 8192);
    assert_true(fabs(json_real_value(json_object_get(eff, "nolima_base")) -
                     0.8889) < 1e-3);
    /* McNemar: 5 pairs where only the baseline passed, none the other way:
     * p = 2 * 0.5^5 = 0.0625, not significant. */
    json_t *o = json_object_get(json_object_get(j, "comparison"), "overall");
    assert_int_equal(
        json_integer_value(json_object_get(o, "baseline_only_pass")), 5);
    assert_true(fabs(json_real_value(json_object_get(o, "p_value")) - 0.0625) <
                1e-12);
    assert_false(json_is_true(json_object_get(o, "significant")));
    /* every case listed, passed or not */
    assert_int_equal(json_array_size(json_object_get(side, "case_results")),
                     24);
    json_decref(j);
    /* max_cases: only the first cases that ran and did not pass, and the
     * same figures (they come from the counts, not from the list) */
    in.max_cases = 3;
    j = probe_report_json(&in);
    side = json_object_get(j, "results");
    json_t *cr = json_object_get(side, "case_results");
    assert_int_equal(json_array_size(cr), 3);
    for (size_t i = 0; i < 3; i++)
        assert_false(
            json_is_true(json_object_get(json_array_get(cr, i), "passed")));
    assert_int_equal(json_integer_value(json_object_get(side, "passed")), 19);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(j, "baseline_results"),
                                        "case_results")),
        0); /* the baseline passed everything */
    json_decref(j);
    probe_endpoint_release(&ep);
    probe_endpoint_release(&base);
    free(specs);
    free(res);
    free(bres);
}

static void test_holm(void **state)
{
    (void)state;
    /* sorted 0.01, 0.03, 0.04: 3 x 0.01, 2 x 0.03, max(1 x 0.04, 0.06) */
    double p[] = {0.04, 0.01, 0.03}, adj[3];
    probe_holm(p, 3, adj);
    assert_true(fabs(adj[1] - 0.03) < 1e-12);
    assert_true(fabs(adj[2] - 0.06) < 1e-12);
    assert_true(fabs(adj[0] - 0.06) < 1e-12);
    double q[] = {0.9, 0.5}, qa[2];
    probe_holm(q, 2, qa);
    assert_true(qa[0] == 1.0 && qa[1] == 1.0);
}

/* The exit rule: the pass rate against --fail-under, the endpoint against
 * the baseline (McNemar over every paired case). */
static void test_verdict(void **state)
{
    (void)state;
    struct probe_spec *specs;
    struct probe_result *res, *bres;
    size_t n;
    fixture(&specs, &n, &res, &bres);
    struct probe_endpoint ep, base;
    probe_endpoint_init(&ep, "http://127.0.0.1:8000");
    probe_endpoint_init(&base, "http://127.0.0.1:8001");
    struct probe_report_in in = {
        .ep = &ep, .specs = specs, .res = res, .bres = bres, .n = n};
    struct probe_verdict v;
    /* 19 of 24 pass: 79.2% */
    probe_verdict(&in, 90, &v);
    assert_true(v.below);
    assert_false(v.worse);
    assert_non_null(strstr(v.line, "FAIL: the pass rate 79.2% is below "
                                   "--fail-under 90%"));
    probe_verdict(&in, 0, &v);
    assert_false(v.below);
    assert_non_null(strstr(v.line, "PASS"));
    probe_verdict(&in, 75, &v);
    assert_false(v.below);
    /* with the baseline: 5 discordant pairs, p = 0.0625: not worse */
    in.base = &base;
    probe_verdict(&in, 0, &v);
    assert_false(v.worse);
    assert_non_null(strstr(v.line, "PASS: the pass rate 79.2% (--fail-under "
                                   "0: not a rule); not significantly worse"));
    /* 3 more cases fail on the endpoint only: 8 discordant, p = 0.0078 */
    for (size_t i = 0, k = 0; i < n && k < 3; i++)
        if (res[i].outcome == PROBE_PASS) {
            res[i].outcome = PROBE_MISSED;
            k++;
        }
    probe_verdict(&in, 0, &v);
    assert_true(v.worse);
    assert_false(v.below);
    assert_non_null(strstr(v.line, "FAIL: significantly worse than the "
                                   "baseline (McNemar p = 0.00781 over 24 "
                                   "paired cases, 8 pass only on the "
                                   "baseline, 0 only on the endpoint)"));
    /* a case sized under 50% of its target is an error-level finding */
    in.base = NULL;
    res[3].expected = in.specs[3].target / 3;
    probe_verdict(&in, 0, &v);
    assert_int_equal(v.sizing, 1);
    assert_non_null(strstr(v.line, "FAIL: the pass rate"));
    assert_non_null(strstr(v.line, "sizing achieved under 50% of the target "
                                   "in 1 cases"));
    char *text = render(&in);
    assert_non_null(strstr(text, "error: sizing achieved under 50% of the "
                                 "target in 1 cases"));
    free(text);
    json_t *j = probe_report_json(&in);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "results"), "sizing_under_half")),
                     1);
    json_decref(j);
    res[3].expected = in.specs[3].target;
    in.base = &base;
    /* better than the baseline is not a failure */
    in.res = bres;
    in.bres = res;
    probe_verdict(&in, 0, &v);
    assert_false(v.worse);
    probe_endpoint_release(&ep);
    probe_endpoint_release(&base);
    free(specs);
    free(res);
    free(bres);
}

/* A kind passing 5% (and 0%) at every length: effective length 0 by both
 * rules in the JSON, "<min" in the text. */
static void test_low_pass_rate_effective_length(void **state)
{
    (void)state;
    for (int pct = 5; pct >= 0; pct -= 5) {
        struct probe_spec *specs;
        struct probe_result *res, *bres;
        size_t n;
        fixture(&specs, &n, &res, &bres);
        /* 24 cases: 6 per length; pass 5% overall: 1 of 24 at 5, else 0 */
        for (size_t i = 0; i < n; i++)
            res[i].outcome = PROBE_MISSED;
        if (pct)
            res[0].outcome = PROBE_PASS;
        struct probe_endpoint ep;
        probe_endpoint_init(&ep, "http://127.0.0.1:8000");
        struct probe_report_in in = {
            .ep = &ep, .specs = specs, .res = res, .n = n};
        json_t *j = probe_report_json(&in);
        json_t *k = json_array_get(
            json_object_get(json_object_get(j, "results"), "kinds"), 0);
        json_t *eff = json_object_get(k, "effective_length");
        assert_int_equal(json_integer_value(json_object_get(eff, "ruler")), 0);
        assert_int_equal(json_integer_value(json_object_get(eff, "nolima")), 0);
        char *text = render(&in);
        assert_non_null(strstr(text, "<min    <min"));
        assert_non_null(strstr(text, "below the shortest length tested"));
        free(text);
        json_decref(j);
        probe_endpoint_release(&ep);
        free(specs);
        free(res);
        free(bres);
    }
}

/* A run keeps one result for the cases of a cell that passed on both
 * sides alike, its weight their number (pool.c): the text report, the
 * verdict and the JSON (but its case list) from those results are the
 * same as from every case's. */
static void test_weighted_results_report_as_every_case(void **state)
{
    (void)state;
    struct probe_spec *specs;
    struct probe_result *res, *bres;
    size_t n, m = 0;
    fixture(&specs, &n, &res, &bres);
    struct probe_spec *ks = calloc(n, sizeof(*ks));
    struct probe_result *kr = calloc(n, sizeof(*kr)),
                        *kb = calloc(n, sizeof(*kb));
    for (size_t i = 0; i < n; i++) {
        bool plain = res[i].outcome == PROBE_PASS && !res[i].no_context;
        const struct probe_spec *s = &specs[i];
        if (plain && m && kr[m - 1].weight && ks[m - 1].kind == s->kind &&
            ks[m - 1].length == s->length && ks[m - 1].depth == s->depth) {
            kr[m - 1].weight++;
            kb[m - 1].weight++;
            continue;
        }
        ks[m] = *s;
        kr[m] = res[i];
        kb[m] = bres[i];
        kr[m].weight = kb[m].weight = plain ? 1 : 0;
        m++;
    }
    assert_true(m < n);
    struct probe_endpoint ep, base;
    probe_endpoint_init(&ep, "http://127.0.0.1:8000");
    probe_endpoint_init(&base, "http://127.0.0.1:8001");
    ep.model = strdup("m");
    base.model = strdup("m");
    ep.max_model_len = base.max_model_len = 32768;
    struct probe_report_in all = {.ep = &ep,
                                  .base = &base,
                                  .specs = specs,
                                  .res = res,
                                  .bres = bres,
                                  .n = n,
                                  .max_cases = 12};
    struct probe_report_in few = all;
    few.specs = ks;
    few.res = kr;
    few.bres = kb;
    few.n = m;
    few.cases = n;
    char *a = render(&all), *b = render(&few);
    assert_string_equal(a, b);
    json_t *ja = probe_report_json(&all), *jb = probe_report_json(&few);
    char *sa = json_dumps(ja, JSON_SORT_KEYS),
         *sb = json_dumps(jb, JSON_SORT_KEYS);
    assert_string_equal(sa, sb); /* the failed cases are kept whole */
    struct probe_verdict va, vb;
    probe_verdict(&all, 90, &va);
    probe_verdict(&few, 90, &vb);
    assert_string_equal(va.line, vb.line);
    assert_true(fabs(probe_pass_rate(res, n) - probe_pass_rate(kr, m)) < 1e-12);
    free(a);
    free(b);
    free(sa);
    free(sb);
    json_decref(ja);
    json_decref(jb);
    probe_endpoint_release(&ep);
    probe_endpoint_release(&base);
    free(ks);
    free(kr);
    free(kb);
    free(specs);
    free(res);
    free(bres);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holm),
        cmocka_unit_test(test_verdict),
        cmocka_unit_test(test_low_pass_rate_effective_length),
        cmocka_unit_test(test_text_report_matches_golden),
        cmocka_unit_test(test_text_report_plural_of_one),
        cmocka_unit_test(test_json_statistics),
        cmocka_unit_test(test_weighted_results_report_as_every_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
