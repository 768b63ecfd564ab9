/*
 * load: the stored runs the report draws, read from probe's probe_run and
 * probe_live_run and drift's drift_runs tables (src/probe/pstore.c,
 * src/probe/livestore.c, src/drift/dstore.c). Each keeps its JSON summary
 * in a `summary` column; a probe run stored before
 * the summary held the whole document (cells, baseline, comparison) is
 * wrapped as {"results": summary}, which draws everything but the maps.
 * Read-only: a table that does not exist means "no run".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "report/report.h"
#include "report/report_int.h"

static bool has_table(sqlite3 *db, const char *name)
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

/* Runs sql (selecting id, time, summary) with id bound when id > 0. */
static int load_row(sqlite3 *db, const char *table, const char *sql_one,
                    const char *sql_last, int64_t id, int64_t *got_id,
                    int64_t *when, json_t **doc, struct diag *d)
{
    sqlite3_stmt *st;
    if (!has_table(db, table))
        return diag_set(d, ENOENT, "no %s in the store",
                        !strcmp(table, "probe_run")        ? "probe run"
                        : !strcmp(table, "probe_live_run") ? "live probe run"
                                                           : "drift run");
    if (sqlite3_prepare_v2(db, id > 0 ? sql_one : sql_last, -1, &st, NULL) !=
        SQLITE_OK)
        return diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    if (id > 0)
        sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), r = 0;
    if (rc == SQLITE_ROW) {
        json_error_t je;
        const char *s = (const char *)sqlite3_column_text(st, 2);
        *got_id = sqlite3_column_int64(st, 0);
        *when = sqlite3_column_int64(st, 1);
        *doc = s ? json_loads(s, 0, &je) : NULL;
        if (!*doc)
            r = diag_set(d, EIO, "store: %s %lld has no readable summary",
                         table, (long long)*got_id);
    } else if (rc == SQLITE_DONE) {
        r = id > 0 ? diag_set(d, ENOENT, "no %s with id %lld in the store",
                              table, (long long)id)
                   : diag_set(d, ENOENT, "no %s in the store", table);
    } else {
        r = diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return r;
}

static char *origin(const char *what, int64_t id, int64_t when)
{
    struct buf b;
    buf_init(&b, 0);
    buf_printf(&b, "%s run %lld, stored ", what, (long long)id);
    fmt_time(&b, when);
    return buf_detach(&b, NULL);
}

int report_load_probe(sqlite3 *db, int64_t id, json_t **doc, char **org,
                      struct diag *d)
{
    int64_t got = 0, when = 0;
    json_t *j = NULL;
    int r = load_row(db, "probe_run",
                     "SELECT id, created, summary FROM probe_run WHERE id=?",
                     "SELECT id, created, summary FROM probe_run ORDER BY id "
                     "DESC LIMIT 1",
                     id, &got, &when, &j, d);
    if (r)
        return r;
    if (!json_object_get(j, "format")) {
        json_t *w =
            json_pack("{s:s, s:o}", "format", "fidelity-probe/1", "results", j);
        j = w;
    }
    *doc = j;
    *org = origin("probe", got, when);
    return 0;
}

int report_load_live(sqlite3 *db, int64_t id, json_t **doc, char **org,
                     struct diag *d)
{
    int64_t got = 0, when = 0;
    int r = load_row(db, "probe_live_run",
                     "SELECT id, created, summary FROM probe_live_run WHERE "
                     "id=?",
                     "SELECT id, created, summary FROM probe_live_run ORDER BY "
                     "id DESC LIMIT 1",
                     id, &got, &when, doc, d);
    if (r)
        return r;
    *org = origin("probe --live", got, when);
    return 0;
}

int report_load_drift(sqlite3 *db, int64_t id, json_t **doc, char **org,
                      struct diag *d)
{
    int64_t got = 0, when = 0;
    int r = load_row(db, "drift_runs",
                     "SELECT id, started_at, summary FROM drift_runs WHERE "
                     "id=?",
                     "SELECT id, started_at, summary FROM drift_runs ORDER BY "
                     "id DESC LIMIT 1",
                     id, &got, &when, doc, d);
    if (r)
        return r;
    *org = origin("drift", got, when);
    return 0;
}
