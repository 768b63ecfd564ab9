/*
 * probe: multi-turn context-fidelity tests of a live OpenAI-compatible
 * endpoint. This header is the contract between cmd_probe.c and the files
 * of src/probe/:
 *
 *   grid.c     the list of cases a run sends (profiles, kinds, lengths,
 *              depths, variants, temperatures, repeats) and their keys
 *   filler.c   seeded filler text (prose, code, tool output, JSON)
 *   gen.c      one case's messages, question and expected answer
 *   endpoint.c fingerprint, /tokenize, chat requests with retries
 *   size.c     sizing a case to the server's own token count
 *   score.c    deterministic scoring and failure classification
 *   run.c      the worker threads that size, send, score and store cases
 *   pstore.c   the probe_* tables of the SQLite store
 *   report.c   cells, Wilson intervals, effective lengths, McNemar,
 *              the text table and heatmap, JSON and JUnit output
 *
 * Library code: nothing here prints or exits; errors are -errno with a
 * struct diag.
 */
#ifndef PROBE_PROBE_H
#define PROBE_PROBE_H

#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/diag.h"
#include "http/client.h"

enum probe_kind {
    PROBE_NEEDLE,
    PROBE_MULTI,
    PROBE_CANARY,
    PROBE_FIRST,
    PROBE_REASONING,
    PROBE_TOOL,
    PROBE_VARIABLES,
    PROBE_NKINDS
};

/* "needle", "multi-needle", ...; probe_kind_parse returns -1 when unknown. */
const char *probe_kind_name(enum probe_kind k);
int probe_kind_parse(const char *s);
/* True when the kind's cases are placed along the depth axis. */
bool probe_kind_has_depth(enum probe_kind k);

/* Variants. Reasoning: how the earlier reasoning is sent back, and whether
 * the request offers tools. Tool: where the fact lives. Canary: which
 * message's nonce is asked for. */
enum {
    PROBE_RV_FIELD = 0,   /* reasoning_content field, no tools */
    PROBE_RV_FIELD_TOOLS, /* reasoning_content field, tools offered */
    PROBE_RV_INLINE,      /* <think>...</think> inside content */
    PROBE_RV_INLINE_TOOLS,
    PROBE_RV_OMITTED, /* control: reasoning not sent back */
    PROBE_RV_COUNT
};
enum { PROBE_TV_ARGS = 0, PROBE_TV_RESULT, PROBE_TV_COUNT };
enum {
    PROBE_CV_USER = 0,
    PROBE_CV_ASSISTANT,
    PROBE_CV_REASONING,
    PROBE_CV_TOOL,
    PROBE_CV_SYSTEM,
    PROBE_CV_COUNT
};
/* "reasoning_content", "inline+tools", "args", "user", ... or "-". */
const char *probe_variant_name(enum probe_kind k, int variant);

enum probe_outcome {
    PROBE_PASS = 0,
    PROBE_TRUNCATED, /* usage.prompt_tokens below the expected count */
    PROBE_CLIPPED,   /* finish_reason "length" */
    PROBE_ERROR,     /* no usable answer after the retries */
    PROBE_MISSED,    /* the server kept the prompt and the answer is wrong */
    PROBE_NOUTCOMES
};
const char *probe_outcome_name(enum probe_outcome o);
int probe_outcome_parse(const char *s);

/* One case's configuration: everything that decides its content and its
 * request, and so its key in the store. */
struct probe_spec {
    enum probe_kind kind;
    unsigned length; /* grid length in tokens */
    unsigned target; /* prompt tokens aimed at, <= length */
    int depth;       /* percent 0-100; canary: turn position; -1: none */
    int variant;
    double temperature;
    unsigned rep;
    uint64_t seed;      /* content seed: run seed, kind, length, depth, variant,
                           rep (not temperature: the same case at each one) */
    const json_t *vary; /* --vary cell set in the request (vary.h), or
                           NULL; borrowed for the run */
    const char *vary_key; /* its label, part of the store key; or NULL */
};

/* ---- grid.c ---- */

enum probe_profile { PROBE_QUICK, PROBE_STANDARD, PROBE_FULL };
int probe_profile_parse(const char *s);

struct probe_grid_opts {
    enum probe_profile profile;
    unsigned kinds;          /* bit mask of 1u << kind; 0: all */
    const unsigned *lengths; /* NULL: from the profile and max context */
    size_t n_lengths;
    const int *depths; /* NULL: from the profile */
    size_t n_depths;
    const double *temps; /* NULL: {0} */
    size_t n_temps;
    unsigned repeats;     /* 0: 1 at temperature 0, else 3 */
    unsigned max_context; /* longest length; 0: 131072 */
    unsigned model_len;   /* server's max_model_len; 0: unknown */
    unsigned max_tokens;  /* room kept for the reply */
    uint64_t seed;
};

/* Builds the ordered case list (*out, freed by the caller with free()).
 * -EINVAL with d when the grid is empty or a length is below 512. */
int probe_grid_build(const struct probe_grid_opts *o, struct probe_spec **out,
                     size_t *n, struct diag *d);
/* The default lengths: powers of two from 1024 to max_context (and
 * max_context itself when it is not one); *n of at most 32. */
size_t probe_default_lengths(unsigned max_context, unsigned out[32]);
/* The store key: hash of the case configuration, the request parameters
 * that change answers (model, max_tokens, extra body) and the endpoint
 * fingerprint. 16 hex digits. */
void probe_spec_key(const struct probe_spec *s, const char *model,
                    unsigned max_tokens, const char *extra_body,
                    const char *endpoint_fp, char out[17]);

/* ---- filler.c ---- */

enum probe_filler {
    FILLER_PROSE,
    FILLER_CODE,
    FILLER_TOOL,
    FILLER_JSON,
    FILLER_NSOURCES
};
/* Appends exactly `want` bytes of printable ASCII filler of one source,
 * seeded by seed, to b (lines end in '\n'; the last may be cut). The text
 * never contains a fact statement, "Let", or a number above 9999. Returns
 * 0 or -ENOBUFS from the buffer's cap. */
int probe_filler(struct buf *b, enum probe_filler src, uint64_t seed,
                 size_t want);

/* ---- gen.c ---- */

#define PROBE_MAX_DISTRACT 8

struct probe_case {
    struct probe_spec spec;
    json_t *messages; /* owned */
    json_t *tools;    /* owned; NULL when the request offers none */
    char expect[160]; /* what a correct reply contains */
    char distract[PROBE_MAX_DISTRACT][24]; /* what it must not contain */
    size_t n_distract;
    bool control;      /* passes when `expect` is NOT in the reply */
    bool expect_words; /* expect is a phrase (case-insensitive), not a
                          number matched on digit boundaries */
    size_t filler;     /* filler bytes the messages hold */
    size_t chars;      /* bytes of all message text */
    unsigned turns;
    struct buf *cache; /* per-turn filler, kept across builds of one spec */
    unsigned n_cache;
};

/* Builds the case for spec with `filler` bytes of filler in total. Any
 * previous contents of c are released first (c must be zeroed or built);
 * the filler generated for an earlier build of a spec with the same seed
 * is reused. */
void probe_case_build(struct probe_case *c, const struct probe_spec *spec,
                      size_t filler);
void probe_case_release(struct probe_case *c);
/* Frees the filler kept for rebuilds; the messages stay. */
void probe_case_drop_cache(struct probe_case *c);
/* Number of user turns before the question for a target size. */
unsigned probe_turns_for(unsigned target);

/* ---- endpoint.c ---- */

struct probe_endpoint {
    char *url;                  /* base URL without a trailing "/" or "/v1" */
    char *model;                /* NULL until known */
    const char *const *headers; /* borrowed; may hold secrets: never
                                   stored, printed or put in a diag */
    json_t *extra_body;         /* borrowed; merged into every request */
    long timeout_ms;
    unsigned retries;       /* after the first attempt */
    unsigned backoff_ms;    /* first retry delay; doubles each time */
    unsigned max_model_len; /* 0: unknown */
    json_t *info;           /* owned: what each fingerprint URL said */
    char fp[17];            /* hash of url, model and info */
    bool has_tokenize;
    bool calibrated;     /* sized from usage.prompt_tokens */
    double cal_a, cal_b; /* tokens ~= cal_a + cal_b * units */
    double tok_per_unit; /* of filler, by /tokenize; 0: unknown */
};

void probe_endpoint_init(struct probe_endpoint *e, const char *url);
void probe_endpoint_release(struct probe_endpoint *e);
/*
 * Asks /v1/models (and, best effort, /get_server_info, /version, /props),
 * fills model (when NULL) and max_model_len, then fp. Returns
 * -ECONNREFUSED or -ETIMEDOUT when the endpoint cannot be reached,
 * -EBADMSG when /v1/models does not answer JSON, -EPROTO when it answers
 * an error or lists no model (d says which and what to do).
 */
int probe_endpoint_fingerprint(struct probe_endpoint *e, struct http_client *c,
                               struct diag *d);
/* Counts the tokens of messages with the server's POST /tokenize (hint:
 * the bytes of text they hold, or 0).
 * -ENOTSUP when the server has no usable /tokenize (404, 405, 501, or an
 * answer without a count); other errors as http_do. */
int probe_tokenize(struct probe_endpoint *e, struct http_client *c,
                   const json_t *messages, const json_t *tools, size_t hint,
                   unsigned *count, struct diag *d);

/* The token count from a /tokenize answer s (len bytes, NUL-terminated):
 * the number after "count" (vLLM, sim), else the number of elements of
 * "tokens" (llama.cpp). 0, or -ENOTSUP when there is neither. */
int probe_scan_count(const char *s, size_t len, unsigned *count);

struct probe_reply {
    long status; /* last HTTP status; 0: no response */
    int err;     /* 0 or the last -errno */
    unsigned attempts;
    long prompt_tokens; /* -1: not reported */
    char finish[16];
    char *content;   /* owned, may be NULL */
    char *reasoning; /* owned, may be NULL */
    json_t *message; /* owned: choices[0].message as answered, or NULL */
    double latency;  /* seconds, last attempt */
    char error[256]; /* why it failed, when it did */
};
void probe_reply_release(struct probe_reply *r);

/* Sends one chat completion for c, retrying 429, 5xx and connection errors
 * up to e->retries times with doubling backoff (stop, when it becomes
 * non-zero, ends the waits early). Returns 0 when a 200 answer with a
 * choice arrived; otherwise r->error says why and a negative errno is
 * returned (the case is then a server error, never a miss). */
int probe_chat(struct probe_endpoint *e, struct http_client *c,
               const struct probe_case *pc, unsigned max_tokens,
               struct probe_reply *r, volatile sig_atomic_t *stop);
/* The request body probe_chat sends (new reference). */
json_t *probe_chat_body(const struct probe_endpoint *e,
                        const struct probe_case *pc, unsigned max_tokens);

/* ---- body.c ---- */

/* Compact JSON of j, as json_dumps(j, JSON_COMPACT) means it, written with
 * memcpy for runs that need no escape; hint is the expected size (0 if
 * unknown). The caller frees it. */
char *probe_json_dump(const json_t *j, size_t hint, size_t *len);

/* ---- size.c ---- */

/* Fits cal_a/cal_b from at most three chat requests (max_tokens 1) when
 * the endpoint has no /tokenize. */
int probe_calibrate(struct probe_endpoint *e, struct http_client *c,
                    struct diag *d);
/* Measures the endpoint's tokens per unit of filler with two /tokenize
 * calls, so that sizing's first guess usually lands (no-op without
 * /tokenize). */
int probe_size_prepare(struct probe_endpoint *e, struct http_client *c,
                       struct diag *d);
/* Builds c for spec sized so that its token count (by /tokenize, or the
 * calibration) is within [0.98 * target, target]; *tokens gets the count.
 * Uses at most 6 /tokenize calls. */
int probe_size_case(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_spec *spec, struct probe_case *pc,
                    unsigned *tokens, struct diag *d);
/* The expected count of an already built case on another endpoint. */
int probe_count_case(struct probe_endpoint *e, struct http_client *c,
                     const struct probe_case *pc, unsigned *tokens,
                     struct diag *d);
/* Token estimate without any request (dry runs): 3.5 bytes a token. */
size_t probe_filler_for(const struct probe_spec *spec);

/* ---- score.c ---- */

/* True when the reply contains a phrase a model says when it sees no
 * earlier context ("this looks like the start of our conversation"). */
bool probe_has_no_context(const char *reply);
/* True when the reply holds the expected answer and no distractor (for a
 * control case: when it does not hold the expected value). */
bool probe_score(const struct probe_case *c, const char *reply);
/* The outcome of a scored reply: pass, or why it failed. expected is the
 * sized token count; tol the share below it that still counts as intact. */
enum probe_outcome probe_classify(bool passed, const struct probe_reply *r,
                                  unsigned expected, double tol);

/* ---- results ---- */

struct probe_result {
    bool done;
    bool cached; /* read back from the store, not sent */
    enum probe_outcome outcome;
    bool no_context;
    unsigned expected; /* tokens by the sizing */
    long prompt_tokens;
    long status;
    unsigned attempts;
    double latency;
    char finish[16];
    char key[17];
    char reply[241]; /* start of the reply (content) */
    char error[160];
};

/* ---- pstore.c ---- */

/* Creates the probe_* tables when missing. */
int probe_store_init(sqlite3 *db, struct diag *d);
int probe_store_endpoint(sqlite3 *db, const struct probe_endpoint *e,
                         struct diag *d);
/* 1 and *r filled when key has a finished result, 0 when not, <0 error. */
int probe_store_get(sqlite3 *db, const char *key, struct probe_result *r,
                    struct diag *d);
int probe_store_put(sqlite3 *db, const char *endpoint_fp,
                    const struct probe_spec *s, const struct probe_result *r,
                    struct diag *d);
/* Records a finished run and its JSON summary; *id gets its row id. */
int probe_store_run(sqlite3 *db, const char *endpoint_fp,
                    const char *baseline_fp, json_t *summary, long long *id,
                    struct diag *d);

/* ---- run.c ---- */

struct probe_run {
    struct probe_endpoint *ep;   /* required */
    struct probe_endpoint *base; /* NULL: no baseline */
    const struct probe_spec *specs;
    size_t n;
    struct probe_result *res;  /* n results for ep */
    struct probe_result *bres; /* n results for base, or NULL */
    unsigned jobs;
    unsigned max_tokens;
    const char *extra_key; /* canonical extra body for keys */
    bool fresh;
    double tol;  /* truncation tolerance (share) */
    sqlite3 *db; /* NULL: nothing stored */
    volatile sig_atomic_t *stop;
    /* Called after each finished case, from a worker, serialised. */
    void (*progress)(void *ud, size_t done, size_t passed, size_t total);
    void *ud;
    /* Out. */
    size_t sent; /* chat requests made (both endpoints) */
    size_t cached;
    bool interrupted;
    int store_err; /* first store error, 0 if none */
    struct diag store_diag;
};

/* Runs every case with r->jobs threads, each with its own http_client.
 * Returns 0 (also when interrupted: r->interrupted says so, unfinished
 * results have done == false). */
int probe_run(struct probe_run *r);

/* ---- report.c ---- */

#define PROBE_RULER_THRESHOLD 0.856
#define PROBE_NOLIMA_SHARE 0.85

/* Effective length by RULER's rule (the longest length before the first
 * one whose pass rate falls below threshold) and NoLiMa's (the same with
 * the threshold 0.85 x the mean rate of the three shortest lengths).
 * lengths ascending; 0 when even the shortest fails. */
unsigned probe_effective_ruler(const unsigned *lengths, const double *rate,
                               size_t n, double threshold);
unsigned probe_effective_nolima(const unsigned *lengths, const double *rate,
                                size_t n, double *base);

struct probe_report_in {
    const struct probe_endpoint *ep;
    const struct probe_endpoint *base;
    const struct probe_spec *specs;
    const struct probe_result *res;
    const struct probe_result *bres;
    size_t n;
    json_t *config; /* borrowed; copied into the JSON */
    bool interrupted;
};

/* The machine-readable report (schema in docs/PROBE.md). */
json_t *probe_report_json(const struct probe_report_in *in);
/* The summary table, per-kind effective lengths, the heatmaps, the
 * failure explanation and the baseline comparison, as text. */
void probe_report_text(const struct probe_report_in *in, FILE *out);
int probe_report_junit(const struct probe_report_in *in, const char *path,
                       struct diag *d);
/* Overall pass rate of finished cases (0 when none). */
double probe_pass_rate(const struct probe_result *res, size_t n);

#endif
