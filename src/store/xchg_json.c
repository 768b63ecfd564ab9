/*
 * xchg_json: an exchange as one JSON object, and the spill file of such
 * objects, one per line, that record appends to when the SQLite store fails
 * and audit reads beside the store (format in docs/RECORD.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/xchg.h"
#include "store/xchg_int.h"
#include "wire/reply.h"

static const char B64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *xchg_b64_encode(const unsigned char *p, size_t n)
{
    char *out = xmalloc((n + 2) / 3 * 4 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_val(char c)
{
    const char *p = c ? strchr(B64, c) : NULL;
    return p ? (int)(p - B64) : -1;
}

/* Decodes s; NULL when s is not base64. */
static char *b64_decode(const char *s, size_t *len)
{
    size_t n = strlen(s), o = 0;
    if (n % 4)
        return NULL;
    char *out = xmalloc(n / 4 * 3 + 1);
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = s[i + k] == '=' && k >= 2 ? 0 : b64_val(s[i + k]);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
            free(out);
            return NULL;
        }
        unsigned w = (unsigned)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        out[o++] = (char)(w >> 16);
        if (s[i + 2] != '=')
            out[o++] = (char)(w >> 8);
        if (s[i + 3] != '=')
            out[o++] = (char)w;
    }
    out[o] = '\0';
    *len = o;
    return out;
}

/* Sets key to the bytes as a string, or key_b64 when not valid UTF-8. */
static void set_bytes(json_t *o, const char *key, const char *p, size_t n)
{
    if (!p)
        return;
    json_t *s = json_stringn(p, n);
    if (s) {
        json_object_set_new(o, key, s);
        return;
    }
    char *k = xasprintf("%s_b64", key);
    char *e = xchg_b64_encode((const unsigned char *)p, n);
    json_object_set_new(o, k, json_string(e));
    free(e);
    free(k);
}

static void set_str(json_t *o, const char *key, const char *s)
{
    if (s)
        json_object_set_new(o, key, json_string(s));
}

static void set_json(json_t *o, const char *key, json_t *v)
{
    if (v)
        json_object_set(o, key, v);
}

/* j, else the object hl's text makes when hl is set. */
static void set_headers(json_t *o, const char *key, json_t *j,
                        const struct hdrs *hl)
{
    if (j || !hl->set) {
        set_json(o, key, j);
        return;
    }
    struct buf b = BUF_INIT;
    if (!hdrs_json(hl, &b))
        json_object_set_new(o, key, json_loadb(b.data, b.len, 0, NULL));
    buf_release(&b);
}

json_t *xchg_to_json(const struct xchg *x)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(x->id));
    set_str(o, "session", x->session);
    set_str(o, "kind", x->kind);
    json_object_set_new(o, "started", json_real(x->started));
    set_str(o, "method", x->method);
    set_str(o, "path", x->path);
    set_headers(o, "req_headers", x->req_headers, &x->req_hl);
    set_json(o, "req_body", x->req_body);
    set_bytes(o, "req_raw", x->req_raw, x->req_raw_len);
    json_object_set_new(o, "req_malformed", json_boolean(x->req_malformed));
    if (x->req_redacted)
        json_object_set_new(o, "req_redacted", json_true());
    json_object_set_new(o, "status", json_integer(x->status));
    set_headers(o, "resp_headers", x->resp_headers, &x->resp_hl);
    set_bytes(o, "resp_raw", x->resp_raw, x->resp_raw_len);
    json_object_set_new(o, "streamed", json_boolean(x->streamed));
    json_t *reply = x->reply;
    if (!reply && x->reply_text)
        reply = json_loadb(x->reply_text, x->reply_text_len, 0, NULL);
    else if (!reply && x->reply_of_raw && x->resp_raw && !x->streamed)
        reply = reply_from_body(x->resp_raw, x->resp_raw_len);
    else if (!reply && x->reply_of_raw && x->streamed)
        reply = reply_from_stream(x->resp_raw ? x->resp_raw : "",
                                  x->resp_raw_len, x->stream_gap_ms);
    else
        json_incref(reply);
    set_json(o, "reply", reply);
    json_decref(reply);
    json_object_set_new(o, "up_ttfb_ms", json_real(x->up_ttfb_ms));
    json_object_set_new(o, "up_total_ms", json_real(x->up_total_ms));
    json_object_set_new(o, "down_ttfb_ms", json_real(x->down_ttfb_ms));
    json_object_set_new(o, "down_total_ms", json_real(x->down_total_ms));
    json_object_set_new(o, "end", json_string(xchg_end_name(x->end)));
    return o;
}

static char *get_str(const json_t *j, const char *key)
{
    const char *s = json_string_value(json_object_get(j, key));
    return s ? xstrdup(s) : NULL;
}

static json_t *get_json(const json_t *j, const char *key)
{
    json_t *v = json_object_get(j, key);
    return v && !json_is_null(v) ? json_incref(v) : NULL;
}

static double get_num(const json_t *j, const char *key)
{
    return json_number_value(json_object_get(j, key));
}

/* Reads key (a string) or key_b64 into *p; -EBADMSG on bad base64. */
static int get_bytes(const json_t *j, const char *key, char **p, size_t *n)
{
    json_t *s = json_object_get(j, key);
    if (json_is_string(s)) {
        *n = json_string_length(s);
        *p = xmalloc(*n + 1);
        memcpy(*p, json_string_value(s), *n);
        (*p)[*n] = '\0';
        return 0;
    }
    char *k = xasprintf("%s_b64", key);
    const char *b = json_string_value(json_object_get(j, k));
    free(k);
    if (!b)
        return 0;
    *p = b64_decode(b, n);
    return *p ? 0 : -EBADMSG;
}

static enum xchg_end end_from_name(const char *s)
{
    for (int e = XCHG_COMPLETE; e <= XCHG_TIMEOUT; e++)
        if (s && !strcmp(s, xchg_end_name((enum xchg_end)e)))
            return (enum xchg_end)e;
    return XCHG_UPSTREAM_ERROR;
}

int xchg_from_json(const json_t *j, struct xchg *x, struct diag *d)
{
    if (!json_is_object(j) || !json_is_string(json_object_get(j, "method")) ||
        !json_is_string(json_object_get(j, "path")))
        return diag_set(d, EBADMSG, "exchange lacks 'method' or 'path'");
    x->id = json_integer_value(json_object_get(j, "id"));
    x->session = get_str(j, "session");
    x->kind = get_str(j, "kind");
    x->started = get_num(j, "started");
    x->method = get_str(j, "method");
    x->path = get_str(j, "path");
    x->req_headers = get_json(j, "req_headers");
    x->req_body = get_json(j, "req_body");
    x->req_malformed = json_is_true(json_object_get(j, "req_malformed"));
    x->req_redacted = json_is_true(json_object_get(j, "req_redacted"));
    x->status = (int)json_integer_value(json_object_get(j, "status"));
    x->resp_headers = get_json(j, "resp_headers");
    x->streamed = json_is_true(json_object_get(j, "streamed"));
    x->reply = get_json(j, "reply");
    x->up_ttfb_ms = get_num(j, "up_ttfb_ms");
    x->up_total_ms = get_num(j, "up_total_ms");
    x->down_ttfb_ms = get_num(j, "down_ttfb_ms");
    x->down_total_ms = get_num(j, "down_total_ms");
    x->end = end_from_name(json_string_value(json_object_get(j, "end")));
    if (get_bytes(j, "req_raw", &x->req_raw, &x->req_raw_len) ||
        get_bytes(j, "resp_raw", &x->resp_raw, &x->resp_raw_len))
        return diag_set(d, EBADMSG, "exchange has bad base64 in a raw body");
    if (!x->req_body && x->req_raw && !x->req_malformed)
        x->req_body = json_loadb(x->req_raw, x->req_raw_len,
                                 JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    return 0;
}

int xchg_spill_append(const char *path, const struct xchg *x, struct diag *d)
{
    json_t *o = xchg_to_json(x);
    char *line = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!line)
        abort();
    size_t len = strlen(line);
    line[len] = '\n'; /* replaces the NUL; written with its length */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        free(line);
        return diag_set(d, e, "cannot open spill file '%s': %s", path,
                        strerror(e));
    }
    ssize_t n = write(fd, line, len + 1);
    int e = n < 0 ? errno : ENOSPC;
    close(fd);
    free(line);
    if (n != (ssize_t)(len + 1))
        return diag_set(d, e, "cannot append to spill file '%s': %s", path,
                        strerror(e));
    return 0;
}

int xchg_spill_each(const char *path, int (*fn)(const struct xchg *x, void *ud),
                    void *ud, struct diag *d)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        return diag_set(d, e, "cannot open spill file '%s': %s", path,
                        strerror(e));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        bool torn = n == 0 || line[n - 1] != '\n';
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, 0, &je);
        if (!j) {
            if (torn)
                break; /* a crash mid-write: the rest never reached disk */
            rc = diag_set(d, EBADMSG, "spill file '%s' line %ld: %s", path,
                          lineno, je.text);
            break;
        }
        struct xchg x;
        xchg_init(&x);
        rc = xchg_from_json(j, &x, d);
        if (rc)
            diag_prefix(d, "spill file '%s' line %ld", path, lineno);
        else {
            x.id = -lineno;
            rc = fn(&x, ud);
        }
        xchg_release(&x);
        json_decref(j);
    }
    free(line);
    fclose(f);
    return rc;
}
