/*
 * store/slist: the kept rows of `fidelity sessions`, in DB-sessions: one
 * line "fidelity-sessions/1 VERSION\tMARK", then the rows. Contract in
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

static const char MAGIC[] = "fidelity-sessions/1 ";

static void stat_mark(struct buf *b, const char *path)
{
    struct stat st;
    if (stat(path, &st)) {
        buf_adds(b, " -");
        return;
    }
    buf_printf(b, " %llu:%llu:%lld:%lld.%09ld", (unsigned long long)st.st_dev,
               (unsigned long long)st.st_ino, (long long)st.st_size,
               (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

int store_slist_mark(const char *db_path, char *mark)
{
    struct stat st;
    struct buf b = BUF_INIT;
    if (stat(db_path, &st))
        return -ENOENT;
    char *wal = xasprintf("%s-wal", db_path);
    stat_mark(&b, db_path);
    stat_mark(&b, wal);
    free(wal);
    snprintf(mark, STORE_SLIST_MARK_MAX, "%s", buf_str(&b));
    buf_release(&b);
    return 0;
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
