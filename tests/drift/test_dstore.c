/*
 * Tests for drift/dstore: a run and its buckets saved in the store, read
 * back by SQL; URL credentials masked (core/url).
 */
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
#include "store/store.h"

static int count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int n = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return n;
}

static void test_save_run(void **state)
{
    (void)state;
    char path[] = "/tmp/drift-dstore-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    sqlite3 *db;
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
    assert_int_equal(count(db, "SELECT count(*) FROM drift_runs"), 1);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_buckets"), 2);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_runs WHERE "
                               "golden_url = 'http://***@g:1' AND verdict = "
                               "'FAIL' AND positions = 100 AND "
                               "golden_fingerprint LIKE '%version%'"),
                     1);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_buckets WHERE "
                               "pos_from = 1 AND count = 63 AND "
                               "excess_kl_mean = 0.25"),
                     1);
    assert_int_equal(drift_store_save(db, sum, &id, &d), 0);
    assert_int_equal(count(db, "SELECT count(*) FROM drift_runs"), 2);
    json_decref(sum);
    store_close(db);
    unlink(path);
    char side[64];
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_save_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
