/*
 * pool: the worker pool (core/tpool). Each of -j threads has its own
 * http_client and takes the next case index; for each case it looks the key
 * up in the store (skipping finished cases unless --fresh), sizes the case
 * against the endpoint's tokenizer, sends it to the endpoint and the
 * baseline, scores and classifies the replies and stores the results. A
 * stop request (Ctrl-C) ends the handing out of cases; cases in flight
 * finish and are kept. Each result is stored as it comes; the run keeps
 * in memory only what the report needs case by case (probe_kept): the
 * cases that did not pass in full, the others of a cell as one result
 * with a count.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tpool.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

struct shared {
    struct probe_run *r;
    struct tpool pool;
    size_t done, passed;
    unsigned char *seen; /* a bit per case folded into r->kept */
    /* the kept result of each (report cell, key) that stands for many:
     * open addressing, slot + 1 (0: empty) */
    uint64_t *skey;
    size_t *sval, nslot, used;
};

/* What probe knows of a case before it is sent: its own count (and
 * shape), and the path's count of the whole request. */
struct counts {
    unsigned expected;
    unsigned path; /* 0: not counted */
    struct probe_shape shape;
};

static void fill(struct probe_result *res, const struct probe_case *pc,
                 const struct probe_reply *rep, const struct counts *k,
                 double tol)
{
    bool passed = rep->err == 0 && probe_score(pc, rep->content);
    unsigned expected = k->expected;
    /* the path's count of the whole request, when it has one, is the
     * server's view: below it by tol, the server dropped tokens */
    res->outcome =
        probe_classify(passed, rep, k->path ? k->path : expected, tol);
    res->have_shape = k->shape.total > 0;
    res->shape = k->shape;
    res->path_tokens = k->path;
    res->lost = probe_is_lost(rep->prompt_tokens, &k->shape);
    if (res->lost && !passed &&
        (res->outcome == PROBE_MISSED || res->outcome == PROBE_CLIPPED))
        res->outcome = PROBE_TRUNCATED; /* lost.c says by whom */
    res->no_context = probe_has_no_context(rep->content);
    res->expected = expected;
    res->prompt_tokens = rep->prompt_tokens;
    res->completion_tokens = rep->completion_tokens;
    res->status = rep->status;
    res->attempts = rep->attempts;
    res->latency = rep->latency;
    snprintf(res->finish, sizeof(res->finish), "%s", rep->finish);
    snprintf(res->reply, sizeof(res->reply), "%s",
             rep->content ? rep->content : "");
    snprintf(res->error, sizeof(res->error), "%s", rep->error);
    res->done = true;
}

static void fail(struct probe_result *res, const char *why, unsigned expected)
{
    res->outcome = PROBE_ERROR;
    res->expected = expected;
    res->prompt_tokens = -1;
    snprintf(res->error, sizeof(res->error), "%s", why);
    res->done = true;
}

static void store(struct shared *sh, const char *fp, const struct probe_spec *s,
                  const struct probe_result *res)
{
    struct probe_run *r = sh->r;
    struct diag d;
    if (!r->db)
        return;
    if (probe_store_put(r->db, fp, s, res, &d)) {
        tpool_lock(&sh->pool);
        if (!r->store_err) {
            r->store_err = -EIO;
            r->store_diag = d;
        }
        tpool_unlock(&sh->pool);
    }
}

static bool lookup(struct shared *sh, const char *key, struct probe_result *res)
{
    struct probe_run *r = sh->r;
    struct diag d;
    snprintf(res->key, sizeof(res->key), "%s", key);
    if (!r->db || r->fresh)
        return false;
    return probe_store_get(r->db, key, res, &d) == 1;
}

/* The path's count of the whole request, next to probe's own. */
static void path_count(struct probe_endpoint *e, struct http_client *c,
                       const struct probe_case *pc, struct counts *k)
{
    struct diag d;
    k->path = 0;
    if (!e->own_ready || !e->has_tokenize ||
        probe_tokenize(e, c, pc->messages, pc->tools, pc->chars, &k->path, &d))
        k->path = 0;
}

/* Sends pc to one endpoint and fills res. */
static void send_one(struct shared *sh, struct probe_endpoint *e,
                     struct http_client *c, const struct probe_case *pc,
                     struct counts *k, struct probe_result *res)
{
    struct probe_run *r = sh->r;
    struct probe_reply rep;
    struct diag d;
    probe_chat(e, c, pc, r->max_tokens, &rep, r->stop);
    /* a case that lost context gets its turns counted one by one, so
     * that its shape can be compared with a window, and the path's count
     * of the whole request, which says whether the path rewrites
     * /tokenize too (intact cases need neither: probe's own count is
     * the expectation) */
    bool failed = !probe_score(pc, rep.content);
    if (!rep.err && e->own_ready &&
        probe_path_check_due(rep.prompt_tokens, &k->shape, failed)) {
        if (failed) /* only failures get a kind */
            probe_own_turns(e, c, pc, &k->shape, &d);
        path_count(e, c, pc, k);
    }
    fill(res, pc, &rep, k, r->tol);
    unsigned attempts = rep.attempts;
    probe_reply_release(&rep);
    tpool_lock(&sh->pool);
    r->sent += attempts;
    tpool_unlock(&sh->pool);
}

static void run_one(struct shared *sh, const struct probe_spec *s,
                    struct http_client *ca, struct http_client *cb,
                    struct probe_case *pc, struct probe_result *ra,
                    struct probe_result *rb)
{
    struct probe_run *r = sh->r;
    char key[17];
    struct diag d;
    struct counts k;
    memset(&k, 0, sizeof(k));

    probe_spec_key(s, r->ep->model, r->max_tokens, r->extra_key, r->ep->fp,
                   key);
    bool have_a = lookup(sh, key, ra);
    bool have_b = true;
    if (rb) {
        probe_spec_key(s, r->base->model, r->max_tokens, r->extra_key,
                       r->base->fp, key);
        have_b = lookup(sh, key, rb);
    }
    if (have_a && have_b)
        return;
    if (probe_size_case(r->ep, ca, s, pc, &k.expected, &k.shape, &d)) {
        if (!have_a) {
            fail(ra, d.msg, 0);
            store(sh, r->ep->fp, s, ra);
        }
        if (!have_b) {
            fail(rb, d.msg, 0);
            store(sh, r->base->fp, s, rb);
        }
        return;
    }
    probe_case_drop_cache(pc);
    if (!have_a) {
        send_one(sh, r->ep, ca, pc, &k, ra);
        store(sh, r->ep->fp, s, ra);
    }
    if (!have_b) {
        struct counts bk;
        memset(&bk, 0, sizeof(bk));
        if (probe_count_case(r->base, cb, pc, &bk.expected, &bk.shape, &d))
            memset(&bk, 0, sizeof(bk));
        send_one(sh, r->base, cb, pc, &bk, rb);
        store(sh, r->base->fp, s, rb);
    }
}

void probe_kept_release(struct probe_kept *k)
{
    free(k->idx);
    free(k->specs);
    free(k->res);
    free(k->bres);
    memset(k, 0, sizeof(*k));
}

/* A result the report needs only counted: not run, or passed without
 * losing context or being counted by the path. */
static bool plain(const struct probe_result *r)
{
    return !r || !r->done ||
           (r->outcome == PROBE_PASS && !r->lost && !r->path_tokens);
}

/* What tells plain results apart in the report: run, said there was no
 * context, sized under half the target. */
static unsigned side_key(const struct probe_result *r, unsigned target)
{
    if (!r || !r->done)
        return 0;
    return 1u | (unsigned)r->no_context << 1 |
           (unsigned)(r->expected && r->expected < 0.5 * target) << 2;
}

static void sizing(struct probe_kept *k, int side, const struct probe_result *r,
                   unsigned target)
{
    if (!r || !r->done || !r->expected || !target)
        return;
    double q = (double)r->expected / target;
    if (!k->size_hi[side] || q < k->size_lo[side])
        k->size_lo[side] = q;
    if (q > k->size_hi[side])
        k->size_hi[side] = q;
}

static size_t kept_add(struct probe_kept *k, size_t i,
                       const struct probe_spec *s, const struct probe_result *a,
                       const struct probe_result *b, bool base)
{
    if (k->n == k->alloc) {
        k->alloc = k->alloc ? 2 * k->alloc : 64;
        k->idx = xrealloc(k->idx, k->alloc * sizeof(*k->idx));
        k->specs = xrealloc(k->specs, k->alloc * sizeof(*k->specs));
        k->res = xrealloc(k->res, k->alloc * sizeof(*k->res));
        if (base)
            k->bres = xrealloc(k->bres, k->alloc * sizeof(*k->bres));
    }
    k->idx[k->n] = i;
    k->specs[k->n] = *s;
    k->res[k->n] = *a;
    k->res[k->n].weight = 1;
    if (base) {
        k->bres[k->n] = *b;
        k->bres[k->n].weight = 1;
    }
    return k->n++;
}

/* The slot of key in sh's table (grown as needed). */
static size_t *slot_of(struct shared *sh, uint64_t key)
{
    if (2 * (sh->used + 1) > sh->nslot) {
        size_t n = sh->nslot ? 2 * sh->nslot : 256;
        uint64_t *nk = xcalloc(n, sizeof(*nk));
        size_t *nv = xcalloc(n, sizeof(*nv));
        for (size_t j = 0; j < sh->nslot; j++) {
            if (!sh->skey[j])
                continue;
            size_t h = (size_t)(sh->skey[j] * 0x9E3779B97F4A7C15ULL) & (n - 1);
            while (nk[h])
                h = (h + 1) & (n - 1);
            nk[h] = sh->skey[j];
            nv[h] = sh->sval[j];
        }
        free(sh->skey);
        free(sh->sval);
        sh->skey = nk;
        sh->sval = nv;
        sh->nslot = n;
    }
    size_t h = (size_t)(key * 0x9E3779B97F4A7C15ULL) & (sh->nslot - 1);
    while (sh->skey[h] && sh->skey[h] != key)
        h = (h + 1) & (sh->nslot - 1);
    if (!sh->skey[h]) {
        sh->skey[h] = key;
        sh->sval[h] = 0;
        sh->used++;
    }
    return &sh->sval[h];
}

/* Keeps what the report needs of case i (under the pool's mutex). */
static void fold(struct shared *sh, size_t i, size_t cell,
                 const struct probe_spec *s, const struct probe_result *a,
                 const struct probe_result *b)
{
    struct probe_run *r = sh->r;
    struct probe_kept *k = &r->kept;
    bool base = r->base != NULL;
    sh->seen[i / 8] |= (unsigned char)(1u << (i % 8));
    sizing(k, 0, a, s->target);
    sizing(k, 1, b, s->target);
    if (!plain(a) || !plain(b)) {
        kept_add(k, i, s, a, b, base);
        return;
    }
    uint64_t key = ((uint64_t)cell << 6 | side_key(a, s->target) |
                    (uint64_t)side_key(b, s->target) << 3) +
                   1;
    size_t *slot = slot_of(sh, key);
    if (!*slot) {
        *slot = kept_add(k, i, s, a, b, base) + 1;
        return;
    }
    size_t e = *slot - 1;
    unsigned w = k->res[e].weight + 1;
    if (i < k->idx[e]) { /* the first case of those it stands for */
        k->idx[e] = i;
        k->specs[e] = *s;
        k->res[e] = *a;
        if (base)
            k->bres[e] = *b;
    }
    k->res[e].weight = w;
    if (base)
        k->bres[e].weight = w;
}

static const struct probe_kept *sort_kept;

static int by_idx(const void *x, const void *y)
{
    size_t a = sort_kept->idx[*(const size_t *)x];
    size_t b = sort_kept->idx[*(const size_t *)y];
    return a < b ? -1 : a > b;
}

/* The kept results in case order, moved in place (a copy would double
 * them at the end of the run). */
static void kept_sort(struct probe_kept *k)
{
    if (k->n < 2)
        return;
    size_t *perm = xcalloc(k->n, sizeof(*perm));
    for (size_t i = 0; i < k->n; i++)
        perm[i] = i;
    sort_kept = k;
    qsort(perm, k->n, sizeof(*perm), by_idx);
    /* position i gets perm[i]: follow each cycle once */
    for (size_t i = 0; i < k->n; i++) {
        if (perm[i] == i)
            continue;
        size_t idx = k->idx[i];
        struct probe_spec sp = k->specs[i];
        struct probe_result ra = k->res[i], rb;
        if (k->bres)
            rb = k->bres[i];
        size_t j = i;
        while (perm[j] != i) {
            size_t f = perm[j];
            k->idx[j] = k->idx[f];
            k->specs[j] = k->specs[f];
            k->res[j] = k->res[f];
            if (k->bres)
                k->bres[j] = k->bres[f];
            perm[j] = j;
            j = f;
        }
        k->idx[j] = idx;
        k->specs[j] = sp;
        k->res[j] = ra;
        if (k->bres)
            k->bres[j] = rb;
        perm[j] = j;
    }
    free(perm);
}

/* Each thread's clients (one per endpoint) and case. */
struct worker {
    struct http_client *ca, *cb;
    struct probe_case pc;
    struct probe_result ra, rb;
};

static void *worker_new(struct tpool *p)
{
    struct shared *sh = p->ud;
    struct worker *w = xcalloc(1, sizeof(*w));
    w->ca = http_client_new();
    w->cb = sh->r->base ? http_client_new() : NULL;
    return w;
}

static void worker_free(struct tpool *p, void *ts)
{
    struct worker *w = ts;
    (void)p;
    probe_case_release(&w->pc);
    http_client_free(w->ca);
    http_client_free(w->cb);
    free(w);
}

/* The bytes of a result the spill file keeps: all but the shape. */
#define SPILL_REC offsetof(struct probe_result, shape)

static void spill(int fd, size_t i, int side, const struct probe_result *r)
{
    off_t at = (off_t)(2 * i + (size_t)side) * (off_t)SPILL_REC;
    if (fd >= 0 && r)
        (void)!pwrite(fd, r, SPILL_REC, at);
}

int probe_spill_read(int fd, size_t i, int side, struct probe_result *r)
{
    off_t at = (off_t)(2 * i + (size_t)side) * (off_t)SPILL_REC;
    memset(r, 0, sizeof(*r));
    ssize_t k = pread(fd, r, SPILL_REC, at);
    if (k < 0)
        return -errno;
    if ((size_t)k < SPILL_REC) /* past the end: not run */
        memset(r, 0, sizeof(*r));
    r->have_shape = false;
    return 0;
}

static void item(struct tpool *p, void *ts, size_t i)
{
    struct worker *w = ts;
    struct shared *sh = p->ud;
    struct probe_run *r = sh->r;
    struct probe_spec s;
    size_t cell = probe_cases_at(r->cases, i, &s);
    memset(&w->ra, 0, sizeof(w->ra));
    memset(&w->rb, 0, sizeof(w->rb));
    struct probe_result *rb = r->base ? &w->rb : NULL;
    run_one(sh, &s, w->ca, w->cb, &w->pc, &w->ra, rb);
    probe_case_release(&w->pc);
    spill(r->spill_fd, i, 0, &w->ra);
    spill(r->spill_fd, i, 1, rb);
    tpool_lock(p);
    fold(sh, i, cell, &s, &w->ra, rb);
    sh->done++;
    if (w->ra.cached && (!rb || rb->cached))
        r->cached++;
    if (w->ra.outcome == PROBE_PASS)
        sh->passed++;
    if (r->progress)
        r->progress(r->ud, sh->done, sh->passed, r->cases->n);
    tpool_unlock(p);
}

int probe_run(struct probe_run *r)
{
    size_t n = r->cases->n;
    struct shared sh = {.r = r, .seen = xcalloc(n / 8 + 1, 1)};
    sh.pool = (struct tpool){.n = n,
                             .jobs = r->jobs,
                             .stop = r->stop,
                             .thread_new = worker_new,
                             .thread_free = worker_free,
                             .item = item,
                             .ud = &sh};
    r->sent = 0;
    r->cached = 0;
    r->interrupted = false;
    memset(&r->kept, 0, sizeof(r->kept));
    /* room for one result per report cell, made here once: grown from the
     * workers, the arrays would move through their arenas */
    struct probe_kept *k = &r->kept;
    k->alloc = r->cases->n_cells * r->cases->m + 64;
    k->idx = xcalloc(k->alloc, sizeof(*k->idx));
    k->specs = xcalloc(k->alloc, sizeof(*k->specs));
    k->res = xcalloc(k->alloc, sizeof(*k->res));
    k->bres = r->base ? xcalloc(k->alloc, sizeof(*k->bres)) : NULL;
    tpool_run(&sh.pool);
    r->interrupted = sh.pool.left;
    /* the cases not run, as not run */
    struct probe_result none;
    memset(&none, 0, sizeof(none));
    for (size_t i = 0; i < n; i++)
        if (!(sh.seen[i / 8] >> (i % 8) & 1)) {
            struct probe_spec s;
            size_t cell = probe_cases_at(r->cases, i, &s);
            fold(&sh, i, cell, &s, &none, r->base ? &none : NULL);
        }
    kept_sort(&r->kept);
    free(sh.seen);
    free(sh.skey);
    free(sh.sval);
    return 0;
}
