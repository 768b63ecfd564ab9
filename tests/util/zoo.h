/*
 * zoo: the path-zoo client of the audit tests. A multi-turn chat harness
 * written here (libcurl), with the habits real harnesses have: the whole
 * history re-sent with every request, the reply sent back as it streamed
 * (with its reasoning or not), tool calls answered, a session header or
 * none, streams read to [DONE] and the connection closed right away,
 * retries of the same request after a 429/500 or a timeout, a harness
 * compaction (a summary request whose reply replaces the history, as
 * opencode does) and a title request. Pointed at record, or at a gateway
 * (tests/util/gateway.h) in front of record, it plays the traffic whose
 * audit the zoo tests check.
 */
#ifndef TESTS_UTIL_ZOO_H
#define TESTS_UTIL_ZOO_H

#include <stdbool.h>

struct zoo_opts {
    const char *session;   /* X-Session-Id value; NULL: no header */
    const char *agent;     /* User-Agent (default "zoo/1.0") */
    int turns;             /* user turns (default 6) */
    unsigned seed;         /* varies the turn texts */
    bool stream;           /* stream every request (else every other) */
    bool no_stream;        /* never stream */
    bool tools;            /* offer a tool; turns 2 and 4 ask for a call */
    bool echo_reasoning;   /* send reasoning_content back */
    bool title;            /* a title request after the first turn */
    int compact_every;     /* harness compaction after every N turns; 0: off */
    int retries;           /* retries of a request after 429/5xx/timeout */
    long first_timeout_ms; /* first attempt of each request gives up after
                              this; 0: 20 s like the rest */
    bool one_shot;         /* the same one-shot request, turns times */
    double temperature;    /* sent as is (default 0.6 when 0) */
};

/* Plays one conversation against base ("http://127.0.0.1:PORT"). Returns
 * the number of requests sent (retries included), or -1 when a request
 * failed for good (no answer after the retries). */
int zoo_converse(const char *base, const struct zoo_opts *o);

#endif
