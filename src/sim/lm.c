/*
 * lm: the endpoints that work on raw tokens: POST /v1/completions (OpenAI
 * legacy logprobs, vLLM prompt_logprobs), POST /generate (sglang with
 * text/input_ids, TGI with inputs), /tokenize and /detokenize. Prompts are
 * scored on the prefill path; generation is greedy on the decode path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/xalloc.h"
#include "sim/sim_int.h"
#include "sim/tmpl.h"

/* One pass over prompt and generation. on_pos is called for every scored
 * position t >= from with its distribution; generated tokens are appended
 * to seq. Returns the finish reason. */
struct lm_pass {
    struct tok_vec seq;
    size_t prompt_n;
    long max_new;
    size_t from; /* first prompt position to score; SIZE_MAX: none */
    void (*on_pos)(void *ud, size_t t, const struct dist *d, bool gen);
    void *ud;
};

static const char *lm_run(struct sim *s, const struct sim_req *rq,
                          struct lm_pass *p)
{
    struct model m;
    struct dist d;
    struct model_noise pre = sim_noise(s, rq, false);
    struct model_noise dec = sim_noise(s, rq, true);
    const char *finish = "length";
    model_init(&m, (size_t)s->cfg.forget_after);
    for (size_t t = p->from < 1 ? 1 : p->from;
         p->from != SIZE_MAX && t < p->prompt_n; t++) {
        model_dist(&m, p->seq.v, t, &pre, &d);
        p->on_pos(p->ud, t, &d, false);
    }
    for (long i = 0; i < p->max_new; i++) {
        size_t t = p->seq.n;
        if (t == 0) {
            tok_vec_push(&p->seq, TOK_BOS);
            continue;
        }
        model_dist(&m, p->seq.v, t, &dec, &d);
        tok_vec_push(&p->seq, d.id[0]);
        p->on_pos(p->ud, t, &d, true);
        if (d.id[0] == TOK_END) {
            finish = "stop";
            break;
        }
    }
    model_release(&m);
    return finish;
}

static json_t *text_of(const int32_t *v, size_t n)
{
    struct buf b = BUF_INIT;
    tok_decode(v, n, &b);
    json_t *j = sim_jstr(buf_str(&b), b.len);
    buf_release(&b);
    return j;
}

static size_t piece_len(int32_t id)
{
    char piece[16];
    return tok_piece(id, piece);
}

static int rank_of(const struct dist *d, int32_t id)
{
    for (int k = 0; k < d->n; k++)
        if (d->id[k] == id)
            return k + 1;
    return d->n + 1;
}

/* ---- /v1/completions ---- */

struct cmpl {
    long logprobs, prompt_logprobs;
    bool echo;
    bool as_ids; /* vLLM return_tokens_as_token_ids: "token_id:N" */
    json_t *tokens, *token_lps, *tops, *offsets, *plps;
    size_t offset;
    const int32_t *seqv; /* refreshed by the pass */
    struct lm_pass *pass;
};

/* A token as the answer names it: its text, or "token_id:N". */
static json_t *cmpl_tok(const struct cmpl *c, int32_t id)
{
    return c->as_ids ? json_sprintf("token_id:%d", id) : sim_tok_json(id);
}

static void cmpl_add(struct cmpl *c, int32_t id, json_t *lp, json_t *top)
{
    json_array_append_new(c->tokens, cmpl_tok(c, id));
    json_array_append_new(c->token_lps, lp);
    json_array_append_new(c->tops, top);
    json_array_append_new(c->offsets, json_integer((json_int_t)c->offset));
    c->offset += piece_len(id);
}

static json_t *legacy_top(const struct cmpl *c, const struct dist *d, long k)
{
    json_t *o = json_object();
    for (long i = 0; i < k && i < d->n; i++) {
        json_t *key = cmpl_tok(c, d->id[i]);
        json_object_set_new(o, json_string_value(key), json_real(d->lp[i]));
        json_decref(key);
    }
    return o;
}

static void cmpl_pos(void *ud, size_t t, const struct dist *d, bool gen)
{
    struct cmpl *c = ud;
    int32_t id = c->pass->seq.v[t];
    double lp = model_dist_logprob(d, id);
    if (!gen && c->plps) {
        json_t *o = json_object();
        char key[16];
        for (long k = -1; k < c->prompt_logprobs && k < d->n; k++) {
            int32_t kid = k < 0 ? id : d->id[k];
            snprintf(key, sizeof(key), "%d", kid);
            json_object_set_new(o, key,
                                json_pack("{s:f,s:i,s:o}", "logprob",
                                          model_dist_logprob(d, kid), "rank",
                                          k < 0 ? rank_of(d, id) : (int)k + 1,
                                          "decoded_token", sim_tok_json(kid)));
        }
        json_array_append_new(c->plps, o);
    }
    if (!c->tokens || (!gen && !c->echo))
        return;
    cmpl_add(c, id, json_real(lp),
             c->logprobs > 0 ? legacy_top(c, d, c->logprobs) : json_null());
}

static int prompt_ids(json_t *b, const char *field, struct tok_vec *out,
                      struct sim_resp *r)
{
    json_t *p = json_object_get(b, field);
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) ||
         json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (!p) {
        sim_error(r, 400, field, "'%s' is required", field);
        return -1;
    }
    if (json_is_string(p)) {
        tok_encode(json_string_value(p), json_string_length(p), out);
        return 0;
    }
    if (json_is_array(p))
        return sim_get_ids(p, field, out, r);
    sim_error(r, 400, field, "'%s' must be a string or an array of token ids",
              field);
    return -1;
}

static int no_prompt_lps(const struct sim *s, bool asked, const char *field,
                         struct sim_resp *r)
{
    if (!asked || !s->cfg.no_prompt_logprobs)
        return 0;
    sim_error(r, 400, field,
              "'%s': prompt log-probabilities are not supported by this "
              "server",
              field);
    return -1;
}

void sim_completions(struct sim *s, const struct sim_req *rq,
                     struct sim_resp *r)
{
    json_t *b = sim_body(rq, r);
    struct cmpl c = {0};
    struct lm_pass p = {.on_pos = cmpl_pos, .ud = &c, .from = SIZE_MAX};
    bool stream;
    long max_new;
    tok_vec_init(&p.seq);
    c.pass = &p;
    if (!b || prompt_ids(b, "prompt", &p.seq, r) ||
        sim_get_long(b, "max_tokens", 0, 1 << 24, 16, &max_new, r) ||
        sim_get_bool(b, "echo", false, &c.echo, r) ||
        sim_get_bool(b, "return_tokens_as_token_ids", false, &c.as_ids, r) ||
        sim_get_bool(b, "stream", false, &stream, r) ||
        sim_get_long(b, "logprobs", 0, 20, -1, &c.logprobs, r) ||
        sim_get_long(b, "prompt_logprobs", 0, 20, -1, &c.prompt_logprobs, r))
        goto out;
    if (stream) {
        sim_error(r, 400, "stream",
                  "the sim streams only /v1/chat/completions");
        goto out;
    }
    if (no_prompt_lps(s, c.echo && c.logprobs >= 0, "echo", r) ||
        no_prompt_lps(s, c.prompt_logprobs >= 0, "prompt_logprobs", r) ||
        sim_fit_context(s, &p.seq, max_new, r))
        goto out;
    p.prompt_n = p.seq.n;
    p.max_new = max_new;
    if (c.logprobs >= 0) {
        c.tokens = json_array();
        c.token_lps = json_array();
        c.tops = json_array();
        c.offsets = json_array();
        if (c.echo && p.seq.n)
            cmpl_add(&c, p.seq.v[0], json_null(), json_null());
    }
    if (c.prompt_logprobs >= 0)
        c.plps = json_pack("[n]");
    if ((c.echo && c.logprobs >= 0) || c.plps)
        p.from = 1;
    /* vLLM V1 skips the prefix cache for a request with prompt logprobs
     * (vllm/v1/core/kv_cache_manager.py, get_computed_blocks); echo
     * with logprobs is served through them */
    sim_cache_begin(s, p.seq.v, p.seq.n,
                    (c.echo && c.logprobs >= 0) || c.plps ? 0 : SIZE_MAX);
    const char *finish = lm_run(s, rq, &p);
    sim_cache_end(s, p.seq.v, p.prompt_n, p.seq.n);
    char id[48];
    sim_id(s, "cmpl", id);
    size_t from = c.echo ? 0 : p.prompt_n;
    json_t *choice = json_pack("{s:i,s:o,s:s}", "index", 0, "text",
                               text_of(p.seq.v + from, p.seq.n - from),
                               "finish_reason", finish);
    json_object_set_new(choice, "logprobs",
                        c.tokens ? json_pack("{s:o,s:o,s:o,s:o}", "tokens",
                                             c.tokens, "token_logprobs",
                                             c.token_lps, "top_logprobs",
                                             c.tops, "text_offset", c.offsets)
                                 : json_null());
    if (c.plps)
        json_object_set_new(choice, "prompt_logprobs", c.plps);
    c.tokens = c.token_lps = c.tops = c.offsets = c.plps = NULL;
    json_t *usage =
        json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)p.prompt_n,
                  "completion_tokens", (json_int_t)(p.seq.n - p.prompt_n),
                  "total_tokens", (json_int_t)p.seq.n);
    sim_cache_usage(s, usage);
    sim_json(r, json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", id, "object",
                          "text_completion", "created", (json_int_t)time(NULL),
                          "model", s->cfg.model, "choices", choice, "usage",
                          usage));
out:
    json_decref(c.tokens);
    json_decref(c.token_lps);
    json_decref(c.tops);
    json_decref(c.offsets);
    json_decref(c.plps);
    tok_vec_release(&p.seq);
    json_decref(b);
}

/* ---- sglang /generate ---- */

struct sgl {
    bool want;
    long start, topn;
    json_t *ids_asked; /* token_ids_logprob */
    json_t *in_lp, *in_top, *in_ids, *out_lp, *out_top, *out_ids;
    struct lm_pass *pass;
};

static json_t *triple(double lp, int32_t id)
{
    return json_pack("[f,i,n]", lp, id);
}

static void sgl_pos(void *ud, size_t t, const struct dist *d, bool gen)
{
    struct sgl *g = ud;
    int32_t id = g->pass->seq.v[t];
    if (!g->want)
        return;
    json_t *top = json_array(), *ids = NULL;
    for (long k = 0; k < g->topn && k < d->n; k++)
        json_array_append_new(top, triple(d->lp[k], d->id[k]));
    if (g->ids_asked) {
        size_t i;
        json_t *v;
        ids = json_array();
        json_array_foreach(g->ids_asked, i, v)
        {
            int32_t q = (int32_t)json_integer_value(v);
            json_array_append_new(ids, triple(model_dist_logprob(d, q), q));
        }
    }
    json_array_append_new(gen ? g->out_lp : g->in_lp,
                          triple(model_dist_logprob(d, id), id));
    json_array_append_new(gen ? g->out_top : g->in_top, top);
    if (ids)
        json_array_append_new(gen ? g->out_ids : g->in_ids, ids);
}

static int sgl_parse(const struct sim *s, json_t *b, struct sgl *g,
                     struct lm_pass *p, struct sim_resp *r)
{
    json_t *sp = json_object_get(b, "sampling_params");
    if (sp && !json_is_object(sp)) {
        sim_error(r, 400, "sampling_params",
                  "'sampling_params' must be an "
                  "object");
        return -1;
    }
    if (json_object_get(b, "input_ids")) {
        if (sim_get_ids(json_object_get(b, "input_ids"), "input_ids", &p->seq,
                        r))
            return -1;
    } else if (json_is_string(json_object_get(b, "text"))) {
        json_t *t = json_object_get(b, "text");
        tok_encode(json_string_value(t), json_string_length(t), &p->seq);
    } else {
        sim_error(r, 400, "text",
                  "'text' (a string) or 'input_ids' is "
                  "required");
        return -1;
    }
    g->ids_asked = json_object_get(b, "token_ids_logprob");
    if (json_is_null(g->ids_asked))
        g->ids_asked = NULL;
    if (g->ids_asked) {
        struct tok_vec chk;
        tok_vec_init(&chk);
        int bad = sim_get_ids(g->ids_asked, "token_ids_logprob", &chk, r);
        tok_vec_release(&chk);
        if (bad)
            return -1;
    }
    if (sim_get_long(sp, "max_new_tokens", 0, 1 << 24, 128, &p->max_new, r) ||
        sim_get_bool(b, "return_logprob", false, &g->want, r) ||
        sim_get_long(b, "logprob_start_len", -1, 1 << 24, -1, &g->start, r) ||
        sim_get_long(b, "top_logprobs_num", 0, 20, 0, &g->topn, r))
        return -1;
    return no_prompt_lps(s, g->want && g->start >= 0, "logprob_start_len", r);
}

static void sgl_answer(struct sim *s, struct sgl *g, struct lm_pass *p,
                       const char *finish, struct sim_resp *r)
{
    char id[48];
    sim_id(s, "gen", id);
    json_t *fin =
        !strcmp(finish, "stop")
            ? json_pack("{s:s,s:i}", "type", "stop", "matched", TOK_END)
            : json_pack("{s:s,s:I}", "type", "length", "length",
                        (json_int_t)p->max_new);
    json_t *meta =
        json_pack("{s:s,s:o,s:I,s:I}", "id", id, "finish_reason", fin,
                  "prompt_tokens", (json_int_t)p->prompt_n, "completion_tokens",
                  (json_int_t)(p->seq.n - p->prompt_n));
    if (!s->cfg.no_cache_report)
        json_object_set_new(meta, "cached_tokens",
                            json_integer((json_int_t)s->use.cached));
    if (g->want) {
        json_object_set_new(meta, "input_token_logprobs", g->in_lp);
        json_object_set_new(meta, "input_top_logprobs", g->in_top);
        json_object_set_new(meta, "output_token_logprobs", g->out_lp);
        json_object_set_new(meta, "output_top_logprobs", g->out_top);
        if (g->ids_asked) {
            json_object_set_new(meta, "input_token_ids_logprob", g->in_ids);
            json_object_set_new(meta, "output_token_ids_logprob", g->out_ids);
        }
        g->in_lp = g->in_top = g->out_lp = g->out_top = NULL;
        if (g->ids_asked)
            g->in_ids = g->out_ids = NULL;
    }
    json_t *ids = json_array();
    for (size_t i = p->prompt_n; i < p->seq.n; i++)
        json_array_append_new(ids, json_integer(p->seq.v[i]));
    sim_json(r,
             json_pack("{s:o,s:o,s:o}", "text",
                       text_of(p->seq.v + p->prompt_n, p->seq.n - p->prompt_n),
                       "output_ids", ids, "meta_info", meta));
}

static void sglang(struct sim *s, const struct sim_req *rq, json_t *b,
                   struct sim_resp *r)
{
    struct sgl g = {0};
    struct lm_pass p = {.on_pos = sgl_pos, .ud = &g, .from = SIZE_MAX};
    tok_vec_init(&p.seq);
    g.pass = &p;
    if (sgl_parse(s, b, &g, &p, r) || sim_fit_context(s, &p.seq, p.max_new, r))
        goto out;
    p.prompt_n = p.seq.n;
    g.in_lp = json_array();
    g.in_top = json_array();
    g.in_ids = json_array();
    g.out_lp = json_array();
    g.out_top = json_array();
    g.out_ids = json_array();
    if (g.want && g.start >= 0 && (size_t)g.start < p.seq.n) {
        p.from = (size_t)g.start;
        if (g.start == 0) { /* sglang reports the first token unscored */
            json_array_append_new(g.in_lp, json_pack("[n,i,n]", p.seq.v[0]));
            json_array_append_new(g.in_top, json_null());
            json_array_append_new(g.in_ids, json_null());
        }
    }
    /* sglang matches a prefix of at most logprob_start_len tokens when
     * logprobs are asked from there (python/sglang/srt/managers/
     * schedule_batch.py, Req: max_prefix_len) */
    sim_cache_begin(s, p.seq.v, p.seq.n,
                    g.want && g.start >= 0 ? (size_t)g.start : SIZE_MAX);
    const char *finish = lm_run(s, rq, &p);
    sim_cache_end(s, p.seq.v, p.prompt_n, p.seq.n);
    sgl_answer(s, &g, &p, finish, r);
out:
    json_decref(g.in_lp);
    json_decref(g.in_top);
    json_decref(g.in_ids);
    json_decref(g.out_lp);
    json_decref(g.out_top);
    json_decref(g.out_ids);
    tok_vec_release(&p.seq);
}

/* ---- TGI /generate ---- */

struct tgi {
    long topn;
    json_t *prefill, *tokens, *top;
    struct lm_pass *pass;
};

static json_t *tgi_tok(int32_t id, double lp)
{
    return json_pack("{s:i,s:o,s:f,s:b}", "id", id, "text", sim_tok_json(id),
                     "logprob", lp, "special", id < TOK_NSPECIAL);
}

static void tgi_pos(void *ud, size_t t, const struct dist *d, bool gen)
{
    struct tgi *g = ud;
    int32_t id = g->pass->seq.v[t];
    if (!gen) {
        json_t *e = tgi_tok(id, model_dist_logprob(d, id));
        json_object_del(e, "special");
        json_array_append_new(g->prefill, e);
        return;
    }
    json_array_append_new(g->tokens, tgi_tok(id, model_dist_logprob(d, id)));
    json_t *top = json_array();
    for (long k = 0; k < g->topn && k < d->n; k++)
        json_array_append_new(top, tgi_tok(d->id[k], d->lp[k]));
    json_array_append_new(g->top, top);
}

static void tgi(struct sim *s, const struct sim_req *rq, json_t *b,
                struct sim_resp *r)
{
    struct tgi g = {0};
    struct lm_pass p = {.on_pos = tgi_pos, .ud = &g, .from = SIZE_MAX};
    json_t *prm = json_object_get(b, "parameters"), *in;
    bool dec_details, details;
    tok_vec_init(&p.seq);
    g.pass = &p;
    in = json_object_get(b, "inputs");
    if (!json_is_string(in)) {
        sim_error(r, 400, "inputs", "'inputs' must be a string");
        goto out;
    }
    tok_encode(json_string_value(in), json_string_length(in), &p.seq);
    if (sim_get_long(prm, "max_new_tokens", 0, 1 << 24, 20, &p.max_new, r) ||
        sim_get_bool(prm, "decoder_input_details", false, &dec_details, r) ||
        sim_get_bool(prm, "details", false, &details, r) ||
        sim_get_long(prm, "top_n_tokens", 0, 20, 0, &g.topn, r) ||
        no_prompt_lps(s, dec_details, "decoder_input_details", r) ||
        sim_fit_context(s, &p.seq, p.max_new, r))
        goto out;
    p.prompt_n = p.seq.n;
    g.prefill = json_array();
    g.tokens = json_array();
    g.top = json_array();
    if (dec_details && p.seq.n) {
        p.from = 1;
        json_array_append_new(
            g.prefill, json_pack("{s:i,s:o,s:n}", "id", p.seq.v[0], "text",
                                 sim_tok_json(p.seq.v[0]), "logprob"));
    }
    sim_cache_begin(s, p.seq.v, p.seq.n, dec_details ? 0 : SIZE_MAX);
    const char *finish = lm_run(s, rq, &p);
    sim_cache_end(s, p.seq.v, p.prompt_n, p.seq.n);
    json_t *out =
        json_pack("{s:o}", "generated_text",
                  text_of(p.seq.v + p.prompt_n, p.seq.n - p.prompt_n));
    if (details || dec_details) {
        json_t *det =
            json_pack("{s:s,s:I,s:n,s:O,s:O}", "finish_reason",
                      !strcmp(finish, "stop") ? "eos_token" : "length",
                      "generated_tokens", (json_int_t)(p.seq.n - p.prompt_n),
                      "seed", "prefill", g.prefill, "tokens", g.tokens);
        if (g.topn)
            json_object_set(det, "top_tokens", g.top);
        json_object_set_new(out, "details", det);
    }
    sim_json(r, out);
out:
    json_decref(g.prefill);
    json_decref(g.tokens);
    json_decref(g.top);
    tok_vec_release(&p.seq);
}

void sim_generate(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    json_t *b = sim_body(rq, r);
    if (!b)
        return;
    if (json_object_get(b, "inputs"))
        tgi(s, rq, b, r);
    else
        sglang(s, rq, b, r);
    json_decref(b);
}

/* ---- /tokenize, /detokenize ---- */

void sim_tokenize(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    json_t *b = sim_body(rq, r), *msgs;
    struct tok_vec t;
    bool gen;
    tok_vec_init(&t);
    if (!b)
        return;
    msgs = json_object_get(b, "messages");
    if (msgs) {
        /* The template's own encoding rules apply (reasoning history);
         * serving-path faults (turn windows, system drop, truncation) do
         * not, so that /tokenize is the independent expectation. */
        struct sim_config clean = s->cfg;
        struct diag d = {""};
        clean.keep_last_turns = 0;
        clean.ignore_system = false;
        bool tools = json_array_size(json_object_get(b, "tools")) > 0;
        if (sim_get_bool(b, "add_generation_prompt", true, &gen, r))
            goto out;
        if (tmpl_render(msgs, tools, gen, &clean, &t, &d)) {
            sim_error(r, 400, "messages", "%s", d.msg);
            goto out;
        }
    } else if (json_is_string(json_object_get(b, "prompt"))) {
        json_t *p = json_object_get(b, "prompt");
        tok_encode(json_string_value(p), json_string_length(p), &t);
    } else {
        sim_error(r, 400, "prompt",
                  "'prompt' (a string) or 'messages' is required");
        goto out;
    }
    json_t *ids = json_array();
    for (size_t i = 0; i < t.n; i++)
        json_array_append_new(ids, json_integer(t.v[i]));
    sim_json(r, json_pack("{s:I,s:I,s:o}", "count", (json_int_t)t.n,
                          "max_model_len", (json_int_t)s->cfg.max_model_len,
                          "tokens", ids));
out:
    tok_vec_release(&t);
    json_decref(b);
}

void sim_detokenize(struct sim *s, const struct sim_req *rq, struct sim_resp *r)
{
    (void)s;
    json_t *b = sim_body(rq, r);
    struct tok_vec t;
    tok_vec_init(&t);
    if (!b)
        return;
    if (!json_object_get(b, "tokens"))
        sim_error(r, 400, "tokens", "'tokens' is required");
    else if (!sim_get_ids(json_object_get(b, "tokens"), "tokens", &t, r))
        sim_json(r, json_pack("{s:o}", "prompt", text_of(t.v, t.n)));
    tok_vec_release(&t);
    json_decref(b);
}
