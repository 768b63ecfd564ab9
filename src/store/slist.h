/*
 * store/slist: the rows of `fidelity sessions` kept beside the store, in
 * DB-sessions, so that a listing of an unchanged store reads one small
 * file instead of loading and regrouping every exchange. The rows are
 * valid while the store's files are as they were when the rows were
 * computed: the database file and its WAL (device, inode, size and
 * modification time; any write through SQLite changes one of them), and
 * for the same version (the caller's name for the build that computed
 * them: another build may group or count differently). A file changed
 * without a write through SQLite (bit rot) is not noticed here; `audit`
 * reads every row. What the rows hold is the caller's (a JSON text).
 */
#ifndef STORE_SLIST_H
#define STORE_SLIST_H

#include <stddef.h>

#include "core/diag.h"

#define STORE_SLIST_MARK_MAX 256

/* The mark of the store at db_path now (its file and its WAL) into
 * mark[STORE_SLIST_MARK_MAX]. 0, or -ENOENT when the store has no file. */
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
