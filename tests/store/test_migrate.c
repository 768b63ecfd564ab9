/*
 * A store written by the previous layout (tests/fixtures/store-v1: one
 * intake frontier in the table `intake`, no version recorded) opens with
 * this fidelity: its frontier moves to intake_log, the version becomes
 * STORE_SCHEMA_VERSION, and sessions, show, report read what it holds. A
 * store that records a newer version is refused with both named. Each
 * test runs on the SQLite file and on the same store in PostgreSQL
 * (store-pg.sql, loaded into a database of tests/util/pgsrv.c), and the
 * two migrated stores read back the same.
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
#include "drift/dstore.h"
#include "probe/probe.h"
#include "store/intake.h"
#include "store/runs.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/need.h"
#include "util/pgsrv.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/sh.h"
#include "util/xchg_build.h"

#define FIXTURE "tests/fixtures/store-v1/store.db"
#define FIXTURE_PG "tests/fixtures/store-v1/store-pg.sql"
/* the frontier the old store's intake row holds */
#define OLD_EPOCH (-6086094064350880584LL)
#define OLD_OFF 7094

struct fx {
    char *dir, *db; /* db: a copy of the file, or a database's URL */
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

/* The SQLite file's store loaded into a fresh PostgreSQL database with
 * psql (the server's own, else the one on PATH). */
static int fx_setup_pg(void **state)
{
    char url[256];
    struct buf out = BUF_INIT, err = BUF_INIT;
    pgsrv_db(url, sizeof(url));
    struct fx *f = xcalloc(1, sizeof(*f));
    f->dir = rec_tmpdir();
    f->db = xstrdup(url);
    *state = f;
    char *cmd = xasprintf("psql=\"$(pg_config --bindir 2>/dev/null)/psql\";"
                          " [ -x \"$psql\" ] || psql=psql;"
                          " \"$psql\" -X -q -v ON_ERROR_STOP=1 -d '%s' -f '%s'",
                          url, FIXTURE_PG);
    int rc = sh_run(cmd, &out, &err, 60);
    free(cmd);
    if (rc == 127)
        need_missing("psql (the postgresql-client package)");
    if (rc)
        fprintf(stderr, "loading %s: %s%s\n", FIXTURE_PG, buf_str(&out),
                buf_str(&err));
    buf_release(&out);
    buf_release(&err);
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
    /* a new exchange takes the next id (on PostgreSQL, from a sequence
     * that the old rows' ids had moved) */
    struct xchg x;
    xb_init(&x, 0, "after-migration",
            xb_body("m", json_pack("[{s:s, s:s}]", "role", "user", "content",
                                   "hello again")));
    if (xchg_put(db, &x, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(x.id, 6);
    xb_release(&x);
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

/* What a command prints as JSON about the store, without the store's
 * name (a file, a URL). */
static char *json_of(const char *const argv[])
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc && rc != 1)
        fail_msg("%s exited %d: %s", argv[0], rc, buf_str(&err));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    if (!j)
        fail_msg("%s printed no JSON: %s", argv[0], buf_str(&out));
    json_object_del(j, "db");
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
    return s;
}

static char *run_of(struct db *db,
                    int (*get)(struct db *, int64_t, struct store_run *,
                               struct diag *))
{
    struct store_run r;
    struct diag d = {{0}};
    if (get(db, 0, &r, &d))
        fail_msg("%s", d.msg);
    char *j = json_dumps(r.summary, JSON_COMPACT | JSON_SORT_KEYS);
    char *s =
        xasprintf("%lld %lld %s", (long long)r.id, (long long)r.created, j);
    free(j);
    json_decref(r.summary);
    return s;
}

/* drift's buckets, every column, each double to the bit */
static char *buckets_of(struct db *db)
{
    struct db_stmt *st = NULL;
    struct buf b = BUF_INIT;
    assert_int_equal(db_prepare(db,
                                "SELECT run_id, pos_from, pos_to, count,"
                                " kl_mean, kl_p999, kl_max, excess_kl_mean,"
                                " top1_agreement, dp_rms, verdict"
                                " FROM drift_bucket ORDER BY run_id, pos_from",
                                &st),
                     DB_OK);
    while (db_step(st) == DB_ROW) {
        for (int i = 0; i < 4; i++)
            buf_printf(&b, "%lld ", (long long)db_column_int64(st, i));
        for (int i = 4; i < 10; i++)
            buf_printf(&b, "%a ", db_column_double(st, i));
        buf_printf(&b, "%s\n", db_column_text(st, 10));
    }
    db_finalize(st);
    return buf_detach(&b, NULL);
}

/* The store migrated in PostgreSQL reads back as the file migrated in
 * SQLite: the session listing, the session turn by turn, audit's
 * findings, the probe run, the drift run and its buckets. */
static void test_pg_reads_as_sqlite(void **state)
{
    struct fx *f = *state;
    char *lite = xasprintf("%s/store.db", f->dir);
    char *cmd = xasprintf("cp '%s' '%s'", FIXTURE, lite);
    assert_int_equal(sh_run(cmd, NULL, NULL, 10), 0);
    free(cmd);
    const char *dbs[2] = {lite, f->db};
    char *got[2][6];
    for (int k = 0; k < 2; k++) {
        const char *ls[] = {"sessions", "--db", dbs[k], "--json", "-", NULL};
        const char *show[] = {
            "show", "example-walkthrough", "--db", dbs[k], "--json", "-", NULL};
        const char *au[] = {"audit", "--db", dbs[k], "--json", "-", NULL};
        got[k][0] = json_of(ls);
        got[k][1] = json_of(show);
        got[k][2] = json_of(au);
        struct db *db = NULL;
        struct diag d = {{0}};
        assert_int_equal(store_open(dbs[k], &db, &d), 0);
        got[k][3] = run_of(db, probe_store_run_get);
        got[k][4] = run_of(db, drift_store_run_get);
        got[k][5] = buckets_of(db);
        store_close(db);
    }
    const char *what[] = {"sessions",  "show",      "audit",
                          "probe run", "drift run", "drift buckets"};
    for (int i = 0; i < 6; i++) {
        if (strcmp(got[0][i], got[1][i]))
            fail_msg("%s differ:\nsqlite: %s\npostgresql: %s", what[i],
                     got[0][i], got[1][i]);
        free(got[0][i]);
        free(got[1][i]);
    }
    free(lite);
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
        cmocka_unit_test_setup_teardown(test_old_layout_migrates, fx_setup_pg,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_old_store_reads, fx_setup_pg,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_newer_layout_refused, fx_setup_pg,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_pg_reads_as_sqlite, fx_setup_pg,
                                        fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
