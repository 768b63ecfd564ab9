/*
 * xchg_build: exchanges built in memory for the audit tests, from crafted
 * messages or from the opencode captures in tests/fixtures/ (util/fixture.h).
 */
#ifndef TESTS_UTIL_XCHG_BUILD_H
#define TESTS_UTIL_XCHG_BUILD_H

#include <jansson.h>

#include "store/xchg.h"
#include "util/fixture.h"

/* The "body" of a capture file in OPENCODE_FIXTURES (a new reference); a
 * missing file fails the test. */
json_t *fixture_body(const char *name);
/* The capture's request headers (a new reference). */
json_t *fixture_headers(const char *name);

/* A complete, streamed 200 exchange of session with body (reference
 * stolen) and an empty reply; xb_release frees what xb_* allocated. */
void xb_init(struct xchg *x, long long id, const char *session, json_t *body);
/* Sets the reply: content (NULL: ""), reasoning (NULL: none), tool_calls
 * (stolen, may be NULL), usage tokens (-1: no usage), finish_reason. */
void xb_reply(struct xchg *x, const char *content, const char *reasoning,
              json_t *tool_calls, long prompt_tokens, long completion_tokens,
              const char *finish);
void xb_release(struct xchg *x);

/* {"role": role, "content": content} */
json_t *xb_msg(const char *role, const char *content);
/* Body {"model": model, "stream": true, "messages": msgs (stolen)}. */
json_t *xb_body(const char *model, json_t *msgs);
/* Prompt tokens a 4-bytes-per-token tokenizer would count for body's
 * messages and tools (compact JSON). */
long xb_tokens(json_t *body);
/* The assistant message echoing x's reply exactly. */
json_t *xb_echo(const struct xchg *x);
/* An xchg_spill_each callback that stores a copy of x in the store ud
 * (an struct db *) under an id the store gives (1, 2, ... in file order);
 * its message on failure goes to stderr. */
int xb_put_copy(const struct xchg *x, void *ud);

#endif
