/*
 * model: the simulator's next-token distributions (docs/SIM.md, "The
 * model", log-probabilities). A deterministic function of the token history:
 * 24 hashed candidates, a copy (induction) candidate found through a bigram
 * table over the whole visible history, a tail mass spread over the rest of
 * the vocabulary. Noise faults perturb the candidate logits.
 *
 * A struct model scans one sequence left to right: model_dist() must be
 * called with non-decreasing t over the same (possibly growing) sequence.
 */
#ifndef SIM_MODEL_H
#define SIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define MODEL_CAND 25

struct model_noise {
    double sigma;    /* logit noise scale at position 1023; 0: none */
    double growth;   /* scale *= ((t + 1) / 1024)^growth */
    size_t from;     /* no noise at positions t < from */
    size_t saturate; /* growth uses min(t, saturate); 0: t */
    double scale;    /* every logit multiplied by this (1: none) */
    uint64_t seed;   /* which noise */
    double jitter;   /* run-to-run noise scale (nondeterminism, batches) */
    uint64_t jitter_seed;
    /* prefix-cache faults: positions t >= warm_n computed over warm_n
     * cached tokens get noise warm_sigma * warm_n / t (the cached share
     * of what they attend to); the same for recomputed KV */
    double warm_sigma;
    size_t warm_n;
    double recomp_sigma;
    size_t recomp_n;
    uint64_t cache_seed;
};

struct dist {
    int n;
    int32_t id[MODEL_CAND];
    double lp[MODEL_CAND]; /* natural-log probabilities, descending */
    double tail_lp;        /* log-probability of every unlisted token */
};

struct model_slot;

struct model {
    struct model_slot *tab;
    size_t cap; /* power of two */
    size_t used;
    size_t inserted; /* followers inserted: positions 1..inserted-1 */
    size_t window;   /* copy lookups reach back this far; 0: all */
};

void model_init(struct model *m, size_t window);
void model_release(struct model *m);
/* The distribution of toks[t] given toks[0..t); t >= 1. */
void model_dist(struct model *m, const int32_t *toks, size_t t,
                const struct model_noise *nz, struct dist *out);
double model_dist_logprob(const struct dist *d, int32_t id);

#endif
