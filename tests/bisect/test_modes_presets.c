/*
 * Every mode of `fidelity bisect` on the same `fidelity sim` servers, as
 * in test_modes.c: a pair that hurts only together beside a culprit (each
 * mode as it can tell a pair), and the four presets of the motivating
 * deployment as toggles (every mode names sparse-indexer; adaptive and
 * one-at-a-time carry its recall loss in the first line).
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

/* A pair that hurts only together beside an independent culprit, among 5:
 * adaptive names both, the pair as a pair; leave-one-out names each of
 * the pair (removing either takes its harm away) and the culprit;
 * one-at-a-time, which never has both on, the culprit alone. */
static void test_pair_beside_a_culprit_every_mode(void **state)
{
    (void)state;
    bisectfx_every_mode(&fx, "pairs", 5, 3,
                        "[toggle overlap]\nargs = --pair-a\n"
                        "[toggle fused]\nargs = --pair-b\n"
                        "[toggle scale]\nargs = --logit-scale 1.2\n",
                        3, "overlap+fused,scale", "scale",
                        "overlap,fused,scale");
}

/* The four presets of the motivating deployment as toggles: every mode
 * names sparse-indexer, and the first line of adaptive and one-at-a-time
 * carries its recall loss. */
static void test_presets_every_mode_agree(void **state)
{
    (void)state;
    char cfg[128];
    bisectfx_config(&fx, "presets", "",
                    "[toggle mhc-bf16]\nargs = --preset mhc-bf16\n"
                    "[toggle splitk-decode]\nargs = --preset splitk-decode\n"
                    "[toggle sparse-indexer]\nargs = --preset sparse-indexer\n"
                    "[toggle routed-scaling]\nargs = --preset routed-scaling\n",
                    cfg, sizeof(cfg));
    static const char *const modes[] = {"adaptive", "one-at-a-time",
                                        "leave-one-out", "full"};
    for (size_t i = 0; i < 4; i++) {
        bisectfx_mode_names(&fx, "presets", cfg, modes[i], "sparse-indexer");
        if (i == 0)
            assert_true(bisectfx_launches(fx.dir, "presets") <=
                        1 + 1 + 1 * (2 + 2));
    }
    static const char *const first[] = {"adaptive", "one-at-a-time"};
    for (size_t i = 0; i < 2; i++) {
        struct buf out = BUF_INIT;
        bisectfx_bisect(&fx, "presets", cfg, first[i], "--resume", &out, NULL,
                        NULL);
        const char *eol = strchr(buf_str(&out), '\n');
        const char *r = strstr(buf_str(&out), "recall -40 points");
        assert_true(eol && r && r < eol);
        buf_release(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pair_beside_a_culprit_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_presets_every_mode_agree, setup,
                                        teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
