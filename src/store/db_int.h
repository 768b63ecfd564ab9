/*
 * db_int: what the db interface's dispatch (db.c) and its two backends
 * (db_sqlite.c, db_pg.c) share: the table of operations each backend
 * fills, and the heads of a connection and a statement, which each
 * backend's own structs begin with.
 */
#ifndef STORE_DB_INT_H
#define STORE_DB_INT_H

#include "core/diag.h"
#include "store/db.h"

struct db_ops {
    enum db_backend backend;
    int (*prepare)(struct db *db, const char *sql, bool persistent,
                   struct db_stmt **st);
    int (*bind_int64)(struct db_stmt *st, int i, int64_t v);
    int (*bind_double)(struct db_stmt *st, int i, double v);
    int (*bind_text)(struct db_stmt *st, int i, const char *s, int n,
                     db_destructor how);
    int (*bind_blob)(struct db_stmt *st, int i, const void *p, int n,
                     db_destructor how);
    int (*bind_null)(struct db_stmt *st, int i);
    int (*step)(struct db_stmt *st);
    int64_t (*column_int64)(struct db_stmt *st, int i);
    double (*column_double)(struct db_stmt *st, int i);
    const unsigned char *(*column_text)(struct db_stmt *st, int i);
    const void *(*column_blob)(struct db_stmt *st, int i);
    int (*column_bytes)(struct db_stmt *st, int i);
    int (*column_type)(struct db_stmt *st, int i);
    int (*reset)(struct db_stmt *st);
    int (*clear_bindings)(struct db_stmt *st);
    int (*finalize)(struct db_stmt *st);
    int (*exec)(struct db *db, const char *sql, char **err);
    /* the statement that opens a read-only snapshot (db_read_begin) */
    const char *read_begin;
    const char *(*errmsg)(struct db *db);
    int64_t (*last_insert_rowid)(struct db *db);
    int (*changes)(struct db *db);
    void (*busy_timeout)(struct db *db, int ms);
    bool (*is_readonly)(struct db *db);
    bool (*has_table)(struct db *db, const char *name);
    bool (*has_column)(struct db *db, const char *table, const char *column);
    unsigned int (*data_version)(struct db *db);
    bool (*is_lost)(struct db *db);
    int (*wal_hook)(struct db *db, int (*fn)(void *arg, int pages), void *arg);
    int (*checkpoint)(struct db *db);
    void (*close)(struct db *db);
};

struct db {
    const struct db_ops *ops;
};

struct db_stmt {
    const struct db_ops *ops;
};

/* Open target with one backend. shared: the connection may be used by
 * several threads at once (SQLite's serialized mode); otherwise one thread
 * at a time. On error *db is NULL, d says why, and -EIO is returned. */
int db_sqlite_open(const char *path, bool shared, struct db **db,
                   struct diag *d);
int db_pg_open(const char *url, struct db **db, struct diag *d);

#endif
