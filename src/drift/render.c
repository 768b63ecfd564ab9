/*
 * drift report: text and JSON renderings of a struct drift_result.
 * Numbers use fixed formats so the output is stable for golden tests.
 */
#include "drift/render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/plural.h"
#include "core/url.h"
#include "core/xalloc.h"

void drift_worst_texts_free(struct drift_worst_text *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(t[i].token);
        free(t[i].top1_g);
        free(t[i].top1_c);
        free(t[i].before);
        free(t[i].after);
    }
}

/* A token's text made printable on one line: escapes and a length cap. */
static void show_tok(struct buf *b, const char *s)
{
    if (!s) {
        buf_adds(b, "?");
        return;
    }
    buf_addch(b, '\'');
    for (size_t i = 0; s[i] && i < 24; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            buf_adds(b, "\\n");
        else if (c == '\'' || c == '\\')
            buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            buf_printf(b, "\\x%02x", c);
        else
            buf_addch(b, (char)c);
    }
    buf_addch(b, '\'');
}

static const char *arm_verdict(enum drift_verdict v)
{
    return drift_verdict_name(v);
}

static void stats_block(const struct drift_result *r, struct buf *b)
{
    struct drift_acc tot, ctl;
    struct drift_bsum s, t;
    drift_analysis_total(&r->an, DRIFT_ARM_CAND, &tot);
    drift_analysis_total(&r->an, DRIFT_ARM_CTRL, &ctl);
    drift_bucket_summary(&tot, &s);
    drift_bucket_summary(&ctl, &t);
    double n = tot.n ? (double)tot.n : NAN;
    buf_printf(b, "====== Perplexity statistics (teacher-forced) ======\n");
    buf_printf(b, "Positions compared            : %llu\n",
               (unsigned long long)tot.n);
    buf_printf(b, "Mean PPL(golden)              : %10.4f\n",
               exp(tot.nll_g / n));
    buf_printf(b, "Mean PPL(candidate)           : %10.4f\n",
               exp(tot.nll_c / n));
    buf_printf(b, "Mean ln(PPL(cand)/PPL(golden)): %+.6e\n", s.log_ppl_ratio);
    buf_printf(b, "\n====== KL divergence statistics (lower bound: golden "
                  "top-k + forced + tail) ======\n");
    buf_printf(b, "Mean    KLD: %.6e   (control %.6e)\n", s.kl_mean, t.kl_mean);
    buf_printf(b, "Maximum KLD: %.6e\n", s.kl_max);
    buf_printf(b, "99.9%%   KLD: %.6e\n", s.kl_p999);
    buf_printf(b, "99.0%%   KLD: %.6e\n", s.kl_p99);
    buf_printf(b, "Median  KLD: %.6e\n", s.kl_p50);
    buf_printf(b, "\n====== Token probability statistics ======\n");
    buf_printf(b, "Mean    dp : %+.5f%%\n", 100 * s.dp_mean);
    buf_printf(b, "RMS     dp : %.5f%%\n", 100 * s.dp_rms);
    buf_printf(b, "Same top p : %.4f%%   decisive flips: %llu\n", 100 * s.top1,
               (unsigned long long)s.flips);
    buf_printf(b, "Top-k overlap: %.4f%%\n\n", 100 * s.overlap);
}

static void bucket_table(const struct drift_result *r, struct buf *b)
{
    const struct drift_analysis *a = &r->an;
    buf_printf(b,
               "%-13s %7s %10s %10s %10s %10s %10s %10s %9s %8s %6s %8s "
               "%s\n",
               "positions", "count", "KL mean", "KL p50", "KL p99", "KL p99.9",
               "KL max", "lnPPL", "dp rms%", "top1%", "flips", "overlap",
               "verdict (on excess)");
    for (size_t k = 0; k < a->n_buckets; k++) {
        struct drift_bsum s;
        drift_bucket_summary(&a->acc[DRIFT_ARM_CAND][k], &s);
        const struct drift_bsum *x = &r->excess[k];
        char range[32];
        snprintf(range, sizeof(range), "[%u,%u)", a->edges[k], a->edges[k + 1]);
        if (s.n == 0) {
            buf_printf(b, "%-13s %7d %10s\n", range, 0, "-");
            continue;
        }
        buf_printf(b,
                   "%-13s %7llu %10.3e %10.3e %10.3e %10.3e %10.3e "
                   "%+10.3e %9.4f %8.3f %6llu %8.4f %s (excess KL %.2e)\n",
                   range, (unsigned long long)s.n, s.kl_mean, s.kl_p50,
                   s.kl_p99, s.kl_p999, s.kl_max, s.log_ppl_ratio,
                   100 * s.dp_rms, 100 * s.top1, (unsigned long long)s.flips,
                   s.overlap, arm_verdict(r->bucket_verdict[k]), x->kl_mean);
    }
}

static void growth_block(const struct drift_result *r, struct buf *b)
{
    const struct drift_growth *g = &r->growth;
    buf_printf(b,
               "\ngrowth: slope of ln(excess KL) on ln(position) from "
               "position %u ",
               g->from);
    if (isnan(g->slope))
        buf_printf(b, "n/a (%s)",
                   g->points < 2 ? "fewer than 2 buckets past the first "
                                   "quarter"
                                 : "no excess KL above the floor");
    else if (isnan(g->lo))
        buf_printf(b, "%+.3f, no interval (one sequence; %u buckets)", g->slope,
                   g->points);
    else
        buf_printf(b,
                   "%+.3f, 95%% interval [%+.3f, %+.3f] (%u buckets, %u "
                   "replicate%s over whole sequences)",
                   g->slope, g->lo, g->hi, g->points, g->replicates,
                   plural_s(g->replicates));
    buf_printf(b, " -> %s\n", arm_verdict(g->verdict));
    buf_printf(b, "growth: shape %s", drift_shape_name(g->shape));
    if (g->shape == DRIFT_SHAPE_CONSTANT)
        buf_printf(b,
                   " (excess KL up to %.3e past position %u; its level is "
                   "judged by the KL thresholds)",
                   g->peak, g->from);
    else if (g->shape == DRIFT_SHAPE_GROWING)
        buf_printf(b, " (excess KL up to %.3e)", g->peak);
    buf_printf(b, "; last/first bucket excess KL ratio ");
    if (isnan(g->ratio))
        buf_printf(b, "n/a\n");
    else
        buf_printf(b, "%.3f (%.3e / %.3e)\n", g->ratio, g->last, g->first);
    if (!isnan(g->cross[0]))
        buf_printf(b,
                   "growth: the excess (%.3e at position %u) has not reached "
                   "WARN; at slope %+.3f it would cross WARN %.3g at position "
                   "%.0f and FAIL %.3g at %.0f; context %llu (%s)\n",
                   g->peak, g->peak_pos, g->slope, r->an.th.kl_mean[0],
                   g->cross[0], r->an.th.kl_mean[1], g->cross[1],
                   (unsigned long long)g->context, r->context_source);
    if (g->why)
        buf_printf(b, "growth: %s: %s\n", drift_verdict_name(g->verdict),
                   g->why);
}

static void skips(const struct drift_result *r, struct buf *b)
{
    static const char *const arm[] = {"candidate", "control", "self"};
    static const char *const why[] = {"invalid (NaN, >0 or missing)",
                                      "not returned (short answer)",
                                      "echoed a different token"};
    for (int a = 0; a < DRIFT_ARMS; a++)
        for (int k = 0; k < DRIFT_SKIPS; k++)
            if (r->an.skipped[a][k])
                buf_printf(b, "skipped: %s arm, %llu position%s %s\n", arm[a],
                           (unsigned long long)r->an.skipped[a][k],
                           plural_s(r->an.skipped[a][k]), why[k]);
}

static void decode_block(const struct drift_result *r, struct buf *b)
{
    static const char *const nm[] = {"prefill vs prefill (golden, cand)",
                                     "decode vs prefill (candidate)",
                                     "decode (cand) vs prefill (golden)"};
    const struct drift_decode *dc = &r->dec;
    if (!dc->ran)
        return;
    buf_printf(b,
               "\n====== Decode path (%u sequence%s, %u generated token%s) "
               "======\n",
               dc->seqs, plural_s(dc->seqs), dc->generated,
               plural_s(dc->generated));
    if (dc->saved)
        buf_printf(b,
                   "against the saved golden: both sides score the golden's "
                   "own output (%u token%s); the candidate's decode steps are "
                   "compared while its output is the golden's (%u of them) "
                   "and where it parts, with the golden's token (%u)\n",
                   dc->golden_steps, plural_s(dc->golden_steps),
                   dc->shared_steps, dc->parted_steps);
    for (int k = 0; k < DRIFT_DPATHS; k++) {
        const struct drift_bsum *s = &dc->sum[k];
        if (dc->verdict[k] == DRIFT_NA) {
            buf_printf(b, "%-36s: n/a\n", nm[k]);
            continue;
        }
        buf_printf(b,
                   "%-36s: KL mean %.3e  max %.3e  top1 %.3f%%  dp rms "
                   "%.4f%%  %s (excess KL %.2e)\n",
                   nm[k], s->kl_mean, s->kl_max, 100 * s->top1, 100 * s->dp_rms,
                   arm_verdict(dc->verdict[k]), dc->excess[k].kl_mean);
    }
    for (unsigned i = 0; i < dc->n_points; i++) {
        const struct drift_dpoint *p = &dc->point[i];
        buf_printf(b,
                   "at prompt %-6u (%s%u sequence%s, %u step%s): PP %s "
                   "%.2e, DG %s %.2e",
                   p->prompt, p->diverged ? "where prefill diverged, " : "",
                   p->seqs, plural_s(p->seqs), p->generated,
                   plural_s(p->generated), arm_verdict(p->verdict[DRIFT_DP_PP]),
                   p->excess[DRIFT_DP_PP].kl_mean,
                   arm_verdict(p->verdict[DRIFT_DP_DG]),
                   p->excess[DRIFT_DP_DG].kl_mean);
        if (p->gap_measured)
            buf_printf(b, ", decode-vs-prefill gap %.2e (golden's %.2e)%s",
                       p->gap_cand, p->gap_golden,
                       p->gap_differs ? " DIFFERS" : "");
        buf_addch(b, '\n');
    }
}

/* Attribution: always with what could and could not be attributed when
 * something differs or the run fails. */
static void attr_block(const struct drift_result *r, struct buf *b)
{
    const struct drift_decode *dc = &r->dec;
    bool say = dc->attribution != DRIFT_ATTR_NONE || r->verdict == DRIFT_FAIL;
    if (!dc->ran && !say)
        return;
    buf_printf(b, "%sattribution: %s\n", dc->ran ? "" : "\n",
               drift_attr_name(dc->attribution));
    if (!say)
        return;
    buf_printf(b, "attributed: %s\n",
               dc->attributed[0] ? dc->attributed : "nothing");
    buf_printf(b, "not attributed: %s\n",
               dc->not_attributed[0] ? dc->not_attributed : "nothing");
}

static void harm_block(const struct drift_result *r, struct buf *b)
{
    const struct drift_harm *h = &r->harm;
    buf_printf(b, "\nharm: excess KL mean %.3e", h->excess_kl_mean);
    if (!isnan(h->lo))
        buf_printf(b, ", 95%% interval [%.3e, %.3e]", h->lo, h->hi);
    buf_printf(b, " over %llu position%s (", (unsigned long long)h->positions,
               plural_s(h->positions));
    for (int k = 0, first = 1; k < DRIFT_HARM_ARMS; k++)
        if (h->arm_positions[k]) {
            buf_printf(b, "%s%s %llu", first ? "" : ", ",
                       drift_harm_arm_name(k),
                       (unsigned long long)h->arm_positions[k]);
            first = 0;
        }
    buf_printf(b, "); decisive flips per 1,000: %.3f\n", h->flips_per_1k);
}

static void det_block(const struct drift_result *r, struct buf *b)
{
    static const char *const side[] = {"golden", "candidate"};
    if (!r->det.ran)
        return;
    buf_printf(b, "\n====== Determinism (temperature 0; apart from drift) "
                  "======\n");
    for (int k = 0; k < 2; k++) {
        const struct drift_det_side *s = &r->det.side[k];
        if (!s->ran)
            continue;
        for (int ph = 0; ph < 2; ph++) {
            buf_printf(b, "%-9s %-10s: %u request%s, %u distinct output%s",
                       side[k], ph ? "under load" : "alone", s->n,
                       plural_s(s->n), s->distinct[ph],
                       plural_s(s->distinct[ph]));
            if (s->first_diff[ph] >= 0)
                buf_printf(b, ", first differing token %ld", s->first_diff[ph]);
            if (s->prompt_checked)
                buf_printf(b, ", prompt logprobs %s",
                           s->prompt_identical[ph] ? "bit-identical"
                                                   : "differ");
            buf_printf(b, "\n");
        }
        bool nd = s->distinct[0] > 1 ||
                  (s->prompt_checked && !s->prompt_identical[0]);
        bool bv = !nd && (s->distinct[1] > 1 ||
                          (s->prompt_checked && !s->prompt_identical[1]));
        buf_printf(b, "%-9s verdict   : %s\n", side[k],
                   nd   ? "NONDETERMINISTIC (differs with no other load)"
                   : bv ? "BATCH-VARIANT (differs only under load)"
                        : "deterministic");
        if (s->failed)
            buf_printf(b, "%-9s failures  : %u request%s failed\n", side[k],
                       s->failed, plural_s(s->failed));
    }
}

void drift_report_text(const struct drift_result *r, const struct drift_side *g,
                       const struct drift_side *c, const struct drift_worst *w,
                       const struct drift_worst_text *wt, size_t nw,
                       struct buf *b)
{
    char *gu = url_mask(g->url ? g->url : "");
    char *cu = url_mask(c->url ? c->url : "");
    buf_printf(b, "golden   : %s (%s dialect)\n", gu,
               drift_dialect_name(g->dialect));
    buf_printf(b, "candidate: %s (%s dialect)\n", cu,
               drift_dialect_name(c->dialect));
    free(gu);
    free(cu);
    buf_printf(b, "corpus   : %u sequence%s, %llu position%s\n", r->sequences,
               plural_s(r->sequences), (unsigned long long)r->positions,
               plural_s(r->positions));
    if (!r->prefill)
        buf_printf(b, "note     : %s\n", r->fallback_why);
    buf_printf(b, "\n");
    if (r->prefill) {
        stats_block(r, b);
        bucket_table(r, b);
        growth_block(r, b);
        skips(r, b);
    }
    decode_block(r, b);
    attr_block(r, b);
    harm_block(r, b);
    det_block(r, b);
    if (nw) {
        buf_printf(b, "\n%zu worst position%s (candidate KL):\n", nw,
                   plural_s(nw));
        buf_printf(b, "%4s %8s %8s %11s %10s  %s\n", "seq", "pos", "offset",
                   "KL", "dlogp", "token -> golden top1 / candidate top1");
    }
    for (size_t i = 0; i < nw; i++) {
        buf_printf(b, "%4u %8u %8ld %11.4e %+10.4f  ", w[i].seq, w[i].pos,
                   wt ? wt[i].offset : -1L, w[i].kl, w[i].dlp);
        show_tok(b, wt ? wt[i].token : NULL);
        buf_adds(b, " -> ");
        show_tok(b, wt ? wt[i].top1_g : NULL);
        buf_adds(b, " / ");
        show_tok(b, wt ? wt[i].top1_c : NULL);
        buf_addch(b, '\n');
    }
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

void drift_undecided_text(const struct drift_undecided *u, const char *unit,
                          struct buf *b)
{
    char about[48];
    drift_about(u->more, about, sizeof(about));
    buf_printf(b, "%s more %s would decide (%s %.2g ± %.2g against %s %.3g)",
               about, unit, u->metric, u->point, u->se,
               drift_verdict_name(u->level), u->threshold);
}

static json_t *undecided_json(const struct drift_undecided *u, const char *unit)
{
    struct buf t = BUF_INIT;
    drift_undecided_text(u, unit, &t);
    json_t *o = json_pack(
        "{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:s,s:s}", "level",
        drift_verdict_name(u->level), "metric", u->metric, "point",
        real_or_null(u->point), "se", real_or_null(u->se), "threshold",
        real_or_null(u->threshold), "measured", real_or_null(u->n), "more",
        real_or_null(u->more), "unit", unit, "text", buf_str(&t));
    buf_release(&t);
    return o;
}

static json_t *bsum_json(const struct drift_bsum *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "count", json_integer((json_int_t)s->n));
    json_object_set_new(o, "kl_mean", real_or_null(s->kl_mean));
    json_object_set_new(o, "kl_p50", real_or_null(s->kl_p50));
    json_object_set_new(o, "kl_p99", real_or_null(s->kl_p99));
    json_object_set_new(o, "kl_p999", real_or_null(s->kl_p999));
    json_object_set_new(o, "kl_max", real_or_null(s->kl_max));
    json_object_set_new(o, "log_ppl_ratio", real_or_null(s->log_ppl_ratio));
    json_object_set_new(o, "dp_mean", real_or_null(s->dp_mean));
    json_object_set_new(o, "dp_rms", real_or_null(s->dp_rms));
    json_object_set_new(o, "top1_agreement", real_or_null(s->top1));
    json_object_set_new(o, "decisive_flips",
                        json_integer((json_int_t)s->flips));
    json_object_set_new(o, "topk_overlap", real_or_null(s->overlap));
    return o;
}

static json_t *side_json(const struct drift_side *s)
{
    json_t *o = json_object();
    char *url = url_mask(s->url ? s->url : "");
    json_object_set_new(o, "url", json_string(url));
    free(url);
    json_object_set_new(o, "dialect",
                        json_string(drift_dialect_name(s->dialect)));
    if (s->model)
        json_object_set_new(o, "model", json_string(s->model));
    json_object_set_new(o, "fingerprint",
                        s->fingerprint ? json_incref(s->fingerprint)
                                       : json_null());
    return o;
}

static json_t *pair_json(const double v[2])
{
    return json_pack("[o, o]", real_or_null(v[0]), real_or_null(v[1]));
}

/* A bucket's whole-sequence bootstrap intervals (growth.c). */
static json_t *ci_json(const double ci[3][2])
{
    json_t *o = json_object();
    json_object_set_new(o, "excess_kl_mean", pair_json(ci[DRIFT_CI_KL]));
    json_object_set_new(o, "dp_rms", pair_json(ci[DRIFT_CI_DP]));
    json_object_set_new(o, "top1_agreement", pair_json(ci[DRIFT_CI_TOP1]));
    return o;
}

static json_t *thresholds_json(const struct drift_thresholds *t)
{
    json_t *o = json_object();
    json_object_set_new(o, "kl_mean", pair_json(t->kl_mean));
    json_object_set_new(o, "kl_p999", pair_json(t->kl_p999));
    json_object_set_new(o, "top1", pair_json(t->top1));
    json_object_set_new(o, "dp_rms", pair_json(t->dp_rms));
    json_object_set_new(o, "growth", pair_json(t->growth));
    json_object_set_new(o, "growth_floor", real_or_null(t->growth_floor));
    json_object_set_new(o, "flip_margin", real_or_null(t->flip_margin));
    return o;
}

static json_t *buckets_json(const struct drift_result *r)
{
    const struct drift_analysis *a = &r->an;
    json_t *arr = json_array();
    static const char *const arm[] = {"candidate", "control", "self"};
    for (size_t k = 0; k < a->n_buckets; k++) {
        json_t *o = json_object();
        json_object_set_new(o, "from", json_integer(a->edges[k]));
        json_object_set_new(o, "to", json_integer(a->edges[k + 1]));
        for (int m = 0; m < DRIFT_ARMS; m++) {
            struct drift_bsum s;
            drift_bucket_summary(&a->acc[m][k], &s);
            if (m == DRIFT_ARM_CAND ||
                (m == DRIFT_ARM_CTRL && r->has_control) ||
                (m == DRIFT_ARM_SELF && r->has_self))
                json_object_set_new(o, arm[m], bsum_json(&s));
        }
        json_object_set_new(o, "excess", bsum_json(&r->excess[k]));
        json_object_set_new(o, "ci95", ci_json(r->growth.ci[k]));
        json_object_set_new(
            o, "verdict",
            json_string(drift_verdict_name(r->bucket_verdict[k])));
        if (r->bucket_undecided[k].level != DRIFT_NA)
            json_object_set_new(
                o, "undecided",
                undecided_json(&r->bucket_undecided[k], "positions"));
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *growth_json(const struct drift_growth *g, const char *src)
{
    json_t *o = json_object();
    json_object_set_new(o, "slope", real_or_null(g->slope));
    json_object_set_new(o, "slope_lo", real_or_null(g->lo));
    json_object_set_new(o, "slope_hi", real_or_null(g->hi));
    json_object_set_new(o, "ratio", real_or_null(g->ratio));
    json_object_set_new(o, "first_excess_kl", real_or_null(g->first));
    json_object_set_new(o, "last_excess_kl", real_or_null(g->last));
    json_object_set_new(o, "buckets", json_integer(g->points));
    json_object_set_new(o, "replicates", json_integer(g->replicates));
    json_object_set_new(o, "from_position", json_integer(g->from));
    json_object_set_new(o, "peak_excess_kl", real_or_null(g->peak));
    json_object_set_new(o, "shape", json_string(drift_shape_name(g->shape)));
    json_object_set_new(o, "significant", json_boolean(g->significant));
    json_object_set_new(o, "reaches_warn", json_boolean(g->sized));
    json_object_set_new(o, "peak_position", json_integer(g->peak_pos));
    json_object_set_new(o, "crossing",
                        json_pack("{s:o,s:o}", "warn",
                                  real_or_null(g->cross[0]), "fail",
                                  real_or_null(g->cross[1])));
    json_object_set_new(o, "context", json_integer((json_int_t)g->context));
    json_object_set_new(o, "context_source", json_string(src));
    if (g->why)
        json_object_set_new(o, "why", json_string(g->why));
    if (g->seqs_to_decide > 0)
        json_object_set_new(o, "sequences_to_decide",
                            json_real(g->seqs_to_decide));
    json_object_set_new(o, "verdict",
                        json_string(drift_verdict_name(g->verdict)));
    return o;
}

static json_t *decode_json(const struct drift_decode *dc)
{
    static const char *const nm[] = {"prefill_vs_prefill", "decode_vs_prefill",
                                     "decode_vs_golden_prefill"};
    json_t *o = json_object();
    json_object_set_new(o, "sequences", json_integer(dc->seqs));
    json_object_set_new(o, "generated", json_integer(dc->generated));
    /* the flush endpoint each side was emptied through before each
     * generation (null: none, the side decoded from whatever it cached) */
    json_object_set_new(
        o, "flushed",
        json_pack("{s:o,s:o}", "golden",
                  dc->flush_golden ? json_string(dc->flush_golden)
                                   : json_null(),
                  "candidate",
                  dc->flush_cand ? json_string(dc->flush_cand) : json_null()));
    /* against a saved golden: the golden's output was scored, and the
     * candidate's decode steps compared while its output was the same */
    if (dc->saved)
        json_object_set_new(o, "saved_golden",
                            json_pack("{s:s,s:i,s:i,s:i}", "scored",
                                      "golden output", "golden_steps",
                                      (int)dc->golden_steps, "shared_steps",
                                      (int)dc->shared_steps, "parted_steps",
                                      (int)dc->parted_steps));
    for (int k = 0; k < DRIFT_DPATHS; k++) {
        json_t *s = bsum_json(&dc->sum[k]);
        json_object_set_new(s, "excess", bsum_json(&dc->excess[k]));
        json_object_set_new(s, "verdict",
                            json_string(drift_verdict_name(dc->verdict[k])));
        json_object_set_new(o, nm[k], s);
    }
    json_t *pts = json_array();
    for (unsigned i = 0; i < dc->n_points; i++) {
        const struct drift_dpoint *p = &dc->point[i];
        json_t *x = json_object();
        json_object_set_new(x, "prompt", json_integer(p->prompt));
        json_object_set_new(x, "diverged", json_boolean(p->diverged));
        json_object_set_new(x, "sequences", json_integer(p->seqs));
        json_object_set_new(x, "generated", json_integer(p->generated));
        for (int k = 0; k < DRIFT_DPATHS; k++) {
            json_t *s = bsum_json(&p->sum[k]);
            json_object_set_new(s, "excess", bsum_json(&p->excess[k]));
            json_object_set_new(s, "verdict",
                                json_string(drift_verdict_name(p->verdict[k])));
            json_object_set_new(x, nm[k], s);
        }
        if (p->gap_measured)
            json_object_set_new(x, "gap",
                                json_pack("{s:o,s:o,s:o,s:b}", "candidate",
                                          real_or_null(p->gap_cand), "golden",
                                          real_or_null(p->gap_golden), "se",
                                          real_or_null(p->gap_se), "differs",
                                          p->gap_differs));
        json_array_append_new(pts, x);
    }
    json_object_set_new(o, "points", pts);
    json_object_set_new(o, "attribution",
                        json_string(drift_attr_name(dc->attribution)));
    return o;
}

json_t *drift_harm_json(const struct drift_harm *h)
{
    json_t *arms = json_array(), *counts = json_object();
    for (int k = 0; k < DRIFT_HARM_ARMS; k++)
        if (h->arm_positions[k]) {
            json_array_append_new(arms, json_string(drift_harm_arm_name(k)));
            json_object_set_new(counts, drift_harm_arm_name(k),
                                json_integer((json_int_t)h->arm_positions[k]));
        }
    json_t *o = json_pack(
        "{s:o,s:o,s:o,s:o,s:I,s:i,s:o,s:o}", "excess_kl_mean",
        real_or_null(h->excess_kl_mean), "lo", real_or_null(h->lo), "hi",
        real_or_null(h->hi), "flips_per_1k", real_or_null(h->flips_per_1k),
        "positions", (json_int_t)h->positions, "replicates", (int)h->replicates,
        "arms", arms, "arm_positions", counts);
    if (h->arm_positions[DRIFT_HARM_CACHE_WARM])
        json_object_set_new(o, "warm_baseline",
                            json_string(h->warm_golden ? "golden warm vs cold"
                                                       : "cold vs cold"));
    return o;
}

static json_t *det_json(const struct drift_det_side *s)
{
    json_t *o = json_object();
    static const char *const ph[] = {"alone", "under_load"};
    json_object_set_new(o, "requests", json_integer(s->n));
    json_object_set_new(o, "failed", json_integer(s->failed));
    for (int k = 0; k < 2; k++) {
        json_t *p = json_object();
        json_object_set_new(p, "distinct_outputs",
                            json_integer(s->distinct[k]));
        json_object_set_new(p, "first_differing_token",
                            s->first_diff[k] >= 0
                                ? json_integer(s->first_diff[k])
                                : json_null());
        json_object_set_new(p, "prompt_logprobs_identical",
                            s->prompt_checked
                                ? json_boolean(s->prompt_identical[k])
                                : json_null());
        json_object_set_new(o, ph[k], p);
    }
    bool nd =
        s->distinct[0] > 1 || (s->prompt_checked && !s->prompt_identical[0]);
    bool bv = !nd && (s->distinct[1] > 1 ||
                      (s->prompt_checked && !s->prompt_identical[1]));
    json_object_set_new(o, "verdict",
                        json_string(nd   ? "nondeterministic"
                                    : bv ? "batch-variant"
                                         : "deterministic"));
    return o;
}

static json_t *skips_json(const struct drift_result *r)
{
    static const char *const arm[] = {"candidate", "control", "self"};
    static const char *const why[] = {"invalid", "short", "token_mismatch"};
    json_t *o = json_object();
    for (int a = 0; a < DRIFT_ARMS; a++) {
        json_t *x = json_object();
        for (int k = 0; k < DRIFT_SKIPS; k++)
            json_object_set_new(x, why[k],
                                json_integer((json_int_t)r->an.skipped[a][k]));
        json_object_set_new(o, arm[a], x);
    }
    return o;
}

json_t *drift_report_json(const struct drift_result *r,
                          const struct drift_side *g,
                          const struct drift_side *c,
                          const struct drift_worst *w,
                          const struct drift_worst_text *wt, size_t nw)
{
    json_t *o = json_object();
    json_object_set_new(o, "schema", json_string("fidelity.drift/1"));
    json_object_set_new(o, "golden", side_json(g));
    json_object_set_new(o, "candidate", side_json(c));
    json_object_set_new(o, "sequences", json_integer(r->sequences));
    json_object_set_new(o, "positions", json_integer((json_int_t)r->positions));
    json_object_set_new(o, "prefill", json_boolean(r->prefill));
    if (!r->prefill)
        json_object_set_new(o, "fallback", json_string(r->fallback_why));
    json_object_set_new(o, "control", json_boolean(r->has_control));
    json_object_set_new(o, "self", json_boolean(r->has_self));
    if (r->prefill) {
        struct drift_acc tot;
        struct drift_bsum s;
        drift_analysis_total(&r->an, DRIFT_ARM_CAND, &tot);
        drift_bucket_summary(&tot, &s);
        json_object_set_new(o, "total", bsum_json(&s));
        drift_analysis_total(&r->an, DRIFT_ARM_CTRL, &tot);
        drift_bucket_summary(&tot, &s);
        json_object_set_new(o, "control_total", bsum_json(&s));
        json_object_set_new(o, "thresholds", thresholds_json(&r->an.th));
        json_object_set_new(o, "buckets", buckets_json(r));
        json_object_set_new(o, "growth",
                            growth_json(&r->growth, r->context_source));
        json_object_set_new(o, "skipped", skips_json(r));
    }
    if (r->dec.ran)
        json_object_set_new(o, "decode", decode_json(&r->dec));
    json_object_set_new(o, "attribution",
                        json_pack("{s:s,s:s,s:s,s:s}", "kind",
                                  drift_attr_kind(r->dec.attribution), "words",
                                  drift_attr_name(r->dec.attribution),
                                  "attributed", r->dec.attributed,
                                  "not_attributed", r->dec.not_attributed));
    json_object_set_new(o, "harm", drift_harm_json(&r->harm));
    if (r->det.ran) {
        json_t *d = json_object();
        json_object_set_new(d, "golden", det_json(&r->det.side[0]));
        json_object_set_new(d, "candidate", det_json(&r->det.side[1]));
        json_object_set_new(o, "determinism", d);
    }
    json_t *wa = json_array();
    for (size_t i = 0; i < nw; i++) {
        json_t *x = json_object();
        json_object_set_new(x, "seq", json_integer(w[i].seq));
        json_object_set_new(x, "pos", json_integer(w[i].pos));
        json_object_set_new(x, "token", json_integer((json_int_t)w[i].forced));
        json_object_set_new(x, "kl", real_or_null(w[i].kl));
        json_object_set_new(x, "dlogp", real_or_null(w[i].dlp));
        json_object_set_new(x, "dp", real_or_null(w[i].dp));
        if (wt) {
            json_object_set_new(x, "offset", json_integer(wt[i].offset));
            if (wt[i].token)
                json_object_set_new(x, "text", json_string(wt[i].token));
            if (wt[i].top1_g)
                json_object_set_new(x, "golden_top1",
                                    json_string(wt[i].top1_g));
            if (wt[i].top1_c)
                json_object_set_new(x, "candidate_top1",
                                    json_string(wt[i].top1_c));
            if (wt[i].before)
                json_object_set_new(x, "context_before",
                                    json_string(wt[i].before));
            if (wt[i].after)
                json_object_set_new(x, "context_after",
                                    json_string(wt[i].after));
        }
        json_array_append_new(wa, x);
    }
    json_object_set_new(o, "worst", wa);
    json_object_set_new(o, "verdict",
                        json_string(drift_verdict_name(r->verdict)));
    return o;
}

void drift_report_rec(const struct drift_rec *rec, struct buf *out)
{
    const struct drift_pm *m = rec->m;
    buf_printf(out,
               "{\"arm\":\"%s\",\"seq\":%u,\"pos\":%u,\"token\":%llu,"
               "\"kl\":%.9g,\"dlogp\":%.9g,\"dp\":%.9g,\"lp_golden\":%.9g,"
               "\"lp_candidate\":%.9g,\"top1_agree\":%s,\"decisive_flip\":%s,"
               "\"overlap\":%.6g}",
               rec->arm, rec->seq, rec->pos, (unsigned long long)rec->token,
               m->kl, m->dlp, m->dp, m->lp_g, m->lp_c,
               m->top1_agree ? "true" : "false",
               m->decisive_flip ? "true" : "false", m->overlap);
}

/* ---- the overall verdict and what it could not decide ---- */

struct open_item {
    char where[64];
    const struct drift_undecided *u; /* NULL: text only */
    const char *unit;
    char text[768];
};

/* Whether an undecided figure matters beside the overall verdict at:
 * its level is above it (NULL: a text-only item, always). */
static bool counts(const struct drift_undecided *u, enum drift_verdict at)
{
    return !u || u->level > at;
}

/* Every undecided comparison of the run, at most cap. */
static size_t open_items(const struct drift_result *r,
                         const struct drift_cache_result *cr,
                         struct open_item *it, size_t cap)
{
    static const char *const dp[] = {"decode PP", "decode DP", "decode DG"};
    size_t n = 0;
    struct buf t = BUF_INIT;
    /* what is undecided below the overall verdict changes nothing */
    enum drift_verdict at =
        r->verdict == DRIFT_INCONCLUSIVE ? DRIFT_PASS : r->verdict;
#define ADD(w, und, un, txt)                                                   \
    do {                                                                       \
        if (n < cap && counts(und, at)) {                                      \
            snprintf(it[n].where, sizeof(it[n].where), "%s", w);               \
            it[n].u = und;                                                     \
            it[n].unit = un;                                                   \
            snprintf(it[n].text, sizeof(it[n].text), "%s", txt);               \
            n++;                                                               \
        }                                                                      \
    } while (0)
    for (size_t b = 0; r->prefill && b < r->an.n_buckets; b++) {
        const struct drift_undecided *u = &r->bucket_undecided[b];
        if (u->level == DRIFT_NA)
            continue;
        char w[64];
        snprintf(w, sizeof(w), "positions [%u,%u)", r->an.edges[b],
                 r->an.edges[b + 1]);
        buf_reset(&t);
        drift_undecided_text(u, "positions", &t);
        ADD(w, u, "positions", buf_str(&t));
    }
    const struct drift_growth *g = &r->growth;
    if (r->prefill && g->verdict == DRIFT_INCONCLUSIVE) {
        buf_reset(&t);
        buf_adds(&t, g->why ? g->why : "undecided");
        if (g->seqs_to_decide > 0) {
            char about[48];
            drift_about(g->seqs_to_decide, about, sizeof(about));
            buf_printf(&t,
                       "; a run of %s sequences would decide (slope %+.3f, "
                       "95%% interval [%+.3f, %+.3f])",
                       about, g->slope, g->lo, g->hi);
        } else if (isnan(g->lo) && !isnan(g->slope)) {
            buf_printf(&t,
                       "; two sequences or more would decide (slope "
                       "%+.3f)",
                       g->slope);
        } else if (!isnan(g->cross[0])) {
            buf_printf(&t,
                       "; measuring up to position %.0f (--max-context) would "
                       "decide (at slope %+.3f the excess %.2e at position %u "
                       "crosses WARN %.3g there; the context is %llu)",
                       g->cross[0], g->slope, g->peak, g->peak_pos,
                       r->an.th.kl_mean[0], (unsigned long long)g->context);
        }
        ADD("growth", NULL, "sequences", buf_str(&t));
    }
    for (int k = 0; r->dec.ran && k < DRIFT_DPATHS; k++) {
        const struct drift_undecided *u = &r->dec.undecided[k];
        if (k == DRIFT_DP_DP || u->level == DRIFT_NA)
            continue;
        buf_reset(&t);
        drift_undecided_text(u, "generated positions", &t);
        ADD(dp[k], u, "generated positions", buf_str(&t));
    }
    if (cr && cr->asked &&
        (cr->verdict == DRIFT_INCONCLUSIVE ||
         (cr->undecided.level == DRIFT_FAIL && cr->more_convs > 0))) {
        buf_reset(&t);
        drift_cache_undecided_text(cr, &t);
        ADD("cache arm", cr->ran ? &cr->undecided : NULL, "conversations",
            buf_str(&t));
    }
#undef ADD
    buf_release(&t);
    return n;
}

void drift_report_verdict(const struct drift_result *r,
                          const struct drift_cache_result *cr, struct buf *b)
{
    struct open_item it[DRIFT_BUCKETS_MAX + 8];
    size_t n = open_items(r, cr, it, sizeof(it) / sizeof(it[0]));
    buf_printf(b, "\nverdict: %s\n", drift_verdict_name(r->verdict));
    for (size_t i = 0; i < n; i++) {
        const char *lvl = it[i].u && it[i].u->level == DRIFT_FAIL
                              ? "FAIL undecided"
                              : "undecided";
        buf_printf(b, "  %s: %s: %s\n", lvl, it[i].where, it[i].text);
    }
}

json_t *drift_report_undecided_json(const struct drift_result *r,
                                    const struct drift_cache_result *cr)
{
    struct open_item it[DRIFT_BUCKETS_MAX + 8];
    size_t n = open_items(r, cr, it, sizeof(it) / sizeof(it[0]));
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *o = it[i].u ? undecided_json(it[i].u, it[i].unit)
                            : json_pack("{s:s,s:s}", "level", "WARN", "unit",
                                        it[i].unit);
        json_object_set_new(o, "where", json_string(it[i].where));
        json_object_set_new(o, "text", json_string(it[i].text));
        json_array_append_new(a, o);
    }
    return a;
}
