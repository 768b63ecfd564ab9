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
        h = hash_mix2(h, lp->valid[i]);
        if (!lp->valid[i])
            continue;
        h = hash_mix2(h, hash64(&p->forced_lp, sizeof(double), p->forced));
        if (p->n_known)
            h = hash_mix2(h, hash64(p->top, p->n_known * sizeof(*p->top), 0));
    }
    return h;
}

static void one_request(struct det_one *o)
{
    struct drift_req r = {.ids = o->ids,
                          .n = o->n,
                          .max_new = o->max_new,
                          .prompt_logprobs = o->want_prompt};
    struct drift_lp lp;
    json_t *out = NULL;

    drift_lp_init(&lp);
    enum drift_dialect dl = o->side.dialect;
    if (dl == DRIFT_DIALECT_NONE || dl == DRIFT_DIALECT_AUTO)
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

/* Fills distinct / first_diff / prompt_identical for one phase. The
 * reference is the first good answer sent alone (ref_v), so answers under
 * load that agree with each other but not with it still count. */
static void tally(struct det_one *v, unsigned n, const struct det_one *ref_v,
                  int phase, struct drift_det_side *out)
{
    uint64_t seen[DET_MAX + 1];
    unsigned nd = 0;
    long first = -1;
    bool same_prompt = true;
    const struct det_one *ref = ref_v;
    for (unsigned i = 0; i < n + 1; i++) {
        const struct det_one *x = i == 0 ? ref_v : &v[i - 1];
        if (!x)
            continue;
        if (x->ret) {
            out->failed += i > 0;
            continue;
        }
        uint64_t h = hash64(x->out, x->n_out * sizeof(uint32_t), x->n_out);
        bool dup = false;
        for (unsigned k = 0; k < nd && !dup; k++)
            dup = seen[k] == h;
        if (!dup)
            seen[nd++] = h;
        if (!ref || ref->ret) {
            ref = x;
            continue;
        }
        long at = drift_ids_first_diff(ref->out, ref->n_out, x->out, x->n_out);
        if (at >= 0 && (first < 0 || at < first))
            first = at;
        if (x->prompt_hash != ref->prompt_hash)
            same_prompt = false;
    }
    out->distinct[phase] = nd;
    out->first_diff[phase] = first;
    out->prompt_identical[phase] = same_prompt;
}

int drift_determinism_run(struct drift_side *s, const uint32_t *ids, size_t n,
                          unsigned count, unsigned max_new,
                          struct drift_det_side *out, struct diag *d)
{
    struct det_one *v;
    pthread_barrier_t start;
    pthread_t th[DET_MAX];
    int ret = 0;

    memset(out, 0, sizeof(*out));
    /* one generation first settles which dialect returns generated ids */
    struct drift_lp probe;
    drift_lp_init(&probe);
    ret = drift_side_generate(s, ids, n, max_new, &probe, d);
    drift_lp_release(&probe);
    if (ret)
        return ret;
    if (count < 2)
        count = 2;
    if (count > DET_MAX)
        count = DET_MAX;
    if (max_new > 512)
        max_new = 512;
    out->ran = true;
    out->n = count;
    enum drift_dialect dl = s->gen_dialect ? s->gen_dialect : s->dialect;
    out->prompt_checked =
        s->dialect != DRIFT_DIALECT_NONE && s->dialect != DRIFT_DIALECT_AUTO;
    v = xcalloc(count, sizeof(*v));
    struct det_one *alone = xcalloc(count, sizeof(*alone));
    for (int phase = 0; phase < 2; phase++) {
        pthread_barrier_init(&start, NULL, count);
        for (unsigned i = 0; i < count; i++) {
            drift_side_clone(&v[i].side, s);
            v[i].side.dialect = dl;
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
        const struct det_one *ref = NULL;
        for (unsigned i = 0; phase == 1 && i < count && !ref; i++)
            if (!alone[i].ret)
                ref = &alone[i];
        tally(v, count, ref, phase, out);
        if (phase == 0)
            memcpy(alone, v, count * sizeof(*v));
        if (out->failed - failed_before == count && !ret)
            ret =
                diag_set(d, EPROTO, "%s: every determinism request failed: %s",
                         s->label, v[0].d.msg);
        for (unsigned i = 0; i < count; i++)
            drift_side_release(&v[i].side);
        if (ret)
            break;
    }
    free(v);
    free(alone);
    return ret;
}
