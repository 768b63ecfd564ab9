/*
 * drift store: the tables `fidelity drift` keeps in the shared SQLite store
 * (store/store.h): one row per run in drift_run with both servers'
 * fingerprints and the JSON summary, one row per bucket in drift_bucket.
 * A store written before these names (drift_runs with started_at,
 * drift_buckets) is renamed in place when opened here; its rows stay.
 * Secrets never reach these rows: API keys and headers are not stored, and
 * a user:password part of a URL is replaced by "***".
 */
#ifndef DRIFT_DSTORE_H
#define DRIFT_DSTORE_H

#include <jansson.h>
#include <stdint.h>

#include "core/diag.h"
#include "store/db.h"

/* CREATE TABLE IF NOT EXISTS for drift's tables, after renaming an older
 * store's tables to the current names. */
int drift_store_schema(struct db *db, struct diag *d);
/* Saves the summary written by drift_report_json(); *run_id gets the new
 * row's id. -EIO with d holding SQLite's message on failure. */
int drift_store_save(struct db *db, const json_t *summary, int64_t *run_id,
                     struct diag *d);
struct store_run;
/* The stored run id (0: the latest) from drift_run, as store_run_get
 * (store/runs.h) reads it: -ENOENT when there is none. An older store is
 * renamed first when it can be written (a read-only one reads as empty). */
int drift_store_run_get(struct db *db, int64_t id, struct store_run *out,
                        struct diag *d);

#endif
