/*
 * hash: content addressing and deterministic mixing. hash64() is XXH3-64
 * from libxxhash (stable across processes and machines); hash_mix64() is the
 * splitmix64 finalizer for combining small integers without a buffer.
 */
#ifndef CORE_HASH_H
#define CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t hash64(const void *data, size_t len, uint64_t seed);
uint64_t hash_mix64(uint64_t x);
static inline uint64_t hash_mix2(uint64_t a, uint64_t b)
{
    return hash_mix64(a ^ (hash_mix64(b) + 0x9e3779b97f4a7c15ULL));
}
/* Writes 16 lowercase hex digits and a NUL into out[17]. */
void hash_hex(uint64_t h, char out[17]);
/* A uniform double in [0, 1) from a hash. */
static inline double hash_unit(uint64_t h)
{
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}
/* A standard normal deviate from a hash (Box-Muller on two derived units). */
double hash_normal(uint64_t h);

#endif
