/*
 * rdrift: the drift section of the report, from a fidelity.drift/1
 * summary (docs/DRIFT.md). Three figures against position on a log axis,
 * one per metric (mean KL, RMS delta-p, top-1 agreement): the candidate's
 * prefill values per bucket and their excess over the noise baseline, with
 * the per-bucket whole-sequence bootstrap intervals when the summary holds
 * them ("ci95"), the WARN and FAIL thresholds the verdicts apply to the
 * excess, and the decode path on the same axes (drift keeps it as one
 * value over all generated positions, drawn as a level line). Then the
 * per-bucket verdict table, growth, and the worst positions with the text
 * around them.
 */
#include <math.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

/* Worst positions shown open; the rest (up to 50) are folded. */
#define WORST_SHOWN 10

#define W CHART_W
#define H CHART_H
#define PL CHART_PL
#define PR CHART_PR
#define PT CHART_PT
#define PB CHART_PB
#define MAXB 64

struct series {
    const char *name;
    unsigned style; /* chart.c: 0 circles and a solid line, 1 squares */
    double x[MAXB], y[MAXB], lo[MAXB], hi[MAXB];
    bool ci[MAXB];
    size_t n;
};

struct hline {
    double y;
    const char *label, *cls;
};

static void draw_series(struct buf *b, const struct axis *X,
                        const struct axis *Y, const struct series *s)
{
    struct chart_series cs = {.name = s->name,
                              .style = s->style,
                              .n = s->n,
                              .x = s->x,
                              .y = s->y,
                              .lo = s->lo,
                              .hi = s->hi,
                              .ci = s->ci};
    chart_series(b, X, Y, &cs);
}

/* Where a threshold line's label goes: above the line at its right end,
 * else below it, else at the left end above or below, the first place no
 * point of the series falls in (the label's box at 6.5 px a character).
 * true when right-aligned. */
static bool label_place(const struct axis *X, const struct axis *Y,
                        const struct series *s, size_t ns, const char *label,
                        double y, double *lx, double *ly)
{
    double w = 6.5 * (double)strlen(label) + 6;
    static const struct {
        bool right;
        double dy;
    } spot[4] = {{true, -3}, {true, 12}, {false, -3}, {false, 12}};
    for (int k = 0; k < 4; k++) {
        double x1 = spot[k].right ? W - PR - 2 : PL + 4;
        double x0 = spot[k].right ? x1 - w : x1, x2 = x0 + w;
        double by = y + spot[k].dy, top = by - 12, bot = by + 4;
        bool hit = false;
        for (size_t i = 0; i < ns && !hit; i++)
            for (size_t j = 0; j < s[i].n && !hit; j++) {
                double px = html_axis_map(X, s[i].x[j]);
                double py = html_axis_map(Y, s[i].y[j]);
                hit = px >= x0 - 5 && px <= x2 + 5 && py >= top - 5 &&
                      py <= bot + 5;
            }
        if (!hit || k == 3) {
            *lx = x1;
            *ly = by;
            return spot[k].right;
        }
    }
    return true;
}

static void chart(struct buf *b, const char *title, const struct axis *X,
                  const struct axis *Y, const struct series *s, size_t ns,
                  const struct hline *hl, size_t nh)
{
    buf_adds(b, "<figure class=\"chart\"><figcaption>");
    html_esc(b, title, 0);
    buf_printf(b,
               "</figcaption><svg viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\">",
               W, H, W, H);
    chart_axes(b, X, Y, "position in the sequence (tokens, log scale)");
    for (size_t i = 0; i < nh; i++) {
        double y = html_axis_map(Y, hl[i].y);
        double lx, ly;
        bool right = label_place(X, Y, s, ns, hl[i].label, y, &lx, &ly);
        buf_printf(b,
                   "<line class=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" "
                   "y2=\"%.1f\"/><text class=\"hl\" x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"%s\">",
                   hl[i].cls, PL, W - PR, y, y, lx, ly,
                   right ? "end" : "start");
        html_esc(b, hl[i].label, 0);
        buf_adds(b, "</text>");
    }
    /* the candidate first, wide, then the excess over it, thin and dashed:
     * where the two coincide both stay visible */
    for (size_t i = 0; i < ns; i++)
        draw_series(b, X, Y, &s[i]);
    int lx = PL + 8;
    for (size_t i = 0; i < ns; i++) {
        if (!s[i].n)
            continue;
        buf_printf(b,
                   "<line class=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%d\" "
                   "y2=\"%d\"/>",
                   chart_class(s[i].style), lx, lx + 18, PT + 10, PT + 10);
        chart_marker(b, s[i].style, lx + 9, PT + 10);
        buf_printf(b, "<text x=\"%d\" y=\"%d\">", lx + 22, PT + 14);
        html_esc(b, s[i].name, 0);
        buf_adds(b, "</text>");
        lx += 26 + 7 * (int)strlen(s[i].name);
    }
    buf_adds(b, "</svg></figure>\n");
}

enum metric { M_KL, M_DP, M_TOP1 };
static const char *const mkey[] = {"kl_mean", "dp_rms", "top1_agreement"};
static const char *const thkey[] = {"kl_mean", "dp_rms", "top1"};
static const char *const cikey[] = {"excess_kl_mean", "dp_rms",
                                    "top1_agreement"};

static void fill(struct series *s, const json_t *buckets, const char *arm,
                 enum metric m, bool with_ci)
{
    size_t i;
    const json_t *bk;
    s->n = 0;
    json_array_foreach(buckets, i, bk)
    {
        const json_t *a = html_jget(bk, arm);
        double v = html_jnum(a, mkey[m], NAN);
        if (!isfinite(v) || html_jint(a, "count", 0) <= 0 || s->n >= MAXB)
            continue;
        double from = html_jnum(bk, "from", 1),
               to = html_jnum(bk, "to", from + 1);
        size_t k = s->n++;
        s->x[k] = sqrt((from < 1 ? 1 : from) * (to < 1 ? 1 : to));
        s->y[k] = v;
        const json_t *ci = html_jpath(bk, "ci95", cikey[m]);
        s->ci[k] = with_ci && json_array_size(ci) == 2 &&
                   json_is_number(json_array_get(ci, 0)) &&
                   json_is_number(json_array_get(ci, 1));
        if (s->ci[k]) {
            s->lo[k] = json_number_value(json_array_get(ci, 0));
            s->hi[k] = json_number_value(json_array_get(ci, 1));
        }
    }
}

static void range_add(double *lo, double *hi, double v, bool log)
{
    if (!isfinite(v) || (log && v <= 0))
        return;
    if (v < *lo)
        *lo = v;
    if (v > *hi)
        *hi = v;
}

static void metric_chart(struct buf *b, const json_t *doc, enum metric m,
                         const struct axis *X)
{
    static const char *const title[] = {
        "Mean KL divergence (golden || candidate) per bucket",
        "RMS delta-p of the forced token per bucket",
        "Top-1 agreement per bucket"};
    const json_t *bks = html_jget(doc, "buckets");
    /* style 8: slot 0 with a thicker line (chart.c) */
    struct series s[2] = {{.name = "candidate (prefill)", .style = 8},
                          {.name = "excess over noise", .style = 1}};
    fill(&s[0], bks, "candidate", m, m != M_KL);
    fill(&s[1], bks, "excess", m, m == M_KL);
    struct hline hl[4];
    size_t nh = 0;
    const json_t *th = html_jpath(doc, "thresholds", thkey[m]);
    static const char *const lab[2][2] = {{"WARN (excess)", "FAIL (excess)"},
                                          {"WARN", "FAIL"}};
    for (int k = 0; k < 2 && json_array_size(th) == 2; k++)
        hl[nh++] = (struct hline){json_number_value(json_array_get(th, k)),
                                  lab[0][k], k ? "th-fail" : "th-warn"};
    const json_t *dec = html_jpath(doc, "decode", "decode_vs_prefill");
    double dv = html_jnum(dec, mkey[m], NAN);
    if (isfinite(dv))
        hl[nh++] =
            (struct hline){dv, "decode vs prefill (all generated)", "decode"};
    bool lg = m == M_KL;
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            range_add(&lo, &hi, s[k].y[i], lg);
            if (s[k].ci[i]) {
                range_add(&lo, &hi, s[k].lo[i], lg);
                range_add(&lo, &hi, s[k].hi[i], lg);
            }
        }
    for (size_t i = 0; i < nh; i++)
        range_add(&lo, &hi, hl[i].y, lg);
    struct axis Y = {.p0 = H - PB, .p1 = PT, .log = lg};
    if (lg) {
        Y.lo = isfinite(lo) ? pow(10, floor(log10(lo))) : 1e-6;
        Y.hi = isfinite(hi) ? pow(10, ceil(log10(hi))) : 1e-2;
        if (Y.lo < 1e-9)
            Y.lo = 1e-9;
        if (Y.hi <= Y.lo)
            Y.hi = Y.lo * 100;
    } else if (m == M_TOP1) {
        Y.hi = 1;
        Y.lo = isfinite(lo) && lo < 0.99 ? floor(lo * 20) / 20 : 0.95;
    } else {
        Y.lo = 0;
        Y.hi = isfinite(hi) && hi > 0 ? hi * 1.15 : 0.01;
    }
    chart(b, title[m], X, &Y, s, 2, hl, nh);
}

static void verdict_cell(struct buf *b, const char *v)
{
    buf_adds(b, "<td class=\"v ");
    html_esc(b, v, 16);
    buf_adds(b, "\">");
    html_esc(b, v, 0);
    buf_adds(b, "</td>");
}

static void ci_text(struct buf *b, const json_t *ci)
{
    if (json_array_size(ci) != 2)
        return;
    buf_adds(b, " <small>[");
    html_fmt_sig(b, json_number_value(json_array_get(ci, 0)));
    buf_adds(b, ", ");
    html_fmt_sig(b, json_number_value(json_array_get(ci, 1)));
    buf_adds(b, "]</small>");
}

static void bucket_table(struct buf *b, const json_t *doc)
{
    size_t i;
    const json_t *bk;
    buf_adds(b, "<h3>Per-bucket verdicts</h3><table><thead><tr><th>positions"
                "</th><th>count</th><th>KL mean</th><th>excess KL mean "
                "[95% CI]</th><th>KL p99.9</th><th>top-1 agreement</th>"
                "<th>RMS delta-p</th><th>verdict</th></tr></thead><tbody>");
    json_array_foreach(html_jget(doc, "buckets"), i, bk)
    {
        const json_t *c = html_jget(bk, "candidate"),
                     *x = html_jget(bk, "excess");
        buf_printf(b,
                   "<tr><td class=\"n\">%lld-%lld</td><td class=\"n\">%lld"
                   "</td><td class=\"n\">",
                   html_jint(bk, "from", 0), html_jint(bk, "to", 0) - 1,
                   html_jint(c, "count", 0));
        html_fmt_sig(b, html_jnum(c, "kl_mean", NAN));
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_sig(b, html_jnum(x, "kl_mean", NAN));
        ci_text(b, html_jpath(bk, "ci95", "excess_kl_mean"));
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_sig(b, html_jnum(c, "kl_p999", NAN));
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_fixed(b, html_jnum(c, "top1_agreement", NAN), 4);
        ci_text(b, html_jpath(bk, "ci95", "top1_agreement"));
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_sig(b, html_jnum(c, "dp_rms", NAN));
        ci_text(b, html_jpath(bk, "ci95", "dp_rms"));
        buf_adds(b, "</td>");
        verdict_cell(b, html_jstr(bk, "verdict", "-"));
        buf_adds(b, "</tr>\n");
    }
    buf_adds(b, "</tbody></table>\n");
}

static void growth_line(struct buf *b, const json_t *g)
{
    if (!g)
        return;
    buf_adds(b, "<p>Growth of the excess KL with position: slope ");
    html_fmt_sig(b, html_jnum(g, "slope", NAN));
    buf_adds(b, " (95% CI ");
    html_fmt_sig(b, html_jnum(g, "slope_lo", NAN));
    buf_adds(b, " to ");
    html_fmt_sig(b, html_jnum(g, "slope_hi", NAN));
    buf_adds(b, "), last/first bucket ratio ");
    html_fmt_sig(b, html_jnum(g, "ratio", NAN));
    if (html_jstr(g, "shape", NULL)) {
        buf_adds(b, ", shape ");
        html_esc(b, html_jstr(g, "shape", "-"), 0);
        if (!strcmp(html_jstr(g, "shape", ""), "constant"))
            buf_adds(b, " (below the growth slope thresholds; its level is "
                        "judged by the KL thresholds)");
    }
    buf_adds(b, ": <b>");
    html_esc(b, html_jstr(g, "verdict", "-"), 0);
    buf_adds(b, "</b>.</p>");
}

/* The harm figure in a few words: "harm 0.012 (95% CI 0.01 to 0.014)". */
static void harm_words(struct buf *b, const json_t *h)
{
    buf_adds(b, "harm ");
    html_fmt_sig(b, html_jnum(h, "excess_kl_mean", NAN));
    buf_adds(b, " (95% CI ");
    html_fmt_sig(b, html_jnum(h, "lo", NAN));
    buf_adds(b, " to ");
    html_fmt_sig(b, html_jnum(h, "hi", NAN));
    buf_adds(b, "), ");
    html_fmt_sig(b, html_jnum(h, "flips_per_1k", NAN));
    buf_adds(b, " decisive top-1 flips per 1,000 tokens");
}

void rdrift_summary(const json_t *doc, struct buf *b)
{
    const char *v = html_jstr(doc, "verdict", "INCONCLUSIVE");
    const json_t *a = html_jget(doc, "attribution"),
                 *h = html_jget(doc, "harm");
    buf_adds(b, "<li class=\"sum\" id=\"sum-drift\"><a href=\"#drift\">"
                "drift</a> <span class=\"v ");
    html_esc(b, v, 16);
    buf_adds(b, "\">");
    html_esc(b, v, 16);
    buf_adds(b, "</span> ");
    if (a) {
        buf_adds(b, "attributed to <b>");
        html_esc(b, html_jstr(a, "words", "-"), 0);
        buf_adds(b, "</b>");
    } else
        buf_adds(b, "no attribution stored");
    if (h) {
        buf_adds(b, "; ");
        harm_words(b, h);
    }
    buf_printf(b, " over %lld sequences.</li>\n",
               html_jint(doc, "sequences", 0));
}

/* The harm figure that ranks candidates (docs/DRIFT.md, "Harm") and what
 * the run could attribute, in one line; the evidence folded under it.
 * Absent from summaries stored before them. */
static void harm_line(struct buf *b, const json_t *doc)
{
    const json_t *h = html_jget(doc, "harm"),
                 *a = html_jget(doc, "attribution");
    if (!h && !a)
        return;
    buf_adds(b, "<p class=\"attr\">");
    if (a) {
        buf_adds(b, "Attribution: <b>");
        html_esc(b, html_jstr(a, "words", "-"), 0);
        buf_adds(b, "</b>");
    }
    if (h) {
        buf_adds(b, a ? "; " : "");
        harm_words(b, h);
        buf_printf(b, " over %lld positions", html_jint(h, "positions", 0));
    }
    buf_adds(b, ".</p>");
    const char *y = html_jstr(a, "attributed", ""),
               *n = html_jstr(a, "not_attributed", "");
    if (*y || *n) {
        buf_adds(b, "<details class=\"evidence\"><summary>The evidence"
                    "</summary>");
        if (*y) {
            buf_adds(b, "<p>Attributed: ");
            html_esc(b, y, 0);
            buf_adds(b, "</p>");
        }
        if (*n) {
            buf_adds(b, "<p>Not attributed: ");
            html_esc(b, n, 0);
            buf_adds(b, "</p>");
        }
        buf_adds(b, "</details>");
    }
}

static void tok(struct buf *b, const json_t *w, const char *k)
{
    const char *s = html_jstr(w, k, NULL);
    if (!s) {
        buf_adds(b, "<td>?</td>");
        return;
    }
    buf_adds(b, "<td><code class=\"tok\">");
    html_esc(b, s, 80);
    buf_adds(b, "</code></td>");
}

static void worst_table(struct buf *b, const json_t *doc)
{
    const json_t *ws = html_jget(doc, "worst");
    size_t i;
    const json_t *w;
    if (!json_array_size(ws))
        return;
    static const char head[] =
        "<table class=\"cases\"><thead><tr>"
        "<th>seq</th><th>pos</th><th>KL</th><th>delta logp</th>"
        "<th>text around the token</th><th>golden top-1</th>"
        "<th>candidate top-1</th></tr></thead><tbody>";
    size_t total = json_array_size(ws) < 50 ? json_array_size(ws) : 50;
    buf_adds(b, "<h3 id=\"drift-worst\">Worst positions</h3>");
    buf_adds(b, head);
    json_array_foreach(ws, i, w)
    {
        if (i >= 50)
            break;
        if (i == WORST_SHOWN) /* the rest behind a fold */
            buf_printf(b,
                       "</tbody></table><details class=\"more\"><summary>"
                       "%zu more positions</summary>%s",
                       total - WORST_SHOWN, head);
        buf_printf(b,
                   "<tr><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
                   "<td class=\"n\">",
                   html_jint(w, "seq", 0), html_jint(w, "pos", 0));
        html_fmt_sig(b, html_jnum(w, "kl", NAN));
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_fixed(b, html_jnum(w, "dlogp", NAN), 4);
        buf_adds(b, "</td><td><code class=\"ctx\">");
        const char *pre = html_jstr(w, "context_before", NULL);
        if (pre) {
            size_t n = strlen(pre), k = n > 60 ? n - 60 : 0;
            while (k > 0 && k < n && ((unsigned char)pre[k] & 0xc0) == 0x80)
                k++; /* start on a character */
            html_esc(b, pre + k, 0);
        }
        buf_adds(b, "<mark>");
        html_esc(b, html_jstr(w, "text", "?"), 80);
        buf_adds(b, "</mark>");
        html_esc(b, html_jstr(w, "context_after", ""), 60);
        buf_adds(b, "</code></td>");
        tok(b, w, "golden_top1");
        tok(b, w, "candidate_top1");
        buf_adds(b, "</tr>\n");
    }
    buf_adds(b, "</tbody></table>\n");
    if (total > WORST_SHOWN)
        buf_adds(b, "</details>\n");
}

static void x_axis(const json_t *doc, struct axis *X)
{
    size_t i;
    const json_t *bk;
    double lo = INFINITY, hi = 0;
    json_array_foreach(html_jget(doc, "buckets"), i, bk)
    {
        double f = html_jnum(bk, "from", 1), t = html_jnum(bk, "to", f + 1);
        if (f < 1)
            f = 1;
        lo = f < lo ? f : lo;
        hi = t > hi ? t : hi;
    }
    *X = (struct axis){.p0 = PL + 6, .p1 = W - PR - 6, .log = true};
    X->lo = isfinite(lo) ? pow(10, floor(log10(lo))) : 1;
    X->hi = hi > X->lo ? pow(10, ceil(log10(hi))) : X->lo * 10;
}

int report_drift_section(const json_t *doc, struct buf *b)
{
    if (!doc)
        return 0;
    buf_adds(b, "<section id=\"drift\"><h2>drift: candidate against golden, "
                "token by token</h2><p>Verdict: <span class=\"v ");
    html_esc(b, html_jstr(doc, "verdict", "-"), 16);
    buf_adds(b, "\">");
    html_esc(b, html_jstr(doc, "verdict", "-"), 0);
    buf_adds(b, "</span>");
    buf_printf(b, " over %lld sequences, %lld positions",
               html_jint(doc, "sequences", 0), html_jint(doc, "positions", 0));
    /* what the evidence could not decide, and how much more would */
    const json_t *und = html_jget(doc, "undecided");
    for (size_t i = 0; i < json_array_size(und); i++) {
        const json_t *u = json_array_get(und, i);
        buf_adds(b, i ? "; " : ". Undecided: ");
        html_esc(b, html_jstr(u, "where", "-"), 0);
        buf_adds(b, ": ");
        html_esc(b, html_jstr(u, "text", "-"), 0);
    }
    if (!json_is_true(html_jget(doc, "prefill"))) {
        buf_adds(b, "; no prefill comparison (");
        html_esc(b, html_jstr(doc, "fallback", "-"), 200);
        buf_addch(b, ')');
    }
    buf_adds(b, ".</p>");
    if (json_array_size(html_jget(doc, "buckets"))) {
        struct axis X;
        x_axis(doc, &X);
        if (!html_jget(doc, "thresholds"))
            buf_adds(b, "<p class=\"note\">This summary holds no thresholds; "
                        "the lines are left out.</p>");
        for (int m = M_KL; m <= M_TOP1; m++)
            metric_chart(b, doc, (enum metric)m, &X);
        bucket_table(b, doc);
        growth_line(b, html_jget(doc, "growth"));
    }
    harm_line(b, doc);
    const json_t *dec = html_jget(doc, "decode");
    if (dec) {
        buf_adds(b, "<p>Decode path: attribution <b>");
        html_esc(b, html_jstr(dec, "attribution", "-"), 0);
        buf_adds(b, "</b>; decode vs prefill mean KL ");
        html_fmt_sig(
            b, html_jnum(html_jget(dec, "decode_vs_prefill"), "kl_mean", NAN));
        buf_adds(b, ", prefill vs prefill ");
        html_fmt_sig(
            b, html_jnum(html_jget(dec, "prefill_vs_prefill"), "kl_mean", NAN));
        buf_adds(b, ".</p>");
    }
    worst_table(b, doc);
    buf_adds(b, "</section>\n");
    return 0;
}
