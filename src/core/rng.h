/*
 * rng: a seeded xoshiro256** generator. Every random choice fidelity makes
 * (probe filler, case order, bootstrap resampling) goes through one of these
 * so that a seed reproduces a run exactly.
 */
#ifndef CORE_RNG_H
#define CORE_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, n); n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Uniform in [0, 1). */
double rng_unit(struct rng *r);

#endif
