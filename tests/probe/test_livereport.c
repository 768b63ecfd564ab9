/*
 * Unit tests of src/probe/livereport.c on hand-made session results: the
 * break turn per cell (median and range over seeds, "never" as turns + 1),
 * which cell breaks first (median, then the earliest break, then recall),
 * and McNemar pairs over the same seeds' question turns.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "probe/live.h"

#define TURNS 8

/* A finished session whose question turns (4, 6, 8) pass until brk (0:
 * never breaks). */
static void session(struct probe_live_result *r, unsigned brk)
{
    memset(r, 0, sizeof(*r));
    r->done = true;
    r->n_turns = TURNS;
    for (unsigned t = 1; t <= TURNS; t++) {
        struct probe_live_turn *x = &r->turn[t - 1];
        x->asked = t >= 4 && t % 2 == 0 ? (int)(t / 2) % 2 : -1;
        x->passed = x->asked >= 0 && (!brk || t < brk);
        x->reasoning = 100 * t;
        x->prompt_tokens = 1000 * t;
    }
    r->break_turn = brk;
}

struct fixture {
    struct probe_vary_cells vc;
    struct probe_live_plan plan;
    struct probe_live_result res[9];
    struct probe_live_run run;
};

static void fixture_init(struct fixture *f, const unsigned brk[3][3])
{
    struct probe_vary v;
    struct diag d;
    probe_vary_init(&v);
    assert_int_equal(probe_vary_add(&v, "reasoning_effort=low,high,max", &d),
                     0);
    probe_vary_cells_build(&v, &f->vc);
    probe_vary_release(&v);
    memset(&f->plan, 0, sizeof(f->plan));
    probe_live_plan_init(&f->plan, TURNS, 3, &f->vc, 1u << PROBE_SR_KEEP);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 3; k++)
            session(&f->res[c * 3 + k], brk[c][k]);
    memset(&f->run, 0, sizeof(f->run));
    f->run.plan = &f->plan;
    f->run.res = f->res;
}

static void fixture_release(struct fixture *f)
{
    probe_live_plan_release(&f->plan);
    probe_vary_cells_release(&f->vc);
}

static void test_break_turn_median_and_range(void **state)
{
    (void)state;
    static const unsigned brk[3][3] = {{0, 0, 0}, {6, 8, 0}, {4, 6, 6}};
    struct fixture f;
    fixture_init(&f, brk);
    struct probe_live_cellsum s;
    probe_live_cell_summary(&f.run, 0, &s);
    assert_int_equal(s.broken, 0);
    assert_true(s.break_median == TURNS + 1);
    assert_int_equal(s.asked, 9);
    assert_int_equal(s.passed, 9);
    probe_live_cell_summary(&f.run, 1, &s);
    assert_int_equal(s.broken, 2);
    assert_true(s.break_median == 8 && s.break_lo == 6);
    assert_true(s.break_hi == TURNS + 1);
    probe_live_cell_summary(&f.run, 2, &s);
    assert_true(s.break_median == 6 && s.break_lo == 4 && s.break_hi == 6);
    assert_int_equal(probe_live_first_break(&f.run), 2);
    fixture_release(&f);
}

static void test_first_break_ties_and_none(void **state)
{
    (void)state;
    /* equal medians: the earlier single break wins */
    static const unsigned tie[3][3] = {{6, 6, 8}, {4, 6, 8}, {0, 0, 0}};
    struct fixture f;
    fixture_init(&f, tie);
    assert_int_equal(probe_live_first_break(&f.run), 1);
    fixture_release(&f);
    static const unsigned none[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    fixture_init(&f, none);
    assert_int_equal(probe_live_first_break(&f.run), -1);
    json_t *j = probe_live_report_json(&f.run);
    assert_true(json_is_null(json_object_get(j, "first_break")));
    json_decref(j);
    fixture_release(&f);
}

static void test_mcnemar_pairs_same_seed_and_turn(void **state)
{
    (void)state;
    /* cell 2 fails turns 4, 6, 8 of every seed; cell 0 passes them all */
    static const unsigned brk[3][3] = {{0, 0, 0}, {8, 8, 8}, {4, 4, 4}};
    struct fixture f;
    fixture_init(&f, brk);
    json_t *j = probe_live_report_json(&f.run);
    json_t *c0 = json_array_get(json_object_get(j, "cells"), 0);
    json_t *vs = json_object_get(c0, "vs_first");
    assert_int_equal(json_integer_value(json_object_get(vs, "this_only")), 9);
    assert_int_equal(json_integer_value(json_object_get(vs, "other_only")), 0);
    /* exact two-sided binomial: 2 x 0.5^9 */
    assert_true(fabs(json_number_value(json_object_get(vs, "p_value")) -
                     2.0 / 512) < 1e-9);
    assert_true(json_is_true(json_object_get(vs, "significant")));
    json_t *c1 = json_array_get(json_object_get(j, "cells"), 1);
    vs = json_object_get(c1, "vs_first");
    assert_int_equal(json_integer_value(json_object_get(vs, "this_only")), 6);
    assert_int_equal(json_integer_value(json_object_get(vs, "neither")), 3);
    assert_int_equal(json_array_size(json_object_get(j, "comparisons")), 3);
    /* reasoning growth by turn: the median over seeds */
    json_t *bt = json_object_get(c0, "by_turn");
    assert_int_equal(json_array_size(bt), TURNS);
    assert_true(json_number_value(json_object_get(
                    json_array_get(bt, 4), "reasoning_bytes_median")) == 500);
    json_decref(j);
    fixture_release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_break_turn_median_and_range),
        cmocka_unit_test(test_first_break_ties_and_none),
        cmocka_unit_test(test_mcnemar_pairs_same_seed_and_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
