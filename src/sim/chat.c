/*
 * chat: POST /v1/chat/completions. Renders the messages with the template,
 * applies the context faults, writes the rule-based reply (reply.c), and
 * answers as one JSON object or as an SSE stream of chunks, with logprobs of
 * the reply tokens from the decode path.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "sim/answer.h"
#include "sim/feedback.h"
#include "sim/sim_int.h"
#include "sim/tmpl.h"
#include "wire/jdump.h"

struct chat {
    json_t *body;
    bool stream, include_usage, logprobs, reasoning;
    long max_tokens, top_logprobs, seed;
    double temperature;
    json_t *tools;
    struct tok_vec prompt;
    struct tok_vec reasoning_toks, content_toks;
    struct answer_out out;
    const char *finish;
    char id[48];
    json_int_t created;
};

static bool wants_reasoning(const struct sim *s, json_t *body)
{
    json_t *k = json_object_get(body, "chat_template_kwargs");
    return s->cfg.reasoning ||
           json_is_string(json_object_get(body, "reasoning_effort")) ||
           json_is_true(json_object_get(k, "thinking")) ||
           json_is_true(json_object_get(k, "enable_thinking"));
}

static int parse(struct sim *s, struct chat *c, struct sim_resp *r)
{
    json_t *b = c->body, *so = json_object_get(b, "stream_options");
    json_t *msgs = json_object_get(b, "messages");
    if (!msgs) {
        sim_error(r, 400, "messages", "'messages' is required");
        return -1;
    }
    long mt1, mt2;
    if (sim_get_bool(b, "stream", false, &c->stream, r) ||
        sim_get_bool(so, "include_usage", false, &c->include_usage, r) ||
        sim_get_bool(b, "logprobs", false, &c->logprobs, r) ||
        sim_get_long(b, "top_logprobs", 0, 20, 0, &c->top_logprobs, r) ||
        sim_get_long(b, "max_tokens", 1, 1 << 24, 0, &mt1, r) ||
        sim_get_long(b, "max_completion_tokens", 1, 1 << 24, 0, &mt2, r) ||
        sim_get_long(b, "seed", -(1L << 62), 1L << 62, 0, &c->seed, r) ||
        sim_get_num(b, "temperature", 0, 2, 1.0, &c->temperature, r))
        return -1;
    if (so && !json_is_object(so) && !json_is_null(so)) {
        sim_error(r, 400, "stream_options",
                  "'stream_options' must be an "
                  "object");
        return -1;
    }
    json_t *n = json_object_get(b, "n");
    if (n && !json_is_null(n) &&
        (!json_is_integer(n) || json_integer_value(n) != 1)) {
        sim_error(r, 400, "n", "'n' must be 1: the sim returns one choice");
        return -1;
    }
    c->max_tokens = mt2 ? mt2 : mt1;
    c->tools = json_object_get(b, "tools");
    if (c->tools && !json_is_array(c->tools) && !json_is_null(c->tools)) {
        sim_error(r, 400, "tools", "'tools' must be an array");
        return -1;
    }
    c->reasoning = wants_reasoning(s, b);
    bool has_tools = json_array_size(c->tools) > 0;
    struct diag d = {""};
    if (tmpl_render(msgs, has_tools, true, &s->cfg, &c->prompt, &d)) {
        sim_error(r, 400, "messages", "%s", d.msg);
        return -1;
    }
    return sim_fit_context(s, &c->prompt, c->max_tokens, r);
}

static int variant(const struct sim *s, const struct chat *c)
{
    if (c->temperature <= 0 || s->cfg.ignore_temperature)
        return 0;
    uint64_t h =
        json_object_get(c->body, "seed") ? (uint64_t)c->seed : s->counter;
    return 1 + (int)(hash_mix64(h ^ 0x76617269ULL) % 2);
}

/* Reasoning then content tokens, cut by collapse and max_tokens. */
static void generate(const struct sim *s, struct chat *c)
{
    struct tok_vec *rt = &c->reasoning_toks, *ct = &c->content_toks;
    tok_encode(c->out.reasoning.data ? c->out.reasoning.data : "",
               c->out.reasoning.len, rt);
    tok_encode(c->out.content.data ? c->out.content.data : "",
               c->out.content.len, ct);
    c->finish = c->out.tool_name ? "tool_calls" : "stop";
    long limit = c->max_tokens ? c->max_tokens : 1L << 30;
    if (s->cfg.collapse_after > 0) {
        size_t keep = (size_t)s->cfg.collapse_after;
        struct tok_vec loop;
        tok_vec_init(&loop);
        tok_encode(" and the same again", 19, &loop);
        ct->n = ct->n < keep ? ct->n : keep;
        long cap = c->max_tokens ? c->max_tokens : 512;
        for (size_t i = 0; (long)(rt->n + ct->n) < cap; i++)
            tok_vec_push(ct, loop.v[i % loop.n]);
        tok_vec_release(&loop);
        c->finish = "length";
    }
    if ((long)rt->n > limit)
        rt->n = (size_t)limit;
    if ((long)(rt->n + ct->n) > limit) {
        ct->n = (size_t)limit - rt->n;
        c->finish = "length";
    }
    if (!strcmp(c->finish, "length")) {
        free(c->out.tool_name);
        c->out.tool_name = NULL;
    }
}

static json_t *top_entry(int32_t id, double lp)
{
    char piece[16];
    size_t k = tok_piece(id, piece);
    json_t *bytes = json_array();
    for (size_t i = 0; i < k; i++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:o,s:f,s:o}", "token", sim_jstr(piece, k), "logprob",
                     lp, "bytes", bytes);
}

/* logprobs.content entries for the content tokens, from the decode path. */
static json_t *content_logprobs(const struct sim *s, const struct sim_req *rq,
                                const struct chat *c)
{
    struct tok_vec seq;
    struct model m;
    struct dist d;
    struct model_noise nz = sim_noise(s, rq, true);
    json_t *arr = json_array();
    tok_vec_init(&seq);
    for (size_t i = 0; i < c->prompt.n; i++)
        tok_vec_push(&seq, c->prompt.v[i]);
    for (size_t i = 0; i < c->reasoning_toks.n; i++)
        tok_vec_push(&seq, c->reasoning_toks.v[i]);
    size_t base = seq.n;
    for (size_t i = 0; i < c->content_toks.n; i++)
        tok_vec_push(&seq, c->content_toks.v[i]);
    model_init(&m, (size_t)s->cfg.forget_after);
    for (size_t i = 0; i < c->content_toks.n; i++) {
        int32_t id = c->content_toks.v[i];
        model_dist(&m, seq.v, base + i, &nz, &d);
        json_t *e = top_entry(id, model_dist_logprob(&d, id));
        json_t *tops = json_array();
        for (int k = 0; k < c->top_logprobs && k < d.n; k++)
            json_array_append_new(tops, top_entry(d.id[k], d.lp[k]));
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(arr, e);
    }
    model_release(&m);
    tok_vec_release(&seq);
    return arr;
}

static json_t *usage(const struct sim *s, const struct chat *c)
{
    size_t gen = c->reasoning_toks.n + c->content_toks.n;
    if (c->out.tool_name)
        gen += strlen(c->out.tool_args) / 3 + 1;
    json_t *u =
        json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)c->prompt.n,
                  "completion_tokens", (json_int_t)gen, "total_tokens",
                  (json_int_t)(c->prompt.n + gen));
    sim_cache_usage(s, u);
    return u;
}

/* The prompt and the reply as the model generated them, into the cache. */
static void cache_reply(struct sim *s, const struct chat *c)
{
    struct tok_vec all;
    tok_vec_init(&all);
    for (size_t i = 0; i < c->prompt.n; i++)
        tok_vec_push(&all, c->prompt.v[i]);
    /* generated as the template renders an assistant turn (tmpl.c):
     * reasoning between its markers, then the content */
    if (c->reasoning_toks.n) {
        tok_vec_push(&all, TOK_THINK);
        for (size_t i = 0; i < c->reasoning_toks.n; i++)
            tok_vec_push(&all, c->reasoning_toks.v[i]);
        tok_vec_push(&all, TOK_THINK_END);
    }
    for (size_t i = 0; i < c->content_toks.n; i++)
        tok_vec_push(&all, c->content_toks.v[i]);
    sim_cache_end(s, all.v, c->prompt.n, all.n);
    tok_vec_release(&all);
}

static json_t *tool_calls(const struct chat *c, bool with_args)
{
    char id[48];
    snprintf(id, sizeof(id), "call_%.16s", c->id + 9);
    return json_pack("[{s:i,s:s,s:s,s:{s:s,s:s}}]", "index", 0, "id", id,
                     "type", "function", "function", "name", c->out.tool_name,
                     "arguments", with_args ? c->out.tool_args : "");
}

static json_t *text_of(const struct tok_vec *t)
{
    struct buf b = BUF_INIT;
    tok_decode(t->v, t->n, &b);
    json_t *j = sim_jstr(buf_str(&b), b.len);
    buf_release(&b);
    return j;
}

static void whole(const struct sim *s, const struct sim_req *rq, struct chat *c,
                  struct sim_resp *r)
{
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(msg, "content",
                        c->out.tool_name && !c->content_toks.n
                            ? json_null()
                            : text_of(&c->content_toks));
    if (c->reasoning)
        json_object_set_new(msg, "reasoning_content",
                            text_of(&c->reasoning_toks));
    if (c->out.tool_name)
        json_object_set_new(msg, "tool_calls", tool_calls(c, true));
    json_t *lp = c->logprobs
                     ? json_pack("{s:o}", "content", content_logprobs(s, rq, c))
                     : json_null();
    sim_json(r, json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:s}],s:o}", "id",
                          c->id, "object", "chat.completion", "created",
                          c->created, "model", s->cfg.model, "choices", "index",
                          0, "message", msg, "logprobs", lp, "finish_reason",
                          c->finish, "usage", usage(s, c)));
}

/* Appends the SSE event "data: <j>\n\n" and drops j. jdump writes what
 * json_dumps would (sim_dump), at a fraction of its cost: with one event per
 * token, json_dumps was most of the sim's time per streamed answer. */
static void event(struct sim_resp *r, json_t *j)
{
    struct buf b;
    buf_init(&b, 0);
    buf_grow(&b, 255);
    buf_adds(&b, "data: ");
    sim_dump(&b, j);
    buf_adds(&b, "\n\n");
    json_decref(j);
    r->events = xrealloc(r->events, (r->nevents + 1) * sizeof(*r->events));
    r->events[r->nevents++] = buf_detach(&b, NULL);
}

static json_t *chunk(const struct sim *s, const struct chat *c, json_t *delta,
                     json_t *logprobs, const char *finish)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", c->id,
                     "object", "chat.completion.chunk", "created", c->created,
                     "model", s->cfg.model, "choices", "index", 0, "delta",
                     delta, "logprobs", logprobs ? logprobs : json_null(),
                     "finish_reason",
                     finish ? json_string(finish) : json_null());
}

/* One chunk per token; bytes of a split UTF-8 character wait for the next
 * token so that every chunk is valid UTF-8. Without logprobs, the event's
 * text is written directly: the bytes event(chunk(...)) would make for the
 * delta {field: piece} (tests/sim/test_sim_stream.c compares the two), at a
 * fraction of the cost of building and dumping the objects per token. */
static void stream_tokens(const struct sim *s, const struct chat *c,
                          const struct tok_vec *t, const char *field,
                          json_t *lps, struct sim_resp *r)
{
    struct buf pend = BUF_INIT, head = BUF_INIT;
    char piece[16];
    if (!lps) {
        buf_adds(&head, "data: {\"id\":");
        jdump_string(&head, c->id, strlen(c->id));
        buf_printf(&head,
                   ",\"object\":\"chat.completion.chunk\",\"created\":"
                   "%" JSON_INTEGER_FORMAT ",\"model\":",
                   c->created);
        jdump_string(&head, s->cfg.model, strlen(s->cfg.model));
        buf_printf(&head,
                   ",\"choices\":[{\"index\":0,\"delta\":{\"%s\":", field);
    }
    for (size_t i = 0; i < t->n; i++) {
        buf_add(&pend, piece, tok_piece(t->v[i], piece));
        size_t ok =
            i + 1 == t->n ? pend.len : sim_utf8_whole(pend.data, pend.len);
        if (lps) {
            json_t *lp =
                json_pack("{s:[O]}", "content", json_array_get(lps, i));
            json_t *delta = json_pack("{s:o}", field, sim_jstr(pend.data, ok));
            event(r, chunk(s, c, delta, lp, NULL));
        } else {
            struct buf b;
            buf_init(&b, 0);
            buf_grow(&b, head.len + 6 * ok + 64);
            buf_add(&b, head.data, head.len);
            sim_dump_text(&b, pend.data, ok);
            buf_adds(&b, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
            r->events =
                xrealloc(r->events, (r->nevents + 1) * sizeof(*r->events));
            r->events[r->nevents++] = buf_detach(&b, NULL);
        }
        memmove(pend.data, pend.data + ok, pend.len - ok);
        pend.len -= ok;
    }
    buf_release(&head);
    buf_release(&pend);
}

static void streamed(const struct sim *s, const struct sim_req *rq,
                     struct chat *c, struct sim_resp *r)
{
    json_t *lps = c->logprobs ? content_logprobs(s, rq, c) : NULL;
    r->stream = true;
    r->status = 200;
    r->reason = "OK";
    r->interval_ms = s->cfg.token_interval_ms;
    r->cut_after = s->cfg.cut_stream_after;
    event(r, chunk(s, c,
                   json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                   NULL, NULL));
    stream_tokens(s, c, &c->reasoning_toks, "reasoning_content", NULL, r);
    stream_tokens(s, c, &c->content_toks, "content", lps, r);
    if (c->out.tool_name) {
        event(r, chunk(s, c,
                       json_pack("{s:o}", "tool_calls", tool_calls(c, false)),
                       NULL, NULL));
        const char *a = c->out.tool_args;
        for (size_t off = 0, n = strlen(a); off < n; off += 16) {
            size_t k = n - off < 16 ? n - off : 16;
            event(r, chunk(s, c,
                           json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls",
                                     "index", 0, "function", "arguments",
                                     sim_jstr(a + off, k)),
                           NULL, NULL));
        }
    }
    event(r, chunk(s, c, json_object(), NULL, c->finish));
    if (c->include_usage)
        event(r,
              json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", c->id, "object",
                        "chat.completion.chunk", "created", c->created, "model",
                        s->cfg.model, "choices", "usage", usage(s, c)));
    r->events = xrealloc(r->events, (r->nevents + 1) * sizeof(*r->events));
    r->events[r->nevents++] = xstrdup("data: [DONE]\n\n");
    json_decref(lps);
}

/* Offset of "summar" in the first n bytes of t (any case), or -1. */
static long summar_at(const char *t, size_t n)
{
    for (size_t i = 0; t[i] && i + 6 <= n; i++) {
        size_t k = 0;
        while (k < 6 && (t[i + k] | 0x20) == "summar"[k])
            k++;
        if (k == 6)
            return (long)i;
    }
    return -1;
}

/* A summary (compaction) request: its last user message asks for a
 * summary, or its system prompt says so in its first 1,000 bytes. */
static bool is_summary_request(json_t *body)
{
    json_t *msgs = json_object_get(body, "messages");
    json_t *first = json_array_get(msgs, 0);
    const char *fr = json_string_value(json_object_get(first, "role"));
    const char *ft = json_string_value(json_object_get(first, "content"));
    if (fr && ft && !strcmp(fr, "system") && summar_at(ft, 1000) >= 0)
        return true;
    for (size_t k = json_array_size(msgs); k-- > 0;) {
        json_t *m = json_array_get(msgs, k);
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *t = json_string_value(json_object_get(m, "content"));
        if (role && !strcmp(role, "user"))
            return t && summar_at(t, SIZE_MAX) >= 0;
    }
    return false;
}

void sim_chat(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    struct chat c;
    memset(&c, 0, sizeof(c));
    tok_vec_init(&c.prompt);
    tok_vec_init(&c.reasoning_toks);
    tok_vec_init(&c.content_toks);
    answer_out_init(&c.out);
    c.body = sim_body(rq, r);
    if (!c.body || parse(s, &c, r))
        goto out;
    sim_id(s, "chatcmpl", c.id);
    c.created = (json_int_t)time(NULL);
    struct answer_in in = {
        .toks = c.prompt.v,
        .n = c.prompt.n,
        .window = sim_recall_window(&s->cfg, c.prompt.n),
        .tools = json_array_size(c.tools) ? c.tools : NULL,
        .variant = variant(s, &c),
        .want_reasoning = c.reasoning,
        .summary = is_summary_request(c.body),
    };
    feedback_window(&s->cfg, &c.prompt, &in.window);
    sim_cache_begin(s, c.prompt.v, c.prompt.n, SIZE_MAX);
    answer_write(&in, &c.out);
    if (c.reasoning && s->cfg.feedback_base > 0) {
        uint64_t seed =
            json_object_get(c.body, "seed") ? (uint64_t)c.seed : s->counter;
        size_t n = feedback_length(&s->cfg, c.body, c.temperature, seed,
                                   feedback_in_context(&c.prompt));
        feedback_reasoning(n, seed, &c.out.reasoning);
    }
    if (s->cfg.lose_summary && is_summary_request(c.body)) {
        buf_reset(&c.out.content);
        buf_adds(&c.out.content, ANSWER_NOT_SEEN);
        free(c.out.tool_name);
        free(c.out.tool_args);
        c.out.tool_name = c.out.tool_args = NULL;
    }
    generate(s, &c);
    cache_reply(s, &c);
    if (c.stream)
        streamed(s, rq, &c, r);
    else
        whole(s, rq, &c, r);
out:
    answer_out_release(&c.out);
    tok_vec_release(&c.prompt);
    tok_vec_release(&c.reasoning_toks);
    tok_vec_release(&c.content_toks);
    json_decref(c.body);
}
