/*
 * store: the database every command shares, behind the db interface
 * (db.h): a SQLite file (WAL mode; the embedded default) or a PostgreSQL
 * database named by a "postgresql://" URL. The commands default to
 * $FIDELITY_DB, else STORE_DEFAULT_PATH, in cli_default_db. This file
 * opens it and runs schema statements; each subsystem owns its own tables
 * and keeps their CREATE statements beside its code.
 */
#ifndef STORE_STORE_H
#define STORE_STORE_H

#include <stdbool.h>

#include "core/diag.h"
#include "store/db.h"

/* The version of the store's layout, kept in its store_meta table: 1 had
 * one intake frontier (the table `intake`), 2 one per intake log
 * (intake_log). A store of an older version is migrated in place as its
 * tables are opened (each subsystem's schema call); one of a newer version
 * is refused, as this fidelity cannot tell what it would break. */
#define STORE_SCHEMA_VERSION 2

/* The store's file when neither --db nor $FIDELITY_DB names one. */
#define STORE_DEFAULT_PATH "fidelity.db"
/* Opens (creating) target: a SQLite file in WAL mode with a busy timeout,
 * or a PostgreSQL database, and records STORE_SCHEMA_VERSION in it (when
 * it can be written). On error *db is NULL, d names the store (a URL's
 * password masked) and the reason, and -EIO is returned; -EPROTO when the
 * store was written by a newer fidelity. */
int store_open(const char *target, struct db **db, struct diag *d);
/* store_open for a connection that one thread at a time uses (the caller
 * orders the threads that take turns): for SQLite its multi-thread mode
 * (SQLITE_OPEN_NOMUTEX), without the connection mutex taken around every
 * call that the default serialized mode adds. */
int store_open_unshared(const char *target, struct db **db, struct diag *d);
void store_close(struct db *db);
/* Whether target names a store that may exist: a PostgreSQL URL always
 * (the server says), a SQLite file when there is one. */
bool store_exists(const char *target);
/* The path of a file of the store's own on this host (the spill file, the
 * intake log), fresh: target + suffix for a SQLite file; for a PostgreSQL
 * database, which is elsewhere, "fidelity-pg-HASH" + suffix in the
 * current directory, HASH the hex of the hash of the URL with its password
 * masked (url_mask). */
char *store_local_path(const char *target, const char *suffix);
/* target as it may be shown: a URL's password masked (url_mask); fresh. */
char *store_shown(const char *target);
/* Runs one or more SQL statements with no results. */
int store_exec(struct db *db, const char *sql, struct diag *d);

#endif
