/*
 * pstore: probe's tables in the shared SQLite store. A result row is keyed
 * by probe_spec_key (case configuration + request parameters + endpoint
 * fingerprint), which is what lets a re-run skip finished cases. Nothing
 * secret is stored: no headers, no request bodies, the URL without any
 * user:password part, server info with key-like members redacted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/url.h"
#include "probe/probe_int.h"
#include "store/runs.h"
#include "store/store.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS probe_endpoint("
    " fp TEXT PRIMARY KEY, url TEXT NOT NULL, model TEXT,"
    " max_model_len INTEGER, tokenizer TEXT, info TEXT,"
    " seen INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS probe_result("
    " key TEXT PRIMARY KEY, endpoint_fp TEXT NOT NULL, kind TEXT NOT NULL,"
    " length INTEGER, target INTEGER, depth INTEGER, variant INTEGER,"
    " temperature REAL, rep INTEGER, seed TEXT, expected INTEGER,"
    " prompt_tokens INTEGER, outcome TEXT NOT NULL, no_context INTEGER,"
    " finish TEXT, status INTEGER, attempts INTEGER, latency REAL,"
    " reply TEXT, error TEXT, created INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS probe_result_fp ON probe_result(endpoint_fp);"
    "CREATE TABLE IF NOT EXISTS probe_canary("
    " fp TEXT PRIMARY KEY, info_fp TEXT NOT NULL, length INTEGER,"
    " status INTEGER, prompt_tokens INTEGER, answer TEXT,"
    " deterministic INTEGER, seen INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS probe_lost("
    " key TEXT PRIMARY KEY, path_tokens INTEGER, lost INTEGER,"
    " drop_kind TEXT, drop_turns INTEGER, drop_ratio REAL);"
    "CREATE TABLE IF NOT EXISTS probe_run("
    " id INTEGER PRIMARY KEY, created INTEGER NOT NULL,"
    " endpoint_fp TEXT NOT NULL, baseline_fp TEXT, summary TEXT);";

int probe_store_init(struct db *db, struct diag *d)
{
    return store_exec(db, schema, d);
}

static int prep(struct db *db, const char *sql, struct db_stmt **st,
                struct diag *d)
{
    if (db_prepare(db, sql, st) != DB_OK)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    return 0;
}

static int step_done(struct db *db, struct db_stmt *st, struct diag *d)
{
    int rc = db_step(st);
    db_finalize(st);
    if (rc != DB_DONE)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    return 0;
}

int probe_store_endpoint(struct db *db, const struct probe_endpoint *e,
                         struct diag *d)
{
    struct db_stmt *st;
    int r = prep(db,
                 "INSERT OR REPLACE INTO probe_endpoint VALUES"
                 "(?,?,?,?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    char *url = url_mask(e->url);
    char *info =
        e->info ? json_dumps(e->info, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    db_bind_text(st, 1, e->fp, -1, DB_STATIC);
    db_bind_text(st, 2, url, -1, DB_STATIC);
    db_bind_text(st, 3, e->model, -1, DB_STATIC);
    db_bind_int64(st, 4, e->max_model_len);
    db_bind_text(st, 5, e->has_tokenize ? "tokenize" : "calibrated", -1,
                 DB_STATIC);
    db_bind_text(st, 6, info, -1, DB_STATIC);
    db_bind_int64(st, 7, (int64_t)time(NULL));
    r = step_done(db, st, d);
    free(url);
    free(info);
    return r;
}

static void copy_col(struct db_stmt *st, int i, char *out, size_t n)
{
    const unsigned char *t = db_column_text(st, i);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

int probe_store_get(struct db *db, const char *key, struct probe_result *res,
                    struct diag *d)
{
    struct db_stmt *st;
    char oc[32];
    int r = prep(db,
                 "SELECT outcome, no_context, expected, prompt_tokens,"
                 " status, attempts, latency, finish, reply, error,"
                 " l.path_tokens, l.lost, l.drop_kind, l.drop_turns,"
                 " l.drop_ratio FROM probe_result"
                 " LEFT JOIN probe_lost l USING (key) WHERE key = ?",
                 &st, d);
    if (r)
        return r;
    db_bind_text(st, 1, key, -1, DB_STATIC);
    int rc = db_step(st);
    if (rc == DB_ROW) {
        memset(res, 0, sizeof(*res));
        copy_col(st, 0, oc, sizeof(oc));
        int o = probe_outcome_parse(oc);
        res->outcome = o < 0 ? PROBE_ERROR : (enum probe_outcome)o;
        res->no_context = db_column_int(st, 1) != 0;
        res->expected = (unsigned)db_column_int64(st, 2);
        res->prompt_tokens = (long)db_column_int64(st, 3);
        res->status = (long)db_column_int64(st, 4);
        res->attempts = (unsigned)db_column_int(st, 5);
        res->latency = db_column_double(st, 6);
        copy_col(st, 7, res->finish, sizeof(res->finish));
        copy_col(st, 8, res->reply, sizeof(res->reply));
        copy_col(st, 9, res->error, sizeof(res->error));
        res->path_tokens = (unsigned)db_column_int64(st, 10);
        res->lost = db_column_int(st, 11) != 0;
        copy_col(st, 12, oc, sizeof(oc));
        for (int k = 1; k < PROBE_DROP_COUNT; k++)
            if (!strcmp(oc, probe_drop_name(k)))
                res->drop = k;
        res->drop_turns = (unsigned)db_column_int(st, 13);
        res->drop_ratio = db_column_double(st, 14);
        snprintf(res->key, sizeof(res->key), "%s", key);
        res->done = true;
        res->cached = true;
        r = 1;
    } else if (rc != DB_DONE) {
        r = diag_set(d, EIO, "store: %s", db_errmsg(db));
    }
    db_finalize(st);
    return r;
}

int probe_store_put(struct db *db, const char *endpoint_fp,
                    const struct probe_spec *s, const struct probe_result *res,
                    struct diag *d)
{
    struct db_stmt *st;
    char seed[24];
    int r = prep(db,
                 "INSERT OR REPLACE INTO probe_result VALUES"
                 "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)s->seed);
    db_bind_text(st, 1, res->key, -1, DB_STATIC);
    db_bind_text(st, 2, endpoint_fp, -1, DB_STATIC);
    db_bind_text(st, 3, probe_kind_name(s->kind), -1, DB_STATIC);
    db_bind_int64(st, 4, s->length);
    db_bind_int64(st, 5, s->target);
    db_bind_int(st, 6, s->depth);
    db_bind_int(st, 7, s->variant);
    db_bind_double(st, 8, s->temperature);
    db_bind_int64(st, 9, s->rep);
    db_bind_text(st, 10, seed, -1, DB_STATIC);
    db_bind_int64(st, 11, res->expected);
    db_bind_int64(st, 12, res->prompt_tokens);
    db_bind_text(st, 13, probe_outcome_name(res->outcome), -1, DB_STATIC);
    db_bind_int(st, 14, res->no_context);
    db_bind_text(st, 15, res->finish, -1, DB_STATIC);
    db_bind_int64(st, 16, res->status);
    db_bind_int(st, 17, (int)res->attempts);
    db_bind_double(st, 18, res->latency);
    db_bind_text(st, 19, res->reply, -1, DB_STATIC);
    db_bind_text(st, 20, res->error, -1, DB_STATIC);
    db_bind_int64(st, 21, (int64_t)time(NULL));
    r = step_done(db, st, d);
    if (r || (!res->path_tokens && !res->lost))
        return r;
    r = prep(db, "INSERT OR REPLACE INTO probe_lost VALUES(?,?,?,?,?,?)", &st,
             d);
    if (r)
        return r;
    db_bind_text(st, 1, res->key, -1, DB_STATIC);
    db_bind_int64(st, 2, res->path_tokens);
    db_bind_int(st, 3, res->lost);
    db_bind_text(st, 4, probe_drop_name(res->drop), -1, DB_STATIC);
    db_bind_int(st, 5, (int)res->drop_turns);
    db_bind_double(st, 6, res->drop_ratio);
    return step_done(db, st, d);
}

int probe_store_canary(struct db *db, const struct probe_endpoint *e,
                       struct diag *d)
{
    struct db_stmt *st;
    if (!e->canary_done)
        return 0;
    int r =
        prep(db, "INSERT OR REPLACE INTO probe_canary VALUES(?,?,?,?,?,?,?,?)",
             &st, d);
    if (r)
        return r;
    db_bind_text(st, 1, e->fp, -1, DB_STATIC);
    db_bind_text(st, 2, e->info_fp, -1, DB_STATIC);
    db_bind_int64(st, 3, e->canary_length);
    db_bind_int64(st, 4, e->canary_status);
    db_bind_int64(st, 5, e->canary_prompt_tokens);
    db_bind_text(st, 6, e->canary_answer, -1, DB_STATIC);
    db_bind_int(st, 7, e->canary_deterministic);
    db_bind_int64(st, 8, (int64_t)time(NULL));
    return step_done(db, st, d);
}

/* One integer from a query with one text parameter; 0 when no row. */
static long long query_int(struct db *db, const char *sql, const char *arg,
                           struct diag *d)
{
    struct db_stmt *st;
    if (prep(db, sql, &st, d))
        return -1;
    db_bind_text(st, 1, arg, -1, DB_STATIC);
    int rc = db_step(st);
    long long v = rc == DB_ROW ? db_column_int64(st, 0) : 0;
    if (rc != DB_ROW && rc != DB_DONE)
        v = diag_set(d, EIO, "store: %s", db_errmsg(db));
    db_finalize(st);
    return v;
}

long probe_store_canary_length(struct db *db, const char *info_fp,
                               struct diag *d)
{
    return (long)query_int(db,
                           "SELECT length FROM probe_canary WHERE info_fp = ?"
                           " ORDER BY seen ASC, rowid ASC LIMIT 1",
                           info_fp, d);
}

long probe_store_results(struct db *db, const char *fp, struct diag *d)
{
    return (long)query_int(
        db, "SELECT count(*) FROM probe_result WHERE endpoint_fp = ?", fp, d);
}

int probe_store_other_canary(struct db *db, const struct probe_endpoint *e,
                             struct probe_endpoint *other, long *results,
                             struct diag *d)
{
    struct db_stmt *st;
    int r = prep(db,
                 "SELECT fp, length, status, prompt_tokens, answer,"
                 " deterministic, n FROM (SELECT c.fp, c.length, c.status,"
                 " c.prompt_tokens, c.answer, c.deterministic, c.seen,"
                 " (SELECT count(*) FROM probe_result p"
                 " WHERE p.endpoint_fp = c.fp) AS n FROM probe_canary c"
                 " WHERE c.info_fp = ? AND c.fp != ?) AS o WHERE n > 0"
                 " ORDER BY seen DESC LIMIT 1",
                 &st, d);
    if (r)
        return r;
    db_bind_text(st, 1, e->info_fp, -1, DB_STATIC);
    db_bind_text(st, 2, e->fp, -1, DB_STATIC);
    int rc = db_step(st);
    if (rc == DB_ROW) {
        copy_col(st, 0, other->fp, sizeof(other->fp));
        other->canary_length = (unsigned)db_column_int64(st, 1);
        other->canary_status = (long)db_column_int64(st, 2);
        other->canary_prompt_tokens = (long)db_column_int64(st, 3);
        copy_col(st, 4, other->canary_answer, sizeof(other->canary_answer));
        other->canary_deterministic = db_column_int(st, 5) != 0;
        other->canary_done = true;
        *results = (long)db_column_int64(st, 6);
        r = 1;
    } else if (rc != DB_DONE) {
        r = diag_set(d, EIO, "store: %s", db_errmsg(db));
    }
    db_finalize(st);
    return r;
}

int probe_store_run(struct db *db, const char *endpoint_fp,
                    const char *baseline_fp, json_t *summary, long long *id,
                    struct diag *d)
{
    struct db_stmt *st;
    int r = prep(db,
                 "INSERT INTO probe_run(created, endpoint_fp,"
                 " baseline_fp, summary) VALUES(?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    char *sum =
        summary ? json_dumps(summary, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    db_bind_int64(st, 1, (int64_t)time(NULL));
    db_bind_text(st, 2, endpoint_fp, -1, DB_STATIC);
    db_bind_text(st, 3, baseline_fp, -1, DB_STATIC);
    db_bind_text(st, 4, sum, -1, DB_STATIC);
    r = step_done(db, st, d);
    if (!r && id)
        *id = db_last_insert_rowid(db);
    free(sum);
    return r;
}

static const struct store_run_sql run_sql = {
    .table = "probe_run",
    .noun = "probe run",
    .one = "SELECT id, created, summary FROM probe_run WHERE id=?",
    .last = "SELECT id, created, summary FROM probe_run ORDER BY id DESC "
            "LIMIT 1",
};

int probe_store_run_get(struct db *db, int64_t id, struct store_run *out,
                        struct diag *d)
{
    return store_run_get(db, &run_sql, id, out, d);
}
