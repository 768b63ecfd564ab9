/*
 * model: deterministic next-token distributions with a copy mechanism.
 */
#include "sim/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "sim/tok.h"

struct model_slot {
    uint64_t key; /* 0: empty */
    int32_t follower;
    uint32_t pos;
};

void model_init(struct model *m, size_t window)
{
    m->cap = 1024;
    m->tab = xcalloc(m->cap, sizeof(*m->tab));
    m->used = 0;
    m->inserted = 1;
    m->window = window;
}

void model_release(struct model *m)
{
    free(m->tab);
    m->tab = NULL;
}

static uint64_t bigram(const int32_t *toks, size_t i)
{
    /* Key of the two tokens before position i; -1 stands before the start. */
    uint64_t a = i >= 2 ? (uint64_t)(uint32_t)toks[i - 2] + 1 : 0;
    uint64_t b = (uint64_t)(uint32_t)toks[i - 1] + 1;
    return (a << 32 | b) | (1ULL << 63);
}

static struct model_slot *slot(struct model *m, uint64_t key)
{
    size_t i = hash_mix64(key) & (m->cap - 1);
    while (m->tab[i].key && m->tab[i].key != key)
        i = (i + 1) & (m->cap - 1);
    return &m->tab[i];
}

static void grow(struct model *m)
{
    struct model_slot *old = m->tab;
    size_t n = m->cap;
    m->cap *= 2;
    m->tab = xcalloc(m->cap, sizeof(*m->tab));
    for (size_t i = 0; i < n; i++)
        if (old[i].key)
            *slot(m, old[i].key) = old[i];
    free(old);
}

static void insert_upto(struct model *m, const int32_t *toks, size_t t)
{
    while (m->inserted < t) {
        size_t i = m->inserted++;
        if ((m->used + 1) * 2 > m->cap)
            grow(m);
        struct model_slot *s = slot(m, bigram(toks, i));
        if (!s->key)
            m->used++;
        s->key = bigram(toks, i);
        s->follower = toks[i];
        s->pos = (uint32_t)i;
    }
}

static int by_logit_desc(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x < y) - (x > y);
}

/* The prefix-cache faults' noise at position t for candidate id. */
static double cache_noise(const struct model_noise *nz, size_t t, uint64_t id)
{
    double v = 0, u = hash_normal(hash_mix2(nz->cache_seed, hash_mix2(t, id)));
    if (nz->warm_sigma > 0 && nz->warm_n > 0 && t >= nz->warm_n)
        v += nz->warm_sigma * (double)nz->warm_n / (double)t * u;
    if (nz->recomp_sigma > 0 && nz->recomp_n > 0 && t >= nz->recomp_n)
        v += nz->recomp_sigma * (double)nz->recomp_n / (double)t * u;
    return v;
}

void model_dist(struct model *m, const int32_t *toks, size_t t,
                const struct model_noise *nz, struct dist *out)
{
    uint64_t key = bigram(toks, t), h = hash_mix64(key);
    double lg[MODEL_CAND][2]; /* logit, id */
    int n = 0;

    insert_upto(m, toks, t);
    for (int k = 0; k < 24; k++) {
        int32_t id = (int32_t)(TOK_WORD0 + hash_mix2(h, (uint64_t)k) %
                                               (2 * (uint64_t)TOK_WORD_N));
        for (int j = 0; j < n; j++)
            if ((int32_t)lg[j][1] == id)
                id = id + 1 < TOK_VOCAB ? id + 1 : TOK_WORD0;
        lg[n][0] = 4.0 - 0.3 * k + 0.5 * hash_unit(hash_mix2(h, 1000u + k));
        lg[n++][1] = id;
    }
    struct model_slot *s = slot(m, key);
    if (s->key && (!m->window || t - s->pos <= m->window)) {
        int j;
        for (j = 0; j < n && (int32_t)lg[j][1] != s->follower; j++)
            ;
        if (j == n)
            lg[n++][1] = s->follower;
        lg[j][0] = 9.0;
    }
    double sigma = nz ? nz->sigma : 0, scale = nz ? nz->scale : 1;
    double jitter = nz ? nz->jitter : 0;
    if (sigma > 0 && t < nz->from)
        sigma = 0;
    if (sigma > 0 && nz->growth > 0) {
        size_t g = nz->saturate && t > nz->saturate ? nz->saturate : t;
        sigma *= pow((double)(g + 1) / 1024.0, nz->growth);
    }
    double mx = -INFINITY, z = 0;
    for (int j = 0; j < n; j++) {
        lg[j][0] *= scale;
        if (sigma > 0)
            lg[j][0] +=
                sigma * hash_normal(hash_mix2(
                            nz->seed, hash_mix2(t, (uint64_t)lg[j][1])));
        if (jitter > 0)
            lg[j][0] += jitter *
                        hash_normal(hash_mix2(
                            nz->jitter_seed, hash_mix2(t, (uint64_t)lg[j][1])));
        if (nz)
            lg[j][0] += cache_noise(nz, t, (uint64_t)lg[j][1]);
        mx = lg[j][0] > mx ? lg[j][0] : mx;
    }
    for (int j = 0; j < n; j++)
        z += exp(lg[j][0] - mx);
    double tail = 0.02 + 0.03 * hash_unit(hash_mix64(h ^ 0x7461696cULL));
    qsort(lg, (size_t)n, sizeof(lg[0]), by_logit_desc);
    out->n = n;
    for (int j = 0; j < n; j++) {
        out->id[j] = (int32_t)lg[j][1];
        out->lp[j] = lg[j][0] - mx - log(z) + log1p(-tail);
    }
    out->tail_lp = log(tail) - log((double)TOK_VOCAB - n);
}

double model_dist_logprob(const struct dist *d, int32_t id)
{
    for (int j = 0; j < d->n; j++)
        if (d->id[j] == id)
            return d->lp[j];
    return d->tail_lp;
}
