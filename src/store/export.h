/*
 * export: recorded exchanges (store/xchg.h) in the formats other tools
 * read, one JSON value at a time for `fidelity export` to write: an HTTP
 * Archive 1.2 entry and page (browser devtools, Charles, mitmproxy's HAR
 * import; the raw response, an SSE stream included, kept as received),
 * one object per exchange for JSONL (request, reassembled reply, timings,
 * session, kind), and an OpenAI-style {"messages": [...]} conversation.
 * Secrets are as the store holds them: redacted. Fields come in a fixed
 * order; nothing here prints.
 */
#ifndef STORE_EXPORT_H
#define STORE_EXPORT_H

#include <jansson.h>

#include "store/xchg.h"

/* {"id", "session", "kind", "started", "method", "path", "request":
 * {"headers", "body" | "body_text" | "body_base64"}, "response":
 * {"status", "headers", "streamed", "bytes"}, "reply", "timings":
 * {"up_ttfb_ms", "up_total_ms", "down_ttfb_ms", "down_total_ms"}, "end"}.
 * "body" is the stored request body itself: written compactly (jansson
 * keeps the key order), its text is the store's canonical bytes. "kind"
 * is kind, the one audit decides by structure (NULL: the stored one,
 * record's hint). */
json_t *export_jsonl(const struct xchg *x, const char *session,
                     const char *kind);

/* A HAR 1.2 "pages" entry for a session that started at unix time
 * started. */
json_t *export_har_page(const char *session, double started);
/* A HAR 1.2 "entries" entry for x, on page pageref (the session); its
 * "_kind" is kind (NULL: the stored one). */
json_t *export_har_entry(const struct xchg *x, const char *pageref,
                         const char *kind);
/* The "creator" object of the log. */
json_t *export_har_creator(void);

/* A conversation to replay: {"messages": messages + the reply as the last
 * assistant message (with its reasoning_content and tool_calls), "tools"
 * (when sent), "model", "session"}; the form drift's --corpus reads.
 * messages: the request's (a new reference is taken). */
json_t *export_openai(const struct xchg *x, json_t *messages,
                      const char *session);

#endif
