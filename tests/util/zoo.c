/*
 * zoo: the path-zoo client (see zoo.h). One libcurl easy handle per
 * request, so that closing right after [DONE] really closes the
 * connection.
 */
#include "util/zoo.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"

#define SYSTEM "You are a helpful coding assistant. Use the tools when asked."
#define CONTINUE                                                               \
    "Continue if you have next steps, or stop and ask for clarification if "   \
    "you are unsure how to proceed."

struct got {
    struct buf raw;
    bool done; /* "data: [DONE]" seen: the transfer is cut right there */
};

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct got *g = ud;
    buf_add(&g->raw, p, sz * n);
    if (strstr(buf_str(&g->raw), "data: [DONE]")) {
        g->done = true;
        return 0; /* close right after [DONE], as Python clients do */
    }
    return sz * n;
}

/* The reply as an assistant message to send back, from an SSE stream or a
 * JSON body; NULL when there is none. */
static json_t *parse_reply(const char *raw, bool stream, bool keep_reasoning)
{
    struct buf content = BUF_INIT, reasoning = BUF_INIT;
    json_t *calls = json_array();
    if (!stream) {
        json_t *j = json_loads(raw, 0, NULL);
        json_t *m = json_object_get(
            json_array_get(json_object_get(j, "choices"), 0), "message");
        const char *c = json_string_value(json_object_get(m, "content"));
        const char *r =
            json_string_value(json_object_get(m, "reasoning_content"));
        buf_adds(&content, c ? c : "");
        if (r)
            buf_adds(&reasoning, r);
        if (json_array_size(json_object_get(m, "tool_calls")))
            json_array_extend(calls, json_object_get(m, "tool_calls"));
        bool ok = m != NULL;
        json_decref(j);
        if (!ok) {
            json_decref(calls);
            return NULL;
        }
    } else {
        char *copy = xstrdup(raw), *save = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            if (strncmp(line, "data: {", 7))
                continue;
            json_t *ch = json_loads(line + 6, 0, NULL);
            json_t *d = json_object_get(
                json_array_get(json_object_get(ch, "choices"), 0), "delta");
            const char *c = json_string_value(json_object_get(d, "content"));
            const char *r =
                json_string_value(json_object_get(d, "reasoning_content"));
            if (c)
                buf_adds(&content, c);
            if (r)
                buf_adds(&reasoning, r);
            size_t i;
            json_t *tc;
            json_array_foreach(json_object_get(d, "tool_calls"), i, tc)
            {
                size_t idx =
                    (size_t)json_integer_value(json_object_get(tc, "index"));
                while (json_array_size(calls) <= idx)
                    json_array_append_new(
                        calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", "",
                                         "type", "function", "function", "name",
                                         "", "arguments", ""));
                json_t *e = json_array_get(calls, idx);
                json_t *f = json_object_get(e, "function");
                json_t *tf = json_object_get(tc, "function");
                const char *id = json_string_value(json_object_get(tc, "id"));
                if (id)
                    json_object_set_new(e, "id", json_string(id));
                const char *nm = json_string_value(json_object_get(tf, "name"));
                const char *ar =
                    json_string_value(json_object_get(tf, "arguments"));
                if (nm) {
                    char *s = xasprintf(
                        "%s%s", json_string_value(json_object_get(f, "name")),
                        nm);
                    json_object_set_new(f, "name", json_string(s));
                    free(s);
                }
                if (ar) {
                    char *s = xasprintf(
                        "%s%s",
                        json_string_value(json_object_get(f, "arguments")), ar);
                    json_object_set_new(f, "arguments", json_string(s));
                    free(s);
                }
            }
            json_decref(ch);
        }
        free(copy);
    }
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content",
                          content.data ? content.data : "");
    if (keep_reasoning && reasoning.len)
        json_object_set_new(m, "reasoning_content",
                            json_string(reasoning.data));
    if (json_array_size(calls))
        json_object_set(m, "tool_calls", calls);
    json_decref(calls);
    buf_release(&content);
    buf_release(&reasoning);
    return m;
}

/* One request with retries; returns the assistant message (new) or NULL.
 * *sent counts the attempts. */
static json_t *request(const char *base, const struct zoo_opts *o, json_t *body,
                       int *sent)
{
    char *url = xasprintf("%s/v1/chat/completions", base);
    char *text = json_dumps(body, JSON_COMPACT);
    bool stream = json_is_true(json_object_get(body, "stream"));
    json_t *m = NULL;
    for (int attempt = 0; attempt <= o->retries && !m; attempt++) {
        CURL *c = curl_easy_init();
        struct curl_slist *h = curl_slist_append(NULL, "Expect:");
        char *sid =
            o->session ? xasprintf("X-Session-Id: %s", o->session) : NULL;
        char *ua = xasprintf("User-Agent: %s", o->agent ? o->agent : "zoo/1.0");
        struct got g = {BUF_INIT, false};
        long status = 0;
        h = curl_slist_append(h, "Content-Type: application/json");
        h = curl_slist_append(h, ua);
        if (sid)
            h = curl_slist_append(h, sid);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(
            c, CURLOPT_TIMEOUT_MS,
            attempt == 0 && o->first_timeout_ms ? o->first_timeout_ms : 20000L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &g);
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        (*sent)++;
        bool ok = status == 200 && (rc == CURLE_OK || g.done);
        if (ok && (!stream || g.done))
            m = parse_reply(buf_str(&g.raw), stream, o->echo_reasoning);
        buf_release(&g.raw);
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        free(sid);
        free(ua);
    }
    free(text);
    free(url);
    return m;
}

static json_t *body_for(const struct zoo_opts *o, json_t *msgs, int k,
                        bool tools)
{
    bool stream = !o->no_stream && (o->stream || k % 2 == 1);
    json_t *b =
        json_pack("{s:s, s:O, s:f, s:i}", "model", "fidelity-sim", "messages",
                  msgs, "temperature", o->temperature ? o->temperature : 0.6,
                  "max_tokens", 512);
    if (stream) {
        json_object_set_new(b, "stream", json_true());
        json_object_set_new(b, "stream_options",
                            json_pack("{s:b}", "include_usage", 1));
    }
    if (tools)
        json_object_set_new(
            b, "tools",
            json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}}}}]", "type",
                      "function", "function", "name", "lookup", "description",
                      "Look a key up in the project notes.", "parameters",
                      "type", "object", "properties", "key", "type", "string"));
    return b;
}

static char *turn_text(const struct zoo_opts *o, int t)
{
    unsigned code = 1000 + (o->seed * 7919u + 4812u) % 9000u;
    if (t == 0)
        return xasprintf("The access code for the blue door is %u. Please "
                         "remember it.",
                         code);
    if (o->tools && (t == 2 || t == 4))
        return xasprintf("Call the lookup tool with {\"key\": \"door%d\"}.", t);
    if (t == o->turns - 1)
        return xstrdup("What is the access code for the blue door?");
    static const char *const generic[] = {
        "Write a Python program for a tic-tac-toe game.",
        "Now make it save the results to a file.",
        "Also add a score counter.",
        "Thanks. Now summarise what we changed in one line.",
        "Add a docstring to every function.",
    };
    return xasprintf("%s (step %d)", generic[(o->seed + (unsigned)t) % 5], t);
}

/* The summary request a harness sends to compact its history: the
 * transcript in one user message under a summarising system prompt. */
static json_t *summary_request(const struct zoo_opts *o, json_t *msgs)
{
    struct buf tr = BUF_INIT;
    size_t i;
    json_t *m;
    buf_adds(&tr, "Here is the conversation so far:\n\n<conversation>\n");
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *c = json_string_value(json_object_get(m, "content"));
        if (!c || !*c || !strcmp(role, "system"))
            continue;
        buf_printf(&tr, "[%s]: %s\n\n",
                   !strcmp(role, "user") ? "User" : "Assistant", c);
    }
    buf_adds(&tr, "</conversation>");
    json_t *b = json_pack(
        "{s:s, s:[{s:s, s:s}, {s:s, s:s}], s:f, s:i}", "model", "fidelity-sim",
        "messages", "role", "system", "content",
        "You are a context summarization agent. Summarize the conversation "
        "you are given, keeping every fact.",
        "role", "user", "content", tr.data, "temperature",
        o->temperature ? o->temperature : 0.6, "max_tokens", 512);
    buf_release(&tr);
    return b;
}

int zoo_converse(const char *base, const struct zoo_opts *o)
{
    int sent = 0, turns = o->turns ? o->turns : 6;
    struct zoo_opts oo = *o;
    oo.turns = turns;
    if (o->one_shot) {
        for (int t = 0; t < turns; t++) {
            json_t *one = json_pack("[{s:s, s:s}]", "role", "user", "content",
                                    "What is 2+2?");
            json_t *b = body_for(&oo, one, t, false);
            json_decref(one);
            json_t *m = request(base, &oo, b, &sent);
            json_decref(b);
            if (!m)
                return -1;
            json_decref(m);
        }
        return sent;
    }
    json_t *msgs =
        json_pack("[{s:s, s:s}]", "role", "system", "content", SYSTEM);
    int k = 0; /* requests of the conversation, for the stream pattern */
    for (int t = 0; t < turns; t++) {
        char *u = turn_text(&oo, t);
        json_array_append_new(
            msgs, json_pack("{s:s, s:s}", "role", "user", "content", u));
        for (int round = 0; round < 3; round++) {
            json_t *b = body_for(&oo, msgs, k++, o->tools);
            json_t *m = request(base, &oo, b, &sent);
            json_decref(b);
            if (!m) {
                free(u);
                json_decref(msgs);
                return -1;
            }
            json_t *calls = json_object_get(m, "tool_calls");
            json_array_append(msgs, m);
            if (!json_array_size(calls)) {
                json_decref(m);
                break;
            }
            size_t i;
            json_t *tc;
            json_array_foreach(calls, i, tc) json_array_append_new(
                msgs,
                json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id",
                          json_object_get(tc, "id"), "content",
                          "door: blue, the code is in the vault"));
            json_decref(m);
        }
        if (t == 0 && o->title) {
            json_t *tb = json_pack(
                "{s:s, s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}], s:i}", "model",
                "fidelity-sim", "messages", "role", "system", "content",
                "You are a title generator. You output ONLY a thread title.",
                "role", "user", "content",
                "Generate a title for this conversation:\n", "role", "user",
                "content", u, "max_tokens", 32);
            json_t *m = request(base, &oo, tb, &sent);
            json_decref(tb);
            json_decref(m);
        }
        free(u);
        if (o->compact_every && (t + 1) % o->compact_every == 0 &&
            t + 1 < turns) {
            json_t *sb = summary_request(&oo, msgs);
            json_t *s = request(base, &oo, sb, &sent);
            json_decref(sb);
            if (!s) {
                json_decref(msgs);
                return -1;
            }
            json_t *fresh =
                json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:O}, {s:s, s:s}]",
                          "role", "system", "content", SYSTEM, "role", "user",
                          "content", "What did we do so far?", "role",
                          "assistant", "content", json_object_get(s, "content"),
                          "role", "user", "content", CONTINUE);
            json_decref(s);
            json_decref(msgs);
            msgs = fresh;
            json_t *b = body_for(&oo, msgs, k++, o->tools);
            json_t *m = request(base, &oo, b, &sent);
            json_decref(b);
            if (!m) {
                json_decref(msgs);
                return -1;
            }
            json_object_del(m, "tool_calls");
            json_array_append_new(msgs, m);
        }
    }
    json_decref(msgs);
    return sent;
}
