/*
 * Tests for store/slist: the kept rows of `fidelity sessions` are read
 * back while the xchg table holds the same exchanges, and not once one is
 * added or taken away, or for another format version.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/slist.h"
#include "store/store.h"
#include "util/tmpdb.h"

/* One exchange of session s (the columns that may not be NULL). */
#define ADD(s)                                                                 \
    "INSERT INTO xchg(session, kind, started, method, path) VALUES ('" s       \
    "', 'main', 0, 'POST', '/v1/chat/completions');"

static void exec(sqlite3 *db, const char *sql)
{
    struct diag d = {{0}};
    assert_int_equal(store_exec(db, sql, &d), 0);
}

static void test_rows_kept_while_exchanges_unchanged(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    int64_t n, max;
    char *rows = NULL;
    tmpdb_open(&t, "slist"); /* with the xchg table, empty */
    assert_int_equal(store_slist_mark(t.db, &n, &max, &d), 0);
    assert_true(n == 0 && max == 0);
    /* nothing kept yet */
    assert_int_equal(store_slist_get(t.db, "v1", n, max, &rows, &d), 0);
    assert_null(rows);
    exec(t.db, ADD("a") ADD("a") ADD("b"));
    assert_int_equal(store_slist_mark(t.db, &n, &max, &d), 0);
    assert_true(n == 3 && max == 3);
    assert_int_equal(store_slist_put(t.db, "v1", n, max, "[1]", &d), 0);
    assert_int_equal(store_slist_get(t.db, "v1", 3, 3, &rows, &d), 1);
    assert_string_equal(rows, "[1]");
    free(rows);
    /* another build: not these rows */
    assert_int_equal(store_slist_get(t.db, "v2", 3, 3, &rows, &d), 0);
    /* an exchange added: the mark moves, the rows are not read */
    exec(t.db, ADD("c"));
    assert_int_equal(store_slist_mark(t.db, &n, &max, &d), 0);
    assert_int_equal(store_slist_get(t.db, "v1", n, max, &rows, &d), 0);
    /* kept again, then one taken away (and another added: same count,
     * another highest id) */
    assert_int_equal(store_slist_put(t.db, "v1", n, max, "[2]", &d), 0);
    exec(t.db, "DELETE FROM xchg WHERE id = 2");
    exec(t.db, ADD("d"));
    int64_t n2, max2;
    assert_int_equal(store_slist_mark(t.db, &n2, &max2, &d), 0);
    assert_true(n2 == n && max2 != max);
    assert_int_equal(store_slist_get(t.db, "v1", n2, max2, &rows, &d), 0);
    /* one row of rows: the put replaced the first */
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(t.db,
                                        "SELECT count(*) FROM session_list", -1,
                                        &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    tmpdb_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_kept_while_exchanges_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
