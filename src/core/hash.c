/*
 * hash: XXH3 content hashes and splitmix64 mixing.
 */
#include "core/hash.h"

#include <math.h>
#include <stdio.h>
#include <xxhash.h>

uint64_t hash64(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t hash_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void hash_hex(uint64_t h, char out[17])
{
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

double hash_normal(uint64_t h)
{
    double u1 = hash_unit(hash_mix64(h));
    double u2 = hash_unit(hash_mix64(h ^ 0x5851f42d4c957f2dULL));
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
