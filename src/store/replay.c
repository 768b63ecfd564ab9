/*
 * replay: committing what a record that did not stop left in the intake
 * log (replay.h). The log is read from the frontier in batches of up to
 * REPLAY_BATCH exchanges, each committed in one transaction that also
 * moves the frontier past its last exchange, as record's writer does.
 */
#include "store/replay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "store/store.h"

#define REPLAY_BATCH 256
/* the response cap record uses by default (an inflated copy's cap) */
#define REPLAY_MAX_CAPTURE ((size_t)256 << 20)

/* An exchange of the log, as the writer would have it. */
struct rex {
    struct xchg x;
    struct buf body;
    struct ingest_src src;
    uint64_t end; /* the offset after its record */
};

struct replay {
    struct db *db;
    struct xchg_cache *c;
    struct ingest *g;
    struct intake *in;
    const char *spill;
    struct rex *batch[REPLAY_BATCH];
    size_t n;
    uint64_t mark;  /* the frontier the batch being stored moves to */
    const int *rcs; /* its exchanges' results, for on_commit */
    size_t nrcs;
    bool stuck; /* an exchange could be neither stored nor spilled */
    /* the store went away (db_is_lost): nothing more is tried, nothing
     * spilled; the exchanges not committed stay in the log */
    bool gone;
    uint64_t max;  /* exchanges to read at most (0: all) */
    uint64_t read; /* exchanges read */
    bool more;     /* stopped at max with records left */
    uint64_t to;   /* the offset after the last exchange committed or spilled */
    bool unmarked; /* the last one was spilled: no commit moved past it */
    struct replay_counts k;
    struct diag why;   /* why the store refused the first one */
    struct diag first; /* why the first kept one was kept */
};

static struct rex *rex_of_rec(const struct intake_rec *ir, uint64_t end)
{
    struct rex *e = xcalloc(1, sizeof(*e));
    struct xchg *x = &e->x;
    xchg_init(x);
    x->started = ir->started;
    x->method = xstrndup(ir->method_len ? ir->method : "", ir->method_len);
    x->path = xstrndup(ir->path_len ? ir->path : "", ir->path_len);
    if (ir->req_hl_set) {
        hdrs_start(&x->req_hl);
        buf_add(&x->req_hl.b, ir->req_hl, ir->req_hl_len);
        x->req_hl.n = ir->req_hl_n;
    }
    if (ir->resp_hl_set) {
        hdrs_start(&x->resp_hl);
        buf_add(&x->resp_hl.b, ir->resp_hl, ir->resp_hl_len);
        x->resp_hl.n = ir->resp_hl_n;
    }
    buf_init(&e->body, 0);
    buf_add(&e->body, ir->body, ir->body_len);
    x->status = ir->status;
    if (ir->resp_len) {
        x->resp_raw = xmalloc(ir->resp_len + 1);
        memcpy(x->resp_raw, ir->resp, ir->resp_len);
        x->resp_raw[ir->resp_len] = '\0';
        x->resp_raw_len = ir->resp_len;
    }
    x->streamed = ir->streamed;
    x->up_ttfb_ms = ir->up_ttfb_ms;
    x->up_total_ms = ir->up_total_ms;
    x->down_ttfb_ms = ir->down_ttfb_ms;
    x->down_total_ms = ir->down_total_ms;
    x->end = (enum xchg_end)ir->end;
    x->req_redacted = ir->req_redacted;
    e->src.body = buf_str(&e->body);
    e->src.body_len = e->body.len;
    e->src.ct_json = ir->ct_json;
    e->src.resp_capped = ir->resp_capped;
    e->src.max_gap_ms = ir->max_gap_ms;
    e->end = end;
    return e;
}

static void rex_free(struct rex *e)
{
    xchg_release(&e->x);
    buf_release(&e->body);
    free(e);
}

/* The batch's transaction moves the frontier past its last exchange, only
 * when every exchange of it is stored: else it is rolled back, and flush
 * stores the batch one by one. */
static int on_commit(struct db *db, void *ud)
{
    struct replay *p = ud;
    for (size_t i = 0; i < p->nrcs; i++)
        if (p->rcs[i])
            return DB_ABORT;
    return intake_mark(p->in, db, p->in->epoch, p->mark);
}

/* Stores b[0..n) in one transaction: xchg_put_batch's result. */
static int put(struct replay *p, struct rex **b, size_t n, int *rcs)
{
    struct xchg *xs[REPLAY_BATCH];
    struct diag d = {{0}};
    for (size_t i = 0; i < n; i++)
        xs[i] = &b[i]->x;
    p->rcs = rcs;
    p->nrcs = n;
    p->mark = b[n - 1]->end;
    int rc = xchg_put_batch(p->db, p->c, xs, n, rcs, &d);
    if (rc && db_is_lost(p->db)) {
        p->gone = true;
        p->why = d;
    } else if (rc && !p->why.msg[0]) {
        p->why = d;
    }
    return rc;
}

/* An exchange the store refused (nothing committed with it, so the
 * frontier is still before it): to the spill file, or, when that fails
 * too, left in the log with every exchange after it. */
static void refused(struct replay *p, struct rex *e)
{
    struct diag sd = {{0}};
    if (!xchg_spill_append(p->spill, &e->x, &sd)) {
        p->k.spilled++;
        return;
    }
    if (!p->first.msg[0])
        diag_set(&p->first, EIO, "%s; %s", p->why.msg, sd.msg);
    p->k.kept++;
    p->stuck = true;
}

/* Builds and stores the batch; when it cannot be stored whole, its
 * exchanges are stored one by one, so that the frontier never passes one
 * that is neither stored nor spilled. */
static void flush(struct replay *p)
{
    int rcs[REPLAY_BATCH];
    if (!p->n)
        return;
    for (size_t i = 0; i < p->n; i++)
        ingest_build(p->g, &p->batch[i]->x, &p->batch[i]->src);
    if (!put(p, p->batch, p->n, rcs)) {
        p->k.stored += p->n;
        p->to = p->batch[p->n - 1]->end;
        p->unmarked = false;
    } else {
        for (size_t i = 0; i < p->n; i++) {
            int rc1 = 0;
            bool stored = false;
            if (p->stuck || p->gone)
                p->k.kept++;
            else if (p->n > 1 && !put(p, &p->batch[i], 1, &rc1))
                stored = true;
            else if (p->gone) /* not refused: the server went away */
                p->k.kept++;
            else
                refused(p, p->batch[i]);
            p->k.stored += stored;
            if (!p->stuck && !p->gone) {
                p->to = p->batch[i]->end;
                p->unmarked = !stored; /* spilled */
            }
        }
    }
    for (size_t i = 0; i < p->n; i++)
        rex_free(p->batch[i]);
    p->n = 0;
}

/* What on_rec returns to stop the walk (not an error). */
#define STOP 1

static int on_rec(const struct intake_rec *ir, uint64_t end, void *ud)
{
    struct replay *p = ud;
    if (p->gone) /* the rest waits in the log for the store */
        return STOP;
    if (p->stuck) { /* left in the log, with the one before */
        p->k.kept++;
        return 0;
    }
    if (p->max && p->read == p->max) {
        p->more = true;
        return STOP;
    }
    p->read++;
    p->batch[p->n++] = rex_of_rec(ir, end);
    if (p->n == REPLAY_BATCH)
        flush(p);
    return 0;
}

/* Reads the log from the store's frontier for it into p's batches and
 * stores them; *from gets that frontier (0 when the store has none for
 * this log). 0, or -1 with d set when the log or the store could not be
 * read. */
static int walk(struct replay *p, struct replay_counts *out, uint64_t *from,
                struct diag *d)
{
    uint64_t fe, fo;
    memset(out, 0, sizeof(*out));
    if (intake_frontier(p->db, p->in->epoch, &fe, &fo, d)) {
        if (!db_is_lost(p->db))
            return -1;
        p->gone = true;
        p->why = *d;
        return 0;
    }
    if (fe != p->in->epoch)
        fo = 0;
    if (from)
        *from = fo;
    p->to = fo ? fo : INTAKE_HEAD;
    xchg_cache_pre_commit(p->c, on_commit, p);
    int rc = intake_read(p->in->fd, fe, fo, on_rec, p, &p->k.dmg, d);
    p->k.torn = p->k.dmg.torn;
    flush(p);
    xchg_cache_pre_commit(p->c, NULL, NULL);
    *out = p->k;
    return rc && rc != STOP ? -1 : 0;
}

/* Moves the frontier past a spilled exchange that no commit passed, so
 * that the next catch-up does not spill it again; when that fails, the
 * next commit of the log's exchanges moves it. */
static void mark_to(struct replay *p)
{
    if (db_exec(p->db, "BEGIN IMMEDIATE", NULL) != DB_OK)
        return;
    if (intake_mark(p->in, p->db, p->in->epoch, p->to) == DB_OK &&
        db_exec(p->db, "COMMIT", NULL) == DB_OK)
        return;
    db_exec(p->db, "ROLLBACK", NULL);
}

int replay_catch_up(struct db *db, struct xchg_cache *c, struct ingest *g,
                    struct intake *in, const char *spill_path, uint64_t max,
                    struct replay_counts *out, struct replay_pos *pos,
                    struct diag *d)
{
    struct replay p = {
        .db = db, .c = c, .g = g, .in = in, .spill = spill_path, .max = max};
    memset(pos, 0, sizeof(*pos));
    int rc = walk(&p, out, &pos->from, d);
    pos->to = p.to;
    pos->more = p.more && !p.gone && !p.stuck;
    if (rc)
        return -1;
    if (p.gone)
        return diag_set(d, ENOTCONN, "%s",
                        p.why.msg[0] ? p.why.msg : db_errmsg(db));
    if (p.k.kept) {
        diag_set(d, EIO,
                 "cannot commit %llu exchange%s of the intake log '%s' to the "
                 "store or the spill file '%s' (%s)",
                 (unsigned long long)p.k.kept, plural_s(p.k.kept), in->path,
                 spill_path, p.first.msg);
        return -1;
    }
    if (p.unmarked)
        mark_to(&p);
    return 0;
}

int replay_log(struct db *db, struct xchg_cache *c, struct ingest *g,
               struct intake *in, const char *spill_path,
               struct replay_counts *out, struct diag *d)
{
    struct replay p = {.db = db, .c = c, .g = g, .in = in, .spill = spill_path};
    int rc = walk(&p, out, NULL, d);
    if (rc)
        return -1;
    if (p.gone) {
        diag_set(d, ENOTCONN,
                 "cannot commit the intake log '%s': the store went away "
                 "(%s); the log is kept for the next try",
                 in->path, p.why.msg);
        return -1;
    }
    if (p.k.kept) {
        diag_set(d, EIO,
                 "cannot commit %llu exchange%s of the intake log '%s' to the "
                 "store or the spill file '%s' (%s); the log is kept for the "
                 "next try",
                 (unsigned long long)p.k.kept, plural_s(p.k.kept), in->path,
                 spill_path, p.first.msg);
        return -1;
    }
    uint64_t old = in->epoch;
    if (intake_reset(in, d))
        return -1;
    intake_forget(db, old); /* a stale row only: nothing to stop for */
    return 0;
}

int store_replay(const char *db_path, const char *spill_path, uint64_t *n,
                 struct diag *warn, struct diag *d)
{
    char *path = intake_path(db_path);
    bool none = access(path, F_OK) != 0;
    free(path);
    *n = 0;
    if (warn)
        warn->msg[0] = '\0';
    if (none)
        return 0;
    char *spill = spill_path ? NULL : store_local_path(db_path, ".spill.jsonl");
    struct db *db = NULL;
    struct intake *in = NULL;
    struct replay_counts k;
    int rc = store_open_unshared(db_path, &db, d);
    if (!rc) {
        /* a locked store fails fast, as record's writer does */
        db_busy_timeout(db, 200);
        rc = xchg_schema(db, d);
    }
    if (!rc)
        rc = intake_schema(db, d);
    if (!rc && (rc = intake_open(db_path, &in, d)) == 1)
        rc = 0; /* a live record commits it */
    else if (!rc) {
        struct xchg_cache *c = xchg_cache_new();
        struct ingest *g = ingest_new(c, REPLAY_MAX_CAPTURE);
        rc = replay_log(db, c, g, in, spill_path ? spill_path : spill, &k, d);
        *n = k.stored + k.spilled;
        if (warn && intake_damaged(&k.dmg))
            intake_damage_say(&k.dmg, in->path, warn->msg, sizeof(warn->msg));
        ingest_free(g);
        xchg_cache_free(c); /* before its db is closed */
        intake_close(in, rc == 0);
    }
    store_close(db);
    free(spill);
    return rc ? -1 : 0;
}
