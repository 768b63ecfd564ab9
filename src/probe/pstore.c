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

int probe_store_init(sqlite3 *db, struct diag *d)
{
    return store_exec(db, schema, d);
}

static int prep(sqlite3 *db, const char *sql, sqlite3_stmt **st, struct diag *d)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    return 0;
}

static int step_done(sqlite3 *db, sqlite3_stmt *st, struct diag *d)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    return 0;
}

int probe_store_endpoint(sqlite3 *db, const struct probe_endpoint *e,
                         struct diag *d)
{
    sqlite3_stmt *st;
    int r = prep(db,
                 "INSERT OR REPLACE INTO probe_endpoint VALUES"
                 "(?,?,?,?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    char *url = url_mask(e->url);
    char *info =
        e->info ? json_dumps(e->info, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sqlite3_bind_text(st, 1, e->fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, url, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, e->model, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, e->max_model_len);
    sqlite3_bind_text(st, 5, e->has_tokenize ? "tokenize" : "calibrated", -1,
                      SQLITE_STATIC);
    sqlite3_bind_text(st, 6, info, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)time(NULL));
    r = step_done(db, st, d);
    free(url);
    free(info);
    return r;
}

static void copy_col(sqlite3_stmt *st, int i, char *out, size_t n)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, n, "%s", t ? (const char *)t : "");
}

int probe_store_get(sqlite3 *db, const char *key, struct probe_result *res,
                    struct diag *d)
{
    sqlite3_stmt *st;
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
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        memset(res, 0, sizeof(*res));
        copy_col(st, 0, oc, sizeof(oc));
        int o = probe_outcome_parse(oc);
        res->outcome = o < 0 ? PROBE_ERROR : (enum probe_outcome)o;
        res->no_context = sqlite3_column_int(st, 1) != 0;
        res->expected = (unsigned)sqlite3_column_int64(st, 2);
        res->prompt_tokens = (long)sqlite3_column_int64(st, 3);
        res->status = (long)sqlite3_column_int64(st, 4);
        res->attempts = (unsigned)sqlite3_column_int(st, 5);
        res->latency = sqlite3_column_double(st, 6);
        copy_col(st, 7, res->finish, sizeof(res->finish));
        copy_col(st, 8, res->reply, sizeof(res->reply));
        copy_col(st, 9, res->error, sizeof(res->error));
        res->path_tokens = (unsigned)sqlite3_column_int64(st, 10);
        res->lost = sqlite3_column_int(st, 11) != 0;
        copy_col(st, 12, oc, sizeof(oc));
        for (int k = 1; k < PROBE_DROP_COUNT; k++)
            if (!strcmp(oc, probe_drop_name(k)))
                res->drop = k;
        res->drop_turns = (unsigned)sqlite3_column_int(st, 13);
        res->drop_ratio = sqlite3_column_double(st, 14);
        snprintf(res->key, sizeof(res->key), "%s", key);
        res->done = true;
        res->cached = true;
        r = 1;
    } else if (rc != SQLITE_DONE) {
        r = diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return r;
}

int probe_store_put(sqlite3 *db, const char *endpoint_fp,
                    const struct probe_spec *s, const struct probe_result *res,
                    struct diag *d)
{
    sqlite3_stmt *st;
    char seed[24];
    int r = prep(db,
                 "INSERT OR REPLACE INTO probe_result VALUES"
                 "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)s->seed);
    sqlite3_bind_text(st, 1, res->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, endpoint_fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, probe_kind_name(s->kind), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, s->length);
    sqlite3_bind_int64(st, 5, s->target);
    sqlite3_bind_int(st, 6, s->depth);
    sqlite3_bind_int(st, 7, s->variant);
    sqlite3_bind_double(st, 8, s->temperature);
    sqlite3_bind_int64(st, 9, s->rep);
    sqlite3_bind_text(st, 10, seed, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 11, res->expected);
    sqlite3_bind_int64(st, 12, res->prompt_tokens);
    sqlite3_bind_text(st, 13, probe_outcome_name(res->outcome), -1,
                      SQLITE_STATIC);
    sqlite3_bind_int(st, 14, res->no_context);
    sqlite3_bind_text(st, 15, res->finish, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 16, res->status);
    sqlite3_bind_int(st, 17, (int)res->attempts);
    sqlite3_bind_double(st, 18, res->latency);
    sqlite3_bind_text(st, 19, res->reply, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 20, res->error, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 21, (sqlite3_int64)time(NULL));
    r = step_done(db, st, d);
    if (r || (!res->path_tokens && !res->lost))
        return r;
    r = prep(db, "INSERT OR REPLACE INTO probe_lost VALUES(?,?,?,?,?,?)", &st,
             d);
    if (r)
        return r;
    sqlite3_bind_text(st, 1, res->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, res->path_tokens);
    sqlite3_bind_int(st, 3, res->lost);
    sqlite3_bind_text(st, 4, probe_drop_name(res->drop), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, (int)res->drop_turns);
    sqlite3_bind_double(st, 6, res->drop_ratio);
    return step_done(db, st, d);
}

int probe_store_canary(sqlite3 *db, const struct probe_endpoint *e,
                       struct diag *d)
{
    sqlite3_stmt *st;
    if (!e->canary_done)
        return 0;
    int r =
        prep(db, "INSERT OR REPLACE INTO probe_canary VALUES(?,?,?,?,?,?,?,?)",
             &st, d);
    if (r)
        return r;
    sqlite3_bind_text(st, 1, e->fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, e->info_fp, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, e->canary_length);
    sqlite3_bind_int64(st, 4, e->canary_status);
    sqlite3_bind_int64(st, 5, e->canary_prompt_tokens);
    sqlite3_bind_text(st, 6, e->canary_answer, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, e->canary_deterministic);
    sqlite3_bind_int64(st, 8, (sqlite3_int64)time(NULL));
    return step_done(db, st, d);
}

/* One integer from a query with one text parameter; 0 when no row. */
static long long query_int(sqlite3 *db, const char *sql, const char *arg,
                           struct diag *d)
{
    sqlite3_stmt *st;
    if (prep(db, sql, &st, d))
        return -1;
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    long long v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        v = diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

long probe_store_canary_length(sqlite3 *db, const char *info_fp, struct diag *d)
{
    return (long)query_int(db,
                           "SELECT length FROM probe_canary WHERE info_fp = ?"
                           " ORDER BY seen ASC, rowid ASC LIMIT 1",
                           info_fp, d);
}

long probe_store_results(sqlite3 *db, const char *fp, struct diag *d)
{
    return (long)query_int(
        db, "SELECT count(*) FROM probe_result WHERE endpoint_fp = ?", fp, d);
}

int probe_store_other_canary(sqlite3 *db, const struct probe_endpoint *e,
                             struct probe_endpoint *other, long *results,
                             struct diag *d)
{
    sqlite3_stmt *st;
    int r = prep(db,
                 "SELECT c.fp, c.length, c.status, c.prompt_tokens, c.answer,"
                 " c.deterministic, (SELECT count(*) FROM probe_result p"
                 " WHERE p.endpoint_fp = c.fp) AS n FROM probe_canary c"
                 " WHERE c.info_fp = ? AND c.fp != ? AND n > 0"
                 " ORDER BY c.seen DESC LIMIT 1",
                 &st, d);
    if (r)
        return r;
    sqlite3_bind_text(st, 1, e->info_fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, e->fp, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        copy_col(st, 0, other->fp, sizeof(other->fp));
        other->canary_length = (unsigned)sqlite3_column_int64(st, 1);
        other->canary_status = (long)sqlite3_column_int64(st, 2);
        other->canary_prompt_tokens = (long)sqlite3_column_int64(st, 3);
        copy_col(st, 4, other->canary_answer, sizeof(other->canary_answer));
        other->canary_deterministic = sqlite3_column_int(st, 5) != 0;
        other->canary_done = true;
        *results = (long)sqlite3_column_int64(st, 6);
        r = 1;
    } else if (rc != SQLITE_DONE) {
        r = diag_set(d, EIO, "store: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return r;
}

int probe_store_run(sqlite3 *db, const char *endpoint_fp,
                    const char *baseline_fp, json_t *summary, long long *id,
                    struct diag *d)
{
    sqlite3_stmt *st;
    int r = prep(db,
                 "INSERT INTO probe_run(created, endpoint_fp,"
                 " baseline_fp, summary) VALUES(?,?,?,?)",
                 &st, d);
    if (r)
        return r;
    char *sum =
        summary ? json_dumps(summary, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)time(NULL));
    sqlite3_bind_text(st, 2, endpoint_fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, baseline_fp, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, sum, -1, SQLITE_STATIC);
    r = step_done(db, st, d);
    if (!r && id)
        *id = sqlite3_last_insert_rowid(db);
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

int probe_store_run_get(sqlite3 *db, int64_t id, struct store_run *out,
                        struct diag *d)
{
    return store_run_get(db, &run_sql, id, out, d);
}
