/*
 * Every mode of `fidelity bisect` names the same culprits on the same
 * `fidelity sim` servers: two culprits of different harm among 8 toggles,
 * three among 6, one beside a toggle whose excess grows below the WARN
 * thresholds (not named). Adaptive runs first, its launches counted by
 * the server command and held to its bound; one-at-a-time and
 * leave-one-out follow with --resume over its results
 * (util/bisectfx.c: bisectfx_every_mode). test_modes_presets.c has the
 * pair and the presets.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/bisectfx.h"

static struct bisectfx fx;

static int setup(void **state)
{
    (void)state;
    return bisectfx_begin(&fx);
}

static int teardown(void **state)
{
    (void)state;
    return bisectfx_end(&fx);
}

/* Two culprits of different harm among 8 (a routed-scaling factor, a
 * decode noise): both found in every mode, the larger harm first. */
static void test_two_culprits_of_eight_every_mode(void **state)
{
    (void)state;
    bisectfx_every_mode(&fx, "two", 8, 2,
                        "[toggle splitk]\nargs = --decode-noise 1.0\n"
                        "[toggle scale]\nargs = --logit-scale 1.2\n",
                        2, "scale,splitk", NULL, NULL);
}

/* Three culprits among 6: recall loss first, then by harm. */
static void test_three_culprits_of_eight_every_mode(void **state)
{
    (void)state;
    bisectfx_every_mode(&fx, "three", 6, 3,
                        "[toggle splitk]\nargs = --decode-noise 1.0\n"
                        "[toggle scale]\nargs = --logit-scale 1.2\n"
                        "[toggle indexer]\nargs = --forget-after 2048\n",
                        3, "indexer,scale,splitk", NULL, NULL);
}

/* One culprit among 4 and a toggle whose excess grows with position but stays
 * below the WARN thresholds (drift: growth undecided): only the culprit
 * is named, in every mode. */
static void test_growth_below_warn_not_named(void **state)
{
    (void)state;
    bisectfx_every_mode(
        &fx, "growth", 4, 2,
        "[toggle mix]\nargs = --prefill-noise 0.03 --noise-growth 1\n"
        "[toggle scale]\nargs = --logit-scale 1.2\n",
        1, "scale", NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_culprits_of_eight_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_three_culprits_of_eight_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_below_warn_not_named, setup,
                                        teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
