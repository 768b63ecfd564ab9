/*
 * upclient: the plain-http upstream side of `fidelity record`, on plain
 * non-blocking sockets driven by the caller's libevent loop: one origin
 * (host:port), a pool of keep-alive connections,
 * requests written as the caller serialised them, responses parsed with
 * h1.h and handed over as they arrive (status and headers once, then body
 * pieces with the transfer coding removed). https:// upstreams go through
 * libcurl instead (proxy.c). Runs on the caller's event loop; not
 * thread-safe.
 */
#ifndef RECORD_UPCLIENT_H
#define RECORD_UPCLIENT_H

#include <event2/event.h>
#include <stdbool.h>

#include "core/buf.h"
#include "http/h1.h"

struct upclient;
struct upclient_req;

/* What a request reports, in this order: head once (the final response;
 * 1xx interim responses are skipped), body zero or more times, done once.
 * After done, or after upclient_cancel, nothing more is called. */
struct upclient_cbs {
    /* h and its slices are valid during the call only; the reason, the
     * names and the values are NUL-terminated in place */
    void (*head)(void *ud, const struct h1_head *h, enum h1_framing f,
                 uint64_t len);
    void (*body)(void *ud, const char *p, size_t n);
    /* err 0: the response is complete. -ETIMEDOUT: the exchange timed
     * out. Otherwise the upstream failed (before head: no response; after:
     * the body is cut short): -ECONNREFUSED and the like from connect,
     * -ECONNRESET when it closed early, -EPROTO for a malformed response.
     * why says it in words (valid during the call). */
    void (*done)(void *ud, int err, const char *why);
};

/* A client for http://host:port (host may be a name, an IPv4 or a
 * bracketed IPv6 address). timeout_ms bounds each exchange (0: none);
 * connecting is bounded by 10 s. The name is resolved when the first
 * connection is made (and again after a failure). Never fails but for
 * memory (aborts). */
struct upclient *upclient_new(struct event_base *base, const char *host,
                              int port, long timeout_ms);
/* Closes every connection; requests still in flight get no callbacks.
 * NULL is a no-op. */
void upclient_free(struct upclient *u);

/* Sends msg (request line, headers with Host and framing, body: its
 * contents are taken, msg is left empty, with the memory of an earlier
 * request's buffer when there is one to reuse: the caller still releases
 * msg in the end) on an idle pooled connection or
 * a new one. head_req: the request is HEAD (its response has no body). A
 * request that fails on a reused connection before any response byte
 * arrives is sent once more on a new one (the server closed an idle
 * connection as it was reused, as RFC 9112 section 9.3.1 allows). When no
 * connection can be started (the name does not resolve, no socket, the
 * connection is refused at once), NULL is returned with why filled, msg
 * is emptied and no callback is ever called. */
struct upclient_req *upclient_send(struct upclient *u, struct buf *msg,
                                   bool head_req,
                                   const struct upclient_cbs *cbs, void *ud,
                                   char *why, size_t wl);
/* Abandons q: its connection is closed (the upstream sees its peer go) and
 * no callback is called for q again. */
void upclient_cancel(struct upclient_req *q);

/* Connections open (busy and idle), for tests and stats. */
size_t upclient_connections(const struct upclient *u);

#endif
