/*
 * db: the one interface every store reader and writer talks to, with two
 * backends behind it: SQLite (db_sqlite.c, the embedded default: one file,
 * no server) and PostgreSQL through libpq (db_pg.c, one database a team
 * shares). store_open (store.h) picks the backend from the target: a
 * "postgresql://" or "postgres://" URL is PostgreSQL, anything else is a
 * SQLite file's path.
 *
 * The calls mirror SQLite's C API (prepare, bind, step, column, finalize),
 * which the code was written against, and keep its numbering of result
 * codes and column types, so the SQLite backend passes them through. The
 * SQL the code writes is SQLite's; what PostgreSQL spells differently
 * (placeholders, column types, upserts, a few functions) is translated in
 * db_pg.c and nowhere else. What only one backend has (SQLite's WAL
 * checkpoints and data version) is a call here that the other answers with
 * -ENOTSUP or a neutral value, so callers need not know which they talk to.
 */
#ifndef STORE_DB_H
#define STORE_DB_H

#include <stdbool.h>
#include <stdint.h>

struct db;      /* a connection */
struct db_stmt; /* a prepared statement of one connection */

/* Result codes: SQLite's numbers. */
enum {
    DB_OK = 0,
    DB_ERROR = 1,
    DB_ABORT = 4,
    DB_BUSY = 5,
    DB_LOCKED = 6,
    DB_READONLY = 8,
    DB_CONSTRAINT = 19,
    DB_ROW = 100,
    DB_DONE = 101,
};

/* Column types: SQLite's numbers. */
enum {
    DB_INTEGER = 1,
    DB_FLOAT = 2,
    DB_TEXT = 3,
    DB_BLOB = 4,
    DB_NULL = 5,
};

/* What a bound text or blob's memory is: DB_STATIC stays valid and
 * unchanged until the statement is reset or finalized; DB_TRANSIENT is
 * copied at once; any other function is the backend's to call on the
 * memory once it is done with it (also when the bind fails). */
typedef void (*db_destructor)(void *);
#define DB_STATIC ((db_destructor)0)
#define DB_TRANSIENT ((db_destructor)-1)

enum db_backend {
    DB_SQLITE,
    DB_POSTGRES,
};

/* Whether target names a PostgreSQL database ("postgresql://..." or
 * "postgres://...") rather than a SQLite file. */
bool db_is_url(const char *target);

enum db_backend db_backend(const struct db *db);

/* Prepares one statement. On error *st is NULL and a code other than
 * DB_OK is returned; db_errmsg(db) says why. A persistent statement is
 * one the caller keeps for many uses. */
int db_prepare(struct db *db, const char *sql, struct db_stmt **st);
int db_prepare_persistent(struct db *db, const char *sql, struct db_stmt **st);

/* Parameters are numbered from 1. n < 0: text up to its NUL. */
int db_bind_int64(struct db_stmt *st, int i, int64_t v);
int db_bind_int(struct db_stmt *st, int i, int v);
int db_bind_double(struct db_stmt *st, int i, double v);
int db_bind_text(struct db_stmt *st, int i, const char *s, int n,
                 db_destructor how);
int db_bind_blob(struct db_stmt *st, int i, const void *p, int n,
                 db_destructor how);
int db_bind_null(struct db_stmt *st, int i);

/* DB_ROW with a row to read, DB_DONE when there is none left, else an
 * error code (db_errmsg says why). */
int db_step(struct db_stmt *st);

/* The current row's columns, numbered from 0. A text or blob pointer stays
 * valid until the next step, reset or finalize. */
int64_t db_column_int64(struct db_stmt *st, int i);
int db_column_int(struct db_stmt *st, int i);
double db_column_double(struct db_stmt *st, int i);
const unsigned char *db_column_text(struct db_stmt *st, int i);
const void *db_column_blob(struct db_stmt *st, int i);
int db_column_bytes(struct db_stmt *st, int i);
int db_column_type(struct db_stmt *st, int i);

/* reset: ready to step again from the start, bindings kept. */
int db_reset(struct db_stmt *st);
int db_clear_bindings(struct db_stmt *st);
/* finalize(NULL) is a no-op. */
int db_finalize(struct db_stmt *st);

/* Runs one or more statements with no results. On error the code is
 * returned and, when err is not NULL, *err is a message to free(). */
int db_exec(struct db *db, const char *sql, char **err);

/* A consistent read: between db_read_begin and db_read_end every
 * statement sees the store as one moment left it, whatever writers commit
 * meanwhile (SQLite: a deferred transaction over the write-ahead log;
 * PostgreSQL: REPEATABLE READ, READ ONLY). Nothing may be written in
 * between. Both return the backend's code; db_read_end ends the
 * transaction whatever happened inside it. */
int db_read_begin(struct db *db, char **err);
int db_read_end(struct db *db);

const char *db_errmsg(struct db *db);
const char *db_errstr(int code);
/* The id the last INSERT on this connection gave its row's integer
 * primary key. */
int64_t db_last_insert_rowid(struct db *db);
/* Rows the last INSERT, UPDATE or DELETE changed. */
int db_changes(struct db *db);

/* How long a statement waits for another writer's lock before DB_BUSY. */
void db_busy_timeout(struct db *db, int ms);
/* Whether the store can only be read (a read-only file or server). */
bool db_is_readonly(struct db *db);
bool db_has_table(struct db *db, const char *name);
/* Whether table has a column of that name (false without the table). A
 * catalog read: it does not fail, and so never spoils an open
 * transaction. */
bool db_has_column(struct db *db, const char *table, const char *column);
/* A number that changes with every change to the store by any connection;
 * 0 when the backend cannot tell (then every cache must assume change). */
unsigned int db_data_version(struct db *db);
/* Whether the last failure was the server's going away rather than a
 * refusal of the statement: the connection is lost (the server stopped,
 * the connection was reset) or the server said it is shutting down. The
 * next statement outside a transaction connects again. A SQLite store has
 * no server: never. */
bool db_is_lost(struct db *db);

/* SQLite's write-ahead log, for record's own checkpointer: fn is called
 * after each commit with the log's size in pages; db_checkpoint copies
 * what the log holds into the file without waiting for readers. Both
 * return -ENOTSUP on a backend without one. */
int db_wal_hook(struct db *db, int (*fn)(void *arg, int pages), void *arg);
int db_checkpoint(struct db *db);

void db_close(struct db *db);

#endif
