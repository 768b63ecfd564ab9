/*
 * Tests for src/report/load.c on stores written here with probe's and
 * drift's own store functions (probe --live's too): the latest run by
 * default, a run by id,
 * no such run, tables that do not exist, and a probe run stored before the
 * summary held the whole document (drawn without maps, not refused).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "drift/dstore.h"
#include "probe/live.h"
#include "probe/probe.h"
#include "report/report.h"
#include "util/tmpdb.h"

static void test_no_tables_is_enoent(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d;
    json_t *doc = NULL;
    char *org = NULL;
    tmpdb_open(&t, "report-load");
    assert_int_equal(report_load_probe(t.db, 0, &doc, &org, &d), -ENOENT);
    assert_int_equal(report_load_drift(t.db, 0, &doc, &org, &d), -ENOENT);
    assert_int_equal(report_load_live(t.db, 0, &doc, &org, &d), -ENOENT);
    assert_null(doc);
    tmpdb_close(&t);
}

static void test_probe_latest_and_by_id(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d;
    long long id1, id2;
    tmpdb_open(&t, "report-load");
    assert_int_equal(probe_store_init(t.db, &d), 0);
    json_t *a = json_pack("{s:s, s:{s:i}}", "format", "fidelity-probe/1",
                          "results", "cases", 1);
    json_t *b = json_pack("{s:s, s:{s:i}}", "format", "fidelity-probe/1",
                          "results", "cases", 2);
    assert_int_equal(probe_store_run(t.db, "fp1", NULL, a, &id1, &d), 0);
    assert_int_equal(probe_store_run(t.db, "fp1", NULL, b, &id2, &d), 0);
    json_t *doc;
    char *org;
    assert_int_equal(report_load_probe(t.db, 0, &doc, &org, &d), 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(doc, "results"), "cases")),
                     2);
    char *want = NULL;
    assert_true(asprintf(&want, "probe run %lld, stored ", id2) > 0);
    assert_memory_equal(org, want, strlen(want));
    free(want);
    json_decref(doc);
    free(org);
    assert_int_equal(report_load_probe(t.db, id1, &doc, &org, &d), 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(doc, "results"), "cases")),
                     1);
    json_decref(doc);
    free(org);
    assert_int_equal(report_load_probe(t.db, 99, &doc, &org, &d), -ENOENT);
    assert_non_null(strstr(d.msg, "99"));
    json_decref(a);
    json_decref(b);
    tmpdb_close(&t);
}

/* Before the whole document was kept, summary was the endpoint's side
 * without cells: it is wrapped, and the section says there are no maps. */
static void test_probe_old_summary_is_wrapped(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d;
    long long id;
    tmpdb_open(&t, "report-load");
    assert_int_equal(probe_store_init(t.db, &d), 0);
    json_t *side = json_pack("{s:i, s:i, s:f, s:[]}", "cases", 4, "passed", 3,
                             "pass_rate", 0.75, "kinds");
    assert_int_equal(probe_store_run(t.db, "fp", NULL, side, &id, &d), 0);
    json_t *doc;
    char *org;
    assert_int_equal(report_load_probe(t.db, id, &doc, &org, &d), 0);
    assert_string_equal(json_string_value(json_object_get(doc, "format")),
                        "fidelity-probe/1");
    struct buf b = BUF_INIT;
    assert_int_equal(report_probe_section(doc, &b), 0);
    assert_non_null(strstr(buf_str(&b), "stored before cells were kept"));
    assert_non_null(strstr(buf_str(&b), "75.0%"));
    buf_release(&b);
    json_decref(doc);
    json_decref(side);
    free(org);
    tmpdb_close(&t);
}

static void test_drift_run(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d;
    int64_t id;
    tmpdb_open(&t, "report-load");
    json_t *sum =
        json_pack("{s:s, s:{s:s}, s:{s:s}, s:i, s:i, s:s, s:[]}", "schema",
                  "fidelity.drift/1", "golden", "url", "http://a", "candidate",
                  "url", "http://b", "sequences", 2, "positions", 10, "verdict",
                  "PASS", "buckets");
    assert_int_equal(drift_store_save(t.db, sum, &id, &d), 0);
    json_t *doc;
    char *org;
    assert_int_equal(report_load_drift(t.db, 0, &doc, &org, &d), 0);
    assert_string_equal(json_string_value(json_object_get(doc, "verdict")),
                        "PASS");
    assert_non_null(strstr(org, "drift run "));
    json_decref(doc);
    free(org);
    assert_int_equal(report_load_drift(t.db, id + 1, &doc, &org, &d), -ENOENT);
    json_decref(sum);
    tmpdb_close(&t);
}

/* probe --live runs: their own table, the latest by default, by id, and
 * scripted runs in probe_run neither hide them nor are taken for them. */
static void test_live_run(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d;
    long long id1, id2, pid;
    tmpdb_open(&t, "report-load");
    assert_int_equal(probe_store_init(t.db, &d), 0);
    assert_int_equal(probe_live_store_init(t.db, &d), 0);
    json_t *doc = NULL;
    char *org = NULL;
    assert_int_equal(report_load_live(t.db, 0, &doc, &org, &d), -ENOENT);
    assert_non_null(strstr(d.msg, "no probe_live_run in the store"));
    json_t *a =
        json_pack("{s:s, s:i}", "format", "fidelity-probe-live/1", "turns", 8);
    json_t *b =
        json_pack("{s:s, s:i}", "format", "fidelity-probe-live/1", "turns", 12);
    json_t *p = json_pack("{s:s, s:{s:i}}", "format", "fidelity-probe/1",
                          "results", "cases", 1);
    assert_int_equal(probe_live_store_run(t.db, "fp", a, &id1, &d), 0);
    assert_int_equal(probe_live_store_run(t.db, "fp", b, &id2, &d), 0);
    assert_int_equal(probe_store_run(t.db, "fp", NULL, p, &pid, &d), 0);
    assert_int_equal(report_load_live(t.db, 0, &doc, &org, &d), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "turns")), 12);
    char *want = NULL;
    assert_true(asprintf(&want, "probe --live run %lld, stored ", id2) > 0);
    assert_memory_equal(org, want, strlen(want));
    free(want);
    json_decref(doc);
    free(org);
    assert_int_equal(report_load_live(t.db, id1, &doc, &org, &d), 0);
    assert_int_equal(json_integer_value(json_object_get(doc, "turns")), 8);
    json_decref(doc);
    free(org);
    assert_int_equal(report_load_live(t.db, id2 + 5, &doc, &org, &d), -ENOENT);
    /* the scripted run is the latest probe run */
    assert_int_equal(report_load_probe(t.db, 0, &doc, &org, &d), 0);
    assert_string_equal(json_string_value(json_object_get(doc, "format")),
                        "fidelity-probe/1");
    json_decref(doc);
    free(org);
    json_decref(a);
    json_decref(b);
    json_decref(p);
    tmpdb_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_tables_is_enoent),
        cmocka_unit_test(test_probe_latest_and_by_id),
        cmocka_unit_test(test_probe_old_summary_is_wrapped),
        cmocka_unit_test(test_drift_run),
        cmocka_unit_test(test_live_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
