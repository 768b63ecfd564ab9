/*
 * Tests for src/report/rprobe.c on small hand-made fidelity-probe/1
 * documents: which maps are drawn (length x depth, length x variant for a
 * kind at one depth, one per temperature), the few-cases mark, the
 * difference map's outline only where the Wilson intervals are apart, an
 * outcome name the renderer has never heard of getting its own column
 * (what probe's new classifications will be), and escaping of what the
 * server sent (replies, errors, kind and variant names).
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

static json_t *cell(const char *kind, int len, int depth, const char *var,
                    double temp, int cases, int passed, double lo, double hi)
{
    return json_pack("{s:s, s:i, s:i, s:s, s:f, s:i, s:i, s:f, s:[f, f], "
                     "s:{s:i, s:i}}",
                     "kind", kind, "length", len, "depth", depth, "variant",
                     var, "temperature", temp, "cases", cases, "passed", passed,
                     "pass_rate", cases ? (double)passed / cases : 0.0,
                     "wilson95", lo, hi, "outcomes", "pass", passed,
                     "dropped-before-the-model", cases - passed);
}

static char *render(const json_t *doc)
{
    struct buf b = BUF_INIT;
    assert_int_equal(report_probe_section(doc, &b), 0);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

static json_t *side(json_t *cells)
{
    json_t *k =
        json_pack("{s:s, s:i, s:{s:i, s:i}, s:{s:i, s:i, s:i}, s:i}", "kind",
                  "needle", "cases", 8, "outcomes", "pass", 5,
                  "dropped-before-the-model", 3, "effective_length", "ruler",
                  1024, "nolima", 0, "no_context_replies", 0, "cases", 8);
    return json_pack("{s:i, s:i, s:f, s:[f, f], s:[o], s:o, s:{s:i, s:i}, "
                     "s:{s:i, s:i}}",
                     "cases", 8, "passed", 5, "pass_rate", 0.625, "wilson95",
                     0.3, 0.9, "kinds", k, "cells", cells, "outcomes", "pass",
                     5, "dropped-before-the-model", 3, "effective_length",
                     "ruler", 1024, "nolima", 0);
}

static void test_maps_and_marks(void **state)
{
    (void)state;
    json_t *ec = json_array(), *bc = json_array();
    /* needle: 2 lengths x 2 depths; the 2k/50 cell fails with 10 cases */
    json_array_append_new(ec, cell("needle", 1024, 0, "-", 0, 10, 10, .7, 1));
    json_array_append_new(ec, cell("needle", 1024, 50, "-", 0, 1, 1, .2, 1));
    json_array_append_new(ec, cell("needle", 2048, 0, "-", 0, 10, 10, .7, 1));
    json_array_append_new(ec, cell("needle", 2048, 50, "-", 0, 10, 0, 0, .3));
    json_array_append_new(bc, cell("needle", 1024, 0, "-", 0, 10, 10, .7, 1));
    json_array_append_new(bc, cell("needle", 1024, 50, "-", 0, 1, 1, .2, 1));
    json_array_append_new(bc, cell("needle", 2048, 0, "-", 0, 10, 10, .7, 1));
    json_array_append_new(bc, cell("needle", 2048, 50, "-", 0, 10, 10, .7, 1));
    /* reasoning: one depth, two variants -> one length x variant map */
    json_array_append_new(
        ec, cell("reasoning", 1024, 50, "inline+tools", 0, 4, 4, .5, 1));
    json_array_append_new(
        ec, cell("reasoning", 1024, 50, "omitted", 0, 4, 0, 0, .5));
    json_t *doc = json_pack("{s:s, s:o, s:o}", "format", "fidelity-probe/1",
                            "results", side(ec), "baseline_results", side(bc));
    char *s = render(doc);
    assert_non_null(strstr(s, "needle: pass % by length x depth"));
    assert_non_null(strstr(s, "reasoning: pass % by length x variant"));
    assert_null(strstr(s, "reasoning [inline+tools]"));
    /* endpoint, baseline and difference maps for each kind; the baseline
     * has no reasoning cells, so those two maps are all grey */
    assert_int_equal(golden_count(s, "<svg class=\"heat\""), 3 + 3);
    assert_int_equal(golden_count(s, "<svg class=\"legend\""), 2);
    /* the one-case cell is marked on both sides; the legend has one too */
    assert_int_equal(golden_count(s, "<path class=\"few\""), 2 + 1);
    /* 2k/50: -100 points and intervals apart; 1k/50 is not outlined */
    assert_non_null(strstr(s, ">-100</text>"));
    assert_int_equal(golden_count(s, "class=\"sig\"/>"), 1 + 1 /* legend */);
    /* an outcome name from a newer probe gets its column */
    assert_non_null(strstr(s, "<th>dropped-before-the-model</th>"));
    assert_non_null(strstr(s, "&lt;min"));
    free(s);
    json_decref(doc);
}

static void test_server_text_is_escaped(void **state)
{
    (void)state;
    json_t *ec = json_array();
    json_array_append_new(
        ec, cell("ne<b>edle", 1024, 0, "v\"><svg onload=x>", 0, 1, 0, 0, .8));
    json_t *sd = side(ec);
    json_object_set_new(sd, "case_results",
                        json_pack("[{s:s, s:i, s:i, s:s, s:s, s:b, s:s, s:s}]",
                                  "kind", "needle", "length", 1024, "depth", 0,
                                  "variant", "-", "outcome", "missed", "passed",
                                  0, "reply", "</svg><script>alert(1)</script>",
                                  "error", "<img src=x onerror=alert(2)>"));
    json_t *doc =
        json_pack("{s:s, s:o}", "format", "fidelity-probe/1", "results", sd);
    char *s = render(doc);
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "<img"));
    assert_null(strstr(s, "<b>"));
    assert_null(strstr(s, "<svg onload"));
    assert_non_null(strstr(s, "&lt;/svg&gt;&lt;script&gt;alert(1)"));
    assert_non_null(strstr(s, "&lt;img src=x onerror=alert(2)&gt;"));
    assert_non_null(strstr(s, "ne&lt;b&gt;edle"));
    assert_int_equal(golden_count(s, "<svg"), golden_count(s, "</svg>"));
    free(s);
    json_decref(doc);
}

static void test_absent_document_draws_nothing(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    assert_int_equal(report_probe_section(NULL, &b), 0);
    assert_int_equal(b.len, 0);
    json_t *doc =
        json_pack("{s:s, s:{}}", "format", "fidelity-probe/1", "results");
    char *s = render(doc); /* nothing but a summary: no crash, a note */
    assert_non_null(strstr(s, "No per-cell results"));
    free(s);
    json_decref(doc);
}

/* The terminal's letters, a kind without depth, variant names that do not
 * fit a column, the few-cases mark left out when every cell has few. */
static void test_letters_depthless_and_keys(void **state)
{
    (void)state;
    json_t *ec = json_array();
    json_t *c = cell("needle", 1024, 50, "-", 0, 1, 0, 0, .8);
    json_object_set_new(c, "failure", json_string("D"));
    json_array_append_new(ec, c);
    json_array_append_new(ec, cell("needle", 1024, 0, "-", 0, 1, 1, .2, 1));
    json_array_append_new(ec,
                          cell("first-message", 1024, -1, "-", 0, 1, 1, .2, 1));
    json_array_append_new(ec, cell("reasoning", 1024, 50,
                                   "reasoning_content+tools", 0, 1, 1, .2, 1));
    json_array_append_new(
        ec, cell("reasoning", 1024, 50, "inline-think", 0, 1, 1, .2, 1));
    json_t *doc = json_pack("{s:s, s:o}", "format", "fidelity-probe/1",
                            "results", side(ec));
    char *s = render(doc);
    /* the failed cell says why, and the legend says what letters mean */
    assert_non_null(strstr(s, "class=\"on-dark\">0 D</text>"));
    assert_non_null(strstr(s, "<b>D</b> dropped-before-the-model"));
    /* first-message: one column, no "-1%" */
    assert_non_null(strstr(s, "first-message: pass % by length (the kind "
                              "has no depth)"));
    assert_null(strstr(s, "-1%"));
    /* long variant names: v1, v2 on the map, the names in a key */
    assert_non_null(strstr(s, ">v1</text>"));
    assert_non_null(strstr(s, "<li><b>v1</b> reasoning_content+tools</li>"));
    assert_null(strstr(s, ">reasoning_co"));
    /* every cell has one case: no marks, one sentence */
    assert_int_equal(golden_count(s, "<path class=\"few\""), 0);
    assert_int_equal(golden_count(s, "Every cell holds fewer than 3"), 1);
    /* no verdict stored: fail closed */
    assert_non_null(strstr(s, "<span class=\"v INCONCLUSIVE\">"));
    free(s);
    json_decref(doc);
}

/* The verdict and the "where it breaks and why" lines lead the section and
 * the page's summary, escaped. */
static void test_verdict_and_causes(void **state)
{
    (void)state;
    json_t *ec = json_array();
    json_array_append_new(ec, cell("needle", 1024, 0, "-", 0, 10, 5, .2, .8));
    json_t *sd = side(ec);
    json_object_set_new(json_array_get(json_object_get(sd, "kinds"), 0), "why",
                        json_string("fails from 1k on (5 failed): <script>"));
    json_t *doc =
        json_pack("{s:s, s:s, s:s, s:o}", "format", "fidelity-probe/1",
                  "verdict", "FAIL", "verdict_line",
                  "FAIL: the pass rate 50.0% is below "
                  "--fail-under 90%",
                  "results", sd);
    char *s = render(doc);
    assert_non_null(strstr(s, "Verdict: <span class=\"v FAIL\">FAIL</span> "
                              "the pass rate 50.0% is below"));
    assert_non_null(strstr(s, "<li><b>needle</b>: fails from 1k on (5 "
                              "failed): &lt;script&gt;</li>"));
    free(s);
    struct report_in in = {.probe = doc};
    struct buf b = BUF_INIT;
    assert_int_equal(report_html(&in, &b), 0);
    buf_addch(&b, '\0');
    const char *p = strstr(b.data, "<nav class=\"summary\"");
    assert_non_null(p);
    assert_true(p < strstr(b.data, "<section id=\"probe\">"));
    assert_non_null(strstr(p, "<a href=\"#probe\">probe</a> <span "
                              "class=\"v FAIL\">FAIL</span>"));
    assert_null(strstr(b.data, "<script>"));
    buf_release(&b);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_letters_depthless_and_keys),
        cmocka_unit_test(test_verdict_and_causes),
        cmocka_unit_test(test_maps_and_marks),
        cmocka_unit_test(test_server_text_is_escaped),
        cmocka_unit_test(test_absent_document_draws_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
