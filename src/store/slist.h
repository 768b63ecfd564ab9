/*
 * store/slist: the rows of `fidelity sessions` kept beside the store, in
 * DB-sessions, so that a listing of an unchanged store reads one small
 * file instead of loading and regrouping every exchange. The rows are
 * valid while the store holds the exchanges they were computed from: the
 * mark is their number and the largest id, as fidelity appends exchanges
 * and never changes or removes one, and the store's tokens (xchg.c: a
 * random one from its creation, one more per row of exchanges or blobs
 * another tool changed or removed through SQLite, counted and the last
 * one kept), which tell another store put in its place and an edited one
 * from the store the rows came from. A write to another table, such
 * as a probe run, or the WAL's checkpoint when a writer closes, leaves the
 * rows valid; and they are for the same version (the caller's name for
 * the build that computed them: another build may group or count
 * differently). Bytes changed under SQLite (bit rot) are not noticed
 * here; `audit` reads every row. A PostgreSQL store, or a read-only
 * SQLite copy without the triggers, has no mark (-ENOENT): its listing is
 * computed each time. What the rows hold is the caller's (a JSON text).
 */
#ifndef STORE_SLIST_H
#define STORE_SLIST_H

#include <stddef.h>

#include "core/diag.h"

#define STORE_SLIST_MARK_MAX 256

/* The mark of the store at db_path now (the number of its exchanges, the
 * largest id, the store's tokens) into mark[STORE_SLIST_MARK_MAX]. 0; -ENOENT
 * when the store has no file, is a PostgreSQL URL or has no edit count;
 * -EIO when it cannot be opened or read. */
int store_slist_mark(const char *db_path, char *mark);
/* The rows kept for version and mark into *rows (fresh): 1; 0 when none
 * are kept for them (never computed, another build, or the store has
 * changed since). Never fails otherwise: a file that cannot be read is
 * none. */
int store_slist_get(const char *db_path, const char *version, const char *mark,
                    char **rows);
/* Keeps rows for version and mark (replacing what was kept; written to a
 * temporary file and renamed). 0, or -errno with d (a folder without
 * write access, say: the listing is then computed again next time). */
int store_slist_put(const char *db_path, const char *version, const char *mark,
                    const char *rows, struct diag *d);

#endif
