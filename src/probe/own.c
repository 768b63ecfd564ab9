/*
 * own: probe's own count of what it sent, from evidence a path between
 * probe and the model cannot rewrite. A gateway that keeps the last N
 * turns rewrites a /tokenize request with `messages` as it rewrites the
 * chat request, so counting the whole conversation through it says what
 * reached the model, not what was sent. Instead the text pieces of a case
 * (each message's content, reasoning, tool call name and arguments) are
 * tokenized on their own as one `prompt`, and the template's framing per
 * message is measured once on short requests that hold at most one turn.
 * A path that clips texts also clips that `prompt`: the count is then
 * checked against the units of the bytes sent (tokens per unit measured
 * on short texts), and the bytes decide when the two disagree.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "probe/probe_int.h"

#define HELLO "Hello there."

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL };

static int role_of(json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    if (!r)
        return R_USER;
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        return R_SYSTEM;
    if (!strcmp(r, "assistant"))
        return R_ASSISTANT;
    if (!strcmp(r, "tool"))
        return R_TOOL;
    return R_USER;
}

static json_t *msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

#define ARGS_QUOTED "{\"a\": \"b\"}"

static json_t *call_msg2(const char *args)
{
    json_t *m = msg("assistant", HELLO);
    json_object_set_new(m, "tool_calls",
                        json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", "c1",
                                  "type", "function", "function", "name",
                                  "lookup", "arguments", args));
    return m;
}

static json_t *call_msg(bool reasoning)
{
    json_t *m = msg("assistant", HELLO);
    if (reasoning) {
        json_object_set_new(m, "reasoning_content", json_string(HELLO));
        return m;
    }
    json_object_set_new(m, "tool_calls",
                        json_pack("[{s:s, s:s, s:{s:s, s:s}}]", "id", "c1",
                                  "type", "function", "function", "name",
                                  "lookup", "arguments", "{}"));
    return m;
}

/* Counts a request made of the messages given (NULL-terminated, each
 * consumed), with tools when tools is not NULL. */
static int count_msgs(struct probe_endpoint *e, struct http_client *c,
                      const json_t *tools, double *out, struct diag *d, ...)
{
    va_list ap;
    json_t *a = json_array(), *m;
    va_start(ap, d);
    while ((m = va_arg(ap, json_t *)))
        json_array_append_new(a, m);
    va_end(ap);
    unsigned n = 0;
    int r = probe_tokenize(e, c, a, tools, 0, &n, d);
    json_decref(a);
    *out = n;
    return r;
}

static int count_text(struct probe_endpoint *e, struct http_client *c,
                      const char *s, double *out, struct diag *d)
{
    unsigned n = 0;
    int r = probe_tokenize_text(e, c, s, strlen(s), &n, d);
    *out = n;
    return r;
}

/* Tokens per unit of short texts of every filler source, and its spread;
 * the separator's own tokens. */
static int measure_text(struct probe_endpoint *e, struct http_client *c,
                        struct diag *d)
{
    double tok = 0, units = 0, k[FILLER_NSOURCES], joined, t0 = 0, t1 = 0;
    struct buf b[FILLER_NSOURCES];
    int r = 0;
    for (int i = 0; i < FILLER_NSOURCES; i++)
        buf_init(&b[i], 0);
    for (int i = 0; i < FILLER_NSOURCES && !r; i++) {
        double t;
        probe_filler(&b[i], (enum probe_filler)i, 0x0e1 + (uint64_t)i, 160);
        r = count_text(e, c, buf_str(&b[i]), &t, d);
        double u = probe_text_units(buf_str(&b[i]));
        k[i] = u > 0 ? t / u : 0;
        tok += t;
        units += u;
        if (i == 0)
            t0 = t;
        if (i == 1)
            t1 = t;
    }
    if (!r) {
        struct buf j = BUF_INIT;
        buf_printf(&j, "%s\n%s", buf_str(&b[0]), buf_str(&b[1]));
        r = count_text(e, c, buf_str(&j), &joined, d);
        buf_release(&j);
    }
    for (int i = 0; i < FILLER_NSOURCES; i++)
        buf_release(&b[i]);
    if (r)
        return r;
    if (units <= 0 || tok <= 0)
        return diag_set(d, ENOTSUP, "/tokenize counted no tokens in a text");
    e->own_k = tok / units;
    e->own_kerr = 0;
    for (int i = 0; i < FILLER_NSOURCES; i++)
        e->own_kerr = fmax(e->own_kerr, fabs(k[i] / e->own_k - 1));
    e->own_sep = joined - t0 - t1;
    return 0;
}

/* The framing of each role, the base, tool calls, reasoning and tools,
 * from requests of at most one user turn. */
static int measure_frame(struct probe_endpoint *e, struct http_client *c,
                         const json_t *tools, struct diag *d)
{
    double h, lookup, args, args2, sys, sys_user, user, ua, ua_call, ua_call2,
        ua_call_tool, ua_reason, user_tools;
    int r = count_text(e, c, HELLO, &h, d);
    r = r ? r : count_text(e, c, "lookup", &lookup, d);
    r = r ? r : count_text(e, c, "{}", &args, d);
    r = r ? r : count_text(e, c, ARGS_QUOTED, &args2, d);
    r = r ? r
          : count_msgs(e, c, NULL, &ua_call2, d, msg("user", HELLO),
                       call_msg2(ARGS_QUOTED), NULL);
    r = r ? r : count_msgs(e, c, NULL, &sys, d, msg("system", HELLO), NULL);
    r = r ? r
          : count_msgs(e, c, NULL, &sys_user, d, msg("system", HELLO),
                       msg("user", HELLO), NULL);
    r = r ? r : count_msgs(e, c, NULL, &user, d, msg("user", HELLO), NULL);
    r = r ? r
          : count_msgs(e, c, NULL, &ua, d, msg("user", HELLO),
                       msg("assistant", HELLO), NULL);
    r = r ? r
          : count_msgs(e, c, NULL, &ua_call, d, msg("user", HELLO),
                       call_msg(false), NULL);
    if (!r) {
        json_t *t = msg("tool", HELLO);
        json_object_set_new(t, "tool_call_id", json_string("c1"));
        r = count_msgs(e, c, NULL, &ua_call_tool, d, msg("user", HELLO),
                       call_msg(false), t, NULL);
    }
    r = r ? r
          : count_msgs(e, c, NULL, &ua_reason, d, msg("user", HELLO),
                       call_msg(true), NULL);
    r = r ? r
          : count_msgs(e, c, tools, &user_tools, d, msg("user", HELLO), NULL);
    if (r)
        return r;
    e->own_role[R_USER] = sys_user - sys - h;
    e->own_base = user - e->own_role[R_USER] - h;
    e->own_role[R_SYSTEM] = sys - e->own_base - h;
    e->own_role[R_ASSISTANT] = ua - user - h;
    e->own_call = ua_call - ua - lookup - args;
    /* arguments rendered as a JSON string escape their quotes */
    e->own_esc = ((ua_call2 - ua_call) - (args2 - args)) / 4;
    e->own_role[R_TOOL] = ua_call_tool - ua_call - h;
    e->own_reason = ua_reason - ua - h;
    if (ua_reason - ua < h / 2)
        e->own_reason = -1; /* the template does not render it */
    e->own_tools = tools ? user_tools - user : 0;
    return 0;
}

static json_t *tools_of_a_case(void)
{
    struct probe_spec s = {.kind = PROBE_TOOL,
                           .length = 1024,
                           .target = 1024,
                           .depth = 50,
                           .seed = 0x7001};
    struct probe_case pc;
    memset(&pc, 0, sizeof(pc));
    probe_case_build(&pc, &s, 0);
    json_t *t = pc.tools ? json_incref(pc.tools) : NULL;
    probe_case_release(&pc);
    return t;
}

/* The model's miss on a held-out request of three short messages, and
 * its miss per message on requests like the cases' (three messages of
 * filler each, counted as a case is: own_msg_err). A template and
 * tokenizer whose pieces count the same alone and in place miss by
 * nothing, and a count of any size is then exact to own_err. */
static int measure_err(struct probe_endpoint *e, struct http_client *c,
                       struct diag *d)
{
    static const char *const texts[3] = {
        "You answer briefly and precisely.",
        "Please summarise the log lines below in one sentence: disk usage "
        "at 81%, 2 retries, 14 ms p99.",
        "The log shows a healthy disk and a fast service."};
    static const char *const roles[3] = {"system", "user", "assistant"};
    double want, p[3];
    int r = count_msgs(e, c, NULL, &want, d, msg("system", texts[0]),
                       msg("user", texts[1]), msg("assistant", texts[2]), NULL);
    for (int i = 0; i < 3 && !r; i++)
        r = count_text(e, c, texts[i], &p[i], d);
    if (r)
        return r;
    double pred = e->own_base + e->own_role[R_SYSTEM] + e->own_role[R_USER] +
                  e->own_role[R_ASSISTANT] + p[0] + p[1] + p[2];
    e->own_err = fabs(pred - want) + 1;
    e->own_msg_err = 0;
    for (int k = 0; k < 2 && !r; k++) {
        struct probe_case pc;
        struct probe_shape sh;
        struct buf b = BUF_INIT;
        memset(&pc, 0, sizeof(pc));
        pc.messages = json_array();
        for (int i = 0; i < 3; i++) {
            buf_reset(&b);
            probe_filler(&b, (enum probe_filler)((i + k) % FILLER_NSOURCES),
                         0x0e7 + (uint64_t)(3 * k + i), 240);
            json_array_append_new(pc.messages, msg(roles[i], buf_str(&b)));
        }
        buf_release(&b);
        unsigned whole = 0;
        r = probe_own_count(e, c, &pc, &sh, d);
        r = r ? r : probe_tokenize(e, c, pc.messages, NULL, 0, &whole, d);
        if (!r)
            e->own_msg_err =
                fmax(e->own_msg_err, fabs((double)sh.total - whole) / 3);
        json_decref(pc.messages);
    }
    return r;
}

int probe_own_calibrate(struct probe_endpoint *e, struct http_client *c,
                        struct diag *d)
{
    e->own_ready = false;
    int r = measure_text(e, c, d);
    json_t *tools = r ? NULL : tools_of_a_case();
    r = r ? r : measure_frame(e, c, tools, d);
    r = r ? r : measure_err(e, c, d);
    json_decref(tools);
    if (!r)
        e->own_ready = true;
    return r;
}

/* Appends the text pieces of m to cat (each followed by a newline) and
 * returns its framing tokens; *units and *bytes get its pieces' size,
 * *runits the units of its reasoning field and *rframe its framing. */
static double pieces_of(const struct probe_endpoint *e, json_t *m,
                        struct buf *cat, size_t *np, double *units,
                        size_t *bytes, double *runits, double *rframe)
{
    *runits = *rframe = 0;
    const char *p[2 + 2 * 8];
    size_t n = 0;
    double frame = e->own_role[role_of(m)];
    p[n++] = json_string_value(json_object_get(m, "content"));
    const char *rs = json_string_value(json_object_get(m, "reasoning_content"));
    if (!rs)
        rs = json_string_value(json_object_get(m, "reasoning"));
    if (rs && *rs && e->own_reason >= 0) {
        p[n++] = rs;
        frame += e->own_reason;
        *runits = probe_text_units(rs);
        *rframe = e->own_reason;
    }
    size_t k;
    json_t *tc;
    json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
    {
        json_t *f = json_object_get(tc, "function");
        if (n + 2 > sizeof(p) / sizeof(*p))
            break;
        p[n++] = json_string_value(json_object_get(f, "name"));
        p[n++] = json_string_value(json_object_get(f, "arguments"));
        frame += e->own_call;
        for (const char *q = p[n - 1]; q && *q; q++)
            frame += (*q == '"' || *q == '\\') * e->own_esc;
    }
    *units = 0;
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i] || !*p[i])
            continue;
        buf_adds(cat, p[i]);
        buf_addch(cat, '\n');
        (*np)++;
        *units += probe_text_units(p[i]);
        *bytes += strlen(p[i]);
    }
    return frame;
}

/* Counts the pieces of the messages of pc whose turn is `turn` (all of
 * them when turn < 0): fills sh's framing, units and bytes for them and
 * returns the pieces' tokens in *pieces (distributed by the caller). */
static int count_pieces(struct probe_endpoint *e, struct http_client *c,
                        const struct probe_case *pc, int turn,
                        struct probe_shape *sh, double *units, double *runits,
                        double *frame, double *uall, double *pieces,
                        struct diag *d)
{
    struct buf cat = BUF_INIT;
    size_t np = 0, i;
    unsigned t = 0;
    json_t *m;
    json_array_foreach(pc->messages, i, m)
    {
        double u, ru, rf;
        size_t b;
        size_t j = i < PROBE_MAX_MSGS ? i : PROBE_MAX_MSGS - 1;
        if (role_of(m) == R_USER)
            t++;
        if (turn >= 0 && (int)(t < 255 ? t : 255) != turn)
            continue;
        double f = pieces_of(e, m, &cat, &np, &u, &b, &ru, &rf);
        if (turn < 0) {
            sh->reason[j] += (unsigned)lround(rf);
            runits[j] += ru;
            if (i < PROBE_MAX_MSGS) {
                sh->tok[j] = (unsigned)lround(f);
                units[j] = u;
                sh->turn[j] = (unsigned char)(t < 255 ? t : 255);
                sh->n = (unsigned)j + 1;
            } else {
                sh->tok[j] += (unsigned)lround(f);
                units[j] += u;
            }
            sh->bytes[j] += (unsigned)b;
            sh->turns = t;
        }
        *frame += f;
        *uall += u;
    }
    unsigned counted = 0;
    int r =
        np ? probe_tokenize_text(e, c, buf_str(&cat), cat.len, &counted, d) : 0;
    buf_release(&cat);
    /* each piece's newline costs own_sep tokens, or merges with it */
    *pieces = fmax(0, (double)counted - e->own_sep * (double)np);
    return r;
}

int probe_own_count(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_case *pc, struct probe_shape *sh,
                    struct diag *d)
{
    double units[PROBE_MAX_MSGS] = {0}, runits[PROBE_MAX_MSGS] = {0},
           frame = e->own_base, uall = 0, pieces;
    memset(sh, 0, sizeof(*sh));
    if (pc->tools)
        frame += e->own_tools;
    int r = count_pieces(e, c, pc, -1, sh, units, runits, &frame, &uall,
                         &pieces, d);
    if (r)
        return r;
    double by_bytes = e->own_k * uall;
    double slack = fmax(0.15, 3 * e->own_kerr);
    if (pieces < by_bytes * (1 - slack)) {
        sh->pieces_short = true;
        pieces = by_bytes;
    }
    for (unsigned j = 0; j < sh->n; j++) {
        double share = uall > 0 ? pieces * units[j] / uall : 0;
        sh->tok[j] += (unsigned)lround(share);
        sh->reason[j] +=
            (unsigned)lround(uall > 0 ? pieces * runits[j] / uall : 0);
    }
    sh->frame = (unsigned)lround(frame);
    sh->total = (unsigned)lround(frame + pieces);
    sh->msg_err = e->own_msg_err;
    sh->err = e->own_err + sh->msg_err * (double)sh->n +
              (sh->pieces_short ? e->own_kerr * pieces + 0.02 * pieces : 0);
    return 0;
}

int probe_own_turns(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_case *pc, struct probe_shape *sh,
                    struct diag *d)
{
    if (sh->pieces_short || !sh->n)
        return 0;
    for (unsigned t = 0; t <= sh->turns && t < 255; t++) {
        double frame = 0, uall = 0, pieces;
        struct probe_shape tmp;
        double units[PROBE_MAX_MSGS] = {0}, runits[PROBE_MAX_MSGS] = {0};
        memset(&tmp, 0, sizeof(tmp));
        int r = count_pieces(e, c, pc, (int)t, &tmp, units, runits, &frame,
                             &uall, &pieces, d);
        if (r)
            return r;
        /* this turn's messages: framing plus their share of the pieces */
        size_t i;
        json_t *m;
        json_array_foreach(pc->messages, i, m)
        {
            if (i >= PROBE_MAX_MSGS || sh->turn[i] != t)
                continue;
            struct buf one = BUF_INIT;
            size_t np = 0, b;
            double u, ru, rf;
            double f = pieces_of(e, m, &one, &np, &u, &b, &ru, &rf);
            buf_release(&one);
            double share = uall > 0 ? pieces * u / uall : 0;
            sh->tok[i] = (unsigned)lround(f + share);
            sh->reason[i] =
                (unsigned)lround(rf + (uall > 0 ? pieces * ru / uall : 0));
        }
    }
    return 0;
}
