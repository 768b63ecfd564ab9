/*
 * rng: xoshiro256** (Blackman and Vigna), seeded through splitmix64.
 */
#include "core/rng.h"

#include "core/hash.h"

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        seed = hash_mix64(seed + (uint64_t)i);
        r->s[i] = seed ? seed : 1;
    }
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    /* Lemire's nearly-divisionless method would be faster; this is fine. */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = rng_next(r);
    while (x >= lim);
    return x % n;
}

double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}
