/*
 * xchg: recorded exchanges in the SQLite store (contract in xchg.h).
 *
 * Two tables. xchg_blob holds content-addressed JSON values (chat messages,
 * request parameters, tool lists), keyed by hash64 of their canonical JSON,
 * zlib-compressed when that is smaller. xchg holds one row per exchange; a
 * chat request is its parameter and tool blob hashes plus its message list,
 * stored as "the first K messages of exchange B, then these hashes", so a
 * session that re-sends its history costs a few bytes per turn. Chains are
 * cut every XCHG_MAX_DEPTH links so reading one row stays cheap. Reading
 * the rows back is xchg_read.c; the cache both use is in xchg_int.h.
 */
#include "store/xchg.h"
#include "store/xchg_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/hash.h"
#include "core/xalloc.h"
#include "store/ldelta.h"
#include "wire/jdump.h"
#include "wire/jscan.h"
#include "wire/reply.h"

enum blob_kind { BLOB_MESSAGE = 0, BLOB_PARAMS = 1, BLOB_TOOLS = 2 };

static const char *const end_names[] = {
    [XCHG_COMPLETE] = "complete",
    [XCHG_UPSTREAM_ERROR] = "upstream_error",
    [XCHG_UPSTREAM_RESET] = "upstream_reset",
    [XCHG_CLIENT_GONE] = "client_gone",
    [XCHG_TIMEOUT] = "timeout",
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS xchg_blob ("
    " h INTEGER PRIMARY KEY," /* hash64 of the canonical JSON */
    " kind INTEGER NOT NULL," /* 0 message, 1 params, 2 tools */
    " raw_len INTEGER NOT NULL,"
    " zip INTEGER NOT NULL," /* 1: z is zlib data, 0: z is the JSON */
    " z BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS xchg ("
    " id INTEGER PRIMARY KEY,"
    " session TEXT NOT NULL, kind TEXT NOT NULL, started REAL NOT NULL,"
    " method TEXT NOT NULL, path TEXT NOT NULL, req_headers TEXT,"
    " req_params INTEGER, req_tools INTEGER," /* blob hashes */
    " req_base INTEGER, req_prefix INTEGER NOT NULL DEFAULT 0,"
    " req_depth INTEGER NOT NULL DEFAULT 0,"
    " req_msgs BLOB," /* 8-byte big-endian hashes after the prefix */
    " req_raw BLOB, req_raw_len INTEGER, req_raw_zip INTEGER,"
    " req_malformed INTEGER NOT NULL DEFAULT 0,"
    " status INTEGER NOT NULL DEFAULT 0, resp_headers TEXT,"
    " resp_raw BLOB, resp_raw_len INTEGER, resp_raw_zip INTEGER,"
    " streamed INTEGER NOT NULL DEFAULT 0, reply TEXT,"
    " up_ttfb_ms REAL, up_total_ms REAL, down_ttfb_ms REAL,"
    " down_total_ms REAL, ending INTEGER NOT NULL DEFAULT 0,"
    " req_redacted INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS xchg_by_session ON xchg(session, id);";

/* A SQLite store keeps a random token from its creation and one more for
 * each change or removal of an exchange or a blob (fidelity itself only
 * appends): store/slist.c's mark includes their number and the last, so
 * the kept listing is read neither for another store put in this one's
 * place nor after another tool edited a row in place. */
static const char SCHEMA_EDITS[] =
    "CREATE TABLE IF NOT EXISTS xchg_edit (n INTEGER NOT NULL);"
    "INSERT INTO xchg_edit SELECT random()"
    " WHERE NOT EXISTS (SELECT 1 FROM xchg_edit);"
    "CREATE TRIGGER IF NOT EXISTS xchg_edit_u AFTER UPDATE ON xchg"
    " BEGIN INSERT INTO xchg_edit VALUES (random()); END;"
    "CREATE TRIGGER IF NOT EXISTS xchg_edit_d AFTER DELETE ON xchg"
    " BEGIN INSERT INTO xchg_edit VALUES (random()); END;"
    "CREATE TRIGGER IF NOT EXISTS xchg_blob_edit_u AFTER UPDATE ON xchg_blob"
    " BEGIN INSERT INTO xchg_edit VALUES (random()); END;"
    "CREATE TRIGGER IF NOT EXISTS xchg_blob_edit_d AFTER DELETE ON xchg_blob"
    " BEGIN INSERT INTO xchg_edit VALUES (random()); END;";

static const char SQL_BLOB_EXISTS[] = "SELECT 1 FROM xchg_blob WHERE h=?";
/* OR IGNORE: another writer of the same store may have stored the same
 * blob since SQL_BLOB_EXISTS (a PostgreSQL store has several) */
static const char SQL_BLOB_INSERT[] = "INSERT OR IGNORE INTO xchg_blob(h,"
                                      " kind, raw_len, zip, z)"
                                      " VALUES (?, ?, ?, ?, ?)";
const char XCHG_SQL_LIST_LOAD[] =
    "SELECT req_base, req_prefix, req_depth, req_msgs FROM xchg"
    " WHERE id=? AND req_params IS NOT NULL";
static const char SQL_RECENT[] =
    "SELECT id FROM xchg WHERE session=? AND req_params IS NOT NULL"
    " ORDER BY id DESC LIMIT 3";

struct tree_ent {
    XXH128_hash_t raw;
    json_t *v;
};

#define TREES_MIN 1024
#define TREES_MAX ((size_t)1 << 16)
/* 8 MiB of source: the histories of a dozen sessions near a 128k-token
 * context, held as trees of about 1-2x their bytes (record's memory goal
 * is 100 MB in all) */
#define TREES_BYTES ((size_t)8 << 20)

struct memo_ent {
    XXH128_hash_t raw;
    uint64_t h;
};

#define MEMO_MIN 4096
#define MEMO_MAX ((size_t)1 << 18)

struct blob_ent {
    uint64_t h;
    json_t *v;
};

#define KNOWN_MIN 1024
#define KNOWN_MAX ((size_t)1 << 18)

void xchg_init(struct xchg *x)
{
    memset(x, 0, sizeof(*x));
}

void xchg_release(struct xchg *x)
{
    free(x->session);
    free(x->kind);
    free(x->method);
    free(x->path);
    json_decref(x->req_headers);
    json_decref(x->req_body);
    free(x->req_raw);
    free(x->req_msg_raw);
    free(x->req_msg_new);
    free(x->req_msg_h);
    json_decref(x->req_msgs);
    json_decref(x->resp_headers);
    hdrs_release(&x->req_hl);
    hdrs_release(&x->resp_hl);
    free(x->resp_raw);
    json_decref(x->reply);
    free(x->reply_text);
    xchg_init(x);
}

const char *xchg_end_name(enum xchg_end e)
{
    if ((unsigned)e < sizeof(end_names) / sizeof(end_names[0]))
        return end_names[e];
    return "unknown";
}

int xchg_own_status(enum xchg_end e)
{
    return e == XCHG_TIMEOUT ? 504 : 502;
}

int xchg_status_sent(const struct xchg *x)
{
    if (x->status || x->end == XCHG_COMPLETE || x->end == XCHG_CLIENT_GONE)
        return x->status;
    return xchg_own_status(x->end);
}

struct xchg_cache *xchg_cache_new(void)
{
    return xcalloc(1, sizeof(struct xchg_cache));
}

void xchg_cache_pre_commit(struct xchg_cache *c,
                           int (*fn)(struct db *db, void *ud), void *ud)
{
    c->pre_commit = fn;
    c->pre_commit_ud = ud;
}

void xchg_cache_free(struct xchg_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < CACHE_SLOTS; i++)
        free(c->e[i].h);
    for (int i = 0; i < RECENT_SLOTS; i++)
        free(c->recent[i].session);
    if (c->zs_ready)
        deflateEnd(&c->zs);
    free(c->known);
    free(c->pend);
    for (size_t i = 0; i < c->blobs_cap; i++)
        json_decref(c->blobs[i].v);
    free(c->blobs);
    json_decref(c->blob0);
    free(c->last_v);
    free(c->last_h);
    for (int i = 0; i < LINEAGES; i++) {
        json_decref(c->lin[i].arr);
        free(c->lin[i].h);
    }
    free(c->views);
    free(c->memo);
    for (size_t i = 0; i < c->trees_cap; i++)
        json_decref(c->trees[i].v);
    free(c->trees);
    free(c->spans);
    for (int i = 0; i < STMT_SLOTS; i++)
        db_finalize(c->st[i]);
    buf_release(&c->hdr_text[0]);
    buf_release(&c->hdr_text[1]);
    free(c);
}

size_t xchg_cache_recent_hits(const struct xchg_cache *c)
{
    return c->recent_hits;
}

size_t xchg_cache_rest_hits(const struct xchg_cache *c)
{
    return c->rest_hits;
}

size_t xchg_cache_memo_hits(const struct xchg_cache *c)
{
    return c->memo_hits;
}

static struct list_ent *cache_get(struct xchg_cache *c, int64_t id)
{
    struct list_ent *e = &c->e[(uint64_t)id % CACHE_SLOTS];
    return e->id == id ? e : NULL;
}

/* Takes ownership of h. */
static struct list_ent *cache_put(struct xchg_cache *c, int64_t id, int depth,
                                  uint64_t *h, size_t n)
{
    struct list_ent *e = &c->e[(uint64_t)id % CACHE_SLOTS];
    free(e->h);
    e->id = id;
    e->depth = depth;
    e->h = h;
    e->n = n;
    return e;
}

/* A prepared statement for sql, from c when it has it. NULL on error. */
struct db_stmt *xchg_prep(struct xchg_cache *c, struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    for (int i = 0; c && i < STMT_SLOTS; i++)
        if (c->sql[i] == sql)
            return c->st[i];
    if (db_prepare_persistent(db, sql, &st) != DB_OK)
        return NULL;
    for (int i = 0; c && i < STMT_SLOTS; i++) {
        if (!c->sql[i]) {
            c->sql[i] = sql;
            c->st[i] = st;
            break;
        }
    }
    return st;
}

/* Done with st: reset when c keeps it, else finalized. */
void xchg_unprep(struct xchg_cache *c, struct db_stmt *st)
{
    for (int i = 0; c && i < STMT_SLOTS; i++) {
        if (c->st[i] == st) {
            /* no db_clear_bindings: each use binds every parameter
             * of its statement (insert_row binds NULLs too) */
            db_reset(st);
            return;
        }
    }
    db_finalize(st);
}

int xchg_sql_fail(struct db *db, struct diag *d, const char *what)
{
    return diag_set(d, EIO, "store: %s: %s", what, db_errmsg(db));
}

/* Whether table xchg has column req_redacted (stores written before it
 * was added do not). */
bool xchg_has_redacted_column(struct db *db)
{
    return db_has_column(db, "xchg", "req_redacted");
}

int xchg_schema(struct db *db, struct diag *d)
{
    char *err = NULL;
    if (db_exec(db, SCHEMA, &err) != DB_OK) {
        diag_set(d, EIO, "store: cannot create the exchange tables: %s",
                 err ? err : db_errmsg(db));
        free(err);
        return -EIO;
    }
    /* an older store gets the column; one that cannot be written (a
     * read-only copy) is still read, as unredacted (xchg_each) */
    if (!xchg_has_redacted_column(db))
        db_exec(db,
                "ALTER TABLE xchg ADD COLUMN req_redacted INTEGER NOT"
                " NULL DEFAULT 0",
                NULL);
    /* (a read-only copy may have none: its listing is not kept) */
    if (db_backend(db) == DB_SQLITE)
        db_exec(db, SCHEMA_EDITS, NULL);
    return 0;
}

/* ---- compression ---- */

/* Compresses data when that saves bytes. *out is fresh; *zip says which. */
static int deflate_with(struct xchg_cache *c, const void *data, size_t len,
                        unsigned char *z, uLongf *zlen)
{
    if (!c)
        return compress2(z, zlen, data, (uLong)len, 6);
    if (!c->zs_ready) {
        /* level 1: several times faster than 6 on small JSON, a few
         * percent larger */
        /* memLevel 4: deflateReset clears a 4 KiB hash table instead of
         * 64 KiB, which dominated small inputs */
        if (deflateInit2(&c->zs, 1, Z_DEFLATED, 15, 4, Z_DEFAULT_STRATEGY) !=
            Z_OK)
            return Z_MEM_ERROR;
        c->zs_ready = true;
    } else {
        deflateReset(&c->zs);
    }
    c->zs.next_in = (Bytef *)data;
    c->zs.avail_in = (uInt)len;
    c->zs.next_out = z;
    c->zs.avail_out = (uInt)*zlen;
    if (deflate(&c->zs, Z_FINISH) != Z_STREAM_END)
        return Z_BUF_ERROR;
    *zlen = c->zs.total_out;
    return Z_OK;
}

/* Values shorter than this are stored as they are: deflate costs about 78k
 * instructions per call whatever the input (building the block's Huffman
 * trees), which was a quarter of the writer's work on a small exchange,
 * to save a few hundred bytes (docs/PERFORMANCE.md, "writer"). */
#define PACK_MIN 1024

/* An event stream coded by ldelta, deflated too when the coding is still
 * PACK_MIN or more: a stream of many events codes to a few bytes per
 * event, so deflate then costs far less than on the raw stream. false
 * when the coding saves nothing. */
static bool pack_lines(struct xchg_cache *c, const void *data, size_t len,
                       void **out, size_t *out_len, int *zip)
{
    unsigned char *l = xmalloc(len);
    size_t llen = ldelta_encode(data, len, l, len - 1);
    if (!llen) {
        free(l);
        return false;
    }
    if (llen >= PACK_MIN) {
        uLongf zlen = compressBound((uLong)llen);
        unsigned char *z = xmalloc(zlen + 10);
        size_t k = 0;
        for (size_t v = llen; v >= 0x80; v >>= 7)
            z[k++] = (unsigned char)(v | 0x80);
        z[k] = (unsigned char)(llen >> (7 * k));
        k++;
        if (deflate_with(c, l, llen, z + k, &zlen) == Z_OK && k + zlen < llen) {
            free(l);
            *out = z;
            *out_len = k + zlen;
            *zip = ZIP_LINES_DEFLATE;
            return true;
        }
        free(z);
    }
    *out = l;
    *out_len = llen;
    *zip = ZIP_LINES;
    return true;
}

/* Codes a value for storage: *out is fresh, *zip says how (enum zip).
 * lines: the value is an event stream (ldelta). */
static void pack(struct xchg_cache *c, const void *data, size_t len, bool lines,
                 void **out, size_t *out_len, int *zip)
{
    if (len < 64)
        goto raw;
    if (lines && pack_lines(c, data, len, out, out_len, zip))
        return;
    if (len < PACK_MIN)
        goto raw;
    uLongf zlen = compressBound((uLong)len);
    unsigned char *z = xmalloc(zlen ? zlen : 1);
    if (deflate_with(c, data, len, z, &zlen) == Z_OK && zlen < len) {
        *out = z;
        *out_len = zlen;
        *zip = ZIP_DEFLATE;
        return;
    }
    free(z);
raw:
    *out = xmalloc(len + 1);
    memcpy(*out, data, len);
    *out_len = len;
    *zip = ZIP_NONE;
}

/* ZIP_LINES_DEFLATE: the coded bytes, inflated. NULL when corrupt. */
static unsigned char *unpack_lines_deflate(const unsigned char *z, size_t zlen,
                                           size_t raw_len, size_t *llen)
{
    size_t v = 0, k = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (k >= zlen || shift >= 64)
            return NULL;
        v |= (size_t)(z[k] & 0x7f) << shift;
        if (!(z[k++] & 0x80))
            break;
    }
    /* kept only when smaller than the value */
    if (v > raw_len)
        return NULL;
    unsigned char *l = xmalloc(v ? v : 1);
    uLongf n = (uLongf)v;
    if (uncompress(l, &n, z + k, (uLong)(zlen - k)) != Z_OK || n != v) {
        free(l);
        return NULL;
    }
    *llen = v;
    return l;
}

/* Whether a stored value of zlen bytes coded as zip can decode to raw_len
 * bytes, checked before anything is allocated for it: a corrupt length
 * must not ask for gigabytes. deflate expands at most 1032 times (zlib's
 * technical details); ldelta has no such bound, so XCHG_RAW_MAX alone. */
static bool packed_plausible(size_t zlen, size_t raw_len, int zip)
{
    if (raw_len > XCHG_RAW_MAX)
        return false;
    switch (zip) {
    case ZIP_NONE:
        return zlen == raw_len;
    case ZIP_DEFLATE:
        return raw_len <= zlen * 1032 + 64;
    case ZIP_LINES:
    case ZIP_LINES_DEFLATE:
        return zlen > 0 || raw_len == 0;
    default:
        return false;
    }
}

/* A fresh NUL-terminated copy of the stored bytes, or NULL when corrupt. */
char *xchg_unpack(const void *z, size_t zlen, size_t raw_len, int zip)
{
    if (!packed_plausible(zlen, raw_len, zip) || (zlen && !z))
        return NULL;
    char *out = xmalloc(raw_len + 1);
    int rc = 0;
    if (zip == ZIP_DEFLATE) {
        uLongf n = (uLongf)raw_len;
        rc = uncompress((Bytef *)out, &n, z, (uLong)zlen) != Z_OK ||
             n != raw_len;
    } else if (zip == ZIP_LINES) {
        rc = ldelta_decode(z, zlen, out, raw_len);
    } else if (zip == ZIP_LINES_DEFLATE) {
        size_t llen = 0;
        unsigned char *l = unpack_lines_deflate(z, zlen, raw_len, &llen);
        rc = l ? ldelta_decode(l, llen, out, raw_len) : -1;
        free(l);
    } else if (zip == ZIP_NONE && zlen == raw_len) {
        if (zlen) /* SQLite gives NULL for an empty blob */
            memcpy(out, z, zlen);
    } else {
        rc = -1;
    }
    if (rc) {
        free(out);
        return NULL;
    }
    out[raw_len] = '\0';
    return out;
}

/* ---- blobs ---- */

/* json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY), the
 * text a blob is addressed by (wire/jdump.h) */
static char *canonical(const json_t *v, size_t *len)
{
    char *s = jdump_str(v, true, len);
    if (!s)
        abort(); /* values parsed by jansson always dump */
    return s;
}

static bool known_has(const struct xchg_cache *c, uint64_t h)
{
    if (!c || !c->known || !h)
        return false;
    for (size_t i = h & (c->known_cap - 1);; i = (i + 1) & (c->known_cap - 1)) {
        if (c->known[i] == h)
            return true;
        if (!c->known[i])
            return false;
    }
}

static void known_add(struct xchg_cache *c, uint64_t h)
{
    if (!h || known_has(c, h))
        return;
    if ((c->known_n + 1) * 4 > c->known_cap * 3) {
        size_t old_cap = c->known_cap;
        uint64_t *old = c->known;
        /* a full table at the largest size starts over: it is a cache */
        c->known_cap = !old_cap               ? KNOWN_MIN
                       : old_cap >= KNOWN_MAX ? old_cap
                                              : old_cap * 2;
        c->known = xcalloc(c->known_cap, sizeof(*c->known));
        c->known_n = 0;
        for (size_t i = 0; old_cap < KNOWN_MAX && i < old_cap; i++)
            if (old[i])
                known_add(c, old[i]);
        free(old);
    }
    size_t i = h & (c->known_cap - 1);
    while (c->known[i])
        i = (i + 1) & (c->known_cap - 1);
    c->known[i] = h;
    c->known_n++;
}

static void pend_add(struct xchg_cache *c, uint64_t h)
{
    if (!c)
        return;
    if (c->pend_n == c->pend_cap) {
        c->pend_cap = c->pend_cap ? c->pend_cap * 2 : 64;
        c->pend = xrealloc(c->pend, c->pend_cap * sizeof(*c->pend));
    }
    c->pend[c->pend_n++] = h;
}

/* Stores blob v (canonical text s[0..len), hash h) unless it is known or
 * already in the store. */
static int blob_store(struct db *db, struct xchg_cache *c, enum blob_kind kind,
                      const char *s, size_t len, int64_t h, struct diag *d)
{
    struct db_stmt *st = NULL;
    int rc = -EIO;

    if (known_has(c, (uint64_t)h))
        return 0;
    if (!(st = xchg_prep(c, db, SQL_BLOB_EXISTS)))
        goto out;
    db_bind_int64(st, 1, h);
    int step = db_step(st);
    xchg_unprep(c, st);
    st = NULL;
    if (step == DB_ROW) {
        rc = 0;
        pend_add(c, (uint64_t)h);
        goto out;
    }
    if (step != DB_DONE)
        goto out;
    void *z;
    size_t zlen;
    int zip;
    pack(c, s, len, false, &z, &zlen, &zip);
    if (!(st = xchg_prep(c, db, SQL_BLOB_INSERT))) {
        free(z);
        goto out;
    }
    db_bind_int64(st, 1, h);
    db_bind_int(st, 2, kind);
    db_bind_int64(st, 3, (int64_t)len);
    db_bind_int(st, 4, zip);
    db_bind_blob(st, 5, z, (int)zlen, free);
    step = db_step(st);
    if (step == DB_DONE) {
        rc = 0;
        pend_add(c, (uint64_t)h);
    } else if (step == DB_BUSY) {
        rc = -EBUSY; /* another writer's transaction holds the same blob */
    }
out:
    if (rc)
        diag_set(d, -rc, "store: cannot store a message: %s", db_errmsg(db));
    if (st)
        xchg_unprep(c, st);
    return rc;
}

static int blob_put(struct db *db, struct xchg_cache *c, enum blob_kind kind,
                    const json_t *v, int64_t *hash, struct diag *d)
{
    size_t len;
    char *s = canonical(v, &len);
    int64_t h = (int64_t)hash64(s, len, 0);
    *hash = h;
    int rc = blob_store(db, c, kind, s, len, h, d);
    free(s);
    return rc;
}

/* ---- message hashes by their bytes ---- */

static bool raw_empty(XXH128_hash_t k)
{
    return !k.low64 && !k.high64;
}

static struct memo_ent *memo_slot(struct memo_ent *t, size_t cap,
                                  XXH128_hash_t k)
{
    size_t i = k.low64 & (cap - 1);
    while (!raw_empty(t[i].raw) && !XXH128_isEqual(t[i].raw, k))
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static void memo_add(struct xchg_cache *c, XXH128_hash_t k, uint64_t h)
{
    if (raw_empty(k))
        return;
    if (2 * (c->memo_n + 1) > c->memo_cap) {
        size_t cap = c->memo_cap ? 2 * c->memo_cap : MEMO_MIN;
        if (cap > MEMO_MAX) { /* full: start over rather than grow */
            memset(c->memo, 0, c->memo_cap * sizeof(*c->memo));
            c->memo_n = 0;
        } else {
            struct memo_ent *t = xcalloc(cap, sizeof(*t));
            for (size_t i = 0; i < c->memo_cap; i++)
                if (!raw_empty(c->memo[i].raw))
                    *memo_slot(t, cap, c->memo[i].raw) = c->memo[i];
            free(c->memo);
            c->memo = t;
            c->memo_cap = cap;
        }
    }
    struct memo_ent *e = memo_slot(c->memo, c->memo_cap, k);
    if (raw_empty(e->raw))
        c->memo_n++;
    e->raw = k;
    e->h = h;
}

/* The hash of a message whose bytes were seen before and whose blob is
 * committed, else 0 (the caller dumps and stores it). */
static uint64_t memo_known(const struct xchg_cache *c, XXH128_hash_t k)
{
    if (!c->memo_cap || raw_empty(k))
        return 0;
    const struct memo_ent *e = memo_slot(c->memo, c->memo_cap, k);
    return !raw_empty(e->raw) && known_has(c, e->h) ? e->h : 0;
}

/* The spans of x's messages in the bytes it was parsed from, when there
 * are exactly n of them (fresh array), else NULL. */
static struct jspan *message_spans(const struct xchg *x, size_t n)
{
    static const char *const key[] = {"messages"};
    struct jspan doc, msgs;
    if (!x->req_src || !n)
        return NULL;
    jscan_trusted(x->req_src, x->req_src_len, &doc);
    if (jscan_members(&doc, key, 1, &msgs))
        return NULL;
    struct jspan *sp = xmalloc(n * sizeof(*sp));
    if (jscan_elements(&msgs, sp, n) != (long)n) {
        free(sp);
        return NULL;
    }
    return sp;
}

/* ---- message values by their bytes ---- */

static struct tree_ent *tree_slot(struct tree_ent *t, size_t cap,
                                  XXH128_hash_t k)
{
    size_t i = k.low64 & (cap - 1);
    while (t[i].v && !XXH128_isEqual(t[i].raw, k))
        i = (i + 1) & (cap - 1);
    return &t[i];
}

static void trees_clear(struct xchg_cache *c)
{
    for (size_t i = 0; i < c->trees_cap; i++) {
        json_decref(c->trees[i].v);
        c->trees[i].v = NULL;
    }
    c->trees_n = 0;
    c->trees_bytes = 0;
}

/* Keeps v (a new reference is taken) as the value of bytes hashing to k. */
static void tree_add(struct xchg_cache *c, XXH128_hash_t k, json_t *v,
                     size_t bytes)
{
    if (bytes > TREES_BYTES / 4)
        return; /* a huge message would push out all the others */
    if (c->trees_bytes + bytes > TREES_BYTES)
        trees_clear(c);
    if (2 * (c->trees_n + 1) > c->trees_cap) {
        size_t cap = c->trees_cap ? 2 * c->trees_cap : TREES_MIN;
        if (cap > TREES_MAX) { /* full: start over rather than grow */
            trees_clear(c);
        } else {
            struct tree_ent *t = xcalloc(cap, sizeof(*t));
            for (size_t i = 0; i < c->trees_cap; i++)
                if (c->trees[i].v)
                    *tree_slot(t, cap, c->trees[i].raw) = c->trees[i];
            free(c->trees);
            c->trees = t;
            c->trees_cap = cap;
        }
    }
    struct tree_ent *e = tree_slot(c->trees, c->trees_cap, k);
    if (e->v)
        return;
    e->raw = k;
    e->v = json_incref(v);
    c->trees_n++;
    c->trees_bytes += bytes;
}

static json_t *req_json_split(struct xchg_cache *c, const struct jspan *doc,
                              struct jspan msgs, long n,
                              const struct jspan *tools, struct xchg *x);

json_t *xchg_req_json(struct xchg_cache *c, const struct jspan *doc,
                      struct xchg *x)
{
    struct jspan msgs;
    if (!c)
        return jscan_json(doc);
    /* the buffer grows to the longest history seen: one walk, not two */
    long n =
        jscan_member_elements(doc, "messages", &msgs, c->spans, c->spans_cap);
    if (n < 0)
        return jscan_json(doc);
    return req_json_split(c, doc, msgs, n, NULL, x);
}

json_t *xchg_req_json_msgs(struct xchg_cache *c, const struct jspan *doc,
                           const struct jspan *msgs, const struct jspan *tools,
                           struct xchg *x)
{
    if (!c || doc->t != JS_OBJECT || msgs->t != JS_ARRAY)
        return jscan_json(doc);
    long n = jscan_elements(msgs, c->spans, c->spans_cap);
    return req_json_split(c, doc, *msgs, n, tools, x);
}

/* xchg_req_json for a body whose messages array is msgs, with n elements,
 * the first spans_cap of them in c->spans */
static json_t *req_json_split(struct xchg_cache *c, const struct jspan *doc,
                              struct jspan msgs, long n,
                              const struct jspan *tools, struct xchg *x)
{
    if ((size_t)n > c->spans_cap) {
        c->spans_cap = (size_t)n + (size_t)n / 2;
        c->spans = xrealloc(c->spans, c->spans_cap * sizeof(*c->spans));
        jscan_elements(&msgs, c->spans, c->spans_cap);
    }
    struct jspan *sp = c->spans;
    json_t *arr = json_array();
    free(x->req_msg_raw);
    free(x->req_msg_new);
    x->req_msg_raw = xmalloc(((size_t)n + 1) * sizeof(*x->req_msg_raw));
    x->req_msg_new = xcalloc((size_t)n + 1, sizeof(*x->req_msg_new));
    x->req_msg_n = (size_t)n;
    for (long i = 0; i < n; i++) {
        XXH128_hash_t k = XXH3_128bits(sp[i].p, sp[i].n);
        x->req_msg_raw[i] = k;
        const struct tree_ent *e =
            c->trees_cap ? tree_slot(c->trees, c->trees_cap, k) : NULL;
        if (e && e->v) {
            json_array_append(arr, e->v);
            continue;
        }
        json_t *v = jscan_json(&sp[i]);
        x->req_msg_new[i] = true;
        tree_add(c, k, v, sp[i].n);
        json_array_append_new(arr, v);
    }
    /* the rest of the body: the parameters and tools, by their bytes */
    size_t before = (size_t)(msgs.p - doc->p);
    const char *after = msgs.p + msgs.n;
    XXH128_hash_t k1 = XXH3_128bits(doc->p, before);
    x->req_rest_raw =
        XXH3_128bits_withSeed(after, (size_t)(doc->p + doc->n - after),
                              k1.low64 ^ k1.high64 ^ before);
    if (!tools || tools->t == JS_NONE)
        return jscan_json_with(doc, &msgs, arr);
    /* the tools, like a message, shared by the requests that send the
     * same bytes (a harness sends its tool schemas with every request) */
    XXH128_hash_t tk = XXH3_128bits(tools->p, tools->n);
    const struct tree_ent *te =
        c->trees_cap ? tree_slot(c->trees, c->trees_cap, tk) : NULL;
    json_t *tv;
    if (te && te->v) {
        tv = json_incref(te->v);
    } else {
        tv = jscan_json(tools);
        tree_add(c, tk, tv, tools->n);
    }
    return jscan_json_with2(doc, &msgs, arr, tools, tv);
}

static const char SQL_BLOB_GET[] = "SELECT raw_len, zip, z FROM xchg_blob"
                                   " WHERE h=?";

/* Loads blob h as JSON (new reference) or NULL when missing or corrupt. */
static json_t *blob_load(struct db *db, struct xchg_cache *c, int64_t h)
{
    struct db_stmt *st = xchg_prep(c, db, SQL_BLOB_GET);
    json_t *v = NULL;
    if (!st)
        return NULL;
    db_bind_int64(st, 1, h);
    if (db_step(st) == DB_ROW && db_column_type(st, 0) == DB_INTEGER &&
        db_column_int64(st, 0) >= 0 && db_column_type(st, 1) == DB_INTEGER) {
        /* raw_len and zip may be anything in a corrupt store: unpack
         * checks them against the bytes before it allocates */
        char *s =
            xchg_unpack(db_column_blob(st, 2), (size_t)db_column_bytes(st, 2),
                        (size_t)db_column_int64(st, 0), db_column_int(st, 1));
        if (s)
            v = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        free(s);
    }
    xchg_unprep(c, st);
    return v;
}

static struct blob_ent *blob_slot(struct blob_ent *t, size_t cap, uint64_t h)
{
    size_t i = hash_mix64(h) & (cap - 1);
    while (t[i].h && t[i].h != h)
        i = (i + 1) & (cap - 1);
    return &t[i];
}

/* Blob h through c's cache of parsed blobs: a borrowed reference, shared
 * by every exchange of the walk that names h, or NULL when missing or
 * corrupt (not cached: each try reports it). */
json_t *xchg_blob_get(struct db *db, struct xchg_cache *c, int64_t h)
{
    if (!h) {
        if (!c->blob0)
            c->blob0 = blob_load(db, c, h);
        return c->blob0;
    }
    if (c->blobs_cap) {
        struct blob_ent *e = blob_slot(c->blobs, c->blobs_cap, (uint64_t)h);
        if (e->h)
            return e->v;
    }
    json_t *v = blob_load(db, c, h);
    if (!v)
        return NULL;
    if (2 * (c->blobs_n + 1) > c->blobs_cap) {
        size_t cap = c->blobs_cap ? 2 * c->blobs_cap : 1024;
        struct blob_ent *t = xcalloc(cap, sizeof(*t));
        for (size_t i = 0; i < c->blobs_cap; i++)
            if (c->blobs[i].h)
                *blob_slot(t, cap, c->blobs[i].h) = c->blobs[i];
        free(c->blobs);
        c->blobs = t;
        c->blobs_cap = cap;
    }
    struct blob_ent *e = blob_slot(c->blobs, c->blobs_cap, (uint64_t)h);
    e->h = (uint64_t)h;
    e->v = v;
    c->blobs_n++;
    return v;
}

/* ---- message lists ---- */

static void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Resolves the message list of exchange id through the cache; NULL when the
 * row is missing or not a chat request. */
struct list_ent *xchg_list_load(struct db *db, struct xchg_cache *c, int64_t id,
                                int guard)
{
    struct list_ent *e = cache_get(c, id);
    if (e)
        return e;
    if (guard > XCHG_MAX_DEPTH + 1)
        return NULL;
    struct db_stmt *st = NULL;
    if (!(st = xchg_prep(c, db, XCHG_SQL_LIST_LOAD)))
        return NULL;
    db_bind_int64(st, 1, id);
    if (db_step(st) != DB_ROW) {
        xchg_unprep(c, st);
        return NULL;
    }
    /* every column as untrusted: types, a prefix no longer than the
     * base's list (read first, before anything is sized by it), whole
     * 8-byte hashes */
    int tb = db_column_type(st, 0), tm = db_column_type(st, 3);
    int64_t base = db_column_int64(st, 0);
    int64_t prefix = db_column_int64(st, 1);
    int depth = db_column_int(st, 2);
    size_t mlen = (size_t)db_column_bytes(st, 3);
    if ((tb != DB_INTEGER && tb != DB_NULL) ||
        db_column_type(st, 1) != DB_INTEGER || prefix < 0 ||
        (tm != DB_BLOB && tm != DB_NULL) || mlen % 8 ||
        mlen / 8 > XCHG_RAW_MAX / 8 || (prefix && (!base || base == id))) {
        xchg_unprep(c, st);
        return NULL;
    }
    size_t own = mlen / 8;
    uint64_t *h = xmalloc((own + 1) * sizeof(*h));
    const unsigned char *p = db_column_blob(st, 3);
    for (size_t i = 0; i < own; i++)
        h[i] = xchg_get_be64(p + 8 * i);
    xchg_unprep(c, st);
    if (prefix) {
        struct list_ent *b = xchg_list_load(db, c, base, guard + 1);
        if (!b || b->n < (size_t)prefix) {
            free(h);
            return NULL;
        }
        uint64_t *all = xmalloc(((size_t)prefix + own + 1) * sizeof(*all));
        memcpy(all, b->h, (size_t)prefix * sizeof(*all));
        memcpy(all + prefix, h, own * sizeof(*all));
        free(h);
        h = all;
    }
    return cache_put(c, id, depth, h, (size_t)prefix + own);
}

static size_t common_prefix(const uint64_t *a, size_t na, const uint64_t *b,
                            size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

struct base_pick {
    int64_t id;
    size_t prefix;
    int depth;
};

static struct recent_ent *recent_slot(struct xchg_cache *c, const char *session)
{
    return &c->recent[hash64(session, strlen(session), 0) % RECENT_SLOTS];
}

/* Row id, a chat exchange of session, was just inserted: it is now the
 * newest of the session's candidates. A session not in its slot (another
 * took it) is read again by the next pick_base. */
static void recent_push(struct xchg_cache *c, const char *session, int64_t id)
{
    struct recent_ent *r = recent_slot(c, session);
    if (!r->session || strcmp(r->session, session))
        return;
    memmove(r->ids + 1, r->ids, (BASE_CANDIDATES - 1) * sizeof(r->ids[0]));
    r->ids[0] = id;
    if (r->n < BASE_CANDIDATES)
        r->n++;
}

static void recent_clear(struct xchg_cache *c)
{
    for (int i = 0; i < RECENT_SLOTS; i++) {
        free(c->recent[i].session);
        memset(&c->recent[i], 0, sizeof(c->recent[i]));
    }
}

/* At the start of a transaction: forgets the recent ids when the file
 * changed since this cache's last commit (another connection, or another
 * cache on this one), as the rows it added would be missing from them. */
static void recent_check(struct xchg_cache *c, struct db *db)
{
    unsigned int v = db_data_version(db);
    if (!v || v != c->data_version)
        recent_clear(c);
}

/* Picks the recent exchange of the same session sharing the longest prefix
 * of messages with h[0..n). */
static int pick_base(struct db *db, struct xchg_cache *c, const char *session,
                     const uint64_t *h, size_t n, struct base_pick *bp,
                     struct diag *d)
{
    struct db_stmt *st = NULL;
    int64_t ids[BASE_CANDIDATES];
    int nid = 0;

    memset(bp, 0, sizeof(*bp));
    struct recent_ent *r = c ? recent_slot(c, session) : NULL;
    if (r && r->session && !strcmp(r->session, session)) {
        c->recent_hits++;
        nid = r->n;
        memcpy(ids, r->ids, sizeof(ids));
    } else {
        if (!(st = xchg_prep(c, db, SQL_RECENT)))
            return xchg_sql_fail(db, d, "cannot read recent exchanges");
        db_bind_text(st, 1, session, -1, DB_STATIC);
        while (nid < BASE_CANDIDATES && db_step(st) == DB_ROW)
            ids[nid++] = db_column_int64(st, 0);
        xchg_unprep(c, st);
        if (r) {
            free(r->session);
            r->session = xstrdup(session);
            r->n = nid;
            memcpy(r->ids, ids, sizeof(ids));
        }
    }
    for (int i = 0; i < nid; i++) {
        struct list_ent *e = xchg_list_load(db, c, ids[i], 0);
        if (!e || e->depth + 1 >= XCHG_MAX_DEPTH)
            continue;
        size_t k = common_prefix(e->h, e->n, h, n);
        if (k > bp->prefix) {
            bp->id = ids[i];
            bp->prefix = k;
            bp->depth = e->depth + 1;
        }
    }
    return 0;
}

/* ---- put ---- */

static bool is_chat(const json_t *body)
{
    return json_is_object(body) &&
           json_is_array(json_object_get(body, "messages"));
}

struct row_req {
    int64_t params, tools;
    bool has_tools;
    struct base_pick base;
    unsigned char *msgs;
    size_t msgs_len;
    uint64_t *h; /* the full list, for the cache */
    size_t n;
};

/* The memo keys of a request's parameter and tools blobs, from the hash of
 * its bytes outside the messages (xchg.req_rest_raw): distinct from each
 * other and, being hashes of other bytes, from the messages' keys. */
static XXH128_hash_t rest_key(const struct xchg *x, uint64_t which)
{
    XXH128_hash_t k = x->req_rest_raw;
    if (raw_empty(k))
        return k;
    k.low64 ^= which;
    k.high64 ^= which * 0x9E3779B97F4A7C15u;
    return k;
}

/* The parameter (BLOB_PARAMS) and tools blobs of a chat request; their
 * hashes come from the memo when the same bytes were stored before. */
static int put_params(struct db *db, struct xchg_cache *c, const struct xchg *x,
                      struct row_req *r, struct diag *d)
{
    const json_t *body = x->req_body;
    json_t *tools = json_object_get(body, "tools");
    XXH128_hash_t pk = c ? rest_key(x, 1) : (XXH128_hash_t){0, 0};
    XXH128_hash_t tk = c ? rest_key(x, 2) : (XXH128_hash_t){0, 0};
    int rc = 0;

    r->params = c ? (int64_t)memo_known(c, pk) : 0;
    if (r->params) {
        c->rest_hits++;
    } else {
        json_t *params = json_copy((json_t *)body);
        json_object_del(params, "messages");
        json_object_del(params, "tools");
        rc = blob_put(db, c, BLOB_PARAMS, params, &r->params, d);
        json_decref(params);
        if (rc)
            return rc;
        if (c)
            memo_add(c, pk, (uint64_t)r->params);
    }
    if (!tools)
        return 0;
    r->has_tools = true;
    r->tools = c ? (int64_t)memo_known(c, tk) : 0;
    if (r->tools) {
        c->rest_hits++;
        return 0;
    }
    rc = blob_put(db, c, BLOB_TOOLS, tools, &r->tools, d);
    if (!rc && c)
        memo_add(c, tk, (uint64_t)r->tools);
    return rc;
}

static int put_request(struct db *db, struct xchg_cache *c,
                       const struct xchg *x, struct row_req *r, struct diag *d)
{
    const json_t *msgs = json_object_get(x->req_body, "messages");
    int rc = put_params(db, c, x, r, d);
    if (rc)
        return rc;
    r->n = json_array_size(msgs);
    r->h = xmalloc((r->n + 1) * sizeof(*r->h));
    bool have_raw = c && x->req_msg_raw && x->req_msg_n == r->n;
    struct jspan *sp = c && !have_raw ? message_spans(x, r->n) : NULL;
    for (size_t i = 0; i < r->n; i++) {
        XXH128_hash_t raw = {0, 0};
        if (have_raw)
            raw = x->req_msg_raw[i];
        else if (sp)
            raw = XXH3_128bits(sp[i].p, sp[i].n);
        if (have_raw || sp) {
            if ((r->h[i] = memo_known(c, raw))) {
                c->memo_hits++;
                continue;
            }
        }
        int64_t h;
        rc = blob_put(db, c, BLOB_MESSAGE, json_array_get(msgs, i), &h, d);
        if (rc)
            break;
        r->h[i] = (uint64_t)h;
        if (have_raw || sp)
            memo_add(c, raw, (uint64_t)h);
    }
    free(sp);
    if (rc)
        return rc;
    rc =
        pick_base(db, c, x->session ? x->session : "", r->h, r->n, &r->base, d);
    if (rc)
        return rc;
    size_t own = r->n - r->base.prefix;
    r->msgs_len = own * 8;
    r->msgs = xmalloc(r->msgs_len + 1);
    for (size_t i = 0; i < own; i++)
        put_be64(r->msgs + 8 * i, r->h[r->base.prefix + i]);
    return 0;
}

static void bind_json(struct db_stmt *st, int i, const json_t *j)
{
    size_t len = 0;
    char *s = j ? jdump_str(j, false, &len) : NULL;
    if (s)
        db_bind_text(st, i, s, (int)len, free);
    else
        db_bind_null(st, i);
}

/* j's text, else hl's when it is set, else NULL; hl's text is written
 * into tb and bound there (tb outlives the statement's run). */
static void bind_headers(struct db_stmt *st, int i, const json_t *j,
                         const struct hdrs *hl, struct buf *tb)
{
    if (j || !hl->set) {
        bind_json(st, i, j);
        return;
    }
    buf_reset(tb);
    if (hdrs_json(hl, tb)) {
        db_bind_null(st, i);
        return;
    }
    db_bind_text(st, i, tb->data, (int)tb->len, DB_STATIC);
}

static void bind_packed(struct xchg_cache *c, struct db_stmt *st, int i,
                        const void *data, size_t len, bool lines)
{
    void *z;
    size_t zlen;
    int zip;
    if (!data) {
        db_bind_null(st, i);
        db_bind_null(st, i + 1);
        db_bind_null(st, i + 2);
        return;
    }
    if (len < 64 || (!lines && len < PACK_MIN)) {
        /* stored as it is (what pack would give), bound where it is: the
         * caller keeps data until the statement has run */
        db_bind_blob(st, i, data, (int)len, DB_STATIC);
        db_bind_int64(st, i + 1, (int64_t)len);
        db_bind_int(st, i + 2, ZIP_NONE);
        return;
    }
    pack(c, data, len, lines, &z, &zlen, &zip);
    db_bind_blob(st, i, z, (int)zlen, free);
    db_bind_int64(st, i + 1, (int64_t)len);
    db_bind_int(st, i + 2, zip);
}

static const char INSERT_SQL[] =
    "INSERT INTO xchg(session, kind, started, method, path, req_headers,"
    " req_params, req_tools, req_base, req_prefix, req_depth, req_msgs,"
    " req_raw, req_raw_len, req_raw_zip, req_malformed, status,"
    " resp_headers, resp_raw, resp_raw_len, resp_raw_zip, streamed, reply,"
    " up_ttfb_ms, up_total_ms, down_ttfb_ms, down_total_ms, ending,"
    " req_redacted)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
    " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28,"
    " ?29)";

/* A stream's max gap as the reply column of a derived stream reply (see
 * read_row): milliseconds as a JSON number with six decimals, to the
 * nanosecond (the clock's resolution; the double it came from carries
 * rounding below that), written without snprintf. NUL-terminated; its
 * length is returned. Out of range (negative, not finite, 1e12 ms or
 * more): "0". */
static size_t gap_text(double ms, char out[GAP_TEXT_MAX])
{
    if (!(ms >= 0 && ms < 1e12)) {
        memcpy(out, "0", 2);
        return 1;
    }
    /* whole and fraction apart: ms * 1e6 would pass 2^53 */
    unsigned long long whole = (unsigned long long)ms;
    unsigned long frac = (unsigned long)((ms - (double)whole) * 1e6 + 0.5);
    if (frac >= 1000000) {
        whole++;
        frac -= 1000000;
    }
    char s[GAP_TEXT_MAX], *p = s + sizeof(s);
    *--p = 0;
    for (int i = 0; i < 6; i++, frac /= 10)
        *--p = (char)('0' + frac % 10);
    *--p = '.';
    do {
        *--p = (char)('0' + whole % 10);
        whole /= 10;
    } while (whole);
    size_t n = (size_t)(s + sizeof(s) - 1 - p);
    memcpy(out, p, n + 1);
    return n;
}

static int insert_row(struct db *db, struct xchg_cache *c, const struct xchg *x,
                      const struct row_req *r, bool chat, struct diag *d)
{
    struct db_stmt *st = NULL;
    char *body_text = NULL; /* bound until the step */
    char gap[GAP_TEXT_MAX]; /* likewise */
    if (!(st = xchg_prep(c, db, INSERT_SQL)))
        return xchg_sql_fail(db, d, "cannot store an exchange");
    db_bind_text(st, 1, x->session ? x->session : "", -1, DB_STATIC);
    db_bind_text(st, 2, x->kind ? x->kind : "other", -1, DB_STATIC);
    db_bind_double(st, 3, x->started);
    db_bind_text(st, 4, x->method ? x->method : "", -1, DB_STATIC);
    db_bind_text(st, 5, x->path ? x->path : "", -1, DB_STATIC);
    bind_headers(st, 6, x->req_headers, &x->req_hl, &c->hdr_text[0]);
    db_bind_int64(st, 10, (int64_t)r->base.prefix);
    db_bind_int(st, 11, r->base.depth);
    if (chat) {
        db_bind_int64(st, 7, r->params);
        if (r->has_tools)
            db_bind_int64(st, 8, r->tools);
        else
            db_bind_null(st, 8);
        if (r->base.id)
            db_bind_int64(st, 9, r->base.id);
        else
            db_bind_null(st, 9);
        db_bind_blob(st, 12, r->msgs, (int)r->msgs_len, DB_STATIC);
        bind_packed(c, st, 13, NULL, 0, false);
    } else {
        for (int i = 7; i <= 9; i++)
            db_bind_null(st, i);
        db_bind_null(st, 12);
        if (x->req_raw) {
            bind_packed(c, st, 13, x->req_raw, x->req_raw_len, false);
        } else if (x->req_body) {
            size_t len;
            body_text = canonical(x->req_body, &len);
            bind_packed(c, st, 13, body_text, len, false);
        } else {
            bind_packed(c, st, 13, NULL, 0, false);
        }
    }
    db_bind_int(st, 16, x->req_malformed);
    db_bind_int(st, 17, x->status);
    bind_headers(st, 18, x->resp_headers, &x->resp_hl, &c->hdr_text[1]);
    bind_packed(c, st, 19, x->resp_raw, x->resp_raw_len, x->streamed);
    db_bind_int(st, 22, x->streamed);
    if (!x->reply && x->reply_text)
        db_bind_text(st, 23, x->reply_text, (int)x->reply_text_len, DB_STATIC);
    else if (!x->reply && x->reply_of_raw && x->resp_raw && !x->streamed)
        db_bind_text(st, 23, "", 0, DB_STATIC); /* see read_row */
    else if (!x->reply && x->reply_of_raw && x->streamed)
        db_bind_text(st, 23, gap, (int)gap_text(x->stream_gap_ms, gap),
                     DB_STATIC); /* likewise */
    else
        bind_json(st, 23, x->reply);
    db_bind_double(st, 24, x->up_ttfb_ms);
    db_bind_double(st, 25, x->up_total_ms);
    db_bind_double(st, 26, x->down_ttfb_ms);
    db_bind_double(st, 27, x->down_total_ms);
    db_bind_int(st, 28, (int)x->end);
    db_bind_int(st, 29, x->req_redacted);
    int rc = db_step(st) == DB_DONE
                 ? 0
                 : xchg_sql_fail(db, d, "cannot store an exchange");
    xchg_unprep(c, st);
    free(body_text);
    return rc;
}

static const char SQL_SAVEPOINT[] = "SAVEPOINT one";
static const char SQL_ROLLBACK_TO[] = "ROLLBACK TO one";
static const char SQL_RELEASE[] = "RELEASE one";

/* Runs a statement without results through the statement cache. */
static void run_stmt(struct xchg_cache *c, struct db *db, const char *sql)
{
    struct db_stmt *st = xchg_prep(c, db, sql);
    if (!st)
        return;
    db_step(st);
    xchg_unprep(c, st);
}

static const char SQL_BEGIN[] = "BEGIN IMMEDIATE";
static const char SQL_COMMIT[] = "COMMIT";

/* Like run_stmt, with db_step's result: BEGIN and COMMIT run once per
 * batch, and a batch under load is often one or two exchanges, so their
 * parsing (db_exec) was a visible part of storing one. */
static int step_stmt(struct xchg_cache *c, struct db *db, const char *sql)
{
    struct db_stmt *st = xchg_prep(c, db, sql);
    if (!st)
        return DB_ERROR;
    int rc = db_step(st);
    xchg_unprep(c, st);
    return rc;
}

static void cache_clear(struct xchg_cache *c)
{
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(c->e[i].h);
        memset(&c->e[i], 0, sizeof(c->e[i]));
    }
    recent_clear(c);
}

/* Stores x inside the caller's transaction; x->id is set on success. */
static int put_one(struct db *db, struct xchg_cache *c, struct xchg *x,
                   struct row_req *r, struct diag *d)
{
    bool chat = is_chat(x->req_body);
    int rc = chat ? put_request(db, c, x, r, d) : 0;
    if (!rc)
        rc = insert_row(db, c, x, r, chat, d);
    x->id = rc ? 0 : db_last_insert_rowid(db);
    return rc;
}

static void row_req_release(struct row_req *r)
{
    free(r->h);
    free(r->msgs);
    memset(r, 0, sizeof(*r));
}

/* Stores xs[0..n) in the open transaction, each inside its own savepoint
 * when per_one, so that a failing exchange is undone alone: rcs[i] says
 * which did. Without per_one the first failure stops the batch and is
 * returned (the caller rolls back). */
static int put_all(struct db *db, struct xchg_cache *c, struct xchg **xs,
                   size_t n, int *rcs, struct row_req *rr, bool per_one,
                   struct diag *d)
{
    for (size_t i = 0; i < n; i++) {
        size_t mark = c->pend_n;
        if (per_one)
            run_stmt(c, db, SQL_SAVEPOINT);
        rcs[i] = put_one(db, c, xs[i], &rr[i], d);
        if (rcs[i] && !per_one)
            return rcs[i];
        if (rcs[i]) {
            run_stmt(c, db, SQL_ROLLBACK_TO);
            c->pend_n = mark; /* its blobs went with it */
        } else if (rr[i].h) {
            /* the next exchange of the batch may take this one as its
             * base: known now, not read back (a failed commit clears the
             * cache) */
            cache_put(c, xs[i]->id, rr[i].base.depth, rr[i].h, rr[i].n);
            rr[i].h = NULL;
            recent_push(c, xs[i]->session ? xs[i]->session : "", xs[i]->id);
        }
        if (per_one)
            run_stmt(c, db, SQL_RELEASE);
    }
    return 0;
}

/* Undoes the open transaction: lists read or cached inside it may name
 * rows that are gone. */
static void roll_back(struct db *db, struct xchg_cache *c, struct xchg **xs,
                      size_t n, struct row_req *rr)
{
    db_exec(db, "ROLLBACK", NULL);
    cache_clear(c);
    c->pend_n = 0;
    for (size_t i = 0; i < n; i++) {
        row_req_release(&rr[i]);
        xs[i]->id = 0;
    }
}

/* How often a batch that waited too long for another writer's blob is
 * begun again before its exchanges are taken one by one. */
#define PEER_RETRIES 6

/* Sleeps before the attempt-th retry: a few milliseconds, more each time,
 * and different in each process, so that two writers that timed out on
 * each other do not meet again in step. */
static void peer_backoff(int attempt)
{
    static _Thread_local uint64_t s;
    if (!s)
        s = hash_mix2((uint64_t)getpid(), (uint64_t)(uintptr_t)&s) | 1;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    clock_nap_ms((long)(s % 20) + 10L * attempt);
}

/*
 * Begins a transaction and stores the whole batch in it. On PostgreSQL a
 * failure because another writer's open transaction held a blob this
 * batch inserts too (the same message, from a conversation that moved
 * between records; two such transactions can each wait for the other)
 * is no fault of the batch: it is rolled back and begun again, up to
 * PEER_RETRIES times, instead of going to the spill file. SQLite's lock
 * is the whole store's, held by another program: that batch is not
 * retried (record spills while the lock lasts).
 */
static int put_all_retried(struct db *db, struct xchg_cache *c,
                           struct xchg **xs, size_t n, int *rcs,
                           struct row_req *rr, struct diag *d)
{
    for (int attempt = 0;; attempt++) {
        if (step_stmt(c, db, SQL_BEGIN) != DB_DONE)
            return xchg_sql_fail(db, d, "cannot begin a transaction");
        recent_check(c, db);
        int rc = put_all(db, c, xs, n, rcs, rr, false, d);
        if (!rc)
            return 0;
        roll_back(db, c, xs, n, rr);
        if (rc != -EBUSY || db_backend(db) != DB_POSTGRES ||
            attempt == PEER_RETRIES)
            return 1; /* rolled back; rcs says which failed */
        peer_backoff(attempt);
    }
}

int xchg_put_batch(struct db *db, struct xchg_cache *c, struct xchg **xs,
                   size_t n, int *rcs, struct diag *d)
{
    struct row_req *rr = xcalloc(n ? n : 1, sizeof(*rr));
    int rc = 0;

    c->pend_n = 0;
    /* The whole batch in one go: a savepoint per exchange costs more SQL
     * than a small exchange's own rows. Only when one of them fails is
     * the batch done again with savepoints, so that the bad exchange goes
     * alone to the spill file; a batch of one needs none. */
    rc = put_all_retried(db, c, xs, n, rcs, rr, d);
    if (rc < 0)
        goto fail_all;
    if (rc) {
        rc = 0;
        if (n == 1) { /* rcs[0] says why; nothing was committed */
            rc = rcs[0];
            goto out;
        }
        if (step_stmt(c, db, SQL_BEGIN) != DB_DONE) {
            rc = xchg_sql_fail(db, d, "cannot begin a transaction");
            goto fail_all;
        }
        put_all(db, c, xs, n, rcs, rr, true, d);
    }
    if (c->pre_commit && c->pre_commit(db, c->pre_commit_ud) != DB_OK) {
        rc = xchg_sql_fail(db, d, "cannot commit exchanges");
        roll_back(db, c, xs, n, rr);
        goto fail_all;
    }
    if (step_stmt(c, db, SQL_COMMIT) != DB_DONE) {
        rc = xchg_sql_fail(db, d, "cannot commit exchanges");
        roll_back(db, c, xs, n, rr);
        goto fail_all;
    }
    for (size_t i = 0; i < c->pend_n; i++)
        known_add(c, c->pend[i]);
    c->pend_n = 0;
    c->data_version = db_data_version(db);
    goto out;
fail_all:
    for (size_t i = 0; i < n; i++) {
        rcs[i] = rc;
        xs[i]->id = 0;
    }
out:
    for (size_t i = 0; i < n; i++)
        row_req_release(&rr[i]);
    free(rr);
    return rc;
}

int xchg_put_cached(struct db *db, struct xchg_cache *c, struct xchg *x,
                    struct diag *d)
{
    struct xchg_cache *own = c ? NULL : xchg_cache_new();
    int one_rc = 0;
    int rc = xchg_put_batch(db, own ? own : c, &x, 1, &one_rc, d);
    xchg_cache_free(own);
    return rc ? rc : one_rc;
}

int xchg_put(struct db *db, struct xchg *x, struct diag *d)
{
    return xchg_put_cached(db, NULL, x, d);
}
