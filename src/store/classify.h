/*
 * classify: what is decided about a recorded request before it is stored:
 * which session the request belongs to, and what kind of request it is
 * (main, title, compaction, subagent, other). Part of the store because
 * the intake log's replay (replay.h) must decide as record's writer did.
 * The rules are documented in docs/RECORD.md. (Which headers and query
 * parameters are secrets is record/redact.h's: they are hidden before
 * anything is kept.)
 */
#ifndef STORE_CLASSIFY_H
#define STORE_CLASSIFY_H

#include <jansson.h>
#include <stdbool.h>
#include <xxhash.h>

#include "store/hdrs.h"

/* Remembers the prompts the main agent handed to subagents (arguments of
 * "task"-like tool calls), so that a subagent's first request is recognised. */
struct classify_state;
struct classify_state *classify_new(void);
void classify_free(struct classify_state *c);
/* Learns task prompts from a reply's tool_calls (reply as in xchg.h) and
 * from the assistant tool calls in a request body. */
void classify_learn(struct classify_state *c, const json_t *body,
                    const json_t *reply);
/* Learns task prompts from a reply's tool_calls array alone:
 * classify_learn(c, NULL, reply) is this for reply's "tool_calls". */
void classify_learn_calls(struct classify_state *c, const json_t *tool_calls);
/* Learns from one request message: classify_learn(c, body, NULL) is this
 * for each of body's messages. The recorder calls it only for messages it
 * has not seen in an earlier request (the prompts it learnt then are kept
 * in a ring of the last 4096). */
void classify_learn_message(struct classify_state *c, const json_t *msg);

/* The session key: the X-Session-Id header, else x-session-affinity, else
 * "p:" and 16 hex digits hashing the first system and the first user message
 * (canonical JSON), else "-" for requests without messages. headers is an
 * object name -> value. Fresh string. */
char *classify_session(const json_t *headers, const json_t *body);
/* The same from the recorder's flat header list. */
char *classify_session_hl(const struct hdrs *headers, const json_t *body);
/* "main", "title", "compaction", "subagent" or "other" (static string):
 * record's hint by words; audit's kind, by structure, is what readers
 * show (docs/AUDIT.md). */
const char *classify_kind(struct classify_state *c, const json_t *body);

/* The same two, remembered in c by the bytes of the messages they depend
 * on: raw is the XXH3-128 of the bytes of each of body's n messages
 * (xchg.req_msg_raw; NULL, or n not the length of body's messages: not
 * remembered). Equal bytes parse to equal messages, so the result is the
 * one classify_session_hl / classify_kind give. */
char *classify_session_memo(struct classify_state *c,
                            const struct hdrs *headers, const json_t *body,
                            const XXH128_hash_t *raw, size_t n);
const char *classify_kind_memo(struct classify_state *c, const json_t *body,
                               const XXH128_hash_t *raw, size_t n);
/* Both at once (the messages are looked for once): the kind, and the
 * session key in *session (fresh). */
const char *classify_request_memo(struct classify_state *c,
                                  const struct hdrs *headers,
                                  const json_t *body, const XXH128_hash_t *raw,
                                  size_t n, char **session);

#endif
