/*
 * Tests for store/slist: the kept rows of `fidelity sessions` are read
 * back while the store holds the same exchanges (whatever else was
 * written or checkpointed), and not once an exchange was added, a row of
 * exchanges or blobs changed in place, nor for another store in its
 * place or another build.
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
    /* writes that add no exchange (another table, a checkpoint as the
     * writer closes the store) leave the rows valid */
    exec(t.db, "CREATE TABLE other (x INTEGER); INSERT INTO other VALUES (1);");
    assert_int_equal(db_checkpoint(t.db), 0);
    assert_int_equal(store_slist_mark(t.path, m2), 0);
    assert_string_equal(m, m2);
    /* an exchange more: the rows are not read */
    exec(t.db, ADD("c"));
    assert_int_equal(store_slist_mark(t.path, m2), 0);
    assert_string_not_equal(m, m2);
    assert_int_equal(store_slist_get(t.path, "v1", m2, &rows), 0);
    assert_null(rows);
    /* kept again for the new mark */
    assert_int_equal(store_slist_put(t.path, "v1", m2, "[2]", &d), 0);
    assert_int_equal(store_slist_get(t.path, "v1", m2, &rows), 1);
    assert_string_equal(rows, "[2]");
    free(rows);
    /* the old mark's rows are gone */
    assert_int_equal(store_slist_get(t.path, "v1", m, &rows), 0);
    /* a row changed in place by another tool (the count and ids as they
     * were): the store's edit count moves, the rows are not read */
    exec(t.db, "UPDATE xchg SET session = 'd' WHERE id = 1");
    assert_int_equal(store_slist_mark(t.path, m), 0);
    assert_string_not_equal(m, m2);
    assert_int_equal(store_slist_get(t.path, "v1", m, &rows), 0);
    /* and a blob's */
    assert_int_equal(store_slist_put(t.path, "v1", m, "[3]", &d), 0);
    exec(t.db, "INSERT INTO xchg_blob VALUES (7, 0, 2, 0, x'7b7d');"
               "UPDATE xchg_blob SET raw_len = 3 WHERE h = 7");
    assert_int_equal(store_slist_mark(t.path, m2), 0);
    assert_string_not_equal(m, m2);
    tmpdb_close(&t);
}

/* Another store with the same exchanges' number and ids put in the
 * first's place (a copy of another recording): another mark. */
static void test_another_store_in_its_place(void **state)
{
    (void)state;
    struct tmpdb a, b;
    char ma[STORE_SLIST_MARK_MAX], mb[STORE_SLIST_MARK_MAX];
    tmpdb_open(&a, "slist-a");
    tmpdb_open(&b, "slist-b");
    exec(a.db, ADD("a") ADD("b"));
    exec(b.db, ADD("x") ADD("y"));
    assert_int_equal(store_slist_mark(a.path, ma), 0);
    assert_int_equal(store_slist_mark(b.path, mb), 0);
    assert_string_not_equal(ma, mb);
    tmpdb_close(&a);
    tmpdb_close(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_kept_while_store_unchanged),
        cmocka_unit_test(test_another_store_in_its_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
