/*
 * cache: rule 8, prefix-cache reuse (docs/AUDIT.md, "Prefix-cache reuse").
 * Per request of a conversation chain: the prefix it shares with its
 * predecessor's messages and reply, in tokens (the shared bytes at the
 * session's bytes per prompt token), against the cached tokens the server
 * reported. Warns when a long shared prefix was mostly prefilled again,
 * when the previous reply is never reused over several turns, and when
 * reuse falls well below the session's usual for a run of requests. A gap
 * longer than the server's idle eviction time excuses a miss; a session
 * whose server reports no cache figures gets one info finding per audit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/buf.h"
#include "core/stats.h"
#include "core/xalloc.h"

/* What one request of the chain shared and got. */
struct cuse {
    bool ok;           /* judged: chain request with figures, not excused */
    bool idle;         /* excused: the gap exceeded the idle time */
    bool reply;        /* the predecessor's reply is in the shared prefix */
    double shared;     /* tokens shared with predecessor + reply */
    long cached;       /* reported cached tokens; -1 none */
    double gap_s;      /* since the predecessor ended */
    long reply_tokens; /* the predecessor's completion tokens */
};

/* usage.prompt_tokens_details.cached_tokens (OpenAI; vLLM, sglang), or
 * DeepSeek's usage.prompt_cache_hit_tokens; -1 when absent. */
static long cached_of(const struct areq *r)
{
    json_t *v = json_object_get(
        json_object_get(r->usage, "prompt_tokens_details"), "cached_tokens");
    if (!json_is_integer(v))
        v = json_object_get(r->usage, "prompt_cache_hit_tokens");
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static bool is_ok(const struct areq *r)
{
    return r->x->status >= 200 && r->x->status < 300;
}

/* Prompt tokens of r: /tokenize's count when there is one, else usage. */
static double tokens_of(const struct actx *c, const struct areq *r)
{
    char key[32];
    snprintf(key, sizeof(key), "%lld", (long long)r->x->id);
    json_t *t = json_object_get(c->o->tokenized, key);
    return json_is_integer(t) ? (double)json_integer_value(t)
                              : (double)r->prompt_tokens;
}

/* The session's bytes per prompt token: the median over its requests. */
static double bytes_per_token(const struct actx *c)
{
    double *v = xcalloc(c->n + 1, sizeof(*v)), m = 0;
    size_t n = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        double t = tokens_of(c, r);
        if (r->msgs && is_ok(r) && t > 0)
            v[n++] = (double)(r->msg_bytes + r->tool_bytes) / t;
    }
    if (n)
        m = stats_quantile_sort(v, n, 0.5);
    free(v);
    return m;
}

/* Whether message m of r is p's reply sent back (same text). */
static bool is_reply(const struct areq *r, size_t m, const struct areq *p)
{
    json_t *msg = json_array_get(r->msgs, m);
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (!role || strcmp(role, "assistant") || !p->content || !*p->content)
        return false;
    char *t = audit_msg_text(msg);
    bool same = !strcmp(t, p->content);
    free(t);
    return same;
}

/* Bytes per prompt token of r alone (its messages and tools over its
 * prompt tokens), 0 when r reported none. */
static double own_bpt(const struct actx *c, const struct areq *r)
{
    double t = tokens_of(c, r);
    return t > 0 && is_ok(r) ? (double)(r->msg_bytes + r->tool_bytes) / t : 0;
}

/* The shared prefix in tokens is measured at the predecessor's own bytes
 * per token (when all of p is shared: exactly p's prompt tokens), else at
 * r's, else at the session's median: a session's early requests (a long
 * system prompt) and late ones (many short messages) differ by 2x and
 * more, and the median would overstate the early ones' prefix. Never more
 * than r's own prompt. */
static void measure(const struct actx *c, size_t i, double bpt, struct cuse *u)
{
    const struct areq *r = &c->r[i];
    memset(u, 0, sizeof(*u));
    u->cached = cached_of(r);
    if (r->prev < 0 || !r->msgs || !is_ok(r) || u->cached < 0)
        return;
    const struct areq *p = &c->r[r->prev];
    double local = own_bpt(c, p);
    if (local <= 0)
        local = own_bpt(c, r);
    if (local <= 0)
        local = bpt;
    if (local <= 0)
        return;
    size_t k = areq_common(p, r);
    double bytes = (double)areq_bytes(r, k);
    if (k == p->nmsg && k < r->nmsg && is_reply(r, k, p)) {
        u->reply = true;
        bytes += (double)r->mbytes[k];
    }
    /* the tool schemas are shared when all of p's messages are: wherever
     * the template renders them, everything before r's new messages is
     * then the same. Past a rewrite or a compaction (only the system
     * prompt kept) where they sit is the template's own, and counting
     * them made a false refill of every opencode compaction. */
    if (k == p->nmsg && r->tool_bytes == p->tool_bytes)
        bytes += (double)r->tool_bytes;
    u->shared = bytes / local;
    double own = tokens_of(c, r);
    if (own > 0 && u->shared > own)
        u->shared = own;
    u->reply_tokens = p->completion_tokens;
    double end = p->x->started + p->x->up_total_ms / 1000.0;
    u->gap_s = r->x->started - end;
    u->idle = u->gap_s > c->o->th.cache_idle_s;
    u->ok = !u->idle;
}

static bool refilled(const struct actx *c, const struct cuse *u)
{
    const struct audit_thresholds *th = &c->o->th;
    return u->ok && u->shared >= th->cache_min_shared &&
           u->shared - (double)u->cached > th->cache_refill_share * u->shared;
}

/* The share of r's time to first token spent on the missed tokens: the
 * time goes to the tokens computed, of which these were had before. */
static double refill_cost(const struct actx *c, const struct areq *r,
                          const struct cuse *u)
{
    double missed = u->shared - (double)u->cached;
    double computed = tokens_of(c, r) - (double)u->cached;
    double cost = computed > 0 ? r->x->up_ttfb_ms * missed / computed : 0;
    return cost > r->x->up_ttfb_ms ? r->x->up_ttfb_ms : cost;
}

/* A long shared prefix mostly prefilled again: one finding per run of
 * such requests in a row (one cause: a cache too small for the prompt,
 * eviction, a cache turned off), at the first of them, with the first's
 * figures and the run's. A judged request that reused its prefix ends a
 * run, and so does an idle gap; requests not judged (no predecessor, no
 * figures) do not. */
static void check_refill(struct actx *c, const struct cuse *u)
{
    const struct audit_thresholds *th = &c->o->th;
    size_t i = 0;
    while (i < c->n) {
        if (!refilled(c, &u[i])) {
            i++;
            continue;
        }
        size_t first = i, last = i, run = 0;
        double missed_all = 0, cost_all = 0;
        for (; i < c->n; i++) {
            if (u[i].idle || (u[i].ok && !refilled(c, &u[i])))
                break;
            if (!refilled(c, &u[i]))
                continue;
            run++;
            last = i;
            missed_all += u[i].shared - (double)u[i].cached;
            cost_all += refill_cost(c, &c->r[i], &u[i]);
        }
        const struct areq *r = &c->r[first];
        const struct cuse *f = &u[first];
        double missed = f->shared - (double)f->cached;
        double cost = refill_cost(c, r, f);
        struct buf more = BUF_INIT;
        if (run > 1)
            buf_printf(&more,
                       "; so were the %zu requests after it in a row, to "
                       "request %lld (%.0f tokens prefilled again in all, "
                       "about %.0f ms of time to first token)",
                       run - 1, (long long)c->r[last].x->id, missed_all,
                       cost_all);
        audit_finding_add(
            c, AUDIT_WARN, "cache.refill", r,
            json_pack("{s:f, s:I, s:f, s:f, s:f, s:f, s:b, s:I, s:I, s:f, "
                      "s:f, s:f, s:f}",
                      "shared_tokens", f->shared, "cached_tokens",
                      (json_int_t)f->cached, "refilled_tokens", missed,
                      "ttft_ms", r->x->up_ttfb_ms, "ttft_cost_ms", cost,
                      "gap_s", f->gap_s, "reply_shared", f->reply, "requests",
                      (json_int_t)run, "last_request",
                      (json_int_t)c->r[last].x->id, "refilled_tokens_in_run",
                      missed_all, "ttft_cost_ms_in_run", cost_all,
                      "threshold_tokens", th->cache_min_shared,
                      "threshold_share", th->cache_refill_share),
            "%.0f tokens shared with the previous request, %ld served from "
            "the cache: %.0f prefilled again (%.0f%%), about %.0f ms of the "
            "%.0f ms to first token%s",
            f->shared, f->cached, missed, 100 * missed / f->shared, cost,
            r->x->up_ttfb_ms, more.len ? more.data : "");
        buf_release(&more);
    }
}

/* The previous reply sent back but never found in the cache: the cached
 * tokens never reach past the previous prompt. */
static void check_reply(struct actx *c, const struct cuse *u)
{
    const struct audit_thresholds *th = &c->o->th;
    size_t turns = 0, last = 0;
    double refilled = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        if (!u[i].ok || !u[i].reply || u[i].reply_tokens < 32)
            continue;
        /* a reply that began with reasoning is reused only when the
         * template renders that reasoning back as it was generated; many
         * drop it (DeepSeek's rule), and then no server can reuse the
         * reply: no claim about the server */
        if (c->r[r->prev].reasoning && *c->r[r->prev].reasoning)
            continue;
        if ((double)u[i].cached > tokens_of(c, &c->r[r->prev]))
            return; /* a reply was reused once: the cache keeps output */
        if (u[i].cached <= 0)
            continue; /* nothing reused at all: the refill rule's case */
        turns++;
        last = i;
        refilled += (double)u[i].reply_tokens;
    }
    if (turns < (size_t)th->cache_unused_turns)
        return;
    audit_finding_add(
        c, AUDIT_WARN, "cache.reply_not_reused", &c->r[last],
        json_pack("{s:I, s:f, s:I}", "turns", (json_int_t)turns,
                  "reply_tokens_refilled", refilled, "threshold_turns",
                  (json_int_t)th->cache_unused_turns),
        "over %zu turns the previous reply was sent back and never "
        "served from the cache: %.0f generated tokens prefilled "
        "again (the server does not cache its output)",
        turns, refilled);
}

/* Reuse (cached / shared) below a share of the session median for a run
 * of requests in a row. */
static void check_drop(struct actx *c, const struct cuse *u)
{
    const struct audit_thresholds *th = &c->o->th;
    double *v = xcalloc(c->n + 1, sizeof(*v));
    size_t n = 0, run = 0;
    for (size_t i = 0; i < c->n; i++)
        if (u[i].ok && u[i].shared >= 256)
            v[n++] = (double)u[i].cached / u[i].shared;
    double med = n >= 3 ? stats_quantile_sort(v, n, 0.5) : 0;
    free(v);
    if (med <= 0)
        return;
    double low = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (u[i].idle) {
            run = 0;
            continue;
        }
        if (!u[i].ok || u[i].shared < 256)
            continue;
        double reuse = (double)u[i].cached / u[i].shared;
        if (reuse >= th->cache_drop_share * med) {
            run = 0;
            continue;
        }
        low += u[i].shared - (double)u[i].cached;
        if (++run != (size_t)th->cache_drop_run)
            continue;
        audit_finding_add(
            c, AUDIT_WARN, "cache.reuse_drop", &c->r[i],
            json_pack("{s:f, s:f, s:I, s:f, s:f, s:f, s:I}", "reuse", reuse,
                      "session_median", med, "cached_tokens",
                      (json_int_t)u[i].cached, "shared_tokens", u[i].shared,
                      "refilled_tokens_in_run", low, "threshold_share",
                      th->cache_drop_share, "threshold_run",
                      (json_int_t)th->cache_drop_run),
            "cache reuse %.0f%% of the shared prefix, under %.0f%% "
            "of the session's median %.0f%% for %zu requests in a "
            "row (%.0f tokens prefilled again)",
            100 * reuse, 100 * th->cache_drop_share, 100 * med, run, low);
    }
}

static bool said_no_figures(const struct actx *c)
{
    for (size_t i = 0; i < c->out->n; i++)
        if (!strcmp(c->out->v[i].rule, "cache.no_figures"))
            return true;
    return false;
}

void audit_rule_cache(struct actx *c)
{
    bool figures = false, chained = false;
    for (size_t i = 0; i < c->n; i++) {
        figures |= cached_of(&c->r[i]) >= 0;
        chained |=
            c->r[i].prev >= 0 && is_ok(&c->r[i]) && c->r[i].prompt_tokens > 0;
    }
    if (!figures) {
        if (chained && !said_no_figures(c))
            audit_finding_add(c, AUDIT_INFO, "cache.no_figures", NULL, NULL,
                              "the server reports no cached tokens "
                              "(usage.prompt_tokens_details.cached_tokens): "
                              "prefix-cache reuse is not checked");
        return;
    }
    double bpt = bytes_per_token(c);
    struct cuse *u = xcalloc(c->n + 1, sizeof(*u));
    for (size_t i = 0; i < c->n; i++)
        measure(c, i, bpt, &u[i]);
    check_refill(c, u);
    check_reply(c, u);
    check_drop(c, u);
    free(u);
}
