/*
 * livestore: finished live sessions in the probe_live table, one row per
 * session keyed by probe_live_key (cell, send-reasoning, seed index, the
 * session plan, model, extra body, endpoint fingerprint), with its turns as
 * JSON. A re-run reads them back instead of playing the session again.
 * Nothing the model wrote is stored beyond the measures of each turn.
 * probe_live_run keeps each finished run's --json document, which
 * `fidelity report` draws (src/report/load.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe/live.h"
#include "store/runs.h"
#include "store/store.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS probe_live("
    " key TEXT PRIMARY KEY, endpoint_fp TEXT NOT NULL, cell TEXT NOT NULL,"
    " seed INTEGER, turns INTEGER, break_turn INTEGER, requests INTEGER,"
    " result TEXT NOT NULL, created INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS probe_live_run("
    " id INTEGER PRIMARY KEY, created INTEGER NOT NULL,"
    " endpoint_fp TEXT NOT NULL, summary TEXT NOT NULL);";

int probe_live_store_init(struct db *db, struct diag *d)
{
    return store_exec(db, schema, d);
}

json_t *probe_live_result_json(const struct probe_live_result *r)
{
    json_t *turns = json_array();
    int facts[PROBE_LIVE_FACTS]; /* -1 not asked yet, else last result */
    for (int f = 0; f < PROBE_LIVE_FACTS; f++)
        facts[f] = -1;
    for (unsigned t = 0; t < r->n_turns; t++) {
        const struct probe_live_turn *x = &r->turn[t];
        json_t *j = json_pack(
            "{s:i,s:i,s:I,s:I,s:I,s:i,s:f,s:f,s:f,s:s}", "turn", (int)t + 1,
            "requests", (int)x->requests, "prompt_tokens",
            (json_int_t)x->prompt_tokens, "reasoning_bytes",
            (json_int_t)x->reasoning, "content_bytes", (json_int_t)x->content,
            "tool_calls", (int)x->tool_calls, "gzip_ratio", x->gzip_ratio,
            "ngram_share", x->ngram_share, "reasoning_ratio",
            x->reasoning_ratio, "finish_reason", x->finish);
        if (x->asked >= 0) {
            json_object_set_new(j, "asked_fact", json_integer(x->asked));
            json_object_set_new(j, "recalled", json_boolean(x->passed));
            json_object_set_new(j, "no_context", json_boolean(x->no_context));
            if (x->asked < PROBE_LIVE_FACTS)
                facts[x->asked] = x->passed;
        }
        /* the latest answer about each fact asked so far */
        json_t *so_far = json_array();
        for (int f = 0; f < PROBE_LIVE_FACTS; f++)
            json_array_append_new(
                so_far, facts[f] < 0 ? json_null() : json_boolean(facts[f]));
        json_object_set_new(j, "facts_recalled", so_far);
        json_array_append_new(turns, j);
    }
    json_t *j =
        json_pack("{s:s,s:i,s:i,s:i,s:o}", "key", r->key, "turns_played",
                  (int)r->n_turns, "break_turn", (int)r->break_turn, "requests",
                  (int)r->requests, "turns", turns);
    if (r->error[0])
        json_object_set_new(j, "error", json_string(r->error));
    return j;
}

static double num(json_t *o, const char *k)
{
    return json_number_value(json_object_get(o, k));
}

int probe_live_result_parse(json_t *j, struct probe_live_result *r)
{
    json_t *turns = json_object_get(j, "turns"), *x;
    size_t i;
    if (!json_is_array(turns) || json_array_size(turns) > PROBE_LIVE_MAX_TURNS)
        return -EBADMSG;
    memset(r, 0, sizeof(*r));
    snprintf(r->key, sizeof(r->key), "%s",
             json_string_value(json_object_get(j, "key"))
                 ? json_string_value(json_object_get(j, "key"))
                 : "");
    r->n_turns = (unsigned)json_array_size(turns);
    r->break_turn = (unsigned)num(j, "break_turn");
    r->requests = (unsigned)num(j, "requests");
    snprintf(r->error, sizeof(r->error), "%s",
             json_string_value(json_object_get(j, "error"))
                 ? json_string_value(json_object_get(j, "error"))
                 : "");
    json_array_foreach(turns, i, x)
    {
        struct probe_live_turn *t = &r->turn[i];
        t->requests = (unsigned)num(x, "requests");
        t->prompt_tokens = (long)num(x, "prompt_tokens");
        t->reasoning = (size_t)num(x, "reasoning_bytes");
        t->content = (size_t)num(x, "content_bytes");
        t->tool_calls = (unsigned)num(x, "tool_calls");
        t->gzip_ratio = num(x, "gzip_ratio");
        t->ngram_share = num(x, "ngram_share");
        t->reasoning_ratio = num(x, "reasoning_ratio");
        snprintf(t->finish, sizeof(t->finish), "%s",
                 json_string_value(json_object_get(x, "finish_reason"))
                     ? json_string_value(json_object_get(x, "finish_reason"))
                     : "");
        json_t *a = json_object_get(x, "asked_fact");
        t->asked = json_is_integer(a) ? (int)json_integer_value(a) : -1;
        t->passed = json_is_true(json_object_get(x, "recalled"));
        t->no_context = json_is_true(json_object_get(x, "no_context"));
    }
    r->done = true;
    return 0;
}

int probe_live_store_get(struct db *db, const char *key,
                         struct probe_live_result *r, struct diag *d)
{
    struct db_stmt *st;
    if (db_prepare(db, "SELECT result FROM probe_live WHERE key=?", &st) !=
        DB_OK)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    db_bind_text(st, 1, key, -1, DB_STATIC);
    int rc = db_step(st), ret = 0;
    if (rc == DB_ROW) {
        const char *text = (const char *)db_column_text(st, 0);
        json_t *j = text ? json_loads(text, 0, NULL) : NULL;
        if (j && !probe_live_result_parse(j, r)) {
            r->cached = true;
            ret = 1;
        }
        json_decref(j);
    } else if (rc != DB_DONE) {
        ret = diag_set(d, EIO, "store: %s", db_errmsg(db));
    }
    db_finalize(st);
    return ret;
}

int probe_live_store_put(struct db *db, const char *endpoint_fp,
                         const char *cell, unsigned seed,
                         const struct probe_live_result *r, struct diag *d)
{
    struct db_stmt *st;
    if (db_prepare(db,
                   "INSERT OR REPLACE INTO probe_live VALUES"
                   "(?,?,?,?,?,?,?,?,?)",
                   &st) != DB_OK)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    json_t *j = probe_live_result_json(r);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    db_bind_text(st, 1, r->key, -1, DB_STATIC);
    db_bind_text(st, 2, endpoint_fp, -1, DB_STATIC);
    db_bind_text(st, 3, cell, -1, DB_STATIC);
    db_bind_int(st, 4, (int)seed);
    db_bind_int(st, 5, (int)r->n_turns);
    db_bind_int(st, 6, (int)r->break_turn);
    db_bind_int(st, 7, (int)r->requests);
    db_bind_text(st, 8, text, -1, DB_STATIC);
    db_bind_int64(st, 9, (int64_t)time(NULL));
    int rc = db_step(st);
    db_finalize(st);
    free(text);
    if (rc != DB_DONE)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    return 0;
}

int probe_live_store_run(struct db *db, const char *endpoint_fp,
                         const json_t *doc, long long *id, struct diag *d)
{
    struct db_stmt *st;
    if (db_prepare(db,
                   "INSERT INTO probe_live_run(created, endpoint_fp, "
                   "summary) VALUES(?,?,?)",
                   &st) != DB_OK)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    db_bind_int64(st, 1, (int64_t)time(NULL));
    db_bind_text(st, 2, endpoint_fp, -1, DB_STATIC);
    db_bind_text(st, 3, text, -1, DB_STATIC);
    int rc = db_step(st);
    db_finalize(st);
    free(text);
    if (rc != DB_DONE)
        return diag_set(d, EIO, "store: %s", db_errmsg(db));
    if (id)
        *id = db_last_insert_rowid(db);
    return 0;
}

static const struct store_run_sql run_sql = {
    .table = "probe_live_run",
    .noun = "live probe run",
    .one = "SELECT id, created, summary FROM probe_live_run WHERE id=?",
    .last = "SELECT id, created, summary FROM probe_live_run ORDER BY id "
            "DESC LIMIT 1",
};

int probe_live_store_run_get(struct db *db, int64_t id, struct store_run *out,
                             struct diag *d)
{
    return store_run_get(db, &run_sql, id, out, d);
}
