/*
 * truncation: rule 4. usage.prompt_tokens against an independent
 * expectation (the server's /tokenize count when the caller fetched one,
 * else the session's own bytes-per-token ratio): prompt tokens below
 * expectation, flat while requests grow, at the context length;
 * finish_reason "length" before max_tokens; context-length errors and what
 * the harness did next.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/plural.h"
#include "core/stats.h"
#include "core/xalloc.h"

static bool is_ok(const struct areq *r)
{
    return r->x->status >= 200 && r->x->status < 300;
}

/* Bytes the prompt is rendered from: messages and tool schemas. */
static double prompt_bytes(const struct areq *r)
{
    return (double)(r->msg_bytes + r->tool_bytes);
}

static bool counted(const struct areq *r)
{
    return r->msgs && is_ok(r) && r->prompt_tokens > 0;
}

/* The session's marginal bytes per prompt token for requests of r's kind
 * (side requests have other shapes): over consecutive pairs of them whose
 * bytes grew by at least 64 and whose tokens grew, the lower quartile of
 * delta bytes / delta tokens. Differences cancel what every request of the
 * session carries but the server may or may not count (tool schemas a
 * template does not render, a fixed system prompt); truncated pairs grow
 * in tokens least, so they pull the quartile up least. *anchor gets the
 * first counted request of the kind. */
/* The ratio of each kind is computed once per session: it depends on the
 * kind only, and computing it per request made the rule quadratic. */
struct ratio_memo {
    const char *kind[8];
    double ratio[8];
    const struct areq *anchor[8];
    size_t n[8], used;
};

static double marginal_ratio_of_kind(struct actx *c, const struct areq *r,
                                     const struct areq **anchor, size_t *n);

static double marginal_ratio(struct actx *c, const struct areq *r,
                             const struct areq **anchor, size_t *n)
{
    struct ratio_memo *m = c->truncation_memo;
    for (size_t k = 0; m && k < m->used; k++)
        if (!strcmp(m->kind[k], r->kind)) {
            *anchor = m->anchor[k];
            *n = m->n[k];
            return m->ratio[k];
        }
    double v = marginal_ratio_of_kind(c, r, anchor, n);
    if (m && m->used < 8) {
        m->kind[m->used] = r->kind;
        m->ratio[m->used] = v;
        m->anchor[m->used] = *anchor;
        m->n[m->used++] = *n;
    }
    return v;
}

static double marginal_ratio_of_kind(struct actx *c, const struct areq *r,
                                     const struct areq **anchor, size_t *n)
{
    double *v = xcalloc(c->n + 1, sizeof(*v));
    const struct areq *last = NULL;
    *n = 0;
    *anchor = NULL;
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *q = &c->r[i];
        if (!counted(q) || strcmp(q->kind, r->kind))
            continue;
        *anchor = *anchor ? *anchor : q;
        if (last && prompt_bytes(q) >= prompt_bytes(last) + 64 &&
            q->prompt_tokens > last->prompt_tokens)
            v[(*n)++] = (prompt_bytes(q) - prompt_bytes(last)) /
                        (double)(q->prompt_tokens - last->prompt_tokens);
        last = q;
    }
    double m = *n ? stats_quantile_sort(v, *n, 0.25) : 0;
    free(v);
    return m;
}

/* The expected prompt size of r: the /tokenize count when there is one,
 * else the anchor's tokens plus r's extra bytes at the marginal ratio.
 * 0 when there is not enough to say. */
static double expected_tokens(struct actx *c, const struct areq *r,
                              const char **source, double *ratio)
{
    char key[32];
    const struct areq *anchor;
    size_t n;
    snprintf(key, sizeof(key), "%lld", (long long)r->x->id);
    json_t *tok = json_object_get(c->o->tokenized, key);
    *ratio = marginal_ratio(c, r, &anchor, &n);
    *source = "tokenize";
    if (json_is_integer(tok))
        return (double)json_integer_value(tok);
    *source = "bytes-per-token";
    if (n < 2 || *ratio <= 0 || anchor == r)
        return 0;
    return (double)anchor->prompt_tokens +
           (prompt_bytes(r) - prompt_bytes(anchor)) / *ratio;
}

/* Below expectation: by the share and tokens of the thresholds against
 * the bytes-per-token estimate; against an exact /tokenize count (the
 * server's own template and tokenizer, without the tool schemas, so the
 * server's count is never below it) by token_exact_min tokens at any
 * size: a request cut by 64 tokens of 30,000 is cut. */
static void check_below(struct actx *c, size_t i)
{
    const struct areq *r = &c->r[i];
    const struct audit_thresholds *th = &c->o->th;
    const char *source;
    double ratio, expected = expected_tokens(c, r, &source, &ratio);
    double got = (double)r->prompt_tokens;
    bool exact = !strcmp(source, "tokenize");
    if (expected <= 0)
        return;
    if (exact ? expected - got < th->token_exact_min
              : got >= (1 - th->token_deficit) * expected ||
                    expected - got < th->token_deficit_min)
        return;
    if (exact) {
        audit_finding_add(
            c, AUDIT_ERROR, "truncation.below", r,
            json_pack("{s:I, s:f, s:s, s:f, s:f}", "prompt_tokens",
                      (json_int_t)r->prompt_tokens, "expected_tokens", expected,
                      "source", source, "prompt_bytes", prompt_bytes(r),
                      "threshold_tokens", th->token_exact_min),
            "prompt_tokens %ld, the server's /tokenize counts %.0f for "
            "the same messages: %.0f tokens (%.1f%%) of the prompt missing "
            "(exact counts; threshold %.0f tokens)",
            r->prompt_tokens, expected, expected - got,
            100.0 * (expected - got) / expected, th->token_exact_min);
        return;
    }
    audit_finding_add(
        c, AUDIT_ERROR, "truncation.below", r,
        json_pack("{s:I, s:f, s:s, s:f, s:f, s:f, s:f}", "prompt_tokens",
                  (json_int_t)r->prompt_tokens, "expected_tokens", expected,
                  "source", source, "prompt_bytes", prompt_bytes(r),
                  "bytes_per_token", ratio, "threshold_share",
                  th->token_deficit, "threshold_tokens", th->token_deficit_min),
        "prompt_tokens %ld, expected about %.0f (%s): %.0f%% of the "
        "prompt missing (threshold %.0f%% and %.0f tokens)",
        r->prompt_tokens, expected, source, 100.0 * (expected - got) / expected,
        100 * th->token_deficit, th->token_deficit_min);
}

static void check_flat(struct actx *c, size_t i, const bool *pinned)
{
    const struct areq *r = &c->r[i];
    const struct audit_thresholds *th = &c->o->th;
    if (r->prev < 0 || !counted(&c->r[r->prev]) || pinned[i])
        return;
    const struct areq *p = &c->r[r->prev];
    double b0 = prompt_bytes(p), b1 = prompt_bytes(r);
    double t0 = (double)p->prompt_tokens, t1 = (double)r->prompt_tokens;
    double dt = t1 > t0 ? t1 - t0 : t0 - t1;
    if (b1 < (1 + th->flat_growth) * b0 || dt > th->flat_tokens * t0)
        return;
    audit_finding_add(
        c, AUDIT_ERROR, "truncation.flat", r,
        json_pack("{s:I, s:f, s:f, s:I, s:I, s:f, s:f}", "prev_request",
                  (json_int_t)p->x->id, "bytes_before", b0, "bytes_after", b1,
                  "tokens_before", (json_int_t)p->prompt_tokens, "tokens_after",
                  (json_int_t)r->prompt_tokens, "threshold_growth",
                  th->flat_growth, "threshold_tokens", th->flat_tokens),
        "request grew %.0f%% (%.0f -> %.0f bytes) but prompt_tokens "
        "stayed at %ld -> %ld: the server keeps a fixed window",
        100 * (b1 - b0) / b0, b0, b1, p->prompt_tokens, r->prompt_tokens);
}

static long context_length(struct actx *c, const char *model)
{
    json_t *prof = audit_profile_for(c->o->profile, model);
    json_t *cl = json_object_get(prof, "context_length");
    if (c->o->context_length > 0)
        return c->o->context_length;
    return json_is_integer(cl) ? (long)json_integer_value(cl) : 0;
}

static long max_tokens(const struct areq *r)
{
    json_t *m = json_object_get(r->x->req_body, "max_tokens");
    if (!m)
        m = json_object_get(r->x->req_body, "max_completion_tokens");
    return json_is_integer(m) ? (long)json_integer_value(m) : 0;
}

static void check_limits(struct actx *c, size_t i)
{
    const struct areq *r = &c->r[i];
    long ctx = context_length(c, r->model), mt = max_tokens(r);
    if (ctx > 0 && r->prompt_tokens >= ctx)
        audit_finding_add(
            c, AUDIT_ERROR, "truncation.at_limit", r,
            json_pack("{s:I, s:I}", "prompt_tokens",
                      (json_int_t)r->prompt_tokens, "context_length",
                      (json_int_t)ctx),
            "prompt_tokens %ld reached the context length %ld: the "
            "server may have cut the prompt",
            r->prompt_tokens, ctx);
    if (r->finish && !strcmp(r->finish, "length") && mt > 0 &&
        r->completion_tokens >= 0 && r->completion_tokens < mt)
        audit_finding_add(
            c, AUDIT_WARN, "truncation.length_early", r,
            json_pack("{s:I, s:I, s:I, s:I}", "completion_tokens",
                      (json_int_t)r->completion_tokens, "max_tokens",
                      (json_int_t)mt, "prompt_tokens",
                      (json_int_t)r->prompt_tokens, "context_length",
                      (json_int_t)ctx),
            "finish_reason length after %ld tokens, below max_tokens "
            "%ld: the context ran out",
            r->completion_tokens, mt);
}

static bool is_context_error(const struct xchg *x)
{
    static const char *const marks[] = {
        "maximum context length",  "context length",
        "context_length_exceeded", "too many tokens",
        "prompt is too long",      "exceeds the context"};
    if (x->status < 400 || !x->resp_raw)
        return false;
    char *body = xstrndup(x->resp_raw, x->resp_raw_len);
    bool hit = false;
    for (size_t i = 0; i < sizeof(marks) / sizeof(*marks) && !hit; i++)
        hit = strcasestr(body, marks[i]) != NULL;
    free(body);
    return hit;
}

static char *next_action(struct actx *c, size_t i, int64_t *next_id)
{
    const struct areq *r = &c->r[i];
    *next_id = 0;
    for (size_t j = i + 1; j < c->n; j++) {
        const struct areq *n = &c->r[j];
        if (!strcmp(n->kind, "compaction")) {
            *next_id = n->x->id;
            return xstrdup("asked for a compaction summary");
        }
        if (!audit_is_main_kind(n->kind) || n->prev != (long)i)
            continue;
        *next_id = n->x->id;
        if (n->nmsg == r->nmsg && n->msg_bytes == r->msg_bytes)
            return xstrdup("retried the same request");
        if (n->msg_bytes < r->msg_bytes)
            return xasprintf("retried with %zu fewer bytes (%zu -> %zu "
                             "message%s)",
                             r->msg_bytes - n->msg_bytes, r->nmsg, n->nmsg,
                             plural_s(n->nmsg));
        return xstrdup("sent a longer request");
    }
    return xstrdup("nothing: the session ends here");
}

static void check_error(struct actx *c, size_t i)
{
    const struct areq *r = &c->r[i];
    int64_t nid;
    if (!is_context_error(r->x))
        return;
    char *what = next_action(c, i, &nid);
    char *body = xstrndup(r->x->resp_raw,
                          r->x->resp_raw_len > 300 ? 300 : r->x->resp_raw_len);
    audit_finding_add(c, AUDIT_ERROR, "truncation.context_error", r,
                      json_pack("{s:i, s:s, s:s, s:I}", "status", r->x->status,
                                "error", body, "next", what, "next_request",
                                (json_int_t)nid),
                      "context-length error (HTTP %d); the harness then %s",
                      r->x->status, what);
    free(what);
    free(body);
}

/* truncation.pinned: pinned_run or more requests of a conversation in a
 * row, each longer than the one before (by 16 bytes or more: a token's
 * worth), that the server counted at exactly the same prompt size. No
 * healthy server counts more text as the same tokens; a server that cuts
 * every prompt to its limit does. One finding per run, at the run's
 * second request; truncation.flat is not reported again inside it. */
static void check_pinned(struct actx *c, bool *pinned)
{
    const struct audit_thresholds *th = &c->o->th;
    size_t start = 0, len = 0;
    const struct areq *last = NULL;
    for (size_t i = 0; i <= c->n; i++) {
        const struct areq *r = i < c->n ? &c->r[i] : NULL;
        if (r && (!counted(r) || !audit_is_main_kind(r->kind)))
            continue;
        bool extends = r && last && r->prev >= 0 && &c->r[r->prev] == last &&
                       r->prompt_tokens == last->prompt_tokens &&
                       prompt_bytes(r) >= prompt_bytes(last) + 16;
        if (extends) {
            len++;
            last = r;
            continue;
        }
        if (len >= (size_t)th->pinned_run) {
            const struct areq *a = &c->r[start], *second = NULL;
            size_t k = 0;
            for (size_t j = start; j < c->n && k < len; j++) {
                const struct areq *q = &c->r[j];
                if (!counted(q) || !audit_is_main_kind(q->kind))
                    continue;
                pinned[j] = true;
                if (k++ == 1)
                    second = q;
            }
            audit_finding_add(
                c, AUDIT_ERROR, "truncation.pinned", second,
                json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:I}",
                          "prompt_tokens", (json_int_t)a->prompt_tokens,
                          "requests", (json_int_t)len, "first_request",
                          (json_int_t)a->x->id, "last_request",
                          (json_int_t)last->x->id, "bytes_first",
                          prompt_bytes(a), "bytes_last", prompt_bytes(last),
                          "threshold_run", (json_int_t)th->pinned_run),
                "%zu requests in a row (%lld to %lld) counted at exactly "
                "%ld prompt tokens while they grew from %.0f to %.0f bytes: "
                "the server cuts every prompt to %ld tokens",
                len, (long long)a->x->id, (long long)last->x->id,
                a->prompt_tokens, prompt_bytes(a), prompt_bytes(last),
                a->prompt_tokens);
        }
        start = i;
        len = r ? 1 : 0;
        last = r;
    }
}

void audit_rule_truncation(struct actx *c)
{
    struct ratio_memo memo = {0};
    bool *pinned = xcalloc(c->n + 1, sizeof(*pinned));
    c->truncation_memo = &memo;
    check_pinned(c, pinned);
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        if (!r->msgs)
            continue;
        check_error(c, i);
        if (!counted(r))
            continue;
        check_below(c, i);
        if (audit_is_main_kind(r->kind))
            check_flat(c, i, pinned);
        check_limits(c, i);
    }
    c->truncation_memo = NULL;
    free(pinned);
}
