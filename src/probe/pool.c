/*
 * pool: the worker pool (core/tpool). Each of -j threads has its own
 * http_client and takes the next case index; for each case it looks the key
 * up in the store (skipping finished cases unless --fresh), sizes the case
 * against the endpoint's tokenizer, sends it to the endpoint and the
 * baseline, scores and classifies the replies and stores the results. A
 * stop request (Ctrl-C) ends the handing out of cases; cases in flight
 * finish and are kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tpool.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

struct shared {
    struct probe_run *r;
    struct tpool pool;
    size_t done, passed;
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

static void run_one(struct shared *sh, size_t i, struct http_client *ca,
                    struct http_client *cb, struct probe_case *pc)
{
    struct probe_run *r = sh->r;
    const struct probe_spec *s = &r->specs[i];
    struct probe_result *ra = &r->res[i], *rb = r->bres ? &r->bres[i] : NULL;
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

/* Each thread's clients (one per endpoint) and case. */
struct worker {
    struct http_client *ca, *cb;
    struct probe_case pc;
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

static void item(struct tpool *p, void *ts, size_t i)
{
    struct worker *w = ts;
    run_one(p->ud, i, w->ca, w->cb, &w->pc);
    probe_case_release(&w->pc);
}

/* After case i, under the pool's mutex. */
static void item_done(struct tpool *p, size_t i)
{
    struct shared *sh = p->ud;
    struct probe_run *r = sh->r;
    sh->done++;
    if (r->res[i].cached && (!r->bres || r->bres[i].cached))
        r->cached++;
    if (r->res[i].outcome == PROBE_PASS)
        sh->passed++;
    if (r->progress)
        r->progress(r->ud, sh->done, sh->passed, r->n);
}

int probe_run(struct probe_run *r)
{
    struct shared sh = {.r = r};
    sh.pool = (struct tpool){.n = r->n,
                             .jobs = r->jobs,
                             .stop = r->stop,
                             .thread_new = worker_new,
                             .thread_free = worker_free,
                             .item = item,
                             .done = item_done,
                             .ud = &sh};
    r->sent = 0;
    r->cached = 0;
    r->interrupted = false;
    tpool_run(&sh.pool);
    r->interrupted = sh.pool.left;
    return 0;
}
