/*
 * Tests for core/stats against published or hand-computed values.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/hash.h"
#include "core/rng.h"
#include "core/stats.h"

static void test_wilson(void **state)
{
    (void)state;
    double lo, hi;
    /* 8 of 10: Wilson 95% interval is [0.490, 0.943] (Newcombe 1998). */
    stats_wilson(8, 10, 1.959964, &lo, &hi);
    assert_true(fabs(lo - 0.4902) < 1e-3);
    assert_true(fabs(hi - 0.9433) < 1e-3);
    stats_wilson(0, 10, 1.959964, &lo, &hi);
    assert_true(lo == 0.0 && hi > 0.27 && hi < 0.29);
    stats_wilson(0, 0, 1.959964, &lo, &hi);
    assert_true(lo == 0.0 && hi == 1.0);
}

static void test_mcnemar(void **state)
{
    (void)state;
    assert_true(stats_mcnemar_exact(0, 0) == 1.0);
    /* b=0, c=10: p = 2 * 0.5^10 = 0.001953125 */
    assert_true(fabs(stats_mcnemar_exact(0, 10) - 0.001953125) < 1e-9);
    /* b=3, c=3: symmetric, p = 1 */
    assert_true(stats_mcnemar_exact(3, 3) == 1.0);
    /* b=1, c=6: 2 * (1 + 7) / 128 = 0.125 */
    assert_true(fabs(stats_mcnemar_exact(1, 6) - 0.125) < 1e-9);
}

static void test_quantile_and_slope(void **state)
{
    (void)state;
    double v[] = {5, 1, 4, 2, 3};
    assert_true(stats_quantile_sort(v, 5, 0.5) == 3.0);
    assert_true(stats_quantile_sort(v, 5, 1.0) == 5.0);
    assert_true(fabs(stats_quantile_sort(v, 5, 0.25) - 2.0) < 1e-12);
    double x[] = {1, 2, 3, 4}, y[] = {3, 5, 7, 9};
    assert_true(fabs(stats_slope(x, y, 4) - 2.0) < 1e-12);
    double same[] = {1, 1};
    assert_true(isnan(stats_slope(same, y, 2)));
}

static void test_running(void **state)
{
    (void)state;
    struct stats_run r;
    stats_run_init(&r);
    double xs[] = {2, 4, 4, 4, 5, 5, 7, 9};
    for (int i = 0; i < 8; i++)
        stats_run_add(&r, xs[i]);
    assert_true(fabs(r.mean - 5.0) < 1e-12);
    assert_true(fabs(stats_run_var(&r) - 32.0 / 7.0) < 1e-12);
    assert_true(r.min == 2 && r.max == 9);
}

static void test_rng_and_hash_are_stable(void **state)
{
    (void)state;
    struct rng a, b;
    rng_seed(&a, 7);
    rng_seed(&b, 7);
    for (int i = 0; i < 100; i++)
        assert_true(rng_next(&a) == rng_next(&b));
    for (int i = 0; i < 1000; i++)
        assert_true(rng_below(&a, 10) < 10);
    /* XXH3-64 of "" with seed 0 is the published 2d06800538d394c2. */
    assert_true(hash64("", 0, 0) == 0x2d06800538d394c2ULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wilson),
        cmocka_unit_test(test_mcnemar),
        cmocka_unit_test(test_quantile_and_slope),
        cmocka_unit_test(test_running),
        cmocka_unit_test(test_rng_and_hash_are_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
