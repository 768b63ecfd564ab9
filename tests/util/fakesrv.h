/*
 * fakesrv: a tiny HTTP/1.1 server on 127.0.0.1, one connection at a time in
 * a thread, for end-to-end tests that need an endpoint misbehaving in a
 * way `fidelity sim` cannot (an answer that is not JSON, a 404 on one path
 * of an otherwise working server). The handler writes the whole answer;
 * every connection closes after one response.
 */
#ifndef TESTS_UTIL_FAKESRV_H
#define TESTS_UTIL_FAKESRV_H

#include <stddef.h>

#include "core/buf.h"

/* Fills *status, *ctype and out for one request. */
typedef void (*fakesrv_fn)(void *ud, const char *method, const char *path,
                           const char *body, size_t len, long *status,
                           const char **ctype, struct buf *out);

struct fakesrv;

/* Starts listening on an ephemeral port; NULL on failure. */
struct fakesrv *fakesrv_start(fakesrv_fn fn, void *ud, int *port);
/* Stops the thread and closes the socket; NULL is a no-op. */
void fakesrv_stop(struct fakesrv *s);

#endif
