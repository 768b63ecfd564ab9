/*
 * bisect/inspect: server fingerprints. Field names come from each server's
 * source: sglang's GET /get_server_info returns dataclasses.asdict of its
 * ServerArgs merged with scheduler info and "version"
 * (python/sglang/srt/entrypoints/http_server.py); vLLM's /v1/models answers
 * a ModelList of ModelCard {id, object, created, owned_by, root, parent,
 * max_model_len, permission} (vllm/entrypoints/openai/protocol.py) and
 * /version {"version"}; TGI's /info is its router's Info struct (model_id,
 * model_dtype, max_total_tokens, version, ...: router/src/lib.rs);
 * llama.cpp's /props has default_generation_settings {params, n_ctx},
 * total_slots, model_path, build_info (tools/server/server.cpp).
 */
#include "bisect/inspect.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "http/client.h"

static const char *const endpoints[] = {"/get_server_info", "/version",
                                        "/v1/models", "/info", "/props"};
#define N_ENDPOINTS (sizeof(endpoints) / sizeof(endpoints[0]))

int inspect_fetch(struct http_client *c, const char *base, long timeout_ms,
                  json_t **answers, struct diag *d)
{
    json_t *a = json_object();
    char url[1024];
    int any = 0;
    for (size_t i = 0; i < N_ENDPOINTS; i++) {
        snprintf(url, sizeof(url), "%s%s", base, endpoints[i]);
        long status = 0;
        json_t *o = NULL;
        int rc = http_json(c, url, NULL, NULL, timeout_ms, &status, &o, NULL);
        if (rc == -ECONNREFUSED || rc == -ETIMEDOUT) {
            json_decref(o);
            break;
        }
        any |= rc == 0 || status > 0;
        if (!rc && status == 200 && json_is_object(o))
            json_object_set(a, endpoints[i], o);
        json_decref(o);
    }
    if (!any) {
        json_decref(a);
        return diag_set(d, ECONNREFUSED, "'%s' did not answer", base);
    }
    *answers = a;
    return 0;
}

/* Where a normalised field is read: endpoint, then a path of keys (a
 * number picks an array element). */
struct source {
    const char *field, *endpoint, *path;
};

static const struct source sources[] = {
    {"model", "/get_server_info", "model_path"},
    {"model", "/info", "model_id"},
    {"model", "/props", "model_path"},
    {"model", "/v1/models", "data.0.id"},
    {"dtype", "/get_server_info", "dtype"},
    {"dtype", "/info", "model_dtype"},
    {"kv_cache_dtype", "/get_server_info", "kv_cache_dtype"},
    {"attention_backend", "/get_server_info", "attention_backend"},
    {"moe_backend", "/get_server_info", "moe_runner_backend"},
    {"moe_backend", "/get_server_info", "moe_a2a_backend"},
    {"chunked_prefill", "/get_server_info", "chunked_prefill_size"},
    {"context_length", "/get_server_info", "context_length"},
    {"context_length", "/v1/models", "data.0.max_model_len"},
    {"context_length", "/info", "max_total_tokens"},
    {"context_length", "/props", "default_generation_settings.n_ctx"},
    {"version", "/get_server_info", "version"},
    {"version", "/version", "version"},
    {"version", "/info", "version"},
    {"version", "/props", "build_info"},
};

static const char *const fields[] = {"server",
                                     "model",
                                     "dtype",
                                     "kv_cache_dtype",
                                     "attention_backend",
                                     "moe_backend",
                                     "chunked_prefill",
                                     "context_length",
                                     "version"};

static const json_t *at(const json_t *o, const char *path)
{
    char key[128];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof(key), "%.*s", (int)n, path);
        if (json_is_array(o))
            o = json_array_get(o, (size_t)strtoul(key, NULL, 10));
        else
            o = json_object_get(o, key);
        path += n + (path[n] == '.');
    }
    return o;
}

static const char *server_kind(const json_t *a)
{
    const json_t *si = json_object_get(a, "/get_server_info");
    if (si) {
        const char *v = json_string_value(json_object_get(si, "version"));
        return v && !strncmp(v, "fidelity-sim", 12) ? "fidelity-sim" : "sglang";
    }
    if (json_object_get(json_object_get(a, "/info"), "model_id"))
        return "tgi";
    if (json_object_get(json_object_get(a, "/props"),
                        "default_generation_settings"))
        return "llama.cpp";
    const char *own = json_string_value(
        at(json_object_get(a, "/v1/models"), "data.0.owned_by"));
    if (own && !strcmp(own, "vllm"))
        return "vllm";
    return json_object_size(a) ? "unknown" : "none";
}

/* Keys that change from one start to the next, not with the setup. */
static bool is_volatile(const char *key)
{
    static const char *const v[] = {"internal_states", "created", "permission",
                                    "chat_template"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (!strcmp(key, v[i]))
            return true;
    return false;
}

static void flatten(json_t *flags, const char *prefix, const json_t *o)
{
    if (json_is_object(o)) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)o, k, v)
        {
            if (is_volatile(k))
                continue;
            char p[512];
            snprintf(p, sizeof(p), "%s.%s", prefix, k);
            flatten(flags, p, v);
        }
    } else if (json_is_array(o)) {
        for (size_t i = 0; i < json_array_size(o); i++) {
            char p[512];
            snprintf(p, sizeof(p), "%s.%zu", prefix, i);
            flatten(flags, p, json_array_get(o, i));
        }
    } else {
        json_object_set(flags, prefix, (json_t *)o);
    }
}

json_t *inspect_normalise(const char *url, const json_t *answers)
{
    json_t *fp = json_object();
    json_object_set_new(fp, "url", url ? json_string(url) : json_null());
    json_object_set_new(fp, "server", json_string(server_kind(answers)));
    for (size_t f = 1; f < sizeof(fields) / sizeof(fields[0]); f++) {
        const json_t *v = NULL;
        for (size_t i = 0; !v && i < sizeof(sources) / sizeof(sources[0]); i++)
            if (!strcmp(sources[i].field, fields[f])) {
                v = at(json_object_get(answers, sources[i].endpoint),
                       sources[i].path);
                v = json_is_null(v) ? NULL : v;
            }
        json_object_set(fp, fields[f], v ? (json_t *)v : json_null());
    }
    json_t *eps = json_array(), *flags = json_object();
    for (size_t i = 0; i < N_ENDPOINTS; i++) {
        const json_t *o = json_object_get(answers, endpoints[i]);
        if (!o)
            continue;
        json_array_append_new(eps, json_string(endpoints[i]));
        flatten(flags, endpoints[i] + 1, o);
    }
    json_object_set_new(fp, "endpoints", eps);
    json_object_set_new(fp, "flags", flags);
    return fp;
}

static void diff_key(json_t *out, json_t *const *fps, size_t n,
                     const char *field, bool flag)
{
    json_t *vals = json_array();
    bool differ = false;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = flag ? json_object_get(fps[i], "flags") : fps[i];
        json_t *v = json_object_get(o, field);
        json_array_append(vals, v ? v : json_null());
        if (i && !json_equal(json_array_get(vals, 0), json_array_get(vals, i)))
            differ = true;
    }
    if (differ)
        json_array_append_new(
            out, json_pack("{s:s,s:o}", "field", field, "values", vals));
    else
        json_decref(vals);
}

json_t *inspect_diff(json_t *const *fps, size_t n)
{
    json_t *out = json_array();
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
        diff_key(out, fps, n, fields[f], false);
    /* flags: the union of keys, in sorted order */
    json_t *keys = json_object();
    for (size_t i = 0; i < n; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(fps[i], "flags"), k, v)
            json_object_set_new(keys, k, json_true());
    }
    const char **sorted = calloc(json_object_size(keys) + 1, sizeof(*sorted));
    size_t m = 0;
    const char *k;
    json_t *v;
    json_object_foreach(keys, k, v) sorted[m++] = k;
    for (size_t i = 1; i < m; i++)
        for (size_t j = i; j > 0 && strcmp(sorted[j - 1], sorted[j]) > 0; j--) {
            const char *t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    for (size_t i = 0; i < m; i++)
        diff_key(out, fps, n, sorted[i], true);
    free(sorted);
    json_decref(keys);
    return out;
}
