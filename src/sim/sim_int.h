/*
 * sim_int: what the simulator's own files share (handle.c, chat.c, lm.c):
 * OpenAI-style error bodies, typed field access with 400s that name the
 * field, UTF-8-safe JSON strings, and the noise of a request.
 */
#ifndef SIM_SIM_INT_H
#define SIM_SIM_INT_H

#include <jansson.h>

#include "core/buf.h"
#include "sim/model.h"
#include "sim/sim.h"
#include "sim/tok.h"

/* Sets an OpenAI-style error: {"error": {"message", "type", "param",
 * "code"}}. param may be NULL. */
void sim_error(struct sim_resp *r, int status, const char *param,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Appends j's compact text to b, byte for byte what json_dumps(j,
 * JSON_COMPACT) writes (wire/jdump.c, several times faster). */
void sim_dump(struct buf *b, const json_t *j);
/* Appends the JSON string sim_jstr(p, n) would make, as sim_dump writes
 * it, without making it. */
void sim_dump_text(struct buf *b, const char *p, size_t n);
/* Serialises j (stolen) as the 200 body. */
void sim_json(struct sim_resp *r, json_t *j);
/* Parses the body as a JSON object, or sets a 400 and returns NULL. */
json_t *sim_body(const struct sim_req *rq, struct sim_resp *r);

/* Typed optional fields: absent or null gives def. A wrong type or range
 * sets a 400 naming the field and returns -1. */
int sim_get_bool(json_t *o, const char *k, bool def, bool *out,
                 struct sim_resp *r);
int sim_get_long(json_t *o, const char *k, long min, long max, long def,
                 long *out, struct sim_resp *r);
int sim_get_num(json_t *o, const char *k, double min, double max, double def,
                double *out, struct sim_resp *r);

/* A JSON string from bytes, invalid UTF-8 replaced by U+FFFD. */
json_t *sim_jstr(const char *p, size_t n);
/* Length of the longest prefix of p[0..n) that does not end inside a UTF-8
 * sequence (so streamed pieces never split a character). */
size_t sim_utf8_whole(const char *p, size_t n);
/* The text of one token as a JSON string. */
json_t *sim_tok_json(int32_t id);
/* Token ids from a JSON array, or a 400 naming field. */
int sim_get_ids(json_t *arr, const char *field, struct tok_vec *out,
                struct sim_resp *r);

/* Noise for the prefill (decode == false) or decode path of a request. */
struct model_noise sim_noise(const struct sim *s, const struct sim_req *rq,
                             bool decode);
/* Checks toks against the context limit: truncates as configured and
 * returns 0, or sets vLLM's 400 and returns -1. */
int sim_fit_context(struct sim *s, struct tok_vec *toks, long max_new,
                    struct sim_resp *r);
/* "prefix-<16 hex>" from the request counter. */
void sim_id(const struct sim *s, const char *prefix, char out[48]);

/* The prefix cache around one model request (cache.c): looks prompt up
 * (at most limit tokens; 0 skips the cache, as vLLM and sglang do for a
 * request that asks for prompt logprobs) into s->use; then inserts the
 * prompt, and the generated tokens all[prompt_n..n) unless the
 * no-cache-output fault is on. */
void sim_cache_begin(struct sim *s, const int32_t *prompt, size_t n,
                     size_t limit);
void sim_cache_end(struct sim *s, const int32_t *all, size_t prompt_n,
                   size_t n);
/* Adds "prompt_tokens_details": {"cached_tokens": N} to usage, unless the
 * sim reports no cache figures. */
void sim_cache_usage(const struct sim *s, json_t *usage);

void sim_chat(struct sim *s, const struct sim_req *rq, struct sim_resp *r);
void sim_completions(struct sim *s, const struct sim_req *rq,
                     struct sim_resp *r);
void sim_generate(struct sim *s, const struct sim_req *rq, struct sim_resp *r);
void sim_tokenize(struct sim *s, const struct sim_req *rq, struct sim_resp *r);
void sim_detokenize(struct sim *s, const struct sim_req *rq,
                    struct sim_resp *r);

#endif
