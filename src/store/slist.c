/*
 * store/slist: the kept rows of `fidelity sessions`, in DB-sessions: one
 * line "fidelity-sessions/2 VERSION\tMARK", then the rows. Contract in
 * slist.h.
 */
#include "store/slist.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/db.h"
#include "store/store.h"
#include "store/xchg.h"

static const char MAGIC[] = "fidelity-sessions/2 ";
/* fidelity appends exchanges and never changes or removes one: their
 * number and the largest id name the set (ids are unique; a set that only
 * grows and keeps its size is the same set); the store's tokens (xchg.c:
 * one from its creation, one per row another tool changed or removed)
 * tell it from another store and from an edited one */
static const char SQL_TRIGGERS[] =
    "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN"
    " ('xchg_edit_u', 'xchg_edit_d', 'xchg_blob_edit_u', 'xchg_blob_edit_d')";
static const char SQL_MARK[] =
    "SELECT count(*), coalesce(max(id), 0), (SELECT count(*) FROM xchg_edit),"
    " (SELECT n FROM xchg_edit ORDER BY rowid DESC LIMIT 1) FROM xchg";

int store_slist_mark(const char *db_path, char *mark)
{
    struct stat st;
    struct db *db = NULL;
    struct db_stmt *q = NULL;
    struct diag d;
    int ret = -ENOENT;
    if (db_is_url(db_path) || stat(db_path, &st))
        return -ENOENT;
    if (store_open(db_path, &db, &d))
        return -EIO;
    /* the edit count's table and triggers (xchg.c), in a store an older
     * build made; without them (a read-only copy) no mark */
    bool counted = !xchg_schema(db, &d) && db_has_table(db, "xchg_edit") &&
                   !db_prepare(db, SQL_TRIGGERS, &q) && db_step(q) == DB_ROW &&
                   db_column_int64(q, 0) == 4;
    db_finalize(q);
    q = NULL;
    if (!counted) {
        ret = -ENOENT;
    } else if (!db_prepare(db, SQL_MARK, &q) && db_step(q) == DB_ROW) {
        snprintf(mark, STORE_SLIST_MARK_MAX, "xchg %lld %lld %lld %llx",
                 (long long)db_column_int64(q, 0),
                 (long long)db_column_int64(q, 1),
                 (long long)db_column_int64(q, 2),
                 (unsigned long long)db_column_int64(q, 3));
        ret = 0;
    } else {
        ret = -EIO;
    }
    db_finalize(q);
    store_close(db);
    return ret;
}

/* The header line of version and mark; fresh. */
static char *header(const char *version, const char *mark)
{
    return xasprintf("%s%s\t%s\n", MAGIC, version, mark);
}

int store_slist_get(const char *db_path, const char *version, const char *mark,
                    char **rows)
{
    char *path = xasprintf("%s-sessions", db_path);
    char *want = header(version, mark);
    FILE *f = fopen(path, "rb");
    struct buf b = BUF_INIT;
    char chunk[65536];
    size_t n;
    *rows = NULL;
    free(path);
    if (!f) {
        free(want);
        return 0;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_add(&b, chunk, n);
    bool ok = !ferror(f) && b.len >= strlen(want) &&
              !memcmp(b.data, want, strlen(want));
    fclose(f);
    if (ok)
        *rows = xstrdup(b.data + strlen(want));
    free(want);
    buf_release(&b);
    return ok;
}

int store_slist_put(const char *db_path, const char *version, const char *mark,
                    const char *rows, struct diag *d)
{
    char *path = xasprintf("%s-sessions", db_path);
    char *tmp = xasprintf("%s.%ld.tmp", path, (long)getpid());
    char *head = header(version, mark);
    int ret = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ret = -errno;
        diag_set(d, -ret, "cannot write '%s': %s", tmp, strerror(-ret));
        goto out;
    }
    bool ok = fputs(head, f) >= 0 && fputs(rows, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path)) {
        ret = -(errno ? errno : EIO);
        diag_set(d, -ret, "cannot write '%s': %s", path, strerror(-ret));
        unlink(tmp);
    }
out:
    free(head);
    free(tmp);
    free(path);
    return ret;
}
