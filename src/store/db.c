/*
 * db: the dispatch of the store interface to the backend a connection was
 * opened with, and what both backends share.
 */
#include "store/db.h"

#include <string.h>

#include "store/db_int.h"

bool db_is_url(const char *target)
{
    return target && (!strncmp(target, "postgresql://", 13) ||
                      !strncmp(target, "postgres://", 11));
}

enum db_backend db_backend(const struct db *db)
{
    return db->ops->backend;
}

int db_prepare(struct db *db, const char *sql, struct db_stmt **st)
{
    return db->ops->prepare(db, sql, false, st);
}

int db_prepare_persistent(struct db *db, const char *sql, struct db_stmt **st)
{
    return db->ops->prepare(db, sql, true, st);
}

int db_bind_int64(struct db_stmt *st, int i, int64_t v)
{
    return st->ops->bind_int64(st, i, v);
}

int db_bind_int(struct db_stmt *st, int i, int v)
{
    return st->ops->bind_int64(st, i, v);
}

int db_bind_double(struct db_stmt *st, int i, double v)
{
    return st->ops->bind_double(st, i, v);
}

int db_bind_text(struct db_stmt *st, int i, const char *s, int n,
                 db_destructor how)
{
    return st->ops->bind_text(st, i, s, n, how);
}

int db_bind_blob(struct db_stmt *st, int i, const void *p, int n,
                 db_destructor how)
{
    return st->ops->bind_blob(st, i, p, n, how);
}

int db_bind_null(struct db_stmt *st, int i)
{
    return st->ops->bind_null(st, i);
}

int db_step(struct db_stmt *st)
{
    return st->ops->step(st);
}

int64_t db_column_int64(struct db_stmt *st, int i)
{
    return st->ops->column_int64(st, i);
}

int db_column_int(struct db_stmt *st, int i)
{
    return (int)st->ops->column_int64(st, i);
}

double db_column_double(struct db_stmt *st, int i)
{
    return st->ops->column_double(st, i);
}

const unsigned char *db_column_text(struct db_stmt *st, int i)
{
    return st->ops->column_text(st, i);
}

const void *db_column_blob(struct db_stmt *st, int i)
{
    return st->ops->column_blob(st, i);
}

int db_column_bytes(struct db_stmt *st, int i)
{
    return st->ops->column_bytes(st, i);
}

int db_column_type(struct db_stmt *st, int i)
{
    return st->ops->column_type(st, i);
}

int db_reset(struct db_stmt *st)
{
    return st->ops->reset(st);
}

int db_clear_bindings(struct db_stmt *st)
{
    return st->ops->clear_bindings(st);
}

int db_finalize(struct db_stmt *st)
{
    return st ? st->ops->finalize(st) : DB_OK;
}

int db_exec(struct db *db, const char *sql, char **err)
{
    if (err)
        *err = NULL;
    return db->ops->exec(db, sql, err);
}

int db_read_begin(struct db *db, char **err)
{
    return db_exec(db, db->ops->read_begin, err);
}

int db_read_end(struct db *db)
{
    return db_exec(db, "COMMIT", NULL);
}

const char *db_errmsg(struct db *db)
{
    return db->ops->errmsg(db);
}

const char *db_errstr(int code)
{
    switch (code) {
    case DB_OK:
        return "not an error";
    case DB_ABORT:
        return "query aborted";
    case DB_BUSY:
        return "database is locked";
    case DB_LOCKED:
        return "database table is locked";
    case DB_READONLY:
        return "attempt to write a readonly database";
    case DB_CONSTRAINT:
        return "constraint failed";
    case DB_ROW:
        return "another row available";
    case DB_DONE:
        return "no more rows available";
    default:
        return "database error";
    }
}

int64_t db_last_insert_rowid(struct db *db)
{
    return db->ops->last_insert_rowid(db);
}

int db_changes(struct db *db)
{
    return db->ops->changes(db);
}

void db_busy_timeout(struct db *db, int ms)
{
    db->ops->busy_timeout(db, ms);
}

bool db_is_readonly(struct db *db)
{
    return db->ops->is_readonly(db);
}

bool db_has_table(struct db *db, const char *name)
{
    return db->ops->has_table(db, name);
}

bool db_has_column(struct db *db, const char *table, const char *column)
{
    return db->ops->has_column(db, table, column);
}

unsigned int db_data_version(struct db *db)
{
    return db->ops->data_version(db);
}

bool db_is_lost(struct db *db)
{
    return db->ops->is_lost(db);
}

int db_wal_hook(struct db *db, int (*fn)(void *arg, int pages), void *arg)
{
    return db->ops->wal_hook(db, fn, arg);
}

int db_checkpoint(struct db *db)
{
    return db->ops->checkpoint(db);
}

void db_close(struct db *db)
{
    if (db)
        db->ops->close(db);
}
