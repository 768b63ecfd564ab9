/*
 * Tests for the store interface (store/db.h): one contract, the same test
 * bodies run on both backends, a SQLite file in a temporary directory and
 * a database of a PostgreSQL server of this test's own (util/pgsrv.h).
 * What the code relies on: each column type read back as bound (64-bit
 * integers, doubles to the last bit, blobs with NUL bytes, NULLs),
 * INSERT OR REPLACE and OR IGNORE, the id an INSERT gave, the rows a
 * statement changed, the catalog reads, a failed statement inside a
 * transaction undoing only itself, persistent statements reused, threads
 * sharing a connection, a PostgreSQL password never in an error, and a
 * PostgreSQL connection over TCP that finds a silent peer gone.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"
#include "util/pgsrv.h"

struct fx {
    bool pg;
    char dir[64];
    char target[256];
    struct db *db;
};

static int open_fx(void **state, bool pg)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct diag d = {{0}};
    f->pg = pg;
    if (pg) {
        pgsrv_db(f->target, sizeof(f->target));
    } else {
        snprintf(f->dir, sizeof(f->dir), "/tmp/fidelity-db-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->target, sizeof(f->target), "%s/t.db", f->dir);
    }
    if (store_open(f->target, &f->db, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(db_backend(f->db), pg ? DB_POSTGRES : DB_SQLITE);
    *state = f;
    return 0;
}

static int setup_lite(void **state)
{
    return open_fx(state, false);
}

static int setup_pg(void **state)
{
    return open_fx(state, true);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (!f)
        return 0;
    store_close(f->db);
    if (*f->dir) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
        assert_int_equal(system(cmd), 0);
    }
    free(f);
    return 0;
}

static void ok_exec(struct db *db, const char *sql)
{
    char *err = NULL;
    int rc = db_exec(db, sql, &err);
    if (rc != DB_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
}

static struct db_stmt *prep(struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    if (db_prepare(db, sql, &st) != DB_OK)
        fail_msg("%s: %s", sql, db_errmsg(db));
    return st;
}

static int64_t one_int(struct db *db, const char *sql)
{
    struct db_stmt *st = prep(db, sql);
    assert_int_equal(db_step(st), DB_ROW);
    int64_t v = db_column_int64(st, 0);
    db_finalize(st);
    return v;
}

/* ---- the tests, each on both backends ---- */

static void t_types(struct db *db)
{
    static const unsigned char blob[] = {'a', 0, 'b', 0, 0xff, 0, 0x80};
    ok_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, i INTEGER, r REAL,"
                " s TEXT, b BLOB, n INTEGER)");
    struct db_stmt *st = prep(db, "INSERT INTO t(i, r, s, b, n)"
                                  " VALUES (?, ?, ?, ?, ?)");
    const int64_t ints[] = {INT64_MAX, INT64_MIN, 0, -1, 1LL << 53};
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
        assert_int_equal(db_bind_int64(st, 1, ints[k]), DB_OK);
        assert_int_equal(db_bind_double(st, 2, 0.1 * (double)k), DB_OK);
        assert_int_equal(
            db_bind_text(st, 3, "h\xc3\xa9llo, 'w\"orld", -1, DB_STATIC),
            DB_OK);
        assert_int_equal(
            db_bind_blob(st, 4, blob, (int)sizeof(blob), DB_TRANSIENT), DB_OK);
        assert_int_equal(db_bind_null(st, 5), DB_OK);
        assert_int_equal(db_step(st), DB_DONE);
        assert_int_equal(db_reset(st), DB_OK);
    }
    db_finalize(st);
    st = prep(db, "SELECT id, i, r, s, b, n FROM t ORDER BY id");
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
        assert_int_equal(db_step(st), DB_ROW);
        assert_int_equal(db_column_type(st, 0), DB_INTEGER);
        assert_int_equal(db_column_int64(st, 0), (int64_t)k + 1);
        assert_int_equal(db_column_type(st, 1), DB_INTEGER);
        assert_true(db_column_int64(st, 1) == ints[k]);
        assert_int_equal(db_column_type(st, 2), DB_FLOAT);
        assert_true(db_column_double(st, 2) == 0.1 * (double)k);
        assert_int_equal(db_column_type(st, 3), DB_TEXT);
        assert_string_equal((const char *)db_column_text(st, 3),
                            "h\xc3\xa9llo, 'w\"orld");
        assert_int_equal(db_column_bytes(st, 3), 15);
        assert_int_equal(db_column_type(st, 4), DB_BLOB);
        assert_int_equal(db_column_bytes(st, 4), (int)sizeof(blob));
        assert_memory_equal(db_column_blob(st, 4), blob, sizeof(blob));
        assert_int_equal(db_column_type(st, 5), DB_NULL);
        assert_null(db_column_text(st, 5));
        assert_null(db_column_blob(st, 5));
        assert_int_equal(db_column_bytes(st, 5), 0);
        assert_int_equal(db_column_int64(st, 5), 0);
    }
    assert_int_equal(db_step(st), DB_DONE);
    db_finalize(st);
}

static void t_doubles(struct db *db)
{
    const double v[] = {0.1 + 0.2, 1.0 / 3.0, DBL_MAX,   -DBL_MAX,     DBL_MIN,
                        5e-324,    1e300,     -2.5e-310, 123456789.125};
    ok_exec(db, "CREATE TABLE d(k INTEGER, x REAL)");
    struct db_stmt *st = prep(db, "INSERT INTO d VALUES (?, ?)");
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        db_bind_int64(st, 1, (int64_t)k);
        db_bind_double(st, 2, v[k]);
        assert_int_equal(db_step(st), DB_DONE);
        db_reset(st);
    }
    db_finalize(st);
    st = prep(db, "SELECT x FROM d ORDER BY k");
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) {
        assert_int_equal(db_step(st), DB_ROW);
        double got = db_column_double(st, 0);
        assert_memory_equal(&got, &v[k], sizeof(got));
    }
    db_finalize(st);
    /* a NaN is stored as NULL (SQLite's rule) */
    st = prep(db, "INSERT INTO d VALUES (100, ?)");
    db_bind_double(st, 1, (double)NAN);
    assert_int_equal(db_step(st), DB_DONE);
    db_finalize(st);
    assert_int_equal(one_int(db, "SELECT count(*) FROM d WHERE x IS NULL"), 1);
}

static void t_blobs_and_text(struct db *db)
{
    ok_exec(db, "CREATE TABLE b(k INTEGER PRIMARY KEY, z BLOB, s TEXT)");
    unsigned char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (unsigned char)(i * 7);
    struct db_stmt *st = prep(db, "INSERT INTO b(k, z, s) VALUES (?1, ?2, ?3)");
    db_bind_int(st, 1, 1);
    unsigned char *heap = malloc(sizeof(big));
    memcpy(heap, big, sizeof(big));
    db_bind_blob(st, 2, heap, (int)sizeof(big), free); /* freed by the db */
    db_bind_text(st, 3, "abcdef", 3, DB_STATIC);       /* "abc" */
    assert_int_equal(db_step(st), DB_DONE);
    db_reset(st);
    db_bind_int(st, 1, 2);
    db_bind_blob(st, 2, "", 0, DB_STATIC);    /* empty, not NULL */
    db_bind_text(st, 3, NULL, -1, DB_STATIC); /* NULL */
    assert_int_equal(db_step(st), DB_DONE);
    db_finalize(st);

    st = prep(db, "SELECT z, s, length(z) FROM b ORDER BY k");
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_bytes(st, 0), (int)sizeof(big));
    assert_memory_equal(db_column_blob(st, 0), big, sizeof(big));
    assert_string_equal((const char *)db_column_text(st, 1), "abc");
    assert_int_equal(db_column_int64(st, 2), (int64_t)sizeof(big));
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_type(st, 0), DB_BLOB);
    assert_int_equal(db_column_bytes(st, 0), 0);
    assert_int_equal(db_column_type(st, 1), DB_NULL);
    assert_int_equal(db_step(st), DB_DONE);
    db_finalize(st);
    /* a parameter used twice by number */
    st = prep(db, "SELECT ?1 + ?1, ?2");
    db_bind_int64(st, 1, 21);
    db_bind_text(st, 2, "x", -1, DB_TRANSIENT);
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_int64(st, 0), 42);
    assert_string_equal((const char *)db_column_text(st, 1), "x");
    db_finalize(st);
}

static void t_upserts(struct db *db)
{
    ok_exec(db, "CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER, w TEXT)");
    ok_exec(db, "INSERT INTO kv VALUES ('a', 1, 'x')");
    struct db_stmt *st = prep(db, "INSERT OR IGNORE INTO kv VALUES (?, ?, ?)");
    db_bind_text(st, 1, "a", -1, DB_STATIC);
    db_bind_int(st, 2, 2);
    db_bind_text(st, 3, "y", -1, DB_STATIC);
    assert_int_equal(db_step(st), DB_DONE);
    assert_int_equal(db_changes(db), 0);
    db_reset(st);
    db_bind_text(st, 1, "b", -1, DB_STATIC);
    assert_int_equal(db_step(st), DB_DONE);
    assert_int_equal(db_changes(db), 1);
    db_finalize(st);
    assert_int_equal(one_int(db, "SELECT v FROM kv WHERE k = 'a'"), 1);
    assert_int_equal(one_int(db, "SELECT v FROM kv WHERE k = 'b'"), 2);

    st = prep(db, "INSERT OR REPLACE INTO kv VALUES (?, ?, ?)");
    db_bind_text(st, 1, "a", -1, DB_STATIC);
    db_bind_int(st, 2, 3);
    db_bind_null(st, 3);
    assert_int_equal(db_step(st), DB_DONE);
    assert_int_equal(db_changes(db), 1);
    db_finalize(st);
    assert_int_equal(one_int(db, "SELECT v FROM kv WHERE k = 'a'"), 3);
    assert_int_equal(one_int(db, "SELECT count(*) FROM kv WHERE w IS NULL"), 1);
    /* a column left out is its default, as a replaced row's is */
    ok_exec(db, "INSERT OR REPLACE INTO kv (k, v) VALUES ('b', 5)");
    assert_int_equal(one_int(db, "SELECT count(*) FROM kv WHERE w IS NULL"), 2);
    assert_int_equal(one_int(db, "SELECT count(*) FROM kv"), 2);

    /* an integer primary key given explicitly, and a single-row table */
    ok_exec(db, "CREATE TABLE one(id INTEGER PRIMARY KEY CHECK (id = 1),"
                " a INTEGER NOT NULL, b INTEGER NOT NULL)");
    st = prep(db, "INSERT OR REPLACE INTO one (id, a, b) VALUES (1, ?, ?)");
    for (int i = 0; i < 3; i++) {
        db_bind_int64(st, 1, i);
        db_bind_int64(st, 2, (int64_t)i << 40);
        assert_int_equal(db_step(st), DB_DONE);
        db_reset(st);
    }
    db_finalize(st);
    assert_int_equal(one_int(db, "SELECT count(*) FROM one"), 1);
    assert_int_equal(one_int(db, "SELECT b FROM one WHERE id = 1"), 2LL << 40);
    struct db_stmt *bad = NULL;
    int rc = db_prepare(db, "INSERT INTO one VALUES (2, 0, 0)", &bad);
    if (rc == DB_OK) /* PostgreSQL reports errors at the first step */
        rc = db_step(bad);
    assert_int_equal(rc, DB_CONSTRAINT);
    db_finalize(bad);
}

static void t_ids_and_changes(struct db *db)
{
    ok_exec(db, "CREATE TABLE r(id INTEGER PRIMARY KEY, x TEXT)");
    struct db_stmt *st = prep(db, "INSERT INTO r(x) VALUES (?)");
    for (int i = 1; i <= 5; i++) {
        db_bind_text(st, 1, i % 2 ? "odd" : "even", -1, DB_STATIC);
        assert_int_equal(db_step(st), DB_DONE);
        assert_int_equal(db_last_insert_rowid(db), i);
        assert_int_equal(db_changes(db), 1);
        db_reset(st);
    }
    db_finalize(st);
    /* explicit 64-bit keys, as content hashes are stored */
    ok_exec(db, "CREATE TABLE h(h INTEGER PRIMARY KEY, v INTEGER)");
    st = prep(db, "INSERT INTO h(h, v) VALUES (?, ?)");
    db_bind_int64(st, 1, INT64_MIN + 7);
    db_bind_int64(st, 2, 1);
    assert_int_equal(db_step(st), DB_DONE);
    assert_true(db_last_insert_rowid(db) == INT64_MIN + 7);
    db_finalize(st);
    assert_true(one_int(db, "SELECT h FROM h") == INT64_MIN + 7);

    ok_exec(db, "UPDATE r SET x = 'n' WHERE x = 'odd'");
    assert_int_equal(db_changes(db), 3);
    st = prep(db, "DELETE FROM r WHERE id <= ?");
    db_bind_int(st, 1, 2);
    assert_int_equal(db_step(st), DB_DONE);
    assert_int_equal(db_changes(db), 2);
    db_finalize(st);
    /* a select does not change the count */
    assert_int_equal(one_int(db, "SELECT count(*) FROM r"), 3);
    assert_int_equal(db_changes(db), 2);
}

static void t_catalog(struct db *db)
{
    assert_false(db_has_table(db, "cat"));
    assert_false(db_has_column(db, "cat", "a"));
    ok_exec(db, "CREATE TABLE cat(a INTEGER, b TEXT)");
    assert_true(db_has_table(db, "cat"));
    assert_true(db_has_column(db, "cat", "b"));
    assert_false(db_has_column(db, "cat", "c"));
    ok_exec(db, "ALTER TABLE cat ADD COLUMN c INTEGER NOT NULL DEFAULT 0");
    assert_true(db_has_column(db, "cat", "c"));
    assert_false(db_has_table(db, "nope"));
    assert_false(db_is_readonly(db));
    /* inside a transaction they spoil nothing */
    ok_exec(db, "BEGIN");
    ok_exec(db, "INSERT INTO cat(a) VALUES (1)");
    assert_false(db_has_table(db, "nope"));
    assert_false(db_has_column(db, "cat", "nope"));
    ok_exec(db, "COMMIT");
    assert_int_equal(one_int(db, "SELECT count(*) FROM cat"), 1);
}

static void t_failure_in_transaction(struct db *db)
{
    ok_exec(db, "CREATE TABLE u(k INTEGER PRIMARY KEY, v TEXT NOT NULL)");
    ok_exec(db, "BEGIN IMMEDIATE");
    ok_exec(db, "INSERT INTO u VALUES (1, 'a')");
    /* a constraint, through a statement */
    struct db_stmt *st = prep(db, "INSERT INTO u VALUES (?, ?)");
    db_bind_int(st, 1, 1);
    db_bind_text(st, 2, "dup", -1, DB_STATIC);
    assert_int_equal(db_step(st), DB_CONSTRAINT);
    assert_non_null(strstr(db_errmsg(db), "u")); /* says something */
    db_finalize(st);
    /* and through exec: NOT NULL */
    char *err = NULL;
    assert_int_not_equal(db_exec(db, "INSERT INTO u VALUES (2, NULL)", &err),
                         DB_OK);
    assert_non_null(err);
    free(err);
    /* a statement that cannot run at all */
    st = NULL;
    int rc = db_prepare(db, "SELECT nosuch FROM u", &st);
    if (rc == DB_OK)
        rc = db_step(st);
    assert_true(rc != DB_OK && rc != DB_ROW && rc != DB_DONE);
    db_finalize(st);
    /* refusals, not a server gone */
    assert_false(db_is_lost(db));
    /* the transaction goes on; what a statement did is told as outside
     * one */
    ok_exec(db, "INSERT INTO u VALUES (3, 'c')");
    assert_int_equal(db_changes(db), 1);
    assert_int_equal(db_last_insert_rowid(db), 3);
    ok_exec(db, "UPDATE u SET v = v || 'x'");
    assert_int_equal(db_changes(db), 2);
    ok_exec(db, "COMMIT");
    assert_int_equal(one_int(db, "SELECT count(*) FROM u"), 2);
    assert_int_equal(one_int(db, "SELECT sum(k) FROM u"), 4);
    /* a rolled-back transaction leaves nothing */
    ok_exec(db, "BEGIN");
    ok_exec(db, "INSERT INTO u VALUES (4, 'd')");
    ok_exec(db, "ROLLBACK");
    assert_int_equal(one_int(db, "SELECT count(*) FROM u"), 2);
    /* the caller's own savepoints */
    ok_exec(db, "BEGIN");
    ok_exec(db, "SAVEPOINT one");
    ok_exec(db, "INSERT INTO u VALUES (5, 'e')");
    ok_exec(db, "ROLLBACK TO one");
    ok_exec(db, "RELEASE one");
    ok_exec(db, "INSERT INTO u VALUES (6, 'f')");
    ok_exec(db, "COMMIT");
    assert_int_equal(one_int(db, "SELECT sum(k) FROM u"), 10);
}

static void t_persistent(struct db *db)
{
    ok_exec(db, "CREATE TABLE p(id INTEGER PRIMARY KEY, a INTEGER, b BLOB)");
    struct db_stmt *ins = NULL, *sel = NULL;
    assert_int_equal(
        db_prepare_persistent(db, "INSERT INTO p(a, b) VALUES (?, ?)", &ins),
        DB_OK);
    assert_int_equal(
        db_prepare_persistent(db, "SELECT a, b FROM p WHERE id = ?", &sel),
        DB_OK);
    ok_exec(db, "BEGIN");
    for (int i = 1; i <= 200; i++) {
        /* the types of a parameter vary between uses: NULL, int, blob;
         * the first use binds NULLs, whose types the statement infers */
        if (i % 3 == 0 || i == 1)
            db_bind_null(ins, 1);
        else
            db_bind_int64(ins, 1, (int64_t)i * 1000003);
        unsigned char b[3] = {(unsigned char)i, 0, (unsigned char)(i >> 8)};
        if (i % 5 == 0 || i == 1)
            db_bind_null(ins, 2);
        else
            db_bind_blob(ins, 2, b, 3, DB_TRANSIENT);
        assert_int_equal(db_step(ins), DB_DONE);
        assert_int_equal(db_last_insert_rowid(db), i);
        db_reset(ins);
        db_bind_int64(sel, 1, i);
        assert_int_equal(db_step(sel), DB_ROW);
        if (i % 3 == 0 || i == 1)
            assert_int_equal(db_column_type(sel, 0), DB_NULL);
        else
            assert_int_equal(db_column_int64(sel, 0), (int64_t)i * 1000003);
        if (i % 5 == 0 || i == 1) {
            assert_int_equal(db_column_type(sel, 1), DB_NULL);
        } else {
            assert_int_equal(db_column_bytes(sel, 1), 3);
            assert_memory_equal(db_column_blob(sel, 1), b, 3);
        }
        assert_int_equal(db_step(sel), DB_DONE);
        db_reset(sel);
    }
    ok_exec(db, "COMMIT");
    db_finalize(ins);
    db_finalize(sel);
    assert_int_equal(one_int(db, "SELECT count(*) FROM p"), 200);
    assert_int_equal(one_int(db, "SELECT count(*) FROM p WHERE a IS NULL"), 67);
    /* a double where an integer was bound: kept as the double it is */
    assert_int_equal(
        db_prepare_persistent(db, "INSERT INTO p(a) VALUES (?)", &ins), DB_OK);
    db_bind_int(ins, 1, 7);
    assert_int_equal(db_step(ins), DB_DONE);
    db_reset(ins);
    db_bind_double(ins, 1, 7.0);
    assert_int_equal(db_step(ins), DB_DONE);
    db_finalize(ins);
    assert_int_equal(one_int(db, "SELECT count(*) FROM p WHERE a = 7"), 2);
}

/* Threads sharing one connection (probe's workers do): each call is
 * atomic, as in SQLite's serialized mode. */
struct thr {
    struct db *db;
    int id;
    int bad;
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    for (int i = 0; i < 100; i++) {
        struct db_stmt *st = NULL;
        if (db_prepare(t->db, "INSERT INTO th(t, i, s) VALUES (?, ?, ?)",
                       &st) != DB_OK) {
            t->bad++;
            continue;
        }
        char s[32];
        snprintf(s, sizeof(s), "%d/%d", t->id, i);
        db_bind_int(st, 1, t->id);
        db_bind_int(st, 2, i);
        db_bind_text(st, 3, s, -1, DB_TRANSIENT);
        if (db_step(st) != DB_DONE)
            t->bad++;
        db_finalize(st);
        st = NULL;
        if (db_prepare(t->db, "SELECT s FROM th WHERE t = ? AND i = ?", &st) !=
            DB_OK) {
            t->bad++;
            continue;
        }
        db_bind_int(st, 1, t->id);
        db_bind_int(st, 2, i);
        if (db_step(st) != DB_ROW ||
            strcmp((const char *)db_column_text(st, 0), s))
            t->bad++;
        db_finalize(st);
    }
    return NULL;
}

static void t_threads(struct db *db)
{
    ok_exec(db, "CREATE TABLE th(t INTEGER, i INTEGER, s TEXT)");
    pthread_t th[4];
    struct thr t[4];
    for (int k = 0; k < 4; k++) {
        t[k] = (struct thr){db, k, 0};
        assert_int_equal(pthread_create(&th[k], NULL, thr_main, &t[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(t[k].bad, 0);
    }
    assert_int_equal(one_int(db, "SELECT count(*) FROM th"), 400);
}

#define BOTH(fn)                                                               \
    static void lite_##fn(void **state)                                        \
    {                                                                          \
        fn(((struct fx *)*state)->db);                                         \
    }                                                                          \
    static void pg_##fn(void **state)                                          \
    {                                                                          \
        fn(((struct fx *)*state)->db);                                         \
    }

BOTH(t_types)
BOTH(t_doubles)
BOTH(t_blobs_and_text)
BOTH(t_upserts)
BOTH(t_ids_and_changes)
BOTH(t_catalog)
BOTH(t_failure_in_transaction)
BOTH(t_persistent)
BOTH(t_threads)

/* A read snapshot: a second connection between db_read_begin and
 * db_read_end sees the table as it was when its first read ran, while the
 * writer's commits go on unblocked; after db_read_end it sees them. */
static void t_snapshot(struct fx *f)
{
    struct db *rd = NULL;
    struct diag d = {{0}};
    ok_exec(f->db, "CREATE TABLE sn(x INTEGER)");
    ok_exec(f->db, "INSERT INTO sn VALUES (1)");
    if (store_open(f->target, &rd, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(db_read_begin(rd, NULL), DB_OK);
    assert_int_equal(one_int(rd, "SELECT count(*) FROM sn"), 1);
    ok_exec(f->db, "INSERT INTO sn VALUES (2)");
    ok_exec(f->db, "INSERT INTO sn VALUES (3)");
    assert_int_equal(one_int(f->db, "SELECT count(*) FROM sn"), 3);
    assert_int_equal(one_int(rd, "SELECT count(*) FROM sn"), 1);
    assert_int_equal(one_int(rd, "SELECT sum(x) FROM sn"), 1);
    assert_int_equal(db_read_end(rd), DB_OK);
    assert_int_equal(one_int(rd, "SELECT count(*) FROM sn"), 3);
    store_close(rd);
}

static void lite_t_snapshot(void **state)
{
    t_snapshot(*state);
}

static void pg_t_snapshot(void **state)
{
    t_snapshot(*state);
}

/* ---- PostgreSQL only ---- */

static void test_pg_password_masked(void **state)
{
    (void)state;
    struct db *db = NULL;
    struct diag d = {{0}};
    assert_int_equal(
        store_open("postgresql://fid:s3cret@127.0.0.1:1/x", &db, &d), -EIO);
    assert_null(db);
    assert_null(strstr(d.msg, "s3cret"));
    assert_non_null(
        strstr(d.msg, "cannot open 'postgresql://***@127.0.0.1:1/x'"));
}

/* store_open of url (it fails) in a thread, for test_pg_tcp_keepalive. */
static void *open_fails(void *arg)
{
    struct db *db = NULL;
    struct diag d = {{0}};
    if (!store_open(arg, &db, &d))
        store_close(db);
    return db ? arg : NULL;
}

/* The socket of this process connected to 127.0.0.1:port: its fd, or -1. */
static int client_of(int port)
{
    DIR *dir = opendir("/proc/self/fd");
    int found = -1;
    struct dirent *de;
    while (dir && found < 0 && (de = readdir(dir))) {
        int fd = atoi(de->d_name);
        struct stat st;
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        if (de->d_name[0] != '.' && fd != dirfd(dir) && !fstat(fd, &st) &&
            S_ISSOCK(st.st_mode) &&
            !getpeername(fd, (struct sockaddr *)&peer, &len) &&
            peer.sin_family == AF_INET && ntohs(peer.sin_port) == port)
            found = fd;
    }
    if (dir)
        closedir(dir);
    return found;
}

static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof(v);
    assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

/* Over TCP, a PostgreSQL connection finds a silent peer gone in seconds:
 * keepalive probes after 5 s idle, 2 s apart, 3 of them, and 10 s for
 * what it sent to be acknowledged, unless the URL says otherwise. Read
 * from the client's socket while it waits for a server (a listener of
 * this test's) that never answers. */
static void test_pg_tcp_keepalive(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t alen = sizeof(a);
        assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(l, 1), 0);
        assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
        int port = ntohs(a.sin_port);
        char url[128];
        snprintf(url, sizeof(url),
                 "postgresql://fid@127.0.0.1:%d/x?connect_timeout=5%s", port,
                 round ? "&keepalives_idle=42" : "");
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, open_fails, url), 0);
        struct pollfd pf = {.fd = l, .events = POLLIN};
        int ready = poll(&pf, 1, 5000);
        int s = ready == 1 ? accept(l, NULL, NULL) : -1;
        int c = s >= 0 ? client_of(port) : -1;
        int alive = c >= 0 ? sockopt(c, SOL_SOCKET, SO_KEEPALIVE) : -1;
        int idle = c >= 0 ? sockopt(c, IPPROTO_TCP, TCP_KEEPIDLE) : -1;
        int intvl = c >= 0 ? sockopt(c, IPPROTO_TCP, TCP_KEEPINTVL) : -1;
        int cnt = c >= 0 ? sockopt(c, IPPROTO_TCP, TCP_KEEPCNT) : -1;
        int user = c >= 0 ? sockopt(c, IPPROTO_TCP, TCP_USER_TIMEOUT) : -1;
        if (s >= 0)
            close(s); /* the client's open fails now */
        void *opened = NULL;
        pthread_join(t, &opened);
        close(l);
        assert_null(opened);
        assert_true(c >= 0);
        assert_int_equal(alive, 1);
        assert_int_equal(idle, round ? 42 : 5);
        assert_int_equal(intvl, 2);
        assert_int_equal(cnt, 3);
        assert_int_equal(user, 10000);
    }
}

static void test_pg_pragma_refused(void **state)
{
    struct db *db = ((struct fx *)*state)->db;
    char *err = NULL;
    assert_int_equal(db_exec(db, "PRAGMA journal_mode=WAL", &err), DB_ERROR);
    assert_non_null(strstr(err, "PRAGMA"));
    free(err);
}

/* Has the server end db's session (pg_terminate_backend, from another
 * connection): the connection is reset, the server stays up. */
static void end_session(const struct fx *f)
{
    struct db *other = NULL;
    struct diag d = {{0}};
    if (store_open(f->target, &other, &d))
        fail_msg("%s", d.msg);
    int64_t ended = one_int(other, "SELECT count(*) FROM (SELECT"
                                   " pg_terminate_backend(pid) FROM"
                                   " pg_stat_activity WHERE"
                                   " application_name = 'fidelity' AND"
                                   " pid <> pg_backend_pid()) AS k");
    store_close(other);
    assert_int_equal(ended, 1);
}

/* A connection the server ended is made again at the next statement
 * outside a transaction; persistent statements are prepared again. */
static void test_pg_reconnect(void **state)
{
    struct fx *f = *state;
    struct db *db = f->db;
    ok_exec(db, "CREATE TABLE rc(x INTEGER)");
    struct db_stmt *ins = NULL;
    assert_int_equal(
        db_prepare_persistent(db, "INSERT INTO rc VALUES (?)", &ins), DB_OK);
    db_bind_int(ins, 1, 1);
    assert_int_equal(db_step(ins), DB_DONE);
    db_reset(ins);
    end_session(f);
    /* the statement that finds the connection gone fails; the next one
     * runs on a new connection */
    db_bind_int(ins, 1, 2);
    int rc = db_step(ins);
    db_reset(ins);
    if (rc != DB_DONE) {
        assert_int_equal(rc, DB_ERROR);
        db_bind_int(ins, 1, 2);
        assert_int_equal(db_step(ins), DB_DONE);
        db_reset(ins);
    }
    db_finalize(ins);
    assert_int_equal(one_int(db, "SELECT sum(x) FROM rc"), 3);
}

/* A failure because the server ended the connection is one of a lost
 * server (db_is_lost), also once the caller's ROLLBACK has connected
 * again, until a statement succeeds; a refused statement is not. */
static void test_pg_lost(void **state)
{
    struct fx *f = *state;
    struct db *db = f->db;
    char *err = NULL;
    ok_exec(db, "CREATE TABLE lo(x INTEGER PRIMARY KEY)");
    assert_false(db_is_lost(db));
    ok_exec(db, "BEGIN IMMEDIATE");
    ok_exec(db, "INSERT INTO lo VALUES (1)");
    end_session(f);
    assert_int_not_equal(db_exec(db, "INSERT INTO lo VALUES (2)", &err), DB_OK);
    free(err);
    assert_true(db_is_lost(db));
    assert_int_equal(db_exec(db, "ROLLBACK", NULL), DB_OK);
    assert_true(db_is_lost(db)); /* what the failure was, still */
    ok_exec(db, "INSERT INTO lo VALUES (3)");
    assert_false(db_is_lost(db));
    err = NULL;
    assert_int_equal(db_exec(db, "INSERT INTO lo VALUES (3)", &err),
                     DB_CONSTRAINT);
    free(err);
    assert_false(db_is_lost(db));
    assert_int_equal(one_int(db, "SELECT sum(x) FROM lo"), 3);
}

/* A transaction whose connection the server ended stays failed until the
 * caller's ROLLBACK: its later statements fail too, persistent ones
 * included, and none runs on a new connection outside it (there it would
 * commit at once, pointing at rows that went with the transaction). */
static void test_pg_lost_transaction_stays_failed(void **state)
{
    struct fx *f = *state;
    struct db *db = f->db;
    char *err = NULL;
    ok_exec(db, "CREATE TABLE lt(x INTEGER PRIMARY KEY)");
    struct db_stmt *ins = NULL;
    assert_int_equal(
        db_prepare_persistent(db, "INSERT INTO lt VALUES (?)", &ins), DB_OK);
    ok_exec(db, "BEGIN IMMEDIATE");
    ok_exec(db, "INSERT INTO lt VALUES (1)");
    ok_exec(db, "SAVEPOINT s");
    end_session(f);
    assert_int_not_equal(db_exec(db, "INSERT INTO lt VALUES (2)", &err), DB_OK);
    free(err);
    err = NULL;
    assert_int_not_equal(db_exec(db, "INSERT INTO lt VALUES (4)", &err), DB_OK);
    assert_non_null(strstr(err, "lost during a transaction"));
    free(err);
    /* undoing to a savepoint leaves the transaction open, and failed */
    assert_int_not_equal(db_exec(db, "ROLLBACK TO s", NULL), DB_OK);
    assert_int_not_equal(db_exec(db, "INSERT INTO lt VALUES (32)", NULL),
                         DB_OK);
    db_bind_int(ins, 1, 8);
    assert_int_equal(db_step(ins), DB_ERROR);
    db_reset(ins);
    assert_int_not_equal(db_exec(db, "COMMIT", NULL), DB_OK);
    assert_true(db_is_lost(db));
    assert_int_equal(db_exec(db, "ROLLBACK", NULL), DB_OK);
    /* nothing of the transaction reached the store */
    assert_int_equal(one_int(db, "SELECT count(*) FROM lt"), 0);
    db_bind_int(ins, 1, 16);
    assert_int_equal(db_step(ins), DB_DONE);
    db_finalize(ins);
    assert_false(db_is_lost(db));
    assert_int_equal(one_int(db, "SELECT sum(x) FROM lt"), 16);
}

#define T(fn)                                                                  \
    cmocka_unit_test_setup_teardown(lite_##fn, setup_lite, teardown),          \
        cmocka_unit_test_setup_teardown(pg_##fn, setup_pg, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(t_types),
        T(t_doubles),
        T(t_blobs_and_text),
        T(t_upserts),
        T(t_ids_and_changes),
        T(t_catalog),
        T(t_failure_in_transaction),
        T(t_persistent),
        T(t_threads),
        T(t_snapshot),
        cmocka_unit_test(test_pg_password_masked),
        cmocka_unit_test(test_pg_tcp_keepalive),
        cmocka_unit_test_setup_teardown(test_pg_pragma_refused, setup_pg,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pg_lost_transaction_stays_failed,
                                        setup_pg, teardown),
        cmocka_unit_test_setup_teardown(test_pg_reconnect, setup_pg, teardown),
        cmocka_unit_test_setup_teardown(test_pg_lost, setup_pg, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
