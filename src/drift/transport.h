/*
 * drift transport: one side (golden or candidate) of a comparison: its
 * connection options, the dialect it speaks, and the requests drift makes
 * of it (detect, score a prompt, generate, tokenize, detokenize,
 * fingerprint). Built on http/client.h; never prints. Errors: -ECONNREFUSED
 * or -ETIMEDOUT when the server cannot be reached (exit 3 in cmd_drift),
 * -EPROTO when it answers with an HTTP error, -EBADMSG when the answer has
 * the wrong shape; d names the side, the URL and the reason.
 */
#ifndef DRIFT_TRANSPORT_H
#define DRIFT_TRANSPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/diag.h"
#include "drift/dialect.h"

#define DRIFT_HEADERS_MAX 16

struct http_client;

struct drift_side {
    const char *label; /* "golden", "candidate" */
    char *url;         /* base URL without a trailing slash */
    char *model;       /* may be NULL */
    char *api_key;     /* may be NULL; sent as a Bearer token, never kept */
    char *headers[DRIFT_HEADERS_MAX + 2]; /* "Name: value"; NULL-terminated */
    size_t n_headers;
    json_t *extra_body; /* merged into every request; may be NULL */
    enum drift_dialect dialect;
    enum drift_dialect gen_dialect; /* generation, when it differs; AUTO 0 */
    unsigned top_k;
    long timeout_ms;
    struct http_client *http;
    json_t *fingerprint; /* what the server says about itself */
    /* sglang token_ids_logprob for the next scoring requests (borrowed;
     * set by run.c to the golden's top tokens, NULL otherwise) */
    const uint32_t *extra_ids;
    size_t n_extra_ids;
    uint64_t requests;
    /* a saved golden (tape.h, borrowed): recording, every exchange is
     * kept in it; replaying, answers come from it and nothing is sent */
    struct drift_tape *tape;
};

void drift_side_init(struct drift_side *s, const char *label);
void drift_side_release(struct drift_side *s);
/* Sets the URL (http:// or https://; trailing slashes dropped). */
int drift_side_set_url(struct drift_side *s, const char *url, struct diag *d);
/* Adds a "Name: value" header; -E2BIG past DRIFT_HEADERS_MAX, -EINVAL when
 * it has no colon. */
int drift_side_add_header(struct drift_side *s, const char *h, struct diag *d);
/* A fresh connection for another thread, with the same options. */
void drift_side_clone(struct drift_side *dst, const struct drift_side *src);

/* Whether a and b name the same server (scheme, host and port alike):
 * drift then sends them one request at a time, never both at once. */
bool drift_sides_share_server(const struct drift_side *a,
                              const struct drift_side *b);

/* POSTs body (GET when NULL) to path; *out is the parsed JSON answer of a
 * 2xx status. A non-2xx status gives -EPROTO with the server's message. */
int drift_side_call(struct drift_side *s, const char *path, json_t *body,
                    json_t **out, long *status, struct diag *d);

/* Reads /v1/models, /version and /get_server_info into s->fingerprint
 * (missing endpoints are skipped). -ECONNREFUSED when nothing answers. */
int drift_side_fingerprint(struct drift_side *s, struct diag *d);

/* The context length the server reports in its fingerprint
 * (`max_model_len` of /v1/models, else `context_length` or `n_ctx` there
 * or in /get_server_info), 0 when none; *field (may be NULL) gets the
 * field's name. */
long drift_side_context_len(const struct drift_side *s, const char **field);

/*
 * When s->dialect is AUTO, tries vllm, sglang, echo and tgi in that order
 * with a short probe prompt and keeps the first that returns prompt
 * logprobs; DRIFT_DIALECT_NONE when none does (d then says what each
 * answered). A forced dialect is checked the same way and kept.
 */
int drift_side_detect(struct drift_side *s, const uint32_t *probe, size_t n,
                      struct diag *d);

/* Sends an empty request (method "GET" or "POST") to path with the side's
 * headers and key, no JSON expected: *status and the body as they came (a
 * non-2xx status is not an error here). For endpoints outside the model
 * API, such as the cache arm's flush. */
int drift_side_send_plain(struct drift_side *s, const char *method,
                          const char *path, long *status, struct buf *body,
                          struct diag *d);

/* Prompt log-probabilities of ids[0..n) into lp: fetch, then parse. */
int drift_side_score(struct drift_side *s, const uint32_t *ids, size_t n,
                     struct drift_lp *lp, struct diag *d);
/* The request half: the answer's text as received, NUL-terminated, in
 * *text (fresh; NULL on error) and *len. */
int drift_side_fetch_prompt(struct drift_side *s, const uint32_t *ids, size_t n,
                            char **text, size_t *len, struct diag *d);
/* The parse half (no I/O, safe from any thread): text, as fetched, into lp
 * (drift_parse_prompt_text: sanitized in place when the reader does not
 * take it as it is; with lent, the text is not written: a copy is); on
 * error d is prefixed with the side's label and dialect. */
int drift_side_parse_prompt(const struct drift_side *s, const uint32_t *ids,
                            size_t n, char *text, size_t len, bool lent,
                            struct drift_lp *lp, struct diag *d);
/* Greedy generation of up to max_new tokens after ids; lp gets the
 * generated ids and their decode-time distributions. When the side's
 * dialect names generated tokens only by text (-ENOKEY), sglang and TGI
 * generation are tried and the first that works is kept in gen_dialect. */
int drift_side_generate(struct drift_side *s, const uint32_t *ids, size_t n,
                        unsigned max_new, struct drift_lp *lp, struct diag *d);
/* The same, also giving what the answer says of the server's prefix
 * cache (*cached: cached prompt tokens, -1 when the answer has no figure)
 * and adding the generation requests sent, fallback dialects included, to
 * *sent; either may be NULL. */
int drift_side_generate_seen(struct drift_side *s, const uint32_t *ids,
                             size_t n, unsigned max_new, struct drift_lp *lp,
                             long *cached, unsigned *sent, struct diag *d);
/* Sends r (model, top_k and extra body from s) in s's dialect and returns
 * the parsed answer in *out (for the determinism check, which parses
 * prompt and decode parts of one answer). */
int drift_side_request(struct drift_side *s, struct drift_req *r, json_t **out,
                       struct diag *d);

/* POST /tokenize with `messages` (chat template applied by the server) or
 * `prompt`; *ids is fresh. */
int drift_side_tokenize(struct drift_side *s, const json_t *messages,
                        const char *prompt, uint32_t **ids, size_t *n,
                        struct diag *d);
/* POST /detokenize; *text is fresh. */
int drift_side_detokenize(struct drift_side *s, const uint32_t *ids, size_t n,
                          char **text, struct diag *d);

#endif
