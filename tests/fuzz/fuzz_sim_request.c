/*
 * fuzz_sim_request: the simulator's request handling (sim_handle in
 * src/sim/sim.h), without the network. An input is "METHOD PATH\n" and the
 * body; an input whose first line is not that is a body for POST
 * /v1/chat/completions. Each input runs on a fresh sim with the default
 * faults (and once more with a fault set that truncates, forgets and adds
 * noise), and the answer must hold:
 *   - the status is one the contract names;
 *   - a JSON answer parses; a 2xx answer is an object, and a 2xx chat answer
 *     has choices[0] and usage.prompt_tokens >= 1;
 *   - the flush endpoints answer as the servers do, not in JSON: sglang's
 *     /flush_cache its text, 200 (or 400 while requests run), vLLM's
 *     /reset_prefix_cache an empty 200 (see src/sim/handle.c);
 *   - a 4xx/5xx answer is {"error": {"message": non-empty, "type": str}};
 *   - an SSE answer is 200, every event is one "data: ...\n\n" line whose
 *     payload is JSON, and the last is "data: [DONE]".
 * The body handed to sim_handle is an exact-size copy without a NUL, so a
 * read past its end is caught by the address sanitizer.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/config.h"
#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_sim_request: " __VA_ARGS__);                 \
            fprintf(stderr, "\n");                                             \
            abort();                                                           \
        }                                                                      \
    } while (0)

static bool known_status(int s)
{
    static const int ok[] = {200, 400, 404, 405, 413, 429, 500, 503};
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++)
        if (s == ok[i])
            return true;
    return false;
}

static void check_error(json_t *j, int status)
{
    json_t *e = json_object_get(j, "error");
    CHECK(json_is_object(e), "HTTP %d without an error object", status);
    const char *m = json_string_value(json_object_get(e, "message"));
    CHECK(m && *m, "HTTP %d error without a message", status);
    CHECK(json_is_string(json_object_get(e, "type")),
          "HTTP %d error without a type", status);
}

/* The flush endpoints' own answers (src/sim/handle.c, docs/SIM.md). */
static bool check_flush(const struct sim_resp *r, const char *path)
{
    if (!strcmp(path, "/flush_cache") && r->status != 404) {
        CHECK(r->status == 200 || r->status == 400, "/flush_cache: HTTP %d",
              r->status);
        CHECK(!strncmp(buf_str(&r->body), "Cache flushed.\n", 15),
              "/flush_cache: not sglang's text: %.80s", buf_str(&r->body));
        return true;
    }
    if (!strcmp(path, "/reset_prefix_cache") && r->status == 200) {
        CHECK(r->body.len == 0, "/reset_prefix_cache: a body: %.80s",
              buf_str(&r->body));
        return true;
    }
    return false;
}

static void check_json(const struct sim_resp *r, const char *path)
{
    json_error_t jerr;
    json_t *j = json_loadb(buf_str(&r->body), r->body.len, 0, &jerr);
    CHECK(j, "%s: HTTP %d body is not JSON (%s): %.200s", path, r->status,
          jerr.text, buf_str(&r->body));
    if (r->status >= 400) {
        check_error(j, r->status);
    } else {
        CHECK(json_is_object(j), "%s: 2xx answer is not an object", path);
        if (!strcmp(path, "/v1/chat/completions")) {
            json_t *c = json_array_get(json_object_get(j, "choices"), 0);
            CHECK(json_is_object(c), "chat answer without choices[0]");
            json_t *pt =
                json_object_get(json_object_get(j, "usage"), "prompt_tokens");
            CHECK(json_is_integer(pt) && json_integer_value(pt) >= 1,
                  "chat answer without usage.prompt_tokens");
        }
    }
    json_decref(j);
}

static void check_stream(const struct sim_resp *r)
{
    CHECK(r->status == 200, "stream with HTTP %d", r->status);
    CHECK(r->nevents >= 1, "stream without events");
    for (size_t i = 0; i < r->nevents; i++) {
        const char *e = r->events[i];
        size_t n = strlen(e);
        CHECK(n >= 8 && !memcmp(e, "data: ", 6) && !strcmp(e + n - 2, "\n\n"),
              "bad SSE event %zu: %.80s", i, e);
        CHECK(!memchr(e, '\n', n - 2), "SSE event %zu has several lines", i);
        if (i + 1 == r->nevents) {
            CHECK(!strcmp(e, "data: [DONE]\n\n"), "stream does not end with "
                                                  "[DONE]");
            continue;
        }
        json_t *j = json_loadb(e + 6, n - 8, 0, NULL);
        CHECK(j, "SSE event %zu is not JSON: %.80s", i, e);
        json_decref(j);
    }
}

static void run(const struct sim_config *cfg, const char *method,
                const char *path, const uint8_t *body, size_t len)
{
    static struct sim s;
    struct sim_resp r;
    sim_init(&s, cfg);
    sim_resp_init(&r);
    struct sim_req rq = {method, path, (const char *)body, len, 1, 0};
    sim_handle(&s, &rq, &r);
    sim_release(&s);
    CHECK(known_status(r.status), "%s %s: HTTP %d", method, path, r.status);
    if (r.stream)
        check_stream(&r);
    else if (!check_flush(&r, path))
        check_json(&r, path);
    sim_resp_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char method[16] = "POST", path[128] = "/v1/chat/completions";
    const uint8_t *nl = memchr(data, '\n', size < 160 ? size : 160);
    size_t skip = 0;
    if (nl && size > 0 && data[0] >= 'A' && data[0] <= 'Z') {
        char line[160];
        size_t n = (size_t)(nl - data);
        memcpy(line, data, n);
        line[n] = '\0';
        if (sscanf(line, "%15s %127s", method, path) == 2)
            skip = n + 1;
        else {
            strcpy(method, "POST");
            strcpy(path, "/v1/chat/completions");
        }
    }
    size_t len = size - skip;
    uint8_t *body = malloc(len ? len : 1);
    if (len)
        memcpy(body, data + skip, len);

    struct sim_config cfg;
    sim_config_defaults(&cfg);
    run(&cfg, method, path, body, len);
    /* the same input against truncation, forgetting and noise */
    cfg.context_limit = 64;
    cfg.overflow = OVERFLOW_MIDDLE;
    cfg.forget_after = 32;
    cfg.keep_last_turns = 2;
    cfg.decode_noise = 0.1;
    cfg.prefill_noise = 0.1;
    cfg.collapse_after = 3;
    cfg.reasoning_history = RHIST_DROP;
    run(&cfg, method, path, body, len);
    free(body);
    return 0;
}
