/*
 * drift dialects: how each server family is asked for log-probabilities of
 * given token ids, and how its answer is read. Request builders return
 * fresh JSON; parsers read a parsed JSON answer into a struct drift_lp. No
 * I/O here (transport.c sends), so every parser is unit-tested and fuzzed.
 *
 * Field names are those of the servers' public APIs:
 *   vLLM    POST /v1/completions, `prompt_logprobs` (choices[0].
 *           prompt_logprobs: null, then {"ID": {"logprob", "rank",
 *           "decoded_token"}} per position; vLLM docs, "Sampling Params")
 *   echo    POST /v1/completions, `echo` + `logprobs` (OpenAI legacy
 *           completions: logprobs.tokens, token_logprobs, top_logprobs)
 *   sglang  POST /generate, `input_ids`, `return_logprob`,
 *           `logprob_start_len`, `top_logprobs_num`, `token_ids_logprob`
 *           (meta_info.input_token_logprobs [[lp, id, text]], ...; sglang
 *           docs, "Sampling Parameters" / native API)
 *   tgi     POST /generate, `inputs` + parameters.decoder_input_details,
 *           details, top_n_tokens (details.prefill [{id, text, logprob}];
 *           TGI OpenAPI). TGI gives no top-k for prompt positions.
 */
#ifndef DRIFT_DIALECT_H
#define DRIFT_DIALECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "drift/lp.h"
#include "drift/metrics.h"

enum drift_dialect {
    DRIFT_DIALECT_AUTO,
    DRIFT_DIALECT_VLLM,
    DRIFT_DIALECT_ECHO,
    DRIFT_DIALECT_SGLANG,
    DRIFT_DIALECT_TGI,
    DRIFT_DIALECT_NONE, /* no prompt logprobs (llama.cpp server, Ollama) */
    DRIFT_DIALECTS
};

const char *drift_dialect_name(enum drift_dialect d);
/* Parses "auto", "vllm", "echo", "sglang", "tgi"; -EINVAL otherwise. */
int drift_dialect_parse(const char *s, enum drift_dialect *out);

/*
 * Rewrites the non-JSON number spellings Python servers emit outside
 * strings (NaN, Infinity, -Infinity) in place, so jansson can read the
 * answer: NaN becomes 1e9 and Infinity 1e300 (logprobs above 0, so the
 * entry is counted invalid), -Infinity -1e300 (a probability of 0). Spaces
 * pad the difference in length. Returns the number of rewrites.
 */
size_t drift_json_sanitize(char *s, size_t len);

/* Parameters of one request. */
struct drift_req {
    const char *model;   /* may be NULL */
    const uint32_t *ids; /* the prompt */
    size_t n;
    const char *text;     /* TGI: the prompt as text (from /detokenize) */
    unsigned top_k;       /* top logprobs per position, 1..DRIFT_TOPK_MAX */
    unsigned max_new;     /* tokens to generate; 1 for pure scoring */
    bool prompt_logprobs; /* false: decode-only request */
    const uint32_t *extra_ids; /* sglang token_ids_logprob, may be NULL */
    size_t n_extra;
    const json_t *extra_body; /* merged into the request (may be NULL) */
};

/* The path (e.g. "/v1/completions") and body of a request. */
const char *drift_dialect_path(enum drift_dialect d);
json_t *drift_request_build(enum drift_dialect d, const struct drift_req *r);

/*
 * Reads the prompt log-probabilities of an answer into lp (sized to r->n).
 * Returns 0 (entries that are bad are marked invalid and counted), or
 * -EBADMSG when the answer does not have the dialect's shape at all, with d
 * naming the missing field.
 */
int drift_parse_prompt(enum drift_dialect d, const json_t *resp,
                       const struct drift_req *r, struct drift_lp *lp,
                       struct diag *dg);
/*
 * The same from the answer's text as received (len bytes, NUL-terminated):
 * the allocation-free reader for vllm and sglang when the text is
 * ordinary, else the text goes through drift_json_sanitize (in place) and
 * then the reader or jansson. A text the reader accepts is valid JSON, so
 * it has no bare NaN or Infinity and sanitizing it would change nothing:
 * the results are those of sanitizing first, either way (the fuzz harness
 * checks). -EBADMSG also when it is not JSON.
 */
int drift_parse_prompt_text(enum drift_dialect d, char *text, size_t len,
                            const struct drift_req *r, struct drift_lp *lp,
                            struct diag *dg);
/* The same for a text the caller keeps (text[len] is NUL): read where it
 * is, copied only when the reader does not take it as it is. */
int drift_parse_prompt_lent(enum drift_dialect d, const char *text, size_t len,
                            const struct drift_req *r, struct drift_lp *lp,
                            struct diag *dg);

/*
 * Reads the generated tokens of an answer: their ids into lp->ids and their
 * decode-time distributions into lp->pos. lp->n becomes the number of
 * generated tokens. -EBADMSG as above; -ENOKEY when the answer does not
 * say which token ids were generated (OpenAI completions without vLLM's
 * return_tokens_as_token_ids or token_ids).
 */
int drift_parse_decode(enum drift_dialect d, const json_t *resp,
                       struct drift_lp *lp, struct diag *dg);

#endif
