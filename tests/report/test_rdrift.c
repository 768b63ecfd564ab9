/*
 * Tests for src/report/rdrift.c on hand-made fidelity.drift/1 summaries:
 * whiskers only where a bucket has an interval, threshold lines only when
 * the summary holds them (an older summary gets a note instead), the
 * decode path's level line, nulls drawn as '-', and token texts (which a
 * server's /detokenize wrote) escaped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "report/report.h"
#include "util/golden.h"

static json_t *bucket(int from, int to, double kl, bool ci)
{
    json_t *b = json_pack(
        "{s:i, s:i, s:{s:i, s:f, s:f, s:f, s:f}, s:{s:i, s:f, s:f, s:f}, "
        "s:s}",
        "from", from, "to", to, "candidate", "count", 100, "kl_mean", kl,
        "kl_p999", kl * 10, "top1_agreement", 0.99, "dp_rms", 0.001, "excess",
        "count", 100, "kl_mean", kl / 2, "top1_agreement", 0.995, "dp_rms",
        0.0005, "verdict", "PASS");
    if (ci)
        json_object_set_new(b, "ci95",
                            json_pack("{s:[f, f], s:[f, f], s:[f, f]}",
                                      "excess_kl_mean", kl / 4, kl, "dp_rms",
                                      0.0008, 0.0012, "top1_agreement", 0.98,
                                      1.0));
    else
        json_object_set_new(b, "ci95",
                            json_pack("{s:[n, n]}", "excess_kl_mean"));
    return b;
}

static char *render(const json_t *doc)
{
    struct buf b = BUF_INIT;
    assert_int_equal(report_drift_section(doc, &b), 0);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

static json_t *doc_with(bool thresholds)
{
    json_t *d = json_pack(
        "{s:s, s:i, s:i, s:b, s:s, s:[o, o], s:{s:{s:f}, s:s}, s:[{s:i, s:i, "
        "s:f, s:n, s:s, s:s, s:s, s:s}]}",
        "schema", "fidelity.drift/1", "sequences", 2, "positions", 300,
        "prefill", 1, "verdict", "WARN", "buckets", bucket(1, 64, 1e-5, true),
        bucket(64, 256, 1e-4, false), "decode", "decode_vs_prefill", "kl_mean",
        3e-4, "attribution", "decode kernels", "worst", "seq", 0, "pos", 70,
        "kl", 2e-3, "dlogp", "text", "<script>x</script>", "context_before",
        "a </svg> b", "context_after", "\"><img src=x>", "golden_top1",
        "&amp;");
    if (thresholds)
        json_object_set_new(d, "thresholds",
                            json_pack("{s:[f, f], s:[f, f], s:[f, f]}",
                                      "kl_mean", 1e-4, 1e-3, "dp_rms", 0.003,
                                      0.012, "top1", 0.995, 0.975));
    return d;
}

static void test_figures(void **state)
{
    (void)state;
    json_t *d = doc_with(true);
    char *s = render(d);
    assert_int_equal(golden_count(s, "<figure class=\"chart\">"), 3);
    /* one bucket has intervals: one whisker per figure */
    assert_int_equal(golden_count(s, "<path class=\"ci "), 3);
    /* WARN and FAIL in each figure, the decode level line in the KL one
     * (the summary has no decode delta-p or top-1) */
    assert_int_equal(golden_count(s, "class=\"th-warn\""), 3);
    assert_int_equal(golden_count(s, "class=\"th-fail\""), 3);
    assert_int_equal(golden_count(s, "class=\"decode\""), 1);
    assert_null(strstr(s, "holds no thresholds"));
    assert_non_null(strstr(s, "1-63"));
    assert_non_null(strstr(s, "decode kernels"));
    free(s);
    json_decref(d);
    d = doc_with(false);
    s = render(d);
    assert_non_null(strstr(s, "holds no thresholds"));
    assert_int_equal(golden_count(s, "class=\"th-warn\""), 0);
    free(s);
    json_decref(d);
}

static void test_token_text_is_escaped(void **state)
{
    (void)state;
    json_t *d = doc_with(true);
    char *s = render(d);
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "<img"));
    assert_non_null(strstr(s, "<mark>&lt;script&gt;x&lt;/script&gt;</mark>"));
    assert_non_null(strstr(s, "a &lt;/svg&gt; b"));
    assert_non_null(strstr(s, "&amp;amp;"));
    assert_int_equal(golden_count(s, "<svg"), golden_count(s, "</svg>"));
    assert_non_null(strstr(s, "<td class=\"n\">-</td>")); /* dlogp null */
    free(s);
    json_decref(d);
}

/* Ten worst positions open, the rest folded; the attribution in one line
 * with its evidence folded; the summary line. */
static void test_folds_and_summary(void **state)
{
    (void)state;
    json_t *d = doc_with(true);
    json_t *w = json_object_get(d, "worst");
    for (int i = 1; i < 13; i++)
        json_array_append_new(w,
                              json_pack("{s:i, s:i, s:f, s:f}", "seq", 0, "pos",
                                        70 + i, "kl", 1e-3, "dlogp", -0.1));
    json_object_set_new(d, "attribution",
                        json_pack("{s:s, s:s, s:s, s:s}", "kind", "prefill",
                                  "words", "prefill only", "attributed",
                                  "the prefill <path> differs",
                                  "not_attributed", "decode"));
    json_object_set_new(d, "harm",
                        json_pack("{s:f, s:f, s:f, s:f, s:i}", "excess_kl_mean",
                                  0.01, "lo", 0.008, "hi", 0.012,
                                  "flips_per_1k", 2.0, "positions", 300));
    char *s = render(d);
    assert_non_null(strstr(s, "<details class=\"more\"><summary>3 more "
                              "positions</summary>"));
    assert_int_equal(golden_count(s, "<details"), 2);
    assert_non_null(strstr(s, "<p class=\"attr\">Attribution: <b>prefill "
                              "only</b>; harm 0.01 (95% CI 0.008 to 0.012)"));
    assert_non_null(strstr(s, "<details class=\"evidence\"><summary>The "
                              "evidence</summary><p>Attributed: the prefill "
                              "&lt;path&gt; differs</p>"));
    free(s);
    struct report_in in = {.drift = d};
    struct buf b = BUF_INIT;
    assert_int_equal(report_html(&in, &b), 0);
    buf_addch(&b, '\0');
    assert_non_null(strstr(b.data, "<a href=\"#drift\">drift</a> <span "
                                   "class=\"v WARN\">WARN</span> attributed "
                                   "to <b>prefill only</b>; harm 0.01"));
    buf_release(&b);
    json_decref(d);
}

/* A threshold's label moves off a point that lies where it would go; the
 * candidate is drawn under the excess, thicker. */
static void test_labels_clear_of_points(void **state)
{
    (void)state;
    json_t *d = doc_with(true);
    char *s = render(d);
    /* nothing near the right end: labels there */
    assert_int_equal(golden_count(s, "text-anchor=\"end\">WARN (excess)"), 3);
    assert_non_null(strstr(s, "<polyline class=\"s1 g2\""));
    assert_true(strstr(s, "<polyline class=\"s1 g2\"") <
                strstr(s, "<polyline class=\"s2"));
    free(s);
    /* the candidate's mean KL on the WARN line at the right end */
    json_array_append_new(json_object_get(d, "buckets"),
                          bucket(512, 1000, 1e-4, false));
    s = render(d);
    const char *kl = strstr(s, "Mean KL divergence");
    const char *dp = strstr(s, "RMS delta-p");
    assert_non_null(kl);
    const char *w = strstr(kl, ">WARN (excess)");
    assert_true(w && w < dp);
    assert_non_null(strstr(kl, "text-anchor=\"start\">WARN (excess)"));
    assert_true(strstr(kl, "text-anchor=\"start\">WARN (excess)") < dp);
    free(s);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folds_and_summary),
        cmocka_unit_test(test_labels_clear_of_points),
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_token_text_is_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
