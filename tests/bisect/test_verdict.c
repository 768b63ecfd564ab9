/*
 * Tests for bisect/verdict: harm, attribution words and the claimed-path
 * mismatch from drift's summary, and the recall change (Newcombe's hybrid
 * Wilson interval, McNemar) and identical answers from probe's report,
 * on small hand-written documents in the two schemas.
 */
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bisect/rank.h"
#include "bisect/verdict.h"

static json_t *drift(double kl, double ctl, const char *growth,
                     const char *bucket_verdict, const char *attribution,
                     const char *verdict)
{
    return json_pack(
        "{s:{s:i,s:f,s:f,s:f,s:f,s:i},s:{s:f},s:{s:s},s:[{s:s}],"
        "s:{s:s,s:{s:{s:f}}},s:s}",
        "total", "count", 2000, "kl_mean", kl, "kl_max", kl * 10, "dp_rms",
        kl ? 0.01 : 0.0, "top1_agreement", kl ? 0.99 : 1.0, "decisive_flips", 4,
        "control_total", "kl_mean", ctl, "growth", "verdict", growth, "buckets",
        "verdict", bucket_verdict, "decode", "attribution", attribution,
        "decode_vs_golden_prefill", "excess", "kl_max",
        strcmp(attribution, "none") ? 0.01 : 0.0, "verdict", verdict);
}

static json_t *probe(int k1, int k2, int n, double p, bool sig,
                     const char *reply1, const char *reply2)
{
    return json_pack("{s:{s:i,s:i,s:[{s:s}]},s:{s:i,s:i,s:[{s:s}]},"
                     "s:{s:{s:f,s:b}}}",
                     "results", "cases", n, "passed", k1, "case_results",
                     "reply", reply1, "baseline_results", "cases", n, "passed",
                     k2, "case_results", "reply", reply2, "comparison",
                     "overall", "p_value", p, "significant", sig);
}

static void test_prefill_culprit(void **state)
{
    (void)state;
    json_t *d = drift(3e-4, 1e-4, "FAIL", "WARN", "none", "FAIL");
    json_t *p = probe(15, 25, 25, 0.002, true, "a", "b");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_true(v.measured && v.harmful && v.recall_worse && !v.inert);
    assert_true(fabs(v.harm - 2e-4) < 1e-12);
    assert_true(fabs(v.flips_per_1k - 2.0) < 1e-12);
    assert_string_equal(v.attribution, "prefill only");
    assert_int_equal(v.measured_path, BISECT_PATH_PREFILL);
    assert_true(bisect_path_mismatch(BISECT_PATH_DECODE, &v));
    assert_false(bisect_path_mismatch(BISECT_PATH_PREFILL, &v));
    assert_false(bisect_path_mismatch(BISECT_PATH_UNKNOWN, &v));
    /* 15/25 against 25/25: -0.40, Newcombe hybrid interval */
    assert_true(fabs(v.pass_diff + 0.40) < 1e-12);
    assert_true(v.diff_lo < -0.55 && v.diff_lo > -0.62);
    assert_true(v.diff_hi < -0.17 && v.diff_hi > -0.22);
    json_decref(d);
    json_decref(p);
}

static void test_decode_and_both(void **state)
{
    (void)state;
    json_t *d = drift(0, 0, "n/a", "PASS", "decode kernels", "FAIL");
    json_t *p = probe(25, 25, 25, 1, false, "a", "a");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_string_equal(v.attribution, "decode only");
    assert_true(v.harmful && !v.recall_worse && !v.inert);
    assert_true(bisect_path_mismatch(BISECT_PATH_BOTH, &v));
    json_decref(d);
    d = drift(3e-4, 0, "WARN", "FAIL", "prefill and decode kernels", "FAIL");
    bisect_verdict_from(d, p, &v);
    assert_string_equal(v.attribution, "both growing");
    json_decref(d);
    d = drift(3e-4, 0, "PASS", "FAIL",
              "shared by both paths (weights, "
              "scaling)",
              "FAIL");
    bisect_verdict_from(d, p, &v);
    assert_string_equal(v.attribution, "both flat");
    assert_int_equal(v.measured_path, BISECT_PATH_BOTH);
    json_decref(d);
    json_decref(p);
}

static void test_inert_needs_identical_everything(void **state)
{
    (void)state;
    json_t *d = drift(0, 0, "n/a", "PASS", "none", "PASS");
    json_t *same =
        probe(25, 25, 25, 1, false, "The code is 4812.", "The code is 4812.");
    json_t *other =
        probe(25, 25, 25, 1, false, "The code is 4812.", "the code is 4812.");
    struct bisect_verdict v;
    bisect_verdict_from(d, same, &v);
    assert_true(v.inert && !v.harmful);
    assert_string_equal(v.attribution, "none");
    bisect_verdict_from(d, other, &v);
    assert_false(v.inert); /* one answer differs in a byte */
    bisect_verdict_from(NULL, same, &v);
    assert_false(v.measured);
    assert_false(v.inert);
    json_decref(d);
    json_decref(same);
    json_decref(other);
}

/* When drift's summary carries its harm scalar and attribution, they are
 * used as given (interval included). */
static void test_drift_harm_fields_used(void **state)
{
    (void)state;
    json_t *d = drift(3e-4, 1e-4, "PASS", "PASS", "none", "FAIL");
    json_object_set_new(d, "harm",
                        json_pack("{s:f,s:f,s:f,s:f}", "excess_kl_mean", 5e-4,
                                  "lo", 4e-4, "hi", 6e-4, "flips_per_1k", 3.5));
    json_object_set_new(d, "attribution",
                        json_pack("{s:s,s:s}", "kind", "both-growing", "words",
                                  "both paths, depending on position"));
    json_t *p = probe(25, 25, 25, 1, false, "a", "a");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_true(v.harm == 5e-4 && v.harm_lo == 4e-4 && v.harm_hi == 6e-4);
    assert_true(v.flips_per_1k == 3.5);
    assert_string_equal(v.attribution, "both growing");
    assert_int_equal(v.measured_path, BISECT_PATH_BOTH);
    assert_true(bisect_path_mismatch(BISECT_PATH_DECODE, &v));
    json_decref(d);
    json_decref(p);
}

/* drift INCONCLUSIVE is neither harmful nor inert: undecided, ranked
 * after what drifts and before what is harmless. */
static void test_inconclusive_is_undecided(void **state)
{
    (void)state;
    json_t *d =
        drift(1.2e-4, 0, "PASS", "INCONCLUSIVE", "none", "INCONCLUSIVE");
    json_t *p = probe(25, 25, 25, 1, false, "a", "a");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_true(v.undecided);
    assert_false(v.harmful);
    assert_false(v.inert);
    assert_non_null(v.why_undecided);
    json_decref(d);
    json_decref(p);
}

/* A drift FAIL that rests on growth alone while the measured excess never
 * reached WARN (an older drift's rule): no culprit is named from it. */
static void test_growth_alone_below_warn_names_no_culprit(void **state)
{
    (void)state;
    json_t *d = drift(4e-5, 0, "FAIL", "PASS", "none", "FAIL");
    json_object_set_new(json_object_get(d, "growth"), "peak_excess_kl",
                        json_real(5e-5));
    json_object_set_new(d, "thresholds",
                        json_pack("{s:[f,f]}", "kl_mean", 1e-4, 1e-3));
    json_t *p = probe(25, 25, 25, 1, false, "a", "b");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_false(v.harmful);
    assert_true(v.undecided);
    /* a bucket at WARN with the harm still below WARN names none either */
    json_object_set_new(json_array_get(json_object_get(d, "buckets"), 0),
                        "verdict", json_string("WARN"));
    bisect_verdict_from(d, p, &v);
    assert_false(v.harmful);
    assert_true(v.undecided);
    /* with the harm at WARN it is a FAIL that counts */
    json_object_set_new(json_object_get(d, "total"), "kl_mean",
                        json_real(2e-4));
    bisect_verdict_from(d, p, &v);
    assert_true(v.harmful);
    assert_false(v.undecided);
    json_decref(d);
    json_decref(p);
}

/* A drift FAIL whose harm interval lies wholly below the mean-KL WARN
 * threshold (a growth rule firing on a tiny excess, as bf16 mixing on the
 * real model at 3.6e-5) names no culprit; the same FAIL with a harm that
 * reaches WARN does. */
static void test_fail_with_harm_below_warn_is_not_harmful(void **state)
{
    (void)state;
    json_t *d = drift(3e-4, 1e-4, "FAIL", "WARN", "none", "FAIL");
    json_object_set_new(d, "thresholds",
                        json_pack("{s:[ff]}", "kl_mean", 1e-4, 1e-3));
    json_object_set_new(d, "harm",
                        json_pack("{s:f,s:f,s:f}", "excess_kl_mean", 3.6e-5,
                                  "lo", 2e-5, "hi", 5e-5));
    json_t *p = probe(25, 25, 25, 1, false, "a", "a");
    struct bisect_verdict v;
    bisect_verdict_from(d, p, &v);
    assert_false(v.harmful);
    assert_true(v.undecided);
    assert_non_null(strstr(v.why_undecided, "below the mean-KL WARN"));
    json_object_set_new(d, "harm",
                        json_pack("{s:f,s:f,s:f}", "excess_kl_mean", 9e-5, "lo",
                                  5e-5, "hi", 1.3e-4));
    bisect_verdict_from(d, p, &v);
    assert_true(v.harmful); /* the interval reaches WARN */
    json_decref(p);
    /* recall lost is harmful whatever the harm */
    p = probe(15, 25, 25, 0.002, true, "a", "b");
    json_object_set_new(d, "harm",
                        json_pack("{s:f,s:f,s:f}", "excess_kl_mean", 1e-6, "lo",
                                  0.0, "hi", 2e-6));
    bisect_verdict_from(d, p, &v);
    assert_true(v.harmful && v.recall_worse);
    json_decref(d);
    json_decref(p);
}

/* Three measured configurations over n toggles, for bisect_rank: each
 * result's set, name, drift document (a reference taken) and probe
 * document (owned). */
struct rank_fx {
    char names[3][8];
    struct bisect_result res[3];
    struct bisect_toggle tg[3];
    struct bisect_config c;
    struct bisect_outcome out;
};

static void rank_fx_init(struct rank_fx *f, size_t n_toggles)
{
    memset(f, 0, sizeof(*f));
    f->c.toggles = f->tg;
    f->c.n_toggles = n_toggles;
    f->out.results = f->res;
    f->out.n_results = 3;
}

static void rank_fx_set(struct rank_fx *f, int i, bisect_set set,
                        const char *name, json_t *drift_doc, json_t *probe_doc)
{
    snprintf(f->names[i], sizeof(f->names[i]), "%s", name);
    f->res[i].set = set;
    f->res[i].name = f->names[i];
    json_decref(f->res[i].doc);
    f->res[i].doc =
        json_pack("{s:O,s:o}", "drift", drift_doc, "probe", probe_doc);
}

static void rank_fx_release(struct rank_fx *f)
{
    for (int i = 0; i < 3; i++)
        json_decref(f->res[i].doc);
}

/* A warm-path fault: drift FAILs on its cache arm alone; harm counts the
 * warm positions, so the ranking puts it first, attributed to the warm
 * path; an undecided configuration comes next, a healthy one last. */
static void test_rank_a_cache_fault(void **state)
{
    (void)state;
    json_t *cache = drift(0, 0, "n/a", "PASS", "none", "FAIL");
    json_object_set_new(cache, "harm",
                        json_pack("{s:f,s:f,s:f,s:f,s:[s,s,s]}",
                                  "excess_kl_mean", 3e-4, "lo", 1e-4, "hi",
                                  5e-4, "flips_per_1k", 0.0, "arms", "prefill",
                                  "decode", "cache-warm"));
    json_object_set_new(cache, "cache",
                        json_pack("{s:s,s:s}", "verdict", "FAIL", "attribution",
                                  "warm path differs from cold"));
    json_t *und =
        drift(1.2e-4, 0, "PASS", "INCONCLUSIVE", "none", "INCONCLUSIVE");
    json_t *ok = drift(0, 0, "n/a", "PASS", "none", "PASS");
    json_t *docs[3] = {ok, und, cache};
    const char *names[3] = {"healthy", "undec", "cache"};
    struct rank_fx f;
    rank_fx_init(&f, 3);
    for (int i = 0; i < 3; i++)
        rank_fx_set(&f, i, (bisect_set)1 << i, names[i], docs[i],
                    probe(25, 25, 25, 1, false, "a", "a"));
    struct bisect_ranking rk;
    bisect_rank(&f.c, BISECT_ONE_AT_A_TIME, &f.out, &rk);
    assert_int_equal(rk.n, 3);
    assert_string_equal(rk.rows[0].r->name, "cache");
    assert_true(rk.rows[0].v.harmful);
    assert_string_equal(rk.rows[0].v.attribution, "warm path");
    assert_true(fabs(rk.rows[0].v.harm - 3e-4) < 1e-12);
    assert_string_equal(rk.rows[1].r->name, "undec");
    assert_string_equal(rk.rows[1].verdict, "undecided (more evidence needed)");
    assert_string_equal(rk.rows[2].r->name, "healthy");
    assert_true(rk.culprit);
    bisect_ranking_release(&rk);
    rank_fx_release(&f);
    for (int i = 0; i < 3; i++)
        json_decref(docs[i]);
}

/* Culprits by mode over two toggles a (drift only, harm 5e-3) and b
 * (recall lost): recall loss first, then harm; adaptive over all on
 * (recall lost) with only a named says the recall loss is unexplained;
 * leave-one-out names what removing each restores or takes away. */
static void test_culprits_recall_first_and_unexplained(void **state)
{
    (void)state;
    json_t *da = drift(5e-3, 0, "PASS", "FAIL", "none", "FAIL");
    json_t *db = drift(2e-4, 0, "PASS", "FAIL", "none", "FAIL");
    json_t *dab = drift(5.2e-3, 0, "PASS", "FAIL", "none", "FAIL");
    json_t *docs[3] = {da, db, dab};
    bool lost[3] = {false, true, true};
    const char *names[3] = {"a", "b", "a+b"};
    struct rank_fx f;
    rank_fx_init(&f, 2);
    for (int i = 0; i < 3; i++)
        rank_fx_set(&f, i, (bisect_set)(i + 1), names[i], docs[i],
                    lost[i] ? probe(15, 25, 25, 0.002, true, "x", "y")
                            : probe(25, 25, 25, 1, false, "x", "x"));
    struct bisect_ranking rk;
    bisect_rank(&f.c, BISECT_ONE_AT_A_TIME, &f.out, &rk);
    assert_int_equal(rk.n_culprits, 2);
    assert_true(rk.culprits[0].set == 2 && rk.culprits[0].recall);
    assert_true(rk.culprits[1].set == 1 && !rk.culprits[1].recall);
    assert_false(rk.unexplained_recall || rk.unexplained_harm);
    bisect_ranking_release(&rk);
    /* adaptive that named a alone (its remainder b taken as harmless) */
    f.out.adaptive.groups[0] = 1;
    f.out.adaptive.n_groups = 1;
    f.out.adaptive.culprits = 1;
    f.out.adaptive.rest_harmless = true;
    bisect_rank(&f.c, BISECT_ADAPTIVE, &f.out, &rk);
    assert_int_equal(rk.n_culprits, 1);
    assert_true(rk.all_on && rk.unexplained_recall);
    assert_false(rk.unexplained_harm); /* the rest was measured harmless */
    bisect_ranking_release(&rk);
    f.out.adaptive.rest_harmless = false;
    json_object_set_new(json_object_get(dab, "total"), "kl_mean",
                        json_real(2e-2));
    rank_fx_set(&f, 2, 3, "a+b", dab, probe(15, 25, 25, 0.002, true, "x", "y"));
    bisect_rank(&f.c, BISECT_ADAPTIVE, &f.out, &rk);
    assert_true(rk.unexplained_harm); /* 5e-3 of 2e-2, the rest unknown */
    bisect_ranking_release(&rk);
    rank_fx_release(&f);
    for (int i = 0; i < 3; i++)
        json_decref(docs[i]);
}

/* A FAIL drift over an excess of kl [lo, hi], with drift's default
 * mean-KL thresholds (WARN 1e-4, FAIL 1e-3). */
static json_t *drift_harm(double kl, double lo, double hi)
{
    json_t *d = drift(kl, 0, "PASS", "FAIL", "none", "FAIL");
    json_object_set_new(
        d, "harm",
        json_pack("{s:f,s:f,s:f}", "excess_kl_mean", kl, "lo", lo, "hi", hi));
    json_object_set_new(d, "thresholds",
                        json_pack("{s:[f,f]}", "kl_mean", 1e-4, 1e-3));
    return d;
}

/* leave-one-out over a and b, all on harmful: removing b takes the harm
 * from 0.197 to 0.074 [0.04, 0.11], and names b; removing a takes it to
 * 0.195 [0.15, 0.24], more than the FAIL level of 1e-3 less but all on's
 * 0.197 inside that interval: noise, a named on it would be a wrong
 * culprit (seen on the real model). */
static void test_leave_one_out_drop_beyond_noise(void **state)
{
    (void)state;
    json_t *docs[3] = {drift_harm(0.074, 0.04, 0.11),
                       drift_harm(0.195, 0.15, 0.24),
                       drift_harm(0.197, 0.15, 0.25)};
    const char *names[3] = {"a", "b", "a+b"};
    struct rank_fx f;
    rank_fx_init(&f, 2);
    for (int i = 0; i < 3; i++)
        rank_fx_set(&f, i, (bisect_set)(i + 1), names[i], docs[i],
                    probe(25, 25, 25, 1, false, "x", "x"));
    struct bisect_ranking rk;
    bisect_rank(&f.c, BISECT_LEAVE_ONE_OUT, &f.out, &rk);
    assert_true(rk.all_on && rk.all_on->v.harmful);
    assert_int_equal(rk.n_culprits, 1);
    assert_true(rk.culprits[0].set == 2);
    assert_true(fabs(rk.culprits[0].harm - 0.123) < 1e-9);
    bisect_ranking_release(&rk);
    /* without intervals the point figures decide, as before */
    for (int i = 0; i < 3; i++) {
        json_object_del(docs[i], "harm");
        rank_fx_set(&f, i, (bisect_set)(i + 1), names[i], docs[i],
                    probe(25, 25, 25, 1, false, "x", "x"));
    }
    bisect_rank(&f.c, BISECT_LEAVE_ONE_OUT, &f.out, &rk);
    assert_int_equal(rk.n_culprits, 2);
    bisect_ranking_release(&rk);
    rank_fx_release(&f);
    for (int i = 0; i < 3; i++)
        json_decref(docs[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_culprit),
        cmocka_unit_test(test_decode_and_both),
        cmocka_unit_test(test_inert_needs_identical_everything),
        cmocka_unit_test(test_drift_harm_fields_used),
        cmocka_unit_test(test_inconclusive_is_undecided),
        cmocka_unit_test(test_growth_alone_below_warn_names_no_culprit),
        cmocka_unit_test(test_fail_with_harm_below_warn_is_not_harmful),
        cmocka_unit_test(test_culprits_recall_first_and_unexplained),
        cmocka_unit_test(test_rank_a_cache_fault),
        cmocka_unit_test(test_leave_one_out_drop_beyond_noise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
