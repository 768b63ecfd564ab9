/*
 * drift determinism: the same temperature-0 request N times, first one at
 * a time, then all at once from N threads (so a server that batches
 * serves them together). Distinct outputs, the first differing generated
 * token and whether prompt logprobs are bit-identical tell
 * nondeterminism (differs alone) from batch variance (differs only under
 * load); both are reported apart from drift.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "drift/drift.h"

#define DET_MAX 64

struct det_one {
    struct drift_side side; /* a clone: its own connection */
    const uint32_t *ids;
    size_t n;
    unsigned max_new;
    bool want_prompt;
    pthread_barrier_t *start;
    /* results */
    int ret;
    struct diag d;
    uint32_t out[512];
    unsigned n_out;
    uint64_t prompt_hash;
};

/* Hash of every prompt logprob's bits and top-k entries. */
static uint64_t prompt_hash(const struct drift_lp *lp)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < lp->n; i++) {
        const struct drift_pos *p = &lp->pos[i];
        h = mix2(h, lp->valid[i]);
        if (!lp->valid[i])
            continue;
        h = mix2(h, hash64(&p->forced_lp, sizeof(double), p->forced));
        if (p->n_known)
            h = mix2(h, hash64(p->top, p->n_known * sizeof(*p->top), 0));
    }
    return h;
}

static void one_request(struct det_one *o)
{
    struct drift_req r = {.ids = o->ids, .n = o->n, .max_new = o->max_new,
                          .prompt_logprobs = o->want_prompt};
    struct drift_lp lp;
    json_t *out = NULL;

    drift_lp_init(&lp);
    enum drift_dialect dl = o->side.dialect;
    if (!o->want_prompt)
        o->side.dialect = DRIFT_DIALECT_ECHO; /* plain OpenAI generation */
    o->ret = drift_side_request(&o->side, &r, &out, &o->d);
    if (!o->ret && o->want_prompt) {
        o->ret = drift_parse_prompt(o->side.dialect, out, &r, &lp, &o->d);
        o->prompt_hash = prompt_hash(&lp);
    }
    if (!o->ret)
        o->ret = drift_parse_decode(o->side.dialect, out, &lp, &o->d);
    if (!o->ret) {
        o->n_out = lp.n < 512 ? lp.n : 512;
        memcpy(o->out, lp.ids, o->n_out * sizeof(uint32_t));
    }
    o->side.dialect = dl;
    json_decref(out);
    drift_lp_release(&lp);
}

static void *thread_main(void *arg)
{
    struct det_one *o = arg;
    pthread_barrier_wait(o->start);
    one_request(o);
    return NULL;
}

/* Fills distinct / first_diff / prompt_identical for one phase. */
static void tally(struct det_one *v, unsigned n, int phase,
                  struct drift_det_side *out)
{
    uint64_t seen[DET_MAX];
    unsigned nd = 0;
    long first = -1;
    bool same_prompt = true;
    int ref = -1;
    for (unsigned i = 0; i < n; i++) {
        if (v[i].ret) {
            out->failed++;
            continue;
        }
        uint64_t h = hash64(v[i].out, v[i].n_out * sizeof(uint32_t),
                            v[i].n_out);
        bool dup = false;
        for (unsigned k = 0; k < nd && !dup; k++)
            dup = seen[k] == h;
        if (!dup)
            seen[nd++] = h;
        if (ref < 0) {
            ref = (int)i;
            continue;
        }
        long at = drift_ids_first_diff(v[ref].out, v[ref].n_out, v[i].out,
                                       v[i].n_out);
        if (at >= 0 && (first < 0 || at < first))
            first = at;
        if (v[i].prompt_hash != v[ref].prompt_hash)
            same_prompt = false;
    }
    out->distinct[phase] = nd;
    out->first_diff[phase] = first;
    out->prompt_identical[phase] = same_prompt;
}

int drift_determinism_run(struct drift_side *s, const uint32_t *ids,
                          size_t n, unsigned count, unsigned max_new,
                          struct drift_det_side *out, struct diag *d)
{
    struct det_one *v;
    pthread_barrier_t start;
    pthread_t th[DET_MAX];
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (count < 2)
        count = 2;
    if (count > DET_MAX)
        count = DET_MAX;
    if (max_new > 512)
        max_new = 512;
    out->ran = true;
    out->n = count;
    out->prompt_checked = s->dialect != DRIFT_DIALECT_NONE &&
                          s->dialect != DRIFT_DIALECT_AUTO;
    v = xcalloc(count, sizeof(*v));
    for (int phase = 0; phase < 2; phase++) {
        pthread_barrier_init(&start, NULL, count);
        for (unsigned i = 0; i < count; i++) {
            drift_side_clone(&v[i].side, s);
            v[i].ids = ids;
            v[i].n = n;
            v[i].max_new = max_new;
            v[i].want_prompt = out->prompt_checked;
            v[i].start = &start;
            v[i].ret = 0;
            if (phase == 0)
                one_request(&v[i]); /* alone: one after the other */
        }
        unsigned started = 0;
        for (unsigned i = 0; phase == 1 && i < count; i++)
            if (!pthread_create(&th[i], NULL, thread_main, &v[i]))
                started++;
        if (phase == 1 && started < count) {
            /* cannot reach the barrier count: never happens in practice */
            abort();
        }
        for (unsigned i = 0; phase == 1 && i < count; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&start);
        unsigned failed_before = out->failed;
        tally(v, count, phase, out);
        if (out->failed - failed_before == count && !ret)
            ret = diag_set(d, EPROTO,
                           "%s: every determinism request failed: %s",
                           s->label, v[0].d.msg);
        for (unsigned i = 0; i < count; i++)
            drift_side_release(&v[i].side);
        if (ret)
            break;
    }
    free(v);
    return ret;
}
