/*
 * sim cache: the simulator's prefix cache (docs/SIM.md, "Prefix cache").
 * Block-granular like vLLM's automatic prefix caching: a prompt is cut in
 * blocks of --cache-block tokens, each block named by a hash of every
 * token up to its end, so a block is found only after the same prefix.
 * Capacity is --cache-tokens; the least recently used block goes first.
 * A bounded record of evicted blocks tells a recomputation of something
 * once cached (the --recompute-noise fault) from a first computation.
 *
 * The cache only decides which tokens count as cached; the noise faults
 * that make the warm or recomputed path differ read the figures from the
 * struct sim (sim_noise in handle.c).
 */
#ifndef SIM_CACHE_H
#define SIM_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sim;
struct sim_cache;

/* What the prefix cache gave one request. */
struct sim_cache_use {
    size_t cached;     /* leading tokens served from the cache */
    size_t recomputed; /* tokens after those that were cached once and
                          evicted (recomputed now) */
};

/*
 * Looks up the prefix of toks[0..n) (at most limit tokens, and never the
 * last token: one must be computed to have logits) and marks the blocks
 * found as used. The collapse fault applies here. Allocates the cache on
 * first use; a changed size or block empties it.
 */
void sim_cache_lookup(struct sim *s, const int32_t *toks, size_t n,
                      size_t limit, struct sim_cache_use *u);
/* Inserts every whole block of toks[0..n), evicting the least recently
 * used blocks when full. */
void sim_cache_insert(struct sim *s, const int32_t *toks, size_t n);
/* Empties the cache and the record of evicted blocks. */
void sim_cache_flush(struct sim *s);
/* Blocks held now (tests, /sim/stats). */
size_t sim_cache_blocks(const struct sim *s);
void sim_cache_free(struct sim_cache *c);

#endif
