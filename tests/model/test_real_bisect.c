/*
 * fidelity bisect against the small real transformer (tests/model/, served
 * by tests/model/serve.py on the CPU): the five switches of
 * tests/model/bisect.ini in every mode. Its own file, beside
 * test_real_model.c, so that each stays well inside the suite's per-file
 * time limit on a 2-core machine (this one takes about 2 to 4 minutes:
 * every configuration is a server launch and a drift and probe run).
 * Without PyTorch the test skips naming `make deps` (under CI=true it
 * fails).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/buf.h"
#include "util/bisectfx.h"
#include "util/jfield.h"
#include "util/modelsrv.h"
#include "util/proc.h"

/* A configuration of bisect's --json, by name. */
static const json_t *config_named(const json_t *j, const char *name)
{
    const json_t *cs = json_object_get(j, "configurations");
    for (size_t i = 0; i < json_array_size(cs); i++)
        if (!strcmp(jfield_str(json_array_get(cs, i), NULL, "name"), name))
            return json_array_get(cs, i);
    fail_msg("bisect measured no configuration '%s'", name);
    return NULL;
}

/* Runs bisect over tests/model/bisect.ini in mode (out: the results
 * directory, shared by the modes so that --resume reuses what an earlier
 * mode measured); its JSON, or the test fails. */
static json_t *bisect_model(const char *dir, const char *mode, bool resume,
                            int *rc)
{
    char out[64], json[96];
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(json, sizeof(json), "%s/%s.json", dir, mode);
    const char *av[] = {"bisect",
                        "tests/model/bisect.ini",
                        "--mode",
                        mode,
                        "--slots",
                        "1",
                        "--out",
                        out,
                        "--json",
                        json,
                        resume ? "--resume" : NULL,
                        NULL};
    struct buf o, e;
    buf_init(&o, 0);
    buf_init(&e, 0);
    time_t t0 = time(NULL);
    *rc = proc_run(av, NULL, &o, &e, 300);
    print_message("bisect --mode %s (exit %d, %lds): %.*s\n", mode, *rc,
                  (long)(time(NULL) - t0), (int)strcspn(buf_str(&o), "\n"),
                  buf_str(&o));
    json_error_t je;
    json_t *j = json_load_file(json, 0, &je);
    if (!j)
        fail_msg("bisect wrote no JSON (exit %d): %s", *rc, buf_str(&e));
    buf_release(&o);
    buf_release(&e);
    return j;
}

/* fidelity bisect over tests/model/bisect.ini (five toggles, the test
 * profile, 256-token contexts, no cache arm) on one slot, one at a time
 * first, then adaptive and leave-one-out over the same results
 * (--resume: only the sets not measured yet are launched): every mode
 * names the indexer and routed scaling, in that order (by harm); one at a
 * time ranks every switch by harm, the others harmless, the inert switch's
 * harm exactly 0. bisect starts and stops every server itself (also when
 * it fails: no server outlives it). */
static void test_bisect_every_mode_names_indexer_and_scaling(void **state)
{
    (void)state;
    char dir[] = "/tmp/bisect-model-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("FIDELITY_PYTHON", modelsrv_python(), 1);
    int rc;
    char names[256];
    /* one slot: candidates measured at once share the golden, and one's
     * requests fill the golden's prefix cache between the other's flush
     * and its decode-path generation (inert's harm then 6.7e-13, not 0).
     * One at a time first, on a fresh results directory. */
    json_t *j = bisect_model(dir, "one-at-a-time", false, &rc);
    assert_int_equal(rc, 1); /* a culprit */
    const json_t *cs = json_object_get(j, "configurations");
    assert_int_equal(json_array_size(cs), 5);
    /* ranked by harm: the two harmful ones first, the indexer on top */
    assert_string_equal(jfield_str(json_array_get(cs, 0), NULL, "name"),
                        "indexer");
    assert_string_equal(jfield_str(json_array_get(cs, 1), NULL, "name"),
                        "routed-scaling");
    for (size_t i = 0; i + 1 < json_array_size(cs); i++)
        assert_true(jfield_num(json_array_get(cs, i), NULL, "harm") >=
                    jfield_num(json_array_get(cs, i + 1), NULL, "harm"));
    const char *harmful[] = {"indexer", "routed-scaling"};
    const char *harmless[] = {"mix-bf16", "splitk", "inert"};
    for (size_t i = 0; i < 2; i++)
        assert_true(json_is_true(
            json_object_get(config_named(j, harmful[i]), "harmful")));
    for (size_t i = 0; i < 3; i++)
        assert_true(json_is_false(
            json_object_get(config_named(j, harmless[i]), "harmful")));
    /* the inert switch: harm exactly 0 and called inert (the golden's
     * cache, warm from the configurations before, is flushed before each
     * decode-path generation as the candidate's is) */
    assert_true(jfield_num(config_named(j, "inert"), NULL, "harm") == 0.0);
    assert_true(
        json_is_true(json_object_get(config_named(j, "inert"), "inert")));
    assert_string_equal(jfield_str(config_named(j, "inert"), NULL, "verdict"),
                        "inert");
    bisectfx_culprits(j, names, sizeof(names));
    assert_string_equal(names, "indexer,routed-scaling");
    json_decref(j);
    /* adaptive and leave-one-out over the same results (--resume: only
     * the sets not measured yet are launched) */
    j = bisect_model(dir, "adaptive", true, &rc);
    bisectfx_culprits(j, names, sizeof(names));
    assert_string_equal(names, "indexer,routed-scaling");
    assert_int_equal(rc, 1);
    assert_true(jfield_num(j, NULL, "launches") <= 1 + 1 + 2 * (3 + 2));
    json_decref(j);
    {
        j = bisect_model(dir, "leave-one-out", true, &rc);
        bisectfx_culprits(j, names, sizeof(names));
        assert_string_equal(names, "indexer,routed-scaling");
        assert_int_equal(rc, 1);
        json_decref(j);
    }
    char rm[96];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", dir);
    if (system(rm) != 0)
        print_message("could not remove %s\n", dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bisect_every_mode_names_indexer_and_scaling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
