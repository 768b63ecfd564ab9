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
#include <string.h>

#include <cmocka.h>

#include "core/rng.h"
#include "drift/metrics.h"

static struct drift_pos mk(const struct drift_tok *t, uint32_t n,
                           uint64_t forced, double flp)
{
    struct drift_pos p = {forced, flp, n, n, t, false};
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

/* A random top list of n distinct keys from a small range, sorted as the
 * readers leave it, plus extra lookup-only entries after it. */
static void rand_pos(struct rng *r, struct drift_tok *t, uint32_t n,
                     uint32_t extra, struct drift_pos *p)
{
    uint32_t k = 0;
    while (k < n + extra) {
        uint64_t key = 100 + rng_below(r, 40);
        bool dup = false;
        for (uint32_t j = 0; j < k && j < n; j++)
            dup = dup || t[j].key == key;
        if (dup && k < n)
            continue; /* the top has distinct keys; extras may repeat */
        t[k].key = key;
        t[k].lp =
            rng_below(r, 8) == 0 ? t[k ? k - 1 : 0].lp : -6.0 * rng_unit(r);
        k++;
    }
    drift_tok_sort(t, n);
    uint64_t forced =
        rng_below(r, 2) && n ? t[rng_below(r, n)].key : 100 + rng_below(r, 40);
    double flp = -6.0 * rng_unit(r);
    for (uint32_t j = 0; j < n; j++)
        if (t[j].key == forced)
            flp = t[j].lp;
    *p = mk(t, n, forced, flp);
    p->n_known = n + extra;
}

/* The reader's promise (checked: valid logprobs, distinct top keys) lets
 * drift_pos_compare skip its checks and look candidate keys up at the
 * golden's rank before building its index: the results are the same bits
 * as without the promise, on candidates that share the golden's order,
 * part of it, or none of it. */
/* Error of y against the exact value v, in units in the last place of
 * v's double. */
static double ulps(double y, long double v)
{
    int e;
    frexpl(v, &e); /* v = f * 2^e, f in [0.5, 1) */
    return (double)(fabsl((long double)y - v) / ldexpl(1.0L, e - 53));
}

/* drift_exp against long double expl (64-bit significand: its own error is
 * about 2^-11 ulp of a double): within 0.52 ulp on random arguments over
 * its whole range, tiny ones and the ends; libm's exp() outside. */
static void test_exp_accuracy(void **state)
{
    (void)state;
    struct rng r;
    double worst = 0;
    rng_seed(&r, 42);
    for (int i = 0; i < 600000; i++) {
        double x;
        switch (i % 3) {
        case 0:
            x = -707.0 * rng_unit(&r);
            break;
        case 1:
            x = -30.0 * rng_unit(&r); /* where logprobs are */
            break;
        default:
            x = -ldexp(rng_unit(&r), -(int)(rng_next(&r) % 60));
            break;
        }
        double u = ulps(drift_exp(x), expl((long double)x));
        worst = u > worst ? u : worst;
        /* the paired version: the same bits, lane by lane */
        double y = -30.0 * rng_unit(&r), ex, ey;
        drift_exp2(x, y, &ex, &ey);
        assert_true(ex == drift_exp(x) && ey == drift_exp(y));
    }
    static const double edge[] = {
        0.0,    -0.0,     -1e-300, -0x1p-1074,
        -707.0, -706.999, -1e-17,  -0x1.62e42fefa39efp-8,
        -0.5,   -1.0,     -2.0,    -0x1.62e42fefa39efp-1};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
        double u = ulps(drift_exp(edge[i]), expl((long double)edge[i]));
        worst = u > worst ? u : worst;
    }
    print_message("drift_exp: worst error %.4f ulp\n", worst);
    assert_true(worst <= 0.52);
    assert_true(drift_exp(0.0) == 1.0 && drift_exp(-0.0) == 1.0);
    assert_true(drift_exp(-INFINITY) == 0.0);
    assert_true(isnan(drift_exp(NAN)));
    assert_true(drift_exp(-708.5) == exp(-708.5));
    assert_true(drift_exp(-800.0) == exp(-800.0));
    assert_true(drift_exp(0.5) == exp(0.5));
    static const double odd[] = {-INFINITY, -800.0, 0.5, -1.0};
    for (size_t i = 0; i < 4; i++) {
        double ea, eb;
        drift_exp2(odd[i], -2.0, &ea, &eb);
        assert_true(ea == drift_exp(odd[i]) && eb == drift_exp(-2.0));
        drift_exp2(-3.0, odd[i], &ea, &eb);
        assert_true(ea == drift_exp(-3.0) && eb == drift_exp(odd[i]));
    }
}

static void test_checked_positions_compare_alike(void **state)
{
    (void)state;
    struct rng r;
    struct drift_tok tg[40], tc[40];
    rng_seed(&r, 99);
    unsigned shortcut = 0;
    for (int i = 0; i < 200000; i++) {
        struct drift_pos g, c;
        uint32_t ng = (uint32_t)rng_below(&r, 21),
                 nc = (uint32_t)rng_below(&r, 21);
        rand_pos(&r, tg, ng, (uint32_t)rng_below(&r, 3), &g);
        if (rng_below(&r, 2)) { /* the golden's list, perturbed a little */
            memcpy(tc, tg, sizeof(tg));
            nc = ng;
            c = g;
            c.top = tc;
            for (uint32_t j = 0; j < nc; j++)
                if (rng_below(&r, 3) == 0)
                    tc[j].lp -= 1e-3 * rng_unit(&r);
            drift_tok_sort(tc, nc);
            if (rng_below(&r, 4) == 0)
                c.forced_lp -= 1e-3;
            shortcut++;
        } else {
            rand_pos(&r, tc, nc, (uint32_t)rng_below(&r, 3), &c);
            c.forced = g.forced;
        }
        struct drift_pm a, b;
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        g.checked = c.checked = false;
        int ra = drift_pos_compare(&g, &c, 0.2, &a);
        g.checked = c.checked = true;
        int rb = drift_pos_compare(&g, &c, 0.2, &b);
        assert_int_equal(ra, 0);
        assert_int_equal(rb, 0);
        assert_memory_equal(&a, &b, sizeof(a));
    }
    assert_true(shortcut > 90000);
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
        cmocka_unit_test(test_checked_positions_compare_alike),
        cmocka_unit_test(test_exp_accuracy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
