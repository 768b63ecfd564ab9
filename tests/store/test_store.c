/*
 * Tests for store/store.c, the one place that opens SQLite files: the
 * pragmas fidelity relies on (WAL, synchronous=NORMAL) and the
 * process-wide setting made before SQLite's first use (no memory
 * statistics: each allocation would take a global mutex that record's
 * writer and checkpointer threads contend for; docs/PERFORMANCE.md).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "store/store.h"
#include "util/tmpdb.h"

static char *pragma(struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db, sql, &st), DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    char *v = strdup((const char *)db_column_text(st, 0));
    db_finalize(st);
    return v;
}

/* Runs first in this process: the store's open is SQLite's first use */
static void test_opened_as_relied_on(void **state)
{
    (void)state;
    struct tmpdb t;
    tmpdb_open(&t, "store");
    char *mode = pragma(t.db, "PRAGMA journal_mode");
    char *sync = pragma(t.db, "PRAGMA synchronous");
    assert_string_equal(mode, "wal");
    assert_string_equal(sync, "1"); /* NORMAL */
    free(mode);
    free(sync);
    /* the tables were made and a row written: with statistics on, SQLite
     * would count the memory this took */
    struct diag d = {{0}};
    assert_int_equal(store_exec(t.db,
                                "CREATE TABLE t(x); INSERT INTO t"
                                " VALUES (randomblob(100000));",
                                &d),
                     0);
    assert_int_equal(sqlite3_memory_used(), 0);
    assert_int_equal(sqlite3_memory_highwater(0), 0);
    tmpdb_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opened_as_relied_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
