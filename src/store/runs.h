/*
 * store/runs: reading back one stored run of a result table. Probe's
 * probe_run and probe_live_run and drift's drift_run share one shape
 * (id INTEGER PRIMARY KEY, created INTEGER unix seconds, summary TEXT
 * holding the run's JSON document); each owner keeps its own SQL and calls
 * store_run_get with it, so a table's SQL lives beside its CREATE.
 */
#ifndef STORE_RUNS_H
#define STORE_RUNS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "store/db.h"

/* A result table and its two queries, each selecting (id, created,
 * summary): `one` with the id bound as ?1, `last` the latest row. */
struct store_run_sql {
    const char *table;
    const char *noun; /* "probe run": for messages */
    const char *one, *last;
};

/* One stored run. */
struct store_run {
    int64_t id;
    int64_t created; /* unix seconds */
    json_t *summary; /* new reference */
};

/* The run with id (> 0) or the latest (0). -ENOENT when the table is
 * missing ("no NOUN in the store") or holds no such row, -EIO on a store
 * error or a summary that is not JSON; d says which. */
int store_run_get(struct db *db, const struct store_run_sql *q, int64_t id,
                  struct store_run *out, struct diag *d);

#endif
