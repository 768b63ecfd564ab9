/*
 * End-to-end tests of what `fidelity drift` says about a difference's
 * cause and shape, against pairs of `fidelity sim` servers on ephemeral
 * 127.0.0.1 ports (a healthy golden, a candidate with the fault shape
 * under test): attribution to the prefill path, the decode path or both
 * (flat from the start, growing with position), growth judged past the
 * first quarter of the positions, and the harm scalar that ranks
 * candidates. Each test reads the --json summary; every server is stopped,
 * also when an assertion fails. Corpora are small (1-2 sequences, at most
 * 2,560 tokens) to keep `make test` fast.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "util/jfield.h"
#include "util/proc.h"

#define NCAND 5

static struct proc G, C[NCAND]; /* stopped by teardown, also on failure */
static bool g_up, c_up[NCAND];

static int teardown(void **state)
{
    (void)state;
    if (g_up)
        proc_stop(&G);
    g_up = false;
    for (int i = 0; i < NCAND; i++) {
        if (c_up[i])
            proc_stop(&C[i]);
        c_up[i] = false;
    }
    return 0;
}

/* Starts candidate i with the given sim options (and the golden first). */
static void start(int i, const char *const *cand_opts)
{
    const char *ga[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    const char *ca[32] = {"sim", "--listen", "127.0.0.1:0"};
    size_t n = 3;
    for (size_t k = 0; cand_opts && cand_opts[k] && n < 31; k++)
        ca[n++] = cand_opts[k];
    ca[n] = NULL;
    if (!g_up) {
        assert_int_equal(proc_start(&G, ga), 0);
        g_up = true;
    }
    if (proc_start(&C[i], ca))
        fail_msg("candidate sim %d did not start", i);
    c_up[i] = true;
}

struct run {
    int rc;
    struct buf out, err;
    json_t *j;
};

/* Runs drift golden vs candidate i with extra options; reads --json. */
static void drift(struct run *r, int i, const char *const *opts)
{
    char gurl[64], curl[64], json[] = "/tmp/drift-causes-XXXXXX";
    int fd = mkstemp(json);
    assert_true(fd >= 0);
    close(fd);
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&G));
    snprintf(curl, sizeof(curl), "%s", proc_url(&C[i]));
    const char *av[48] = {"drift",       "--golden",   gurl,      "--candidate",
                          curl,          "--no-store", "--json",  json,
                          "--bootstrap", "100",        "--worst", "0"};
    size_t n = 12;
    for (size_t k = 0; opts && opts[k] && n < 47; k++)
        av[n++] = opts[k];
    av[n] = NULL;
    buf_init(&r->out, 0);
    buf_init(&r->err, 0);
    r->rc = proc_run(av, NULL, &r->out, &r->err, 300);
    json_error_t e;
    r->j = json_load_file(json, 0, &e);
    unlink(json);
    if (!r->j)
        fail_msg("drift wrote no JSON (exit %d): %s", r->rc,
                 r->err.data ? r->err.data : "");
}

static void run_free(struct run *r)
{
    json_decref(r->j);
    buf_release(&r->out);
    buf_release(&r->err);
}

/* The worst bucket verdict of the run. */
static const char *worst_bucket(const json_t *j)
{
    static const char *const order[] = {"PASS", "WARN", "FAIL"};
    const json_t *b = json_object_get(j, "buckets");
    int w = 0;
    for (size_t i = 0; i < json_array_size(b); i++) {
        const char *v =
            json_string_value(json_object_get(json_array_get(b, i), "verdict"));
        for (int k = 0; k < 3; k++)
            if (v && !strcmp(v, order[k]) && k > w)
                w = k;
    }
    return order[w];
}

/* A noise that grows over the first 256 positions and is flat after them
 * (on both paths): the last/first ratio is large, but past the first
 * quarter the difference is constant: no growth verdict, and the run's
 * verdict is the buckets' level. */
static void test_saturating_shift_is_constant_not_growth(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise",
                       "0.15",
                       "--decode-noise",
                       "0.15",
                       "--noise-growth",
                       "1",
                       "--noise-saturate",
                       "256",
                       NULL};
    start(0, f);
    const char *o[] = {"--sequences", "2", "--max-context", "1024", NULL};
    drift(&r, 0, o);
    assert_true(jfield_num(r.j, "growth", "ratio") >
                2); /* the old rule's FAIL */
    assert_int_equal(jfield_num(r.j, "growth", "from_position"), 256);
    assert_string_equal(jfield_str(r.j, "growth", "shape"), "constant");
    assert_string_equal(jfield_str(r.j, "growth", "verdict"), "PASS");
    assert_true(fabs(jfield_num(r.j, "growth", "slope")) < 0.585);
    /* the level, judged by the KL thresholds, decides the verdict */
    assert_string_not_equal(worst_bucket(r.j), "PASS");
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), worst_bucket(r.j));
    assert_non_null(strstr(r.out.data, "growth: shape constant"));
    run_free(&r);
}

/* The decode point chosen inside the first failing bucket, or NULL. */
static const json_t *diverged_point(const json_t *j)
{
    const json_t *pts = jfield_get(j, "decode", "points");
    for (size_t i = 0; i < json_array_size(pts); i++)
        if (json_is_true(json_object_get(json_array_get(pts, i), "diverged")))
            return json_array_get(pts, i);
    return NULL;
}

/* A FAIL says what could and could not be attributed, in text and JSON. */
static void says_what_was_attributed(const struct run *r)
{
    assert_non_null(strstr(r->out.data, "\nattributed: "));
    assert_non_null(strstr(r->out.data, "\nnot attributed: "));
    assert_true(strlen(jfield_str(r->j, "attribution", "attributed")) > 20);
    assert_true(
        json_is_string(jfield_get(r->j, "attribution", "not_attributed")));
}

/* Prefill noise that starts at position 2048: with the default options
 * (--decode-prompt 512, where nothing differs) the decode path is also
 * measured inside the first failing bucket, and the difference is put
 * down to prefill. */
static void test_prefill_from_2048_is_prefill_with_defaults(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise", "0.3", "--noise-from", "2048", NULL};
    start(0, f);
    const char *o[] = {"--sequences", "1", "--max-context", "2560", NULL};
    drift(&r, 0, o);
    assert_int_equal(r.rc, 1);
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "FAIL");
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "prefill");
    assert_string_equal(jfield_str(r.j, "decode", "attribution"),
                        "prefill only");
    const json_t *p = diverged_point(r.j);
    assert_non_null(p);
    double at = jfield_num(p, NULL, "prompt");
    assert_true(at >= 2048 && at < 2560);
    assert_true(jfield_num(p, NULL, "generated") > 0);
    assert_string_equal(jfield_str(p, "prefill_vs_prefill", "verdict"), "FAIL");
    assert_string_equal(jfield_str(p, "decode_vs_golden_prefill", "verdict"),
                        "PASS");
    /* the default prompt alone would have seen nothing */
    const json_t *pts = jfield_get(r.j, "decode", "points");
    assert_int_equal(json_array_size(pts), 2);
    const json_t *d = json_array_get(pts, 1);
    assert_int_equal(jfield_num(d, NULL, "prompt"), 512);
    assert_true(jfield_num(d, "prefill_vs_prefill", "kl_max") == 0.0);
    assert_non_null(strstr(jfield_str(r.j, "attribution", "attributed"),
                           "prefill differs from position 2048"));
    assert_non_null(strstr(r.out.data, "attribution: prefill only"));
    says_what_was_attributed(&r);
    run_free(&r);
}

/* Decode-only noise below the WARN thresholds: every verdict passes, but
 * the candidate's decode departs from its own prefill more than the
 * golden's does: "decode only", with the figures. */
static void test_decode_noise_below_warn_is_decode_only(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--decode-noise", "0.01", NULL};
    start(0, f);
    const char *o[] = {"--sequences", "2", "--max-context", "512", NULL};
    drift(&r, 0, o);
    assert_int_equal(r.rc, 0);
    assert_string_equal(jfield_str(r.j, NULL, "verdict"), "PASS");
    assert_true(jfield_num(r.j, "total", "kl_max") ==
                0.0); /* prefill identical */
    const json_t *dc = jfield_get(r.j, "decode", NULL);
    assert_string_equal(jfield_str(dc, "decode_vs_golden_prefill", "verdict"),
                        "PASS");
    assert_true(jfield_num(dc, "decode_vs_golden_prefill", "kl_mean") > 0);
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "decode");
    assert_string_equal(jfield_str(dc, NULL, "attribution"), "decode only");
    const json_t *p = json_array_get(json_object_get(dc, "points"), 0);
    assert_true(json_is_true(jfield_get(p, "gap", "differs")));
    assert_true(jfield_num(p, "gap", "candidate") >
                jfield_num(p, "gap", "golden"));
    assert_true(jfield_num(p, "gap", "golden") == 0.0);
    assert_non_null(strstr(jfield_str(r.j, "attribution", "attributed"),
                           "below the WARN thresholds"));
    assert_non_null(strstr(r.out.data, "attribution: decode only"));
    assert_non_null(strstr(r.out.data, "decode-vs-prefill gap"));
    run_free(&r);
}

/* Noise on both paths growing with position. */
static void test_growing_noise_on_both_paths(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise",
                       "0.1",
                       "--decode-noise",
                       "0.1",
                       "--noise-growth",
                       "1",
                       NULL};
    start(0, f);
    const char *o[] = {"--sequences", "2", "--max-context", "1024", NULL};
    drift(&r, 0, o);
    assert_int_equal(r.rc, 1);
    assert_string_equal(jfield_str(r.j, "growth", "shape"), "growing");
    assert_string_equal(jfield_str(r.j, "growth", "verdict"), "FAIL");
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "both-growing");
    assert_non_null(strstr(jfield_str(r.j, "decode", "attribution"),
                           "depending on position"));
    const json_t *p = diverged_point(r.j);
    assert_non_null(p);
    assert_string_not_equal(
        jfield_str(p, "decode_vs_golden_prefill", "verdict"), "PASS");
    /* the two paths' noises are drawn apart: each its own way */
    assert_non_null(strstr(jfield_str(r.j, "attribution", "attributed"),
                           "each path in its own way"));
    says_what_was_attributed(&r);
    run_free(&r);
}

/* Noise on both paths that starts at position 256, flat after it (an
 * attention-selection patch: exact below its selection size): not "flat
 * from the start" but a difference that depends on position. */
static void test_step_on_both_paths_depends_on_position(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--prefill-noise",
                       "0.2",
                       "--decode-noise",
                       "0.2",
                       "--noise-from",
                       "256",
                       NULL};
    start(0, f);
    const char *o[] = {"--sequences", "2", "--max-context", "1024", NULL};
    drift(&r, 0, o);
    assert_int_equal(r.rc, 1);
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "both-growing");
    assert_non_null(strstr(jfield_str(r.j, "attribution", "attributed"),
                           "prefill differs from position 256"));
    const json_t *p = diverged_point(r.j);
    assert_non_null(p);
    assert_true(jfield_num(p, NULL, "prompt") >= 256);
    says_what_was_attributed(&r);
    run_free(&r);
}

/* A constant change on both paths (a routed-scaling factor): flat from
 * the start, not growth. */
static void test_constant_shift_on_both_paths(void **state)
{
    (void)state;
    struct run r;
    const char *f[] = {"--logit-scale", "1.02", NULL};
    start(0, f);
    const char *o[] = {"--sequences", "2", "--max-context", "1024", NULL};
    drift(&r, 0, o);
    assert_string_equal(jfield_str(r.j, "growth", "shape"), "constant");
    assert_string_equal(jfield_str(r.j, "growth", "verdict"), "PASS");
    assert_string_equal(jfield_str(r.j, "attribution", "kind"), "both-flat");
    assert_non_null(strstr(jfield_str(r.j, "decode", "attribution"),
                           "flat from the start"));
    const json_t *p = diverged_point(r.j);
    assert_non_null(p);
    assert_true(jfield_num(p, NULL, "prompt") <
                64); /* the first bucket fails */
    /* both paths move together: the decode agrees with its own prefill */
    assert_string_equal(jfield_str(p, "decode_vs_prefill", "verdict"), "PASS");
    assert_false(json_is_true(jfield_get(p, "gap", "differs")));
    assert_non_null(strstr(jfield_str(r.j, "attribution", "attributed"),
                           "one change common to both paths"));
    run_free(&r);
}

/* The harm scalar ranks five candidates of increasing noise (both paths):
 * in order, with intervals around each figure, the extremes apart. */
static void test_harm_orders_five_candidates(void **state)
{
    (void)state;
    static const char *const sigma[NCAND] = {"0.02", "0.05", "0.1", "0.2",
                                             "0.4"};
    double h[NCAND], lo[NCAND], hi[NCAND];
    for (int i = 0; i < NCAND; i++) {
        const char *f[] = {"--prefill-noise", sigma[i], "--decode-noise",
                           sigma[i], NULL};
        start(i, f);
    }
    for (int i = 0; i < NCAND; i++) {
        struct run r;
        const char *o[] = {
            "--sequences", "2", "--max-context", "256", "--decode-tokens",
            "16",          NULL};
        drift(&r, i, o);
        h[i] = jfield_num(r.j, "harm", "excess_kl_mean");
        lo[i] = jfield_num(r.j, "harm", "lo");
        hi[i] = jfield_num(r.j, "harm", "hi");
        assert_true(jfield_num(r.j, "harm", "flips_per_1k") >= 0);
        /* prefill positions and decode steps, each counted */
        double steps = jfield_num(r.j, "decode", "generated");
        const json_t *ap =
            json_object_get(json_object_get(r.j, "harm"), "arm_positions");
        double warm = json_number_value(json_object_get(ap, "cache-warm"));
        assert_true(jfield_num(r.j, "harm", "positions") ==
                    jfield_num(r.j, "total", "count") + steps + warm);
        assert_non_null(strstr(r.out.data, "harm: excess KL mean"));
        run_free(&r);
        assert_true(lo[i] <= h[i] && h[i] <= hi[i]);
        if (i > 0 && !(h[i] > h[i - 1]))
            fail_msg("harm of noise %s (%.3e) not above noise %s (%.3e)",
                     sigma[i], h[i], sigma[i - 1], h[i - 1]);
    }
    assert_true(h[0] > 0);
    assert_true(lo[NCAND - 1] > hi[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_saturating_shift_is_constant_not_growth,
                                  teardown),
        cmocka_unit_test_teardown(
            test_prefill_from_2048_is_prefill_with_defaults, teardown),
        cmocka_unit_test_teardown(test_decode_noise_below_warn_is_decode_only,
                                  teardown),
        cmocka_unit_test_teardown(test_growing_noise_on_both_paths, teardown),
        cmocka_unit_test_teardown(test_constant_shift_on_both_paths, teardown),
        cmocka_unit_test_teardown(test_step_on_both_paths_depends_on_position,
                                  teardown),
        cmocka_unit_test_teardown(test_harm_orders_five_candidates, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
