/*
 * xchg_read: reading recorded exchanges back (xchg_each_flags and its
 * forms, the storage figures; contract in xchg.h). Every column of every
 * row is untrusted. With XCHG_EACH_VIEWS the messages of a walk's
 * conversations are kept as a few growing arrays, each row a view of one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "core/xalloc.h"
#include "store/xchg.h"
#include "store/xchg_int.h"
#include "wire/reply.h"

/* ---- read ---- */

/* Every column of every row is read as untrusted (a store can be damaged
 * by a disk, a tool or a hand): each is checked for its type and range
 * before it is used, and a row that fails a check is reported with the
 * column and skipped (xchg_each_checked), never read on a guess. */

/* The row being read and, once a check fails, what failed. */
struct rowck {
    struct db_stmt *st;
    struct xchg_bad *bad;
};

static int col_bad(struct rowck *r, const char *column, const char *why)
{
    r->bad->column = column;
    r->bad->why = why;
    return -1;
}

/* A text column: a fresh copy in *out (NULL for SQL NULL when !required). */
static int col_text(struct rowck *r, int i, const char *name, bool required,
                    char **out)
{
    int t = db_column_type(r->st, i);
    *out = NULL;
    if (t == DB_NULL && !required)
        return 0;
    if (t != DB_TEXT)
        return col_bad(r, name, t == DB_NULL ? "NULL" : "not text");
    const unsigned char *s = db_column_text(r->st, i);
    size_t n = (size_t)db_column_bytes(r->st, i);
    if (!s || !utf8_valid_text((const char *)s, n))
        return col_bad(r, name, "not UTF-8 text");
    *out = xstrndup((const char *)s, n);
    return 0;
}

/* An integer column within [lo, hi] (SQL NULL: 0 when null_ok). */
static int col_int(struct rowck *r, int i, const char *name, int64_t lo,
                   int64_t hi, bool null_ok, int64_t *out)
{
    int t = db_column_type(r->st, i);
    *out = 0;
    if (t == DB_NULL && null_ok)
        return 0;
    if (t != DB_INTEGER)
        return col_bad(r, name, t == DB_NULL ? "NULL" : "not an integer");
    *out = db_column_int64(r->st, i);
    if (*out < lo || *out > hi)
        return col_bad(r, name, "out of range");
    return 0;
}

/* A number column (SQL NULL: 0 when null_ok). */
static int col_num(struct rowck *r, int i, const char *name, bool null_ok,
                   double *out)
{
    int t = db_column_type(r->st, i);
    *out = 0;
    if (t == DB_NULL && null_ok)
        return 0;
    if (t != DB_INTEGER && t != DB_FLOAT)
        return col_bad(r, name, t == DB_NULL ? "NULL" : "not a number");
    *out = db_column_double(r->st, i);
    return 0;
}

/* A JSON object column (SQL NULL: none). */
static int col_object(struct rowck *r, int i, const char *name, json_t **out)
{
    char *s = NULL;
    *out = NULL;
    if (col_text(r, i, name, false, &s))
        return -1;
    if (!s)
        return 0;
    *out = json_loads(s, JSON_ALLOW_NUL, NULL);
    free(s);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return col_bad(r, name, "not a JSON object");
    }
    return 0;
}

/* A packed value (columns i, i + 1, i + 2: bytes, raw length, coding):
 * *out NULL and *len 0 for SQL NULL, else the decoded bytes. */
static int col_packed(struct rowck *r, int i, const char *name, char **out,
                      size_t *len)
{
    int t = db_column_type(r->st, i);
    int64_t raw_len, zip;
    *out = NULL;
    *len = 0;
    if (t == DB_NULL)
        return 0;
    if (t != DB_BLOB && t != DB_TEXT)
        return col_bad(r, name, "not bytes");
    if (col_int(r, i + 1, name, 0, (int64_t)XCHG_RAW_MAX, false, &raw_len) ||
        col_int(r, i + 2, name, ZIP_NONE, ZIP_LINES_DEFLATE, false, &zip))
        return col_bad(r, name, "bad length or coding");
    const void *z = db_column_blob(r->st, i);
    *out = xchg_unpack(z, (size_t)db_column_bytes(r->st, i), (size_t)raw_len,
                       (int)zip);
    if (!*out)
        return col_bad(r, name, "cannot be unpacked");
    *len = (size_t)raw_len;
    return 0;
}

/* The reply column (see read_row), with resp_raw already read. */
static int col_reply(struct rowck *r, struct xchg *x)
{
    int t = db_column_type(r->st, 19);
    if (t == DB_NULL)
        return 0;
    if (t != DB_TEXT)
        return col_bad(r, "reply", "not text");
    const char *s = (const char *)db_column_text(r->st, 19);
    if (s && !s[0]) {
        x->reply = x->resp_raw && !x->streamed
                       ? reply_from_body(x->resp_raw, x->resp_raw_len)
                       : NULL;
        return 0;
    }
    if (s && x->streamed && s[0] >= '0' && s[0] <= '9') {
        char *end;
        double gap = strtod(s, &end);
        if (*end)
            return col_bad(r, "reply", "not a stream's gap");
        x->reply = reply_from_stream(x->resp_raw ? x->resp_raw : "",
                                     x->resp_raw_len, gap);
        return 0;
    }
    return col_object(r, 19, "reply", &x->reply);
}

/* Rebuilds the chat request body of row st (columns as in SELECT_SQL).
 * The body object is x's own; its messages and tools are shared with the
 * cache (xchg_each: read-only). */
static size_t hashes_shared(const uint64_t *a, const uint64_t *b, size_t n)
{
    if (!memcmp(a, b, n * sizeof(*a)))
        return n;
    size_t k = 0;
    while (k < n && a[k] == b[k])
        k++;
    return k;
}

/* A slot for a new lineage: a free one, else the least recently used. */
static struct lineage *lineage_slot(struct xchg_cache *c)
{
    struct lineage *slot = NULL;
    for (int i = 0; i < LINEAGES; i++) {
        struct lineage *l = &c->lin[i];
        if (!l->arr)
            return l;
        if (!slot || l->used < slot->used)
            slot = l;
    }
    return slot;
}

/* A new lineage holding the first k messages of from (may be NULL with k
 * 0), room for n. */
static struct lineage *lineage_fork(struct xchg_cache *c,
                                    const struct lineage *from, size_t k,
                                    size_t n)
{
    struct lineage *l = lineage_slot(c);
    json_t *arr = json_array();
    uint64_t *lh = xmalloc((n + 1) * sizeof(*lh));
    for (size_t i = 0; i < k; i++)
        json_array_append(arr, json_array_get(from->arr, i));
    if (k)
        memcpy(lh, from->h, k * sizeof(*lh));
    /* from may be the slot taken: its arrays are let go only now */
    json_decref(l->arr);
    free(l->h);
    l->arr = arr;
    l->h = lh;
    l->n = k;
    l->cap = n + 1;
    l->gen++;
    return l;
}

/* Appends the messages h[0..m) (read from the blobs) to l; -1, with l
 * unchanged, when a blob is missing. An element that is not an object
 * ([{...}, 5], [null]) is a message as the client sent it: kept, and left
 * to the readers (audit's request.malformed_messages) to report. */
static int lineage_append(struct db *db, struct xchg_cache *c,
                          struct lineage *l, const uint64_t *h, size_t m)
{
    size_t from = l->n;
    for (size_t i = 0; i < m; i++) {
        json_t *v = xchg_blob_get(db, c, (int64_t)h[i]);
        if (!v) { /* any JSON value is a message as sent: [{...}, 5] */
            while (json_array_size(l->arr) > from)
                json_array_remove(l->arr, json_array_size(l->arr) - 1);
            return -1;
        }
        json_array_append(l->arr, v);
    }
    if (from + m > l->cap) {
        l->cap = 2 * (from + m);
        l->h = xrealloc(l->h, l->cap * sizeof(*l->h));
    }
    if (m)
        memcpy(l->h + from, h, m * sizeof(*h));
    l->n = from + m;
    return 0;
}

/* The lineage whose messages h[0..n) are a view of (first n), extended or
 * started as needed; NULL when a message blob is missing (nothing changed
 * then). Compares h with every lineage: for a row whose
 * base the walk has not seen. */
static struct lineage *lineage_for(struct db *db, struct xchg_cache *c,
                                   const uint64_t *h, size_t n)
{
    struct lineage *best = NULL;
    size_t best_k = 0;
    for (int i = 0; i < LINEAGES; i++) {
        struct lineage *l = &c->lin[i];
        if (!l->arr)
            continue;
        size_t k = hashes_shared(l->h, h, l->n < n ? l->n : n);
        if (k > best_k || (k == best_k && best && l->used > best->used)) {
            best = l;
            best_k = k;
        }
    }
    struct lineage *l = best;
    if (!best || (best_k < n && best_k < best->n))
        l = lineage_fork(c, best, best_k, n);
    if (n > l->n && lineage_append(db, c, l, h + l->n, n - l->n))
        return NULL;
    l->used = ++c->lin_clock;
    return l;
}

/* Where the walk put row id's messages: a lineage and their number. */
static struct view_ent *view_slot(struct xchg_cache *c, int64_t id)
{
    if (!c->views)
        c->views = xcalloc(VIEW_SLOTS, sizeof(*c->views));
    return &c->views[(uint64_t)id % VIEW_SLOTS];
}

/* Row id's messages as a view: *l and *n. A row stored as "the first P
 * messages of row B, then these" whose B the walk gave a view of reads
 * only its own hashes: its messages extend B's lineage (nothing is copied
 * when B's were the last of it), or share it (a request sent again), or
 * start a new one from B's first P (a request that parted from it). Other
 * rows go through their whole list (list_load). -1 when a blob is missing
 * or the list is unreadable. */
static int row_view(struct db *db, struct xchg_cache *c, int64_t id,
                    struct lineage **lp, size_t *np)
{
    struct db_stmt *st = xchg_prep(c, db, XCHG_SQL_LIST_LOAD);
    struct lineage *l = NULL;
    size_t n = 0;
    if (!st)
        return -1;
    db_bind_int64(st, 1, id);
    if (db_step(st) != DB_ROW) {
        xchg_unprep(c, st);
        return -1;
    }
    int tb = db_column_type(st, 0), tm = db_column_type(st, 3);
    int64_t base = db_column_int64(st, 0);
    int64_t prefix = db_column_int64(st, 1);
    size_t mlen = (size_t)db_column_bytes(st, 3);
    struct view_ent *b = prefix > 0 ? view_slot(c, base) : NULL;
    bool fast = (tb == DB_INTEGER || tb == DB_NULL) &&
                db_column_type(st, 1) == DB_INTEGER && prefix > 0 && base &&
                base != id && (tm == DB_BLOB || tm == DB_NULL) &&
                mlen % 8 == 0 && mlen / 8 <= XCHG_RAW_MAX / 8 &&
                b->id == base && b->l->gen == b->gen && (size_t)prefix <= b->n;
    if (fast) {
        size_t own = mlen / 8, p = (size_t)prefix;
        uint64_t *h = xmalloc((own + 1) * sizeof(*h));
        const unsigned char *blob = db_column_blob(st, 3);
        for (size_t i = 0; i < own; i++)
            h[i] = xchg_get_be64(blob + 8 * i);
        xchg_unprep(c, st);
        /* b's view is l's first b->n: l's first p are this row's */
        l = b->l;
        size_t k = l->n - p < own ? l->n - p : own;
        k = p + hashes_shared(l->h + p, h, k);
        n = p + own;
        if (k < n && k < l->n)
            l = lineage_fork(c, l, k, n);
        int rc =
            n > l->n ? lineage_append(db, c, l, h + (l->n - p), n - l->n) : 0;
        free(h);
        if (rc)
            return -1;
    } else {
        xchg_unprep(c, st);
        struct list_ent *e = xchg_list_load(db, c, id, 0);
        if (!e || !(l = lineage_for(db, c, e->h, e->n)))
            return -1;
        n = e->n;
    }
    l->used = ++c->lin_clock;
    struct view_ent *v = view_slot(c, id);
    v->id = id;
    v->l = l;
    v->gen = l->gen;
    v->n = n;
    *lp = l;
    *np = n;
    return 0;
}

static int rebuild_body(struct db *db, struct xchg_cache *c, struct rowck *r,
                        struct xchg *x, unsigned flags)
{
    int64_t ph, th;
    if (col_int(r, 6, "req_params", INT64_MIN, INT64_MAX, false, &ph) ||
        col_int(r, 7, "req_tools", INT64_MIN, INT64_MAX, true, &th))
        return -1;
    json_t *params = xchg_blob_get(db, c, ph);
    if (!json_is_object(params))
        return col_bad(r, "req_params", "blob missing or not an object");
    json_t *tools = NULL;
    if (db_column_type(r->st, 7) != DB_NULL) {
        tools = xchg_blob_get(db, c, th);
        if (!json_is_array(tools))
            return col_bad(r, "req_tools", "blob missing or not an array");
    }
    if (flags & XCHG_EACH_VIEWS) {
        struct lineage *l;
        size_t n;
        if (row_view(db, c, x->id, &l, &n))
            return col_bad(r, "req_msgs",
                           "message list unreadable, or a message blob "
                           "missing");
        x->req_body = json_copy(params);
        if (tools) {
            json_object_set(x->req_body, "tools", tools);
            x->req_tools_h = (uint64_t)th;
        }
        x->req_msgs = json_incref(l->arr);
        x->req_msgs_n = n;
        return 0;
    }
    struct list_ent *e = xchg_list_load(db, c, x->id, 0);
    if (!e)
        return col_bad(r, "req_msgs", "message list unreadable");
    json_t *msgs = json_array();
    size_t same = 0;
    if (e->n > c->last_cap) {
        c->last_cap = 2 * e->n;
        c->last_h = xrealloc(c->last_h, c->last_cap * sizeof(*c->last_h));
        c->last_v = xrealloc(c->last_v, c->last_cap * sizeof(*c->last_v));
    }
    while (same < e->n && same < c->last_n && e->h[same] &&
           e->h[same] == c->last_h[same])
        json_array_append(msgs, c->last_v[same++]);
    c->last_n = 0; /* until this row's list is complete */
    for (size_t i = same; i < e->n; i++) {
        json_t *m = xchg_blob_get(db, c, (int64_t)e->h[i]);
        if (!m) { /* a non-object element is kept as it was sent */
            json_decref(msgs);
            return col_bad(r, "req_msgs", "a message blob missing");
        }
        json_array_append(msgs, m);
        c->last_h[i] = e->h[i];
        c->last_v[i] = m;
    }
    c->last_n = e->n;
    json_t *body = json_copy(params);
    if (tools) {
        json_object_set(body, "tools", tools);
        x->req_tools_h = (uint64_t)th;
    }
    json_object_set_new(body, "messages", msgs);
    x->req_body = body;
    x->req_msg_h = xmalloc((e->n + 1) * sizeof(*x->req_msg_h));
    memcpy(x->req_msg_h, e->h, e->n * sizeof(*x->req_msg_h));
    x->req_msg_n = e->n;
    return 0;
}

/* Reads row st into x: 0, or -1 with r->bad naming the column that failed
 * (x then holds what was read so far; the caller releases it). */
static int read_row(struct db *db, struct xchg_cache *c, struct rowck *r,
                    struct xchg *x, unsigned flags)
{
    struct db_stmt *st = r->st;
    int64_t v;
    x->id = db_column_int64(st, 0);
    r->bad->id = x->id;
    if (col_text(r, 1, "session", true, &x->session) ||
        col_text(r, 2, "kind", true, &x->kind) ||
        col_num(r, 3, "started", false, &x->started) ||
        col_text(r, 4, "method", true, &x->method) ||
        col_text(r, 5, "path", true, &x->path) ||
        col_object(r, 8, "req_headers", &x->req_headers))
        return -1;
    r->bad->session = x->session;
    if (col_int(r, 12, "req_malformed", 0, 1, false, &v))
        return -1;
    x->req_malformed = v;
    if (col_int(r, 13, "status", 0, 999, false, &v))
        return -1;
    x->status = (int)v;
    if (col_object(r, 14, "resp_headers", &x->resp_headers) ||
        col_packed(r, 15, "resp_raw", &x->resp_raw, &x->resp_raw_len) ||
        col_int(r, 18, "streamed", 0, 1, false, &v))
        return -1;
    x->streamed = v;
    /* A reply column that is empty, or a number for a stream (never
     * written by older builds, whose column is an object or NULL), says
     * the reply is the one the stored body or stream gives: derived here,
     * with the function the recorder would have used; the number is the
     * stream's max gap (gap_text) */
    if (col_reply(r, x) || col_num(r, 20, "up_ttfb_ms", true, &x->up_ttfb_ms) ||
        col_num(r, 21, "up_total_ms", true, &x->up_total_ms) ||
        col_num(r, 22, "down_ttfb_ms", true, &x->down_ttfb_ms) ||
        col_num(r, 23, "down_total_ms", true, &x->down_total_ms) ||
        col_int(r, 24, "ending", XCHG_COMPLETE, XCHG_TIMEOUT, false, &v))
        return -1;
    x->end = (enum xchg_end)v;
    if (col_int(r, 25, "req_redacted", 0, 1, true, &v))
        return -1;
    x->req_redacted = v;
    if (db_column_type(st, 6) != DB_NULL)
        return rebuild_body(db, c, r, x, flags);
    if (col_packed(r, 9, "req_raw", &x->req_raw, &x->req_raw_len))
        return -1;
    if (x->req_raw && !x->req_malformed)
        x->req_body = json_loadb(x->req_raw, x->req_raw_len,
                                 JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    return 0;
}

static const char SELECT_SQL[] =
    "SELECT id, session, kind, started, method, path, req_params,"
    " req_tools, req_headers, req_raw, req_raw_len, req_raw_zip,"
    " req_malformed, status, resp_headers, resp_raw, resp_raw_len,"
    " resp_raw_zip, streamed, reply, up_ttfb_ms, up_total_ms, down_ttfb_ms,"
    " down_total_ms, ending, req_redacted FROM xchg";
/* the same for a store without req_redacted that could not be given it */
static const char SELECT_SQL_OLD[] =
    "SELECT id, session, kind, started, method, path, req_params,"
    " req_tools, req_headers, req_raw, req_raw_len, req_raw_zip,"
    " req_malformed, status, resp_headers, resp_raw, resp_raw_len,"
    " resp_raw_zip, streamed, reply, up_ttfb_ms, up_total_ms, down_ttfb_ms,"
    " down_total_ms, ending, 0 FROM xchg";

int xchg_each_checked(struct db *db, const char *session,
                      int (*fn)(const struct xchg *x, void *ud),
                      void (*bad)(const struct xchg_bad *b, void *ud), void *ud,
                      struct diag *d)
{
    return xchg_each_flags(db, session, 0, fn, bad, ud, d);
}

int xchg_each_flags(struct db *db, const char *session, unsigned flags,
                    int (*fn)(const struct xchg *x, void *ud),
                    void (*bad)(const struct xchg_bad *b, void *ud), void *ud,
                    struct diag *d)
{
    struct db_stmt *st = NULL;
    const char *sel =
        xchg_has_redacted_column(db) ? SELECT_SQL : SELECT_SQL_OLD;
    char *sql =
        xasprintf("%s%s ORDER BY id", sel, session ? " WHERE session=?" : "");
    int rc = 0;

    if (db_prepare(db, sql, &st) != DB_OK) {
        rc = xchg_sql_fail(db, d, "cannot read exchanges");
        free(sql);
        return rc;
    }
    free(sql);
    if (session)
        db_bind_text(st, 1, session, -1, DB_STATIC);
    struct xchg_cache *c = xchg_cache_new();
    for (;;) {
        int step = db_step(st);
        if (step == DB_DONE)
            break;
        if (step != DB_ROW) {
            rc = xchg_sql_fail(db, d, "cannot read exchanges");
            break;
        }
        struct xchg x;
        struct xchg_bad b = {0};
        struct rowck r = {st, &b};
        xchg_init(&x);
        if (read_row(db, c, &r, &x, flags)) {
            if (bad)
                bad(&b, ud);
        } else {
            rc = fn(&x, ud);
        }
        xchg_release(&x);
        if (rc)
            break;
    }
    xchg_cache_free(c);
    db_finalize(st);
    return rc;
}

int xchg_each(struct db *db, const char *session,
              int (*fn)(const struct xchg *x, void *ud), void *ud,
              struct diag *d)
{
    return xchg_each_checked(db, session, fn, NULL, ud, d);
}

static int sum_query(struct db *db, const char *sql, int64_t *out,
                     struct diag *d)
{
    struct db_stmt *st = NULL;
    if (db_prepare(db, sql, &st) != DB_OK)
        return xchg_sql_fail(db, d, "cannot measure storage");
    int rc = db_step(st) == DB_ROW
                 ? 0
                 : xchg_sql_fail(db, d, "cannot measure storage");
    *out = rc ? 0 : db_column_int64(st, 0);
    db_finalize(st);
    return rc;
}

int xchg_storage_bytes(struct db *db, int64_t *message_bytes,
                       int64_t *request_bytes, struct diag *d)
{
    int64_t rows = 0, blobs = 0;
    int rc = sum_query(db,
                       "SELECT COALESCE(SUM(length(z)), 0) FROM xchg_blob"
                       " WHERE kind=0",
                       message_bytes, d);
    if (rc)
        return rc;
    rc = sum_query(db,
                   "SELECT COALESCE(SUM(length(z)), 0) FROM xchg_blob"
                   " WHERE kind<>0",
                   &blobs, d);
    if (rc)
        return rc;
    /* Request-side payload of each row: text and blob columns, and 8 bytes
     * for each number. */
    rc = sum_query(db,
                   "SELECT COALESCE(SUM(length(session) + length(kind) +"
                   " length(method) + length(path) +"
                   " COALESCE(length(req_headers), 0) +"
                   " COALESCE(length(req_msgs), 0) +"
                   " COALESCE(length(req_raw), 0) + 8 * 9), 0) FROM xchg",
                   &rows, d);
    *request_bytes = rows + blobs;
    return rc;
}

int xchg_storage_response_bytes(struct db *db, int64_t *bytes, struct diag *d)
{
    return sum_query(db,
                     "SELECT COALESCE(SUM(COALESCE(length(resp_headers), 0) +"
                     " COALESCE(length(resp_raw), 0) +"
                     " COALESCE(length(reply), 0) + 8 * 7), 0) FROM xchg",
                     bytes, d);
}
