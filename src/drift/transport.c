/*
 * drift transport: HTTP requests to one side of a drift comparison, with
 * its API key, headers and extra body; dialect detection. Contract in
 * transport.h.
 */
#include "drift/transport.h"
#include "drift/tape.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/url.h"
#include "core/xalloc.h"
#include "http/client.h"

void drift_side_init(struct drift_side *s, const char *label)
{
    memset(s, 0, sizeof(*s));
    s->label = label;
    s->top_k = 20;
    s->timeout_ms = 600000;
}

void drift_side_release(struct drift_side *s)
{
    free(s->url);
    free(s->model);
    if (s->api_key)
        memset(s->api_key, 0, strlen(s->api_key));
    free(s->api_key);
    for (size_t i = 0; i < s->n_headers; i++)
        free(s->headers[i]);
    json_decref(s->extra_body);
    json_decref(s->fingerprint);
    http_client_free(s->http);
    const char *label = s->label;
    memset(s, 0, sizeof(*s));
    s->label = label;
}

int drift_side_set_url(struct drift_side *s, const char *url, struct diag *d)
{
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
        return diag_set(d, EINVAL,
                        "%s URL '%s' must start with http:// or https://",
                        s->label, url);
    size_t n = strlen(url);
    while (n > 8 && url[n - 1] == '/')
        n--;
    free(s->url);
    s->url = xstrndup(url, n);
    return 0;
}

/* The host and port of url (after the scheme and any userinfo): *len
 * bytes from the returned pointer. */
static const char *authority(const char *url, size_t *len)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    const char *at = memchr(p, '@', n);
    while (at) {
        n -= (size_t)(at + 1 - p);
        p = at + 1;
        at = memchr(p, '@', n);
    }
    *len = n;
    return p;
}

bool drift_sides_share_server(const struct drift_side *a,
                              const struct drift_side *b)
{
    if (!a->url || !b->url)
        return true; /* unknown: the safe answer, one at a time */
    size_t na, nb;
    const char *ha = authority(a->url, &na), *hb = authority(b->url, &nb);
    return na == nb && !strncasecmp(ha, hb, na) &&
           !strncmp(a->url, b->url, 5); /* "https" or "http:" alike */
}

int drift_side_add_header(struct drift_side *s, const char *h, struct diag *d)
{
    if (!strchr(h, ':'))
        return diag_set(d, EINVAL, "header '%s' is not 'Name: value'", h);
    if (s->n_headers >= DRIFT_HEADERS_MAX)
        return diag_set(d, E2BIG, "more than %d headers for the %s",
                        DRIFT_HEADERS_MAX, s->label);
    s->headers[s->n_headers++] = xstrdup(h);
    return 0;
}

void drift_side_clone(struct drift_side *dst, const struct drift_side *src)
{
    drift_side_init(dst, src->label);
    dst->url = src->url ? xstrdup(src->url) : NULL;
    dst->model = src->model ? xstrdup(src->model) : NULL;
    dst->api_key = src->api_key ? xstrdup(src->api_key) : NULL;
    for (size_t i = 0; i < src->n_headers; i++)
        dst->headers[dst->n_headers++] = xstrdup(src->headers[i]);
    dst->extra_body = src->extra_body ? json_deep_copy(src->extra_body) : NULL;
    dst->dialect = src->dialect;
    dst->gen_dialect = src->gen_dialect;
    dst->top_k = src->top_k;
    dst->timeout_ms = src->timeout_ms;
    dst->tape = src->tape;
}

/* The server's error message from an OpenAI- or TGI-shaped error body. */
static const char *err_text(const json_t *j)
{
    const json_t *e = json_object_get(j, "error");
    if (json_is_string(e))
        return json_string_value(e);
    const json_t *m = json_object_get(e, "message");
    if (json_is_string(m))
        return json_string_value(m);
    m = json_object_get(j, "message");
    if (json_is_string(m))
        return json_string_value(m);
    m = json_object_get(j, "detail");
    return json_is_string(m) ? json_string_value(m) : "";
}

/* Replaces the side's URL in d's message by its masked form, so a
 * user:password part never reaches the terminal. */
static void redact_msg(const struct drift_side *s, struct diag *d)
{
    if (d && s->url)
        url_mask_in(d->msg, sizeof(d->msg), s->url);
}

/* Sends one request to path with the side's headers (Content-Type:
 * application/json first when json), its API key as a Bearer token (the
 * header line wiped after use) and text as the body (none when NULL); the
 * answer, whatever its status, in resp. On a transport error d names the
 * side, with the URL masked. */
static int send_req(struct drift_side *s, const char *method, const char *path,
                    bool json, const char *text, struct http_resp *resp,
                    struct diag *d)
{
    const char *hdrs[DRIFT_HEADERS_MAX + 4];
    size_t nh = 0;
    char *auth = NULL;

    if (drift_tape_is_replay(s->tape)) {
        s->requests++;
        int ret = drift_tape_get(s->tape, method, path, text, &resp->status,
                                 &resp->body, d);
        if (ret)
            diag_prefix(d, "%s", s->label);
        return ret;
    }
    if (!s->http)
        s->http = http_client_new();
    if (json)
        hdrs[nh++] = "Content-Type: application/json";
    if (s->api_key) {
        auth = xasprintf("Authorization: Bearer %s", s->api_key);
        hdrs[nh++] = auth;
    }
    for (size_t i = 0; i < s->n_headers; i++)
        hdrs[nh++] = s->headers[i];
    hdrs[nh] = NULL;
    char *url = xasprintf("%s%s", s->url, path);
    struct http_req req = {.method = method,
                           .url = url,
                           .headers = hdrs,
                           .timeout_ms = s->timeout_ms};
    if (text) {
        req.body = text;
        req.body_len = strlen(text);
    }
    s->requests++;
    int ret = http_do(s->http, &req, resp, d);
    if (ret) {
        diag_prefix(d, "%s", s->label);
        redact_msg(s, d);
    } else if (s->tape) {
        drift_tape_put(s->tape, method, path, text, resp->status,
                       resp->body.data, resp->body.len);
    }
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    free(url);
    return ret;
}

/* Sends body (GET when NULL) to path; on 0 the answer is in resp (2xx).
 * A non-2xx status gives -EPROTO with the server's message. */
static int call_raw(struct drift_side *s, const char *path, json_t *body,
                    struct http_resp *resp, struct diag *d)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    int ret = send_req(s, body ? "POST" : "GET", path, true, text, resp, d);
    if (!ret && (resp->status < 200 || resp->status > 299)) {
        char *url = xasprintf("%s%s", s->url, path);
        json_error_t jerr;
        char line[sizeof(d->msg)];
        json_t *e = json_loadb(resp->body.data ? resp->body.data : "",
                               resp->body.len, 0, &jerr);
        if (e)
            ret = diag_set(d, EPROTO, "%s: %s answered HTTP %ld: %.200s",
                           s->label, url, resp->status, err_text(e));
        else
            ret = diag_set(
                d, EPROTO, "%s: %s", s->label,
                http_resp_describe(resp, url, "an error", line, sizeof(line)));
        json_decref(e);
        free(url);
        redact_msg(s, d);
    }
    free(text);
    return ret;
}

int drift_side_send_plain(struct drift_side *s, const char *method,
                          const char *path, long *status, struct buf *body,
                          struct diag *d)
{
    struct http_resp resp;
    http_resp_init(&resp);
    int ret = send_req(s, method, path, false, NULL, &resp, d);
    *status = resp.status;
    if (body)
        buf_add(body, resp.body.data ? resp.body.data : "", resp.body.len);
    http_resp_release(&resp);
    return ret;
}

int drift_side_call(struct drift_side *s, const char *path, json_t *body,
                    json_t **out, long *status, struct diag *d)
{
    struct http_resp resp;
    json_error_t jerr;
    http_resp_init(&resp);
    *out = NULL;
    int ret = call_raw(s, path, body, &resp, d);
    *status = resp.status;
    if (!ret) {
        drift_json_sanitize(resp.body.data, resp.body.len);
        *out = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len,
                          0, &jerr);
        if (!*out) {
            char line[sizeof(d->msg)], *url = xasprintf("%s%s", s->url, path);
            ret = diag_set(
                d, EBADMSG, "%s: %s", s->label,
                http_resp_describe(&resp, url, "not JSON", line, sizeof(line)));
            free(url);
            redact_msg(s, d);
        }
    }
    http_resp_release(&resp);
    return ret;
}

int drift_side_fingerprint(struct drift_side *s, struct diag *d)
{
    static const char *const paths[] = {"/v1/models", "/version",
                                        "/get_server_info"};
    json_t *fp = json_object();
    int reached = 0, ret = 0;
    char *url = url_mask(s->url);
    json_object_set_new(fp, "url", json_string(url));
    free(url);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        json_t *out;
        long st;
        int r = drift_side_call(s, paths[i], NULL, &out, &st, d);
        if (r == -ECONNREFUSED || r == -ETIMEDOUT) {
            ret = r;
            break;
        }
        reached = 1;
        if (!r)
            json_object_set_new(fp, paths[i], out);
    }
    json_decref(s->fingerprint);
    s->fingerprint = fp;
    if (!reached)
        return ret ? ret : -ECONNREFUSED;
    diag_set(d, 0, "%s", "");
    return 0;
}

/* A positive integer field k of o, or 0. */
static long pos_int(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) && json_integer_value(v) > 0
               ? (long)json_integer_value(v)
               : 0;
}

long drift_side_context_len(const struct drift_side *s, const char **field)
{
    static const char *const keys[] = {"max_model_len", "context_length",
                                       "n_ctx"};
    const json_t *fp = s->fingerprint;
    const json_t *m = json_array_get(
        json_object_get(json_object_get(fp, "/v1/models"), "data"), 0);
    const json_t *info = json_object_get(fp, "/get_server_info");
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        long v = pos_int(m, keys[k]);
        if (!v)
            v = pos_int(info, keys[k]);
        if (v) {
            if (field)
                *field = keys[k];
            return v;
        }
    }
    return 0;
}

static json_t *ids_json(const uint32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

int drift_side_request(struct drift_side *s, struct drift_req *r, json_t **out,
                       struct diag *d)
{
    char *text = NULL;
    long st;
    int ret;

    *out = NULL;
    r->model = s->model;
    r->top_k = s->top_k;
    r->extra_body = s->extra_body;
    if (s->dialect == DRIFT_DIALECT_TGI && !r->text) {
        ret = drift_side_detokenize(s, r->ids, r->n, &text, d);
        if (ret)
            return ret;
        r->text = text;
    }
    json_t *body = drift_request_build(s->dialect, r);
    ret = drift_side_call(s, drift_dialect_path(s->dialect), body, out, &st, d);
    json_decref(body);
    if (text) {
        r->text = NULL;
        free(text);
    }
    return ret;
}

int drift_side_fetch_prompt(struct drift_side *s, const uint32_t *ids, size_t n,
                            char **text, size_t *len, struct diag *d)
{
    struct drift_req r = {
        .ids = ids, .n = n, .max_new = 1, .prompt_logprobs = true};
    char *prompt = NULL;
    struct http_resp resp;
    int ret;

    *text = NULL;
    *len = 0;
    r.model = s->model;
    r.top_k = s->top_k;
    r.extra_body = s->extra_body;
    if (s->dialect == DRIFT_DIALECT_SGLANG && s->extra_ids) {
        r.extra_ids = s->extra_ids;
        r.n_extra = s->n_extra_ids;
    }
    if (s->dialect == DRIFT_DIALECT_TGI) {
        ret = drift_side_detokenize(s, ids, n, &prompt, d);
        if (ret)
            return ret;
        r.text = prompt;
    }
    json_t *body = drift_request_build(s->dialect, &r);
    http_resp_init(&resp);
    ret = call_raw(s, drift_dialect_path(s->dialect), body, &resp, d);
    json_decref(body);
    free(prompt);
    if (!ret)
        *text = buf_detach(&resp.body, len);
    http_resp_release(&resp);
    return ret;
}

int drift_side_parse_prompt(const struct drift_side *s, const uint32_t *ids,
                            size_t n, char *text, size_t len, bool lent,
                            struct drift_lp *lp, struct diag *d)
{
    struct drift_req r = {.ids = ids,
                          .n = n,
                          .top_k = s->top_k,
                          .max_new = 1,
                          .prompt_logprobs = true};
    int ret = lent ? drift_parse_prompt_lent(s->dialect, text, len, &r, lp, d)
                   : drift_parse_prompt_text(s->dialect, text, len, &r, lp, d);
    if (!ret)
        ret = drift_lp_check(lp, d); /* NaN or infinities: its fault */
    if (ret)
        diag_prefix(d, "%s (%s dialect)", s->label,
                    drift_dialect_name(s->dialect));
    return ret;
}

int drift_side_score(struct drift_side *s, const uint32_t *ids, size_t n,
                     struct drift_lp *lp, struct diag *d)
{
    char *text;
    size_t len;
    int ret = drift_side_fetch_prompt(s, ids, n, &text, &len, d);
    if (!ret)
        ret = drift_side_parse_prompt(s, ids, n, text, len, false, lp, d);
    free(text);
    return ret;
}

/* Cached prompt tokens an answer reports: the OpenAI usage field
 * (usage.prompt_tokens_details.cached_tokens) or sglang's
 * meta_info.cached_tokens; -1 when neither is there. */
static long cached_in(const json_t *a)
{
    const json_t *u = json_object_get(
        json_object_get(json_object_get(a, "usage"), "prompt_tokens_details"),
        "cached_tokens");
    if (!json_is_integer(u))
        u = json_object_get(json_object_get(a, "meta_info"), "cached_tokens");
    return json_is_integer(u) ? (long)json_integer_value(u) : -1;
}

/* One generation request in dialect dl; *cached and *sent as in
 * drift_side_generate_seen. */
static int generate_in(struct drift_side *s, enum drift_dialect dl,
                       const uint32_t *ids, size_t n, unsigned max_new,
                       struct drift_lp *lp, long *cached, unsigned *sent,
                       struct diag *d)
{
    struct drift_req r = {.ids = ids, .n = n, .max_new = max_new};
    enum drift_dialect keep = s->dialect;
    json_t *out;
    s->dialect = dl;
    if (sent)
        (*sent)++;
    int ret = drift_side_request(s, &r, &out, d);
    if (!ret) {
        ret = drift_parse_decode(dl, out, lp, d);
        if (!ret)
            ret = drift_lp_check(lp, d);
        if (ret)
            diag_prefix(d, "%s generation (%s dialect)", s->label,
                        drift_dialect_name(dl));
    }
    if (!ret && cached)
        *cached = cached_in(out);
    s->dialect = keep;
    json_decref(out);
    return ret;
}

int drift_side_generate(struct drift_side *s, const uint32_t *ids, size_t n,
                        unsigned max_new, struct drift_lp *lp, struct diag *d)
{
    return drift_side_generate_seen(s, ids, n, max_new, lp, NULL, NULL, d);
}

int drift_side_generate_seen(struct drift_side *s, const uint32_t *ids,
                             size_t n, unsigned max_new, struct drift_lp *lp,
                             long *cached, unsigned *sent, struct diag *d)
{
    static const enum drift_dialect with_ids[] = {DRIFT_DIALECT_SGLANG,
                                                  DRIFT_DIALECT_TGI};
    enum drift_dialect dl = s->gen_dialect ? s->gen_dialect : s->dialect;
    /* a server without prompt logprobs still generates like OpenAI */
    if (dl == DRIFT_DIALECT_NONE || dl == DRIFT_DIALECT_AUTO)
        dl = DRIFT_DIALECT_ECHO;
    int ret = generate_in(s, dl, ids, n, max_new, lp, cached, sent, d);
    if (ret != -ENOKEY || s->gen_dialect)
        return ret;
    /* OpenAI completions may name generated tokens only by text: ask the
     * dialects that return ids, and remember the one that works */
    char first[sizeof(d->msg)];
    snprintf(first, sizeof(first), "%s", d->msg);
    for (size_t i = 0; i < 2; i++) {
        ret = generate_in(s, with_ids[i], ids, n, max_new, lp, cached, sent, d);
        if (!ret) {
            s->gen_dialect = with_ids[i];
            return 0;
        }
        if (ret == -ECONNREFUSED || ret == -ETIMEDOUT)
            return ret;
    }
    return diag_set(d, ENOKEY, "%.500s", first);
}

/* One detection attempt: does dialect dl return prompt logprobs? */
static int try_dialect(struct drift_side *s, enum drift_dialect dl,
                       const uint32_t *probe, size_t n, struct diag *d)
{
    struct drift_lp lp;
    enum drift_dialect keep = s->dialect;
    s->dialect = dl;
    drift_lp_init(&lp);
    int ret = drift_side_score(s, probe, n, &lp, d);
    if (!ret && lp.n_returned < n)
        ret = diag_set(d, EBADMSG,
                       "%s (%s dialect) returned %u prompt positions of %zu",
                       s->label, drift_dialect_name(dl), lp.n_returned, n);
    if (!ret && n > 1 && !lp.valid[n - 1])
        ret = diag_set(d, EBADMSG,
                       "%s (%s dialect) gave no logprob for the last prompt "
                       "token",
                       s->label, drift_dialect_name(dl));
    drift_lp_release(&lp);
    s->dialect = keep;
    return ret;
}

int drift_side_detect(struct drift_side *s, const uint32_t *probe, size_t n,
                      struct diag *d)
{
    static const enum drift_dialect order[] = {
        DRIFT_DIALECT_VLLM, DRIFT_DIALECT_SGLANG, DRIFT_DIALECT_ECHO,
        DRIFT_DIALECT_TGI};
    char why[4][160];
    int ret;

    if (s->dialect != DRIFT_DIALECT_AUTO) {
        ret = try_dialect(s, s->dialect, probe, n, d);
        return ret;
    }
    for (size_t i = 0; i < 4; i++) {
        ret = try_dialect(s, order[i], probe, n, d);
        if (!ret) {
            s->dialect = order[i];
            return 0;
        }
        if (ret == -ECONNREFUSED || ret == -ETIMEDOUT)
            return ret;
        snprintf(why[i], sizeof(why[i]), "%s", d ? d->msg : "");
    }
    s->dialect = DRIFT_DIALECT_NONE;
    diag_set(d, ENOTSUP,
             "%s serves no prompt logprobs in any known dialect (vllm: %s; "
             "sglang: %s; echo: %s; tgi: %s)",
             s->label, why[0], why[1], why[2], why[3]);
    return 0;
}

int drift_side_tokenize(struct drift_side *s, const json_t *messages,
                        const char *prompt, uint32_t **ids, size_t *n,
                        struct diag *d)
{
    json_t *body = json_object(), *out;
    long st;
    if (s->model)
        json_object_set_new(body, "model", json_string(s->model));
    if (messages) {
        json_object_set(body, "messages", (json_t *)messages);
        json_object_set_new(body, "add_generation_prompt", json_false());
    } else {
        json_object_set_new(body, "prompt", json_string(prompt));
    }
    int ret = drift_side_call(s, "/tokenize", body, &out, &st, d);
    json_decref(body);
    if (ret)
        return ret;
    const json_t *t = json_object_get(out, "tokens");
    if (!json_is_array(t)) {
        json_decref(out);
        return diag_set(d, EBADMSG, "%s: /tokenize answer has no 'tokens'",
                        s->label);
    }
    *n = json_array_size(t);
    *ids = xmalloc((*n ? *n : 1) * sizeof(**ids));
    for (size_t i = 0; i < *n; i++) {
        const json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > UINT32_MAX) {
            free(*ids);
            *ids = NULL;
            json_decref(out);
            return diag_set(d, EBADMSG,
                            "%s: /tokenize token %zu is not a token id",
                            s->label, i);
        }
        (*ids)[i] = (uint32_t)json_integer_value(v);
    }
    json_decref(out);
    return 0;
}

int drift_side_detokenize(struct drift_side *s, const uint32_t *ids, size_t n,
                          char **text, struct diag *d)
{
    json_t *body = json_object(), *out;
    long st;
    if (s->model)
        json_object_set_new(body, "model", json_string(s->model));
    json_object_set_new(body, "tokens", ids_json(ids, n));
    int ret = drift_side_call(s, "/detokenize", body, &out, &st, d);
    json_decref(body);
    if (ret)
        return ret;
    const json_t *p = json_object_get(out, "prompt");
    if (!json_is_string(p)) {
        json_decref(out);
        return diag_set(d, EBADMSG,
                        "%s: /detokenize answer has no 'prompt' string",
                        s->label);
    }
    *text = xstrndup(json_string_value(p), json_string_length(p));
    json_decref(out);
    return 0;
}
