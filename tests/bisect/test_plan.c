/*
 * Tests for bisect/plan: the static modes' sets, and adaptive group testing
 * against an oracle: every single culprit among n = 1..16 toggles is found
 * in at most ceil(log2 n) + 2 measurements, every pair that hurts only
 * together in at most 2 ceil(log2 n) + 3, and no set is measured twice.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bisect/plan.h"

struct oracle {
    bisect_set single; /* harmful when any of these is on */
    bisect_set pair;   /* harmful when all of these are on */
    bisect_set seen[200];
    size_t n_seen;
};

static int oracle_test(bisect_set s, bool *harmful, void *ud)
{
    struct oracle *o = ud;
    for (size_t i = 0; i < o->n_seen; i++)
        assert_true(o->seen[i] != s); /* never measured twice */
    o->seen[o->n_seen++] = s;
    *harmful = (s & o->single) || (o->pair && (s & o->pair) == o->pair);
    return 0;
}

static void test_single_culprit_within_budget(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 16; n++)
        for (size_t c = 0; c < n; c++) {
            struct oracle o = {.single = (bisect_set)1 << c};
            struct bisect_adaptive_result r;
            assert_int_equal(bisect_adaptive(n, oracle_test, &o, &r), 0);
            assert_true(r.culprits == o.single);
            assert_false(r.interaction);
            assert_true(r.tests == o.n_seen);
            assert_true(r.tests <= bisect_log2_ceil(n) + 2);
        }
    struct oracle o = {.single = 1 << 5};
    struct bisect_adaptive_result r;
    assert_int_equal(bisect_adaptive(8, oracle_test, &o, &r), 0);
    assert_true(r.tests <= 5);
}

static void test_pair_within_budget(void **state)
{
    (void)state;
    for (size_t n = 2; n <= 16; n++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = a + 1; b < n; b++) {
                struct oracle o = {.pair = ((bisect_set)1 << a) |
                                           ((bisect_set)1 << b)};
                struct bisect_adaptive_result r;
                assert_int_equal(bisect_adaptive(n, oracle_test, &o, &r), 0);
                assert_true(r.culprits == o.pair);
                assert_true(r.interaction);
                assert_true(r.tests <= 2 * bisect_log2_ceil(n) + 3);
            }
}

static void test_nothing_harmful_is_one_launch(void **state)
{
    (void)state;
    struct oracle o = {0};
    struct bisect_adaptive_result r;
    assert_int_equal(bisect_adaptive(8, oracle_test, &o, &r), 0);
    assert_true(r.culprits == 0);
    assert_int_equal(r.tests, 1);
    assert_true(o.seen[0] == 0xff);
}

static int failing_test(bisect_set s, bool *harmful, void *ud)
{
    (void)s;
    (void)harmful;
    (void)ud;
    return -ECONNREFUSED;
}

static void test_measure_error_ends_search(void **state)
{
    (void)state;
    struct bisect_adaptive_result r;
    assert_int_equal(bisect_adaptive(4, failing_test, NULL, &r), -ECONNREFUSED);
}

static void test_static_modes(void **state)
{
    (void)state;
    bisect_set *s;
    size_t k;
    struct diag d = {0};
    assert_int_equal(bisect_plan_static(BISECT_ONE_AT_A_TIME, 3, &s, &k, &d),
                     0);
    assert_int_equal(k, 3);
    assert_true(s[0] == 1 && s[1] == 2 && s[2] == 4);
    free(s);
    assert_int_equal(bisect_plan_static(BISECT_LEAVE_ONE_OUT, 3, &s, &k, &d),
                     0);
    assert_true(k == 3 && s[0] == 6 && s[1] == 5 && s[2] == 3);
    free(s);
    assert_int_equal(bisect_plan_static(BISECT_FULL, 3, &s, &k, &d), 0);
    assert_int_equal(k, 7);
    assert_true(s[6] == 7);
    free(s);
    assert_int_equal(bisect_plan_static(BISECT_FULL, 6, &s, &k, &d), -EINVAL);
    assert_string_equal(d.msg, "full mode launches 2^n configurations and "
                               "takes at most 5 toggles (the config has 6); "
                               "use adaptive or one-at-a-time");
    enum bisect_mode m;
    assert_int_equal(bisect_mode_parse("leave-one-out", &m), 0);
    assert_int_equal(m, BISECT_LEAVE_ONE_OUT);
    assert_int_equal(bisect_mode_parse("binary", &m), -EINVAL);
    assert_int_equal(bisect_log2_ceil(8), 3);
    assert_int_equal(bisect_log2_ceil(9), 4);
    assert_int_equal(bisect_log2_ceil(1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_culprit_within_budget),
        cmocka_unit_test(test_pair_within_budget),
        cmocka_unit_test(test_nothing_harmful_is_one_launch),
        cmocka_unit_test(test_measure_error_ends_search),
        cmocka_unit_test(test_static_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
