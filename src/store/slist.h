/*
 * store/slist: the rows of `fidelity sessions` kept in the store beside
 * the exchanges they describe, so that a listing reads one row instead of
 * loading and regrouping every exchange. The rows are valid while the
 * xchg table holds what it held when they were computed: the same number
 * of exchanges and the same highest id (exchanges are only appended; a
 * row taken away or added changes one of them), for the same version: the
 * caller's name for the program that computed them (rows computed by
 * another build of it may differ). What the rows hold is the caller's (a
 * JSON text).
 */
#ifndef STORE_SLIST_H
#define STORE_SLIST_H

#include <sqlite3.h>
#include <stdint.h>

#include "core/diag.h"

/* What the xchg table holds now: *n exchanges, the highest id *max_id
 * (0, 0 when empty). 0, or -EIO with d saying why (no xchg table, say). */
int store_slist_mark(sqlite3 *db, int64_t *n, int64_t *max_id, struct diag *d);
/* The rows kept for version and the mark (n, max_id) into *rows (fresh):
 * 1; 0 when none are kept for them (never computed, or the exchanges have
 * changed since); -EIO with d on a store error. */
int store_slist_get(sqlite3 *db, const char *version, int64_t n, int64_t max_id,
                    char **rows, struct diag *d);
/* Keeps rows for version and the mark taken before they were computed
 * (replacing what was kept). 0, or -EIO with d (a read-only store, say:
 * the listing is then computed again next time). */
int store_slist_put(sqlite3 *db, const char *version, int64_t n, int64_t max_id,
                    const char *rows, struct diag *d);

#endif
