/*
 * End-to-end tests of what `fidelity drift` says about a difference's
 * cause and shape, against pairs of `fidelity sim` servers on ephemeral
 * 127.0.0.1 ports (a healthy golden, a candidate with the fault shape
 * under test): attribution to the prefill path, the decode path or both
 * (flat from the start, growing with position), growth judged past the
 * first quarter of the positions, and the harm scalar that ranks
 * candidates. Each test reads the --json summary; every server is stopped,
 * also when an assertion fails. Corpora are small (2 sequences, at most
 * 3,072 tokens) to keep `make test` fast.
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

static const json_t *get(const json_t *j, const char *a, const char *b)
{
    const json_t *v = a ? json_object_get(j, a) : j;
    return b ? json_object_get(v, b) : v;
}

static double num(const json_t *j, const char *a, const char *b)
{
    const json_t *v = get(j, a, b);
    if (!json_is_number(v))
        fail_msg("'%s.%s' is not a number", a ? a : "", b ? b : "");
    return json_number_value(v);
}

static const char *str(const json_t *j, const char *a, const char *b)
{
    const json_t *v = get(j, a, b);
    if (!json_is_string(v))
        fail_msg("'%s.%s' is not a string", a ? a : "", b ? b : "");
    return json_string_value(v);
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
    assert_true(num(r.j, "growth", "ratio") > 2); /* the old rule's FAIL */
    assert_int_equal(num(r.j, "growth", "from_position"), 256);
    assert_string_equal(str(r.j, "growth", "shape"), "constant");
    assert_string_equal(str(r.j, "growth", "verdict"), "PASS");
    assert_true(fabs(num(r.j, "growth", "slope")) < 0.585);
    /* the level, judged by the KL thresholds, decides the verdict */
    assert_string_not_equal(worst_bucket(r.j), "PASS");
    assert_string_equal(str(r.j, NULL, "verdict"), worst_bucket(r.j));
    assert_non_null(strstr(r.out.data, "growth: shape constant"));
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_saturating_shift_is_constant_not_growth,
                                  teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
