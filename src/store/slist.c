/*
 * store/slist: the kept rows of `fidelity sessions`, one table of one row.
 * Contract in slist.h.
 */
#include "store/slist.h"

#include <errno.h>
#include <stdlib.h>

#include "core/xalloc.h"
#include "store/store.h"

static const char SCHEMA[] = "CREATE TABLE IF NOT EXISTS session_list ("
                             " version TEXT NOT NULL, n INTEGER NOT NULL,"
                             " max_id INTEGER NOT NULL, rows TEXT NOT NULL)";

static int sql_err(sqlite3 *db, const char *what, struct diag *d)
{
    return diag_set(d, EIO, "cannot %s the session list: %s", what,
                    sqlite3_errmsg(db));
}

int store_slist_mark(sqlite3 *db, int64_t *n, int64_t *max_id, struct diag *d)
{
    sqlite3_stmt *st = NULL;
    *n = *max_id = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT count(*), coalesce(max(id), 0) FROM xchg",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_err(db, "count the exchanges for", d);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *n = sqlite3_column_int64(st, 0);
        *max_id = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : sql_err(db, "count the exchanges for", d);
}

int store_slist_get(sqlite3 *db, const char *version, int64_t n, int64_t max_id,
                    char **rows, struct diag *d)
{
    sqlite3_stmt *st = NULL;
    *rows = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT rows FROM session_list WHERE version=? "
                           "AND n=? AND max_id=?",
                           -1, &st, NULL) != SQLITE_OK) {
        /* never kept in this store: not an error */
        return sqlite3_errcode(db) == SQLITE_ERROR ? 0 : sql_err(db, "read", d);
    }
    sqlite3_bind_text(st, 1, version, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, n);
    sqlite3_bind_int64(st, 3, max_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        *rows = xstrdup(t ? t : "");
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return 1;
    return rc == SQLITE_DONE ? 0 : sql_err(db, "read", d);
}

int store_slist_put(sqlite3 *db, const char *version, int64_t n, int64_t max_id,
                    const char *rows, struct diag *d)
{
    sqlite3_stmt *st = NULL;
    int ret = store_exec(db, SCHEMA, d);
    if (ret)
        return ret;
    ret = store_exec(db, "BEGIN IMMEDIATE", d);
    if (ret)
        return ret;
    ret = store_exec(db, "DELETE FROM session_list", d);
    if (ret)
        goto out;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO session_list(version, n, max_id, rows)"
                           " VALUES (?, ?, ?, ?)",
                           -1, &st, NULL) != SQLITE_OK) {
        ret = sql_err(db, "keep", d);
        goto out;
    }
    sqlite3_bind_text(st, 1, version, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, n);
    sqlite3_bind_int64(st, 3, max_id);
    sqlite3_bind_text(st, 4, rows, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE)
        ret = sql_err(db, "keep", d);
    sqlite3_finalize(st);
out:
    if (ret) {
        store_exec(db, "ROLLBACK", NULL);
        return ret;
    }
    return store_exec(db, "COMMIT", d);
}
