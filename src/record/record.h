/*
 * record: the transparent recording proxy behind `fidelity record`. Its
 * own HTTP/1.1 server (front.h, on a libevent loop) takes the harness's
 * requests; on the same event loop, upclient.h forwards them to an http://
 * upstream (keep-alive pool, its own HTTP/1.1 parser, h1.h) and a libcurl
 * multi handle to an https:// one (TLS and HTTP/2 come from libcurl). Bytes
 * are forwarded as they arrive; a copy is parsed (wire/sse.h,
 * wire/reply.h, store/classify.h through store/ingest.h) and each
 * exchange is committed to the store (store/xchg.h), or appended to the
 * spill file when the store fails, before the last byte of its response is
 * handed to the client.
 */
#ifndef RECORD_RECORD_H
#define RECORD_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"

struct record_opts {
    const char *host;     /* listen address, e.g. "127.0.0.1" */
    int port;             /* 0: pick a free port */
    const char *upstream; /* base URL: http[s]://host[:port][/prefix] */
    const char *db_path;
    const char *spill_path;
    const char *intake_path; /* NULL: intake_path(db_path) */
    size_t max_body;         /* request body cap, bytes (413 above) */
    size_t max_capture;      /* response bytes kept per exchange; 0: 256 MiB */
    long timeout_ms;         /* whole upstream exchange; 0: none */
    /* client side limits (front.h): a request head must arrive within
     * header_timeout_ms, a keep-alive connection may wait idle_timeout_ms
     * for its next request (0: 30 s and 75 s); max_conns client
     * connections at once, 503 beyond (0: front_default_max_conns) */
    long header_timeout_ms, idle_timeout_ms;
    size_t max_conns;
    /* https:// upstreams (libcurl): a CA bundle to trust (NULL: the
     * system's), or no certificate checks at all */
    const char *cacert;
    bool insecure;
    /* forward http:// upstreams through libcurl too, as https:// are
     * (comparisons and tests; default: our own client, upclient.h) */
    bool via_libcurl;
    int handle_signals; /* stop on SIGINT/SIGTERM */
    /* log percentiles of where each exchange's time went when stopping
     * (rtiming.h; `fidelity record` sets it from FIDELITY_RECORD_TIMING) */
    bool timing;
    /* --redact-key: more request-body keys whose string values are hidden
     * before anything is kept (redact.h; borrowed) */
    const char *const *redact_keys;
    size_t n_redact_keys;
    /* Called for each failure worth a log line (store failed, spilled,
     * lost); msg has no newline. May be NULL. */
    void (*log)(void *ud, const char *msg);
    void *log_ud;
};

struct record_stats {
    uint64_t exchanges; /* finished */
    uint64_t stored;    /* committed to the store */
    uint64_t spilled;   /* appended to the spill file */
    uint64_t lost;      /* neither (both failed), and not in the log */
    /* neither, but in the intake log past its frontier: the next start
     * (record, or a command that reads the store) commits them */
    uint64_t in_log;
};

struct record;

/* Opens the store (creating its tables), binds the listening socket and
 * prepares the upstream side. On error *out is NULL and d says what. */
int record_new(const struct record_opts *o, struct record **out,
               struct diag *d);
/* The port actually bound. */
int record_port(const struct record *r);
/* Serves until record_stop() or a handled signal; in-flight exchanges are
 * given a few seconds to finish and every finished one is stored. */
int record_run(struct record *r, struct diag *d);
/* Asks record_run to stop; call from the loop's thread or a signal-free
 * context (tests use a signal). */
void record_stop(struct record *r);
void record_get_stats(const struct record *r, struct record_stats *s);
/* The exchanges committed to the store so far; any thread may ask while
 * record_run serves (record_get_stats is the loop's). */
uint64_t record_stored(const struct record *r);
void record_free(struct record *r);

#endif
