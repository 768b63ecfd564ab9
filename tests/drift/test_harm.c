/*
 * Tests for drift/harm: the excess KL mean over both paths' positions,
 * each weighted by its count, its whole-sequence bootstrap interval and
 * the excess decisive flips per 1,000 positions, on synthetic sums.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "drift/drift.h"

static struct drift_pm pm(double kl, bool flip)
{
    struct drift_pm m = {0};
    m.kl = kl;
    m.lp_g = m.lp_c = log(0.5);
    m.has_top = true;
    m.top1_agree = !flip;
    m.decisive_flip = flip;
    m.overlap = 1;
    return m;
}

/* Two sequences of 255 prefill positions: candidate KL cand[i] (sequence
 * i), control 2e-4; every 51st candidate position a decisive flip. */
static void prefill(struct drift_result *r, const double cand[2])
{
    drift_analysis_init(&r->an, 64, 255, NULL, 0, 0, NULL);
    r->prefill = true;
    r->has_control = true;
    for (int k = 0; k < 2; k++) {
        uint32_t s = drift_analysis_begin_seq(&r->an);
        for (uint32_t t = 1; t < 256; t++) {
            struct drift_pm c = pm(cand[k], t % 51 == 0), z = pm(2e-4, false);
            drift_analysis_add(&r->an, DRIFT_ARM_CAND, s, t, 0, &c);
            drift_analysis_add(&r->an, DRIFT_ARM_CTRL, s, t, 0, &z);
        }
    }
}

/* 32 decode steps per sequence: DG mean dg, control 1e-3; 3 flips. */
static void decode(struct drift_result *r, double dg)
{
    r->dec.ran = true;
    r->dec.n_seq = 2;
    r->dec.seq_sums = xcalloc(2, DRIFT_HS_N * 2 * sizeof(double));
    for (int k = 0; k < 2; k++) {
        double *h = r->dec.seq_sums + k * DRIFT_HS_N * 2;
        h[DRIFT_HS_DG * 2] = 32 * dg;
        h[DRIFT_HS_DG * 2 + 1] = 32;
        h[DRIFT_HS_CTRL * 2] = 32 * 1e-3;
        h[DRIFT_HS_CTRL * 2 + 1] = 32;
    }
    r->dec.excess[DRIFT_DP_DG].flips = 3;
}

static void test_harm_weights_both_paths_by_count(void **state)
{
    (void)state;
    struct drift_result r;
    struct drift_harm h;
    const double cand[2] = {1e-3, 1e-3};
    drift_result_init(&r);
    prefill(&r, cand);
    decode(&r, 5e-3);
    drift_harm_compute(&r, NULL, 200, 1, &h);
    /* prefill excess 8e-4 over 510 positions, decode 4e-3 over 64 */
    double want = (510 * 8e-4 + 64 * 4e-3) / 574;
    assert_true(fabs(h.excess_kl_mean - want) < 1e-12);
    assert_int_equal(h.positions, 574);
    /* 10 prefill flips (t = 51, 102, ..., 255 in each sequence) + 3 */
    assert_true(fabs(h.flips_per_1k - 1000.0 * 13 / 574) < 1e-9);
    /* identical sequences: every replicate gives the same figure */
    assert_true(fabs(h.lo - want) < 1e-12 && fabs(h.hi - want) < 1e-12);
    assert_int_equal(h.replicates, 200);
    drift_result_release(&r);
}

static void test_harm_interval_and_order(void **state)
{
    (void)state;
    struct drift_result r;
    struct drift_harm h[3];
    const double cand[3][2] = {{3e-4, 5e-4}, {1e-3, 2e-3}, {5e-3, 9e-3}};
    for (int i = 0; i < 3; i++) {
        drift_result_init(&r);
        prefill(&r, cand[i]);
        drift_harm_compute(&r, NULL, 200, 7, &h[i]);
        drift_result_release(&r);
        /* sequences differ: the interval is the two sequences' spread */
        assert_true(h[i].lo < h[i].excess_kl_mean);
        assert_true(h[i].hi > h[i].excess_kl_mean);
        assert_true(fabs(h[i].lo - (cand[i][0] - 2e-4)) < 1e-12);
        assert_true(fabs(h[i].hi - (cand[i][1] - 2e-4)) < 1e-12);
        if (i > 0)
            assert_true(h[i].excess_kl_mean > h[i - 1].excess_kl_mean);
    }
    /* no difference at all: 0, and never below */
    const double same[2] = {2e-4, 1e-4};
    drift_result_init(&r);
    prefill(&r, same);
    drift_harm_compute(&r, NULL, 50, 1, &h[0]);
    assert_true(h[0].excess_kl_mean == 0);
    assert_true(h[0].lo == 0);
    drift_result_release(&r);
}

/* The cache arm's warm positions join harm as units of their own, over
 * cold vs cold, and the arms counted are named. */
static void test_harm_counts_the_warm_path(void **state)
{
    (void)state;
    struct drift_result r;
    struct drift_harm h;
    const double cand[2] = {2e-4, 2e-4}; /* prefill: no excess */
    /* 4 conversations of 32 warm positions at 5e-3, cold vs cold 0 */
    double sums[4 * 4];
    for (int i = 0; i < 4; i++) {
        sums[i * 4] = 32 * 5e-3;
        sums[i * 4 + 1] = 32;
        sums[i * 4 + 2] = 0;
        sums[i * 4 + 3] = 32;
    }
    struct drift_harm_warm w = {sums, 4, true, 0, NULL};
    drift_result_init(&r);
    prefill(&r, cand);
    drift_harm_compute(&r, NULL, 100, 1, &h);
    assert_true(h.excess_kl_mean == 0);
    assert_int_equal(h.arm_positions[DRIFT_HARM_CACHE_WARM], 0);
    drift_harm_compute(&r, &w, 100, 1, &h);
    double want = 128 * 5e-3 / (510 + 128);
    assert_true(fabs(h.excess_kl_mean - want) < 1e-12);
    assert_int_equal(h.positions, 510 + 128);
    assert_int_equal(h.arm_positions[DRIFT_HARM_PREFILL], 510);
    assert_int_equal(h.arm_positions[DRIFT_HARM_CACHE_WARM], 128);
    assert_true(h.lo > 0 && h.hi >= h.excess_kl_mean);
    assert_string_equal(drift_harm_arm_name(DRIFT_HARM_CACHE_WARM),
                        "cache-warm");
    drift_result_release(&r);
}

/* A candidate identical to the golden: its decode steps equal the
 * golden's own decode-vs-prefill gap and its warm path the golden's warm
 * path; both are taken over those baselines, so harm is exactly 0, not
 * the deployment's own rounding. A candidate above them keeps the rest. */
static void test_harm_over_the_goldens_own_paths(void **state)
{
    (void)state;
    struct drift_result r;
    struct drift_harm h;
    const double same[2] = {0, 0};
    double sums[2 * 4], gold[2 * 2];
    for (int i = 0; i < 2; i++) {
        sums[i * 4] = 32 * 2.3e-10;
        sums[i * 4 + 1] = 32;
        sums[i * 4 + 2] = sums[i * 4 + 3] = 0;
        gold[i * 2] = 32 * 2.3e-10;
        gold[i * 2 + 1] = 32;
    }
    drift_result_init(&r);
    drift_analysis_init(&r.an, 64, 255, NULL, 0, 0, NULL);
    r.prefill = true;
    uint32_t s = drift_analysis_begin_seq(&r.an);
    for (uint32_t t = 1; t < 256; t++) {
        struct drift_pm c = pm(same[0], false);
        drift_analysis_add(&r.an, DRIFT_ARM_CAND, s, t, 0, &c);
    }
    decode(&r, 1.7e-12);
    for (int k = 0; k < 2; k++) { /* the golden's gap: the same sums */
        double *x = r.dec.seq_sums + k * DRIFT_HS_N * 2;
        x[DRIFT_HS_GAP * 2] = x[DRIFT_HS_DG * 2];
        x[DRIFT_HS_GAP * 2 + 1] = x[DRIFT_HS_DG * 2 + 1];
    }
    r.dec.excess[DRIFT_DP_DG].flips = 0;
    struct drift_harm_warm w = {sums, 2, false, 0, gold};
    drift_harm_compute(&r, &w, 50, 1, &h);
    assert_true(h.excess_kl_mean == 0.0);
    assert_true(h.lo == 0.0 && h.hi == 0.0);
    assert_true(h.warm_golden);
    assert_int_equal(h.arm_positions[DRIFT_HARM_DECODE], 64);
    /* warm above the golden's warm path: the difference counts */
    for (int i = 0; i < 2; i++)
        sums[i * 4] = 32 * (2.3e-10 + 1e-3);
    drift_harm_compute(&r, &w, 50, 1, &h);
    assert_true(fabs(h.excess_kl_mean - 64 * 1e-3 / (255 + 64 + 64)) < 1e-12);
    drift_result_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harm_weights_both_paths_by_count),
        cmocka_unit_test(test_harm_interval_and_order),
        cmocka_unit_test(test_harm_counts_the_warm_path),
        cmocka_unit_test(test_harm_over_the_goldens_own_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
