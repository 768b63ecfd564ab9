/*
 * runs: store_run_get, the read of one stored run that probe's and
 * drift's stores share (runs.h). Read-only: a missing table is "no run",
 * never created here.
 */
#include "store/runs.h"

#include <errno.h>

int store_run_get(struct db *db, const struct store_run_sql *q, int64_t id,
                  struct store_run *out, struct diag *d)
{
    struct db_stmt *st;
    *out = (struct store_run){0};
    if (!db_has_table(db, q->table))
        return diag_set(d, ENOENT, "no %s in the store", q->noun);
    if (db_prepare(db, id > 0 ? q->one : q->last, &st) != DB_OK)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    if (id > 0)
        db_bind_int64(st, 1, id);
    int rc = db_step(st), r = 0;
    if (rc == DB_ROW) {
        json_error_t je;
        const char *s = (const char *)db_column_text(st, 2);
        out->id = db_column_int64(st, 0);
        out->created = db_column_int64(st, 1);
        out->summary = s ? json_loads(s, 0, &je) : NULL;
        if (!out->summary)
            r = diag_set(d, EIO, "store: %s %lld has no readable summary",
                         q->table, (long long)out->id);
    } else if (rc == DB_DONE) {
        r = id > 0 ? diag_set(d, ENOENT, "no %s with id %lld in the store",
                              q->table, (long long)id)
                   : diag_set(d, ENOENT, "no %s in the store", q->table);
    } else {
        r = diag_set(d, EIO, "store: %s", db_errmsg(db));
    }
    db_finalize(st);
    return r;
}
