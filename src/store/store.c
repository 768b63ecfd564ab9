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

int store_open(const char *target, struct db **db, struct diag *d)
{
    if (db_is_url(target))
        return db_pg_open(target, db, d);
    return db_sqlite_open(target, true, db, d);
}

int store_open_unshared(const char *target, struct db **db, struct diag *d)
{
    if (db_is_url(target))
        return db_pg_open(target, db, d);
    return db_sqlite_open(target, false, db, d);
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
