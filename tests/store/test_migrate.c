/*
 * A store written by the previous layout (tests/fixtures/store-v1: one
 * intake frontier in the table `intake`, no version recorded) opens with
 * this fidelity: its frontier moves to intake_log, the version becomes
 * STORE_SCHEMA_VERSION, and sessions, show, report read what it holds. A
 * store that records a newer version is refused with both named.
 */
#include <errno.h>
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

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/intake.h"
#include "store/store.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/sh.h"

#define FIXTURE "tests/fixtures/store-v1/store.db"
/* the frontier the old store's intake row holds */
#define OLD_EPOCH (-6086094064350880584LL)
#define OLD_OFF 7094

struct fx {
    char *dir, *db;
};

static int fx_setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    f->dir = rec_tmpdir();
    f->db = xasprintf("%s/store.db", f->dir);
    char *cmd = xasprintf("cp '%s' '%s'", FIXTURE, f->db);
    int rc = sh_run(cmd, NULL, NULL, 10);
    free(cmd);
    *state = f;
    return rc;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    char *cmd = xasprintf("rm -rf '%s'", f->dir);
    sh_run(cmd, NULL, NULL, 10);
    free(cmd);
    free(f->db);
    free(f->dir);
    free(f);
    return 0;
}

static int64_t one_int(struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db, sql, &st), DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    int64_t v = db_column_int64(st, 0);
    db_finalize(st);
    return v;
}

static void test_old_layout_migrates(void **state)
{
    struct fx *f = *state;
    struct diag d = {{0}};
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_false(db_has_table(db, "intake"));
    assert_int_equal(one_int(db, "SELECT value FROM store_meta"
                                 " WHERE key = 'schema'"),
                     STORE_SCHEMA_VERSION);
    uint64_t e, o;
    assert_int_equal(intake_frontier(db, (uint64_t)OLD_EPOCH, &e, &o, &d), 0);
    assert_true(e == (uint64_t)OLD_EPOCH && o == OLD_OFF);
    assert_int_equal(one_int(db, "SELECT count(*) FROM xchg"), 5);
    store_close(db);
}

static void test_old_store_reads(void **state)
{
    struct fx *f = *state;
    struct buf out = BUF_INIT;
    const char *ls[] = {"sessions", "--db", f->db, "--json", "-", NULL};
    assert_int_equal(proc_run(ls, NULL, &out, NULL, 60), 0);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    json_t *ss = json_object_get(j, "sessions");
    assert_int_equal(json_array_size(ss), 1);
    json_t *s0 = json_array_get(ss, 0);
    assert_string_equal(json_string_value(json_object_get(s0, "session")),
                        "example-walkthrough");
    assert_int_equal(json_integer_value(json_object_get(s0, "exchanges")), 5);
    json_decref(j);

    buf_reset(&out);
    const char *show[] = {
        "show", "example-walkthrough", "--db", f->db, "--json", "-", NULL};
    assert_int_equal(proc_run(show, NULL, &out, NULL, 60), 0);
    j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "turns")), 5);
    json_decref(j);

    char *html = xasprintf("%s/report.html", f->dir);
    const char *rep[] = {"report", "--db", f->db, "-o", html, NULL};
    assert_int_equal(proc_run(rep, NULL, NULL, NULL, 60), 0);
    buf_reset(&out);
    char *cat = xasprintf("cat '%s'", html);
    assert_int_equal(sh_run(cat, &out, NULL, 10), 0);
    /* the probe run's heatmap and the drift run's verdict are drawn */
    assert_non_null(strstr(buf_str(&out), "needle"));
    assert_non_null(strstr(buf_str(&out), "FAIL"));
    free(cat);
    free(html);
    buf_release(&out);
}

static void test_newer_layout_refused(void **state)
{
    struct fx *f = *state;
    struct diag d = {{0}};
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(store_exec(db,
                                "UPDATE store_meta SET value = 99"
                                " WHERE key = 'schema'",
                                &d),
                     0);
    store_close(db);
    assert_int_equal(store_open(f->db, &db, &d), -EPROTO);
    assert_null(db);
    assert_non_null(strstr(d.msg, "version 99"));
    struct buf err = BUF_INIT;
    const char *ls[] = {"sessions", "--db", f->db, NULL};
    assert_int_not_equal(proc_run(ls, NULL, NULL, &err, 60), 0);
    assert_non_null(strstr(buf_str(&err), "layout version 99"));
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_old_layout_migrates, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_old_store_reads, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_newer_layout_refused, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
