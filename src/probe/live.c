/*
 * live: playing sessions as a harness does. Each session of a cell is
 * seeded by the run seed and its seed index only, so every cell sees the
 * same facts and the same work turns and differs only in the request
 * fields of its cell and in how earlier reasoning is sent back: the
 * differences in recall are the cell's. The model's reply of each turn is
 * appended as a harness appends it; a tool call is answered by a scripted
 * tool result carrying the call's id, and the conversation is sent again
 * (at most three tool rounds a turn).
 */
#include "probe/live.h"
#include "probe/probe_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "core/buf.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/tpool.h"
#include "core/xalloc.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define TOOL_ROUNDS 3

static const char *const sendr_names[PROBE_SR_COUNT] = {
    [PROBE_SR_KEEP] = "keep",
    [PROBE_SR_DROP] = "drop",
    [PROBE_SR_KEEP_TOOLS] = "keep-with-tools",
};

const char *probe_sendr_name(int sr)
{
    return sr >= 0 && sr < PROBE_SR_COUNT ? sendr_names[sr] : "?";
}

int probe_sendr_parse(const char *s)
{
    for (int i = 0; i < PROBE_SR_COUNT; i++)
        if (!strcmp(s, sendr_names[i]))
            return i;
    return -1;
}

void probe_live_plan_init(struct probe_live_plan *p, unsigned turns,
                          unsigned seeds, const struct probe_vary_cells *vc,
                          unsigned sendr_mask)
{
    p->turns = turns;
    p->seeds = seeds;
    p->n_ask = 0;
    for (unsigned t = 4; t <= turns; t += 2)
        p->ask[p->n_ask++] = t;
    if (!p->n_ask || p->ask[p->n_ask - 1] != turns)
        p->ask[p->n_ask++] = turns;
    if (!sendr_mask)
        sendr_mask = 1u << PROBE_SR_KEEP;
    p->n_cells = 0;
    p->cells = xcalloc(vc->n * PROBE_SR_COUNT, sizeof(*p->cells));
    for (size_t i = 0; i < vc->n; i++)
        for (int sr = 0; sr < PROBE_SR_COUNT; sr++)
            if (sendr_mask & (1u << sr))
                p->cells[p->n_cells++] =
                    (struct probe_live_cell){vc->cell[i], vc->label[i], sr};
}

void probe_live_plan_release(struct probe_live_plan *p)
{
    free(p->cells);
    p->cells = NULL;
    p->n_cells = 0;
}

/* ---- the script of a session ---- */

static const char *const attrs[] = {
    "access code", "locker number", "badge number",  "parking spot",
    "room number", "ticket number", "serial number", "pager number",
};
static const char *const ents[] = {
    "the blue door", "the north gate", "the red locker",   "the server room",
    "the east wing", "the green van",  "the loading dock",
};
static const char *const programs[] = {
    "snake game",         "todo list manager", "unit converter",
    "password generator", "hangman game",      "markdown previewer",
};
static const char *const writes[] = {
    "Write a helper function that validates the input.",
    "Write a function that loads the settings from a file.",
    "Write a class that keeps the history of moves.",
    "Write the command line parsing for it.",
};
static const char *const changes[] = {
    "Now change it to save the results to a file.",
    "Now change the main loop so that it can be paused.",
    "Now change the error handling to log instead of exit.",
    "Now rename the functions to follow PEP 8.",
};
static const char *const explains[] = {
    "Explain what this part of the code does.",
    "Explain why this function is slow.",
    "Explain how the state is kept between calls.",
};

struct script {
    char attr[PROBE_LIVE_FACTS][24], ent[PROBE_LIVE_FACTS][24];
    char value[PROBE_LIVE_FACTS][8];
    const char *program;
    uint64_t seed;
};

static void script_init(struct script *s, uint64_t run_seed, unsigned k)
{
    struct rng r;
    s->seed = hash_mix2(run_seed ^ 0x6c697665ULL, k);
    rng_seed(&r, s->seed);
    size_t a0 = rng_below(&r, N(attrs));
    for (int f = 0; f < PROBE_LIVE_FACTS; f++) {
        snprintf(s->attr[f], sizeof(s->attr[f]), "%s",
                 attrs[(a0 + (size_t)f) % N(attrs)]);
        snprintf(s->ent[f], sizeof(s->ent[f]), "%s",
                 ents[rng_below(&r, N(ents))]);
        snprintf(s->value[f], sizeof(s->value[f]), "%u",
                 100000 + (unsigned)rng_below(&r, 900000));
    }
    s->program = programs[rng_below(&r, N(programs))];
}

/* The fact asked at turn t (1-based), or -1. */
static int asked_at(const struct probe_live_plan *p, unsigned t)
{
    for (size_t i = 0; i < p->n_ask; i++)
        if (p->ask[i] == t)
            return (int)(i % PROBE_LIVE_FACTS);
    return -1;
}

static void paste(struct buf *b, uint64_t seed, unsigned t, size_t bytes,
                  enum probe_filler src)
{
    if (!bytes)
        return;
    buf_adds(b, "\n\n```\n");
    probe_filler(b, src, hash_mix2(seed, t), bytes);
    buf_adds(b, "\n```");
}

/* The user message of turn t (1-based); caller frees. */
static char *user_text(const struct probe_live_plan *p, const struct script *s,
                       unsigned t)
{
    struct buf b = BUF_INIT;
    int f = asked_at(p, t);
    uint64_t h = hash_mix2(s->seed, t);
    if (f >= 0) {
        buf_printf(&b, "What is the %s for %s?", s->attr[f], s->ent[f]);
    } else if (t == 1) {
        buf_printf(&b,
                   "Write a Python program for a %s. Before we start, "
                   "remember this: The %s for %s is %s.",
                   s->program, s->attr[0], s->ent[0], s->value[0]);
    } else if (t == 2) {
        buf_printf(&b,
                   "%s One more thing to keep in mind: The %s for %s is "
                   "%s.",
                   writes[h % N(writes)], s->attr[1], s->ent[1], s->value[1]);
        paste(&b, s->seed, t, p->turn_bytes, FILLER_CODE);
    } else {
        switch ((t / 2 + (unsigned)(s->seed % 4)) % 4) {
        case 0:
            buf_adds(&b, writes[h % N(writes)]);
            paste(&b, s->seed, t, p->turn_bytes, FILLER_CODE);
            break;
        case 1:
            buf_adds(&b, changes[h % N(changes)]);
            paste(&b, s->seed, t, p->turn_bytes, FILLER_CODE);
            break;
        case 2:
            buf_adds(&b, explains[h % N(explains)]);
            paste(&b, s->seed, t, p->turn_bytes, FILLER_PROSE);
            break;
        default:
            buf_printf(&b,
                       "Call the run_tests tool with {\"path\": "
                       "\"tests/test_%u.py\"}",
                       (unsigned)(h % 90) + 10);
        }
    }
    return buf_detach(&b, NULL);
}

static json_t *tools_json(void)
{
    return json_pack(
        "[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}},s:[s]}}},"
        "{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}},s:[s]}}}]",
        "type", "function", "function", "name", "run_tests", "description",
        "Run the test suite at a path and report the results.", "parameters",
        "type", "object", "properties", "path", "type", "string", "required",
        "path", "type", "function", "function", "name", "read_file",
        "description", "Read a file of the project.", "parameters", "type",
        "object", "properties", "path", "type", "string", "required", "path");
}

static json_t *tool_result(uint64_t seed, const char *id)
{
    char text[160];
    unsigned n = 5 + (unsigned)(seed % 20), ms = 100 + (unsigned)(seed % 900);
    snprintf(text, sizeof(text),
             "collected %u items\n%u passed in 0.%03u s\nexit status 0", n, n,
             ms);
    return json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", id,
                     "content", text);
}

static const char *str_or(json_t *o, const char *k, const char *def)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : def;
}

/* ---- a session ---- */

struct session {
    const struct probe_live_plan *p;
    const struct probe_live_cell *cell;
    struct probe_endpoint *e;
    struct http_client *c;
    struct script s;
    struct probe_case pc;
    volatile sig_atomic_t *stop;
    size_t sent;
};

static void case_init(struct session *ss, unsigned k)
{
    memset(&ss->pc, 0, sizeof(ss->pc));
    ss->pc.messages = json_array();
    ss->pc.tools = tools_json();
    ss->pc.spec.kind = PROBE_NEEDLE;
    ss->pc.spec.depth = -1;
    ss->pc.spec.rep = k;
    ss->pc.spec.vary = ss->cell->vary;
    ss->pc.spec.vary_key = ss->cell->label;
    json_t *t = json_object_get(ss->cell->vary, "temperature");
    ss->pc.spec.temperature = json_is_number(t) ? json_number_value(t) : 0;
}

/* Appends the reply's assistant message as a harness would; returns the
 * tool calls to answer (borrowed from rep), or NULL. */
static json_t *append_reply(struct session *ss, const struct probe_reply *rep,
                            bool last_round)
{
    json_t *calls = json_object_get(rep->message, "tool_calls");
    if (!json_is_array(calls) || !json_array_size(calls) || last_round)
        calls = NULL;
    json_t *m = json_pack("{s:s}", "role", "assistant");
    json_object_set_new(m, "content",
                        rep->content ? json_string(rep->content)
                        : calls      ? json_null()
                                     : json_string(""));
    int sr = ss->cell->sendr;
    if (rep->reasoning && *rep->reasoning &&
        (sr == PROBE_SR_KEEP || (sr == PROBE_SR_KEEP_TOOLS && calls)))
        json_object_set_new(m, "reasoning_content",
                            json_string(rep->reasoning));
    if (calls) {
        json_t *out = json_array(), *call;
        size_t i;
        json_array_foreach(calls, i, call)
        {
            json_t *fn = json_object_get(call, "function");
            json_array_append_new(
                out, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id",
                               str_or(call, "id", ""), "type", "function",
                               "function", "name", str_or(fn, "name", ""),
                               "arguments", str_or(fn, "arguments", "{}")));
        }
        json_object_set_new(m, "tool_calls", out);
    }
    json_array_append_new(ss->pc.messages, m);
    return calls;
}

static void measure(struct probe_live_turn *tt, const struct probe_reply *rep)
{
    size_t rl = rep->reasoning ? strlen(rep->reasoning) : 0;
    size_t cl = rep->content ? strlen(rep->content) : 0;
    tt->reasoning += rl;
    tt->content += cl;
    tt->prompt_tokens = rep->prompt_tokens;
    snprintf(tt->finish, sizeof(tt->finish), "%s", rep->finish);
    struct buf b = BUF_INIT;
    buf_add(&b, rep->reasoning ? rep->reasoning : "", rl);
    buf_addch(&b, '\n');
    buf_add(&b, rep->content ? rep->content : "", cl);
    tt->gzip_ratio = audit_gzip_ratio(buf_str(&b), b.len);
    tt->ngram_share = audit_ngram_share(buf_str(&b), b.len);
    buf_release(&b);
    tt->reasoning_ratio =
        (double)tt->reasoning / (double)(tt->content ? tt->content : 1);
}

/* Plays turn t; 0, or -1 with res->error set (the session ends). */
static int play_turn(struct session *ss, unsigned t,
                     struct probe_live_result *res)
{
    struct probe_live_turn *tt = &res->turn[t - 1];
    memset(tt, 0, sizeof(*tt));
    tt->asked = asked_at(ss->p, t);
    tt->prompt_tokens = -1;
    char *text = user_text(ss->p, &ss->s, t);
    json_array_append_new(ss->pc.messages, json_pack("{s:s,s:s}", "role",
                                                     "user", "content", text));
    free(text);
    for (unsigned round = 0; round <= TOOL_ROUNDS; round++) {
        struct probe_reply rep;
        ss->pc.spec.seed = hash_mix2(ss->s.seed, t * 8 + round);
        int r = probe_chat(ss->e, ss->c, &ss->pc, ss->p->max_tokens, &rep,
                           ss->stop);
        ss->sent += rep.attempts;
        tt->requests++;
        res->requests++;
        if (r) {
            snprintf(res->error, sizeof(res->error), "turn %u: %s", t,
                     rep.error);
            probe_reply_release(&rep);
            return -1;
        }
        measure(tt, &rep);
        json_t *calls = append_reply(ss, &rep, round == TOOL_ROUNDS);
        if (!calls) {
            if (tt->asked >= 0) {
                struct probe_case q;
                memset(&q, 0, sizeof(q));
                snprintf(q.expect, sizeof(q.expect), "%s",
                         ss->s.value[tt->asked]);
                tt->passed = probe_score(&q, rep.content);
                tt->no_context = probe_has_no_context(rep.content);
            }
            probe_reply_release(&rep);
            return 0;
        }
        size_t i;
        json_t *call;
        json_array_foreach(calls, i, call)
        {
            const char *id = json_string_value(json_object_get(call, "id"));
            json_array_append_new(
                ss->pc.messages,
                tool_result(hash_mix2(ss->s.seed, t * 8 + i), id ? id : ""));
            tt->tool_calls++;
        }
        probe_reply_release(&rep);
    }
    return 0;
}

static void play(struct session *ss, unsigned k, struct probe_live_result *res)
{
    script_init(&ss->s, ss->p->seed, k);
    case_init(ss, k);
    for (unsigned t = 1; t <= ss->p->turns; t++) {
        if (ss->stop && *ss->stop)
            goto out;
        if (play_turn(ss, t, res))
            break;
        res->n_turns = t;
        if (res->turn[t - 1].asked >= 0 && !res->turn[t - 1].passed &&
            !res->break_turn)
            res->break_turn = t;
    }
    res->done = true;
out:
    probe_case_release(&ss->pc);
}

json_t *probe_live_first_request(const struct probe_live_plan *p,
                                 const struct probe_endpoint *e, size_t c,
                                 unsigned k)
{
    struct session ss = {.p = p, .cell = &p->cells[c]};
    script_init(&ss.s, p->seed, k);
    case_init(&ss, k);
    char *text = user_text(p, &ss.s, 1);
    json_array_append_new(ss.pc.messages, json_pack("{s:s,s:s}", "role", "user",
                                                    "content", text));
    free(text);
    ss.pc.spec.seed = hash_mix2(ss.s.seed, 8);
    json_t *b = probe_chat_body(e, &ss.pc, p->max_tokens);
    probe_case_release(&ss.pc);
    return b;
}

void probe_live_key(const struct probe_live_plan *p,
                    const struct probe_endpoint *e, const char *extra_key,
                    size_t c, unsigned k, char out[17])
{
    struct buf b = BUF_INIT;
    buf_printf(&b, "probe-live-v1|%s|%s|%u|%llu|%u|%u|%zu|", p->cells[c].label,
               probe_sendr_name(p->cells[c].sendr), k,
               (unsigned long long)p->seed, p->turns, p->max_tokens,
               p->turn_bytes);
    for (size_t i = 0; i < p->n_ask; i++)
        buf_printf(&b, "%u,", p->ask[i]);
    buf_printf(&b, "|%s|%s|%s", e->model ? e->model : "",
               extra_key ? extra_key : "", e->fp);
    hash_hex(hash64(buf_str(&b), b.len, 0x6c697665ULL), out);
    buf_release(&b);
}

/* ---- the workers ---- */

struct shared {
    struct probe_live_run *r;
    struct tpool pool;
    size_t done;
};

static void run_one(struct shared *sh, size_t i, struct http_client *c)
{
    struct probe_live_run *r = sh->r;
    const struct probe_live_plan *p = r->plan;
    size_t cell = i / p->seeds;
    unsigned k = (unsigned)(i % p->seeds);
    struct probe_live_result *res = &r->res[i];
    struct diag d;
    char key[17];

    probe_live_key(p, r->ep, r->extra_key, cell, k, key);
    if (r->db && !r->fresh && probe_live_store_get(r->db, key, res, &d) == 1)
        return;
    memset(res, 0, sizeof(*res));
    snprintf(res->key, sizeof(res->key), "%s", key);
    struct session ss = {
        .p = p, .cell = &p->cells[cell], .e = r->ep, .c = c, .stop = r->stop};
    play(&ss, k, res);
    tpool_lock(&sh->pool);
    r->sent += ss.sent;
    tpool_unlock(&sh->pool);
    if (!res->done || !r->db)
        return;
    char *name = xasprintf("%s%ssend-reasoning=%s", p->cells[cell].label,
                           *p->cells[cell].label ? " " : "",
                           probe_sendr_name(p->cells[cell].sendr));
    int sr = probe_live_store_put(r->db, r->ep->fp, name, k, res, &d);
    free(name);
    if (sr) {
        tpool_lock(&sh->pool);
        if (!r->store_err) {
            r->store_err = -EIO;
            r->store_diag = d;
        }
        tpool_unlock(&sh->pool);
    }
}

static void *worker_new(struct tpool *p)
{
    (void)p;
    return http_client_new();
}

static void worker_free(struct tpool *p, void *ts)
{
    (void)p;
    http_client_free(ts);
}

static void item(struct tpool *p, void *ts, size_t i)
{
    run_one(p->ud, i, ts);
}

/* After session i, under the pool's mutex. */
static void item_done(struct tpool *p, size_t i)
{
    struct shared *sh = p->ud;
    struct probe_live_run *r = sh->r;
    if (!r->res[i].done)
        r->interrupted = true;
    sh->done += r->res[i].done;
    r->cached += r->res[i].cached;
    if (r->progress)
        r->progress(r->ud, sh->done, p->n);
}

int probe_live_run(struct probe_live_run *r)
{
    struct shared sh = {.r = r};
    sh.pool = (struct tpool){.n = r->plan->n_cells * r->plan->seeds,
                             .jobs = r->jobs,
                             .stop = r->stop,
                             .thread_new = worker_new,
                             .thread_free = worker_free,
                             .item = item,
                             .done = item_done,
                             .ud = &sh};
    r->sent = r->cached = 0;
    r->interrupted = false;
    tpool_run(&sh.pool);
    if (sh.pool.stopped)
        r->interrupted = true;
    return 0;
}
