/*
 * upstream: a scripted HTTP/1.1 server inside the test process, for the
 * recording proxy's tests: it knows exactly which bytes it sent, can reset
 * a stream midway, and notices when its peer goes away. One thread per
 * connection, keep-alive, 127.0.0.1 on an ephemeral port.
 *
 * Routes (any method): /json (sized JSON), /sse (chunked event stream with
 * reasoning, content, a tool call, usage, [DONE]), /reset (two events, then
 * the connection closes), /slow (an event every 20 ms for 10 s), /echo (the
 * raw request it received, headers and body, as the body), /big (1 MiB
 * sized JSON), /gzip/json and /gzip/sse (the /json body and the /sse
 * events with Content-Encoding: gzip, the stream flushed after each
 * event). Anything else: 404.
 *
 * For record's own HTTP/1.1 client: /chunked (the /json body, chunked in
 * 40-byte pieces with a chunk extension and a trailer), /bigchunked (3 MiB
 * in 64 KiB chunks), /close (the /json body delimited by the connection
 * closing), /interim (100 and 103 before a sized 200), /204, /304 (with a
 * Content-Length but no body), /kaclose (a sized reply on a keep-alive
 * connection, then the server closes it), /dropnext (a sized reply; the
 * next request on that connection is dropped: the connection closes
 * without an answer), /resetsized (500 of 1000 announced bytes, then the
 * close), /garbage (a malformed status line), /bighead (the /json body
 * after a 12 KB header field, the head written 1,000 bytes at a time),
 * /hang (no answer for 3 s, then the close), /quiet (an event of the
 * /slow stream, 3.2 s of silence, the same event again, the end), /delay
 * (the /json reply after 500 ms), /gzip/bomb (100 MiB of zeros, gzip,
 * sized: about 100 KB sent). HEAD /json gets the head only.
 */
#ifndef TESTS_UTIL_UPSTREAM_H
#define TESTS_UTIL_UPSTREAM_H

#include <stddef.h>

struct upstream;

struct upstream *upstream_start(void);
int upstream_port(const struct upstream *u);
/* "http://127.0.0.1:PORT" (static buffer per server). */
const char *upstream_url(const struct upstream *u);
void upstream_stop(struct upstream *u);
/* How many /slow streams ended because the peer closed. */
int upstream_peer_gone(struct upstream *u);
/* How many requests /dropnext connections dropped unanswered. */
int upstream_dropped(struct upstream *u);
/* How many requests it served. */
int upstream_requests(struct upstream *u);
/* The raw bytes (request line, headers, body) of the last request it
 * served. Fresh, caller frees. */
char *upstream_last_request(struct upstream *u, size_t *len);
/* The exact body bytes the route sends (for /json, /sse, /big, /gzip/json,
 * /gzip/sse; for /reset the bytes sent before the close; also the routes
 * above that have a body). Fresh, caller frees. */
char *upstream_body(const char *route, size_t *len);

#endif
