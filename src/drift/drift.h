/*
 * drift: the teacher-forced comparison of a candidate server with a golden
 * reference. drift_run() renders the corpus on both servers (checking that
 * they tokenize it identically), detects each side's dialect, scores every
 * sequence by prefill on golden (twice: the control arm), candidate (twice:
 * its own noise) and folds the positions into a struct drift_analysis; then
 * the decode path (decode.c) and the determinism check (determinism.c).
 * Called by cmd_drift.c only; never prints: per-position records and
 * progress go through callbacks.
 */
#ifndef DRIFT_DRIFT_H
#define DRIFT_DRIFT_H

#include <stdbool.h>
#include <stdint.h>

#include "drift/analysis.h"
#include "drift/corpus.h"
#include "drift/transport.h"

#define DRIFT_BOUNDARIES_MAX 16

/* One compared position, for --jsonl. */
struct drift_rec {
    const char *arm; /* "candidate", "control", "self", "decode-..." */
    uint32_t seq, pos;
    uint64_t token;
    const struct drift_pm *m;
};

struct drift_opts {
    unsigned sequences;   /* built-in conversations */
    unsigned max_context; /* tokens per sequence (cut) */
    uint64_t seed;
    const char *corpus_file; /* NULL: built-in */
    const char *from_db;     /* store of recorded sessions, or NULL */
    const char *session;     /* with from_db: one session, NULL all */
    uint32_t min_bucket;
    uint32_t boundaries[DRIFT_BOUNDARIES_MAX];
    size_t n_boundaries;
    bool control;           /* golden pass 2 (default on) */
    bool self;              /* candidate pass 2 (default on) */
    unsigned decode_tokens; /* 0: no decode path */
    unsigned decode_seqs;   /* sequences used by the decode path */
    unsigned decode_prompt; /* prompt tokens for the decode path */
    unsigned determinism;   /* N requests; 0: off */
    unsigned token_ids;     /* sglang token_ids_logprob list size; 0 off */
    unsigned bootstrap;
    unsigned jobs; /* sequences parsed and compared at once; 0: CPUs */
    size_t worst;
    struct drift_thresholds th;
    void (*on_rec)(void *ud, const struct drift_rec *r);
    void (*on_progress)(void *ud, const char *what, size_t done, size_t total);
    void *ud;
};
void drift_opts_default(struct drift_opts *o);

/* The decode-path comparison: three analyses over generated positions. */
enum drift_dpath {
    DRIFT_DP_PP, /* golden prefill vs candidate prefill */
    DRIFT_DP_DP, /* candidate prefill vs candidate decode */
    DRIFT_DP_DG, /* golden prefill vs candidate decode */
    DRIFT_DPATHS
};
/* What the difference is attributed to (attr.c; docs/DRIFT.md). */
enum drift_attr {
    DRIFT_ATTR_NONE,         /* neither path differs */
    DRIFT_ATTR_PREFILL,      /* prefill only */
    DRIFT_ATTR_DECODE,       /* decode only */
    DRIFT_ATTR_BOTH_FLAT,    /* both paths, flat from the start */
    DRIFT_ATTR_BOTH_GROWING, /* both paths, depending on position: growing,
                              * or absent at the start and there later */
    DRIFT_ATTR_UNKNOWN       /* not run */
};
/* The words of the report ("prefill only", ...). */
const char *drift_attr_name(enum drift_attr a);
/* A stable token for JSON ("none", "prefill", "decode", "both-flat",
 * "both-growing", "not-run"). */
const char *drift_attr_kind(enum drift_attr a);

/* The decode path measured at one prompt length. */
#define DRIFT_DPOINTS_MAX 2
struct drift_dpoint {
    uint32_t prompt; /* prompt tokens: the first generated position */
    int bucket;      /* the prefill bucket it lies in; -1 none */
    bool diverged;   /* chosen inside the first failing bucket */
    unsigned seqs, generated;
    struct drift_bsum sum[DRIFT_DPATHS];
    struct drift_bsum excess[DRIFT_DPATHS];
    enum drift_verdict verdict[DRIFT_DPATHS];
    struct drift_undecided undecided[DRIFT_DPATHS];
    /* decode-vs-prefill gap: the candidate's (DP over its self noise)
     * against the golden's own, measured the same way (its decode against
     * its prefill, over its control noise) */
    bool gap_measured;
    double gap_cand, gap_golden, gap_se;
    bool gap_differs; /* gap_cand - gap_golden - 2 gap_se > 0 */
    /* the prefills differ below the thresholds: PP's excess, less 2 SE,
     * above the noise baseline itself (0 for deterministic servers; under
     * heavy noise the baseline's own bias must not count) */
    bool pp_below;
    char gap_why[256]; /* why the golden's gap was not measured, or "" */
};

/* Per corpus item, the decode path's (kl_sum, n) of DG (candidate decode
 * vs golden prefill), of its noise baseline (control, self) and of the
 * golden's own decode-vs-prefill gap (GAP: golden decode vs golden
 * prefill), for the harm bootstrap. */
enum { DRIFT_HS_DG, DRIFT_HS_CTRL, DRIFT_HS_SELF, DRIFT_HS_GAP, DRIFT_HS_N };

struct drift_decode {
    bool ran;
    bool have_pp; /* false when the candidate has no prompt logprobs */
    /* each side's flush endpoint, emptied before each of its generations
     * so golden and candidate decode from the same (cold) cache; NULL
     * where the server has none */
    const char *flush_golden, *flush_cand;
    unsigned seqs, generated;
    /* against a saved golden (decode.c, one_seq_saved): the golden's saved
     * output is the text scored, and the candidate's decode steps are
     * compared where its output has the golden's context; the golden's
     * generated steps, the candidate's shared with them, and the steps
     * where the two parted compared with the golden's token forced */
    bool saved;
    unsigned golden_steps, shared_steps, parted_steps;
    /* over every point */
    struct drift_bsum sum[DRIFT_DPATHS];
    struct drift_bsum excess[DRIFT_DPATHS]; /* over the prefill arms' noise */
    enum drift_verdict verdict[DRIFT_DPATHS];
    struct drift_undecided undecided[DRIFT_DPATHS];
    unsigned n_points;
    struct drift_dpoint point[DRIFT_DPOINTS_MAX];
    double *seq_sums; /* n_seq x DRIFT_HS_N x (sum, n); owned */
    size_t n_seq;
    enum drift_attr attribution;
    char attributed[1024];     /* what could be attributed, with figures */
    char not_attributed[1024]; /* what could not, and why ("" nothing) */
};

/* The harm scalar that ranks candidates: the excess KL mean over every
 * compared position of both paths (prefill positions and decode steps,
 * each weighted by its count), with a 95% bootstrap interval over whole
 * sequences, and the excess decisive top-1 flips per 1,000 positions. */
enum drift_harm_arm {
    DRIFT_HARM_PREFILL,
    DRIFT_HARM_DECODE,
    DRIFT_HARM_CACHE_WARM,
    DRIFT_HARM_ARMS
};
/* "prefill", "decode", "cache-warm". */
const char *drift_harm_arm_name(enum drift_harm_arm a);
struct drift_harm {
    double excess_kl_mean, lo, hi; /* clamped at 0 */
    double flips_per_1k;
    uint64_t positions; /* prefill positions + decode steps + warm ones */
    uint64_t arm_positions[DRIFT_HARM_ARMS]; /* 0: the arm is not counted */
    bool warm_golden; /* warm positions over the golden's warm vs cold */
    unsigned replicates;
};
/* The cache arm's warm positions for harm, one unit per conversation:
 * sums[i * 4 + (0, 1, 2, 3)] = warm KL sum, warm positions, cold-vs-cold
 * KL sum, cold-vs-cold positions (the baseline when has_self). */
struct drift_harm_warm {
    const double *sums;
    size_t n;
    bool has_self;
    double flips; /* the arm's excess decisive flips */
    /* the golden's own warm vs cold over the same conversations, per
     * conversation (KL sum, positions), the warm positions' baseline: a
     * healthy cache's rounding is the deployment's, not the candidate's.
     * NULL: not measured (the cold-vs-cold baseline, as before) */
    const double *golden;
};

/* Determinism of one side: N identical requests alone, then at once. */
struct drift_det_side {
    bool ran;
    unsigned n;
    unsigned distinct[2];     /* [0] alone, [1] under load */
    long first_diff[2];       /* first differing generated token; -1 */
    bool prompt_identical[2]; /* prompt logprobs bit-identical */
    bool prompt_checked;      /* the side returns prompt logprobs */
    unsigned failed;          /* requests that failed */
};
struct drift_det {
    bool ran;
    struct drift_det_side side[2]; /* [0] golden, [1] candidate */
};

struct drift_result {
    struct drift_analysis an;
    bool has_control, has_self;
    bool prefill; /* false: candidate has no prompt logprobs (fallback) */
    char fallback_why[512];
    struct drift_growth growth;
    struct drift_decode dec;
    struct drift_det det;
    struct drift_harm harm;
    unsigned sequences;
    uint64_t positions;
    enum drift_verdict bucket_verdict[DRIFT_BUCKETS_MAX];
    struct drift_undecided bucket_undecided[DRIFT_BUCKETS_MAX];
    struct drift_bsum excess[DRIFT_BUCKETS_MAX];
    enum drift_verdict verdict; /* overall */
    /* the longest request drift may send: --max-context and the servers'
     * reported context lengths, the least of them; the source's words */
    uint64_t context;
    char context_source[96];
    struct drift_corpus corpus; /* rendered ids, for the worst positions */
};

void drift_result_init(struct drift_result *r);
void drift_result_release(struct drift_result *r);

/*
 * Runs the comparison. Returns 0 when it ran (the verdict is in r), or:
 * -ECONNREFUSED/-ETIMEDOUT (a server unreachable), -EILSEQ (tokenizers
 * differ; d names the sequence and first differing position), -EINVAL /
 * -ENODATA (bad corpus), -ENOTSUP (the golden has no prompt logprobs),
 * -EPROTO/-EBADMSG (a server answered wrongly), with d saying what.
 */
int drift_run(struct drift_side *golden, struct drift_side *cand,
              const struct drift_opts *o, struct drift_result *r,
              struct diag *d);

/* Compares two prefill answers position by position into arm of a,
 * counting skips; calls o->on_rec. Exposed for tests. */
void drift_compare_lp(struct drift_analysis *a, enum drift_arm arm,
                      uint32_t seq, const struct drift_lp *g,
                      const struct drift_lp *c, uint32_t from, uint32_t to,
                      const struct drift_opts *o, const char *arm_name);

/*
 * The prefill arms on worker threads (pipe.c). Pass k of a sequence is
 * 0 golden, 1 golden again (control), 2 candidate, 3 candidate again
 * (self); 1 and 3 run when has_control / has_self. fetch() gets the text
 * of pass k of corpus item i as received (fresh, NUL-terminated; the
 * pipe parses it, sanitizing it in place when the reader does not take it
 * as it is, and frees it; with lent, the text stays the fetcher's: the
 * pipe neither writes nor frees it, and copies it when it must be
 * sanitized). The golden's passes (0, 1) and the candidate's (2, 3) are
 * two lanes, one per server: within a lane fetch() is called in sequence
 * and pass order, one call at a time, so each server gets the serial
 * run's requests in the serial order, one at a time; the two lanes run at
 * once, on two threads (a sequence's golden and candidate answers are
 * awaited together). With one_server (golden and candidate are the same
 * server) there is one lane: every call in sequence and pass order, one
 * at a time, as before. With needs_golden, pass 2's fetch is called after
 * pass 0 of the same sequence has been parsed into *golden (the sglang
 * token_ids_logprob list is taken from it); without it fetch() must not
 * read *golden. side[k] parses pass k (dialect, top_k, label; never used
 * for I/O here).
 */
#define DRIFT_PASSES 4
struct drift_pipe {
    const struct drift_corpus *corpus;
    const struct drift_side *side[DRIFT_PASSES];
    bool has_control, has_self;
    bool lent;         /* fetch lends the text (bench/drift_bench.c) */
    bool one_server;   /* one lane: every request in turn */
    bool needs_golden; /* pass 2 waits for pass 0's parse */
    unsigned threads;  /* workers, the calling thread included; 0 as 1 */
    int (*fetch)(void *ud, size_t i, int pass, const struct drift_lp *golden,
                 char **text, size_t *len, struct diag *d);
    void *ud;
};
/*
 * Scores every corpus item: fetches and parses its passes and folds the
 * arms (CAND, then CTRL, then SELF; positions 1..n-1) into an, in corpus
 * order, calling o->on_rec and o->on_progress from whichever thread holds
 * the item's turn (one at a time, in order). The result and the callbacks'
 * sequence are the same for any thread count and with or without
 * one_server. *positions grows by n - 1 per item. Returns 0, or the error
 * of the first item that failed (fetch or parse; d names the item; of an
 * item whose golden and candidate both failed, the golden's, as in the
 * serial order), with the items before it folded.
 */
int drift_pipe_run(const struct drift_pipe *p, struct drift_analysis *an,
                   const struct drift_opts *o, uint64_t *positions,
                   struct diag *d);

/* Decode path and determinism (decode.c, determinism.c). The decode path
 * runs at the prompt lengths drift_decode_prompts() chooses, after the
 * prefill verdicts (r->bucket_verdict, r->growth) are known. */
int drift_decode_run(struct drift_side *golden, struct drift_side *cand,
                     const struct drift_opts *o, struct drift_result *r,
                     struct diag *d);
/* The decode prompt lengths (attr.c): one inside the first prefill bucket
 * that is not PASS (the last bucket with data when only growth is off),
 * then --decode-prompt when it lies in another bucket or nothing failed;
 * each below the longest sequence. Marks out[0].diverged. fixed_only:
 * --decode-prompt's alone (against a saved golden, which holds the
 * golden's generations there only). Returns n. */
unsigned drift_decode_prompts(const struct drift_opts *o,
                              const struct drift_result *r, bool fixed_only,
                              struct drift_dpoint *out);
/* Attribution from the prefill verdicts and the decode points, with the
 * texts of what could and could not be attributed (attr.c). */
void drift_attribute(const struct drift_opts *o, struct drift_result *r);
/* The harm scalar (harm.c), after the verdicts; warm (may be NULL) adds
 * the cache arm's warm positions, each conversation a resampled unit. */
void drift_harm_compute(const struct drift_result *r,
                        const struct drift_harm_warm *warm, unsigned replicates,
                        uint64_t seed, struct drift_harm *h);
int drift_determinism_run(struct drift_side *s, const uint32_t *ids, size_t n,
                          unsigned count, unsigned max_new,
                          struct drift_det_side *out, struct diag *d);

#endif
