/*
 * gen: builds one probe case (the messages, the tools offered, the
 * question and what a correct reply must contain) from its spec and a
 * filler budget. Facts use the sim's grammar, which is also how a real
 * model is asked: "The access code for the blue door is 482913." and
 * "What is the access code for the blue door?" (docs/SIM.md).
 *
 * A conversation is a system message, N user turns of filler each followed
 * by a short assistant reply, and the question. The probe's statements are
 * "inserts" at a position in [0, 1] of the filler (the depth); an insert
 * lands in the turn that holds that share of the filler, at the next line
 * boundary, or in that turn's assistant message, reasoning or tool call.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_INS 12

enum where {
    AT_USER,
    AT_ASSISTANT,
    AT_REASONING,
    AT_THINK,
    AT_TOOL_ARGS,
    AT_TOOL_RESULT
};

struct insert {
    double pos;
    enum where at;
    char text[200];
};

struct layout {
    unsigned turns;
    struct insert ins[MAX_INS];
    size_t n_ins;
    bool canary;     /* a nonce in every message */
    bool first;      /* turn 1 is the request, later turns follow up */
    bool tools;      /* offer tools in the request */
    bool tool_turn0; /* a tool exchange in the first turn */
    const char *question;
};

static const char *const attrs[] = {
    "access code", "locker number", "badge number",  "parking spot",
    "room number", "ticket number", "serial number", "pager number",
};
static const char *const ents[] = {
    "the blue door",   "the north gate", "the red locker",   "the server room",
    "the east wing",   "the green van",  "the loading dock", "the west tower",
    "the main office", "the cold store",
};
static const char *const intros[] = {
    "Here is the next part of the material.",
    "Please keep this in mind for later.",
    "This is the output I got.",
    "Take a look at this.",
    "Here is some more context for the task.",
};
static const char *const acks[] = {
    "Got it.",
    "Thanks, noted.",
    "I have read it.",
    "Understood.",
};
static const char *const programs[] = {
    "tic-tac-toe game",   "snake game",         "todo list manager",
    "prime number sieve", "unit converter",     "password generator",
    "hangman game",       "markdown previewer",
};
static const char *const followups[] = {
    "Now make it save the results to a file.",
    "Also add a score counter.",
    "Then add a help screen.",
    "And make the colours configurable.",
    "Now add unit tests for it.",
    "Also handle invalid input gracefully.",
    "Then add a command line option for the difficulty.",
    "And write a short README for it.",
};
static const char *const ordinals[] = {"first", "second", "third", "fourth"};

unsigned probe_turns_for(unsigned target)
{
    unsigned n = 4 + target / 2048;
    return n > 24 ? 24 : n;
}

static unsigned value6(struct rng *r)
{
    return 100000 + (unsigned)rng_below(r, 900000);
}

static void add_ins(struct layout *l, double pos, enum where at,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add_ins(struct layout *l, double pos, enum where at,
                    const char *fmt, ...)
{
    if (l->n_ins >= MAX_INS)
        return;
    struct insert *in = &l->ins[l->n_ins++];
    va_list ap;
    in->pos = pos < 0 ? 0 : pos > 1 ? 1 : pos;
    in->at = at;
    va_start(ap, fmt);
    vsnprintf(in->text, sizeof(in->text), fmt, ap);
    va_end(ap);
}

static unsigned turn_of(const struct layout *l, double pos)
{
    unsigned t = (unsigned)floor(pos * l->turns);
    return t >= l->turns ? l->turns - 1 : t;
}

static uint64_t canary_val(uint64_t seed, int role, unsigned t)
{
    return 100000 + hash_mix2(seed, (uint64_t)role * 1000 + t) % 900000;
}

static const char *canary_ent(int role, unsigned t, char *out, size_t n)
{
    static const char *const names[] = {
        [PROBE_CV_USER] = "user turn",
        [PROBE_CV_ASSISTANT] = "assistant turn",
        [PROBE_CV_REASONING] = "reasoning turn",
        [PROBE_CV_TOOL] = "tool result",
    };
    if (role == PROBE_CV_SYSTEM)
        snprintf(out, n, "the system message");
    else
        snprintf(out, n, "%s %u", names[role], t + 1);
    return out;
}

/* ---- the kinds: each fills the layout and the expected answer ---- */

static void plan_fact(struct probe_case *c, struct layout *l, struct rng *r,
                      const char **attr, const char **ent)
{
    (void)l;
    *attr = attrs[rng_below(r, N(attrs))];
    *ent = ents[rng_below(r, N(ents))];
    snprintf(c->expect, sizeof(c->expect), "%u", value6(r));
}

static void plan_needle(struct probe_case *c, struct layout *l, struct rng *r,
                        double d)
{
    const char *a, *e;
    plan_fact(c, l, r, &a, &e);
    add_ins(l, d, AT_USER, "The %s for %s is %s.", a, e, c->expect);
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the %s for %s?", a, e);
    l->question = q;
}

static void plan_multi(struct probe_case *c, struct layout *l, struct rng *r,
                       double d)
{
    const unsigned k = 4;
    unsigned o = (unsigned)lround(d * (k - 1)); /* 0-based target */
    const char *a = attrs[rng_below(r, N(attrs))];
    const char *e = ents[rng_below(r, N(ents))];
    unsigned v[4];
    for (unsigned i = 0; i < k; i++) {
    again:
        v[i] = value6(r);
        for (unsigned j = 0; j < i; j++)
            if (v[j] == v[i])
                goto again;
    }
    for (unsigned i = 0; i < k; i++) {
        double p = i == o  ? d
                   : i < o ? d * i / o
                           : d + (1 - d) * (i - o) / (double)(k - 1 - o);
        add_ins(l, p, AT_USER, "The %s for %s is %u.", a, e, v[i]);
        if (i == o)
            snprintf(c->expect, sizeof(c->expect), "%u", v[i]);
        else
            snprintf(c->distract[c->n_distract++], sizeof(c->distract[0]), "%u",
                     v[i]);
    }
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the %s %s for %s?", ordinals[o], a, e);
    l->question = q;
}

static void plan_canary(struct probe_case *c, struct layout *l, int role,
                        double d)
{
    uint64_t s = c->spec.seed;
    unsigned j =
        role == PROBE_CV_SYSTEM ? 0 : (unsigned)lround(d * (l->turns - 1));
    char ent[48];
    l->canary = true;
    l->tools = true;
    snprintf(c->expect, sizeof(c->expect), "%llu",
             (unsigned long long)canary_val(s, role, j));
    for (unsigned t = 0; t < l->turns && c->n_distract < PROBE_MAX_DISTRACT;
         t++) {
        uint64_t v = canary_val(s, role, t);
        if (t != j && v != canary_val(s, role, j) && role != PROBE_CV_SYSTEM &&
            (t + 4 >= j && t <= j + 4))
            snprintf(c->distract[c->n_distract++], sizeof(c->distract[0]),
                     "%llu", (unsigned long long)v);
    }
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the canary for %s?",
             canary_ent(role, j, ent, sizeof(ent)));
    l->question = q;
}

static void plan_first(struct probe_case *c, struct layout *l, struct rng *r)
{
    l->first = true;
    snprintf(c->expect, sizeof(c->expect), "%s",
             programs[rng_below(r, N(programs))]);
    c->expect_words = true;
    l->question = "What did my first message ask for?";
}

static void plan_reasoning(struct probe_case *c, struct layout *l,
                           struct rng *r, double d, int v)
{
    const char *a, *e;
    plan_fact(c, l, r, &a, &e);
    enum where at = v == PROBE_RV_INLINE || v == PROBE_RV_INLINE_TOOLS
                        ? AT_THINK
                        : AT_REASONING;
    if (v != PROBE_RV_OMITTED)
        add_ins(l, d, at,
                "The user wants me to work out a code and keep it to myself. "
                "The %s for %s is %s. I will not repeat it.",
                a, e, c->expect);
    else
        c->control = true;
    l->tools = v == PROBE_RV_FIELD_TOOLS || v == PROBE_RV_INLINE_TOOLS;
    l->tool_turn0 = l->tools;
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the %s for %s?", a, e);
    l->question = q;
}

static void plan_tool(struct probe_case *c, struct layout *l, struct rng *r,
                      double d, int v)
{
    const char *a, *e;
    plan_fact(c, l, r, &a, &e);
    l->tools = true;
    add_ins(l, d, v == PROBE_TV_ARGS ? AT_TOOL_ARGS : AT_TOOL_RESULT,
            "The %s for %s is %s.", a, e, c->expect);
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the %s for %s?", a, e);
    l->question = q;
}

static void var_name(struct rng *r, char out[4], char avoid[][4], size_t n)
{
again:
    out[0] = 'Q';
    out[1] = (char)('A' + rng_below(r, 26));
    out[2] = (char)('A' + rng_below(r, 26));
    out[3] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!strcmp(avoid[i], out))
            goto again;
}

static void plan_variables(struct probe_case *c, struct layout *l,
                           struct rng *r, double d)
{
    enum { HOPS = 4, DHOPS = 3 };
    char names[HOPS + DHOPS][4];
    for (size_t i = 0; i < HOPS + DHOPS; i++)
        var_name(r, names[i], names, i);
    unsigned v = value6(r), dv;
    do
        dv = value6(r);
    while (dv == v);
    snprintf(c->expect, sizeof(c->expect), "%u", v);
    snprintf(c->distract[c->n_distract++], sizeof(c->distract[0]), "%u", dv);
    add_ins(l, d, AT_USER, "Let %s = %u.", names[0], v);
    for (unsigned i = 1; i < HOPS; i++)
        add_ins(l, d + (1 - d) * i / (HOPS - 1.0) * 0.999, AT_USER,
                "Let %s = %s.", names[i], names[i - 1]);
    add_ins(l, 0.2, AT_USER, "Let %s = %u.", names[HOPS], dv);
    for (unsigned i = 1; i < DHOPS; i++)
        add_ins(l, 0.2 + 0.2 * i, AT_USER, "Let %s = %s.", names[HOPS + i],
                names[HOPS + i - 1]);
    static _Thread_local char q[160];
    snprintf(q, sizeof(q), "What is the value of %s?", names[HOPS - 1]);
    l->question = q;
}

/* ---- rendering the layout into messages ---- */

/* Every text gen.c writes is printable ASCII: no UTF-8 check needed. */
static json_t *msg(const char *role, const char *content)
{
    json_t *m = json_object();
    json_object_set_new_nocheck(m, "role", json_string_nocheck(role));
    json_object_set_new_nocheck(m, "content", json_string_nocheck(content));
    return m;
}

static json_t *tool_call_pair(json_t *msgs, unsigned t, const char *name,
                              const char *args, const char *result,
                              size_t *chars)
{
    char id[32];
    snprintf(id, sizeof(id), "call_%u", t + 1);
    json_t *call =
        json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}", "role",
                  "assistant", "content", "", "tool_calls", "id", id, "type",
                  "function", "function", "name", name, "arguments", args);
    json_array_append_new(msgs, call);
    json_array_append_new(msgs,
                          json_pack("{s:s, s:s, s:s}", "role", "tool",
                                    "tool_call_id", id, "content", result));
    *chars += strlen(args) + strlen(result) + strlen(name);
    return msgs;
}

static json_t *tools_json(void)
{
    return json_pack(
        "[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}},"
        " {s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s]}}}]",
        "type", "function", "function", "name", "lookup", "description",
        "Look up a record by a free-text query", "parameters", "type", "object",
        "properties", "query", "type", "string", "required", "query", "type",
        "function", "function", "name", "save_note", "description",
        "Save a note for later", "parameters", "type", "object", "properties",
        "note", "type", "string", "required", "note");
}

/* Escapes s as a JSON string body (the facts hold no quotes or
 * backslashes, but tool arguments must stay valid JSON whatever). */
static void json_escape_into(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            buf_addch(b, '\\');
        buf_addch(b, *s);
    }
}

/* The filler of turn t: a prefix of a seeded stream, so it is generated
 * once per case and sliced by later builds of the same spec (sizing builds
 * a case several times with different budgets). */
static const char *turn_filler(struct probe_case *c, unsigned t, size_t budget)
{
    uint64_t s = c->spec.seed;
    if (t >= c->n_cache) {
        c->cache = xrealloc(c->cache, (t + 1) * sizeof(*c->cache));
        for (unsigned i = c->n_cache; i <= t; i++)
            buf_init(&c->cache[i], 0);
        c->n_cache = t + 1;
    }
    struct buf *f = &c->cache[t];
    if (f->len < budget) {
        buf_reset(f);
        probe_filler(
            f, (enum probe_filler)(hash_mix2(s, 77 + t) % FILLER_NSOURCES),
            hash_mix2(s, 1000 + t), budget + budget / 16);
    }
    return buf_str(f);
}

static void user_turn(struct probe_case *c, const struct layout *l, unsigned t,
                      size_t budget, struct buf *b)
{
    uint64_t s = c->spec.seed;
    char ent[48];
    buf_reset(b);
    if (l->first && t == 0) {
        buf_printf(b,
                   "Write a Python program for a %s that runs in the "
                   "terminal.",
                   c->expect);
        return;
    }
    if (l->first)
        buf_adds(b, followups[(t - 1) % N(followups)]);
    else
        buf_adds(b, intros[hash_mix2(s, t) % N(intros)]);
    if (l->canary)
        buf_printf(b, " The canary for %s is %llu.",
                   canary_ent(PROBE_CV_USER, t, ent, sizeof(ent)),
                   (unsigned long long)canary_val(s, PROBE_CV_USER, t));
    buf_adds(b, "\n\n");
    const char *fill = turn_filler(c, t, budget);
    size_t at = 0;
    for (size_t i = 0; i < l->n_ins; i++) {
        const struct insert *in = &l->ins[i];
        if (in->at != AT_USER || turn_of(l, in->pos) != t)
            continue;
        double frac = in->pos * l->turns - t;
        size_t off = (size_t)(frac * (double)budget);
        if (off < at)
            off = at;
        if (off > budget)
            off = budget;
        while (off > 0 && off < budget && fill[off - 1] != '\n')
            off++;
        buf_add(b, fill + at, off - at);
        if (off > 0 && fill[off - 1] != '\n')
            buf_addch(b, '\n');
        buf_printf(b, "%s\n", in->text);
        at = off;
    }
    buf_add(b, fill + at, budget - at);
    c->filler += budget;
}

static void assistant_turn(struct probe_case *c, const struct layout *l,
                           unsigned t, json_t *msgs, struct buf *b)
{
    uint64_t s = c->spec.seed;
    char ent[48];
    struct buf reason = BUF_INIT;
    bool tool = l->canary || (l->tool_turn0 && t == 0);

    for (size_t i = 0; i < l->n_ins; i++)
        if ((l->ins[i].at == AT_TOOL_ARGS || l->ins[i].at == AT_TOOL_RESULT) &&
            turn_of(l, l->ins[i].pos) == t) {
            const struct insert *in = &l->ins[i];
            buf_reset(b);
            if (in->at == AT_TOOL_ARGS) {
                buf_adds(b, "{\"note\": \"");
                json_escape_into(b, in->text);
                buf_adds(b, "\"}");
                tool_call_pair(msgs, t, "save_note", b->data, "Saved.",
                               &c->chars);
            } else {
                char res[320];
                snprintf(res, sizeof(res), "Record found. %s", in->text);
                tool_call_pair(msgs, t, "lookup", "{\"query\": \"record\"}",
                               res, &c->chars);
            }
            tool = false;
        }
    if (tool) {
        char res[160] = "No matching records.";
        if (l->canary)
            snprintf(res, sizeof(res), "The canary for %s is %llu.",
                     canary_ent(PROBE_CV_TOOL, t, ent, sizeof(ent)),
                     (unsigned long long)canary_val(s, PROBE_CV_TOOL, t));
        tool_call_pair(msgs, t, "lookup", "{\"query\": \"status\"}", res,
                       &c->chars);
    }

    buf_reset(b);
    for (size_t i = 0; i < l->n_ins; i++) {
        const struct insert *in = &l->ins[i];
        if (turn_of(l, in->pos) != t)
            continue;
        if (in->at == AT_REASONING)
            buf_adds(&reason, in->text);
        else if (in->at == AT_THINK)
            buf_printf(b, "<think>%s</think>", in->text);
    }
    if (l->canary)
        buf_printf(&reason, "The canary for %s is %llu.",
                   canary_ent(PROBE_CV_REASONING, t, ent, sizeof(ent)),
                   (unsigned long long)canary_val(s, PROBE_CV_REASONING, t));
    buf_adds(b, acks[hash_mix2(s, 500 + t) % N(acks)]);
    if (l->canary)
        buf_printf(b, " The canary for %s is %llu.",
                   canary_ent(PROBE_CV_ASSISTANT, t, ent, sizeof(ent)),
                   (unsigned long long)canary_val(s, PROBE_CV_ASSISTANT, t));
    for (size_t i = 0; i < l->n_ins; i++)
        if (l->ins[i].at == AT_ASSISTANT && turn_of(l, l->ins[i].pos) == t)
            buf_printf(b, " %s", l->ins[i].text);
    json_t *m = msg("assistant", buf_str(b));
    if (reason.len)
        json_object_set_new(m, "reasoning_content",
                            json_string(buf_str(&reason)));
    c->chars += b->len + reason.len;
    json_array_append_new(msgs, m);
    buf_release(&reason);
}

static void render(struct probe_case *c, const struct layout *l, size_t filler)
{
    struct buf b = BUF_INIT;
    json_t *msgs = json_array();
    char sys[200];
    unsigned carriers = l->first ? l->turns - 1 : l->turns;
    size_t each = carriers ? filler / carriers : 0;

    snprintf(sys, sizeof(sys), "You are a helpful assistant.");
    if (l->canary)
        snprintf(
            sys, sizeof(sys),
            "You are a helpful assistant. The canary for the system "
            "message is %llu.",
            (unsigned long long)canary_val(c->spec.seed, PROBE_CV_SYSTEM, 0));
    json_array_append_new(msgs, msg("system", sys));
    c->chars = strlen(sys);
    c->filler = 0;
    for (unsigned t = 0; t < l->turns; t++) {
        size_t budget = each;
        if (t + 1 == l->turns && carriers)
            budget = filler - each * (carriers - 1);
        if (l->first && t == 0)
            budget = 0;
        user_turn(c, l, t, budget, &b);
        json_array_append_new(msgs, msg("user", buf_str(&b)));
        c->chars += b.len;
        assistant_turn(c, l, t, msgs, &b);
    }
    json_array_append_new(msgs, msg("user", l->question));
    c->chars += strlen(l->question);
    c->messages = msgs;
    c->tools = l->tools ? tools_json() : NULL;
    buf_release(&b);
}

void probe_case_drop_cache(struct probe_case *c)
{
    for (unsigned i = 0; i < c->n_cache; i++)
        buf_release(&c->cache[i]);
    free(c->cache);
    c->cache = NULL;
    c->n_cache = 0;
}

void probe_case_release(struct probe_case *c)
{
    json_decref(c->messages);
    json_decref(c->tools);
    for (unsigned i = 0; i < c->n_cache; i++)
        buf_release(&c->cache[i]);
    free(c->cache);
    memset(c, 0, sizeof(*c));
}

void probe_case_build(struct probe_case *c, const struct probe_spec *spec,
                      size_t filler)
{
    struct layout l;
    struct rng r;
    double d = spec->depth < 0 ? 0.5 : spec->depth / 100.0;

    /* Keep the filler of an earlier build of the same case. */
    struct buf *cache = c->cache;
    unsigned n_cache = c->n_cache;
    if (c->messages && c->spec.seed == spec->seed) {
        c->cache = NULL;
        c->n_cache = 0;
    } else {
        cache = NULL;
        n_cache = 0;
    }
    probe_case_release(c);
    c->cache = cache;
    c->n_cache = n_cache;
    c->spec = *spec;
    memset(&l, 0, sizeof(l));
    l.turns = probe_turns_for(spec->target);
    c->turns = l.turns;
    rng_seed(&r, spec->seed);
    switch (spec->kind) {
    case PROBE_NEEDLE:
        plan_needle(c, &l, &r, d);
        break;
    case PROBE_MULTI:
        plan_multi(c, &l, &r, d);
        break;
    case PROBE_CANARY:
        plan_canary(c, &l, spec->variant, d);
        break;
    case PROBE_FIRST:
        plan_first(c, &l, &r);
        break;
    case PROBE_REASONING:
        plan_reasoning(c, &l, &r, d, spec->variant);
        break;
    case PROBE_TOOL:
        plan_tool(c, &l, &r, d, spec->variant);
        break;
    case PROBE_VARIABLES:
    default:
        plan_variables(c, &l, &r, d);
        break;
    }
    /* Stable sort by position, so statements keep their order. */
    for (size_t i = 1; i < l.n_ins; i++)
        for (size_t j = i; j > 0 && l.ins[j - 1].pos > l.ins[j].pos; j--) {
            struct insert tmp = l.ins[j];
            l.ins[j] = l.ins[j - 1];
            l.ins[j - 1] = tmp;
        }
    render(c, &l, filler);
}
