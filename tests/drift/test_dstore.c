/*
 * Tests for drift/dstore: a run and its buckets saved in the store, read
 * back by SQL and by drift_store_run_get; a store written with the old table
 * names (drift_run with started_at, drift_bucket) renamed on open with its rows
 * kept.
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

#include "drift/dstore.h"
#include "store/runs.h"
#include "store/store.h"

static int count(struct db *db, const char *sql)
{
    struct db_stmt *st;
    int n = -1;
    if (db_prepare(db, sql, &st) == DB_OK && db_step(st) == DB_ROW)
        n = db_column_int(st, 0);
    db_finalize(st);
    return n;
}

static void test_save_run(void **state)
{
    (void)state;
    char path[] = "/tmp/drift-dstore-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct db *db;
    struct diag d;
    assert_int_equal(store_open(path, &db, &d), 0);
    json_error_t e;
    json_t *sum = json_loads(
        "{\"golden\":{\"url\":\"http://u:p@g:1\",\"dialect\":\"vllm\","
        "\"fingerprint\":{\"/version\":{\"version\":\"x\"}}},"
        "\"candidate\":{\"url\":\"http://c:2\",\"dialect\":\"sglang\","
        "\"fingerprint\":null},\"sequences\":2,\"positions\":100,"
        "\"buckets\":[{\"from\":1,\"to\":64,\"candidate\":{\"count\":63,"
        "\"kl_mean\":0.5},\"excess\":{\"kl_mean\":0.25},\"verdict\":\"FAIL\"},"
        "{\"from\":64,\"to\":128,\"candidate\":{\"count\":37},"
        "\"excess\":{},\"verdict\":\"PASS\"}],\"verdict\":\"FAIL\"}",
        0, &e);
    assert_non_null(sum);
    int64_t id = 0;
    assert_int_equal(drift_store_save(db, sum, &id, &d), 0);
    assert_true(id > 0);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_run"), 1);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_bucket"), 2);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_run WHERE "
                               "golden_url = 'http://***@g:1' AND verdict = "
                               "'FAIL' AND positions = 100 AND "
                               "golden_fingerprint LIKE '%version%'"),
                     1);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_bucket WHERE "
                               "pos_from = 1 AND count = 63 AND "
                               "excess_kl_mean = 0.25"),
                     1);
    assert_int_equal(drift_store_save(db, sum, &id, &d), 0);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_run"), 2);
    json_decref(sum);
    store_close(db);
    unlink(path);
    char side[64];
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
}

static void unlink_db(const char *path)
{
    char side[64];
    unlink(path);
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
}

/* The tables as drift created them before the result tables were named
 * alike, with two runs and three buckets. */
static const char old_store[] =
    "CREATE TABLE drift_runs ("
    " id INTEGER PRIMARY KEY,"
    " started_at INTEGER NOT NULL,"
    " golden_url TEXT NOT NULL, candidate_url TEXT NOT NULL,"
    " golden_dialect TEXT, candidate_dialect TEXT,"
    " golden_fingerprint TEXT, candidate_fingerprint TEXT,"
    " sequences INTEGER, positions INTEGER,"
    " verdict TEXT NOT NULL, summary TEXT NOT NULL);"
    "CREATE TABLE drift_buckets ("
    " run_id INTEGER NOT NULL REFERENCES drift_runs(id) ON DELETE CASCADE,"
    " pos_from INTEGER NOT NULL, pos_to INTEGER NOT NULL,"
    " count INTEGER, kl_mean REAL, kl_p999 REAL, kl_max REAL,"
    " excess_kl_mean REAL, top1_agreement REAL, dp_rms REAL,"
    " verdict TEXT, PRIMARY KEY (run_id, pos_from));"
    "INSERT INTO drift_runs VALUES (1, 1700000000, 'http://g', 'http://c',"
    " 'vllm', 'sglang', NULL, NULL, 2, 100, 'PASS',"
    " '{\"verdict\":\"PASS\",\"positions\":100}');"
    "INSERT INTO drift_runs VALUES (2, 1700000100, 'http://g', 'http://c',"
    " 'vllm', 'sglang', NULL, NULL, 3, 200, 'FAIL',"
    " '{\"verdict\":\"FAIL\",\"positions\":200}');"
    "INSERT INTO drift_buckets (run_id, pos_from, pos_to, count)"
    " VALUES (1, 1, 64, 63), (2, 1, 64, 63), (2, 64, 128, 37);";

static void test_old_store_renamed(void **state)
{
    (void)state;
    char path[] = "/tmp/drift-dstore-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct db *db;
    struct diag d;
    assert_int_equal(store_open(path, &db, &d), 0);
    assert_int_equal(store_exec(db, old_store, &d), 0);
    store_close(db);

    /* read back as the report reads it: the latest run, then by id */
    assert_int_equal(store_open(path, &db, &d), 0);
    struct store_run run;
    assert_int_equal(drift_store_run_get(db, 0, &run, &d), 0);
    assert_int_equal(run.id, 2);
    assert_int_equal(run.created, 1700000100);
    assert_string_equal(
        json_string_value(json_object_get(run.summary, "verdict")), "FAIL");
    json_decref(run.summary);
    assert_int_equal(drift_store_run_get(db, 1, &run, &d), 0);
    assert_int_equal(run.created, 1700000000);
    assert_int_equal(
        json_integer_value(json_object_get(run.summary, "positions")), 100);
    json_decref(run.summary);
    assert_int_equal(drift_store_run_get(db, 3, &run, &d), -ENOENT);

    /* the old names are gone, the rows kept under the new ones */
    assert_false(db_has_table(db, "drift_runs"));
    assert_false(db_has_table(db, "drift_buckets"));
    assert_int_equal(drift_store_schema(db, &d), 0);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_run"), 2);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_bucket"), 3);
    assert_int_equal(
        count(db, "SELECT count(*) FROM drift_run WHERE created = 1700000000"
                  " AND positions = 100"),
        1);

    /* a new run goes after them; the buckets still follow their run */
    json_t *sum =
        json_pack("{s:s, s:[{s:i, s:i, s:{s:i}}]}", "verdict", "PASS",
                  "buckets", "from", 1, "to", 64, "candidate", "count", 9);
    int64_t id = 0;
    assert_int_equal(drift_store_save(db, sum, &id, &d), 0);
    assert_int_equal(id, 3);
    json_decref(sum);
    assert_int_equal(store_exec(db, "DELETE FROM drift_run WHERE id = 2", &d),
                     0);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_bucket"), 2);
    store_close(db);
    unlink_db(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_run),
        cmocka_unit_test(test_old_store_renamed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
