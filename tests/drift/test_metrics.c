/*
 * Tests for drift/metrics: the per-position KL lower bound, forced-token
 * deltas, top-1 agreement, decisive flips and top-k overlap.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "drift/metrics.h"

static struct drift_pos mk(const struct drift_tok *t, uint32_t n,
                           uint64_t forced, double flp)
{
    struct drift_pos p = {forced, flp, n, n, t};
    return p;
}

static void test_identical_is_exactly_zero(void **state)
{
    (void)state;
    struct drift_tok t[3] = {{7, log(0.6)}, {3, log(0.3)}, {9, log(0.05)}};
    struct drift_pos g = mk(t, 3, 3, log(0.3)), c = g;
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), 0);
    assert_true(m.kl == 0.0);
    assert_true(m.dlp == 0.0 && m.dp == 0.0);
    assert_true(m.top1_agree && !m.decisive_flip);
    assert_true(m.overlap == 1.0);
}

static void test_kl_matches_hand_value(void **state)
{
    (void)state;
    /* P = (0.5, 0.3 | tail 0.2), Q = (0.4, 0.4 | tail 0.2). x = key 1. */
    struct drift_tok tg[2] = {{1, log(0.5)}, {2, log(0.3)}};
    struct drift_tok tc[2] = {{1, log(0.4)}, {2, log(0.4)}};
    struct drift_pos g = mk(tg, 2, 1, log(0.5)), c = mk(tc, 2, 1, log(0.4));
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.5, &m), 0);
    double want = 0.5 * log(0.5 / 0.4) + 0.3 * log(0.3 / 0.4);
    assert_true(fabs(m.kl - want) < 1e-12);
    assert_true(fabs(m.dlp - log(0.4 / 0.5)) < 1e-12);
    assert_true(fabs(m.dp - (0.4 - 0.5)) < 1e-12);
    /* ties at the top of Q: sorted order is lower key first, agreement */
    assert_true(m.top1_agree);
}

static void test_unknown_candidate_key_goes_to_tail(void **state)
{
    (void)state;
    /* golden top has key 5 which the candidate does not list: the bound
     * merges it into the tail on both sides and stays finite and >= 0 */
    struct drift_tok tg[2] = {{1, log(0.7)}, {5, log(0.2)}};
    struct drift_tok tc[2] = {{1, log(0.7)}, {6, log(0.2)}};
    struct drift_pos g = mk(tg, 2, 1, log(0.7)), c = mk(tc, 2, 1, log(0.7));
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.5, &m), 0);
    assert_true(m.kl == 0.0); /* both: 0.7 and tail 0.3 */
    assert_true(fabs(m.overlap - 0.5) < 1e-12);
}

static void test_decisive_flip_needs_margin(void **state)
{
    (void)state;
    struct drift_tok tg[2] = {{1, log(0.8)}, {2, log(0.1)}};
    struct drift_tok tc[2] = {{2, log(0.6)}, {1, log(0.3)}};
    struct drift_pos g = mk(tg, 2, 1, log(0.8)), c = mk(tc, 2, 1, log(0.3));
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), 0);
    assert_false(m.top1_agree);
    assert_true(m.decisive_flip);
    assert_int_equal(drift_pos_compare(&g, &c, 0.75, &m), 0);
    assert_false(m.top1_agree);
    assert_false(m.decisive_flip); /* margin 0.7 is under 0.75 */
    assert_true(m.kl > 0.3);
}

static void test_bad_logprobs_are_rejected(void **state)
{
    (void)state;
    struct drift_tok tg[1] = {{1, log(0.8)}};
    struct drift_tok bad[1] = {{1, NAN}};
    struct drift_pos g = mk(tg, 1, 1, log(0.8));
    struct drift_pos c = mk(bad, 1, 1, log(0.8));
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), -EINVAL);
    c = mk(tg, 1, 1, NAN);
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), -EINVAL);
    c = mk(tg, 1, 1, 0.5); /* a logprob above 0 */
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), -EINVAL);
}

static void test_forced_outside_topk_and_no_topk(void **state)
{
    (void)state;
    /* TGI-like: no top-k, only the forced token: KL over {x, rest} */
    struct drift_pos g = mk(NULL, 0, 4, log(0.5)),
                     c = mk(NULL, 0, 4, log(0.25));
    struct drift_pm m;
    assert_int_equal(drift_pos_compare(&g, &c, 0.2, &m), 0);
    double want = 0.5 * log(0.5 / 0.25) + 0.5 * log(0.5 / 0.75);
    assert_true(fabs(m.kl - want) < 1e-12);
    assert_false(m.has_top);
    assert_true(m.top1_agree);
}

static void test_text_keys(void **state)
{
    (void)state;
    assert_true(drift_key_text("token_id:42", 11) == 42);
    uint64_t a = drift_key_text(" the", 4), b = drift_key_text(" tha", 4);
    assert_true(a & DRIFT_KEY_TEXT);
    assert_true(a != b);
    assert_true(drift_key_text("token_id:4x", 11) & DRIFT_KEY_TEXT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_is_exactly_zero),
        cmocka_unit_test(test_kl_matches_hand_value),
        cmocka_unit_test(test_unknown_candidate_key_goes_to_tail),
        cmocka_unit_test(test_decisive_flip_needs_margin),
        cmocka_unit_test(test_bad_logprobs_are_rejected),
        cmocka_unit_test(test_forced_outside_topk_and_no_topk),
        cmocka_unit_test(test_text_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
