/*
 * h1: the HTTP/1.1 framing record needs on both of its sides (RFC 9112):
 * response status lines and header blocks (upclient.c), request lines and
 * header blocks (front.c), how a body is delimited, and the chunked
 * transfer coding. Zero-copy in the picohttpparser manner: the parsers
 * return slices into the caller's buffer and -2 for "need more input";
 * nothing allocates. Fuzzed by tests/fuzz/fuzz_h1.c (responses, chunked)
 * and tests/fuzz/fuzz_h1req.c (requests).
 */
#ifndef HTTP_H1_H
#define HTTP_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#define H1_MAX_HEADERS 100
#define H1_MAX_HEAD (64 * 1024) /* a longer status line + headers: error */

struct h1_header {
    const char *name, *value; /* not NUL-terminated */
    size_t name_len, value_len;
};

struct h1_head {
    int minor; /* HTTP/1.<minor> */
    int status;
    const char *reason;
    size_t reason_len;
    size_t nheaders;
    struct h1_header headers[H1_MAX_HEADERS];
};

/* Parses a status line and headers from p[0..n). Returns the length of the
 * head including its blank line, -2 when p holds no complete head yet (and
 * n is still under H1_MAX_HEAD), -1 when the head is malformed, too long
 * or has more than H1_MAX_HEADERS fields. Slices in h point into p. Bare
 * LF line ends are accepted (RFC 9112 section 2.2); obsolete line folding
 * is not. */
int h1_parse_head(const char *p, size_t n, struct h1_head *h);

struct h1_req {
    int minor; /* HTTP/1.<minor> */
    const char *method, *target;
    size_t method_len, target_len;
    size_t nheaders;
    struct h1_header headers[H1_MAX_HEADERS];
};

/* Parses a request line and headers from p[0..n) (RFC 9112 sections 3 and
 * 5; empty lines before the request line are skipped, section 2.2).
 * Returns the length consumed including the blank line, -2 when no
 * complete head is there yet (and n is under H1_MAX_HEAD), -1 when it is
 * malformed (request line not "token SP target SP HTTP/1.0" or 1.1, a control
 * character in the target, a field that is not "token: value", obsolete
 * line folding), -3 when it is longer than H1_MAX_HEAD or has more than
 * H1_MAX_HEADERS fields. Slices in q point into p. */
int h1_parse_request(const char *p, size_t n, struct h1_req *q);
/* Whether q's Host fields are as RFC 9112 section 3.2 requires: exactly
 * one in an HTTP/1.1 request, at most one in an HTTP/1.0 one (which may
 * leave it out). 0, or -1 when a server must answer 400. */
int h1_req_host_ok(const struct h1_req *q);

enum h1_framing {
    H1_NONE,    /* no body (HEAD, 1xx, 204, 304) */
    H1_SIZED,   /* Content-Length */
    H1_CHUNKED, /* Transfer-Encoding ending in chunked */
    H1_CLOSE    /* until the connection closes */
};

/* How the body after head h is delimited (RFC 9112 section 6.3), for a
 * response to a HEAD request when head_req. *len is the Content-Length for
 * H1_SIZED. -1 when the framing is invalid (differing or malformed
 * Content-Length values), else 0. */
int h1_framing(const struct h1_head *h, bool head_req, enum h1_framing *f,
               uint64_t *len);
/* Whether the connection can carry another request after this response
 * (HTTP/1.1 without "Connection: close", or HTTP/1.0 with keep-alive). */
bool h1_keep_alive(const struct h1_head *h);
/* How a request's body is delimited (RFC 9112 section 6.3): H1_NONE (no
 * body), H1_SIZED (*len bytes) or H1_CHUNKED. -1 when the framing is
 * invalid: a malformed or differing Content-Length, a Transfer-Encoding
 * whose last coding is not chunked, or both headers at once (refused
 * rather than guessed: the request smuggling of RFC 9112 section 11.2). */
int h1_req_framing(const struct h1_req *q, enum h1_framing *f, uint64_t *len);
/* The same keep-alive rule for a request: HTTP/1.1 unless "Connection:
 * close", HTTP/1.0 only with "Connection: keep-alive". */
bool h1_req_keep_alive(const struct h1_req *q);
/* Whether value v (vl bytes) holds token tok as one of its comma-separated
 * elements, case-insensitively. */
bool h1_has_token(const char *v, size_t vl, const char *tok);
/* Case-insensitive header name match. Inline: with a literal name its
 * length is a constant, and most fields differ from it in length. */
static inline bool h1_name_is(const struct h1_header *f, const char *name)
{
    size_t n = strlen(name);
    return f->name_len == n && !strncasecmp(f->name, name, n);
}

/* The chunked transfer coding decoder (RFC 9112 section 7.1). */
struct h1_chunked {
    int state;
    uint64_t left; /* data bytes left in the current chunk */
    size_t line;   /* bytes of the current size or trailer line seen */
};

void h1_chunked_init(struct h1_chunked *c);
/* Consumes framing and data from p[0..n). Sets *used to the bytes consumed
 * and returns: 1 when *data_len > 0 data bytes start at p + *data_off
 * (within the consumed range; call again with the rest), 0 when all of
 * p was consumed and more is needed, 2 when the last chunk and its trailer
 * section are complete (the bytes after *used are not the body's), -1 on
 * a malformed coding. */
int h1_chunked_feed(struct h1_chunked *c, const char *p, size_t n, size_t *used,
                    size_t *data_off, size_t *data_len);

#endif
