/*
 * gateway: a rewriting HTTP proxy inside the test process, standing for
 * the harness gateways and middleware that edit a conversation on its way
 * to the server. It listens on 127.0.0.1 (ephemeral port) and forwards
 * every request to an upstream base URL (a `fidelity sim`, a `record`);
 * answers, SSE streams included, come back byte for byte (only the
 * Connection header is set to close: one request per connection).
 *
 * JSON request bodies that carry a `messages` array are rewritten by the
 * options below, applied in this order: compaction, drop the oldest K
 * turns, keep the last N turns, keep the last N messages, prune tool
 * results, strip reasoning, clip, set a field. /tokenize requests are rewritten
 * too only when `tokenize` is set (and then a `prompt` string is clipped as
 * well). With `fail_first` the first attempt of each distinct request (method,
 * path and the body as forwarded) is answered 429, so that a client retries.
 *
 * A turn is a user message and everything up to the next user message;
 * the leading system (and developer) messages are never dropped, and the
 * last turn is never dropped either.
 *
 * Every gateway started is tracked: gateway_stop_all() (call it from a
 * cmocka teardown) stops the ones a failed test left running.
 */
#ifndef TESTS_UTIL_GATEWAY_H
#define TESTS_UTIL_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>

struct gateway_opts {
    unsigned keep_last;      /* keep the last N turns; 0: off */
    unsigned drop_oldest;    /* drop the oldest K turns; 0: off */
    unsigned keep_last_msgs; /* keep the last N messages after the system
                                prompt (a window by messages: with an odd
                                N it starts on an assistant message); 0:
                                off */
    /* Compaction: when the history holds more than N turns, every turn but
     * the last is replaced by one summary message (role user, text
     * starting "Summary of the earlier conversation"). The gateway
     * remembers it per conversation (by the first non-system message): a
     * later request of that conversation gets the same summary in place
     * of the same head. With compact_every, the history after the summary
     * is compacted again (summary included) each time it grows past N
     * turns; without, only once. 0: off. */
    unsigned compact_after;
    bool compact_every;
    unsigned clip;         /* cut string contents to C bytes; 0: off */
    bool prune_tools;      /* replace old tool results' content by a marker */
    unsigned prune_keep;   /* ... keeping the last this many intact */
    bool strip_reasoning;  /* delete reasoning_content and reasoning from
                              assistant messages */
    const char *set_field; /* a top-level request field to set; NULL: off */
    const char *set_json;  /* its value, as JSON text ("0.9") */
    unsigned set_from;     /* only from the Nth chat request (1-based);
                              0 or 1: every one */
    bool tokenize;         /* rewrite /tokenize requests too */
    bool fail_first;       /* 429 on the first attempt of each request */
    bool no_tokenize;      /* answer 404 to /tokenize (a path without it) */
};

/* What a gateway did so far. */
struct gateway_counts {
    unsigned requests;  /* requests received */
    unsigned chat;      /* of them, JSON bodies with messages (not tokenize) */
    unsigned tokenize;  /* /tokenize requests */
    unsigned rewritten; /* bodies forwarded changed (chat and tokenize) */
    unsigned tokenize_rewritten;
    unsigned turns_dropped; /* by keep_last and drop_oldest */
    unsigned msgs_dropped;  /* by keep_last_msgs */
    unsigned compactions;   /* summaries made (not summaries re-applied) */
    unsigned summarised;    /* requests that went out with a summary */
    unsigned clipped;       /* strings cut */
    unsigned pruned;        /* tool results replaced */
    unsigned stripped;      /* reasoning fields deleted */
    unsigned fields_set;
    unsigned refused; /* 429s sent */
};

/* The marker a pruned tool result carries. */
#define GATEWAY_PRUNED "[tool result pruned by the gateway]"

struct gateway;

/* Starts a gateway in front of upstream ("http://127.0.0.1:PORT", with an
 * optional path prefix); o may be NULL (pass everything through). NULL on
 * failure. */
struct gateway *gateway_start(const char *upstream,
                              const struct gateway_opts *o);
int gateway_port(const struct gateway *g);
/* "http://127.0.0.1:PORT" (inside g). */
const char *gateway_url(const struct gateway *g);
void gateway_counts(struct gateway *g, struct gateway_counts *out);
/* Stops accepting, waits for the connections in flight, frees g; NULL is
 * a no-op. */
void gateway_stop(struct gateway *g);
/* Stops every gateway still running. */
void gateway_stop_all(void);

/* The rewrite alone, for unit tests: rewrites the JSON text body (len
 * bytes) as a request to path would be; returns a fresh NUL-terminated
 * body (caller frees) or NULL when it is left unchanged. counts (may be
 * NULL) is incremented. Uses and updates g's compaction memory. */
char *gateway_rewrite(struct gateway *g, const char *path, const char *body,
                      size_t len, struct gateway_counts *counts);

#endif
