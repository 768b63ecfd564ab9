/*
 * Every mode of `fidelity bisect` names the same culprits on the same
 * `fidelity sim` servers: two culprits of different harm among 8 toggles,
 * three, one beside a toggle whose excess grows below the WARN
 * thresholds (not named), a pair that hurts only together beside a
 * culprit (each mode as it can tell a pair), and the four presets of the
 * motivating deployment. Adaptive runs first, its launches counted by the
 * server command and held to its bound; one-at-a-time and leave-one-out
 * (full for the presets) follow with --resume over its results.
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

/* ceil(log2 n) */
static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* Runs one mode over run `name` (adaptive fresh, the others with
 * --resume over its results: the same servers' answers) and checks the
 * culprits it names, in order, and that the first line starts with the
 * first of them. */
static void mode_names(const char *name, const char *cfg, const char *mode,
                       const char *want)
{
    struct buf out = BUF_INIT;
    json_t *j;
    bool fresh = !strcmp(mode, "adaptive");
    int rc = bisectfx_bisect(&fx, name, cfg, mode,
                             fresh ? "--slots=1" : "--resume --slots=2", &out,
                             NULL, &j);
    assert_non_null(j);
    char got[256], head[128];
    bisectfx_culprits(j, got, sizeof(got));
    if (strcmp(got, want))
        fail_msg("%s %s named '%s', not '%s':\n%s", name, mode, got, want,
                 buf_str(&out));
    assert_int_equal(rc, 1);
    size_t k = strcspn(want, ",");
    snprintf(head, sizeof(head), "culprit: %.*s", (int)k, want);
    assert_true(!strncmp(buf_str(&out), head, strlen(head)));
    json_decref(j);
    buf_release(&out);
}

/* n toggles: 8 - specials label flags, then the specials; adaptive first
 * (its launches counted: within 1 + d (ceil(log2 n) + 2), the golden
 * besides), then one-at-a-time and leave-one-out; each names `want`
 * (leave-one-out `want_loo`, one-at-a-time `want_one` where they differ:
 * what each can tell of a pair). */
static void every_mode(const char *name, int specials, const char *toggles,
                       int d, const char *want, const char *want_one,
                       const char *want_loo)
{
    char t[2048], cfg[128];
    /* one needle case is enough for toggles that leave recall alone */
    size_t off =
        (size_t)snprintf(t, sizeof(t), "%s",
                         strstr(toggles, "forget-after")
                             ? ""
                             : "probe_args = --lengths 1k --depths 50\n\n");
    for (int i = 0; i < 8 - specials; i++)
        off += (size_t)snprintf(t + off, sizeof(t) - off,
                                "[toggle flag%d]\nenv = FLAG%d=1\n\n", i, i);
    snprintf(t + off, sizeof(t) - off, "%s", toggles);
    bisectfx_config(&fx, name, "", t, cfg, sizeof(cfg));
    mode_names(name, cfg, "adaptive", want);
    int launches = bisectfx_launches(fx.dir, name);
    print_message("%s: adaptive %d launches (golden included), bound %d\n",
                  name, launches, 1 + 1 + d * (log2_ceil(8) + 2));
    assert_true(launches <= 1 + 1 + d * (log2_ceil(8) + 2));
    mode_names(name, cfg, "one-at-a-time", want_one ? want_one : want);
    mode_names(name, cfg, "leave-one-out", want_loo ? want_loo : want);
}

/* Two culprits of different harm among 8 (a routed-scaling factor, a
 * decode noise): both found in every mode, the larger harm first. */
static void test_two_culprits_of_eight_every_mode(void **state)
{
    (void)state;
    every_mode("two", 2,
               "[toggle splitk]\nargs = --decode-noise 1.0\n"
               "[toggle scale]\nargs = --logit-scale 1.2\n",
               2, "scale,splitk", NULL, NULL);
}

/* Three culprits: recall loss first, then by harm. */
static void test_three_culprits_of_eight_every_mode(void **state)
{
    (void)state;
    every_mode("three", 3,
               "[toggle splitk]\nargs = --decode-noise 1.0\n"
               "[toggle scale]\nargs = --logit-scale 1.2\n"
               "[toggle indexer]\nargs = --forget-after 2048\n",
               3, "indexer,scale,splitk", NULL, NULL);
}

/* One culprit and a toggle whose excess grows with position but stays
 * below the WARN thresholds (drift: growth undecided): only the culprit
 * is named, in every mode. */
static void test_growth_below_warn_not_named(void **state)
{
    (void)state;
    every_mode("growth", 2,
               "[toggle mix]\nargs = --prefill-noise 0.03 --noise-growth 1\n"
               "[toggle scale]\nargs = --logit-scale 1.2\n",
               1, "scale", NULL, NULL);
}

/* A pair that hurts only together beside an independent culprit:
 * adaptive names both, the pair as a pair; leave-one-out names each of
 * the pair (removing either takes its harm away) and the culprit;
 * one-at-a-time, which never has both on, the culprit alone. */
static void test_pair_beside_a_culprit_every_mode(void **state)
{
    (void)state;
    every_mode("pairs", 3,
               "[toggle overlap]\nargs = --pair-a\n"
               "[toggle fused]\nargs = --pair-b\n"
               "[toggle scale]\nargs = --logit-scale 1.2\n",
               3, "overlap+fused,scale", "scale", "overlap,fused,scale");
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
        mode_names("presets", cfg, modes[i], "sparse-indexer");
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
        cmocka_unit_test_setup_teardown(test_two_culprits_of_eight_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_three_culprits_of_eight_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_growth_below_warn_not_named, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pair_beside_a_culprit_every_mode,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_presets_every_mode_agree, setup,
                                        teardown),
    };
    if (getenv("TEST_FILTER"))
        cmocka_set_test_filter(getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
