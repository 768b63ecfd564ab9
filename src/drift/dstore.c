/*
 * drift store: drift_run and drift_bucket, and the renaming of an older
 * store's drift_runs and drift_buckets. Contract in dstore.h.
 */
#include "drift/dstore.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "core/url.h"
#include "store/runs.h"
#include "store/store.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS drift_run ("
    " id INTEGER PRIMARY KEY,"
    " created INTEGER NOT NULL,"
    " golden_url TEXT NOT NULL, candidate_url TEXT NOT NULL,"
    " golden_dialect TEXT, candidate_dialect TEXT,"
    " golden_fingerprint TEXT, candidate_fingerprint TEXT,"
    " sequences INTEGER, positions INTEGER,"
    " verdict TEXT NOT NULL, summary TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS drift_bucket ("
    " run_id INTEGER NOT NULL REFERENCES drift_run(id) ON DELETE CASCADE,"
    " pos_from INTEGER NOT NULL, pos_to INTEGER NOT NULL,"
    " count INTEGER, kl_mean REAL, kl_p999 REAL, kl_max REAL,"
    " excess_kl_mean REAL, top1_agreement REAL, dp_rms REAL,"
    " verdict TEXT, PRIMARY KEY (run_id, pos_from));";

/* A store from before the result tables shared one naming scheme
 * (singular names, `created`): drift_runs (started_at) and drift_buckets
 * are renamed in place, rows and the buckets' reference to their run
 * kept (SQLite rewrites it). In one IMMEDIATE transaction, so two
 * processes opening the same old store rename it once. */
static int migrate(struct db *db, struct diag *d)
{
    if (!db_has_table(db, "drift_runs"))
        return 0;
    if (store_exec(db, "BEGIN IMMEDIATE", d))
        return -EIO;
    int r = 0;
    if (db_has_table(db, "drift_runs") && !db_has_table(db, "drift_run"))
        r = store_exec(db,
                       "ALTER TABLE drift_runs RENAME TO drift_run;"
                       "ALTER TABLE drift_run RENAME COLUMN started_at TO "
                       "created;"
                       "ALTER TABLE drift_buckets RENAME TO drift_bucket;",
                       d);
    if (r) {
        store_exec(db, "ROLLBACK", NULL);
        return r;
    }
    return store_exec(db, "COMMIT", d);
}

int drift_store_schema(struct db *db, struct diag *d)
{
    int r = migrate(db, d);
    return r ? r : store_exec(db, schema, d);
}

static const struct store_run_sql run_sql = {
    .table = "drift_run",
    .noun = "drift run",
    .one = "SELECT id, created, summary FROM drift_run WHERE id=?",
    .last = "SELECT id, created, summary FROM drift_run ORDER BY id DESC "
            "LIMIT 1",
};

int drift_store_run_get(struct db *db, int64_t id, struct store_run *out,
                        struct diag *d)
{
    struct diag ignored;
    migrate(db, &ignored); /* best effort: a read-only copy stays as is */
    return store_run_get(db, &run_sql, id, out, d);
}

static const char *sget(const json_t *o, const char *a, const char *b)
{
    const json_t *v = json_object_get(json_object_get(o, a), b);
    return json_is_string(v) ? json_string_value(v) : "";
}

static double rget(const json_t *o, const char *a, const char *b)
{
    const json_t *v =
        a ? json_object_get(json_object_get(o, a), b) : json_object_get(o, b);
    return json_is_number(v) ? json_number_value(v) : 0;
}

static int bind_text_fresh(struct db_stmt *st, int i, char *s)
{
    return db_bind_text(st, i, s, -1, free);
}

static int save_buckets(struct db *db, const json_t *summary, int64_t id,
                        struct diag *d)
{
    struct db_stmt *st;
    const json_t *b = json_object_get(summary, "buckets");
    size_t i;
    const json_t *x;
    if (db_prepare(db,
                   "INSERT INTO drift_bucket VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?)",
                   &st) != DB_OK)
        return diag_set(d, EIO, "%s", db_errmsg(db));
    json_array_foreach(b, i, x)
    {
        db_reset(st);
        db_bind_int64(st, 1, id);
        db_bind_int64(st, 2, (int64_t)rget(x, NULL, "from"));
        db_bind_int64(st, 3, (int64_t)rget(x, NULL, "to"));
        db_bind_int64(st, 4, (int64_t)rget(x, "candidate", "count"));
        db_bind_double(st, 5, rget(x, "candidate", "kl_mean"));
        db_bind_double(st, 6, rget(x, "candidate", "kl_p999"));
        db_bind_double(st, 7, rget(x, "candidate", "kl_max"));
        db_bind_double(st, 8, rget(x, "excess", "kl_mean"));
        db_bind_double(st, 9, rget(x, "candidate", "top1_agreement"));
        db_bind_double(st, 10, rget(x, "candidate", "dp_rms"));
        const json_t *v = json_object_get(x, "verdict");
        db_bind_text(st, 11, json_is_string(v) ? json_string_value(v) : "", -1,
                     DB_TRANSIENT);
        if (db_step(st) != DB_DONE) {
            diag_set(d, EIO, "%s", db_errmsg(db));
            db_finalize(st);
            return -EIO;
        }
    }
    db_finalize(st);
    return 0;
}

int drift_store_save(struct db *db, const json_t *summary, int64_t *run_id,
                     struct diag *d)
{
    struct db_stmt *st;
    int ret = drift_store_schema(db, d);
    if (ret)
        return ret;
    if (store_exec(db, "BEGIN", d))
        return -EIO;
    if (db_prepare(db,
                   "INSERT INTO drift_run (created, golden_url,"
                   " candidate_url, golden_dialect,"
                   " candidate_dialect, golden_fingerprint,"
                   " candidate_fingerprint, sequences, positions,"
                   " verdict, summary) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   &st) != DB_OK) {
        diag_set(d, EIO, "%s", db_errmsg(db));
        store_exec(db, "ROLLBACK", NULL);
        return -EIO;
    }
    db_bind_int64(st, 1, (int64_t)time(NULL));
    bind_text_fresh(st, 2, url_mask(sget(summary, "golden", "url")));
    bind_text_fresh(st, 3, url_mask(sget(summary, "candidate", "url")));
    db_bind_text(st, 4, sget(summary, "golden", "dialect"), -1, DB_TRANSIENT);
    db_bind_text(st, 5, sget(summary, "candidate", "dialect"), -1,
                 DB_TRANSIENT);
    const json_t *gf =
        json_object_get(json_object_get(summary, "golden"), "fingerprint");
    const json_t *cf =
        json_object_get(json_object_get(summary, "candidate"), "fingerprint");
    bind_text_fresh(
        st, 6, json_dumps(gf, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY));
    bind_text_fresh(
        st, 7, json_dumps(cf, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY));
    db_bind_int64(st, 8, (int64_t)rget(summary, NULL, "sequences"));
    db_bind_int64(st, 9, (int64_t)rget(summary, NULL, "positions"));
    const json_t *v = json_object_get(summary, "verdict");
    db_bind_text(st, 10, json_is_string(v) ? json_string_value(v) : "", -1,
                 DB_TRANSIENT);
    bind_text_fresh(st, 11, json_dumps(summary, JSON_COMPACT | JSON_SORT_KEYS));
    if (db_step(st) != DB_DONE) {
        diag_set(d, EIO, "%s", db_errmsg(db));
        ret = -EIO;
    }
    db_finalize(st);
    if (!ret) {
        *run_id = db_last_insert_rowid(db);
        ret = save_buckets(db, summary, *run_id, d);
    }
    if (ret) {
        store_exec(db, "ROLLBACK", NULL);
        return ret;
    }
    return store_exec(db, "COMMIT", d);
}
