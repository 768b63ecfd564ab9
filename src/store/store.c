/*
 * store: opening the SQLite file with the pragmas fidelity relies on.
 */
#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* SQLite's process-wide settings, before its first use (sqlite3_config
 * refuses once SQLite is initialised; then the defaults stay): no memory
 * statistics, which cost every allocation a global mutex and counters
 * that nothing here reads. */
static void configure(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int open_with(const char *path, sqlite3 **db, int mutex, struct diag *d)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, configure);
    int rc = sqlite3_open_v2(
        path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | mutex, NULL);
    if (rc != SQLITE_OK) {
        diag_set(d, EIO, "cannot open '%s': %s", path,
                 *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
        sqlite3_close(*db);
        *db = NULL;
        return -EIO;
    }
    sqlite3_busy_timeout(*db, 5000);
    if (store_exec(*db,
                   "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                   "PRAGMA foreign_keys=ON;",
                   d)) {
        diag_prefix(d, "cannot open '%s'", path);
        sqlite3_close(*db);
        *db = NULL;
        return -EIO;
    }
    return 0;
}

int store_open(const char *path, sqlite3 **db, struct diag *d)
{
    return open_with(path, db, SQLITE_OPEN_FULLMUTEX, d);
}

int store_open_unshared(const char *path, sqlite3 **db, struct diag *d)
{
    return open_with(path, db, SQLITE_OPEN_NOMUTEX, d);
}

void store_close(sqlite3 *db)
{
    sqlite3_close(db);
}

int store_exec(sqlite3 *db, const char *sql, struct diag *d)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        diag_set(d, EIO, "%s", err ? err : sqlite3_errmsg(db));
        sqlite3_free(err);
        return -EIO;
    }
    return 0;
}
