/*
 * http client: blocking HTTP requests through libcurl (TLS, HTTP/2 and
 * keep-alive come from it). One struct http_client per thread; it keeps the
 * connection to each host open between requests. Used by probe, drift and
 * bisect; the recording proxy drives libcurl's multi interface itself.
 */
#ifndef HTTP_CLIENT_H
#define HTTP_CLIENT_H

#include <jansson.h>
#include <stddef.h>

#include "core/buf.h"
#include "core/diag.h"

struct http_client;

struct http_req {
    const char *method; /* "GET", "POST"; NULL means GET */
    const char *url;
    const char *body; /* may be NULL */
    size_t body_len;
    const char *const *headers; /* "Name: value" strings, NULL-terminated */
    long timeout_ms;            /* whole request; 0 means 300 s */
    size_t max_body;            /* cap on the response body; 0: 256 MiB */
    /* Called several times a second while the request is under way (NULL:
     * never); for a caller that shows what it waits for. */
    void (*on_wait)(void *ud);
    void *wait_ud;
};

struct http_resp {
    long status;
    struct buf body;
    struct buf headers;  /* raw header block of the final response */
    double t_first_byte; /* seconds from start to first response byte */
    double t_total;
};

struct http_client *http_client_new(void);
void http_client_free(struct http_client *c);

void http_resp_init(struct http_resp *r);
void http_resp_release(struct http_resp *r);

/*
 * Performs req. Returns 0 when an HTTP response arrived (any status), else
 * -ECONNREFUSED (could not connect or resolve), -ETIMEDOUT, -ENOBUFS (body
 * over max_body) or -EIO, with d naming the URL and curl's reason.
 */
int http_do(struct http_client *c, const struct http_req *req,
            struct http_resp *resp, struct diag *d);

/*
 * The response's Content-Type value (without parameters) into out, or ""
 * when it has none. Returns out.
 */
char *http_resp_ctype(const struct http_resp *r, char *out, size_t n);

/*
 * One line on an answer that was not what was asked for, into out:
 * "'URL' answered HTTP 200 (text/html), WHAT: '<first 80 printable bytes>'"
 * (runs of white space become one space, other bytes outside printable
 * ASCII are left out; "no content type" when it had none). Returns out.
 */
#define HTTP_DESCRIBE_BYTES 80
char *http_resp_describe(const struct http_resp *r, const char *url,
                         const char *what, char *out, size_t n);

/*
 * Fills hdrs (room for HTTP_JSON_HEADERS_MAX entries) with
 * "Content-Type: application/json", then the NULL-terminated extra headers
 * (those past the room are dropped), then NULL.
 */
#define HTTP_JSON_HEADERS_MAX 64
void http_json_headers(const char **hdrs, const char *const *extra);

/*
 * POSTs body as JSON (GET when body is NULL) and parses a JSON answer into
 * *out (new reference; NULL when the answer is not JSON, with d saying so
 * and -EBADMSG returned). *status gets the HTTP status either way.
 */
int http_json(struct http_client *c, const char *url, json_t *body,
              const char *const *headers, long timeout_ms, long *status,
              json_t **out, struct diag *d);

#endif
