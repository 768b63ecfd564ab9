/*
 * front: the client-facing side of `fidelity record`, an HTTP/1.1 server on
 * plain non-blocking sockets driven by the caller's libevent loop. It
 * accepts connections, reads requests (h1_parse_request; bodies sized or
 * chunked, Expect: 100-continue, pipelined requests, HTTP/1.0 keep-alive
 * rules), hands each complete request to the caller, and writes the
 * response the caller gives it, framed for that client (sized, chunked, or
 * delimited by the close). What it refuses itself (a malformed request, a
 * body above the limit, a head too large, CONNECT) gets a JSON error in
 * the shape of the OpenAI API's. One request per connection is answered
 * at a time; the next one waits in the buffer. It bounds what clients can
 * hold: a request head must arrive within a deadline, an idle keep-alive
 * connection is closed, connections beyond a maximum get a 503, and when
 * the process runs out of descriptors it stops accepting for a moment
 * instead of retrying a failing accept(2). Not thread-safe.
 */
#ifndef RECORD_FRONT_H
#define RECORD_FRONT_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "http/h1.h"

struct front;
struct front_conn;

/* A complete request, valid during the request callback only. The method,
 * target, header names and values of h are NUL-terminated in place (the
 * lengths in h still hold). */
struct front_req {
    const struct h1_req *h;
    const char *body; /* the body with the transfer coding removed */
    size_t body_len;
};

struct front_cbs {
    /* A complete request on c. The callee answers it later or at once
     * with front_start/front_body then front_end or front_abort, or with
     * front_json; nothing more is read from c's requests until then. */
    void (*request)(void *ud, struct front_conn *c, const struct front_req *q);
    /* c's client went away (closed, reset, or did not read its response
     * for the idle time) while its request was unanswered; cud is what
     * front_set_ud gave. c is freed when this returns: do not use it
     * again. Never called from inside a front_* call. */
    void (*gone)(void *ud, struct front_conn *c, void *cud);
    /* A condition worth a log line (accept failing for want of
     * descriptors), at most once a second; msg has no newline. May be
     * NULL. */
    void (*log)(void *ud, const char *msg);
};

struct front_opts {
    const char *host; /* listen address */
    int port;         /* 0: pick a free port */
    size_t max_body;  /* request body cap (413 above, naming --max-body) */
    /* a request head (from the connection's start, or from the first byte
     * after a keep-alive wait) must be complete within this, and a body
     * must not stop arriving for longer: else 408 and the close. 0: 30 s */
    long header_ms;
    /* a keep-alive connection waiting for its next request is closed
     * after this long. 0: 75 s */
    long idle_ms;
    /* a client that stops reading its response is closed after this
     * long. 0: 600 s. A response that is merely quiet (the upstream
     * thinking) is never cut by front. */
    long stall_s;
    /* connections served at once; one more is answered 503 and closed.
     * 0: front_default_max_conns() */
    size_t max_conns;
};

/* The default of max_conns: half of what the descriptor limit
 * (RLIMIT_NOFILE) leaves after 64 for the process's own files, since each
 * client connection may need an upstream one; at least 16. */
size_t front_default_max_conns(void);
/* How many client connections (those answered 503 included) may be open
 * at once under the descriptor limit (RLIMIT_NOFILE): 64 descriptors are
 * left for record's own files and one for the upstream socket of each
 * of the max_conns served connections (at most half of the rest). The
 * listener pauses while that many are open. */
size_t front_max_clients(size_t max_conns);

/* Binds and listens. On error *out is NULL and d says what (-errno). */
int front_new(struct event_base *base, const struct front_opts *o,
              const struct front_cbs *cbs, void *ud, struct front **out,
              struct diag *d);
/* The port actually bound. */
int front_port(const struct front *f);
/* Stops accepting new connections; open ones are served on. */
void front_stop_accepting(struct front *f);
/* Closes every connection (no callbacks) and the listener. NULL: no-op. */
void front_free(struct front *f);
/* Connections open, for tests and stats. */
size_t front_connections(const struct front *f);

/* The caller's pointer for c's current request (given back by gone). */
void front_set_ud(struct front_conn *c, void *cud);
/* Whether c's request was HEAD (its response has no body). */
bool front_is_head(const struct front_conn *c);

/* Starts the response to c's request: the status line (reason may be
 * NULL), the header lines hdrs[0..hl) ("Name: value\r\n" each; the caller
 * leaves out hop-by-hop fields), then the framing: no body when no_body,
 * exactly `length` bytes when length >= 0 (its Content-Length is among
 * hdrs), else chunked for an HTTP/1.1 client and delimited by the close
 * for an HTTP/1.0 one. Nothing is written before front_body or front_end
 * adds the first bytes after it. */
void front_start(struct front_conn *c, int status, const char *reason,
                 size_t reason_len, const char *hdrs, size_t hl, int64_t length,
                 bool no_body);
/* Body bytes, framed; written at the end of this loop pass (the pieces of
 * one pass leave in one write). */
void front_body(struct front_conn *c, const char *p, size_t n);
/* The response is complete: the last chunk when chunked, everything
 * written now; then c reads the next request, or closes when either side
 * said so. c belongs to front again. */
void front_end(struct front_conn *c);
/* front_start, front_body with body[0..n) and front_end at once: the
 * whole response written now, without waiting for the end of the loop
 * pass (the flush that front_start would schedule is not needed). c
 * belongs to front again. */
void front_whole(struct front_conn *c, int status, const char *reason,
                 size_t reason_len, const char *hdrs, size_t hl, int64_t length,
                 bool no_body, const char *body, size_t n);
/* The response cannot be completed (the upstream failed after its head):
 * what was given is written, then the connection closes, so the client
 * sees the response cut short. c belongs to front again. */
void front_abort(struct front_conn *c);
/* A whole response with a JSON body instead (an error the caller makes:
 * 502, 503, 504), written now; keep-alive as the client asked. c belongs
 * to front again. */
void front_json(struct front_conn *c, int status, const char *json, size_t len);

#endif
