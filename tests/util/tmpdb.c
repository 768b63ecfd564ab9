/*
 * tmpdb: a temporary store for the store tests (see tmpdb.h).
 */
#include "util/tmpdb.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/diag.h"
#include "store/store.h"
#include "store/xchg.h"

void tmpdb_open(struct tmpdb *t, const char *name)
{
    struct diag d = {{0}};
    int n = snprintf(t->dir, sizeof(t->dir), "/tmp/fidelity-%s-XXXXXX", name);
    assert_true(n > 0 && (size_t)n < sizeof(t->dir));
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->path, sizeof(t->path), "%s/t.db", t->dir);
    assert_int_equal(store_open(t->path, &t->db, &d), 0);
    assert_int_equal(xchg_schema(t->db, &d), 0);
}

void tmpdb_close(struct tmpdb *t)
{
    char cmd[128];
    store_close(t->db);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}
