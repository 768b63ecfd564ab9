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

/*
 * Conversations run one after another until the comparison decides: at
 * least min_convs, at most convs (the budget), stopping once the
 * interval is clear of the thresholds (docs/DRIFT.md, "Cache arm").
 * --cache-arm N sets both to N.
 */
struct drift_cache_opts {
    unsigned convs;       /* at most this many conversations; 0: arm off */
    unsigned min_convs;   /* at least this many before stopping */
    bool evict;           /* also measure after eviction (--cache-evict) */
    bool self;            /* cold twice, the noise baseline (needs a flush) */
    unsigned gen_tokens;  /* generated tokens compared */
    unsigned turn_tokens; /* reply length of each earlier turn */
    unsigned max_turns;   /* user turns of a conversation, at most */
    unsigned max_context; /* longest request: prompt and completion */
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
    bool asked;       /* the arm was asked for (not --no-cache-arm) */
    char note[512];   /* why it did not run, or what it could not do */
    char failed[512]; /* the first refused request: status and body */
    unsigned convs, requests, turns;
    unsigned model_requests; /* chat and generation requests */
    unsigned budget;         /* conversations allowed */
    unsigned min_convs;      /* conversations before it may stop */
    bool decided;            /* stopped because the interval was clear */
    uint32_t compared, evict_compared;
    long diverged_at; /* first generated token where warm and cold differ */
    unsigned diverged_warm;        /* conversations whose greedy tokens diverge
                                      warm against cold */
    unsigned diverged_cold;        /* ... cold against cold (the noise) */
    uint64_t decisive_divergences; /* where cold's margin > --flip-margin,
                                      or warm does not list cold's token */
    unsigned unlisted_divergences; /* warm's top-k lacks cold's token */
    double *conv_sums; /* per conversation: warm KL sum, n, cold-vs-cold
                          KL sum, n (drift_harm_warm); owned */
    struct drift_undecided undecided; /* of the warm comparison */
    double more_convs; /* INCONCLUSIVE: conversations that would decide */
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

void drift_cache_result_release(struct drift_cache_result *r);
/* The warm positions for harm (drift_harm_compute); n 0 when none. */
void drift_cache_harm(const struct drift_cache_result *r,
                      struct drift_harm_warm *out);

/* "warm path differs from cold", "recomputed path differs from cold",
 * "none" or "not run". */
const char *drift_cache_attribution(const struct drift_cache_result *r);
/* "hit (N of M prompt tokens)", "not hit", "cache use unknown". */
/* Empties the server's prefix cache through path ("/flush_cache" or
 * "/reset_prefix_cache"): 0, -ENOENT when the server has no such endpoint
 * or refused (sglang 400 while busy; vLLM 200 with "success": false), or a
 * transport error. */
int drift_cache_flush(struct drift_side *s, const char *path, struct diag *d);
/* Finds the flush endpoint by flushing through each in turn: *path the one
 * that worked, NULL when the server has none (0 either way); a transport
 * error otherwise. */
int drift_cache_find_flush(struct drift_side *s, const char **path,
                           struct diag *d);

void drift_cache_hit_text(const struct drift_cache_result *r, struct buf *out);

/*
 * Runs the arm on the candidate for the conversations of corpus (built-in
 * ones when it holds token ids only, or past its conversations), each
 * sized with the server's /tokenize so that its final request and the
 * generated tokens fit o->max_context. run_opts gives the thresholds,
 * the --jsonl callback and the arm names' records. Returns 0 (verdicts in
 * r; an arm whose requests the server refused is INCONCLUSIVE with the
 * server's answer in r->failed), or -ECONNREFUSED / -ETIMEDOUT with d
 * saying what.
 */
int drift_cache_run(struct drift_side *c, const struct drift_corpus *corpus,
                    const struct drift_cache_opts *o,
                    const struct drift_opts *run_opts,
                    struct drift_cache_result *r, struct diag *d);

/* What would decide an INCONCLUSIVE arm, or why it could not run, in
 * one line (no newline). */
void drift_cache_undecided_text(const struct drift_cache_result *r,
                                struct buf *out);
/* The report's section and the JSON summary's "cache" object. */
void drift_cache_text(const struct drift_cache_result *r, struct buf *out);
json_t *drift_cache_json(const struct drift_cache_result *r);

#endif
