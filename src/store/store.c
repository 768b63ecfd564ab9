/*
 * store: opening the store with the backend its target names.
 */
#include "store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/hash.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "store/db_int.h"
#include "store/intake.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define STORE_SCHEMA_VERSION_S STR(STORE_SCHEMA_VERSION)

/* The store's schema version: 0 when it has none recorded (new, or
 * written before the version was kept: both read as the oldest), -1 on an
 * error. */
static int64_t version_of(struct db *db)
{
    struct db_stmt *st = NULL;
    int64_t v = 0;
    if (!db_has_table(db, "store_meta"))
        return 0;
    if (db_prepare(db, "SELECT value FROM store_meta WHERE key = 'schema'",
                   &st) != DB_OK)
        return -1;
    int rc = db_step(st);
    if (rc == DB_ROW)
        v = db_column_int64(st, 0);
    else if (rc != DB_DONE)
        v = -1;
    db_finalize(st);
    return v;
}

/* Refuses a store of a newer version; records this one's in any other
 * that can be written (a read-only store is read as it is). */
static int check_version(struct db *db, const char *target, struct diag *d)
{
    int64_t v = version_of(db);
    if (v > STORE_SCHEMA_VERSION) {
        char *shown = url_mask(target);
        diag_set(d, EPROTO,
                 "the store '%s' has layout version %lld, newer than this "
                 "fidelity's (%d): use the fidelity that wrote it, or a newer "
                 "one",
                 shown, (long long)v, STORE_SCHEMA_VERSION);
        free(shown);
        return -EPROTO;
    }
    if (v == STORE_SCHEMA_VERSION || db_is_readonly(db))
        return 0;
    /* 1 -> 2: the one intake frontier becomes one per log */
    struct diag ignored = {{0}};
    if (intake_schema(db, &ignored))
        return 0; /* left for a writer to migrate, version unchanged */
    db_exec(db,
            "CREATE TABLE IF NOT EXISTS store_meta ("
            " key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
            "INSERT OR REPLACE INTO store_meta (key, value)"
            " VALUES ('schema', " STORE_SCHEMA_VERSION_S ")",
            NULL);
    return 0;
}

static int open_as(const char *target, bool shared, struct db **db,
                   struct diag *d)
{
    int rc = db_is_url(target) ? db_pg_open(target, db, d)
                               : db_sqlite_open(target, shared, db, d);
    if (rc)
        return rc;
    rc = check_version(*db, target, d);
    if (rc) {
        db_close(*db);
        *db = NULL;
    }
    return rc;
}

int store_open(const char *target, struct db **db, struct diag *d)
{
    return open_as(target, true, db, d);
}

int store_open_unshared(const char *target, struct db **db, struct diag *d)
{
    return open_as(target, false, db, d);
}

bool store_exists(const char *target)
{
    struct stat st;
    return db_is_url(target) || stat(target, &st) == 0;
}

char *store_local_path(const char *target, const char *suffix)
{
    if (!db_is_url(target))
        return xasprintf("%s%s", target, suffix);
    char *shown = url_mask(target);
    uint64_t h = hash64(shown, strlen(shown), 0);
    free(shown);
    return xasprintf("fidelity-pg-%016llx%s", (unsigned long long)h, suffix);
}

char *store_shown(const char *target)
{
    return url_mask(target);
}

void store_close(struct db *db)
{
    db_close(db);
}

int store_exec(struct db *db, const char *sql, struct diag *d)
{
    char *err = NULL;
    if (db_exec(db, sql, &err) != DB_OK) {
        diag_set(d, EIO, "%s", err ? err : db_errmsg(db));
        free(err);
        return -EIO;
    }
    return 0;
}
