/*
 * Tests for src/report/rlive.c on hand-made fidelity-probe-live/1
 * documents: the per-cell table (break turn median and range, "never"),
 * one series per cell in each chart with its points, the first-breaking
 * sentence and the McNemar table (or the sentence that no cell breaks and
 * no table), more cells than the charts' styles, and escaping of the cell
 * names (a user's --vary values) and session errors (a server's words).
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

static char *render(const json_t *doc)
{
    struct buf b = BUF_INIT;
    assert_int_equal(report_live_section(doc, &b), 0);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

/* A cell of 6 turns, questions at 4 and 6, broken at turn brk of the
 * seeds (0: never) with reasoning growing by step a turn. */
static json_t *cell(const char *name, int brk, int step)
{
    json_t *bt = json_array();
    for (int t = 1; t <= 6; t++) {
        json_t *x =
            json_pack("{s:i, s:f, s:f}", "turn", t, "reasoning_bytes_median",
                      (double)(t * step), "prompt_tokens_median", 100.0 * t);
        if (t == 4 || t == 6)
            json_object_set_new(x, "recall",
                                json_pack("{s:i, s:i, s:f}", "asked", 2,
                                          "recalled", brk && t >= brk ? 0 : 2,
                                          "rate", brk && t >= brk ? 0.0 : 1.0));
        json_array_append_new(bt, x);
    }
    json_t *c =
        json_pack("{s:s, s:{}, s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "cell",
                  name, "vary", "send_reasoning", "keep", "sessions", 2,
                  "finished", 2, "broken", brk ? 2 : 0, "asked", 4, "recalled",
                  brk == 4   ? 0
                  : brk == 6 ? 2
                             : 4,
                  "by_turn", bt);
    json_object_set_new(c, "break_turn",
                        json_pack("{s:f, s:f, s:f, s:i}", "median",
                                  brk ? (double)brk : 7.0, "low",
                                  brk == 6 ? 5.5
                                  : brk    ? (double)brk
                                           : 7.0,
                                  "high",
                                  brk == 4 ? 7.5
                                  : brk    ? brk
                                           : 7.0,
                                  "never", brk ? 0 : 2));
    return c;
}

static json_t *doc_of(json_t *cells, const char *first)
{
    json_t *d = json_pack("{s:s, s:i, s:i, s:[i, i], s:o, s:b, s:[]}", "format",
                          "fidelity-probe-live/1", "turns", 6, "seeds", 2,
                          "question_turns", 4, 6, "cells", cells, "interrupted",
                          0, "sessions");
    json_object_set_new(
        d, "first_break",
        first ? json_pack("{s:s, s:f}", "cell", first, "median_turn", 4.0)
              : json_null());
    return d;
}

static void test_cells_charts_and_mcnemar(void **state)
{
    (void)state;
    json_t *a = cell("effort=\"max\" send-reasoning=keep", 4, 300);
    json_t *b = cell("effort=\"high\" send-reasoning=keep", 6, 200);
    json_t *c = cell("effort=\"high\" send-reasoning=drop", 0, 100);
    json_object_set_new(b, "vs_first",
                        json_pack("{s:i, s:i, s:i, s:i, s:f, s:b}",
                                  "both_recall", 0, "this_only", 2,
                                  "other_only", 0, "neither", 2, "p_value", 0.5,
                                  "significant", 0));
    json_object_set_new(c, "vs_first",
                        json_pack("{s:i, s:i, s:i, s:i, s:f, s:b}",
                                  "both_recall", 0, "this_only", 4,
                                  "other_only", 0, "neither", 0, "p_value",
                                  0.0125, "significant", 1));
    json_t *d = doc_of(json_pack("[o, o, o]", a, b, c),
                       "effort=\"max\" send-reasoning=keep");
    char *s = render(d);
    assert_non_null(strstr(s, "<section id=\"probe-live\">"));
    assert_non_null(strstr(s, "asked at turns 4, 6."));
    assert_non_null(strstr(s, "Breaks first: <b>effort=&quot;max&quot; "
                              "send-reasoning=keep</b>, at turn 4 (median "
                              "of 2)."));
    /* break turns: 4 (range to past the last turn: never), 6 (5.5-6),
     * never with its count */
    assert_non_null(strstr(s, "<td class=\"n\">4</td><td class=\"n\">"
                              "4-never</td><td class=\"n\">0</td>"));
    assert_non_null(strstr(s, "<td class=\"n\">6</td><td class=\"n\">"
                              "5.5-6</td>"));
    assert_non_null(strstr(s, "<td class=\"n\">never</td><td class=\"n\">"
                              "never</td><td class=\"n\">2</td>"));
    /* two charts, a series per cell in each: 2 recall points, 6
     * reasoning points; each style's marker also in the keys (table and
     * two legends) */
    assert_int_equal(golden_count(s, "<figure class=\"chart\">"), 2);
    assert_int_equal(golden_count(s, "<polyline "), 6);
    assert_int_equal(golden_count(s, "<circle class=\"s1\""), 2 + 6 + 3);
    assert_int_equal(golden_count(s, "<rect class=\"s2\""), 2 + 6 + 3);
    assert_int_equal(golden_count(s, "<path class=\"s3\""), 2 + 6 + 3);
    assert_int_equal(golden_count(s, "<ul class=\"key\">"), 2);
    /* McNemar against the first: the two other cells */
    assert_non_null(strstr(s, "McNemar exact"));
    assert_non_null(strstr(s, "<td class=\"n\">0.0125</td><td><b>significant"));
    assert_non_null(strstr(s, "<td class=\"n\">0.5</td><td>no</td>"));
    free(s);
    json_decref(d);
}

static void test_no_break_no_table(void **state)
{
    (void)state;
    json_t *d =
        doc_of(json_pack("[o, o]", cell("a", 0, 10), cell("b", 0, 20)), NULL);
    char *s = render(d);
    assert_non_null(strstr(s, "No cell breaks within 6 turns."));
    assert_null(strstr(s, "McNemar"));
    assert_null(strstr(s, "Breaks first"));
    assert_int_equal(golden_count(s, "<polyline "), 4);
    free(s);
    json_decref(d);
    /* no document, no section */
    struct buf b = BUF_INIT;
    assert_int_equal(report_live_section(NULL, &b), 0);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

static void test_more_cells_than_styles(void **state)
{
    (void)state;
    json_t *cells = json_array();
    char name[32];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof(name), "cell %d", i);
        json_array_append_new(cells, cell(name, 0, 10 + i));
    }
    json_t *d = doc_of(cells, NULL);
    char *s = render(d);
    /* the table has all 30; the charts the first 24, every one in a
     * style of its own: 8 slots, thick (g2) and thin (g3) lines */
    assert_non_null(strstr(s, "<td>cell 29</td>"));
    assert_int_equal(golden_count(s, "<polyline "), 2 * 24);
    assert_int_equal(golden_count(s, "<polyline class=\"s1\""), 2);
    assert_int_equal(golden_count(s, "<polyline class=\"s1 g2\""), 2);
    assert_int_equal(golden_count(s, "<polyline class=\"s1 g3\""), 2);
    assert_int_equal(golden_count(s, "<polyline class=\"s8 g3\""), 2);
    assert_int_equal(golden_count(s, "The first 24 cells are drawn"), 2);
    free(s);
    json_decref(d);
}

static void test_strings_escaped(void **state)
{
    (void)state;
    const char *evil = "tag=\"\\\"><script>alert(1)</script>\" "
                       "send-reasoning=keep";
    json_t *d =
        doc_of(json_pack("[o, o]", cell(evil, 4, 10),
                         cell("x</svg><img src=x onerror=alert(2)>", 0, 10)),
               evil);
    json_object_set_new(
        json_array_get(json_object_get(d, "cells"), 1), "vs_first",
        json_pack("{s:i, s:i, s:i, s:i, s:f, s:b}", "both_recall", 1,
                  "this_only", 1, "other_only", 0, "neither", 0, "p_value", 1.0,
                  "significant", 0));
    json_array_append_new(
        json_object_get(d, "sessions"),
        json_pack("{s:i, s:i, s:i, s:s}", "cell", 1, "seed_index", 0,
                  "turns_played", 3, "error",
                  "HTTP 500: <b onmouseover=alert(3)>\x01 'oops'"));
    char *s = render(d);
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "<img"));
    assert_null(strstr(s, "<b onmouseover"));
    assert_null(strstr(s, "</svg><img"));
    assert_non_null(strstr(s, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert_non_null(strstr(s, "&lt;/svg&gt;&lt;img src=x"));
    assert_non_null(strstr(s, "Sessions that ended with an error"));
    assert_non_null(strstr(s, "&lt;b onmouseover=alert(3)&gt;\xef\xbf\xbd "
                              "&#39;oops&#39;"));
    free(s);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cells_charts_and_mcnemar),
        cmocka_unit_test(test_no_break_no_table),
        cmocka_unit_test(test_more_cells_than_styles),
        cmocka_unit_test(test_strings_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
