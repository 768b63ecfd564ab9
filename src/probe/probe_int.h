/*
 * probe_int: what the files of src/probe/ share and nobody else uses: the
 * filler generator, the chat request with retries and its reply, probe's
 * own token count, scoring, the lost-context names, the store lookup of
 * one result, the JSON helpers and the statistics the renderings share.
 * probe.h is the contract with cmd/ (and live.h, vary.h for --live and
 * --vary); the unit tests of these pieces include this header too.
 */
#ifndef PROBE_PROBE_INT_H
#define PROBE_PROBE_INT_H

#include "core/buf.h"
#include "probe/probe.h"

/* ---- kinds and outcomes ---- */

/* True when the kind's cases are placed along the depth axis. */
bool probe_kind_has_depth(enum probe_kind k);
const char *probe_outcome_name(enum probe_outcome o);
int probe_outcome_parse(const char *s);

/* ---- grid.c ---- */

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

/* Frees the filler kept for rebuilds; the messages stay. */
void probe_case_drop_cache(struct probe_case *c);
/* Number of user turns before the question for a target size. */
unsigned probe_turns_for(unsigned target);

/* ---- endpoint.c ---- */

/* Counts the tokens of a text alone: POST /tokenize {"prompt": text,
 * "add_special_tokens": false}. Errors as probe_tokenize. */
int probe_tokenize_text(struct probe_endpoint *e, struct http_client *c,
                        const char *text, size_t len, unsigned *count,
                        struct diag *d);
/* The token count from a /tokenize answer s (len bytes, NUL-terminated):
 * the number after "count" (vLLM, sim), else the number of elements of
 * "tokens" (llama.cpp). 0, or -ENOTSUP when there is neither. */
int probe_scan_count(const char *s, size_t len, unsigned *count);

struct probe_reply {
    long status; /* last HTTP status; 0: no response */
    int err;     /* 0 or the last -errno */
    unsigned attempts;
    long prompt_tokens;     /* -1: not reported */
    long completion_tokens; /* -1: not reported */
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

/* ---- body.c ---- */

/* Compact JSON of j, as json_dumps(j, JSON_COMPACT) means it, written with
 * memcpy for runs that need no escape; hint is the expected size (0 if
 * unknown). The caller frees it. */
char *probe_json_dump(const json_t *j, size_t hint, size_t *len);
/* Appends n bytes of s to b as a quoted JSON string (escapes as
 * probe_json_dump writes them). */
void probe_json_put_string(struct buf *b, const char *s, size_t n);

/* ---- size.c ---- */

/* The expected count of an already built case on another endpoint. */
int probe_count_case(struct probe_endpoint *e, struct http_client *c,
                     const struct probe_case *pc, unsigned *tokens,
                     struct probe_shape *shape, struct diag *d);
/* Units of a text (size.c): word pieces of at most 4 letters or digits
 * (taking a space before them along), punctuation and other bytes. */
double probe_text_units(const char *s);

/* ---- own.c ---- */

/* probe's own count of a built case: one /tokenize of its text pieces
 * joined by newlines, cross-checked against the units of the bytes. */
int probe_own_count(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_case *pc, struct probe_shape *sh,
                    struct diag *d);
/* Without /tokenize: the shape of a case by the calibrated line (no
 * request), its total the calibrated count. */
void probe_own_estimate(const struct probe_endpoint *e,
                        const struct probe_case *pc, struct probe_shape *sh);
/* Refines the tokens of each message of sh (counted by probe_own_count)
 * turn by turn: one /tokenize of each turn's pieces (used for the cases
 * that lost context, whose shape is then compared with windows). */
int probe_own_turns(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_case *pc, struct probe_shape *sh,
                    struct diag *d);

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

/* ---- lost.c ---- */

/* "window", "summary", "clipping", or "" */
const char *probe_drop_name(int drop);
/* True when a reached count is lost context: under 90% of probe's own
 * count, beyond the count's error. */
bool probe_is_lost(long reached, const struct probe_shape *sh);
/* True when a case needs the path check (its turns counted one by one,
 * the path's count of the request): it lost context, or it failed and
 * reached the model short by more than the count's error per message. */
bool probe_path_check_due(long reached, const struct probe_shape *sh,
                          bool failed);
/* True when a missed case cannot rule out a loss before the model: its
 * count is the calibrated line's, or it reached the model short of
 * probe's exact count beyond its error and nothing explained the loss. */
bool probe_loss_not_ruled_out(const struct probe_result *r);

/* ---- pstore.c ---- */

/* 1 and *r filled when key has a finished result, 0 when not, <0 error. */
int probe_store_get(struct db *db, const char *key, struct probe_result *r,
                    struct diag *d);
/* The endpoint as the JSON documents give it (report.c): url, model,
 * fingerprint, max_model_len, tokenizer, calibration, server_info; null
 * for NULL. New reference. */
json_t *probe_endpoint_json(const struct probe_endpoint *e);

/* ---- render.c ---- */

#define PROBE_RULER_THRESHOLD 0.856
#define PROBE_NOLIMA_SHARE 0.85
/* NoLiMa's rule needs a base score: under this mean pass rate at the
 * three shortest lengths the kind has effective length 0. */
#define PROBE_NOLIMA_MIN_BASE 0.5

/* Effective length by RULER's rule (the longest length before the first
 * one whose pass rate falls below threshold) and NoLiMa's (the same with
 * the threshold 0.85 x the mean rate of the three shortest lengths).
 * lengths ascending; 0 when even the shortest fails (NoLiMa: also when
 * the base is under PROBE_NOLIMA_MIN_BASE: a kind whose pass rate never
 * reaches a rule's threshold has effective length 0 by both rules). */
unsigned probe_effective_ruler(const unsigned *lengths, const double *rate,
                               size_t n, double threshold);
unsigned probe_effective_nolima(const unsigned *lengths, const double *rate,
                                size_t n, double *base);
/* The reasoning grid's conclusion in words: for the reasoning_content
 * field and for <think> inside content, with and without tools, whether
 * prior reasoning reached the model, and which field the path or template
 * drops. false when the run has no reasoning case. */
bool probe_reasoning_words(const struct probe_report_in *in,
                           const struct probe_result *res, char *out,
                           size_t size);

/* Holm's step-down adjustment of n p-values (Holm 1979): adj[i] for
 * p[i], monotone in the order of the p-values, at most 1. */
void probe_holm(const double *p, size_t n, double *adj);
/* Cases whose sizing achieved under 50% of their target (an error-level
 * finding: the lengths tested are not the ones asked for). */
size_t probe_sizing_under(const struct probe_report_in *in,
                          const struct probe_result *res);

#endif
