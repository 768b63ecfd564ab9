/*
 * cache: the sim's block-granular prefix cache with LRU eviction
 * (contract in cache.h) and its use around a model request (sim_int.h).
 * Blocks live in a slot array indexed by an open-addressing hash table
 * (linear probing, backward-shift deletion) and linked in use order, so a
 * lookup, an insertion and an eviction each cost O(1) whatever the size.
 */
#include "sim/cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "sim/sim_int.h"
#include "sim/tok.h"

#define GHOSTS 4096 /* evicted block keys remembered (direct-mapped) */
#define NIL UINT32_MAX

struct sim_cache {
    long tokens, block;    /* the configuration it was built for */
    size_t cap, used;      /* blocks */
    uint64_t *key;         /* per slot; 0: free */
    uint32_t *prev, *next; /* use order: head least recently used */
    uint32_t head, tail;
    uint32_t *freed; /* stack of free slots */
    size_t nfree;
    uint32_t *idx; /* hash index: slot + 1, 0 empty */
    size_t icap;   /* power of two, >= 2 * cap */
    uint64_t ghost[GHOSTS];
};

void sim_cache_free(struct sim_cache *c)
{
    if (!c)
        return;
    free(c->key);
    free(c->prev);
    free(c->next);
    free(c->freed);
    free(c->idx);
    free(c);
}

static struct sim_cache *cache_new(long tokens, long block)
{
    struct sim_cache *c = xcalloc(1, sizeof(*c));
    c->tokens = tokens;
    c->block = block;
    c->cap = (size_t)(tokens / block);
    c->icap = 16;
    while (c->icap < 2 * c->cap)
        c->icap *= 2;
    c->key = xcalloc(c->cap, sizeof(*c->key));
    c->prev = xcalloc(c->cap, sizeof(*c->prev));
    c->next = xcalloc(c->cap, sizeof(*c->next));
    c->freed = xcalloc(c->cap, sizeof(*c->freed));
    c->idx = xcalloc(c->icap, sizeof(*c->idx));
    c->head = c->tail = NIL;
    for (size_t i = 0; i < c->cap; i++)
        c->freed[c->nfree++] = (uint32_t)(c->cap - 1 - i);
    return c;
}

/* The cache for the current configuration; NULL when it is off. */
static struct sim_cache *get(struct sim *s)
{
    long tokens = s->cfg.cache_tokens, block = s->cfg.cache_block;
    if (s->cache && (s->cache->tokens != tokens || s->cache->block != block)) {
        sim_cache_free(s->cache);
        s->cache = NULL;
    }
    if (tokens < block)
        return NULL;
    if (!s->cache)
        s->cache = cache_new(tokens, block);
    return s->cache;
}

static size_t home_of(const struct sim_cache *c, uint64_t k)
{
    return (size_t)hash_mix64(k) & (c->icap - 1);
}

/* The index position holding k, or the empty one where it would go. */
static size_t probe(const struct sim_cache *c, uint64_t k)
{
    size_t i = home_of(c, k);
    while (c->idx[i] && c->key[c->idx[i] - 1] != k)
        i = (i + 1) & (c->icap - 1);
    return i;
}

/* Backward-shift deletion: keeps every probe chain unbroken. */
static void unindex(struct sim_cache *c, size_t i)
{
    size_t j = i;
    c->idx[i] = 0;
    for (;;) {
        j = (j + 1) & (c->icap - 1);
        if (!c->idx[j])
            return;
        size_t h = home_of(c, c->key[c->idx[j] - 1]);
        bool move = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (move) {
            c->idx[i] = c->idx[j];
            c->idx[j] = 0;
            i = j;
        }
    }
}

static void unlink_slot(struct sim_cache *c, uint32_t s)
{
    if (c->prev[s] != NIL)
        c->next[c->prev[s]] = c->next[s];
    else
        c->head = c->next[s];
    if (c->next[s] != NIL)
        c->prev[c->next[s]] = c->prev[s];
    else
        c->tail = c->prev[s];
}

static void append(struct sim_cache *c, uint32_t s)
{
    c->prev[s] = c->tail;
    c->next[s] = NIL;
    if (c->tail != NIL)
        c->next[c->tail] = s;
    else
        c->head = s;
    c->tail = s;
}

/* Marks slot s the most recently used. */
static void touch(struct sim_cache *c, uint32_t s)
{
    unlink_slot(c, s);
    append(c, s);
}

static void evict_one(struct sim_cache *c)
{
    uint32_t old = c->head;
    uint64_t k = c->key[old];
    c->ghost[k % GHOSTS] = k;
    unindex(c, probe(c, k));
    unlink_slot(c, old);
    c->key[old] = 0;
    c->freed[c->nfree++] = old;
    c->used--;
}

static void add(struct sim_cache *c, uint64_t k)
{
    size_t i = probe(c, k);
    if (c->idx[i]) {
        touch(c, c->idx[i] - 1);
        return;
    }
    if (c->used == c->cap) {
        evict_one(c);
        i = probe(c, k);
    }
    uint32_t slot = c->freed[--c->nfree];
    c->key[slot] = k;
    c->idx[i] = slot + 1;
    append(c, slot);
    c->used++;
}

/* The key of the block toks[from..from+len) after the prefix named prev. */
static uint64_t block_key(uint64_t prev, const int32_t *toks, size_t from,
                          size_t len)
{
    uint64_t h = hash_mix2(prev, 0x626c6f636bULL);
    for (size_t i = 0; i < len; i++)
        h = hash_mix2(h, (uint64_t)(uint32_t)toks[from + i]);
    return h | 1;
}

/* The turn of a prompt: the user messages it renders. */
static size_t turns(const int32_t *toks, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += toks[i] == TOK_USER;
    return k;
}

void sim_cache_lookup(struct sim *s, const int32_t *toks, size_t n,
                      size_t limit, struct sim_cache_use *u)
{
    struct sim_cache *c = get(s);
    memset(u, 0, sizeof(*u));
    if (!c || n < 2)
        return;
    size_t b = (size_t)c->block, max = n - 1 < limit ? n - 1 : limit;
    uint64_t h = 0;
    bool hit = true;
    for (size_t at = 0; at + b <= max; at += b) {
        h = block_key(h, toks, at, b);
        size_t i = probe(c, h);
        if (hit && c->idx[i]) {
            touch(c, c->idx[i] - 1);
            u->cached = at + b;
            continue;
        }
        hit = false;
        if (c->ghost[h % GHOSTS] != h)
            break;
        u->recomputed = at + b - u->cached;
    }
    long after = s->cfg.cache_collapse_after;
    if (after > 0 && turns(toks, n) > (size_t)after)
        u->cached = u->cached * 2 / 5 / b * b; /* 40%, in whole blocks */
}

void sim_cache_insert(struct sim *s, const int32_t *toks, size_t n)
{
    struct sim_cache *c = get(s);
    if (!c)
        return;
    size_t b = (size_t)c->block;
    uint64_t h = 0;
    for (size_t at = 0; at + b <= n; at += b) {
        h = block_key(h, toks, at, b);
        add(c, h);
    }
}

void sim_cache_flush(struct sim *s)
{
    sim_cache_free(s->cache);
    s->cache = NULL;
}

size_t sim_cache_blocks(const struct sim *s)
{
    return s->cache ? s->cache->used : 0;
}

void sim_cache_begin(struct sim *s, const int32_t *prompt, size_t n,
                     size_t limit)
{
    memset(&s->use, 0, sizeof(s->use));
    s->use_skip = limit == 0;
    if (s->use_skip)
        return;
    sim_cache_lookup(s, prompt, n, limit, &s->use);
    s->cached_total += s->use.cached;
}

void sim_cache_end(struct sim *s, const int32_t *all, size_t prompt_n, size_t n)
{
    if (s->use_skip)
        return;
    sim_cache_insert(s, all, s->cfg.no_cache_output ? prompt_n : n);
}

void sim_cache_usage(const struct sim *s, json_t *usage)
{
    if (s->cfg.no_cache_report)
        return;
    json_object_set_new(
        usage, "prompt_tokens_details",
        json_pack("{s:I}", "cached_tokens", (json_int_t)s->use.cached));
}
