/*
 * drift pipe: the prefill arms of a drift run on worker threads. Each
 * worker takes the next sequence and fetches its answers in two lanes at
 * once, one per server (the golden's passes, the candidate's passes), on
 * two threads; each lane takes its turns in sequence and pass order, one
 * request at a time, so each server sees the same requests in the same
 * order as with one thread and one lane (one lane when both sides are one
 * server). It parses each answer as soon as it has it, compares the arms
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

#include "core/tpool.h"
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

/* The lanes: the passes that go to one server, in the order it gets them
 * (golden: 0, 1; candidate: 2, 3), or one lane of every pass when both
 * sides are one server. Each lane takes its own turns, so each server
 * gets one request at a time in the serial run's order, and the lanes
 * overlap. */
#define LANES 2
struct lane {
    int pass[DRIFT_PASSES], n;
};

struct pipe_run {
    const struct drift_pipe *p;
    struct drift_analysis *an;
    const struct drift_opts *o;
    uint64_t *positions;
    struct lane lane[LANES];
    int n_lanes;
    bool arm_on[3];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next_seq, fetch_turn[LANES], commit_turn;
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

static void stop_from(struct pipe_run *r, size_t i)
{
    pthread_mutex_lock(&r->mu);
    if (i < r->stop_at)
        r->stop_at = i;
    pthread_mutex_unlock(&r->mu);
}

/* One lane of sequence i: fetches and parses its passes in its turns.
 * *golden_done (NULL with one lane) is set once pass 0 is parsed or given
 * up, which the candidate's first pass waits for when p->needs_golden
 * (its sglang token list comes from the golden's answer). */
static int lane_run(struct pipe_run *r, struct worker *w, int l, size_t i,
                    bool *golden_done, struct diag *d)
{
    const struct drift_item *it = &r->p->corpus->items[i];
    const struct lane *ln = &r->lane[l];
    int ret = 0;
    for (int j = 0; j < ln->n; j++) {
        int k = ln->pass[j];
        char *text = NULL;
        size_t len = 0;
        pthread_mutex_lock(&r->mu);
        wait_turn(r, &r->fetch_turn[l], i * (size_t)ln->n + (size_t)j);
        if (k == 2 && golden_done && r->p->needs_golden)
            while (!*golden_done)
                pthread_cond_wait(&r->cv, &r->mu);
        /* the candidate's lane also stops at a failure of the golden's
         * in the same sequence, as the serial order would not have sent
         * it (when the request has not gone already) */
        bool skip = ret || r->stop_at < i || (l == 1 && r->stop_at == i);
        pthread_mutex_unlock(&r->mu);
        if (!skip)
            ret = r->p->fetch(r->p->ud, i, k, &w->lp[0], &text, &len, d);
        pthread_mutex_lock(&r->mu);
        r->fetch_turn[l]++;
        if (ret && i < r->stop_at)
            r->stop_at = i;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (!skip && !ret) {
            const struct drift_side *s = r->p->side[k];
            ret = drift_side_parse_prompt(s, it->ids, it->n, text, len,
                                          r->p->lent, &w->lp[k], d);
            if (ret)
                stop_from(r, i);
        }
        if (!r->p->lent)
            free(text);
        if (k == 0 && golden_done) {
            pthread_mutex_lock(&r->mu);
            *golden_done = true;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
        if (skip && !ret)
            ret = -ECANCELED;
    }
    return ret;
}

/* One lane of a sequence, for tpool_pair. */
struct lane_job {
    struct pipe_run *r;
    struct worker *w;
    int lane;
    size_t i;
    bool *golden_done;
    int ret;
    struct diag d;
};

static void lane_job_run(void *arg)
{
    struct lane_job *j = arg;
    j->ret = lane_run(j->r, j->w, j->lane, j->i, j->golden_done, &j->d);
}

/* The error of the earliest pass that failed, as the serial order would
 * have met it: the golden lane's before the candidate's. */
static int first_error(int r0, const struct diag *d0, int r1,
                       const struct diag *d1, struct diag *d)
{
    if (r0 && r0 != -ECANCELED) {
        *d = *d0;
        return r0;
    }
    if (r1 && r1 != -ECANCELED) {
        *d = *d1;
        return r1;
    }
    return r0 ? r0 : r1;
}

/* Fetches and parses every pass of sequence i, its lanes at once. */
static int fetch_parse(struct pipe_run *r, struct worker *w, size_t i,
                       struct diag *d)
{
    if (r->n_lanes == 1)
        return lane_run(r, w, 0, i, NULL, d);
    bool golden_done = false;
    struct lane_job j[LANES] = {{r, w, 0, i, &golden_done, 0, {{0}}},
                                {r, w, 1, i, &golden_done, 0, {{0}}}};
    tpool_pair(lane_job_run, &j[0], lane_job_run, &j[1]);
    return first_error(j[0].ret, &j[0].d, j[1].ret, &j[1].d, d);
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
    int passes[DRIFT_PASSES], n = 0;
    passes[n++] = 0;
    if (p->has_control)
        passes[n++] = 1;
    passes[n++] = 2;
    if (p->has_self)
        passes[n++] = 3;
    r.n_lanes = p->one_server ? 1 : LANES;
    for (int j = 0; j < n; j++) {
        struct lane *ln = &r.lane[r.n_lanes == 1 ? 0 : passes[j] >= 2];
        ln->pass[ln->n++] = passes[j];
    }
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
