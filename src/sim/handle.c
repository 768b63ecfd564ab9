/*
 * handle: routing of simulator requests, the small endpoints, rate faults,
 * and the helpers in sim_int.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"
#include "core/utf8.h"
#include "core/xalloc.h"
#include "sim/sim_int.h"
#include "sim/tmpl.h"
#include "version.h"
#include "wire/jdump.h"

enum ep {
    EP_HEALTH,
    EP_MODELS,
    EP_VERSION,
    EP_SERVER_INFO,
    EP_CHAT,
    EP_COMPLETIONS,
    EP_GENERATE,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_CONFIG,
    EP_STATS,
    EP_FLUSH,
    EP_OTHER,
    EP_N
};

static const char *const ep_names[EP_N] = {
    "health",      "models",   "version",  "get_server_info", "chat",
    "completions", "generate", "tokenize", "detokenize",      "sim_config",
    "sim_stats",   "flush",    "other"};

void sim_init(struct sim *s, const struct sim_config *c)
{
    memset(s, 0, sizeof(*s));
    s->cfg = *c;
    s->initial = *c;
    buf_init(&s->last_chat, 0);
}

void sim_release(struct sim *s)
{
    buf_release(&s->last_chat);
    sim_cache_free(s->cache);
    s->cache = NULL;
}

void sim_resp_init(struct sim_resp *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->body, 0);
}

void sim_resp_release(struct sim_resp *r)
{
    buf_release(&r->body);
    for (size_t i = 0; i < r->nevents; i++)
        free(r->events[i]);
    free(r->events);
    r->events = NULL;
    r->nevents = 0;
}

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}

void sim_error(struct sim_resp *r, int status, const char *param,
               const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *type = status == 429   ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                       : status == 404 ? "not_found_error"
                                       : "invalid_request_error";
    json_t *e =
        json_pack("{s:{s:o,s:s,s:o,s:i}}", "error", "message",
                  sim_jstr(msg, strlen(msg)), "type", type, "param",
                  param ? json_string(param) : json_null(), "code", status);
    buf_reset(&r->body);
    char *text = json_dumps(e, JSON_COMPACT);
    buf_adds(&r->body, text);
    free(text);
    json_decref(e);
    r->status = status;
    r->reason = reason_of(status);
    r->stream = false;
}

void sim_dump(struct buf *b, const json_t *j)
{
    size_t len = b->len;
    if (jdump(b, j, false) == 0)
        return;
    /* jdump refuses only what the sim never builds (nesting past 2048,
     * non-finite reals); json_dumps then has the last word */
    b->len = len;
    char *text = json_dumps(j, JSON_COMPACT);
    buf_adds(b, text ? text : "null");
    free(text);
}

void sim_json(struct sim_resp *r, json_t *j)
{
    buf_reset(&r->body);
    sim_dump(&r->body, j);
    json_decref(j);
    r->status = 200;
    r->reason = "OK";
}

json_t *sim_body(const struct sim_req *rq, struct sim_resp *r)
{
    json_error_t e;
    json_t *j = json_loadb(rq->body ? rq->body : "", rq->len, 0, &e);
    if (!j) {
        if (json_error_code(&e) == json_error_invalid_utf8)
            sim_error(r, 400, NULL,
                      "request body is not valid UTF-8 (byte %d); send "
                      "UTF-8 encoded JSON",
                      e.position);
        else
            sim_error(r, 400, NULL,
                      "request body is not valid JSON: %s at line %d "
                      "column %d",
                      e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        sim_error(r, 400, NULL, "request body must be a JSON object");
        return NULL;
    }
    return j;
}

int sim_get_bool(json_t *o, const char *k, bool def, bool *out,
                 struct sim_resp *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        sim_error(r, 400, k, "'%s' must be a boolean", k);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

int sim_get_long(json_t *o, const char *k, long min, long max, long def,
                 long *out, struct sim_resp *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min ||
        json_integer_value(v) > max) {
        sim_error(r, 400, k, "'%s' must be an integer from %ld to %ld", k, min,
                  max);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

int sim_get_num(json_t *o, const char *k, double min, double max, double def,
                double *out, struct sim_resp *r)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || json_number_value(v) < min ||
        json_number_value(v) > max) {
        sim_error(r, 400, k, "'%s' must be a number from %g to %g", k, min,
                  max);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

/* Appends p[0..n) to b with each invalid UTF-8 byte and each NUL replaced
 * by U+FFFD. */
static void utf8_clean(struct buf *b, const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (k && !(k == 1 && u[i] == 0)) {
            buf_add(b, p + i, k);
            i += k;
        } else {
            buf_adds(b, "\xef\xbf\xbd");
            i++;
        }
    }
}

json_t *sim_jstr(const char *p, size_t n)
{
    struct buf b = BUF_INIT;
    utf8_clean(&b, p, n);
    json_t *j = json_stringn(buf_str(&b), b.len);
    buf_release(&b);
    return j ? j : json_string("");
}

void sim_dump_text(struct buf *b, const char *p, size_t n)
{
    struct buf t = BUF_INIT;
    utf8_clean(&t, p, n);
    jdump_string(b, buf_str(&t), t.len);
    buf_release(&t);
}

size_t sim_utf8_whole(const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = u[n - back];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t want = (c & 0xe0) == 0xc0   ? 2
                      : (c & 0xf0) == 0xe0 ? 3
                      : (c & 0xf8) == 0xf0 ? 4
                                           : 1;
        return want > back ? n - back : n;
    }
    return n;
}

json_t *sim_tok_json(int32_t id)
{
    char piece[16];
    size_t k = tok_piece(id, piece);
    return sim_jstr(piece, k);
}

int sim_get_ids(json_t *arr, const char *field, struct tok_vec *out,
                struct sim_resp *r)
{
    size_t i;
    json_t *v;
    if (!json_is_array(arr)) {
        sim_error(r, 400, field, "'%s' must be an array of token ids", field);
        return -1;
    }
    json_array_foreach(arr, i, v)
    {
        if (!json_is_integer(v) || !tok_is_valid(json_integer_value(v))) {
            sim_error(r, 400, field,
                      "'%s[%zu]' is not a token id (0-8 or 16-%d)", field, i,
                      TOK_VOCAB - 1);
            return -1;
        }
        tok_vec_push(out, (int32_t)json_integer_value(v));
    }
    return 0;
}

struct model_noise sim_noise(const struct sim *s, const struct sim_req *rq,
                             bool decode)
{
    const struct sim_config *c = &s->cfg;
    struct model_noise nz = {
        .sigma = decode ? c->decode_noise : sim_prefill_sigma(c),
        .growth = c->noise_growth,
        .from = (size_t)c->noise_from,
        .saturate = (size_t)c->noise_saturate,
        .scale = c->logit_scale,
        .seed = hash_mix2((uint64_t)c->seed, decode ? 2 : 1),
    };
    if (c->nondeterminism > 0) {
        nz.jitter = c->nondeterminism;
        nz.jitter_seed = hash_mix2(s->counter, 3);
    } else if (c->batch_variance > 0 && rq->batch > 1) {
        nz.jitter = c->batch_variance;
        nz.jitter_seed = hash_mix2(rq->batch, 4);
    }
    nz.warm_sigma = c->warm_noise;
    nz.warm_n = s->use.cached;
    nz.recomp_sigma = c->recompute_noise;
    nz.recomp_n = s->use.recomputed ? s->use.cached + s->use.recomputed : 0;
    nz.cache_seed = hash_mix2((uint64_t)c->seed, decode ? 6 : 5);
    return nz;
}

/* vLLM's wording (vllm/entrypoints/openai/serving_engine.py). */
int sim_fit_context(struct sim *s, struct tok_vec *toks, long max_new,
                    struct sim_resp *r)
{
    long limit = sim_config_limit(&s->cfg);
    long asked = (long)toks->n + max_new;
    if ((uint64_t)asked > s->longest)
        s->longest = (uint64_t)asked;
    if (asked > limit)
        s->over_context++;
    if (s->cfg.overflow == OVERFLOW_ERROR && (long)toks->n + max_new > limit) {
        sim_error(r, 400, "messages",
                  "This model's maximum context length is %ld tokens. "
                  "However, you requested %ld tokens (%zu in the messages, "
                  "%ld in the completion). Please reduce the length of the "
                  "messages or completion.",
                  limit, (long)toks->n + max_new, toks->n, max_new);
        return -1;
    }
    if ((long)toks->n > limit)
        tmpl_truncate(toks, (size_t)limit, s->cfg.overflow);
    return 0;
}

void sim_id(const struct sim *s, const char *prefix, char out[48])
{
    char hex[17];
    hash_hex(hash_mix64(s->counter ^ 0x6964ULL), hex);
    snprintf(out, 48, "%s-%s", prefix, hex);
}

static void h_health(struct sim *s, const struct sim_req *rq,
                     struct sim_resp *r)
{
    (void)s;
    (void)rq;
    sim_json(r, json_pack("{s:s}", "status", "ok"));
}

static void h_models(struct sim *s, const struct sim_req *rq,
                     struct sim_resp *r)
{
    (void)rq;
    sim_json(r,
             json_pack("{s:s,s:[{s:s,s:s,s:i,s:s,s:s,s:I}]}", "object", "list",
                       "data", "id", s->cfg.model, "object", "model", "created",
                       0, "owned_by", "fidelity", "root", s->cfg.model,
                       "max_model_len", (json_int_t)s->cfg.max_model_len));
}

static void h_version(struct sim *s, const struct sim_req *rq,
                      struct sim_resp *r)
{
    (void)s;
    (void)rq;
    sim_json(r,
             json_pack("{s:s}", "version", "fidelity-sim " FIDELITY_VERSION));
}

/* max_total_num_tokens is sglang's KV pool size, the cache's capacity;
 * page_size its block (sglang server args). */
static void h_server_info(struct sim *s, const struct sim_req *rq,
                          struct sim_resp *r)
{
    (void)rq;
    long pool = s->cfg.hide_faults ? s->cfg.max_model_len
                : s->cfg.cache_tokens >= s->cfg.cache_block
                    ? s->cfg.cache_tokens
                    : sim_config_limit(&s->cfg);
    sim_json(r,
             json_pack("{s:s,s:I,s:I,s:I,s:s,s:o}", "model_path", s->cfg.model,
                       "context_length", (json_int_t)s->cfg.max_model_len,
                       "max_total_num_tokens", (json_int_t)pool, "page_size",
                       (json_int_t)s->cfg.cache_block, "version",
                       "fidelity-sim " FIDELITY_VERSION, "sim_config",
                       sim_config_to_json(&s->cfg)));
}

/* The text sglang answers /flush_cache with, 200 or 400 alike. */
#define SIM_SGLANG_FLUSHED                                                     \
    "Cache flushed.\nPlease check backend logs for more details. (When "       \
    "there are running or waiting requests, the operation will not be "        \
    "performed.)\n"

/* sglang: GET or POST /flush_cache (sgl-project/sglang,
 * python/sglang/srt/entrypoints/http_server.py, flush_cache:
 * `Response(content="Cache flushed.\nPlease check backend logs ...",
 * status_code=200 if ret.success else HTTPStatus.BAD_REQUEST)`, a bare
 * Response, so no Content-Type). The scheduler refuses while requests run
 * or wait: then 400 with the same text, and the cache is kept. */
static void h_flush_sglang(struct sim *s, const struct sim_req *rq,
                           struct sim_resp *r)
{
    buf_reset(&r->body);
    buf_adds(&r->body, SIM_SGLANG_FLUSHED);
    r->ctype = "";
    if (rq->running) {
        r->status = 400;
        r->reason = "Bad Request";
        return;
    }
    sim_cache_flush(s);
    s->flushes++;
    r->status = 200;
    r->reason = "OK";
}

/* vLLM: POST /reset_prefix_cache, only with VLLM_SERVER_DEV_MODE=1
 * (vllm-project/vllm, vllm/entrypoints/openai/api_server.py,
 * reset_prefix_cache: `return Response(status_code=200)`): an empty 200,
 * no Content-Type. Newer releases moved it under vllm/entrypoints/serve
 * and may answer {"success": false}; drift's cache arm reads both. */
static void h_flush_vllm(struct sim *s, const struct sim_req *rq,
                         struct sim_resp *r)
{
    (void)rq;
    sim_cache_flush(s);
    s->flushes++;
    buf_reset(&r->body);
    r->ctype = "";
    r->status = 200;
    r->reason = "OK";
}

static void h_config(struct sim *s, const struct sim_req *rq,
                     struct sim_resp *r)
{
    if (!strcmp(rq->method, "POST")) {
        struct diag d = {""};
        json_t *b = sim_body(rq, r);
        if (!b)
            return;
        if (json_is_true(json_object_get(b, "reset"))) {
            s->cfg = s->initial;
            sim_cache_flush(s);
        }
        if (sim_config_apply_json(&s->cfg, b, &d)) {
            json_decref(b);
            sim_error(r, 400, NULL, "%s", d.msg);
            return;
        }
        json_decref(b);
    }
    sim_json(r, sim_config_to_json(&s->cfg));
}

static void h_stats(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    (void)rq;
    json_t *by = json_object();
    for (int i = 0; i < EP_N; i++)
        json_object_set_new(by, ep_names[i],
                            json_integer((json_int_t)s->stats[i]));
    sim_json(r,
             json_pack("{s:o,s:I,s:I,s:{s:I,s:I,s:I},s:{s:I,s:I,s:I}}",
                       "requests", by, "model_requests", (json_int_t)s->counter,
                       "errors_injected", (json_int_t)s->injected, "cache",
                       "blocks", (json_int_t)sim_cache_blocks(s),
                       "cached_tokens", (json_int_t)s->cached_total, "flushes",
                       (json_int_t)s->flushes, "context", "limit",
                       (json_int_t)sim_config_limit(&s->cfg), "longest",
                       (json_int_t)s->longest, "over",
                       (json_int_t)s->over_context));
}

/* The last chat request's body as received: what a client really sent
 * (tests read the conversation at the server's side). */
static void h_last(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    (void)rq;
    json_t *j = s->last_chat.len
                    ? json_loadb(s->last_chat.data, s->last_chat.len, 0, NULL)
                    : NULL;
    if (!j) {
        sim_error(r, 404, NULL, "no chat request yet");
        return;
    }
    sim_json(r, j);
}

struct route {
    const char *path;
    const char *method; /* "GET", "POST" or "*" */
    enum ep ep;
    void (*fn)(struct sim *, const struct sim_req *, struct sim_resp *);
};

static const struct route routes[] = {
    {"/health", "GET", EP_HEALTH, h_health},
    {"/v1/models", "GET", EP_MODELS, h_models},
    {"/version", "GET", EP_VERSION, h_version},
    {"/get_server_info", "GET", EP_SERVER_INFO, h_server_info},
    {"/v1/chat/completions", "POST", EP_CHAT, sim_chat},
    {"/v1/completions", "POST", EP_COMPLETIONS, sim_completions},
    {"/generate", "POST", EP_GENERATE, sim_generate},
    {"/tokenize", "POST", EP_TOKENIZE, sim_tokenize},
    {"/detokenize", "POST", EP_DETOKENIZE, sim_detokenize},
    {"/sim/config", "*", EP_CONFIG, h_config},
    {"/sim/stats", "GET", EP_STATS, h_stats},
    {"/flush_cache", "GET", EP_FLUSH, h_flush_sglang},
    {"/flush_cache", "POST", EP_FLUSH, h_flush_sglang},
    {"/reset_prefix_cache", "POST", EP_FLUSH, h_flush_vllm},
    {"/sim/last-request", "GET", EP_OTHER, h_last},
};

/* Whether the flush endpoint at path is switched on (--flush-endpoints). */
static bool flush_on(const struct sim *s, const char *path)
{
    long f = s->cfg.flush_endpoints;
    if (!strcmp(path, "/flush_cache"))
        return f == FLUSH_BOTH || f == FLUSH_SGLANG;
    if (!strcmp(path, "/reset_prefix_cache"))
        return f == FLUSH_BOTH || f == FLUSH_VLLM;
    return true;
}

bool sim_is_model_path(const char *path)
{
    return !strcmp(path, "/v1/chat/completions") ||
           !strcmp(path, "/v1/completions") || !strcmp(path, "/generate");
}

/* Rate faults: a deterministic draw per model request. */
static bool inject(struct sim *s, struct sim_resp *r)
{
    const struct sim_config *c = &s->cfg;
    double u =
        hash_unit(hash_mix2((uint64_t)c->seed ^ 0x72617465ULL, s->counter));
    int status = u < c->rate_429                               ? 429
                 : u < c->rate_429 + c->rate_500               ? 500
                 : u < c->rate_429 + c->rate_500 + c->rate_503 ? 503
                                                               : 0;
    if (!status)
        return false;
    s->injected++;
    sim_error(r, status, NULL, "injected fault: HTTP %d (sim rate_%d)", status,
              status);
    return true;
}

void sim_handle(struct sim *s, const struct sim_req *rq, struct sim_resp *out)
{
    const struct route *rt = NULL;
    bool path_known = false;
    memset(&s->use, 0, sizeof(s->use));
    tok_set_byte_level(s->cfg.byte_tokens);
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(routes[i].path, rq->path) || !flush_on(s, rq->path))
            continue;
        path_known = true;
        if (!strcmp(routes[i].method, "*") ||
            !strcmp(routes[i].method, rq->method))
            rt = &routes[i];
    }
    out->status = 200;
    out->reason = "OK";
    if (!rt) {
        s->stats[EP_OTHER]++;
        if (path_known)
            sim_error(out, 405, NULL, "method %s is not allowed on %s",
                      rq->method, rq->path);
        else
            sim_error(out, 404, NULL, "no endpoint at %s %s", rq->method,
                      rq->path);
        return;
    }
    s->stats[rt->ep]++;
    if ((long)rq->len > s->cfg.max_body) {
        sim_error(out, 413, NULL,
                  "request body of %zu bytes is over the %ld-byte cap "
                  "(raise it with --max-body)",
                  rq->len, s->cfg.max_body);
        return;
    }
    if (rt->ep == EP_CHAT) {
        buf_reset(&s->last_chat);
        buf_add(&s->last_chat, rq->body ? rq->body : "", rq->len);
    }
    if (sim_is_model_path(rq->path)) {
        s->counter++;
        out->latency_ms = s->cfg.latency_ms;
        if (inject(s, out))
            return;
    }
    rt->fn(s, rq, out);
}
