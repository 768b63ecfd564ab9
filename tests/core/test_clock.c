/*
 * Tests for core/clock: the monotonic reading never goes back, and a nap
 * lasts about what it was asked for.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/clock.h"

static void test_monotonic(void **state)
{
    (void)state;
    double prev = clock_now_s();
    assert_true(prev > 0);
    for (int i = 0; i < 100000; i++) {
        double t = clock_now_s();
        assert_true(t >= prev);
        prev = t;
    }
}

static void test_nap(void **state)
{
    (void)state;
    double t0 = clock_now_s();
    clock_nap_ms(30);
    double el = clock_now_s() - t0;
    assert_true(el >= 0.029);
    assert_true(el < 5); /* a loaded machine may oversleep, not by this */
    t0 = clock_now_s();
    clock_nap_ms(0);
    assert_true(clock_now_s() - t0 < 5);
}

static void test_nap_over_a_second(void **state)
{
    (void)state;
    double t0 = clock_now_s();
    clock_nap_ms(1005); /* seconds and nanoseconds both set */
    assert_true(clock_now_s() - t0 >= 1.004);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monotonic),
        cmocka_unit_test(test_nap),
        cmocka_unit_test(test_nap_over_a_second),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
