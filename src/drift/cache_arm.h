/*
 * drift cache arm: does a warm multi-turn request see the same model as a
 * cold one? For a conversation, the same final request is sent cold (its
 * content never seen: a fresh marker in the system message, and the
 * server's flush endpoint where it has one) and warm (after the earlier
 * turns were sent through /v1/chat/completions as a harness sends them,
 * each carrying the reply the server generated), and, with evict, after
 * enough other traffic to push it out of the server's cache. The next-token
 * distributions of the generated tokens are compared while the greedy
 * tokens agree, with the statistics and verdict words of the other arms.
 * The final requests never ask for prompt logprobs: vLLM V1 skips the
 * prefix cache for those, so such a "warm" request would be cold.
 * Called by cmd_drift.c after drift_run(); never prints.
 */
#ifndef DRIFT_CACHE_ARM_H
#define DRIFT_CACHE_ARM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "drift/drift.h"

struct drift_cache_opts {
    unsigned convs;       /* conversations; 0: the arm is off */
    unsigned budget;      /* model requests the default arm may send; 0: any
                             (it sends at least the 3 or 4 it needs) */
    bool evict;           /* also measure after eviction (--cache-evict) */
    bool self;            /* cold twice, the noise baseline (needs a flush) */
    unsigned gen_tokens;  /* generated tokens compared */
    unsigned turn_tokens; /* reply length of each earlier turn */
    unsigned max_context; /* longest prompt sent */
    uint64_t seed;
    uint64_t nonce; /* makes the content never seen; 0: from the clock */
};
void drift_cache_opts_default(struct drift_cache_opts *o);

/* What the server said about its cache for one request: cached tokens, or
 * -1 when the answer carries no figure. */
struct drift_cache_seen {
    long cold, warm, evicted;
    long prompt; /* tokens of the final request */
};

struct drift_cache_result {
    bool ran;
    char note[256]; /* why it did not run, or what it could not do */
    unsigned convs, requests, turns;
    unsigned model_requests; /* chat and generation requests */
    unsigned budget;         /* what it was allowed; 0: no limit */
    uint32_t compared, evict_compared;
    long diverged_at;  /* first generated token where warm and cold differ */
    const char *flush; /* the flush endpoint used, or NULL */
    bool generated_in_history; /* earlier replies came from the server */
    bool has_self;
    struct drift_cache_seen seen;
    long capacity; /* the server's reported cache size; -1 unknown */
    bool evict_ran;
    struct drift_bsum sum, self, excess;
    struct drift_bsum evict_sum, evict_excess;
    enum drift_verdict verdict, evict_verdict;
};

/* "warm path differs from cold", "recomputed path differs from cold",
 * "none" or "not run". */
const char *drift_cache_attribution(const struct drift_cache_result *r);
/* "hit (N of M prompt tokens)", "not hit", "cache use unknown". */
void drift_cache_hit_text(const struct drift_cache_result *r, struct buf *out);

/*
 * Runs the arm on the candidate for the conversations of corpus (built-in
 * ones when it holds token ids only). run_opts gives the thresholds, the
 * --jsonl callback and the arm names' records. Returns 0 (verdicts in r),
 * or the transport's errors (-ECONNREFUSED, -EPROTO, -EBADMSG, ...) with d
 * saying what.
 */
int drift_cache_run(struct drift_side *c, const struct drift_corpus *corpus,
                    const struct drift_cache_opts *o,
                    const struct drift_opts *run_opts,
                    struct drift_cache_result *r, struct diag *d);

/* The report's section and the JSON summary's "cache" object. */
void drift_cache_text(const struct drift_cache_result *r, struct buf *out);
json_t *drift_cache_json(const struct drift_cache_result *r);

#endif
