/*
 * intake: the append-only log of finished exchanges (intake.h has the
 * file's layout and who writes and reads it).
 */
#include "store/intake.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/xalloc.h"
#include "store/store.h"

static const char FILE_MAGIC[8] = {'F', 'I', 'D', 'I', 'N', 'T', 'K', '1'};
static const char REC_MAGIC[4] = {'I', 'N', 'T', 'K'};
#define REC_VERSION 1
/* A payload this long is a corrupt length, not a record: above the
 * request cap and the capture cap together, with room. */
#define REC_MAX ((uint64_t)1 << 40)

static void put_u32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (char)(v >> (8 * i));
}

static void put_u64(char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (char)(v >> (8 * i));
}

static uint32_t get_u32(const char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

static uint64_t get_u64(const char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | (unsigned char)p[i];
    return v;
}

char *intake_path(const char *db_path)
{
    return store_local_path(db_path, "-intake");
}

static uint64_t new_epoch(void)
{
    uint64_t e = 0;
    if (getrandom(&e, sizeof(e), 0) != (ssize_t)sizeof(e)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        e = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
            (uint64_t)getpid() << 40;
    }
    return e ? e : 1; /* 0 means "no header" */
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

uint64_t intake_epoch_of(int fd)
{
    char h[INTAKE_HEAD];
    if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
        memcmp(h, FILE_MAGIC, sizeof(FILE_MAGIC)))
        return 0;
    return get_u64(h + 8);
}

int intake_open(const char *db_path, struct intake **out, struct diag *d)
{
    char *path = intake_path(db_path);
    int rc = intake_open_at(path, out, d);
    free(path);
    return rc;
}

int intake_open_at(const char *log_path, struct intake **out, struct diag *d)
{
    struct intake *in = xcalloc(1, sizeof(*in));
    struct stat st;
    *out = NULL;
    in->path = xstrdup(log_path);
    in->fd = open(in->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (in->fd < 0) {
        int e = errno;
        diag_set(d, e, "cannot open the intake log '%s': %s", in->path,
                 strerror(e));
        free(in->path);
        free(in);
        return -e;
    }
    if (flock(in->fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        intake_close(in, false);
        if (e == EWOULDBLOCK)
            return 1;
        return diag_set(d, e, "cannot lock the intake log: %s", strerror(e));
    }
    if (fstat(in->fd, &st) == 0)
        in->size = (uint64_t)st.st_size;
    in->epoch = intake_epoch_of(in->fd);
    buf_init(&in->rec, 0);
    *out = in;
    return 0;
}

int intake_reset(struct intake *in, struct diag *d)
{
    char h[INTAKE_HEAD];
    int rc;
    if (ftruncate(in->fd, 0)) {
        rc = -errno;
        in->size = (uint64_t)-1; /* unknown: appends stay off */
        return diag_set(d, -rc, "cannot empty the intake log '%s': %s",
                        in->path, strerror(-rc));
    }
    in->epoch = new_epoch();
    memcpy(h, FILE_MAGIC, sizeof(FILE_MAGIC));
    put_u64(h + 8, in->epoch);
    rc = write_all(in->fd, h, sizeof(h));
    if (rc) {
        in->size = (uint64_t)-1;
        if (ftruncate(in->fd, 0) == 0)
            in->epoch = 0;
        return diag_set(d, -rc, "cannot write the intake log '%s': %s",
                        in->path, strerror(-rc));
    }
    in->size = sizeof(h);
    return 0;
}

/* The payload's fixed part: version, end, flags, status, six doubles,
 * two header counts; then six length-prefixed byte strings. */
#define FIXED_LEN (3 + 4 + 6 * 8 + 2 * 4)
#define STRINGS 6

static char *w_u32(char *w, uint32_t v)
{
    put_u32(w, v);
    return w + 4;
}

static char *w_f64(char *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    put_u64(w, u);
    return w + 8;
}

static char *w_bytes(char *w, const char *p, size_t n)
{
    put_u64(w, n);
    if (n)
        memcpy(w + 8, p, n);
    return w + 8 + n;
}

int intake_append(struct intake *in, const struct intake_rec *r, uint64_t *end)
{
    struct buf *b = &in->rec;
    const uint8_t flags = (uint8_t)(r->streamed | r->resp_capped << 1 |
                                    r->ct_json << 2 | r->req_hl_set << 3 |
                                    r->resp_hl_set << 4 | r->req_redacted << 5);
    if (!in->epoch || in->size == (uint64_t)-1)
        return -EBADF; /* never reset, or its last reset failed */
    size_t plen = FIXED_LEN + STRINGS * 8 + r->method_len + r->path_len +
                  r->req_hl_len + r->resp_hl_len + r->body_len + r->resp_len;
    if (plen > UINT32_MAX)
        return -EFBIG;
    /* one record in one buffer, written with one write(2) */
    buf_reuse(b, (size_t)1 << 20);
    if (buf_grow(b, INTAKE_HEAD + plen))
        return -ENOMEM;
    char *w = b->data + INTAKE_HEAD;
    *w++ = REC_VERSION;
    *w++ = (char)r->end;
    *w++ = (char)flags;
    w = w_u32(w, (uint32_t)r->status);
    w = w_f64(w, r->started);
    w = w_f64(w, r->up_ttfb_ms);
    w = w_f64(w, r->up_total_ms);
    w = w_f64(w, r->down_ttfb_ms);
    w = w_f64(w, r->down_total_ms);
    w = w_f64(w, r->max_gap_ms);
    w = w_u32(w, (uint32_t)r->req_hl_n);
    w = w_u32(w, (uint32_t)r->resp_hl_n);
    w = w_bytes(w, r->method, r->method_len);
    w = w_bytes(w, r->path, r->path_len);
    w = w_bytes(w, r->req_hl, r->req_hl_len);
    w = w_bytes(w, r->resp_hl, r->resp_hl_len);
    w = w_bytes(w, r->body, r->body_len);
    w = w_bytes(w, r->resp, r->resp_len);
    memcpy(b->data, REC_MAGIC, 4);
    put_u32(b->data + 4, (uint32_t)plen);
    put_u64(b->data + 8, XXH3_64bits(b->data + INTAKE_HEAD, plen));
    b->len = INTAKE_HEAD + plen;
    int rc = write_all(in->fd, b->data, b->len);
    if (rc) {
        /* a part written would end the log for whatever follows: cut it */
        if (ftruncate(in->fd, (off_t)in->size))
            in->size = (uint64_t)-1;
        return rc;
    }
    in->size += b->len;
    *end = in->size;
    return 0;
}

void intake_close(struct intake *in, bool remove)
{
    if (!in)
        return;
    if (in->mark)
        db_finalize(in->mark);
    if (remove)
        unlink(in->path);
    if (in->fd >= 0)
        close(in->fd);
    buf_release(&in->rec);
    free(in->path);
    free(in);
}

/* The payload's fields, in order (intake_append). */
struct cursor {
    const char *p, *end;
    bool bad;
};

static const char *take(struct cursor *c, size_t n)
{
    if (c->bad || (size_t)(c->end - c->p) < n) {
        c->bad = true;
        return NULL;
    }
    const char *at = c->p;
    c->p += n;
    return at;
}

static double take_f64(struct cursor *c)
{
    const char *p = take(c, 8);
    double v = 0;
    if (p) {
        uint64_t u = get_u64(p);
        memcpy(&v, &u, sizeof(v));
    }
    return v;
}

static uint32_t take_u32(struct cursor *c)
{
    const char *p = take(c, 4);
    return p ? get_u32(p) : 0;
}

static const char *take_bytes(struct cursor *c, size_t *n)
{
    const char *p = take(c, 8);
    uint64_t l = p ? get_u64(p) : 0;
    *n = 0;
    if (!p || l > (uint64_t)(c->end - c->p)) {
        c->bad = true;
        return NULL;
    }
    *n = (size_t)l;
    return take(c, (size_t)l);
}

static int decode(const char *p, size_t n, struct intake_rec *r)
{
    struct cursor c = {p, p + n, false};
    const char *h = take(&c, 3);
    if (!h || h[0] != REC_VERSION)
        return -1;
    memset(r, 0, sizeof(*r));
    r->end = (uint8_t)h[1];
    uint8_t flags = (uint8_t)h[2];
    r->streamed = flags & 1;
    r->resp_capped = flags & 2;
    r->ct_json = flags & 4;
    r->req_hl_set = flags & 8;
    r->resp_hl_set = flags & 16;
    r->req_redacted = flags & 32;
    r->status = (int32_t)take_u32(&c);
    r->started = take_f64(&c);
    r->up_ttfb_ms = take_f64(&c);
    r->up_total_ms = take_f64(&c);
    r->down_ttfb_ms = take_f64(&c);
    r->down_total_ms = take_f64(&c);
    r->max_gap_ms = take_f64(&c);
    r->req_hl_n = take_u32(&c);
    r->resp_hl_n = take_u32(&c);
    r->method = take_bytes(&c, &r->method_len);
    r->path = take_bytes(&c, &r->path_len);
    r->req_hl = take_bytes(&c, &r->req_hl_len);
    r->resp_hl = take_bytes(&c, &r->resp_hl_len);
    r->body = take_bytes(&c, &r->body_len);
    r->resp = take_bytes(&c, &r->resp_len);
    return c.bad || c.p != c.end ? -1 : 0;
}

static int read_at(int fd, char *p, size_t n, uint64_t at)
{
    while (n) {
        ssize_t got = pread(fd, p, n, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -errno : 1; /* 1: end of file */
        p += got;
        n -= (size_t)got;
        at += (uint64_t)got;
    }
    return 0;
}

/* Reads the record at `at` of the log at fd (size bytes) into *pay:
 * 1 when a whole one is there (its magic, a length inside the file, the
 * hash, a payload that decodes into *r), with *next the offset after it;
 * 0 when not; -errno when the file cannot be read. */
static int rec_at(int fd, uint64_t size, uint64_t at, char **pay, size_t *cap,
                  struct intake_rec *r, uint64_t *next)
{
    char head[INTAKE_HEAD];
    if (size - at < INTAKE_HEAD)
        return 0;
    int got = read_at(fd, head, sizeof(head), at);
    if (got)
        return got < 0 ? got : 0;
    uint64_t plen = get_u32(head + 4);
    if (memcmp(head, REC_MAGIC, 4) || plen > REC_MAX ||
        plen > size - at - INTAKE_HEAD)
        return 0;
    if (plen > *cap) {
        *cap = (size_t)plen;
        *pay = xrealloc(*pay, *cap);
    }
    got = read_at(fd, *pay, (size_t)plen, at + INTAKE_HEAD);
    if (got)
        return got < 0 ? got : 0;
    if (XXH3_64bits(*pay, (size_t)plen) != get_u64(head + 8) ||
        decode(*pay, (size_t)plen, r))
        return 0;
    *next = at + INTAKE_HEAD + plen;
    return 1;
}

/* The walk of the heads from the first record towards off (16 bytes read
 * per record): 1 when it lands on off (or off is at or past the end: a
 * log whose last appends a power loss undid), 0 when a head is damaged
 * before off (*bad its offset), -1 when the heads are whole but step over
 * off: then off is not where a record starts. */
static int walk_to(int fd, uint64_t size, uint64_t off, uint64_t *bad)
{
    char head[INTAKE_HEAD];
    uint64_t at = INTAKE_HEAD;
    if (off >= size)
        return 1;
    while (at < off) {
        uint64_t plen;
        if (read_at(fd, head, sizeof(head), at) || memcmp(head, REC_MAGIC, 4) ||
            (plen = get_u32(head + 4)) > size - at - INTAKE_HEAD) {
            *bad = at;
            return 0;
        }
        at += INTAKE_HEAD + plen;
    }
    return at == off ? 1 : -1;
}

/* After damage at `at`: the offset of the next whole record (size when
 * none), and in *heads how many record heads (the magic) the damaged span
 * holds, at least one. Scanned in blocks for the magic; each candidate is
 * checked whole (hash and decoding), so bytes inside a payload that look
 * like a head are passed over. */
static int resync(int fd, uint64_t size, uint64_t at, char **pay, size_t *cap,
                  uint64_t *found, uint64_t *heads)
{
    enum { BLOCK = 1 << 16 };
    char *blk = xmalloc(BLOCK);
    uint64_t pos = at + 1, n = 1;
    int rc = 0;
    *found = size;
    while (pos + INTAKE_HEAD <= size) {
        size_t want = size - pos < BLOCK ? (size_t)(size - pos) : BLOCK;
        int got = read_at(fd, blk, want, pos);
        if (got) {
            rc = got < 0 ? got : 0;
            break;
        }
        bool done = false;
        for (size_t i = 0; i + 4 <= want && !done; i++) {
            if (memcmp(blk + i, REC_MAGIC, 4))
                continue;
            struct intake_rec r;
            uint64_t next;
            int v = rec_at(fd, size, pos + i, pay, cap, &r, &next);
            if (v < 0) {
                rc = v;
                done = true;
            } else if (v == 1) {
                *found = pos + i;
                done = true;
            } else {
                n++;
            }
        }
        if (done)
            break;
        /* a magic cut by the block's end is found in the next one */
        pos += want > 3 ? want - 3 : want;
        if (want < BLOCK)
            break;
    }
    free(blk);
    *heads = n;
    return rc;
}

int intake_read(int fd, uint64_t epoch, uint64_t off,
                int (*fn)(const struct intake_rec *r, uint64_t end, void *ud),
                void *ud, struct intake_damage *dmg, struct diag *d)
{
    struct stat st;
    uint64_t at, size;
    char *pay = NULL;
    size_t cap = 0;
    int rc = 0;

    memset(dmg, 0, sizeof(*dmg));
    if (fstat(fd, &st))
        return diag_set(d, errno, "cannot read the intake log: %s",
                        strerror(errno));
    size = (uint64_t)st.st_size;
    uint64_t mine = intake_epoch_of(fd);
    if (!mine) {
        dmg->torn = size; /* no header: nothing in it was ever appended */
        return 0;
    }
    at = INTAKE_HEAD;
    if (mine == epoch) {
        uint64_t bad = 0;
        int w = walk_to(fd, size, off, &bad);
        if (w == 0) {
            /* damage among the committed records: the frontier cannot be
             * checked by the walk, but a whole record at it vouches for it
             * (and a damaged one there is the first pending exchange) */
            dmg->before = true;
            dmg->before_at = bad;
        } else if (w < 0) {
            return diag_set(d, EBADMSG,
                            "the intake frontier (offset %llu) is not where "
                            "a record of the log starts: the store's intake "
                            "table is damaged",
                            (unsigned long long)off);
        }
        if (off > size)
            dmg->short_by = off - size;
        at = off;
    }
    while (at < size) {
        struct intake_rec r;
        uint64_t next, found, heads;
        int v = rec_at(fd, size, at, &pay, &cap, &r, &next);
        if (v < 0) {
            rc =
                diag_set(d, -v, "cannot read the intake log: %s", strerror(-v));
            break;
        }
        if (v == 1) {
            at = next;
            rc = fn(&r, at, ud);
            if (rc)
                break;
            continue;
        }
        v = resync(fd, size, at, &pay, &cap, &found, &heads);
        if (v < 0) {
            rc =
                diag_set(d, -v, "cannot read the intake log: %s", strerror(-v));
            break;
        }
        if (found == size && !intake_whole_head(fd, size, at)) {
            dmg->torn = size - at; /* an append cut short: the tail */
            break;
        }
        if (!dmg->bad_spans)
            dmg->bad_at = at;
        dmg->bad_spans++;
        dmg->bad_bytes += found - at;
        dmg->lost += heads;
        at = found;
    }
    free(pay);
    return rc;
}

bool intake_whole_head(int fd, uint64_t size, uint64_t at)
{
    char head[INTAKE_HEAD];
    if (size - at < INTAKE_HEAD || read_at(fd, head, sizeof(head), at) ||
        memcmp(head, REC_MAGIC, 4))
        return false;
    /* the record the head announces ends exactly at the end of the file:
     * its append finished, so the bytes changed afterwards */
    return get_u32(head + 4) == size - at - INTAKE_HEAD;
}

bool intake_damaged(const struct intake_damage *g)
{
    return g->bad_spans || g->before || g->short_by;
}

void intake_damage_say(const struct intake_damage *g, const char *path,
                       char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
#define SAY(...)                                                               \
    do {                                                                       \
        if (n < size) {                                                        \
            int k_ = snprintf(out + n, size - n, __VA_ARGS__);                 \
            n += k_ > 0 ? (size_t)k_ : 0;                                      \
        }                                                                      \
    } while (0)
    if (g->bad_spans)
        SAY("the intake log '%s' is damaged at offset %llu (%llu byte%s in "
            "%llu place%s): %llu exchange%s there cannot be read and %s "
            "lost; every whole record after the damage was read",
            path, (unsigned long long)g->bad_at,
            (unsigned long long)g->bad_bytes, g->bad_bytes == 1 ? "" : "s",
            (unsigned long long)g->bad_spans, g->bad_spans == 1 ? "" : "s",
            (unsigned long long)g->lost, g->lost == 1 ? "" : "s",
            g->lost == 1 ? "is" : "are");
    if (g->before)
        SAY("%sthe intake log '%s' is damaged at offset %llu, before its "
            "frontier: the exchanges there were committed already, none is "
            "lost",
            n ? "; " : "", path, (unsigned long long)g->before_at);
    if (g->short_by)
        SAY("%sthe intake log '%s' ends %llu byte%s before its frontier (cut, "
            "or its last appends undone by a power loss): the exchanges "
            "appended after the frontier, if there were any, are lost",
            n ? "; " : "", path, (unsigned long long)g->short_by,
            g->short_by == 1 ? "" : "s");
#undef SAY
}

/* One row per log (its epoch, a random 64-bit number, names it): several
 * records, each with its own log, can share one store. A store from
 * before kept one row (id 1) in the table `intake`; it moves here once. */
int intake_schema(struct db *db, struct diag *d)
{
    char *err = NULL;
    int rc = db_exec(db,
                     "CREATE TABLE IF NOT EXISTS intake_log ("
                     " epoch INTEGER PRIMARY KEY,"
                     " off INTEGER NOT NULL)",
                     &err);
    if (rc == DB_OK && db_has_table(db, "intake"))
        rc = db_exec(db,
                     "BEGIN IMMEDIATE;"
                     "INSERT OR IGNORE INTO intake_log (epoch, off)"
                     " SELECT epoch, off FROM intake WHERE id = 1;"
                     "DROP TABLE intake;"
                     "COMMIT",
                     &err);
    if (rc != DB_OK) {
        diag_set(d, EIO, "cannot create the intake table: %s",
                 err ? err : db_errstr(rc));
        free(err);
        db_exec(db, "ROLLBACK", NULL);
        return -1;
    }
    return 0;
}

int intake_frontier(struct db *db, uint64_t log_epoch, uint64_t *epoch,
                    uint64_t *off, struct diag *d)
{
    struct db_stmt *st = NULL;
    *epoch = *off = 0;
    int rc = db_prepare(db, "SELECT epoch, off FROM intake_log WHERE epoch = ?",
                        &st);
    if (rc != DB_OK) {
        diag_set(d, EIO, "cannot read the intake frontier: %s", db_errmsg(db));
        return -1;
    }
    db_bind_int64(st, 1, (int64_t)log_epoch);
    rc = db_step(st);
    if (rc == DB_ROW &&
        (db_column_type(st, 0) != DB_INTEGER ||
         db_column_type(st, 1) != DB_INTEGER || db_column_int64(st, 1) < 0)) {
        diag_set(d, EBADMSG,
                 "the intake frontier is not two numbers: the store's "
                 "intake_log table is damaged");
        db_finalize(st);
        return -1;
    } else if (rc == DB_ROW) {
        *epoch = (uint64_t)db_column_int64(st, 0);
        *off = (uint64_t)db_column_int64(st, 1);
    } else if (rc != DB_DONE) {
        diag_set(d, EIO, "cannot read the intake frontier: %s", db_errmsg(db));
        db_finalize(st);
        return -1;
    }
    db_finalize(st);
    return 0;
}

int intake_forget(struct db *db, uint64_t epoch)
{
    struct db_stmt *st = NULL;
    int rc = db_prepare(db, "DELETE FROM intake_log WHERE epoch = ?", &st);
    if (rc != DB_OK)
        return rc;
    db_bind_int64(st, 1, (int64_t)epoch);
    rc = db_step(st);
    db_finalize(st);
    return rc == DB_DONE ? DB_OK : rc;
}

int intake_mark(struct intake *in, struct db *db, uint64_t epoch, uint64_t off)
{
    if (in->mark && in->mark_db != db) {
        db_finalize(in->mark);
        in->mark = NULL;
    }
    if (!in->mark) {
        int rc = db_prepare_persistent(
            db, "INSERT OR REPLACE INTO intake_log (epoch, off) VALUES (?, ?)",
            &in->mark);
        if (rc != DB_OK)
            return rc;
        in->mark_db = db;
    }
    db_bind_int64(in->mark, 1, (int64_t)epoch);
    db_bind_int64(in->mark, 2, (int64_t)off);
    int rc = db_step(in->mark);
    db_reset(in->mark);
    return rc == DB_DONE ? DB_OK : rc;
}
