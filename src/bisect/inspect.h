/*
 * bisect/inspect: what a server says about itself, normalised into one
 * fingerprint. It asks each known endpoint (sglang GET /get_server_info,
 * vLLM /version and /v1/models, TGI /info, llama.cpp /props) and keeps the
 * answers that are JSON objects; inspect_normalise turns them into
 *   {"url", "server", "model", "dtype", "kv_cache_dtype",
 *    "attention_backend", "moe_backend", "chunked_prefill",
 *    "context_length", "version", "endpoints": [...],
 *    "flags": {"ENDPOINT.key[.key]": scalar, ...}}
 * (fields a server does not report are null). inspect_diff lists what
 * differs between fingerprints. Normalising and diffing do no I/O.
 */
#ifndef BISECT_INSPECT_H
#define BISECT_INSPECT_H

#include <jansson.h>
#include <stddef.h>

#include "core/diag.h"

struct http_client;

/* The answers of base's endpoints: {"/get_server_info": {...}, ...}.
 * -ECONNREFUSED (d filled) when no endpoint answered at all. */
int inspect_fetch(struct http_client *c, const char *base, long timeout_ms,
                  json_t **answers, struct diag *d);

/* The fingerprint of those answers (new reference). */
json_t *inspect_normalise(const char *url, const json_t *answers);

/* The fields (normalised ones, then flags) whose values differ among the n
 * fingerprints: [{"field", "values": [v0, v1, ...]}] (new reference). */
json_t *inspect_diff(json_t *const *fps, size_t n);

#endif
