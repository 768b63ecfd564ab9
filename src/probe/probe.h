/*
 * probe: multi-turn context-fidelity tests of a live OpenAI-compatible
 * endpoint. This header is the contract between cmd_probe.c (and the
 * report's loader) and the files of src/probe/; what only those files
 * share is in probe_int.h:
 *
 *   grid.c     the list of cases a run sends (profiles, kinds, lengths,
 *              depths, variants, temperatures, repeats) and their keys
 *   filler.c   seeded filler text (prose, code, tool output, JSON)
 *   gen.c      one case's messages, question and expected answer
 *   endpoint.c fingerprint, /tokenize, chat requests with retries
 *   size.c     sizing a case to the server's own token count
 *   score.c    deterministic scoring and failure classification
 *   canary.c   the canary request that fingerprints the endpoint
 *   own.c      probe's own token count of what it sent
 *   lost.c     lost context: truncated by the server or dropped before it
 *   pool.c     the worker threads that size, send, score and store cases
 *   pstore.c   the probe_* tables of the SQLite store
 *   render.c   cells, Wilson intervals, effective lengths, McNemar,
 *              the text table and heatmap, JSON and JUnit output
 *
 * Library code: nothing here prints or exits; errors are -errno with a
 * struct diag.
 */
#ifndef PROBE_PROBE_H
#define PROBE_PROBE_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/diag.h"
#include "http/client.h"
#include "store/db.h"

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
    PROBE_DROPPED,   /* the prompt reached the model shorter than probe sent
                        it, and not at one cap: the path dropped context */
    PROBE_NOUTCOMES
};

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

/* The same list held as its cells, each case computed from its index when
 * needed, so that a run's memory does not grow with its repeats: a cell
 * is one kind, length, depth, variant and temperature, its cases its
 * repeats, each once per --vary cell (the vary cell varying fastest). */
struct probe_cell {
    struct probe_spec spec; /* the case at repeat 0, without vary */
    uint64_t h;             /* the seed before the repeat is mixed in */
    unsigned reps;
    size_t first, count; /* index of its first case, its cases */
};
struct probe_vary_cells;
struct probe_cases {
    struct probe_cell *cell; /* owned */
    size_t n_cells;
    const struct probe_vary_cells *vary; /* borrowed; NULL: none */
    size_t m;                            /* vary cells, at least 1 */
    size_t n;                            /* cases */
};
/* As probe_grid_build, each case once per cell of vc (NULL or empty:
 * once). */
int probe_cases_build(const struct probe_grid_opts *o,
                      const struct probe_vary_cells *vc, struct probe_cases *c,
                      struct diag *d);
/* Case i (i < c->n) in *out, as probe_grid_build and probe_vary_expand
 * would list it (its vary borrowed from c->vary). Returns its report cell:
 * the grid cell's index x c->m + its vary cell. */
size_t probe_cases_at(const struct probe_cases *c, size_t i,
                      struct probe_spec *out);
void probe_cases_release(struct probe_cases *c);

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

struct probe_shape;

/* ---- endpoint.c ---- */

struct probe_endpoint {
    char *url;                  /* base URL without a trailing "/" or "/v1" */
    char *model;                /* NULL until known */
    const char *const *headers; /* borrowed; may hold secrets: never
                                   stored, printed or put in a diag */
    json_t *extra_body;         /* borrowed; merged into every request */
    struct probe_tok_cache *tok_cache; /* /tokenize answers of the run by
                                          content hash (endpoint.c) */
    long timeout_ms;
    unsigned retries;       /* after the first attempt */
    unsigned backoff_ms;    /* first retry delay; doubles each time */
    unsigned max_model_len; /* 0: unknown */
    json_t *info;           /* owned: what each fingerprint URL said */
    char fp[17];            /* hash of url, model, info and the canary */
    char info_fp[17];       /* the same without the canary */
    /* The canary (canary.c): a fixed long request at temperature 0. */
    bool canary_done;
    bool canary_deterministic; /* the same answer twice */
    unsigned canary_length;    /* its target tokens */
    long canary_prompt_tokens; /* usage.prompt_tokens; -1: none */
    long canary_status;        /* HTTP status of its answer */
    char canary_answer[161];   /* the start of its answer */
    bool has_tokenize;
    bool calibrated;     /* sized from usage.prompt_tokens */
    double cal_a, cal_b; /* tokens ~= cal_a + cal_b * units */
    double cal_err;      /* tokens: the line's worst miss on its samples */
    unsigned cal_clip;   /* bytes of a sample kept when a longer sample came
                            back short (a path that clips long messages,
                            or a server that keeps no more); 0: none did */
    unsigned cal_clip_tokens; /* that sample's usage.prompt_tokens */
    double tok_per_unit;      /* of filler, by /tokenize; 0: unknown */
    /* probe's own accounting (own.c): what a request costs by evidence
     * the path cannot rewrite, measured on short requests. */
    bool own_ready;
    double own_base;    /* tokens of a request around its messages */
    double own_role[4]; /* per message: system, user, assistant, tool */
    double own_call;    /* per tool call beside its name and arguments */
    double own_esc;     /* per quote or backslash of tool call arguments */
    double own_reason;  /* per reasoning block beside its text; < 0: the
                           template does not render reasoning */
    double own_tools;   /* the tools list of a request */
    double own_sep;     /* tokens the separator between pieces adds */
    double own_k;       /* tokens per unit of short texts */
    double own_kerr;    /* relative spread of own_k across the samples */
    double own_err;     /* tokens: the model's miss on a held-out request */
    double own_msg_err; /* tokens: its miss per message on requests of
                           filler counted as cases are (0: exact) */
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

/* The request body probe_chat sends (new reference). */
json_t *probe_chat_body(const struct probe_endpoint *e,
                        const struct probe_case *pc, unsigned max_tokens);

/* ---- canary.c ---- */

/* Sends the canary to e: a fixed needle case of about `target` tokens
 * (the run's longest), max_tokens 32, temperature 0, twice. Its prompt
 * token count and answer (the answer only when both attempts agree) go
 * into e->fp, so stored results are reused only for a server that answers
 * it the same. A failed canary is fingerprinted by its status. 0, or an
 * error when the case cannot be sized. */
int probe_canary_run(struct probe_endpoint *e, struct http_client *c,
                     unsigned target, struct diag *d);

/* ---- size.c ---- */

/* Fits cal_a/cal_b from at most three chat requests (max_tokens 1) when
 * the endpoint has no /tokenize; when the longer samples come back short
 * (their counts grow by under half the tokens per unit of the one before),
 * the line is fitted to the samples before them (two smaller samples are
 * sent when only one stands there) and cal_clip says how many bytes of the
 * first short one were kept. At most five requests. */
int probe_calibrate(struct probe_endpoint *e, struct http_client *c,
                    struct diag *d);
/* Measures the endpoint's tokens per unit of filler with two /tokenize
 * calls, so that sizing's first guess usually lands (no-op without
 * /tokenize). */
int probe_size_prepare(struct probe_endpoint *e, struct http_client *c,
                       struct diag *d);
/* Builds c for spec sized so that its token count (probe's own count,
 * else the whole request by /tokenize, else the calibration) is within
 * [0.98 * target, target]; *tokens gets the count and *shape (may be
 * NULL; zeroed when probe's own count is not used) the case's shape.
 * Uses at most 6 /tokenize calls. */
int probe_size_case(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_spec *spec, struct probe_case *pc,
                    unsigned *tokens, struct probe_shape *shape,
                    struct diag *d);
/* Token estimate without any request (dry runs): 3.5 bytes a token. */
size_t probe_filler_for(const struct probe_spec *spec);

/* ---- own.c ---- */

#define PROBE_MAX_MSGS 96

/* What probe sent, by its own count: each message's tokens (its text
 * pieces tokenized on their own plus the calibrated framing), its bytes
 * and its turn (0: before the first user message; a turn is a user
 * message and what follows it up to the next one). */
struct probe_shape {
    unsigned total; /* probe's own count of the request */
    unsigned n;     /* messages (at most PROBE_MAX_MSGS are described) */
    unsigned tok[PROBE_MAX_MSGS];
    unsigned reason[PROBE_MAX_MSGS]; /* of tok: the reasoning field's */
    unsigned bytes[PROBE_MAX_MSGS];
    unsigned char turn[PROBE_MAX_MSGS];
    unsigned turns;
    unsigned frame;     /* tokens outside the messages' texts */
    double err;         /* tokens the count may miss by */
    double msg_err;     /* of err: per message (the rest is the request's) */
    bool pieces_short;  /* /tokenize counted the pieces well under what
                           their bytes hold (the path clips them): the
                           count comes from the bytes */
    bool estimated;     /* by the calibrated line, without /tokenize: too
                           coarse to tell a window from a summary */
    unsigned clip_seen; /* estimated: the calibration's cal_clip */
};

/* Measures the template's framing and the tokens per unit of text with
 * about a dozen short /tokenize requests (none holds more than one user
 * turn or a long text, so history windows, compaction and clipping leave
 * them alone). -ENOTSUP when /tokenize cannot count a text alone (then
 * own_ready stays false and the whole-request count is used). */
int probe_own_calibrate(struct probe_endpoint *e, struct http_client *c,
                        struct diag *d);
/* ---- results ---- */

struct probe_result {
    unsigned weight; /* the cases this result stands for: a run keeps one
                        result for the cases of a cell that passed (or did
                        not run) alike; 0 means 1 */
    bool done;
    bool cached; /* read back from the store, not sent */
    enum probe_outcome outcome;
    bool no_context;
    unsigned expected; /* tokens by the sizing */
    long prompt_tokens;
    long completion_tokens; /* -1 or 0: not known (not stored) */
    long status;
    unsigned attempts;
    double latency;
    char finish[16];
    char key[17];
    char reply[241]; /* start of the reply (content) */
    char error[160];
    /* probe's own accounting (own.c, lost.c) */
    unsigned path_tokens; /* the request as the path's /tokenize counts it;
                             0: not counted */
    bool lost;            /* reached the model under 90% of `expected` */
    int drop;             /* enum probe_drop when outcome is DROPPED */
    unsigned drop_turns;  /* window, summary: turns whose user message
                             was lost */
    unsigned drop_msgs;   /* window, summary: messages lost */
    int drop_at;          /* enum probe_drop_at of a window or summary */
    double drop_ratio;    /* prompt_tokens / expected */
    bool have_shape;
    struct probe_shape shape;
};

/* The cases a result stands for. */
static inline unsigned probe_weight(const struct probe_result *r)
{
    return r->weight ? r->weight : 1;
}

/* ---- lost.c ---- */

enum probe_drop {
    PROBE_DROP_NONE = 0,
    PROBE_DROP_WINDOW,    /* whole turns gone from the front */
    PROBE_DROP_SUMMARY,   /* the front replaced by something short */
    PROBE_DROP_CLIP,      /* every long message shortened */
    PROBE_DROP_REASONING, /* the reasoning fields of earlier replies */
    PROBE_DROP_UNKNOWN,   /* lost, but no kind explains the count */
    PROBE_DROP_COUNT
};
/* Where the messages a window or summary took were. */
enum probe_drop_at {
    PROBE_AT_NONE = 0,
    PROBE_AT_OLDEST, /* from the first message after the system prompt */
    PROBE_AT_MIDDLE,
    PROBE_AT_NEWEST, /* up to the message before the question */
};
const char *probe_drop_at_name(int at);
/* After a run: the failed cases whose prompt reached the model short of
 * probe's own count (by any amount beyond the count's error) are
 * truncated-by-server only when the reached counts sit at one cap across
 * the cases (or at the context length model_len) and the path's count
 * says the request reached the server whole; dropped-before-the-model
 * otherwise, with the kind of drop named from what was lost (unknown when
 * nothing explains the count). */
void probe_lost_classify(const struct probe_spec *specs,
                         struct probe_result *res, size_t n,
                         unsigned model_len);

/* ---- pstore.c ---- */

/* Creates the probe_* tables when missing. */
int probe_store_init(struct db *db, struct diag *d);
int probe_store_endpoint(struct db *db, const struct probe_endpoint *e,
                         struct diag *d);
int probe_store_put(struct db *db, const char *endpoint_fp,
                    const struct probe_spec *s, const struct probe_result *r,
                    struct diag *d);
/* Records e's canary (fingerprint, prompt tokens, answer). */
int probe_store_canary(struct db *db, const struct probe_endpoint *e,
                       struct diag *d);
/* The canary length first used for this info fingerprint (0: none), so
 * that later runs send a canary that can be compared; < 0 on error. */
long probe_store_canary_length(struct db *db, const char *info_fp,
                               struct diag *d);
/* The number of stored results of fingerprint fp (< 0 on error). */
long probe_store_results(struct db *db, const char *fp, struct diag *d);
/* What the store holds for e's URL, model and info under another canary:
 * 1 with *other filled (its canary fields and fp) and *results the number
 * of its stored results, 0 when none, < 0 on error. */
int probe_store_other_canary(struct db *db, const struct probe_endpoint *e,
                             struct probe_endpoint *other, long *results,
                             struct diag *d);
/* Records a finished run and its JSON summary; *id gets its row id. */
int probe_store_run(struct db *db, const char *endpoint_fp,
                    const char *baseline_fp, json_t *summary, long long *id,
                    struct diag *d);
struct store_run;
/* The stored run id (0: the latest) from probe_run, as store_run_get
 * (store/runs.h) reads it: -ENOENT when there is none. */
int probe_store_run_get(struct db *db, int64_t id, struct store_run *out,
                        struct diag *d);

/* ---- run.c ---- */

/* What a run keeps of its results, in case order: every case that did
 * not pass, lost context or was counted by the path in full (weight 1),
 * and for the other cases of a report cell (passed or not run on each side
 * alike) one result with their number as its weight, the first such
 * case's. So the kept results grow with the failures, not with the
 * cases. */
struct probe_kept {
    size_t n, alloc;
    size_t *idx; /* case index (of the first case a result stands for) */
    struct probe_spec *specs;
    struct probe_result *res, *bres; /* bres: NULL without a baseline */
    /* the sizing's range over every case, per side: expected / target */
    double size_lo[2], size_hi[2];
};
void probe_kept_release(struct probe_kept *k);
/* Case i's result on side 0 (endpoint) or 1 (baseline) from a run's spill
 * file, as it was when the case finished (without its shape: the lost
 * context's class comes from kept, which holds the classified result of
 * every case that lost context); zeroed (not run) when it did not run.
 * 0 or -errno. */
int probe_spill_read(int fd, size_t i, int side, struct probe_result *r);

struct probe_run {
    struct probe_endpoint *ep;   /* required */
    struct probe_endpoint *base; /* NULL: no baseline */
    const struct probe_cases *cases;
    /* >= 0: a file (empty, seekable) that gets every case's result, for
     * probe_spill_read; -1: none */
    int spill_fd;
    unsigned jobs;
    unsigned max_tokens;
    const char *extra_key; /* canonical extra body for keys */
    bool fresh;
    double tol;    /* truncation tolerance (share) */
    struct db *db; /* NULL: nothing stored */
    volatile sig_atomic_t *stop;
    /* Called after each finished case, from a worker, serialised. */
    void (*progress)(void *ud, size_t done, size_t passed, size_t total);
    void *ud;
    /* Out. */
    struct probe_kept kept; /* released by the caller */
    size_t sent;            /* chat requests made (both endpoints) */
    size_t cached;
    bool interrupted;
    int store_err; /* first store error, 0 if none */
    struct diag store_diag;
};

/* Runs every case with r->jobs threads, each with its own http_client,
 * storing each result as it comes and keeping what r->kept says, sorted
 * by case. Returns 0 (also when interrupted: r->interrupted says so,
 * unfinished results have done == false). */
int probe_run(struct probe_run *r);

/* ---- report.c ---- */

struct probe_report_in {
    const struct probe_endpoint *ep;
    const struct probe_endpoint *base;
    const struct probe_spec *specs;
    const struct probe_result *res;
    const struct probe_result *bres;
    size_t n;
    json_t *config; /* borrowed; copied into the JSON */
    bool interrupted;
    double
        fail_under; /* --fail-under, for the JSON's "verdict_line" (0: none) */
    /* > 0: case_results holds only the first max_cases cases per side that
     * did not pass and ran (what the store keeps of a run, and the HTML
     * report shows), built one at a time, so the document does not grow
     * with the cases; 0: every case */
    size_t max_cases;
    size_t cases; /* the cases the results stand for (0: n) */
    /* Every case one by one, for the JSON's case_results (streamed by
     * probe_report_json_write) and the JUnit file, when the results above
     * stand for many: case i's spec, and its result on side 0 or 1. NULL:
     * the results above are every case. */
    void (*spec_at)(void *ud, size_t i, struct probe_spec *s);
    int (*result_at)(void *ud, size_t i, int side, struct probe_result *r);
    void *ud;
    /* the sizing's range per side (probe_kept); 0: from the results */
    double size_lo[2], size_hi[2];
};

/* The machine-readable report (schema in docs/PROBE.md). */
json_t *probe_report_json(const struct probe_report_in *in);
/* Writes doc (probe_report_json of in, with max_cases set) to f as
 * cli_json_write formats it (indent 2, sorted keys), its case_results
 * every case from in->spec_at and in->result_at, each made, written and
 * dropped in turn: the document's memory does not grow with the cases.
 * 0 or -EIO. */
int probe_report_json_write(const struct probe_report_in *in, json_t *doc,
                            FILE *f);
/* The summary table, per-kind effective lengths, the heatmaps, the
 * failure explanation and the baseline comparison, as text. */
void probe_report_text(const struct probe_report_in *in, FILE *out);
int probe_report_junit(const struct probe_report_in *in, const char *path,
                       struct diag *d);

/* The decision of a run: exit 1 when the endpoint is significantly worse
 * than the baseline (McNemar over all paired cases, p < 0.05, more pairs
 * passing only on the baseline) or its pass rate is below fail_under
 * (percent; 0 disables), or when a case's sizing achieved under 50% of
 * its target (an error-level finding). line says which rule decided. */
struct probe_verdict {
    bool worse, below;
    size_t sizing; /* cases sized under 50% of their target: an error */
    double pass_rate, p_value;
    unsigned paired, endpoint_only, baseline_only;
    char line[512];
};
void probe_verdict(const struct probe_report_in *in, double fail_under,
                   struct probe_verdict *v);

/* Overall pass rate of finished cases (0 when none). */
double probe_pass_rate(const struct probe_result *res, size_t n);

#endif
