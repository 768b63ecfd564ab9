/*
 * redact: hides secrets a client sent before record keeps any copy of
 * them (the intake log, the store, the spill file): the values of secret
 * headers and query parameters become REDACT_MARK, and in a JSON request
 * body the string value of every member whose key names a secret (api_key,
 * apiKey, api-key, password, secret, client_secret, access_token,
 * refresh_token, id_token, authorization, in any ASCII case, at any depth, plus
 * the caller's extra names), and the same inside a tool call's "arguments"
 * string when that string holds JSON. Values that are objects, arrays,
 * numbers or literals are left alone (a tool schema's "password" property
 * is an object). Plain "token" is not a secret's name: responses and
 * logprob requests use it for text pieces.
 *
 * The body is rewritten in place and keeps its length: each byte between
 * the value's quotes becomes part of the marker ("[redacted]" then '*',
 * or only '*' when the value is shorter than the word), so the text stays
 * valid JSON and every offset stays where it was. The bytes sent to the
 * upstream are the caller's business: redact a copy, or after forwarding.
 */
#ifndef RECORD_REDACT_H
#define RECORD_REDACT_H

#include <stdbool.h>
#include <stddef.h>

/* What a secret header's or query parameter's value becomes; a hidden
 * body value starts with it. */
#define REDACT_MARK "[redacted]"

/* True for a header whose value is a credential (case-insensitive name):
 * Authorization, Proxy-Authorization, Cookie, Set-Cookie, api-key,
 * x-api-key and any name containing "api-key", "apikey", "token",
 * "secret", "password" or "auth" (not "ratelimit"). */
bool redact_is_secret_header(const char *name);
/* A fresh copy of path with the values of secret query parameters (key,
 * api_key, apikey, token, access_token, password, secret, sig, signature,
 * auth..., and the body's secret keys) replaced by REDACT_MARK; a name is
 * compared with its percent escapes decoded (?api%5Fkey=) and in any
 * case. */
char *redact_path(const char *path);

/* Names longer than this are refused by redact_name_ok (a key is matched
 * after its escapes are decoded into a buffer of this size). */
#define REDACT_NAME_MAX 64
/* Extra names `record --redact-key` takes at most. */
#define REDACT_KEYS_MAX 64

/* Whether name can be given as an extra key: 1 to REDACT_NAME_MAX bytes. */
bool redact_name_ok(const char *name);
/* Rewrites the secret values of body[0..len) in place (above). extra:
 * n more key names (compared ignoring ASCII case), may be NULL. Returns how
 * many values were hidden. A body that does not start (after white space)
 * with '{' or '[' is left alone; one that is not valid JSON is scanned all
 * the same, string by string. Never reads outside body[0..len). */
size_t redact_body(char *body, size_t len, const char *const *extra, size_t n);
/* Whether a Content-Type is application/x-www-form-urlencoded. */
bool redact_is_form(const char *ct);
/* The same for a form-encoded body (name=value&...): the value of every
 * pair whose name, percent escapes and '+' decoded, is a secret query
 * parameter's or body key's name (or an extra one) is overwritten in
 * place, keeping the length. Returns how many. */
size_t redact_form(char *body, size_t len, const char *const *extra, size_t n);

struct buf;
/* The Content-Encoding value (one coding, any case, blanks around)
 * redact_inflate undoes: "gzip", "x-gzip" or "deflate"; NULL for any
 * other (identity, a list of codings, unknown ones). */
const char *redact_coding(const char *value);
/* Inflates a body sent with coding (redact_coding's) into out, at most
 * cap bytes: gzip (its members one after another), zlib, or for
 * "deflate" also a raw deflate stream. 0: decoded (a stream cut short
 * gives what inflated up to the cut); 1: it inflates past cap (out holds
 * cap bytes at most); -1: not that format (out empty). */
int redact_inflate(const char *src, size_t len, const char *coding, size_t cap,
                   struct buf *out);

#endif
