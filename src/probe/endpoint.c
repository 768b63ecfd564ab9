/*
 * endpoint: everything probe asks a server: the fingerprint (/v1/models,
 * sglang's /get_server_info, vLLM's /version, llama.cpp's /props, whatever
 * answers), token counts from /tokenize (vLLM's request shape: `model`,
 * `messages`, `add_generation_prompt` -> `count`), and chat completions
 * with bounded retries. Headers may carry keys: they go to libcurl and
 * nowhere else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"
#include "probe/vary.h"

static void tok_cache_free(struct probe_tok_cache *tc);

void probe_endpoint_init(struct probe_endpoint *e, const char *url)
{
    memset(e, 0, sizeof(*e));
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n >= 3 && !strncmp(url + n - 3, "/v1", 3))
        n -= 3;
    while (n > 0 && url[n - 1] == '/')
        n--;
    e->url = xstrndup(url, n);
    e->timeout_ms = 300000;
    e->retries = 3;
    e->backoff_ms = 500;
}

void probe_endpoint_release(struct probe_endpoint *e)
{
    tok_cache_free(e->tok_cache);
    free(e->url);
    free(e->model);
    json_decref(e->info);
    memset(e, 0, sizeof(*e));
}

static long short_timeout(const struct probe_endpoint *e)
{
    return e->timeout_ms > 0 && e->timeout_ms < 30000 ? e->timeout_ms : 30000;
}

/* Server info can echo the server's own arguments, keys included
 * (sglang's /get_server_info has api_key): such members are redacted. */
static void redact(json_t *j)
{
    static const char *const bad[] = {"key", "secret", "passw", "auth",
                                      "credential"};
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_array(j)) {
        json_array_foreach(j, i, v) redact(v);
        return;
    }
    if (!json_is_object(j))
        return;
    json_object_foreach(j, k, v)
    {
        bool hit = false;
        for (size_t b = 0; b < sizeof(bad) / sizeof(*bad); b++)
            if (strcasestr(k, bad[b]))
                hit = true;
        if (hit && !json_is_null(v))
            json_object_set_new(j, k, json_string("[redacted]"));
        else
            redact(v);
    }
}

/* GET base+path as JSON; NULL unless HTTP 200 with a JSON object. */
static json_t *get_json(struct probe_endpoint *e, struct http_client *c,
                        const char *path)
{
    char *url = xasprintf("%s%s", e->url, path);
    long status = 0;
    json_t *j = NULL;
    struct diag d;
    int r =
        http_json(c, url, NULL, e->headers, short_timeout(e), &status, &j, &d);
    free(url);
    if (r || status != 200 || !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    redact(j);
    return j;
}

static unsigned json_uint(const json_t *j)
{
    return json_is_integer(j) && json_integer_value(j) > 0
               ? (unsigned)json_integer_value(j)
               : 0;
}

static int read_models(struct probe_endpoint *e, json_t *models,
                       const char *url, struct diag *d)
{
    json_t *data = json_object_get(models, "data");
    if (!json_is_array(data) || !json_array_size(data))
        return diag_set(d, EPROTO, "'%s' lists no model; pass --model NAME",
                        url);
    json_t *pick = json_array_get(data, 0);
    if (e->model) {
        size_t i;
        json_t *m;
        json_array_foreach(data, i, m)
        {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (id && !strcmp(id, e->model))
                pick = m;
        }
    } else {
        const char *id = json_string_value(json_object_get(pick, "id"));
        if (!id)
            return diag_set(
                d, EPROTO, "'%s': data[0] has no 'id'; pass --model NAME", url);
        e->model = xstrdup(id);
    }
    e->max_model_len = json_uint(json_object_get(pick, "max_model_len"));
    if (!e->max_model_len)
        e->max_model_len = json_uint(json_object_get(pick, "context_length"));
    return 0;
}

static void fingerprint_hash(struct probe_endpoint *e)
{
    json_t *si = json_object_get(e->info, "get_server_info");
    json_t *ver = json_object_get(e->info, "version");
    char *v = ver ? json_dumps(ver, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    const char *mp = json_string_value(json_object_get(si, "model_path"));
    char *s = xasprintf("%s|%s|%u|%s|%s", e->url, e->model ? e->model : "",
                        e->max_model_len, v ? v : "", mp ? mp : "");
    hash_hex(hash64(s, strlen(s), 0x6670ULL), e->info_fp);
    memcpy(e->fp, e->info_fp, sizeof(e->fp));
    free(s);
    free(v);
}

int probe_endpoint_fingerprint(struct probe_endpoint *e, struct http_client *c,
                               struct diag *d)
{
    char *url = xasprintf("%s/v1/models", e->url);
    long status = 0;
    json_t *models = NULL;
    int r = http_json(c, url, NULL, e->headers, short_timeout(e), &status,
                      &models, d);
    if (r == -EBADMSG) {
        diag_prefix(d, "is --endpoint the base URL of an OpenAI-compatible "
                       "server?");
        goto out;
    }
    if (r)
        goto out;
    if (status != 200) {
        const char *m = json_string_value(
            json_object_get(json_object_get(models, "error"), "message"));
        r = diag_set(d, EPROTO, "'%s' answered HTTP %ld%s%s%s", url, status,
                     m ? ": " : "", m ? m : "",
                     status == 401 || status == 403
                         ? " (check --api-key or $OPENAI_API_KEY)"
                         : "");
        goto out;
    }
    r = read_models(e, models, url, d);
    if (r)
        goto out;
    json_decref(e->info);
    e->info = json_object();
    redact(models);
    json_object_set(e->info, "models", models);
    static const char *const extra[] = {"/get_server_info", "/version",
                                        "/props"};
    for (size_t i = 0; i < 3; i++) {
        json_t *j = get_json(e, c, extra[i]);
        if (j)
            json_object_set_new(e->info, extra[i] + 1, j);
    }
    if (!e->max_model_len) {
        json_t *si = json_object_get(e->info, "get_server_info");
        json_t *pr = json_object_get(e->info, "props");
        e->max_model_len = json_uint(json_object_get(si, "context_length"));
        if (!e->max_model_len)
            e->max_model_len = json_uint(json_object_get(
                json_object_get(pr, "default_generation_settings"), "n_ctx"));
    }
    fingerprint_hash(e);
out:
    json_decref(models);
    free(url);
    return r;
}

/* See probe.h. Scans instead of parsing: the token list can be a
 * megabyte. */
int probe_scan_count(const char *s, size_t len, unsigned *count)
{
    const char *p = strstr(s, "\"count\"");
    if (p) {
        p += 7;
        while (*p == ' ' || *p == ':' || *p == '\n' || *p == '\t')
            p++;
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end != p) {
            *count = (unsigned)v;
            return 0;
        }
    }
    p = strstr(s, "\"tokens\"");
    if (!p || !(p = strchr(p, '[')))
        return -ENOTSUP;
    unsigned n = 0;
    bool any = false;
    for (p++; p < s + len && *p != ']'; p++) {
        if (*p == ',')
            n++;
        else if (*p != ' ' && *p != '\n')
            any = true;
        if (*p == '{' || *p == '"')
            return -ENOTSUP;
    }
    *count = any ? n + 1 : 0;
    return 0;
}

/* The /tokenize answers of a run by the hash of the request body: the
 * same text is counted for several cases (the turns a case's sizing
 * counted once more turn by turn when it lost context, the calibration's
 * short texts, turns that cases share), and each is posted once. A full
 * table overwrites; FIDELITY_PROBE_TOKENIZE_CACHE=off turns it off (to
 * measure it: bench/probe.sh). */
#define TOK_SLOTS 8192
#define TOK_PROBES 8

struct probe_tok_cache {
    pthread_mutex_t lock;
    uint64_t key[TOK_SLOTS]; /* 0: empty */
    unsigned count[TOK_SLOTS];
};

static pthread_mutex_t tok_cache_init = PTHREAD_MUTEX_INITIALIZER;

static void tok_cache_free(struct probe_tok_cache *tc)
{
    if (tc)
        pthread_mutex_destroy(&tc->lock);
    free(tc);
}

static struct probe_tok_cache *tok_cache(struct probe_endpoint *e)
{
    const char *off = getenv("FIDELITY_PROBE_TOKENIZE_CACHE");
    if (off && !strcmp(off, "off"))
        return NULL;
    pthread_mutex_lock(&tok_cache_init);
    if (!e->tok_cache) {
        e->tok_cache = xcalloc(1, sizeof(*e->tok_cache));
        pthread_mutex_init(&e->tok_cache->lock, NULL);
    }
    pthread_mutex_unlock(&tok_cache_init);
    return e->tok_cache;
}

/* Looks key up (found: true, *count set) or, with store, puts it. */
static bool tok_cache_at(struct probe_tok_cache *tc, uint64_t key,
                         unsigned *count, bool store)
{
    bool hit = false;
    key |= 1;
    pthread_mutex_lock(&tc->lock);
    size_t at = key % TOK_SLOTS;
    for (size_t i = 0; i < TOK_PROBES; i++) {
        size_t j = (at + i) % TOK_SLOTS;
        if (tc->key[j] == key || (store && !tc->key[j])) {
            hit = tc->key[j] == key;
            at = j;
            break;
        }
    }
    if (store) {
        tc->key[at] = key;
        tc->count[at] = *count;
    } else if (hit) {
        *count = tc->count[at];
    }
    pthread_mutex_unlock(&tc->lock);
    return hit;
}

/* POSTs the JSON text (tlen bytes, freed here) to /tokenize and reads
 * the count, or takes it from the run's cache. */
static int post_tokenize_text(struct probe_endpoint *e, struct http_client *c,
                              char *text, size_t tlen, unsigned *count,
                              struct diag *d)
{
    struct probe_tok_cache *tc = tok_cache(e);
    uint64_t key = tc ? hash64(text, tlen, 0x70c) : 0;
    if (tc && tok_cache_at(tc, key, count, false)) {
        free(text);
        return 0;
    }
    char *url = xasprintf("%s/tokenize", e->url);
    const char *hdrs[HTTP_JSON_HEADERS_MAX];
    http_json_headers(hdrs, e->headers);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = text,
                           .body_len = tlen,
                           .headers = hdrs,
                           .timeout_ms = e->timeout_ms};
    struct http_resp resp;
    http_resp_init(&resp);
    int r = http_do(c, &req, &resp, d);
    if (r)
        goto out;
    if (resp.status != 200) {
        r = diag_set(d, ENOTSUP, "'%s' answered HTTP %ld", url, resp.status);
        goto out;
    }
    r = probe_scan_count(buf_str(&resp.body), resp.body.len, count);
    if (r)
        diag_set(d, ENOTSUP, "'%s' answered without 'count' or 'tokens'", url);
    else if (tc)
        tok_cache_at(tc, key, count, true);
out:
    http_resp_release(&resp);
    free(url);
    free(text);
    return r;
}

/* POSTs body (consumed) to /tokenize and reads the count. */
static int post_tokenize(struct probe_endpoint *e, struct http_client *c,
                         json_t *body, size_t hint, unsigned *count,
                         struct diag *d)
{
    size_t tlen;
    char *text = probe_json_dump(body, hint, &tlen);
    json_decref(body);
    return post_tokenize_text(e, c, text, tlen, count, d);
}

int probe_tokenize(struct probe_endpoint *e, struct http_client *c,
                   const json_t *messages, const json_t *tools, size_t hint,
                   unsigned *count, struct diag *d)
{
    json_t *body = json_object();
    json_object_set_new(body, "model", json_string(e->model ? e->model : ""));
    json_object_set(body, "messages", (json_t *)messages);
    json_object_set_new(body, "add_generation_prompt", json_true());
    if (tools)
        json_object_set(body, "tools", (json_t *)tools);
    return post_tokenize(e, c, body, hint, count, d);
}

int probe_tokenize_text(struct probe_endpoint *e, struct http_client *c,
                        const char *text, size_t len, unsigned *count,
                        struct diag *d)
{
    /* written directly: the text of a long case is half a megabyte */
    struct buf b = BUF_INIT;
    const char *model = e->model ? e->model : "";
    buf_grow(&b, len + len / 16 + strlen(model) + 64);
    buf_adds(&b, "{\"model\":");
    probe_json_put_string(&b, model, strlen(model));
    buf_adds(&b, ",\"prompt\":");
    probe_json_put_string(&b, text, len);
    buf_adds(&b, ",\"add_special_tokens\":false}");
    size_t tlen;
    char *body = buf_detach(&b, &tlen);
    return post_tokenize_text(e, c, body, tlen, count, d);
}

void probe_reply_release(struct probe_reply *r)
{
    free(r->content);
    free(r->reasoning);
    json_decref(r->message);
    memset(r, 0, sizeof(*r));
}

json_t *probe_chat_body(const struct probe_endpoint *e,
                        const struct probe_case *pc, unsigned max_tokens)
{
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(e->model ? e->model : ""));
    json_object_set(b, "messages", pc->messages);
    json_object_set_new(b, "max_tokens", json_integer(max_tokens));
    json_object_set_new(b, "temperature", json_real(pc->spec.temperature));
    json_object_set_new(b, "seed",
                        json_integer((json_int_t)(pc->spec.seed & 0x7fffffff)));
    if (pc->tools)
        json_object_set(b, "tools", pc->tools);
    if (e->extra_body)
        json_object_update(b, e->extra_body);
    if (pc->spec.vary)
        probe_vary_apply(b, pc->spec.vary);
    return b;
}

static void sleep_ms(unsigned ms, volatile sig_atomic_t *stop)
{
    while (ms > 0 && !(stop && *stop)) {
        unsigned step = ms < 50 ? ms : 50;
        struct timespec ts = {0, (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static char *dup_str(const json_t *j)
{
    const char *s = json_string_value(j);
    return s ? xstrdup(s) : NULL;
}

/* Reads a 200 answer; 0, or -EBADMSG with r->error set. */
static int parse_answer(const struct http_resp *resp, struct probe_reply *r)
{
    json_error_t jerr;
    json_t *j = json_loadb(buf_str(&resp->body), resp->body.len, 0, &jerr);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *m = json_object_get(ch, "message");
    if (!json_is_object(m)) {
        snprintf(r->error, sizeof(r->error), "%s",
                 j ? "answer has no choices[0].message" : "answer is not JSON");
        json_decref(j);
        return -EBADMSG;
    }
    r->message = json_incref(m);
    r->content = dup_str(json_object_get(m, "content"));
    r->reasoning = dup_str(json_object_get(m, "reasoning_content"));
    if (!r->reasoning)
        r->reasoning = dup_str(json_object_get(m, "reasoning"));
    snprintf(r->finish, sizeof(r->finish), "%s",
             json_string_value(json_object_get(ch, "finish_reason"))
                 ? json_string_value(json_object_get(ch, "finish_reason"))
                 : "");
    json_t *pt = json_object_get(json_object_get(j, "usage"), "prompt_tokens");
    r->prompt_tokens = json_is_integer(pt) ? (long)json_integer_value(pt) : -1;
    json_t *ct =
        json_object_get(json_object_get(j, "usage"), "completion_tokens");
    r->completion_tokens =
        json_is_integer(ct) ? (long)json_integer_value(ct) : -1;
    json_decref(j);
    return 0;
}

static void error_message(const struct http_resp *resp, struct probe_reply *r)
{
    json_t *j = json_loadb(buf_str(&resp->body), resp->body.len, 0, NULL);
    const char *m = json_string_value(
        json_object_get(json_object_get(j, "error"), "message"));
    if (!m)
        m = json_string_value(json_object_get(j, "detail"));
    snprintf(r->error, sizeof(r->error), "HTTP %ld%s%.200s", resp->status,
             m ? ": " : "", m ? m : "");
    json_decref(j);
}

int probe_chat(struct probe_endpoint *e, struct http_client *c,
               const struct probe_case *pc, unsigned max_tokens,
               struct probe_reply *r, volatile sig_atomic_t *stop)
{
    json_t *body = probe_chat_body(e, pc, max_tokens);
    size_t tlen;
    char *text = probe_json_dump(body, pc->chars, &tlen);
    json_decref(body);
    char *url = xasprintf("%s/v1/chat/completions", e->url);
    const char *hdrs[HTTP_JSON_HEADERS_MAX];
    http_json_headers(hdrs, e->headers);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = text,
                           .body_len = tlen,
                           .headers = hdrs,
                           .timeout_ms = e->timeout_ms,
                           .max_body = 16u << 20};
    struct http_resp resp;
    struct diag d;
    int ret = -EIO;
    unsigned delay = e->backoff_ms;

    memset(r, 0, sizeof(*r));
    r->prompt_tokens = -1;
    r->completion_tokens = -1;
    http_resp_init(&resp);
    for (unsigned a = 0; a <= e->retries; a++) {
        if (a) {
            sleep_ms(delay, stop);
            delay *= 2;
        }
        r->attempts = a + 1;
        int hr = http_do(c, &req, &resp, &d);
        r->latency = resp.t_total;
        r->status = hr ? 0 : resp.status;
        if (hr) {
            r->err = hr;
            snprintf(r->error, sizeof(r->error), "%s", d.msg);
            ret = hr;
            if (hr == -ENOBUFS)
                break;
            continue;
        }
        if (resp.status == 200) {
            ret = parse_answer(&resp, r);
            r->err = ret;
            break;
        }
        error_message(&resp, r);
        ret = -EPROTO;
        r->err = ret;
        if (resp.status != 429 && resp.status < 500)
            break;
    }
    http_resp_release(&resp);
    free(url);
    free(text);
    return ret;
}
