/*
 * Tests for sim/model: the distribution is a proper, deterministic function
 * of the history; the copy mechanism reaches far context and respects the
 * forget window; noise and logit scale change it only when asked.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sim/model.h"
#include "sim/tok.h"

static void seq_of(const char *text, struct tok_vec *t)
{
    tok_vec_init(t);
    tok_encode(text, strlen(text), t);
}

static void test_proper_distribution(void **state)
{
    (void)state;
    struct tok_vec t;
    struct model m;
    struct dist d;
    seq_of("one two three four five six seven", &t);
    model_init(&m, 0);
    for (size_t i = 1; i < t.n; i++) {
        model_dist(&m, t.v, i, NULL, &d);
        double mass = 0;
        for (int k = 0; k < d.n; k++) {
            mass += exp(d.lp[k]);
            if (k)
                assert_true(d.lp[k] <= d.lp[k - 1]);
        }
        mass += exp(d.tail_lp) * ((double)TOK_VOCAB - d.n);
        assert_true(fabs(mass - 1.0) < 1e-9);
    }
    model_release(&m);
    tok_vec_release(&t);
}

static void test_copy_reaches_far_and_window_cuts_it(void **state)
{
    (void)state;
    struct tok_vec t;
    struct model m;
    struct dist d;
    char text[8192] = "alpha beta gamma";
    for (int i = 0; i < 300; i++)
        strcat(text, " x");
    strcat(text, " alpha beta");
    seq_of(text, &t);
    model_init(&m, 0);
    model_dist(&m, t.v, t.n, NULL, &d); /* what follows "alpha beta"? */
    char piece[16];
    size_t k = tok_piece(d.id[0], piece);
    assert_int_equal(k, 5);
    assert_memory_equal(piece, " gamm", 5);
    assert_true(d.lp[0] > -0.2);
    model_release(&m);
    model_init(&m, 100); /* the earlier occurrence is 300 tokens back */
    model_dist(&m, t.v, t.n, NULL, &d);
    assert_true(d.lp[0] < -0.5);
    model_release(&m);
    tok_vec_release(&t);
}

static void test_deterministic_and_noise_only_when_asked(void **state)
{
    (void)state;
    struct tok_vec t;
    struct model a, b;
    struct dist da, db;
    struct model_noise none = {.scale = 1.0};
    struct model_noise noisy = {.sigma = 0.1, .scale = 1.0, .seed = 7};
    struct model_noise scaled = {.scale = 1.02};
    seq_of("a b c d e f g h i j a b c d", &t);
    model_init(&a, 0);
    model_init(&b, 0);
    for (size_t i = 1; i < t.n; i++) {
        model_dist(&a, t.v, i, NULL, &da);
        model_dist(&b, t.v, i, &none, &db);
        assert_memory_equal(da.lp, db.lp, sizeof(da.lp[0]) * (size_t)da.n);
    }
    model_release(&a);
    model_release(&b);
    model_init(&a, 0);
    model_init(&b, 0);
    model_dist(&a, t.v, 5, &noisy, &da);
    model_dist(&b, t.v, 5, &scaled, &db);
    struct dist clean;
    struct model c;
    model_init(&c, 0);
    model_dist(&c, t.v, 5, NULL, &clean);
    assert_true(fabs(da.lp[0] - clean.lp[0]) > 1e-6);
    assert_true(fabs(db.lp[0] - clean.lp[0]) > 1e-6);
    model_release(&a);
    model_release(&b);
    model_release(&c);
    tok_vec_release(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proper_distribution),
        cmocka_unit_test(test_copy_reaches_far_and_window_cuts_it),
        cmocka_unit_test(test_deterministic_and_noise_only_when_asked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
