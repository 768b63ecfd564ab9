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

/* A route of fakesrv_files: a path answered with a file's bytes. */
struct fakesrv_route {
    const char *path, *file;
};

/* A fakesrv_fn answering each path of ud (a struct fakesrv_route array
 * ended by a NULL path) with the JSON file of tests/fixtures/inspect/
 * it names (200, or 500 when the file cannot be read), any other path
 * with 404 and a JSON detail, as the servers whose answers they are. */
void fakesrv_files(void *ud, const char *method, const char *path,
                   const char *body, size_t len, long *status,
                   const char **ctype, struct buf *out);

#endif
