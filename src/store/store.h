/*
 * store: the embedded SQLite database every command shares (WAL mode, one
 * file; the commands default to $FIDELITY_DB, else STORE_DEFAULT_PATH, in
 * cli_default_db). This file opens it and runs
 * schema statements; each subsystem owns its own tables and keeps their
 * CREATE statements beside its code.
 */
#ifndef STORE_STORE_H
#define STORE_STORE_H

#include <sqlite3.h>

#include "core/diag.h"

/* The store's file when neither --db nor $FIDELITY_DB names one. */
#define STORE_DEFAULT_PATH "fidelity.db"
/* Opens (creating) path in WAL mode with a busy timeout. On error *db is
 * NULL, d names the file and SQLite's reason, and -EIO is returned. */
int store_open(const char *path, sqlite3 **db, struct diag *d);
/* store_open for a connection that one thread at a time uses (the caller
 * orders the threads that take turns): SQLite's multi-thread mode
 * (SQLITE_OPEN_NOMUTEX), without the connection mutex taken around every
 * call that the default serialized mode adds. */
int store_open_unshared(const char *path, sqlite3 **db, struct diag *d);
void store_close(sqlite3 *db);
/* Runs one or more SQL statements with no results. */
int store_exec(sqlite3 *db, const char *sql, struct diag *d);

#endif
