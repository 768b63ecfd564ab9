/*
 * report: what a probe run found. Pass rates per cell with 95% Wilson
 * intervals (Wilson 1927), effective context length by RULER's rule (Hsieh
 * et al. 2024, "RULER: What's the Real Context Size of Your Long-Context
 * Language Models?": the longest length whose score stays above 85.6%, the
 * Llama-2-7B score at 4k) and by NoLiMa's (Modarressi et al. 2025: at
 * least 85% of the mean score at the three shortest lengths), McNemar's
 * exact test between endpoint and baseline, and the renderings: text
 * table, heatmaps, JSON (docs/PROBE.md) and JUnit XML.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plural.h"
#include "core/stats.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

#define Z95 1.959964
#define MAXL 32

unsigned probe_effective_ruler(const unsigned *lengths, const double *rate,
                               size_t n, double threshold)
{
    unsigned eff = 0;
    for (size_t i = 0; i < n; i++) {
        if (rate[i] < threshold)
            break;
        eff = lengths[i];
    }
    return eff;
}

unsigned probe_effective_nolima(const unsigned *lengths, const double *rate,
                                size_t n, double *base)
{
    size_t k = n < 3 ? n : 3;
    double b = 0;
    for (size_t i = 0; i < k; i++)
        b += rate[i] / (double)k;
    if (base)
        *base = b;
    /* A kind that fails at its shortest lengths has no base score to keep
     * 85% of (at 5%, 85% of it is 4%, which any length reaches): its
     * effective length is 0, below the shortest length tested, as by
     * RULER's rule. */
    if (!k || b < PROBE_NOLIMA_MIN_BASE)
        return 0;
    return probe_effective_ruler(lengths, rate, n, PROBE_NOLIMA_SHARE * b);
}

size_t probe_sizing_under(const struct probe_report_in *in,
                          const struct probe_result *res)
{
    size_t n = 0;
    for (size_t i = 0; i < in->n; i++)
        if (res[i].done && res[i].expected &&
            res[i].expected < 0.5 * in->specs[i].target)
            n += probe_weight(&res[i]);
    return n;
}

double probe_pass_rate(const struct probe_result *res, size_t n)
{
    size_t done = 0, pass = 0;
    for (size_t i = 0; i < n; i++)
        if (res[i].done) {
            unsigned w = probe_weight(&res[i]);
            done += w;
            pass += res[i].outcome == PROBE_PASS ? w : 0;
        }
    return done ? (double)pass / (double)done : 0;
}

/* ---- aggregation ---- */

struct tally {
    unsigned n, pass, out[PROBE_NOUTCOMES], no_ctx;
    unsigned tested; /* by_length: the largest target of the cell's cases
                        (under its length when the cell was capped) */
};

static void tally_add(struct tally *t, const struct probe_result *r)
{
    if (!r->done)
        return;
    unsigned w = probe_weight(r);
    t->n += w;
    t->pass += r->outcome == PROBE_PASS ? w : 0;
    t->out[r->outcome] += w;
    t->no_ctx += r->no_context ? w : 0;
}

static double rate_of(const struct tally *t)
{
    return t->n ? (double)t->pass / t->n : 0;
}

/* The distinct lengths of a kind (or of all kinds when k < 0), ascending. */
static size_t lengths_of(const struct probe_report_in *in, int k,
                         unsigned out[MAXL])
{
    size_t n = 0;
    for (size_t i = 0; i < in->n; i++) {
        if (k >= 0 && (int)in->specs[i].kind != k)
            continue;
        unsigned l = in->specs[i].length;
        size_t j = 0;
        while (j < n && out[j] != l)
            j++;
        if (j == n && n < MAXL) {
            size_t p = n++;
            while (p > 0 && out[p - 1] > l) {
                out[p] = out[p - 1];
                p--;
            }
            out[p] = l;
        }
    }
    return n;
}

static void by_length(const struct probe_report_in *in,
                      const struct probe_result *res, int k, const unsigned *L,
                      size_t nl, struct tally *t)
{
    memset(t, 0, nl * sizeof(*t));
    for (size_t i = 0; i < in->n; i++) {
        if (k >= 0 && (int)in->specs[i].kind != k)
            continue;
        for (size_t j = 0; j < nl; j++)
            if (L[j] == in->specs[i].length) {
                tally_add(&t[j], &res[i]);
                if (in->specs[i].target > t[j].tested)
                    t[j].tested = in->specs[i].target;
            }
    }
}

/* The length a cell tested: its own, or less when it was capped. */
static unsigned tested_len(unsigned length, const struct tally *t)
{
    return t->tested && t->tested < length ? t->tested : length;
}

static void effective(const unsigned *L, const struct tally *t, size_t nl,
                      unsigned *ruler, unsigned *nolima, double *base)
{
    double rate[MAXL] = {0};
    unsigned LL[MAXL] = {0};
    size_t m = 0;
    for (size_t i = 0; i < nl; i++)
        if (t[i].n) {
            LL[m] = L[i];
            rate[m++] = rate_of(&t[i]);
        }
    *ruler = probe_effective_ruler(LL, rate, m, PROBE_RULER_THRESHOLD);
    *nolima = probe_effective_nolima(LL, rate, m, base);
    /* never past the largest length actually tested: a capped cell
     * (max_model_len under its length) counts at its tested length */
    for (size_t i = 0; i < nl; i++) {
        if (*ruler == L[i])
            *ruler = tested_len(L[i], &t[i]);
        if (*nolima == L[i])
            *nolima = tested_len(L[i], &t[i]);
    }
}

static json_t *wilson_json(const struct tally *t)
{
    double lo, hi;
    stats_wilson(t->pass, t->n, Z95, &lo, &hi);
    return json_pack("[f, f]", lo, hi);
}

static json_t *outcomes_json(const struct tally *t)
{
    json_t *o = json_object();
    for (int i = 0; i < PROBE_NOUTCOMES; i++)
        json_object_set_new(o, probe_outcome_name(i), json_integer(t->out[i]));
    return o;
}

static json_t *tally_json(const struct tally *t)
{
    return json_pack("{s:i, s:i, s:f, s:o, s:o, s:i}", "cases", t->n, "passed",
                     t->pass, "pass_rate", rate_of(t), "wilson95",
                     wilson_json(t), "outcomes", outcomes_json(t),
                     "no_context_replies", t->no_ctx);
}

/* ---- McNemar between endpoint and baseline ---- */

struct pairs {
    unsigned both, a_only, b_only, neither;
};

static void pair_add(struct pairs *p, const struct probe_result *a,
                     const struct probe_result *b)
{
    if (!a->done || !b->done)
        return;
    bool pa = a->outcome == PROBE_PASS, pb = b->outcome == PROBE_PASS;
    unsigned w = probe_weight(a); /* a pair is kept as one: equal weights */
    if (pa && pb)
        p->both += w;
    else if (pa)
        p->a_only += w;
    else if (pb)
        p->b_only += w;
    else
        p->neither += w;
}

void probe_holm(const double *p, size_t n, double *adj)
{
    size_t idx[PROBE_NKINDS * 4];
    if (n > sizeof(idx) / sizeof(*idx))
        n = sizeof(idx) / sizeof(*idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    for (size_t i = 1; i < n; i++) /* ascending p, stable */
        for (size_t j = i; j > 0 && p[idx[j - 1]] > p[idx[j]]; j--) {
            size_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    double run = 0;
    for (size_t r = 0; r < n; r++) {
        double a = fmin(1, (double)(n - r) * p[idx[r]]);
        run = fmax(run, a); /* adjusted p-values never decrease */
        adj[idx[r]] = run;
    }
}

static json_t *pairs_json(const struct pairs *p)
{
    double pv = stats_mcnemar_exact(p->a_only, p->b_only);
    return json_pack("{s:i, s:i, s:i, s:i, s:f, s:b}", "both_pass", p->both,
                     "endpoint_only_pass", p->a_only, "baseline_only_pass",
                     p->b_only, "both_fail", p->neither, "p_value", pv,
                     "significant", pv < 0.05);
}

static bool has_pairs(const struct pairs *p)
{
    return p->both + p->a_only + p->b_only + p->neither > 0;
}

/* Holm-adjusted McNemar p-values of the kinds that have pairs. */
static void kind_holm(const struct pairs *kind, double adj[PROBE_NKINDS])
{
    double p[PROBE_NKINDS], a[PROBE_NKINDS];
    int which[PROBE_NKINDS];
    size_t m = 0;
    for (int k = 0; k < PROBE_NKINDS; k++) {
        adj[k] = 1;
        if (!has_pairs(&kind[k]))
            continue;
        which[m] = k;
        p[m++] = stats_mcnemar_exact(kind[k].a_only, kind[k].b_only);
    }
    probe_holm(p, m, a);
    for (size_t i = 0; i < m; i++)
        adj[which[i]] = a[i];
}

static json_t *comparison_json(const struct probe_report_in *in)
{
    struct pairs all = {0}, kind[PROBE_NKINDS] = {{0}}, len[MAXL] = {{0}};
    unsigned L[MAXL];
    size_t nl = lengths_of(in, -1, L);
    for (size_t i = 0; i < in->n; i++) {
        pair_add(&all, &in->res[i], &in->bres[i]);
        pair_add(&kind[in->specs[i].kind], &in->res[i], &in->bres[i]);
        for (size_t j = 0; j < nl; j++)
            if (L[j] == in->specs[i].length)
                pair_add(&len[j], &in->res[i], &in->bres[i]);
    }
    json_t *c = json_object(), *bk = json_object(), *bl = json_array();
    json_object_set_new(c, "overall", pairs_json(&all));
    double adj[PROBE_NKINDS];
    kind_holm(kind, adj);
    for (int k = 0; k < PROBE_NKINDS; k++)
        if (has_pairs(&kind[k])) {
            /* a kind is significant after Holm's correction over the kinds */
            json_t *p = pairs_json(&kind[k]);
            json_object_set_new(p, "p_holm", json_real(adj[k]));
            json_object_set_new(p, "significant", json_boolean(adj[k] < 0.05));
            json_object_set_new(bk, probe_kind_name(k), p);
        }
    for (size_t j = 0; j < nl; j++) {
        json_t *p = pairs_json(&len[j]);
        json_object_set_new(p, "length", json_integer(L[j]));
        json_array_append_new(bl, p);
    }
    json_object_set_new(c, "by_kind", bk);
    json_object_set_new(c, "by_length", bl);
    return c;
}

void probe_verdict(const struct probe_report_in *in, double fail_under,
                   struct probe_verdict *v)
{
    struct pairs all = {0};
    memset(v, 0, sizeof(*v));
    v->pass_rate = 100 * probe_pass_rate(in->res, in->n);
    v->p_value = 1;
    if (in->base && in->bres) {
        for (size_t i = 0; i < in->n; i++)
            pair_add(&all, &in->res[i], &in->bres[i]);
        v->paired = all.both + all.a_only + all.b_only + all.neither;
        v->endpoint_only = all.a_only;
        v->baseline_only = all.b_only;
        v->p_value = stats_mcnemar_exact(all.a_only, all.b_only);
        v->worse = v->p_value < 0.05 && all.b_only > all.a_only;
    }
    v->below = fail_under > 0 && v->pass_rate < fail_under;
    v->sizing = probe_sizing_under(in, in->res);
    char base[160] = "", rate[120];
    if (in->base && in->bres)
        snprintf(base, sizeof(base),
                 "%s than the baseline (McNemar p = %.3g over %u paired "
                 "cases, %u pass only on the baseline, %u only on the "
                 "endpoint)",
                 v->worse ? "significantly worse" : "not significantly worse",
                 v->p_value, v->paired, v->baseline_only, v->endpoint_only);
    if (fail_under > 0)
        snprintf(rate, sizeof(rate), "pass rate %.1f%% %s --fail-under %g%%",
                 v->pass_rate, v->below ? "is below" : "meets", fail_under);
    else
        snprintf(rate, sizeof(rate),
                 "pass rate %.1f%% (--fail-under 0: not a rule)", v->pass_rate);
    if (v->worse && v->below)
        snprintf(v->line, sizeof(v->line), "FAIL: %s, and the %s", base, rate);
    else if (v->worse)
        snprintf(v->line, sizeof(v->line), "FAIL: %s; %s", base, rate);
    else if (v->below)
        snprintf(v->line, sizeof(v->line), "FAIL: the %s%s%s", rate,
                 base[0] ? "; " : "", base);
    else
        snprintf(v->line, sizeof(v->line), "%s: the %s%s%s",
                 v->sizing ? "FAIL" : "PASS", rate, base[0] ? "; " : "", base);
    if (v->sizing) {
        size_t l = strlen(v->line);
        snprintf(v->line + l, sizeof(v->line) - l,
                 "; sizing achieved under 50%% of the target in %zu cases "
                 "(an error: the lengths tested are not the ones asked for)",
                 v->sizing);
    }
}

/* ---- JSON ---- */

json_t *probe_endpoint_json(const struct probe_endpoint *e)
{
    if (!e)
        return json_null();
    json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:s}", "url", e->url, "model",
                          e->model ? e->model : "", "fingerprint", e->fp,
                          "max_model_len", e->max_model_len, "tokenizer",
                          e->has_tokenize ? "tokenize" : "calibrated");
    if (e->calibrated)
        json_object_set_new(j, "calibration",
                            json_pack("{s:f, s:f}", "tokens_at_zero", e->cal_a,
                                      "tokens_per_unit", e->cal_b));
    json_object_set(j, "server_info", e->info ? e->info : json_null());
    return j;
}

static json_t *case_json(const struct probe_spec *s,
                         const struct probe_result *r)
{
    json_t *c = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:s, s:f, s:i, s:s, s:b, s:b}", "key",
        r->key, "kind", probe_kind_name(s->kind), "length", s->length,
        "target_tokens", s->target, "depth", s->depth, "variant",
        probe_variant_name(s->kind, s->variant), "temperature", s->temperature,
        "repeat", s->rep, "outcome",
        r->done ? probe_outcome_name(r->outcome) : "not-run", "passed",
        r->done && r->outcome == PROBE_PASS, "cached", r->cached);
    char seed[24];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)s->seed);
    json_object_set_new(c, "seed", json_string(seed));
    if (s->vary)
        json_object_set(c, "vary", (json_t *)s->vary);
    if (s->kind == PROBE_CANARY && s->depth >= 0) {
        unsigned n = probe_turns_for(s->target);
        json_object_set_new(
            c, "turn", json_integer(lround(s->depth / 100.0 * (n - 1)) + 1));
        json_object_set_new(c, "turns", json_integer(n));
    }
    if (!r->done)
        return c;
    json_object_set_new(c, "expected_tokens", json_integer(r->expected));
    json_object_set_new(c, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(c, "finish_reason", json_string(r->finish));
    json_object_set_new(c, "no_context", json_boolean(r->no_context));
    json_object_set_new(c, "http_status", json_integer(r->status));
    json_object_set_new(c, "attempts", json_integer(r->attempts));
    json_object_set_new(c, "reply", json_string(r->reply));
    if (r->error[0])
        json_object_set_new(c, "error", json_string(r->error));
    if (r->path_tokens)
        json_object_set_new(c, "path_tokens", json_integer(r->path_tokens));
    json_object_set_new(c, "lost_context", json_boolean(r->lost));
    /* a miss counted by the calibrated line, or short of an exact count
     * by what no run of messages explains: a loss is not ruled out */
    if (probe_loss_not_ruled_out(r))
        json_object_set_new(c, "inconclusive", json_true());
    if (r->outcome == PROBE_DROPPED || r->outcome == PROBE_TRUNCATED)
        json_object_set_new(c, "reached_ratio", json_real(r->drop_ratio));
    if (r->outcome == PROBE_DROPPED) {
        json_object_set_new(c, "drop", json_string(probe_drop_name(r->drop)));
        if (r->drop_turns)
            json_object_set_new(c, "drop_turns", json_integer(r->drop_turns));
        if (r->drop_msgs)
            json_object_set_new(c, "drop_messages", json_integer(r->drop_msgs));
        if (r->drop_at)
            json_object_set_new(c, "drop_from",
                                json_string(probe_drop_at_name(r->drop_at)));
    }
    return c;
}

static char dominant(const struct tally *t);

static bool same_cell(const struct probe_spec *a, const struct probe_spec *b)
{
    return a->kind == b->kind && a->length == b->length &&
           a->depth == b->depth && a->variant == b->variant &&
           a->temperature == b->temperature &&
           !strcmp(a->vary_key ? a->vary_key : "",
                   b->vary_key ? b->vary_key : "");
}

static json_t *cells_json(const struct probe_report_in *in,
                          const struct probe_result *res)
{
    json_t *cells = json_array();
    for (size_t i = 0; i < in->n;) {
        struct tally t = {0};
        size_t j = i;
        while (j < in->n && same_cell(&in->specs[i], &in->specs[j]))
            tally_add(&t, &res[j++]);
        const struct probe_spec *s = &in->specs[i];
        json_t *c = tally_json(&t);
        json_object_set_new(c, "kind", json_string(probe_kind_name(s->kind)));
        json_object_set_new(c, "length", json_integer(s->length));
        json_object_set_new(c, "depth", json_integer(s->depth));
        json_object_set_new(
            c, "variant", json_string(probe_variant_name(s->kind, s->variant)));
        json_object_set_new(c, "temperature", json_real(s->temperature));
        if (s->vary)
            json_object_set(c, "vary", (json_t *)s->vary);
        char letter = dominant(&t);
        if (letter != ' ') /* the terminal heatmap's letter */
            json_object_set_new(c, "failure", json_stringn(&letter, 1));
        json_array_append_new(cells, c);
        i = j;
    }
    return cells;
}

static json_t *reasoning_json(const struct probe_report_in *in,
                              const struct probe_result *res);
static char *explain_kind_str(const struct probe_report_in *in,
                              const struct probe_result *res, int k);

static json_t *kinds_json(const struct probe_report_in *in,
                          const struct probe_result *res)
{
    json_t *ks = json_array();
    for (int k = 0; k < PROBE_NKINDS; k++) {
        unsigned L[MAXL], ruler, nolima;
        struct tally t[MAXL], all = {0};
        double base;
        size_t nl = lengths_of(in, k, L);
        if (!nl)
            continue;
        by_length(in, res, k, L, nl, t);
        effective(L, t, nl, &ruler, &nolima, &base);
        json_t *bl = json_array();
        for (size_t j = 0; j < nl; j++) {
            json_t *x = tally_json(&t[j]);
            json_object_set_new(x, "length", json_integer(L[j]));
            if (tested_len(L[j], &t[j]) < L[j]) {
                json_object_set_new(x, "capped", json_true());
                json_object_set_new(x, "tested_tokens",
                                    json_integer(t[j].tested));
            }
            json_array_append_new(bl, x);
            all.n += t[j].n;
            all.pass += t[j].pass;
            all.no_ctx += t[j].no_ctx;
            for (int o = 0; o < PROBE_NOUTCOMES; o++)
                all.out[o] += t[j].out[o];
        }
        json_t *kj = tally_json(&all);
        json_object_set_new(kj, "kind", json_string(probe_kind_name(k)));
        json_object_set_new(kj, "by_length", bl);
        json_object_set_new(kj, "effective_length",
                            json_pack("{s:i, s:f, s:i, s:f}", "ruler", ruler,
                                      "ruler_threshold", PROBE_RULER_THRESHOLD,
                                      "nolima", nolima, "nolima_base", base));
        json_t *rj = k == PROBE_REASONING ? reasoning_json(in, res) : NULL;
        if (rj)
            json_object_set_new(kj, "reasoning_fields", rj);
        char *why = explain_kind_str(in, res, k);
        if (why)
            json_object_set_new(kj, "why", json_string(why));
        free(why);
        json_array_append_new(ks, kj);
    }
    return ks;
}

/* A case the stored run keeps as an example: one that ran and did not
 * pass. */
static bool is_example(const json_t *c)
{
    const char *oc = json_string_value(json_object_get(c, "outcome"));
    return !json_is_true(json_object_get(c, "passed")) &&
           !(oc && !strcmp(oc, "not-run"));
}

static json_t *side_json(const struct probe_report_in *in,
                         const struct probe_result *res)
{
    struct tally all = {0};
    unsigned L[MAXL], ruler, nolima;
    struct tally t[MAXL];
    double base;
    for (size_t i = 0; i < in->n; i++)
        tally_add(&all, &res[i]);
    size_t nl = lengths_of(in, -1, L);
    by_length(in, res, -1, L, nl, t);
    effective(L, t, nl, &ruler, &nolima, &base);
    json_t *s = tally_json(&all);
    json_object_set_new(
        s, "effective_length",
        json_pack("{s:i, s:i}", "ruler", ruler, "nolima", nolima));
    json_object_set_new(s, "kinds", kinds_json(in, res));
    json_object_set_new(s, "sizing_under_half",
                        json_integer((json_int_t)probe_sizing_under(in, res)));
    json_object_set_new(s, "cells", cells_json(in, res));
    json_t *cases = json_array();
    for (size_t i = 0; i < in->n; i++) {
        json_t *c = case_json(&in->specs[i], &res[i]);
        if (in->max_cases && !is_example(c)) {
            json_decref(c);
            continue;
        }
        json_array_append_new(cases, c);
        if (in->max_cases && json_array_size(cases) >= in->max_cases)
            break;
    }
    json_object_set_new(s, "case_results", cases);
    return s;
}

json_t *probe_report_json(const struct probe_report_in *in)
{
    json_t *j = json_object();
    json_object_set_new(j, "format", json_string("fidelity-probe/1"));
    json_object_set_new(j, "endpoint", probe_endpoint_json(in->ep));
    json_object_set_new(j, "baseline", probe_endpoint_json(in->base));
    json_object_set(j, "config", in->config ? in->config : json_null());
    json_object_set_new(j, "interrupted", json_boolean(in->interrupted));
    /* the terminal's last line, so the report can lead with it (the
     * command adds "verdict", its word) */
    struct probe_verdict v;
    probe_verdict(in, in->fail_under, &v);
    json_object_set_new(j, "verdict_line",
                        json_string(in->interrupted
                                        ? "INCONCLUSIVE: the run was "
                                          "interrupted before every case "
                                          "finished"
                                        : v.line));
    json_object_set_new(j, "results", side_json(in, in->res));
    if (in->base && in->bres) {
        json_object_set_new(j, "baseline_results", side_json(in, in->bres));
        json_object_set_new(j, "comparison", comparison_json(in));
    }
    return j;
}

/* Writes case_results of side (0, 1) at indent ind (spaces of the key):
 * "[", each case's object indented one level deeper, "]". */
static int stream_cases(const struct probe_report_in *in, int side, size_t ind,
                        FILE *f)
{
    size_t flags = JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10);
    size_t n = in->cases ? in->cases : in->n;
    if (!n)
        return fputs("[]", f) == EOF ? -EIO : 0;
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        struct probe_spec sp;
        struct probe_result r;
        in->spec_at(in->ud, i, &sp);
        if (in->result_at(in->ud, i, side, &r))
            return -EIO;
        json_t *c = case_json(&sp, &r);
        char *t = json_dumps(c, flags);
        json_decref(c);
        if (!t)
            return -EIO;
        fprintf(f, "%s\n%*s", i ? "," : "", (int)ind + 2, "");
        for (const char *q = t; *q; q++) { /* nested: ind + 2 deeper */
            fputc(*q, f);
            if (*q == '\n')
                fprintf(f, "%*s", (int)ind + 2, "");
        }
        free(t);
    }
    fprintf(f, "\n%*s]", (int)ind, "");
    return ferror(f) ? -EIO : 0;
}

int probe_report_json_write(const struct probe_report_in *in, json_t *doc,
                            FILE *f)
{
    static const char *const sides[] = {"results", "baseline_results"};
    static const char *const mark[] = {"\001cases0", "\001cases1"};
    size_t flags = JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10);
    if (!in->spec_at || !in->result_at)
        return json_dumpf(doc, f, flags) ? -EIO : 0;
    /* the document with a mark for each side's cases, the cases written
     * where the marks stand */
    json_t *d = json_copy(doc);
    for (int k = 0; k < 2; k++) {
        json_t *side = json_object_get(d, sides[k]);
        if (!side)
            continue;
        side = json_copy(side);
        json_object_set_new(side, "case_results", json_string(mark[k]));
        json_object_set_new(d, sides[k], side);
    }
    char *t = json_dumps(d, flags);
    json_decref(d);
    if (!t)
        return -EIO;
    const char *p = t;
    int rc = 0;
    while (!rc) {
        const char *m0 = strstr(p, "\"\\u0001cases");
        if (!m0) {
            fputs(p, f);
            break;
        }
        int side = m0[12] - '0'; /* "\u0001casesN" */
        const char *ls = m0;     /* the start of the key's line */
        while (ls > t && ls[-1] != '\n')
            ls--;
        size_t ind = strspn(ls, " ");
        fwrite(p, 1, (size_t)(m0 - p), f);
        rc = stream_cases(in, side, ind, f);
        p = m0 + 14;
    }
    free(t);
    return rc || ferror(f) ? -EIO : 0;
}

/* ---- text ---- */

static const char outcome_letter[PROBE_NOUTCOMES] = {' ', 'T', 'C',
                                                     'E', 'M', 'D'};

static void fmt_len(unsigned l, char *out, size_t n)
{
    if (l % 1024 == 0)
        snprintf(out, n, "%uk", l / 1024);
    else
        snprintf(out, n, "%u", l);
}

static char dominant(const struct tally *t)
{
    int best = 0;
    for (int o = 1; o < PROBE_NOUTCOMES; o++)
        if (t->out[o] > (best ? t->out[best] : 0))
            best = o;
    return best ? outcome_letter[best] : ' ';
}

static void print_cell(FILE *out, const struct tally *t)
{
    if (!t->n)
        fprintf(out, " %5s", "-");
    else
        fprintf(out, " %4.0f%c", 100.0 * rate_of(t), dominant(t));
}

/* One heatmap: rows are lengths; columns are depths (variant fixed) or,
 * for kinds without depth, variants. */
static void heatmap(FILE *out, const struct probe_report_in *in,
                    const struct probe_result *res, int k, int variant)
{
    bool depth = probe_kind_has_depth(k);
    int cols[16];
    size_t nc = 0;
    unsigned L[MAXL];
    size_t nl = lengths_of(in, k, L);
    for (size_t i = 0; i < in->n && nc < 16; i++) {
        const struct probe_spec *s = &in->specs[i];
        if ((int)s->kind != k || (depth && s->variant != variant))
            continue;
        int c = depth ? s->depth : s->variant;
        size_t j = 0;
        while (j < nc && cols[j] != c)
            j++;
        if (j == nc)
            cols[nc++] = c;
    }
    if (!nc)
        return;
    fprintf(out, "\n%s", probe_kind_name(k));
    if (depth && k != PROBE_NEEDLE && k != PROBE_MULTI && k != PROBE_VARIABLES)
        fprintf(out, " [%s]", probe_variant_name(k, variant));
    fprintf(out, " (pass %% by length x %s)\n  length",
            depth ? (k == PROBE_CANARY ? "turn position" : "depth")
                  : "variant");
    for (size_t c = 0; c < nc; c++) {
        char h[32];
        if (depth)
            snprintf(h, sizeof(h), cols[c] < 0 ? "-" : "%d%%", cols[c]);
        else
            snprintf(h, sizeof(h), "v%d", cols[c]);
        fprintf(out, " %5s", h);
    }
    fputc('\n', out);
    for (size_t l = 0; l < nl; l++) {
        char ls[16];
        bool capped = false; /* marked: see capped_note */
        for (size_t i = 0; i < in->n; i++)
            capped |= (int)in->specs[i].kind == k &&
                      in->specs[i].length == L[l] && in->specs[i].target < L[l];
        fmt_len(L[l], ls, sizeof(ls) - 1);
        if (capped)
            strcat(ls, "*");
        fprintf(out, "  %6s", ls);
        for (size_t c = 0; c < nc; c++) {
            struct tally t = {0};
            for (size_t i = 0; i < in->n; i++) {
                const struct probe_spec *s = &in->specs[i];
                if ((int)s->kind == k && s->length == L[l] &&
                    (depth ? s->variant == variant && s->depth == cols[c]
                           : s->variant == cols[c]))
                    tally_add(&t, &res[i]);
            }
            print_cell(out, &t);
        }
        fputc('\n', out);
    }
    if (!depth && k != PROBE_FIRST)
        for (size_t c = 0; c < nc; c++)
            fprintf(out, "  v%d = %s\n", cols[c],
                    probe_variant_name(k, cols[c]));
}

/* Marks and explains the capped lengths: cases sized under the length
 * because the server's context would not hold it with the reply. */
static void capped_note(FILE *out, const struct probe_report_in *in,
                        const struct probe_result *res)
{
    unsigned L[MAXL];
    struct tally t[MAXL];
    size_t nl = lengths_of(in, -1, L), nc = 0;
    unsigned most = 0;
    by_length(in, res, -1, L, nl, t);
    for (size_t j = 0; j < nl; j++) {
        if (tested_len(L[j], &t[j]) >= L[j])
            continue;
        most = t[j].tested > most ? t[j].tested : most;
        char l[16];
        fmt_len(L[j], l, sizeof(l));
        fprintf(out, "%s%s", nc++ ? ", " : "(capped: ", l);
    }
    if (!nc)
        return;
    fprintf(out,
            " tested at %u tokens at most, marked * in the heatmaps: the "
            "server's max_model_len %u holds no more with the reply; an "
            "effective length never exceeds the length a cell tested)\n",
            most, in->ep ? in->ep->max_model_len : 0);
}

static void summary_table(FILE *out, const struct probe_report_in *in,
                          const struct probe_result *res)
{
    bool below = false;
    fprintf(out, "%-14s %6s %6s %7s  %-13s %7s %7s  %s\n", "kind", "cases",
            "passed", "rate", "95% CI", "ruler", "nolima", "failures");
    for (int k = 0; k < PROBE_NKINDS; k++) {
        unsigned L[MAXL], ruler, nolima;
        struct tally t[MAXL], all = {0};
        double base, lo, hi;
        size_t nl = lengths_of(in, k, L);
        if (!nl)
            continue;
        by_length(in, res, k, L, nl, t);
        effective(L, t, nl, &ruler, &nolima, &base);
        for (size_t i = 0; i < in->n; i++)
            if ((int)in->specs[i].kind == k)
                tally_add(&all, &res[i]);
        stats_wilson(all.pass, all.n, Z95, &lo, &hi);
        char r1[16], r2[16], ci[32];
        fmt_len(ruler, r1, sizeof(r1));
        fmt_len(nolima, r2, sizeof(r2));
        snprintf(ci, sizeof(ci), "[%.0f%%, %.0f%%]", 100 * lo, 100 * hi);
        fprintf(out, "%-14s %6u %6u %6.1f%%  %-13s %7s %7s  ",
                probe_kind_name(k), all.n, all.pass, 100 * rate_of(&all), ci,
                ruler ? r1 : "<min", nolima ? r2 : "<min");
        if (!ruler || !nolima)
            below = true;
        bool any = false;
        for (int o = 1; o < PROBE_NOUTCOMES; o++)
            if (all.out[o]) {
                fprintf(out, "%s%s %u", any ? ", " : "", probe_outcome_name(o),
                        all.out[o]);
                any = true;
            }
        fprintf(out, "%s\n", any ? "" : "-");
    }
    if (below)
        fprintf(out, "(<min: effective length 0, below the shortest length "
                     "tested: the pass rate never reaches the rule's "
                     "threshold)\n");
    capped_note(out, in, res);
}

/* ---- the reasoning grid in words ---- */

/* kept[v]: 1 when variant v of the reasoning kind mostly passed, 0 when it
 * mostly failed, -1 when it was not run. */
static void reasoning_kept(const struct probe_report_in *in,
                           const struct probe_result *res,
                           int kept[PROBE_RV_COUNT])
{
    unsigned n[PROBE_RV_COUNT] = {0}, pass[PROBE_RV_COUNT] = {0};
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_spec *s = &in->specs[i];
        if (s->kind != PROBE_REASONING || !res[i].done ||
            res[i].outcome == PROBE_ERROR || s->variant < 0 ||
            s->variant >= PROBE_RV_COUNT)
            continue;
        n[s->variant] += probe_weight(&res[i]);
        pass[s->variant] +=
            res[i].outcome == PROBE_PASS ? probe_weight(&res[i]) : 0;
    }
    for (int v = 0; v < PROBE_RV_COUNT; v++)
        kept[v] = n[v] ? 2 * pass[v] > n[v] : -1;
}

static const char *kept_word(int k)
{
    return k < 0 ? "not tested" : k ? "kept" : "dropped";
}

bool probe_reasoning_words(const struct probe_report_in *in,
                           const struct probe_result *res, char *out,
                           size_t size)
{
    int k[PROBE_RV_COUNT];
    reasoning_kept(in, res, k);
    int f = k[PROBE_RV_FIELD], ft = k[PROBE_RV_FIELD_TOOLS];
    int t = k[PROBE_RV_INLINE], tt = k[PROBE_RV_INLINE_TOOLS];
    bool any = false;
    for (int v = 0; v < PROBE_RV_COUNT; v++)
        any |= k[v] >= 0;
    if (!any)
        return false;
    /* the variants isolate reasoning only when the rest of the context
     * reached the model: a case that lost other context says nothing */
    unsigned other = 0, cases = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_result *r = &res[i];
        if (in->specs[i].kind != PROBE_REASONING || !r->done ||
            r->outcome == PROBE_ERROR)
            continue;
        cases += probe_weight(r);
        if (r->outcome == PROBE_TRUNCATED ||
            (r->outcome == PROBE_DROPPED && r->drop != PROBE_DROP_REASONING))
            other += probe_weight(r);
    }
    if (other) {
        snprintf(out, size,
                 "the reasoning grid cannot tell what becomes of prior "
                 "reasoning: %u of %u reasoning cases lost other context "
                 "on the way (see above), so their variants do not differ "
                 "from the controls by the reasoning alone",
                 other, cases);
        return true;
    }
    const char *why;
    if (k[PROBE_RV_OMITTED] == 0)
        why = "the control (reasoning not sent back) recalled the fact it "
              "was never sent: the grid cannot tell what reaches the model";
    else if (f == 0 && ft == 1)
        why = "the path or template drops prior reasoning_content unless the "
              "request offers tools (DeepSeek V3.2's rule); with tools it "
              "reaches the model";
    else if (f == 0 && ft == 0 && (t == 1 || tt == 1))
        why = "the path or template drops the reasoning_content field, with "
              "and without tools, while <think> inside content reaches the "
              "model: the field itself is dropped (a path that strips it, "
              "or a template that does not render it)";
    else if (f == 1 && ft == 0)
        why = "prior reasoning_content is dropped when the request offers "
              "tools, kept without";
    else if ((f == 0 || ft == 0) && t == 0 && tt == 0)
        why = "prior reasoning reaches the model in no form (neither the "
              "reasoning_content field nor <think> inside content): the path "
              "strips it, or the template drops it";
    else if (f == 1 && ft == 1 && (t == 0 || tt == 0))
        why = "the reasoning_content field reaches the model, but <think> "
              "inside content does not: the path or template strips think "
              "blocks from content";
    else if (f == 1 && ft == 1)
        why = "prior reasoning reaches the model, as reasoning_content and "
              "inside content, with and without tools";
    else
        why = "no single rule explains the variants";
    snprintf(out, size,
             "reasoning_content: %s without tools, %s with tools; <think> in "
             "content: %s without tools, %s with tools; so %s",
             kept_word(f), kept_word(ft), kept_word(t), kept_word(tt), why);
    return true;
}

static json_t *reasoning_json(const struct probe_report_in *in,
                              const struct probe_result *res)
{
    int k[PROBE_RV_COUNT];
    char words[768];
    if (!probe_reasoning_words(in, res, words, sizeof(words)))
        return NULL;
    reasoning_kept(in, res, k);
    return json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:s}", "reasoning_content",
                     "without_tools", kept_word(k[PROBE_RV_FIELD]),
                     "with_tools", kept_word(k[PROBE_RV_FIELD_TOOLS]),
                     "inline_think", "without_tools",
                     kept_word(k[PROBE_RV_INLINE]), "with_tools",
                     kept_word(k[PROBE_RV_INLINE_TOOLS]), "conclusion", words);
}

/* The dropped cases of kind k: how many, the share of probe's own count
 * that reached the model, and what the drop looks like. */
static void explain_dropped(FILE *out, const struct probe_report_in *in,
                            const struct probe_result *res, int k)
{
    unsigned by[PROBE_DROP_COUNT][PROBE_AT_NEWEST + 1] = {{0}}, n = 0;
    unsigned seen = 0; /* the calibration's cap, for clipping by the line */
    double lo = 2, hi = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_result *r = &res[i];
        if ((int)in->specs[i].kind != k || !r->done ||
            r->outcome != PROBE_DROPPED)
            continue;
        n += probe_weight(r);
        by[r->drop]
          [r->drop_at >= 0 && r->drop_at <= PROBE_AT_NEWEST ? r->drop_at : 0] +=
            probe_weight(r);
        lo = fmin(lo, r->drop_ratio);
        hi = fmax(hi, r->drop_ratio);
        if (r->drop == PROBE_DROP_CLIP && r->have_shape && r->shape.estimated)
            seen = r->shape.clip_seen;
    }
    static const char *const what[PROBE_DROP_COUNT] = {
        [PROBE_DROP_NONE] = "an unknown kind of drop",
        [PROBE_DROP_WINDOW] = "a window (whole messages gone, none replaced",
        [PROBE_DROP_SUMMARY] = "a summary (whole messages replaced by a "
                               "short text: compaction",
        [PROBE_DROP_CLIP] = "clipping (long messages shortened inside)",
        [PROBE_DROP_REASONING] = "the reasoning_content field of earlier "
                                 "replies removed (the rest intact)",
        [PROBE_DROP_UNKNOWN] = "an unknown kind of drop (no run of "
                               "messages, summary, clipping or reasoning "
                               "field explains the count, or without "
                               "/tokenize the count cannot tell)",
    };
    /* a loss of a few tokens in thousands reads 99.9%, not 100% */
    int prec = hi > 0.995 ? 1 : 0;
    fprintf(out,
            " %u dropped-before-the-model (%.*f%% to %.*f%% of probe's own "
            "count reached the model, at no common cap: the path between "
            "probe and the model dropped context; it looks like",
            n, prec, 100 * lo, prec, 100 * hi);
    bool first = true;
    for (int d = 0; d < PROBE_DROP_COUNT; d++)
        for (int a = 0; a <= PROBE_AT_NEWEST; a++) {
            if (!by[d][a])
                continue;
            if (d == PROBE_DROP_CLIP && seen)
                fprintf(out,
                        "%s clipping (long messages shortened inside; the "
                        "calibration's long samples came back cut to about "
                        "%u bytes too)",
                        first ? "" : ",", seen);
            else
                fprintf(out, "%s %s", first ? "" : ",", what[d]);
            if (d == PROBE_DROP_WINDOW || d == PROBE_DROP_SUMMARY)
                fprintf(out, "%s%s)", a ? ", from the " : "",
                        probe_drop_at_name(a));
            fprintf(out, " in %u", by[d][a]);
            first = false;
        }
    fputs(");", out);
}

/* The missed cases of kind k (n of them). Counted by the calibrated line
 * (no /tokenize), "intact" means only within that line's error: a
 * smaller loss on the path (a stripped field) is not ruled out. */
static void explain_missed(FILE *out, const struct probe_report_in *in,
                           const struct probe_result *res, int k, unsigned n)
{
    double err = 0;
    unsigned short_n = 0;
    long most = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_result *r = &res[i];
        if ((int)in->specs[i].kind != k || !r->done ||
            r->outcome != PROBE_MISSED || !r->have_shape || !r->shape.total)
            continue;
        if (r->shape.estimated)
            err = fmax(err, 2 * r->shape.err / r->shape.total);
        else if (probe_loss_not_ruled_out(r)) {
            short_n++;
            long by = (long)r->shape.total - r->prompt_tokens;
            most = by > most ? by : most;
        }
    }
    if (short_n)
        fprintf(out,
                " %u missed, %u of them inconclusive (up to %ld tokens short "
                "of probe's own count, beyond its error, and no run of "
                "messages or field explains it: a loss on the path is not "
                "ruled out; the rest with prompt tokens intact);",
                n, short_n, most);
    else if (err > 0)
        fprintf(out,
                " %u missed or lost on the path, inconclusive (prompt tokens "
                "within %.0f%% of the calibrated count: without /tokenize a "
                "smaller loss on the path, such as a stripped field or a "
                "short turn dropped, is not ruled out; else the model did "
                "not recall);",
                n, 100 * err);
    else
        fprintf(out,
                " %u missed (prompt tokens intact; the model did not "
                "recall);",
                n);
}

/* The output-clipped cases of kind k (n of them): a reply that ended on
 * finish_reason length short of the max_tokens probe asked for was cut by
 * a lower max_tokens on the path or the server, which --max-tokens cannot
 * raise. */
static void explain_clipped(FILE *out, const struct probe_report_in *in,
                            const struct probe_result *res, int k, unsigned n)
{
    json_int_t asked =
        json_integer_value(json_object_get(in->config, "max_tokens"));
    json_t *eb = in->ep ? in->ep->extra_body : NULL;
    if (json_is_integer(json_object_get(eb, "max_tokens")))
        asked = json_integer_value(json_object_get(eb, "max_tokens"));
    unsigned lowered = 0;
    long most = 0;
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_result *r = &res[i];
        if ((int)in->specs[i].kind != k || !r->done ||
            r->outcome != PROBE_CLIPPED || r->completion_tokens <= 0 ||
            asked <= 0 || r->completion_tokens >= asked)
            continue;
        lowered += probe_weight(r);
        most = r->completion_tokens > most ? r->completion_tokens : most;
    }
    if (lowered)
        fprintf(out,
                " %u output-clipped (finish_reason length after at most %ld "
                "reply tokens while probe asked for max_tokens %lld: the "
                "path or the server lowered max_tokens; raising "
                "--max-tokens will not help);",
                n, most, (long long)asked);
    else
        fprintf(out,
                " %u output-clipped (finish_reason length; raise "
                "--max-tokens);",
                n);
}

/* Where recall breaks and why for kind k: the shortest failing length and
 * the classes beyond it ("fails from 8k on (12 failed): ...;"), or false
 * (nothing written) when every finished case of k passed. The terminal's
 * "where it breaks and why" lines and the JSON's "why" (the report's cause
 * lines) are both this text. */
static bool explain_kind(FILE *out, const struct probe_report_in *in,
                         const struct probe_result *res, int k)
{
    unsigned first = 0;
    struct tally t = {0};
    long max_kept = -1, min_kept = -1, sent = 0;
    const char *err = NULL;
    for (size_t i = 0; i < in->n; i++) {
        const struct probe_spec *s = &in->specs[i];
        const struct probe_result *r = &res[i];
        if ((int)s->kind != k || !r->done || r->outcome == PROBE_PASS)
            continue;
        if (!first || s->length < first)
            first = s->length;
        tally_add(&t, r);
        if (r->outcome == PROBE_TRUNCATED && r->prompt_tokens > max_kept) {
            max_kept = r->prompt_tokens;
            sent = r->expected;
        }
        if (r->outcome == PROBE_TRUNCATED &&
            (min_kept < 0 || r->prompt_tokens < min_kept))
            min_kept = r->prompt_tokens;
        if (r->outcome == PROBE_ERROR && !err)
            err = r->error;
    }
    if (!t.n)
        return false;
    char fl[16];
    fmt_len(first, fl, sizeof(fl));
    fprintf(out, "fails from %s on (%u failed):", fl, t.n);
    /* A token limit keeps about the same count whatever was sent; a
     * history window by turns keeps varying counts. */
    if (t.out[PROBE_TRUNCATED] && max_kept - min_kept <= max_kept / 20)
        fprintf(out,
                " %u truncated-by-server (the server kept %ld of "
                "%ld prompt tokens: it drops context silently "
                "past about %ld tokens);",
                t.out[PROBE_TRUNCATED], max_kept, sent, max_kept);
    else if (t.out[PROBE_TRUNCATED])
        fprintf(out,
                " %u truncated-by-server (the server kept between %ld "
                "and %ld prompt tokens, not a fixed limit: a history "
                "window by turns or messages drops the front; see the "
                "canary map);",
                t.out[PROBE_TRUNCATED], min_kept, max_kept);
    if (t.out[PROBE_DROPPED])
        explain_dropped(out, in, res, k);
    if (t.out[PROBE_MISSED])
        explain_missed(out, in, res, k, t.out[PROBE_MISSED]);
    if (t.out[PROBE_CLIPPED])
        explain_clipped(out, in, res, k, t.out[PROBE_CLIPPED]);
    if (t.out[PROBE_ERROR])
        fprintf(out, " %u server-error (%s);", t.out[PROBE_ERROR],
                err ? err : "?");
    if (t.no_ctx)
        fprintf(out, " %u %s said there was no earlier context;", t.no_ctx,
                plural(t.no_ctx, "reply", "replies"));
    return true;
}

/* explain_kind as a fresh string, NULL when every case of k passed. */
static char *explain_kind_str(const struct probe_report_in *in,
                              const struct probe_result *res, int k)
{
    char *s = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&s, &len);
    if (!f)
        return NULL;
    bool any = explain_kind(f, in, res, k);
    fclose(f);
    if (!any) {
        free(s);
        return NULL;
    }
    return s;
}

/* Where recall breaks and why: per kind, the shortest failing length and
 * the class that dominates beyond it. */
static void explain(FILE *out, const struct probe_report_in *in,
                    const struct probe_result *res, const char *who)
{
    bool any = false;
    for (int k = 0; k < PROBE_NKINDS; k++) {
        char *why = explain_kind_str(in, res, k);
        if (!why)
            continue;
        any = true;
        fprintf(out, "  %s: %s", probe_kind_name(k), why);
        free(why);
        char words[768];
        if (k == PROBE_REASONING &&
            probe_reasoning_words(in, res, words, sizeof(words)))
            fprintf(out, "\n    %s", words);
        fputc('\n', out);
    }
    if (!any)
        fprintf(out, "  %s: every finished case passed\n", who);
}

static void side_text(FILE *out, const struct probe_report_in *in,
                      const struct probe_result *res,
                      const struct probe_endpoint *e, const char *who)
{
    fprintf(out, "\n== %s %s (model %s, max_model_len %u, tokens by %s)\n", who,
            e->url, e->model ? e->model : "?", e->max_model_len,
            e->has_tokenize ? "/tokenize" : "calibration");
    double lo = 2, hi = 0;
    for (size_t i = 0; i < in->n; i++)
        if (res[i].done && res[i].expected) {
            double q = (double)res[i].expected / in->specs[i].target;
            lo = q < lo ? q : lo;
            hi = q > hi ? q : hi;
        }
    int side = res == in->res ? 0 : 1; /* the cases a kept result stands for */
    if (in->size_hi[side] > 0) {
        lo = fmin(lo, in->size_lo[side]);
        hi = fmax(hi, in->size_hi[side]);
    }
    if (hi > 0)
        fprintf(out,
                "sizing: achieved %.1f%% to %.1f%% of the target "
                "tokens\n",
                100 * lo, 100 * hi);
    size_t under = probe_sizing_under(in, res);
    if (under)
        fprintf(out,
                "error: sizing achieved under 50%% of the target in %zu "
                "cases: the lengths tested are not the lengths asked for "
                "(the path rewrites probe's sizing requests, or the server "
                "counts tokens another way); results by length do not "
                "mean what they say\n",
                under);
    size_t rewrote = 0, counted = 0;
    for (size_t i = 0; i < in->n; i++)
        if (res[i].done && res[i].path_tokens && res[i].expected) {
            counted += probe_weight(&res[i]);
            if (res[i].path_tokens < 0.9 * res[i].expected - res[i].shape.err)
                rewrote += probe_weight(&res[i]);
        }
    if (rewrote)
        fprintf(out,
                "note: the path's /tokenize counted %zu of the %zu cases "
                "that lost context under 90%% of probe's own count: it "
                "rewrites /tokenize requests as it rewrites chat requests\n",
                rewrote, counted);
    summary_table(out, in, res);
    for (int k = 0; k < PROBE_NKINDS; k++) {
        if (probe_kind_has_depth(k)) {
            for (int v = 0; v < PROBE_CV_COUNT; v++)
                heatmap(out, in, res, k, v);
        } else {
            heatmap(out, in, res, k, 0);
        }
    }
    fprintf(out, "\nlegend: cell = pass %%, letter = most common failure: "
                 "T truncated-by-server, D dropped-before-the-model, "
                 "M missed, C output-clipped, E server-error\n");
    fprintf(out, "\nwhere it breaks and why (%s):\n", who);
    explain(out, in, res, who);
}

void probe_report_text(const struct probe_report_in *in, FILE *out)
{
    side_text(out, in, in->res, in->ep, "endpoint");
    if (!in->base || !in->bres)
        return;
    side_text(out, in, in->bres, in->base, "baseline");
    struct pairs all = {0}, kind[PROBE_NKINDS] = {{0}};
    for (size_t i = 0; i < in->n; i++) {
        pair_add(&all, &in->res[i], &in->bres[i]);
        pair_add(&kind[in->specs[i].kind], &in->res[i], &in->bres[i]);
    }
    double adj[PROBE_NKINDS];
    kind_holm(kind, adj);
    fprintf(out, "\n== endpoint vs baseline (paired cases, McNemar exact; "
                 "kinds Holm-corrected)\n");
    fprintf(out, "%-14s %6s %9s %9s %6s %9s %9s\n", "kind", "both", "end-only",
            "base-only", "none", "p-value", "p-holm");
    for (int k = -1; k < PROBE_NKINDS; k++) {
        const struct pairs *p = k < 0 ? &all : &kind[k];
        if (k >= 0 && !has_pairs(p))
            continue;
        double pv = stats_mcnemar_exact(p->a_only, p->b_only);
        double ph = k < 0 ? pv : adj[k];
        char hb[16];
        snprintf(hb, sizeof(hb), "%.3g", ph);
        fprintf(out, "%-14s %6u %9u %9u %6u %9.3g %9s%s\n",
                k < 0 ? "all" : probe_kind_name(k), p->both, p->a_only,
                p->b_only, p->neither, pv, k < 0 ? "-" : hb,
                ph < 0.05 ? "  significant" : "");
    }
    double pv = stats_mcnemar_exact(all.a_only, all.b_only);
    fprintf(out, "%s (p = %.3g)\n",
            pv < 0.05 ? "the endpoint and the baseline differ"
                      : "no significant difference between endpoint and "
                        "baseline",
            pv);
}

/* ---- JUnit ---- */

static void xml_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t')
                fputc('?', f);
            else
                fputc(*s, f);
        }
    }
}

int probe_report_junit(const struct probe_report_in *in, const char *path,
                       struct diag *d)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
    if (!f)
        return diag_set(d, errno, "cannot open '%s': %s", path,
                        strerror(errno));
    unsigned fails = 0, total = 0;
    for (size_t i = 0; i < in->n; i++)
        if (in->res[i].done) {
            total += probe_weight(&in->res[i]);
            if (in->res[i].outcome != PROBE_PASS)
                fails += probe_weight(&in->res[i]);
        }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<testsuites name=\"fidelity probe\" tests=\"%u\" "
            "failures=\"%u\">\n",
            total, fails);
    for (int k = 0; k < PROBE_NKINDS; k++) {
        unsigned n = 0, nf = 0;
        for (size_t i = 0; i < in->n; i++)
            if ((int)in->specs[i].kind == k && in->res[i].done) {
                n += probe_weight(&in->res[i]);
                if (in->res[i].outcome != PROBE_PASS)
                    nf += probe_weight(&in->res[i]);
            }
        if (!n)
            continue;
        fprintf(f, "  <testsuite name=\"%s\" tests=\"%u\" failures=\"%u\">\n",
                probe_kind_name(k), n, nf);
        /* every case: the results, or one by one from in->result_at */
        bool each = in->spec_at && in->result_at;
        size_t all = each ? (in->cases ? in->cases : in->n) : in->n;
        for (size_t i = 0; i < all; i++) {
            struct probe_spec sp;
            struct probe_result one;
            const struct probe_spec *s = each ? &sp : &in->specs[i];
            const struct probe_result *r = each ? &one : &in->res[i];
            if (each) {
                in->spec_at(in->ud, i, &sp);
                if ((int)sp.kind != k || in->result_at(in->ud, i, 0, &one))
                    continue;
            }
            if ((int)s->kind != k || !r->done)
                continue;
            fprintf(f,
                    "    <testcase classname=\"probe.%s\" name=\"len=%u "
                    "depth=%d variant=%s temp=%g rep=%u\" time=\"%.3f\"",
                    probe_kind_name(k), s->length, s->depth,
                    probe_variant_name(k, s->variant), s->temperature, s->rep,
                    r->latency);
            if (r->outcome == PROBE_PASS) {
                fputs("/>\n", f);
                continue;
            }
            fprintf(f, ">\n      <failure type=\"%s\" message=\"",
                    probe_outcome_name(r->outcome));
            fprintf(f, "prompt_tokens %ld of %u expected; ", r->prompt_tokens,
                    r->expected);
            xml_escape(f, r->error[0] ? r->error : r->reply);
            fputs("\"/>\n    </testcase>\n", f);
        }
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    if (f != stdout && fclose(f))
        return diag_set(d, EIO, "cannot write '%s'", path);
    return 0;
}
