/*
 * drift store: the tables `fidelity drift` keeps in the shared SQLite store
 * (store/store.h): one row per run in drift_runs with both servers'
 * fingerprints and the JSON summary, one row per bucket in drift_buckets.
 * Secrets never reach these rows: API keys and headers are not stored, and
 * a user:password part of a URL is replaced by "***".
 */
#ifndef DRIFT_DSTORE_H
#define DRIFT_DSTORE_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

#include "core/diag.h"

/* CREATE TABLE IF NOT EXISTS for drift's tables. */
int drift_store_schema(sqlite3 *db, struct diag *d);
/* Saves the summary written by drift_report_json(); *run_id gets the new
 * row's id. -EIO with d holding SQLite's message on failure. */
int drift_store_save(sqlite3 *db, const json_t *summary, int64_t *run_id,
                     struct diag *d);

#endif
