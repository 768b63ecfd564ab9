/*
 * simtest: what the end-to-end tests of `fidelity sim` share. A cmocka
 * fixture that owns every sim process a test starts (and stops them in
 * teardown, also when an assertion failed), JSON and raw HTTP helpers
 * bound to one sim, request builders, and a reference tokenizer and chat
 * renderer written from docs/SIM.md alone, so the tests check the sim
 * against its contract rather than against its own code.
 *
 * Every helper asserts (cmocka) on transport failure, so a test reads as a
 * list of requests and expectations.
 */
#ifndef TESTS_UTIL_SIMTEST_H
#define TESTS_UTIL_SIMTEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/client.h"
#include "util/proc.h"

#define SIMT_MAX_PROCS 4

/* The reply the contract gives when a fact or an earlier message is not
 * visible (docs/SIM.md, "Not visible"). */
#define SIM_DONT_SEE                                                           \
    "I don't see any earlier message about that; this looks like the start "   \
    "of our conversation."

struct simt {
    struct proc procs[SIMT_MAX_PROCS];
    int nprocs;
    struct http_client *http;
};

/* cmocka setup / teardown: *state becomes a struct simt. Teardown stops
 * every sim the test started. */
int simt_setup(void **state);
int simt_teardown(void **state);

/*
 * Starts `fidelity sim --listen 127.0.0.1:0 ARGS...` (NULL-terminated
 * list of const char *) and returns its handle, owned by t. When the binary
 * still has the placeholder sim ("not built yet") the test is skipped;
 * any other failure to start fails the test.
 */
struct proc *simt_start(struct simt *t, ...);

/* POSTs text (JSON or not) to path and parses the answer, which must be
 * JSON; *status gets the HTTP status. The caller owns the result. */
json_t *simt_post(struct simt *t, const struct proc *p, const char *path,
                  const char *text, long *status);
/* The same with a JSON body (consumed: its reference is stolen). */
json_t *simt_postj(struct simt *t, const struct proc *p, const char *path,
                   json_t *body, long *status);
/* GET path; the answer must be JSON. */
json_t *simt_get(struct simt *t, const struct proc *p, const char *path,
                 long *status);
/* POSTs a JSON body and asserts HTTP 200; returns the parsed answer. */
json_t *simt_ok(struct simt *t, const struct proc *p, const char *path,
                json_t *body);
/* Any request, any answer: returns http_do's result; resp is filled. The
 * caller inits and releases resp. content_type may be NULL. */
int simt_raw(struct simt *t, const struct proc *p, const char *method,
             const char *path, const char *body, size_t len,
             const char *content_type, struct http_resp *resp);

/* Asserts that ans is an OpenAI error object {"error": {"message": str,
 * "type": str, ...}} and that the message contains needle (ASCII case
 * ignored; NULL: any). */
void simt_assert_error(json_t *ans, const char *needle);
/* GET /health answers 200 {"status":"ok"}. */
void simt_assert_alive(struct simt *t, const struct proc *p);

/* Request builders (new references). */
json_t *simt_msg(const char *role, const char *content);
/* {"model":"sim","messages":[{"role":"user","content":text}],
 * "temperature":0} (temperature 0 so replies are the plain rule text) */
json_t *simt_chat1(const char *user_text);
/* {"model":"sim","messages":messages,"temperature":0} (messages stolen) */
json_t *simt_chat(json_t *messages);

/* choices[0].message.content, asserting it is a string. Borrowed from r. */
const char *simt_reply(json_t *r);
/* Sends one chat request (body stolen) and returns a fresh copy of the
 * reply text; asserts HTTP 200. */
char *simt_ask(struct simt *t, const struct proc *p, json_t *body);
/* usage.prompt_tokens, asserting an integer. */
long simt_prompt_tokens(json_t *r);
/* POST /tokenize {"prompt": text, "add_special_tokens": false}: count. */
long simt_count(struct simt *t, const struct proc *p, const char *text);
/* POST /tokenize {"messages": ..., "add_generation_prompt": true}: count.
 * messages is borrowed. */
long simt_count_messages(struct simt *t, const struct proc *p,
                         json_t *messages);

/*
 * Prompt logprobs through /v1/completions with token ids, echo and
 * logprobs: the token_logprobs of the n prompt tokens (index 0 is null in
 * OpenAI's shape; it is returned as 0). out has room for n.
 */
void simt_prompt_logprobs(struct simt *t, const struct proc *p,
                          const int32_t *ids, size_t n, double *out);
/* Decode logprobs of a chat reply (logprobs: true); returns how many were
 * written (at most max). body is stolen; "logprobs":true is added. */
size_t simt_decode_logprobs(struct simt *t, const struct proc *p, json_t *body,
                            double *out, size_t max);

/* A JSON array of ints from ids. */
json_t *simt_ids(const int32_t *ids, size_t n);

/* Filler prose of about ntok tokens under the reference tokenizer that
 * states no fact, asks nothing and is not a follow-up. Caller frees. */
char *simt_filler(size_t ntok, unsigned salt);

/* ---- reference tokenizer and template (docs/SIM.md) ---- */

#define SIMREF_N (62L + 62L * 62 + 62L * 62 * 62 + 62L * 62 * 62 * 62)
#define SIMREF_VOCAB (272L + 2 * SIMREF_N)

/* Tokenizes len bytes of s; writes at most max ids to out (out may be NULL
 * when max is 0) and returns the full count. */
size_t simref_tokenize(const char *s, size_t len, int32_t *out, size_t max);
/* Token count of a C string. */
size_t simref_count(const char *s);
/*
 * Renders messages (system, user, assistant with optional
 * reasoning_content, tool results; not tool calls) with the generation
 * prompt, as the contract's template does; reasoning is rendered when
 * keep_reasoning. Returns a heap string.
 */
char *simref_render(json_t *messages, bool keep_reasoning);

#endif
