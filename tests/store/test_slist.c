/*
 * Tests for store/slist: the kept rows of `fidelity sessions` are read
 * back while the store's files are as they were, and not once a write
 * changed the database or its WAL, nor for another build.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/slist.h"
#include "store/store.h"
#include "util/tmpdb.h"

static void exec(struct db *db, const char *sql)
{
    struct diag d = {{0}};
    assert_int_equal(store_exec(db, sql, &d), 0);
}

/* One exchange of session s (the columns that may not be NULL). */
#define ADD(s)                                                                 \
    "INSERT INTO xchg(session, kind, started, method, path) VALUES ('" s       \
    "', 'main', 0, 'POST', '/v1/chat/completions');"

static void test_rows_kept_while_store_unchanged(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    char m[STORE_SLIST_MARK_MAX], m2[STORE_SLIST_MARK_MAX];
    char *rows = NULL;
    char none[600];
    snprintf(none, sizeof(none), "%s", "/tmp/fidelity-slist-none.db");
    assert_int_equal(store_slist_mark(none, m), -ENOENT);
    tmpdb_open(&t, "slist");
    exec(t.db, ADD("a") ADD("b"));
    assert_int_equal(store_slist_mark(t.path, m), 0);
    /* nothing kept yet */
    assert_int_equal(store_slist_get(t.path, "v1", m, &rows), 0);
    assert_null(rows);
    assert_int_equal(store_slist_put(t.path, "v1", m, "[1]", &d), 0);
    assert_int_equal(store_slist_get(t.path, "v1", m, &rows), 1);
    assert_string_equal(rows, "[1]");
    free(rows);
    /* the mark of an unchanged store is the same */
    assert_int_equal(store_slist_mark(t.path, m2), 0);
    assert_string_equal(m, m2);
    /* another build: not these rows */
    assert_int_equal(store_slist_get(t.path, "v2", m, &rows), 0);
    /* a row changed in place (the count and ids as they were): the
     * store's files change, the rows are not read */
    exec(t.db, "UPDATE xchg SET session = 'c' WHERE id = 1");
    assert_int_equal(store_slist_mark(t.path, m2), 0);
    assert_string_not_equal(m, m2);
    assert_int_equal(store_slist_get(t.path, "v1", m2, &rows), 0);
    /* kept again for the new mark */
    assert_int_equal(store_slist_put(t.path, "v1", m2, "[2]", &d), 0);
    assert_int_equal(store_slist_get(t.path, "v1", m2, &rows), 1);
    assert_string_equal(rows, "[2]");
    free(rows);
    tmpdb_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_kept_while_store_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
