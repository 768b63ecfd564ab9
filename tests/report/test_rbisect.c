/*
 * Tests for src/report/rbisect.c: the bisect section drawn from a
 * fidelity.bisect/1 document (tests/report/fixtures/bisect.json is what
 * `fidelity bisect --json` wrote for four toggles against `fidelity sim`:
 * one culprit, one drifting without recall loss, one harmless, one inert)
 * against its golden file; the culprit marked and its bar red, the path
 * mismatches marked, a bar and an interval per measured row, a row not
 * measured saying why, the summary's word, and escaping of the names a
 * user wrote into the config.
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

#define FIXTURE "tests/report/fixtures/bisect.json"

static char *render(const json_t *doc)
{
    struct buf b = BUF_INIT;
    assert_int_equal(report_bisect_section(doc, &b), 0);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

static void test_ranking_golden(void **state)
{
    (void)state;
    json_t *doc = json_load_file(FIXTURE, 0, NULL);
    assert_non_null(doc);
    char *s = render(doc);
    assert_non_null(strstr(s, "<section id=\"bisect\">"));
    assert_non_null(strstr(s, "<span class=\"v FAIL\">FAIL</span> culprit: "
                              "<b>mhc-bf16</b>"));
    /* one culprit row, its bar red; a harm bar and a recall bar a row */
    assert_int_equal(golden_count(s, "<tr class=\"culprit\">"), 1);
    assert_int_equal(golden_count(s, "class=\"harm culprit\""), 1);
    assert_int_equal(golden_count(s, "<rect class=\"harm"), 4);
    assert_int_equal(golden_count(s, "<line class=\"zero\""), 4);
    /* intervals: harm and recall whiskers on every row */
    assert_int_equal(golden_count(s, "<path class=\"ci\""), 8);
    /* claimed against measured: two mismatches */
    assert_int_equal(golden_count(s, "(not the path claimed)"), 2);
    assert_non_null(strstr(s, "inert"));
    assert_true(golden_check("tests/report/golden/bisect.html", s));
    free(s);
    struct report_in in = {.bisect = doc};
    struct buf b = BUF_INIT;
    assert_int_equal(report_html(&in, &b), 0);
    buf_addch(&b, '\0');
    assert_non_null(strstr(b.data, "<a href=\"#bisect\">bisect</a> <span "
                                   "class=\"v FAIL\">FAIL</span> culprit: "
                                   "<b>mhc-bf16</b>"));
    buf_release(&b);
    json_decref(doc);
}

static void test_not_measured_and_escaping(void **state)
{
    (void)state;
    json_t *doc = json_pack(
        "{s:s, s:s, s:i, s:[{s:s, s:[s], s:s, s:b, s:s}, {s:s, s:[s], s:s, "
        "s:b, s:f, s:[f, f], s:f, s:[f, f], s:f, s:s, s:s, s:b, s:b}]}",
        "schema", "fidelity.bisect/1", "mode", "one-at-a-time", "launches", 3,
        "configurations", "name", "<script>x</script>", "toggles", "a",
        "verdict", "not measured", "measured", 0, "error",
        "server exited: <b>boom</b>", "name", "\"><img src=x>", "toggles", "b",
        "verdict", "harmless (below thresholds)", "measured", 1, "harm", 1e-6,
        "harm_ci", 5e-7, 2e-6, "pass_diff", 0.0, "pass_diff_ci", -0.1, 0.1,
        "mcnemar_p", 1.0, "claimed", "prefill", "attribution", "prefill only",
        "path_mismatch", 0, "harmful", 0);
    assert_non_null(doc);
    char *s = render(doc);
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "<img"));
    assert_null(strstr(s, "<b>boom"));
    assert_non_null(strstr(s, "not measured: server exited: &lt;b&gt;boom"));
    assert_non_null(strstr(s, "&quot;&gt;&lt;img src=x&gt;"));
    /* no culprit, one row not measured: not a PASS */
    assert_non_null(strstr(s, "<span class=\"v INCONCLUSIVE\">"));
    assert_non_null(strstr(s, "no configuration lost recall significantly"));
    assert_int_equal(golden_count(s, "<svg"), golden_count(s, "</svg>"));
    free(s);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranking_golden),
        cmocka_unit_test(test_not_measured_and_escaping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
