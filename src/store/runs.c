/*
 * runs: store_run_get, the read of one stored run that probe's and
 * drift's stores share (runs.h). Read-only: a missing table is "no run",
 * never created here.
 */
#include "store/runs.h"

#include <errno.h>

bool store_has_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st;
    bool yes = false;
    if (sqlite3_prepare_v2(db,
                           "SELECT 1 FROM sqlite_master WHERE type='table' "
                           "AND name=?",
                           -1, &st, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    yes = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return yes;
}

int store_run_get(sqlite3 *db, const struct store_run_sql *q, int64_t id,
                  struct store_run *out, struct diag *d)
{
    sqlite3_stmt *st;
    *out = (struct store_run){0};
    if (!store_has_table(db, q->table))
        return diag_set(d, ENOENT, "no %s in the store", q->noun);
    if (sqlite3_prepare_v2(db, id > 0 ? q->one : q->last, -1, &st, NULL) !=
        SQLITE_OK)
        return diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    if (id > 0)
        sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), r = 0;
    if (rc == SQLITE_ROW) {
        json_error_t je;
        const char *s = (const char *)sqlite3_column_text(st, 2);
        out->id = sqlite3_column_int64(st, 0);
        out->created = sqlite3_column_int64(st, 1);
        out->summary = s ? json_loads(s, 0, &je) : NULL;
        if (!out->summary)
            r = diag_set(d, EIO, "store: %s %lld has no readable summary",
                         q->table, (long long)out->id);
    } else if (rc == SQLITE_DONE) {
        r = id > 0 ? diag_set(d, ENOENT, "no %s with id %lld in the store",
                              q->table, (long long)id)
                   : diag_set(d, ENOENT, "no %s in the store", q->table);
    } else {
        r = diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return r;
}
