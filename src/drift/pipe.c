/*
 * drift pipe: the prefill arms of a drift run on worker threads. Each
 * worker takes the next sequence, fetches its answers pass by pass (the
 * fetches of the whole run take turns in sequence and pass order, one at a
 * time, so the servers see the same requests in the same order as with
 * one thread), parses each answer as soon as it has it, compares the arms
 * position by position into its own buffer, then waits for its sequence's
 * turn to fold that buffer into the analysis (and call on_rec). The fold
 * makes the same calls in the same order as the serial loop did, so the
 * result is bit-identical whatever the thread count. Contract in drift.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "drift/drift.h"

/* What position t of an arm gives: a skip reason, or DRIFT_SKIPS with *m
 * filled when it is compared. */
static enum drift_skip outcome(const struct drift_lp *g,
                               const struct drift_lp *c, uint32_t t,
                               const struct drift_opts *o, struct drift_pm *m)
{
    if (t >= g->n_returned || t >= c->n_returned)
        return DRIFT_SKIP_SHORT;
    if (g->mismatch[t] || c->mismatch[t])
        return DRIFT_SKIP_TOKEN;
    if (!g->valid[t] || !c->valid[t] ||
        drift_pos_compare(&g->pos[t], &c->pos[t], o->th.flip_margin, m))
        return DRIFT_SKIP_INVALID;
    return DRIFT_SKIPS;
}

static void fold_one(struct drift_analysis *a, enum drift_arm arm, uint32_t seq,
                     const struct drift_lp *g, uint32_t t, enum drift_skip why,
                     const struct drift_pm *m, const struct drift_opts *o,
                     const char *arm_name)
{
    if (why != DRIFT_SKIPS) {
        drift_analysis_skip(a, arm, why, 1);
        return;
    }
    drift_analysis_add(a, arm, seq, t, g->pos[t].forced, m);
    if (o->on_rec) {
        struct drift_rec rec = {arm_name, seq, t, g->pos[t].forced, m};
        o->on_rec(o->ud, &rec);
    }
}

void drift_compare_lp(struct drift_analysis *a, enum drift_arm arm,
                      uint32_t seq, const struct drift_lp *g,
                      const struct drift_lp *c, uint32_t from, uint32_t to,
                      const struct drift_opts *o, const char *arm_name)
{
    for (uint32_t t = from; t < to; t++) {
        struct drift_pm m;
        enum drift_skip why = outcome(g, c, t, o, &m);
        fold_one(a, arm, seq, g, t, why, &m, o, arm_name);
    }
}

/* The arms: which passes they compare, in the order they are folded. */
static const struct {
    enum drift_arm arm;
    int g, c;
    const char *name;
} arms[3] = {
    {DRIFT_ARM_CAND, 0, 2, "candidate"},
    {DRIFT_ARM_CTRL, 0, 1, "control"},
    {DRIFT_ARM_SELF, 2, 3, "self"},
};

struct worker {
    struct drift_lp lp[DRIFT_PASSES];
    struct drift_pm *pm[3];
    uint8_t *why[3];
    size_t cap;
};

struct pipe_run {
    const struct drift_pipe *p;
    struct drift_analysis *an;
    const struct drift_opts *o;
    uint64_t *positions;
    int pass[DRIFT_PASSES], n_pass; /* the passes run, in fetch order */
    bool arm_on[3];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next_seq, fetch_turn, commit_turn;
    size_t stop_at; /* first sequence that failed (SIZE_MAX: none) */
    bool failed;    /* an error was committed: fold nothing more */
    int ret;
    struct diag *d;
};

static void wait_turn(struct pipe_run *r, const size_t *turn, size_t mine)
{
    while (*turn != mine)
        pthread_cond_wait(&r->cv, &r->mu);
}

static void worker_init(struct worker *w)
{
    memset(w, 0, sizeof(*w));
    for (int k = 0; k < DRIFT_PASSES; k++)
        drift_lp_init(&w->lp[k]);
}

static void worker_release(struct worker *w)
{
    for (int k = 0; k < DRIFT_PASSES; k++)
        drift_lp_release(&w->lp[k]);
    for (int a = 0; a < 3; a++) {
        free(w->pm[a]);
        free(w->why[a]);
    }
}

/* Fetches and parses every pass of sequence i, taking the fetch turns. */
static int fetch_parse(struct pipe_run *r, struct worker *w, size_t i,
                       struct diag *d)
{
    const struct drift_item *it = &r->p->corpus->items[i];
    int ret = 0;
    for (int j = 0; j < r->n_pass; j++) {
        int k = r->pass[j];
        char *text = NULL;
        size_t len = 0;
        pthread_mutex_lock(&r->mu);
        wait_turn(r, &r->fetch_turn, i * (size_t)r->n_pass + (size_t)j);
        bool skip = ret || r->stop_at < i;
        pthread_mutex_unlock(&r->mu);
        if (!skip)
            ret = r->p->fetch(r->p->ud, i, k, &w->lp[0], &text, &len, d);
        pthread_mutex_lock(&r->mu);
        r->fetch_turn++;
        if (ret && i < r->stop_at)
            r->stop_at = i;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (!skip && !ret) {
            const struct drift_side *s = r->p->side[k];
            ret = drift_side_parse_prompt(s, it->ids, it->n, text, len,
                                          r->p->lent, &w->lp[k], d);
        }
        if (!r->p->lent)
            free(text);
        if (ret && !skip) {
            pthread_mutex_lock(&r->mu);
            if (i < r->stop_at)
                r->stop_at = i;
            pthread_mutex_unlock(&r->mu);
        }
        if (skip && !ret)
            ret = -ECANCELED;
    }
    return ret;
}

/* Compares every arm of sequence i into the worker's buffers. */
static void compare(struct pipe_run *r, struct worker *w, uint32_t n)
{
    if (n > w->cap) {
        for (int a = 0; a < 3; a++) {
            w->pm[a] = xrealloc(w->pm[a], n * sizeof(*w->pm[a]));
            w->why[a] = xrealloc(w->why[a], n);
        }
        w->cap = n;
    }
    for (int a = 0; a < 3; a++) {
        if (!r->arm_on[a])
            continue;
        const struct drift_lp *g = &w->lp[arms[a].g], *c = &w->lp[arms[a].c];
        for (uint32_t t = 1; t < n; t++)
            w->why[a][t] = (uint8_t)outcome(g, c, t, r->o, &w->pm[a][t]);
    }
}

/* Sequence i's turn: its error, or its positions into the analysis. */
static void commit(struct pipe_run *r, struct worker *w, size_t i, int ret,
                   struct diag *d)
{
    const struct drift_item *it = &r->p->corpus->items[i];
    if (r->failed || ret == -ECANCELED)
        return;
    if (r->o->on_progress)
        r->o->on_progress(r->o->ud, "score", i, r->p->corpus->n);
    uint32_t seq = drift_analysis_begin_seq(r->an);
    if (ret) {
        diag_prefix(d, "%s", it->name);
        *r->d = *d;
        r->ret = ret;
        r->failed = true;
        return;
    }
    uint32_t n = (uint32_t)it->n;
    for (int a = 0; a < 3; a++) {
        if (!r->arm_on[a])
            continue;
        const struct drift_lp *g = &w->lp[arms[a].g];
        for (uint32_t t = 1; t < n; t++)
            fold_one(r->an, arms[a].arm, seq, g, t,
                     (enum drift_skip)w->why[a][t], &w->pm[a][t], r->o,
                     arms[a].name);
    }
    *r->positions += n - 1;
}

static void *worker_main(void *arg)
{
    struct pipe_run *r = arg;
    struct worker w;
    struct diag d;
    worker_init(&w);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        size_t i = r->next_seq++;
        pthread_mutex_unlock(&r->mu);
        if (i >= r->p->corpus->n)
            break;
        d.msg[0] = '\0';
        int ret = fetch_parse(r, &w, i, &d);
        if (!ret)
            compare(r, &w, (uint32_t)r->p->corpus->items[i].n);
        pthread_mutex_lock(&r->mu);
        wait_turn(r, &r->commit_turn, i);
        pthread_mutex_unlock(&r->mu);
        commit(r, &w, i, ret, &d); /* alone: it holds the commit turn */
        pthread_mutex_lock(&r->mu);
        r->commit_turn++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    worker_release(&w);
    return NULL;
}

int drift_pipe_run(const struct drift_pipe *p, struct drift_analysis *an,
                   const struct drift_opts *o, uint64_t *positions,
                   struct diag *d)
{
    struct pipe_run r = {.p = p,
                         .an = an,
                         .o = o,
                         .positions = positions,
                         .stop_at = SIZE_MAX,
                         .d = d};
    unsigned nt = p->threads ? p->threads : 1;
    r.pass[r.n_pass++] = 0;
    if (p->has_control)
        r.pass[r.n_pass++] = 1;
    r.pass[r.n_pass++] = 2;
    if (p->has_self)
        r.pass[r.n_pass++] = 3;
    r.arm_on[0] = true;
    r.arm_on[1] = p->has_control;
    r.arm_on[2] = p->has_self;
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    if (nt > p->corpus->n)
        nt = p->corpus->n ? (unsigned)p->corpus->n : 1;
    pthread_t *th = xmalloc(nt * sizeof(*th));
    unsigned started = 0;
    for (unsigned k = 1; k < nt; k++) {
        if (pthread_create(&th[k], NULL, worker_main, &r))
            break; /* fewer workers: the same result, later */
        started = k;
    }
    worker_main(&r);
    for (unsigned k = 1; k <= started; k++)
        pthread_join(th[k], NULL);
    free(th);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
    return r.ret;
}
