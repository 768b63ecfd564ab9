/*
 * Tests for drift/analysis, sketch and growth: bucket edges, the quantile
 * sketch's stated error bound, excess over the noise baseline, verdicts,
 * the worst-positions heap and the growth bootstrap on synthetic data.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/rng.h"
#include "core/stats.h"
#include "drift/analysis.h"

static void test_bucket_edges(void **state)
{
    (void)state;
    struct drift_analysis a;
    uint32_t extra[] = {100, 2048, 100};
    assert_int_equal(drift_analysis_init(&a, 64, 1000, extra, 3, 50, NULL), 0);
    /* 1, 64, 100, 128, 256, 512, 1024, 2048 */
    assert_int_equal(a.n_buckets, 7);
    assert_int_equal(a.edges[0], 1);
    assert_int_equal(a.edges[2], 100);
    assert_int_equal(drift_bucket_of(&a, 1), 0);
    assert_int_equal(drift_bucket_of(&a, 63), 0);
    assert_int_equal(drift_bucket_of(&a, 64), 1);
    assert_int_equal(drift_bucket_of(&a, 100), 2);
    assert_int_equal(drift_bucket_of(&a, 1023), 5);
    assert_int_equal(drift_bucket_of(&a, 0), -1);
    drift_analysis_release(&a);
}

static void test_sketch_error_bound(void **state)
{
    (void)state;
    static struct drift_sketch s;
    double *v = malloc(20000 * sizeof(double));
    struct rng r;
    rng_seed(&r, 3);
    drift_sketch_init(&s);
    for (int i = 0; i < 20000; i++) {
        v[i] = i < 5000 ? 0 : exp(-20 * rng_unit(&r)); /* 2e-9 .. 1 */
        drift_sketch_add(&s, v[i]);
    }
    double qs[] = {0.1, 0.5, 0.9, 0.99, 0.999};
    stats_quantile_sort(v, 20000, 0.5); /* sorts v */
    for (int k = 0; k < 5; k++) {
        double got = drift_sketch_quantile(&s, qs[k]);
        size_t rank = (size_t)ceil(qs[k] * 20000) - 1;
        double want = v[rank];
        if (want == 0)
            assert_true(got == 0);
        else
            assert_true(fabs(got / want - 1) <= 0.0293);
    }
    assert_true(drift_sketch_quantile(&s, 1.0) == v[19999]);
    free(v);
}

static struct drift_pm pm_kl(double kl)
{
    struct drift_pm m = {0};
    m.kl = kl;
    m.lp_g = m.lp_c = log(0.5);
    m.has_top = true;
    m.top1_agree = true;
    m.overlap = 1;
    return m;
}

static void test_excess_and_verdicts(void **state)
{
    (void)state;
    struct drift_analysis a;
    drift_analysis_init(&a, 64, 127, NULL, 0, 50, NULL);
    uint32_t s = drift_analysis_begin_seq(&a);
    for (uint32_t t = 1; t < 128; t++) {
        struct drift_pm c = pm_kl(t < 64 ? 5e-5 : 3e-3), n = pm_kl(4e-5);
        drift_analysis_add(&a, DRIFT_ARM_CAND, s, t, 0, &c);
        drift_analysis_add(&a, DRIFT_ARM_CTRL, s, t, 0, &n);
        drift_analysis_add(&a, DRIFT_ARM_SELF, s, t, 0, &n);
    }
    struct drift_bsum bc, bt, bs, ex;
    for (size_t b = 0; b < 2; b++) {
        drift_bucket_summary(&a.acc[DRIFT_ARM_CAND][b], &bc);
        drift_bucket_summary(&a.acc[DRIFT_ARM_CTRL][b], &bt);
        drift_bucket_summary(&a.acc[DRIFT_ARM_SELF][b], &bs);
        drift_bucket_excess(&bc, &bt, &bs, true, &ex);
        if (b == 0) {
            assert_true(fabs(ex.kl_mean - 1e-5) < 1e-12);
            assert_int_equal(drift_bucket_verdict(&ex, &a.th), DRIFT_PASS);
        } else {
            assert_true(fabs(ex.kl_mean - (3e-3 - 4e-5)) < 1e-12);
            assert_int_equal(drift_bucket_verdict(&ex, &a.th), DRIFT_FAIL);
        }
    }
    /* worst positions: the heap holds the 50 largest, sorted */
    struct drift_worst w[50];
    size_t n = drift_worst_sorted(&a, w, 50);
    assert_int_equal(n, 50);
    assert_true(w[0].kl == 3e-3 && w[0].pos == 64);
    assert_true(w[49].kl == 3e-3);
    drift_analysis_release(&a);
}

static void test_top1_verdict(void **state)
{
    (void)state;
    struct drift_thresholds th;
    drift_thresholds_default(&th);
    struct drift_bsum x = {
        .n = 100, .kl_mean = 0, .kl_p999 = 0, .dp_rms = 0, .top1 = 0.99};
    assert_int_equal(drift_bucket_verdict(&x, &th), DRIFT_WARN);
    x.top1 = 0.97;
    assert_int_equal(drift_bucket_verdict(&x, &th), DRIFT_FAIL);
    x.top1 = 1;
    x.dp_rms = 0.005;
    assert_int_equal(drift_bucket_verdict(&x, &th), DRIFT_WARN);
    x.n = 0;
    assert_int_equal(drift_bucket_verdict(&x, &th), DRIFT_NA);
}

/* kl(t) = scale * (t / 1024)^power * noise, over nseq sequences. */
static void fill(struct drift_analysis *a, double scale, double power, int nseq)
{
    struct rng r;
    rng_seed(&r, 11);
    drift_analysis_init(a, 64, 4095, NULL, 0, 50, NULL);
    for (int k = 0; k < nseq; k++) {
        uint32_t s = drift_analysis_begin_seq(a);
        for (uint32_t t = 1; t < 4096; t++) {
            double kl = scale * pow(t / 1024.0, power) * (0.5 + rng_unit(&r));
            struct drift_pm c = pm_kl(kl), z = pm_kl(0);
            drift_analysis_add(a, DRIFT_ARM_CAND, s, t, 0, &c);
            drift_analysis_add(a, DRIFT_ARM_CTRL, s, t, 0, &z);
        }
    }
}

static void test_growth_detects_growth(void **state)
{
    (void)state;
    struct drift_analysis a;
    struct drift_growth g;
    fill(&a, 1e-3, 2, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(g.slope > 1.5 && g.slope < 2.5);
    assert_true(g.lo > 0 && g.lo <= g.slope && g.hi >= g.slope);
    assert_true(g.ratio > 100);
    assert_int_equal(g.verdict, DRIFT_FAIL);
    drift_analysis_release(&a);

    fill(&a, 1e-3, 0, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(fabs(g.slope) < 0.1);
    assert_true(g.ratio < 1.5);
    assert_int_equal(g.verdict, DRIFT_PASS);
    drift_analysis_release(&a);

    fill(&a, 0, 0, 3); /* healthy: nothing to judge */
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(isnan(g.slope));
    assert_int_equal(g.verdict, DRIFT_NA);
    assert_int_equal(g.shape, DRIFT_SHAPE_NONE);
    drift_analysis_release(&a);
}

/* kl(t) = lo below `knee`, hi from it on: a difference that rises over the
 * first buckets and is flat after them. */
static void fill_knee(struct drift_analysis *a, double lo, double hi,
                      uint32_t knee, uint32_t from, int nseq)
{
    struct rng r;
    rng_seed(&r, 12);
    drift_analysis_init(a, 64, 4095, NULL, 0, 50, NULL);
    for (int k = 0; k < nseq; k++) {
        uint32_t s = drift_analysis_begin_seq(a);
        for (uint32_t t = 1; t < 4096; t++) {
            double base = t < from ? 0 : t < knee ? lo : hi;
            double kl = base * (0.5 + rng_unit(&r));
            struct drift_pm c = pm_kl(kl), z = pm_kl(0);
            drift_analysis_add(a, DRIFT_ARM_CAND, s, t, 0, &c);
            drift_analysis_add(a, DRIFT_ARM_CTRL, s, t, 0, &z);
        }
    }
}

/* The bf16-like case: 2e-5 in the first buckets, 6e-5 flat from 256 on.
 * The last/first ratio is 3, which the old rule called growth; past the
 * first quarter the difference is flat: constant, not growth. */
static void test_growth_ignores_a_difference_that_settles(void **state)
{
    (void)state;
    struct drift_analysis a;
    struct drift_growth g;
    fill_knee(&a, 2e-5, 6e-5, 256, 1, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(g.ratio > 2.5);
    assert_int_equal(g.from, 1024);
    assert_int_equal(g.points, 2); /* [1024,2048), [2048,4096) */
    assert_true(fabs(g.slope) < 0.2);
    assert_int_equal(g.verdict, DRIFT_PASS);
    assert_int_equal(g.shape, DRIFT_SHAPE_CONSTANT);
    assert_true(g.peak > 4e-5 && g.peak < 8e-5);
    drift_analysis_release(&a);

    /* a difference that starts at 2048 grows (from the floor) */
    fill_knee(&a, 1e-3, 1e-3, 2048, 2048, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(g.slope > 3);
    assert_true(g.lo > 0);
    assert_int_equal(g.verdict, DRIFT_FAIL);
    assert_int_equal(g.shape, DRIFT_SHAPE_GROWING);
    drift_analysis_release(&a);

    /* the slope thresholds: slope 0.8 is past WARN (0.585), not FAIL (1) */
    fill(&a, 1e-3, 0.8, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(g.slope > 0.6 && g.slope < 1.0);
    assert_int_equal(g.verdict, DRIFT_WARN);
    a.th.growth[0] = 0.9;
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_int_equal(g.verdict, DRIFT_PASS);
    assert_int_equal(g.shape, DRIFT_SHAPE_CONSTANT);
    drift_analysis_release(&a);
}

/* Each bucket's bootstrap interval (the report's whiskers) holds the
 * bucket's own excess mean KL, is ordered, and is undefined with a single
 * sequence (nothing to resample). */
static void test_growth_bucket_intervals(void **state)
{
    (void)state;
    struct drift_analysis a;
    struct drift_growth g;
    fill(&a, 1e-3, 1, 6);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    size_t checked = 0;
    for (size_t b = 0; b < a.n_buckets; b++) {
        const struct drift_acc *c = &a.acc[DRIFT_ARM_CAND][b];
        if (!c->n)
            continue;
        double mean = c->kl_sum / (double)c->n;
        const double *ci = g.ci[b][DRIFT_CI_KL];
        assert_true(ci[0] <= mean * (1 + 1e-9) && ci[1] >= mean * (1 - 1e-9));
        assert_true(ci[0] < ci[1]);
        /* every position agreed on top-1 and had delta-p 0 */
        assert_true(g.ci[b][DRIFT_CI_TOP1][0] == 1);
        assert_true(g.ci[b][DRIFT_CI_DP][1] == 0);
        checked++;
    }
    assert_true(checked >= 5);
    assert_true(isnan(g.ci[a.n_buckets][DRIFT_CI_KL][0]));
    drift_analysis_release(&a);

    fill(&a, 1e-3, 1, 1);
    drift_growth_compute(&a, false, 200, 1, 0, &g);
    assert_true(isnan(g.ci[a.n_buckets - 1][DRIFT_CI_KL][0]));
    drift_analysis_release(&a);
}

/* n' = n (2 SE / (point - threshold))^2: the positions at which the
 * lower bound clears the threshold at the measured mean and SE; the
 * words round to two significant digits with separators. */
static void test_more_to_decide(void **state)
{
    (void)state;
    char s[48];
    /* 360 positions, 1.3e-4 +- 0.6e-4 against 1e-4: n' = 360 * 16 */
    assert_true(fabs(drift_more_to_decide(360, 1.3e-4, 0.6e-4, 1e-4) -
                     (5760 - 360)) < 1e-6);
    /* already clear: nothing more */
    assert_true(drift_more_to_decide(1000, 2e-4, 1e-5, 1e-4) == 0);
    /* on or under the threshold: no amount would push it over */
    assert_true(isinf(drift_more_to_decide(100, 1e-4, 1e-5, 1e-4)));
    drift_about(5400, s, sizeof(s));
    assert_string_equal(s, "5,400");
    drift_about(5401, s, sizeof(s));
    assert_string_equal(s, "5,500");
    drift_about(1234567, s, sizeof(s));
    assert_string_equal(s, "1,300,000");
    drift_about(37, s, sizeof(s));
    assert_string_equal(s, "37");
}

/* A point above WARN whose lower bound is not: INCONCLUSIVE with what
 * would decide it; above FAIL with the bound only above WARN: WARN with
 * the FAIL side undecided; the bound above FAIL: FAIL, decided. */
static void test_bucket_inconclusive(void **state)
{
    (void)state;
    struct drift_thresholds th;
    struct drift_undecided u;
    drift_thresholds_default(&th);
    struct drift_bsum x = {
        .n = 360, .kl_mean = 1.3e-4, .kl_se = 0.6e-4, .top1 = 1, .dp_rms = 0};
    assert_int_equal(drift_bucket_judge(&x, &th, &u), DRIFT_INCONCLUSIVE);
    assert_int_equal(u.level, DRIFT_WARN);
    assert_string_equal(u.metric, "mean KL");
    assert_true(fabs(u.more - 5400) < 1e-6);
    assert_int_equal(drift_bucket_verdict(&x, &th), DRIFT_INCONCLUSIVE);
    x.kl_mean = 1.5e-3, x.kl_se = 2e-4; /* bound 1.1e-3: FAIL, decided */
    assert_int_equal(drift_bucket_judge(&x, &th, &u), DRIFT_FAIL);
    assert_int_equal(u.level, DRIFT_NA);
    x.kl_se = 4e-4; /* bound 7e-4: WARN, FAIL undecided */
    assert_int_equal(drift_bucket_judge(&x, &th, &u), DRIFT_WARN);
    assert_int_equal(u.level, DRIFT_FAIL);
    assert_true(u.threshold == 1e-3);
    x.kl_mean = 5e-5, x.kl_se = 4e-5; /* the point under WARN: PASS */
    assert_int_equal(drift_bucket_judge(&x, &th, &u), DRIFT_PASS);
    assert_int_equal(u.level, DRIFT_NA);
    /* top-1 disagreement 0.8% +- 0.3% against 0.5%: INCONCLUSIVE */
    struct drift_bsum t = {.n = 1000, .top1 = 0.992, .top1_se = 0.003};
    assert_int_equal(drift_bucket_judge(&t, &th, &u), DRIFT_INCONCLUSIVE);
    assert_string_equal(u.metric, "top-1 disagreement");
    /* the ordering PASS < INCONCLUSIVE < WARN < FAIL, NA yields */
    assert_int_equal(drift_verdict_worse(DRIFT_INCONCLUSIVE, DRIFT_PASS),
                     DRIFT_INCONCLUSIVE);
    assert_int_equal(drift_verdict_worse(DRIFT_INCONCLUSIVE, DRIFT_WARN),
                     DRIFT_WARN);
    assert_int_equal(drift_verdict_worse(DRIFT_NA, DRIFT_INCONCLUSIVE),
                     DRIFT_INCONCLUSIVE);
    assert_string_equal(drift_verdict_name(DRIFT_INCONCLUSIVE), "INCONCLUSIVE");
    assert_false(drift_verdict_off(DRIFT_INCONCLUSIVE));
}

/* ex(p) = peak (p / p_peak)^slope: where it reaches a level. */
static void test_growth_crossing(void **state)
{
    (void)state;
    /* 2.5e-5 at 1,000, doubling per doubling: WARN 1e-4 at 4,000 */
    assert_true(fabs(drift_growth_crossing(2.5e-5, 1000, 1, 1e-4) - 4000) <
                1e-6);
    assert_true(fabs(drift_growth_crossing(2.5e-5, 1000, 2, 1e-3) -
                     1000 * sqrt(40)) < 1e-6);
    assert_true(drift_growth_crossing(2e-4, 1000, 1, 1e-4) == 1000);
    assert_true(isnan(drift_growth_crossing(2.5e-5, 1000, 0, 1e-4)));
}

/* A growth-sized slope at a level no threshold calls harmful (the bf16
 * mixing case: excess below WARN in every bucket) is never WARN or FAIL:
 * PASS when, at the slope, it would cross WARN only past the context,
 * INCONCLUSIVE within it; and with one sequence (no interval),
 * INCONCLUSIVE. */
static void test_growth_judged_with_its_size(void **state)
{
    (void)state;
    struct drift_analysis a;
    struct drift_growth g;
    /* 2e-5 (t/1024)^1: about 6e-5 at 3,000, slope 1 (a FAIL slope) */
    fill(&a, 2e-5, 1, 6);
    drift_growth_compute(&a, false, 200, 1, 8192, &g);
    assert_true(g.slope > 0.8 && g.lo > 0);
    assert_false(g.sized);
    assert_true(g.cross[0] > 4096 && g.cross[0] < 8192);
    assert_int_equal(g.verdict, DRIFT_INCONCLUSIVE);
    assert_non_null(g.why);
    drift_growth_compute(&a, false, 200, 1, 4096, &g);
    assert_int_equal(g.verdict, DRIFT_PASS); /* WARN only past 4,096 */
    assert_true(g.cross[1] > g.cross[0]);
    drift_analysis_release(&a);
    /* the same level with one sequence: no interval, no PASS */
    fill(&a, 2e-5, 1, 1);
    drift_growth_compute(&a, false, 200, 1, 4096, &g);
    assert_true(isnan(g.lo));
    assert_int_equal(g.verdict, DRIFT_INCONCLUSIVE);
    drift_analysis_release(&a);
    /* a large difference growing: decided, whatever the context */
    fill(&a, 1e-3, 1.5, 2);
    drift_growth_compute(&a, false, 200, 1, 4096, &g);
    assert_true(g.sized);
    assert_int_equal(g.verdict, DRIFT_FAIL);
    drift_analysis_release(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket_edges),
        cmocka_unit_test(test_sketch_error_bound),
        cmocka_unit_test(test_excess_and_verdicts),
        cmocka_unit_test(test_top1_verdict),
        cmocka_unit_test(test_growth_detects_growth),
        cmocka_unit_test(test_growth_ignores_a_difference_that_settles),
        cmocka_unit_test(test_growth_bucket_intervals),
        cmocka_unit_test(test_more_to_decide),
        cmocka_unit_test(test_bucket_inconclusive),
        cmocka_unit_test(test_growth_crossing),
        cmocka_unit_test(test_growth_judged_with_its_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
