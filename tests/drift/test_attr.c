/*
 * Tests for drift/attr: where the decode path is measured (inside the
 * first failing prefill bucket, then --decode-prompt) and the attribution
 * with its words, on synthetic results (bucket verdicts, growth and
 * decode points set by hand; no servers).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "drift/drift.h"

/* A result over nseq sequences of len tokens, buckets from 64 up to len,
 * every bucket PASS, growth n/a. */
static void result(struct drift_result *r, size_t nseq, uint32_t len)
{
    drift_result_init(r);
    drift_analysis_init(&r->an, 64, len - 1, NULL, 0, 0, NULL);
    r->prefill = true;
    for (size_t i = 0; i < nseq; i++)
        drift_corpus_push(&r->corpus)->n = len;
    for (size_t b = 0; b < r->an.n_buckets; b++) {
        r->bucket_verdict[b] = DRIFT_PASS;
        r->an.acc[DRIFT_ARM_CAND][b].n = 1;
    }
    r->growth.verdict = DRIFT_NA;
}

static void opts(struct drift_opts *o)
{
    drift_opts_default(o);
}

static void test_prompts_follow_the_first_failing_bucket(void **state)
{
    (void)state;
    struct drift_result r;
    struct drift_opts o;
    struct drift_dpoint p[DRIFT_DPOINTS_MAX];
    opts(&o);

    /* nothing fails: --decode-prompt alone */
    result(&r, 2, 3072);
    assert_int_equal(drift_decode_prompts(&o, &r, false, p), 1);
    assert_int_equal(p[0].prompt, 512);
    assert_false(p[0].diverged);

    /* [2048,4096) fails, cut at the sequences' 3,072 tokens: its middle,
     * room left for 32 generated tokens; then 512 */
    int b = drift_bucket_of(&r.an, 2048);
    r.bucket_verdict[b] = DRIFT_FAIL;
    assert_int_equal(drift_decode_prompts(&o, &r, false, p), 2);
    assert_true(p[0].diverged);
    assert_int_equal(p[0].bucket, b);
    assert_int_equal(p[0].prompt, 2048 + (1024 - 32) / 2);
    assert_int_equal(p[1].prompt, 512);

    /* against a saved golden: --decode-prompt alone */
    assert_int_equal(drift_decode_prompts(&o, &r, true, p), 1);
    assert_false(p[0].diverged);
    assert_int_equal(p[0].prompt, 512);

    /* the failing bucket holds --decode-prompt: one point */
    r.bucket_verdict[b] = DRIFT_PASS;
    r.bucket_verdict[drift_bucket_of(&r.an, 600)] = DRIFT_WARN;
    assert_int_equal(drift_decode_prompts(&o, &r, false, p), 1);
    assert_true(p[0].diverged);
    assert_true(p[0].prompt >= 512 && p[0].prompt < 1024);
    drift_result_release(&r);

    /* only growth is off: the last bucket */
    result(&r, 2, 3072);
    r.growth.verdict = DRIFT_FAIL;
    assert_int_equal(drift_decode_prompts(&o, &r, false, p), 2);
    assert_true(p[0].prompt >= 2048 && p[0].prompt < 3072);
    drift_result_release(&r);

    /* shorter sequences than --decode-prompt: the whole sequence */
    result(&r, 1, 300);
    assert_int_equal(drift_decode_prompts(&o, &r, false, p), 1);
    assert_int_equal(p[0].prompt, 300);
    drift_result_release(&r);
}

/* A point with PP and DG verdicts, gap figures, and 2 sequences. */
static void point(struct drift_result *r, unsigned k, int bucket,
                  enum drift_verdict pp, enum drift_verdict dg, bool gap)
{
    struct drift_dpoint *p = &r->dec.point[k];
    memset(p, 0, sizeof(*p));
    p->prompt = r->an.edges[bucket] + 1;
    p->bucket = bucket;
    p->seqs = 2;
    p->generated = 64;
    p->verdict[DRIFT_DP_PP] = pp;
    p->verdict[DRIFT_DP_DG] = dg;
    p->verdict[DRIFT_DP_DP] = DRIFT_PASS;
    p->gap_measured = true;
    p->gap_cand = gap ? 3e-5 : 0;
    p->gap_se = 1e-6;
    p->gap_differs = gap;
    p->excess[DRIFT_DP_PP].kl_mean = pp != DRIFT_PASS ? 5e-4 : 0;
    p->excess[DRIFT_DP_DG].kl_mean = dg != DRIFT_PASS || gap ? 3e-5 : 0;
    if (k + 1 > r->dec.n_points)
        r->dec.n_points = k + 1;
    r->dec.ran = true;
    r->dec.have_pp = true;
}

static enum drift_attr attribute(struct drift_result *r)
{
    struct drift_opts o;
    opts(&o);
    drift_attribute(&o, r);
    return r->dec.attribution;
}

static void test_attribution_kinds(void **state)
{
    (void)state;
    struct drift_result r;
    int late;

    /* nothing anywhere */
    result(&r, 2, 1024);
    point(&r, 0, 3, DRIFT_PASS, DRIFT_PASS, false);
    assert_int_equal(attribute(&r), DRIFT_ATTR_NONE);
    assert_non_null(strstr(r.dec.attributed, "neither path differs"));
    drift_result_release(&r);

    /* prefill off from a late bucket, decode like the golden there */
    result(&r, 2, 1024);
    late = drift_bucket_of(&r.an, 600);
    r.bucket_verdict[late] = DRIFT_FAIL;
    point(&r, 0, late, DRIFT_FAIL, DRIFT_PASS, true);
    point(&r, 1, 0, DRIFT_PASS, DRIFT_PASS, false);
    assert_int_equal(attribute(&r), DRIFT_ATTR_PREFILL);
    assert_string_equal(drift_attr_kind(r.dec.attribution), "prefill");
    assert_non_null(strstr(r.dec.attributed, "prefill differs from position "
                                             "512"));
    assert_string_equal(r.dec.not_attributed, "");
    drift_result_release(&r);

    /* below the thresholds, by the gap alone */
    result(&r, 2, 1024);
    point(&r, 0, 3, DRIFT_PASS, DRIFT_PASS, true);
    assert_int_equal(attribute(&r), DRIFT_ATTR_DECODE);
    assert_non_null(strstr(r.dec.attributed, "below the WARN thresholds"));
    assert_non_null(strstr(r.dec.attributed, "3.00e-05"));
    drift_result_release(&r);

    /* both, flat or growing as growth's shape says */
    result(&r, 2, 1024);
    r.bucket_verdict[0] = DRIFT_WARN;
    r.excess[0].kl_mean = 2e-4; /* there from the first bucket */
    r.growth.shape = DRIFT_SHAPE_CONSTANT;
    point(&r, 0, 0, DRIFT_WARN, DRIFT_WARN, false);
    assert_int_equal(attribute(&r), DRIFT_ATTR_BOTH_FLAT);
    assert_non_null(strstr(r.dec.attributed, "one change common"));
    r.growth.shape = DRIFT_SHAPE_GROWING;
    r.growth.verdict = DRIFT_FAIL;
    assert_int_equal(attribute(&r), DRIFT_ATTR_BOTH_GROWING);
    assert_null(strstr(r.dec.attributed, "absent at the start"));
    drift_result_release(&r);

    /* the prefills differ above their noise but below the thresholds,
     * the decode path more: both paths, not "decode only" */
    result(&r, 2, 1024);
    r.excess[0].kl_mean = 2e-5;
    r.growth.shape = DRIFT_SHAPE_CONSTANT;
    point(&r, 0, 3, DRIFT_PASS, DRIFT_WARN, true);
    r.dec.point[0].pp_below = true;
    assert_int_equal(attribute(&r), DRIFT_ATTR_BOTH_FLAT);
    assert_non_null(strstr(r.dec.attributed, "differ by more than their "
                                             "noise"));
    r.dec.point[0].pp_below = false;
    assert_int_equal(attribute(&r), DRIFT_ATTR_DECODE);
    drift_result_release(&r);

    /* a prefill-only change below the thresholds opens the candidate's
     * gap too, but decode does not depart from the golden: prefill */
    result(&r, 2, 1024);
    point(&r, 0, 3, DRIFT_PASS, DRIFT_PASS, true);
    r.dec.point[0].excess[DRIFT_DP_PP].kl_mean = 2e-6;
    r.dec.point[0].excess[DRIFT_DP_DG].kl_mean = 0;
    r.dec.point[0].pp_below = true;
    assert_int_equal(attribute(&r), DRIFT_ATTR_PREFILL);
    drift_result_release(&r);

    /* flat past the first quarter but absent before 256: it starts at a
     * position (a selection size), which is not "flat from the start" */
    result(&r, 2, 1024);
    r.bucket_verdict[3] = DRIFT_FAIL;
    r.excess[3].kl_mean = r.excess[4].kl_mean = 2e-3;
    r.growth.shape = DRIFT_SHAPE_CONSTANT;
    point(&r, 0, 3, DRIFT_FAIL, DRIFT_FAIL, true);
    assert_int_equal(attribute(&r), DRIFT_ATTR_BOTH_GROWING);
    assert_non_null(strstr(r.dec.attributed, "from position 256"));
    /* the words agree with growth's shape: not "growing", but absent at
     * the start and there later */
    assert_null(strstr(r.dec.attributed, "growing"));
    assert_non_null(strstr(r.dec.attributed, "absent at the start"));
    assert_null(strstr(drift_attr_name(DRIFT_ATTR_BOTH_GROWING), "growing"));
    drift_result_release(&r);
}

static void test_what_could_not_be_attributed(void **state)
{
    (void)state;
    struct drift_result r;

    /* failing buckets the decode path did not look at */
    result(&r, 2, 4096);
    r.bucket_verdict[drift_bucket_of(&r.an, 600)] = DRIFT_FAIL;
    r.bucket_verdict[drift_bucket_of(&r.an, 3000)] = DRIFT_FAIL;
    point(&r, 0, drift_bucket_of(&r.an, 600), DRIFT_FAIL, DRIFT_PASS, true);
    attribute(&r);
    assert_non_null(strstr(r.dec.not_attributed, "[2048,4096) FAIL"));
    assert_null(strstr(r.dec.not_attributed, "[512,1024)"));
    drift_result_release(&r);

    /* no decode path: prefill is named, decode is not known */
    result(&r, 2, 1024);
    r.bucket_verdict[1] = DRIFT_FAIL;
    assert_int_equal(attribute(&r), DRIFT_ATTR_UNKNOWN);
    assert_non_null(strstr(r.dec.attributed, "prefill differs"));
    assert_non_null(strstr(r.dec.not_attributed, "--decode-tokens 0"));
    drift_result_release(&r);

    /* a candidate without prompt logprobs */
    result(&r, 2, 1024);
    r.prefill = false;
    point(&r, 0, 3, DRIFT_NA, DRIFT_FAIL, false);
    r.dec.have_pp = false;
    r.dec.point[0].gap_measured = false;
    assert_int_equal(attribute(&r), DRIFT_ATTR_DECODE);
    assert_non_null(strstr(r.dec.attributed, "as far as it can be measured"));
    assert_non_null(strstr(r.dec.not_attributed, "no prompt logprobs"));
    drift_result_release(&r);

    /* a golden that could not generate */
    result(&r, 2, 1024);
    point(&r, 0, 3, DRIFT_PASS, DRIFT_PASS, false);
    r.dec.point[0].gap_measured = false;
    strcpy(r.dec.point[0].gap_why, "golden: 404 not found");
    attribute(&r);
    assert_non_null(strstr(r.dec.not_attributed, "could not be measured "
                                                 "(golden: 404 not found)"));
    drift_result_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts_follow_the_first_failing_bucket),
        cmocka_unit_test(test_attribution_kinds),
        cmocka_unit_test(test_what_could_not_be_attributed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
