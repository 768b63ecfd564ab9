/*
 * Tests for src/report/raudit.c on hand-made audit documents: which
 * findings put which marker over which request (informational ones other
 * than a sampling change put none), the sessions drawn and the note for
 * the rest, and escaping of session ids, summaries and evidence (what a
 * harness and a model wrote).
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

static json_t *finding(const char *sev, const char *rule, const char *session,
                       int request, const char *summary)
{
    return json_pack("{s:s, s:s, s:s, s:i, s:i, s:s, s:{s:s}}", "severity", sev,
                     "rule", rule, "session", session, "request", request,
                     "turn", request, "summary", summary, "evidence", "reply",
                     "</svg><script>alert(1)</script>");
}

static json_t *session(const char *id, int n)
{
    json_t *reqs = json_array();
    for (int i = 1; i <= n; i++)
        json_array_append_new(reqs,
                              json_pack("{s:i, s:i, s:i}", "request", i, "turn",
                                        i, "prompt_tokens", 100 * i));
    return json_pack("{s:s, s:o}", "session", id, "requests", reqs);
}

static char *render(const json_t *doc)
{
    struct buf b = BUF_INIT;
    assert_int_equal(report_audit_section(doc, &b), 0);
    buf_addch(&b, '\0');
    return buf_detach(&b, NULL);
}

static void test_markers(void **state)
{
    (void)state;
    const char *sid = "s\"><img src=x onerror=alert(2)>";
    json_t *f = json_array();
    json_array_append_new(f, finding("warn", "history.rewrite", sid, 2, "a"));
    json_array_append_new(f, finding("error", "truncation.flat", sid, 3, "b"));
    json_array_append_new(
        f, finding("error", "first_message.claim", sid, 4, "<b>c</b>"));
    json_array_append_new(f, finding("info", "sampling.changed", sid, 5, "d"));
    json_array_append_new(f, finding("info", "sampling.sent", sid, 1, "e"));
    json_array_append_new(
        f, finding("warn", "degeneration.repetition", sid, 6, "f"));
    json_array_append_new(f, finding("error", "truncation.below", "other", 1,
                                     "another session's"));
    json_t *doc = json_pack("{s:[], s:o, s:[o]}", "sessions", "findings", f,
                            "turns", session(sid, 6));
    char *s = render(doc);
    /* each kind once in the legend and once on the chart; sampling.sent
     * (info) and the other session's finding put no marker here */
    assert_int_equal(golden_count(s, "class=\"m0\""), 2);
    assert_int_equal(golden_count(s, "class=\"m1\""), 2);
    assert_int_equal(golden_count(s, "class=\"m2\""), 2);
    assert_int_equal(golden_count(s, "class=\"m3\""), 2);
    assert_int_equal(golden_count(s, "class=\"m4\""), 2);
    assert_non_null(strstr(s, "Findings (7)"));
    assert_null(strstr(s, "<script"));
    assert_null(strstr(s, "<img"));
    assert_null(strstr(s, "<b>"));
    assert_non_null(strstr(s, "s&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
    assert_non_null(strstr(s, "&lt;/svg&gt;&lt;script&gt;"));
    assert_int_equal(golden_count(s, "<svg"), golden_count(s, "</svg>"));
    free(s);
    json_decref(doc);
}

static void test_many_sessions_note(void **state)
{
    (void)state;
    json_t *turns = json_array();
    for (int i = 0; i < 43; i++) {
        char id[16];
        snprintf(id, sizeof(id), "s%d", i);
        json_array_append_new(turns, session(id, 2));
    }
    json_t *doc =
        json_pack("{s:[], s:[], s:o}", "sessions", "findings", "turns", turns);
    char *s = render(doc);
    assert_int_equal(golden_count(s, "<figure class=\"chart\">"), 40);
    assert_non_null(strstr(s, "3 more sessions are not drawn"));
    assert_non_null(strstr(s, "No findings."));
    free(s);
    json_decref(doc);
}

/* A session whose prompt tokens are unknown says so instead of drawing a
 * flat line at 0; one request is "1 request"; the summary's word. */
static void test_unknown_tokens_and_plurals(void **state)
{
    (void)state;
    json_t *reqs = json_pack("[{s:i, s:i}, {s:i, s:i}]", "request", 1, "turn",
                             1, "request", 2, "turn", 2);
    json_t *turns = json_pack("[{s:s, s:o}, o]", "session", "nocount",
                              "requests", reqs, session("one", 1));
    json_t *f = json_array();
    json_array_append_new(f, finding("warn", "history.rewrite", "one", 1,
                                     "the <i>history</i> changed"));
    json_t *doc = json_pack("{s:[], s:o, s:o}", "sessions", "findings", f,
                            "turns", turns);
    char *s = render(doc);
    assert_non_null(strstr(s, "<code>nocount</code>: prompt tokens unknown"));
    assert_non_null(strstr(s, "None of its 2 requests has a prompt token"));
    assert_int_equal(golden_count(s, "<polyline"), 1); /* "one" only */
    assert_non_null(strstr(s, "prompt tokens per request (1 request)"));
    assert_non_null(strstr(s, "<td class=\"rule\">history.rewrite</td>"));
    free(s);
    struct report_in in = {.audit = doc};
    struct buf b = BUF_INIT;
    assert_int_equal(report_html(&in, &b), 0);
    buf_addch(&b, '\0');
    assert_non_null(strstr(b.data, "<a href=\"#audit\">audit</a> <span "
                                   "class=\"v WARN\">WARN</span> 2 sessions, "
                                   "0 errors, 1 warning"));
    assert_non_null(strstr(b.data, "the &lt;i&gt;history&lt;/i&gt; changed"));
    buf_release(&b);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_tokens_and_plurals),
        cmocka_unit_test(test_markers),
        cmocka_unit_test(test_many_sessions_note),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
