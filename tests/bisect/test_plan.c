/*
 * Tests for bisect/plan: the static modes' sets, and adaptive group testing
 * against an oracle: every placement of one, two and three culprits among
 * n = 1..16 toggles, of a pair that hurts only together, and of a pair
 * beside an independent culprit is found whole, within
 * bisect_adaptive_bound, and no set is measured twice.
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

/* Runs adaptive over n toggles against o: every culprit found, each as a
 * group of its own, within the bound for d culprits (a pair counts two). */
static size_t run_oracle(size_t n, struct oracle *o)
{
    struct bisect_adaptive_result r;
    assert_int_equal(bisect_adaptive(n, oracle_test, o, &r), 0);
    assert_true(r.culprits == (o->single | o->pair));
    size_t d = (size_t)__builtin_popcountll(o->single | o->pair);
    size_t groups = (size_t)__builtin_popcountll(o->single) + (o->pair != 0);
    assert_int_equal(r.n_groups, groups);
    for (size_t i = 0; i < r.n_groups; i++)
        assert_true(r.groups[i] == o->pair ||
                    (__builtin_popcountll(r.groups[i]) == 1 &&
                     (r.groups[i] & o->single)));
    assert_true(r.interaction == (o->pair != 0));
    assert_true(r.rest_harmless);
    assert_true(r.rest == (((bisect_set)1 << n) - 1) - r.culprits);
    assert_true(r.tests == o->n_seen);
    assert_true(r.tests <= bisect_adaptive_bound(n, d));
    return r.tests;
}

static bisect_set bit(size_t i)
{
    return (bisect_set)1 << i;
}

static void test_single_culprit_within_budget(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 16; n++)
        for (size_t c = 0; c < n; c++) {
            struct oracle o = {.single = bit(c)};
            run_oracle(n, &o);
        }
    struct oracle o = {.single = 1 << 5};
    assert_true(run_oracle(8, &o) <= 6); /* all on, 3 halvings, 2 checks */
}

/* Two and three culprits harmful alone, every placement among n = 2..16:
 * all found (none missed while a harmful rest is untested), within
 * 1 + d (ceil(log2 n) + 2). */
static void test_every_culprit_found_within_budget(void **state)
{
    (void)state;
    for (size_t n = 2; n <= 16; n++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = a + 1; b < n; b++) {
                struct oracle o = {.single = bit(a) | bit(b)};
                run_oracle(n, &o);
                for (size_t c = b + 1; c < n; c++) {
                    struct oracle o3 = {.single = bit(a) | bit(b) | bit(c)};
                    run_oracle(n, &o3);
                }
            }
}

static void test_pair_within_budget(void **state)
{
    (void)state;
    for (size_t n = 2; n <= 16; n++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = a + 1; b < n; b++) {
                struct oracle o = {.pair = bit(a) | bit(b)};
                run_oracle(n, &o);
            }
}

/* A pair that hurts only together next to an independent culprit: both
 * reported, the pair as a pair. */
static void test_pair_and_single_both_found(void **state)
{
    (void)state;
    for (size_t n = 3; n <= 12; n++)
        for (size_t a = 0; a < n; a++)
            for (size_t b = a + 1; b < n; b++)
                for (size_t c = 0; c < n; c++) {
                    if (c == a || c == b)
                        continue;
                    struct oracle o = {.pair = bit(a) | bit(b),
                                       .single = bit(c)};
                    run_oracle(n, &o);
                }
}

static void test_nothing_harmful_is_one_launch(void **state)
{
    (void)state;
    struct oracle o = {0};
    struct bisect_adaptive_result r;
    assert_int_equal(bisect_adaptive(8, oracle_test, &o, &r), 0);
    assert_true(r.culprits == 0);
    assert_int_equal(r.n_groups, 0);
    assert_true(r.rest_harmless && r.rest == 0xff);
    assert_int_equal(r.tests, 1);
    assert_true(o.seen[0] == 0xff);
    assert_int_equal(bisect_adaptive_bound(8, 0), 1);
    assert_int_equal(bisect_adaptive_bound(8, 2), 11);
    assert_int_equal(bisect_adaptive_bound(16, 3), 19);
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
    assert_true(k == 4 && s[0] == 7 && s[1] == 6 && s[2] == 5 && s[3] == 3);
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
        cmocka_unit_test(test_every_culprit_found_within_budget),
        cmocka_unit_test(test_pair_within_budget),
        cmocka_unit_test(test_pair_and_single_both_found),
        cmocka_unit_test(test_nothing_harmful_is_one_launch),
        cmocka_unit_test(test_measure_error_ends_search),
        cmocka_unit_test(test_static_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
