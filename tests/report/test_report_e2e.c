/*
 * End-to-end tests of the HTML report: seeded runs of `fidelity probe`,
 * `fidelity drift` and `fidelity audit` (after `fidelity record`) against
 * `fidelity sim` servers on ephemeral 127.0.0.1 ports write pages with
 * --report (probe --live too, against the feedback-loop fault, with a
 * markup payload in a --vary value); each section is compared with its
 * golden file under
 * tests/report/golden/ (`make golden-report` regenerates them), and
 * `fidelity report` must draw the same section from what the run stored.
 * Also the command's errors and the header (time, redacted command line).
 * Every server is stopped in teardown, also after a failed assertion.
 */
#define _GNU_SOURCE
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

#include "core/xalloc.h"
#include "http/client.h"
#include "util/golden.h"
#include "util/proc.h"
#include "util/rec.h"

/* What `fidelity bisect --json` wrote (tests/report/test_rbisect.c). */
#define FIXTURE "tests/report/fixtures/bisect.json"

static struct proc P[3];
static bool up[3];
static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    setenv("SOURCE_DATE_EPOCH", "86400", 1);
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 2; i >= 0; i--)
        if (up[i]) {
            proc_stop(&P[i]);
            up[i] = false;
        }
    if (getenv("REPORT_TEST_KEEP"))
        fprintf(stderr, "kept %s\n", dir);
    else
        rec_rmdir(dir);
    dir = NULL;
    return 0;
}

/* Starts sim number i with the given options (NULL-terminated). */
static const char *sim(int i, const char *const *opts)
{
    const char *av[24] = {"sim", "--listen", "127.0.0.1:0"};
    size_t n = 3;
    for (size_t k = 0; opts && opts[k] && n < 23; k++)
        av[n++] = opts[k];
    av[n] = NULL;
    assert_int_equal(proc_start(&P[i], av), 0);
    up[i] = true;
    return xstrdup(proc_url(&P[i]));
}

static char *path(const char *name)
{
    return xasprintf("%s/%s", dir, name);
}

static int run(const char *const *av, struct buf *out)
{
    struct buf err = BUF_INIT;
    int rc = proc_run(av, NULL, out, &err, 180);
    if (rc != 0 && rc != 1)
        print_message("fidelity %s exited %d: %s\n", av[0], rc, buf_str(&err));
    buf_release(&err);
    return rc;
}

static char *section(const char *file, const char *id)
{
    char *html = golden_read(file, NULL);
    assert_non_null(html);
    char *s = golden_section(html, id);
    free(html);
    assert_non_null(s);
    return s;
}

/* The page's summary block (<nav class="summary"> .. </nav>). */
static char *summary_block(const char *file)
{
    char *html = golden_read(file, NULL);
    assert_non_null(html);
    const char *a = strstr(html, "<nav class=\"summary\"");
    assert_non_null(a);
    const char *b = strstr(a, "</nav>");
    assert_non_null(b);
    char *s = xasprintf("%.*s\n", (int)(b + 6 - a), a);
    free(html);
    return s;
}

/* `fidelity report --db DB` with only section id drawn: its section. */
static char *stored_section(const char *db, const char *id)
{
    char *out = path("stored.html");
    const char *av[12] = {"report", "--db", db, "-o", out};
    size_t n = 5;
    if (strcmp(id, "probe") && strcmp(id, "probe-live"))
        av[n++] = "--no-probe";
    if (strcmp(id, "drift"))
        av[n++] = "--no-drift";
    if (strcmp(id, "audit"))
        av[n++] = "--no-audit";
    av[n] = NULL;
    struct buf o = BUF_INIT;
    assert_int_equal(run(av, &o), 0);
    assert_non_null(strstr(buf_str(&o), out)); /* prints the path */
    buf_release(&o);
    char *s = section(out, id);
    free(out);
    return s;
}

static void test_probe_section_golden(void **state)
{
    (void)state;
    const char *faulty[] = {"--context-limit", "4096", "--overflow", "middle",
                            NULL};
    char *h = (char *)sim(0, NULL), *f = (char *)sim(1, faulty);
    char *db = path("probe.db"), *page = path("probe.html");
    const char *av[] = {"probe",
                        "--endpoint",
                        f,
                        "--baseline",
                        h,
                        "--kinds",
                        "needle,canary,reasoning",
                        "--lengths",
                        "1k,2k,4k,8k",
                        "--depths",
                        "0,50,100",
                        "--seed",
                        "3",
                        "-j",
                        "2",
                        "--api-key",
                        "sk-report-secret",
                        "--db",
                        db,
                        "--report",
                        page,
                        NULL};
    /* exit 1: the faulty endpoint is worse than the baseline (a check
     * failed); the page is written all the same */
    assert_int_equal(run(av, NULL), 1);
    char *html = golden_read(page, NULL);
    assert_non_null(html);
    /* the header: the time given, the key redacted, no script allowed */
    assert_non_null(strstr(html, "1970-01-02 00:00:00 UTC"));
    assert_null(strstr(html, "sk-report-secret"));
    assert_non_null(strstr(html, "--api-key ***"));
    assert_non_null(strstr(html, "default-src 'none'"));
    assert_non_null(strstr(html, "probe baseline"));
    free(html);
    char *s = section(page, "probe");
    assert_non_null(strstr(s, "truncated-by-server"));
    assert_non_null(strstr(s, "endpoint - baseline (points)"));
    assert_true(golden_check("tests/report/golden/probe.html", s));
    char *t = stored_section(db, "probe");
    assert_string_equal(t, s);
    free(t);
    /* the summary leads with the verdict and the terminal's causes */
    t = summary_block(page);
    assert_non_null(strstr(t, "<span class=\"v FAIL\">FAIL</span>"));
    assert_non_null(strstr(t, "<b>needle</b>: fails from"));
    assert_true(golden_check("tests/report/golden/summary-probe.html", t));
    free(t);
    /* the settings that differ between the servers, as inspect has them */
    html = golden_read(page, NULL);
    const char *a = strstr(html, "<h3 id=\"servers\">");
    assert_non_null(a);
    const char *z = strstr(a, "<details");
    assert_non_null(z);
    t = xasprintf("%.*s\n", (int)(z - a), a);
    assert_non_null(strstr(t, "<code>get_server_info.sim_config.overflow"
                              "</code></td><td><code>middle</code>"));
    assert_true(golden_check("tests/report/golden/settings-probe.html", t));
    assert_non_null(strstr(z, "<summary>Full fingerprints</summary>"));
    assert_null(strstr(html, "server and flags seen"));
    free(t);
    free(html);
    free(s);
    free(db);
    free(page);
    free(h);
    free(f);
}

static void test_drift_section_golden(void **state)
{
    (void)state;
    const char *noisy[] = {"--prefill-noise",
                           "0.02",
                           "--noise-growth",
                           "0.5",
                           "--decode-noise",
                           "0.05",
                           NULL};
    char *g = (char *)sim(0, NULL), *c = (char *)sim(1, noisy);
    char *db = path("drift.db"), *page = path("drift.html");
    const char *av[] = {"drift", "--golden",        g,    "--candidate",
                        c,       "--sequences",     "2",  "--max-context",
                        "2048",  "--bootstrap",     "50", "--seed",
                        "1",     "--decode-tokens", "16", "--db",
                        db,      "--report",        page, NULL};
    int rc = run(av, NULL);
    assert_true(rc == 0 || rc == 1);
    char *s = section(page, "drift");
    assert_non_null(strstr(s, "WARN (excess)"));   /* threshold lines */
    assert_non_null(strstr(s, "path class=\"ci")); /* bootstrap whiskers */
    assert_non_null(strstr(s, "<mark>"));          /* worst token in text */
    assert_true(golden_check("tests/report/golden/drift.html", s));
    char *t = stored_section(db, "drift");
    assert_string_equal(t, s);
    free(t);
    t = summary_block(page);
    assert_non_null(strstr(t, "<a href=\"#drift\">drift</a> <span class=\"v "));
    assert_true(golden_check("tests/report/golden/summary-drift.html", t));
    free(t);
    free(s);
    free(db);
    free(page);
    free(g);
    free(c);
}

/* Three user turns through record (non-streamed); returns nothing, the
 * store holds them. */
static void converse(const char *url, const char *session)
{
    struct http_client *hc = http_client_new();
    char *u = xasprintf("%s/v1/chat/completions", url);
    char *sid = xasprintf("X-Session-Id: %s", session);
    const char *hdr[] = {"Content-Type: application/json", sid, NULL};
    const char *users[] = {"The access code for the blue door is 4812.",
                           "Note: the meeting moved to room 101.",
                           "What is the access code for the blue door?"};
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content",
                             "You are a helpful assistant.");
    for (int t = 0; t < 3; t++) {
        json_array_append_new(
            msgs, json_pack("{s:s, s:s}", "role", "user", "content", users[t]));
        json_t *body =
            json_pack("{s:s, s:O, s:f, s:i}", "model", "fidelity-sim",
                      "messages", msgs, "temperature", 0.0, "max_tokens", 128);
        char *s = json_dumps(body, JSON_COMPACT);
        struct http_req req = {.method = "POST",
                               .url = u,
                               .body = s,
                               .body_len = strlen(s),
                               .headers = hdr,
                               .timeout_ms = 20000};
        struct http_resp resp;
        struct diag d;
        http_resp_init(&resp);
        assert_int_equal(http_do(hc, &req, &resp, &d), 0);
        assert_int_equal(resp.status, 200);
        json_t *a = json_loads(buf_str(&resp.body), 0, NULL);
        const char *text = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(a, "choices"), 0),
                            "message"),
            "content"));
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant",
                                              "content", text ? text : ""));
        json_decref(a);
        http_resp_release(&resp);
        json_decref(body);
        free(s);
    }
    json_decref(msgs);
    free(sid);
    free(u);
    http_client_free(hc);
}

static void test_audit_section_golden(void **state)
{
    (void)state;
    const char *window[] = {"--keep-last-turns", "1", NULL};
    char *s0 = (char *)sim(0, window);
    char *db = path("audit.db"), *page = path("audit.html");
    assert_int_equal(rec_start_record(&P[1], s0, db, NULL), 0);
    up[1] = true;
    converse(proc_url(&P[1]), "report-e2e");
    proc_stop(&P[1]);
    up[1] = false;
    const char *av[] = {"audit", "--db", db, "--report", page, NULL};
    assert_int_equal(run(av, NULL), 1); /* the first-message finding */
    char *s = section(page, "audit");
    assert_non_null(strstr(s, "first_message.claim"));
    assert_non_null(strstr(s, "class=\"m2\"")); /* its marker on the chart */
    assert_true(golden_check("tests/report/golden/audit.html", s));
    char *t = stored_section(db, "audit");
    assert_string_equal(t, s);
    free(t);
    t = summary_block(page);
    assert_non_null(strstr(t, "<span class=\"v FAIL\">FAIL</span> 1 "
                              "session, 2 errors"));
    assert_true(golden_check("tests/report/golden/summary-audit.html", t));
    free(t);
    /* one session by name; an unknown one is a usage error */
    char *out = path("one.html");
    const char *one[] = {"report",     "--db", db,  "--session", "report-e2e",
                         "--no-probe", "-o",   out, NULL};
    assert_int_equal(run(one, NULL), 0);
    const char *none[] = {"report", "--db", db,  "--session",
                          "nope",   "-o",   out, NULL};
    assert_int_equal(proc_run(none, NULL, NULL, NULL, 60), 2);
    free(out);
    free(s);
    free(db);
    free(page);
    free(s0);
}

/* The polylines of s in order: how many points each has, into n[]. */
static size_t polyline_points(const char *s, size_t *n, size_t max)
{
    size_t k = 0;
    for (const char *p = strstr(s, "<polyline"); p && k < max;
         p = strstr(p + 1, "<polyline")) {
        const char *pts = strstr(p, "points=\""), *end;
        assert_non_null(pts);
        pts += 8;
        end = strchr(pts, '"');
        n[k] = 1;
        for (const char *q = pts; q < end; q++)
            n[k] += *q == ' ';
        k++;
    }
    return k;
}

static void test_live_section_golden(void **state)
{
    (void)state;
    const char *loop[] = {"--max-model-len",
                          "16384",
                          "--feedback-base",
                          "40",
                          "--feedback-budget",
                          "2000",
                          "--feedback-max",
                          "512",
                          NULL};
    char *f = (char *)sim(0, loop);
    char *db = path("live.db"), *page = path("live.html");
    const char *av[] = {"probe",
                        "--endpoint",
                        f,
                        "--live",
                        "--turns",
                        "8",
                        "--seeds",
                        "2",
                        "--vary",
                        "tag=a,\"><script>alert(1)</script>",
                        "--send-reasoning",
                        "keep,drop",
                        "--extra-body",
                        "{\"reasoning_effort\": \"max\"}",
                        "--db",
                        db,
                        "--report",
                        page,
                        NULL};
    /* exit 1: carrying the reasoning forward breaks recall, below the
     * default --fail-under; the page is written all the same */
    assert_int_equal(run(av, NULL), 1);
    char *html = golden_read(page, NULL);
    assert_non_null(html);
    /* the user's payload stays text, in the cells and the command line */
    assert_null(strstr(html, "<script"));
    assert_null(strstr(html, "</script>"));
    assert_non_null(strstr(html, "&quot;&gt;&lt;script&gt;alert(1)"));
    assert_non_null(strstr(html, "probe --live endpoint"));
    free(html);
    char *s = section(page, "probe-live");
    /* four cells (tag x send-reasoning): the first-breaking one in its
     * table row, the two charts' keys and the sentence; the drop cells in
     * the table and against the first */
    assert_int_equal(golden_count(s, "tag=&quot;a&quot; send-reasoning=keep"),
                     1 + 2 + 1);
    assert_int_equal(golden_count(s, "send-reasoning=drop</td>"), 2 + 2);
    /* the keep cells break, the drop cells never: one named first */
    assert_non_null(strstr(s, "Breaks first: <b>tag="));
    assert_non_null(strstr(s, "send-reasoning=keep</b>, at turn "));
    assert_int_equal(golden_count(s, ">never</td><td class=\"n\">2</td>"), 2);
    /* two charts, a series per cell in each: recall at the three question
     * turns (4, 6, 8), reasoning at every one of the 8 turns */
    assert_int_equal(golden_count(s, "<figure class=\"chart\">"), 2);
    size_t pts[16];
    assert_int_equal(polyline_points(s, pts, 16), 8);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pts[i], 3);
        assert_int_equal(pts[4 + i], 8);
    }
    /* styles differ per cell: the four first marker shapes */
    assert_non_null(strstr(s, "<polyline class=\"s1\""));
    assert_non_null(strstr(s, "<polyline class=\"s4\""));
    /* McNemar of the three other cells against the first-breaking one */
    assert_non_null(strstr(s, "McNemar exact"));
    assert_true(golden_check("tests/report/golden/live.html", s));
    /* `fidelity report` draws the same section from the store */
    char *t = stored_section(db, "probe-live");
    assert_string_equal(t, s);
    free(t);
    t = summary_block(page);
    assert_non_null(strstr(t, "<a href=\"#probe-live\">live sessions</a> "
                              "<span class=\"v FAIL\">FAIL</span> recall "
                              "breaks first in"));
    free(t);
    char *out = path("r.html");
    const char *one[] = {"report", "--db", db,  "--probe-live-run",
                         "1",      "-o",   out, NULL};
    assert_int_equal(run(one, NULL), 0);
    t = section(out, "probe-live");
    assert_string_equal(t, s);
    free(t);
    const char *nine[] = {"report", "--db", db,  "--probe-live-run",
                          "9",      "-o",   out, NULL};
    assert_int_equal(proc_run(nine, NULL, NULL, NULL, 30), 2);
    /* --no-probe leaves it out: with nothing else, nothing to report */
    const char *np[] = {"report", "--db", db, "--no-probe", "-o", out, NULL};
    assert_int_equal(proc_run(np, NULL, NULL, NULL, 30), 2);
    /* --no-store: the page still, no run stored */
    char *page2 = path("live2.html");
    const char *ns[] = {"probe",      "--endpoint", f,         "--live",
                        "--turns",    "4",          "--seeds", "1",
                        "--no-store", "--report",   page2,     NULL};
    assert_int_equal(run(ns, NULL), 0);
    char *u = section(page2, "probe-live");
    assert_non_null(strstr(u, "No cell breaks within 4 turns."));
    free(u);
    const char *two[] = {"report", "--db", db,  "--probe-live-run",
                         "2",      "-o",   out, NULL};
    assert_int_equal(proc_run(two, NULL, NULL, NULL, 30), 2);
    /* with a drift run beside it, --no-probe draws drift alone */
    char *h = (char *)sim(1, NULL);
    const char *dr[] = {"drift", "--golden",    h,    "--candidate",
                        f,       "--sequences", "1",  "--max-context",
                        "512",   "--bootstrap", "20", "--decode-tokens",
                        "4",     "--db",        db,   NULL};
    int rc = run(dr, NULL);
    assert_true(rc == 0 || rc == 1);
    assert_int_equal(run(np, NULL), 0);
    html = golden_read(out, NULL);
    assert_non_null(strstr(html, "<section id=\"drift\">"));
    assert_null(strstr(html, "<section id=\"probe-live\">"));
    free(html);
    free(h);
    free(page2);
    free(out);
    free(s);
    free(db);
    free(page);
    free(f);
}

static void test_report_errors(void **state)
{
    (void)state;
    char *missing = path("missing.db"), *out = path("x.html");
    const char *a1[] = {"report", "--db", missing, "-o", out, NULL};
    assert_int_equal(proc_run(a1, NULL, NULL, NULL, 30), 2);
    /* a store with nothing in it: nothing to report */
    char *empty = path("empty.db");
    FILE *f = fopen(empty, "w");
    assert_non_null(f);
    fclose(f);
    const char *a2[] = {"report", "--db", empty, "-o", out, NULL};
    assert_int_equal(proc_run(a2, NULL, NULL, NULL, 30), 2);
    const char *a3[] = {"report", "--db", empty, "--probe-run",
                        "7",      "-o",   out,   NULL};
    assert_int_equal(proc_run(a3, NULL, NULL, NULL, 30), 2);
    const char *a4[] = {"report", "--probe-run", "x", NULL};
    assert_int_equal(proc_run(a4, NULL, NULL, NULL, 30), 2);
    const char *a5[] = {"report", "--bogus", NULL};
    assert_int_equal(proc_run(a5, NULL, NULL, NULL, 30), 2);
    assert_true(access(out, F_OK) != 0);
    /* a bisect run (bisect --json's file) needs no store; with a store it
     * joins its runs on one page */
    const char *b1[] = {"report", "--db", missing, "--bisect",
                        FIXTURE,  "-o",   out,     NULL};
    assert_int_equal(run(b1, NULL), 0);
    char *s = section(out, "bisect");
    assert_true(golden_check("tests/report/golden/bisect.html", s));
    free(s);
    const char *b2[] = {"report", "--db", missing, "--bisect",
                        missing,  "-o",   out,     NULL};
    assert_int_equal(proc_run(b2, NULL, NULL, NULL, 30), 2);
    const char *b3[] = {"report",
                        "--db",
                        missing,
                        "--bisect",
                        "tests/report/golden/../../bisect/golden/sim.json",
                        "-o",
                        out,
                        NULL};
    assert_int_equal(proc_run(b3, NULL, NULL, NULL, 30), 2); /* not bisect's */
    const char *b4[] = {"report",   "--db",  missing, "--probe-run", "1",
                        "--bisect", FIXTURE, "-o",    out,           NULL};
    assert_int_equal(proc_run(b4, NULL, NULL, NULL, 30), 2); /* no store */
    free(missing);
    free(empty);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_probe_section_golden, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_drift_section_golden, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_audit_section_golden, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_live_section_golden, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_report_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
