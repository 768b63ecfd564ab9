/*
 * db_sqlite: the embedded backend of the store interface, one SQLite file
 * in WAL mode. Every call passes straight through to SQLite's, whose
 * result codes and column types the interface keeps.
 */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "store/db_int.h"

struct lite {
    struct db head;
    sqlite3 *h;
    int (*hook)(void *arg, int pages);
    void *hook_arg;
};

struct lite_stmt {
    struct db_stmt head;
    sqlite3_stmt *h;
};

#define H(db) (((struct lite *)(db))->h)
#define S(st) (((struct lite_stmt *)(st))->h)

static const struct db_ops ops;

/* SQLite's process-wide settings, before its first use (sqlite3_config
 * refuses once SQLite is initialised; then the defaults stay): no memory
 * statistics, which cost every allocation a global mutex and counters
 * that nothing here reads. */
static void configure(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

int db_sqlite_open(const char *path, bool shared, struct db **db,
                   struct diag *d)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, configure);
    sqlite3 *h = NULL;
    *db = NULL;
    int rc = sqlite3_open_v2(
        path, &h,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
            (shared ? SQLITE_OPEN_FULLMUTEX : SQLITE_OPEN_NOMUTEX),
        NULL);
    if (rc != SQLITE_OK) {
        diag_set(d, EIO, "cannot open '%s': %s", path,
                 h ? sqlite3_errmsg(h) : sqlite3_errstr(rc));
        sqlite3_close(h);
        return -EIO;
    }
    sqlite3_busy_timeout(h, 5000);
    char *err = NULL;
    if (sqlite3_exec(h,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "PRAGMA foreign_keys=ON;",
                     NULL, NULL, &err) != SQLITE_OK) {
        diag_set(d, EIO, "cannot open '%s': %s", path,
                 err ? err : sqlite3_errmsg(h));
        sqlite3_free(err);
        sqlite3_close(h);
        return -EIO;
    }
    struct lite *l = xcalloc(1, sizeof(*l));
    l->head.ops = &ops;
    l->h = h;
    *db = &l->head;
    return 0;
}

static int prepare(struct db *db, const char *sql, bool persistent,
                   struct db_stmt **st)
{
    sqlite3_stmt *h = NULL;
    *st = NULL;
    int rc = sqlite3_prepare_v3(
        H(db), sql, -1, persistent ? SQLITE_PREPARE_PERSISTENT : 0, &h, NULL);
    if (rc != SQLITE_OK)
        return rc;
    if (!h) /* only a comment or white space */
        return SQLITE_MISUSE;
    struct lite_stmt *s = xcalloc(1, sizeof(*s));
    s->head.ops = &ops;
    s->h = h;
    *st = &s->head;
    return SQLITE_OK;
}

static int bind_int64(struct db_stmt *st, int i, int64_t v)
{
    return sqlite3_bind_int64(S(st), i, v);
}

static int bind_double(struct db_stmt *st, int i, double v)
{
    return sqlite3_bind_double(S(st), i, v);
}

/* DB_STATIC and DB_TRANSIENT are SQLite's own values under other names;
 * any other destructor is SQLite's to call when it is done with the
 * memory. */
static sqlite3_destructor_type destructor(db_destructor how)
{
    if (how == DB_TRANSIENT)
        return SQLITE_TRANSIENT;
    return how == DB_STATIC ? SQLITE_STATIC : how;
}

static int bind_text(struct db_stmt *st, int i, const char *s, int n,
                     db_destructor how)
{
    return sqlite3_bind_text(S(st), i, s, n, destructor(how));
}

static int bind_blob(struct db_stmt *st, int i, const void *p, int n,
                     db_destructor how)
{
    return sqlite3_bind_blob(S(st), i, p, n, destructor(how));
}

static int bind_null(struct db_stmt *st, int i)
{
    return sqlite3_bind_null(S(st), i);
}

static int step(struct db_stmt *st)
{
    return sqlite3_step(S(st));
}

static int64_t column_int64(struct db_stmt *st, int i)
{
    return sqlite3_column_int64(S(st), i);
}

static double column_double(struct db_stmt *st, int i)
{
    return sqlite3_column_double(S(st), i);
}

static const unsigned char *column_text(struct db_stmt *st, int i)
{
    return sqlite3_column_text(S(st), i);
}

static const void *column_blob(struct db_stmt *st, int i)
{
    return sqlite3_column_blob(S(st), i);
}

static int column_bytes(struct db_stmt *st, int i)
{
    return sqlite3_column_bytes(S(st), i);
}

static int column_type(struct db_stmt *st, int i)
{
    return sqlite3_column_type(S(st), i);
}

static int reset(struct db_stmt *st)
{
    return sqlite3_reset(S(st));
}

static int clear_bindings(struct db_stmt *st)
{
    return sqlite3_clear_bindings(S(st));
}

static int finalize(struct db_stmt *st)
{
    int rc = sqlite3_finalize(S(st));
    free(st);
    return rc;
}

static int exec(struct db *db, const char *sql, char **err)
{
    char *msg = NULL;
    int rc = sqlite3_exec(H(db), sql, NULL, NULL, err ? &msg : NULL);
    if (err && msg)
        *err = xstrdup(msg);
    sqlite3_free(msg);
    return rc;
}

static const char *errmsg(struct db *db)
{
    return sqlite3_errmsg(H(db));
}

static int64_t last_insert_rowid(struct db *db)
{
    return sqlite3_last_insert_rowid(H(db));
}

static int changes(struct db *db)
{
    return sqlite3_changes(H(db));
}

static void busy_timeout(struct db *db, int ms)
{
    sqlite3_busy_timeout(H(db), ms);
}

static bool is_readonly(struct db *db)
{
    return sqlite3_db_readonly(H(db), "main") == 1;
}

static bool has_table(struct db *db, const char *name)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(H(db),
                           "SELECT 1 FROM sqlite_master WHERE type='table' "
                           "AND name=?",
                           -1, &st, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    bool yes = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return yes;
}

static bool has_column(struct db *db, const char *table, const char *column)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(H(db),
                           "SELECT 1 FROM pragma_table_info(?) WHERE name=?",
                           -1, &st, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
    bool yes = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return yes;
}

/* SQLITE_FCNTL_DATA_VERSION: it changes with every change to the file,
 * this connection's own included. */
static unsigned int data_version(struct db *db)
{
    unsigned int v = 0;
    if (sqlite3_file_control(H(db), "main", SQLITE_FCNTL_DATA_VERSION, &v) !=
        SQLITE_OK)
        return 0;
    return v;
}

/* A file has no server to lose. */
static bool is_lost(struct db *db)
{
    (void)db;
    return false;
}

static int on_wal(void *arg, sqlite3 *h, const char *name, int pages)
{
    (void)h;
    (void)name;
    struct lite *l = arg;
    return l->hook(l->hook_arg, pages);
}

static int wal_hook(struct db *db, int (*fn)(void *arg, int pages), void *arg)
{
    struct lite *l = (struct lite *)db;
    l->hook = fn;
    l->hook_arg = arg;
    sqlite3_wal_hook(l->h, fn ? on_wal : NULL, l);
    return 0;
}

static int checkpoint(struct db *db)
{
    return sqlite3_wal_checkpoint_v2(H(db), NULL, SQLITE_CHECKPOINT_PASSIVE,
                                     NULL, NULL) == SQLITE_OK
               ? 0
               : -EIO;
}

static void close_db(struct db *db)
{
    sqlite3_close(H(db));
    free(db);
}

static const struct db_ops ops = {
    .backend = DB_SQLITE,
    .prepare = prepare,
    .bind_int64 = bind_int64,
    .bind_double = bind_double,
    .bind_text = bind_text,
    .bind_blob = bind_blob,
    .bind_null = bind_null,
    .step = step,
    .column_int64 = column_int64,
    .column_double = column_double,
    .column_text = column_text,
    .column_blob = column_blob,
    .column_bytes = column_bytes,
    .column_type = column_type,
    .reset = reset,
    .clear_bindings = clear_bindings,
    .finalize = finalize,
    .exec = exec,
    /* deferred: the snapshot is the one the first read sees, kept (WAL)
     * until COMMIT */
    .read_begin = "BEGIN DEFERRED",
    .errmsg = errmsg,
    .last_insert_rowid = last_insert_rowid,
    .changes = changes,
    .busy_timeout = busy_timeout,
    .is_readonly = is_readonly,
    .has_table = has_table,
    .has_column = has_column,
    .data_version = data_version,
    .is_lost = is_lost,
    .wal_hook = wal_hook,
    .checkpoint = checkpoint,
    .close = close_db,
};
