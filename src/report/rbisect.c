/*
 * rbisect: the bisect section of the report, from a fidelity.bisect/1
 * document (`fidelity bisect --json`, docs/BISECT.md). The culprits in a
 * sentence, then the ranking as bisect ordered it: per configuration a bar
 * of its harm (excess KL mean, log scale shared by the rows) with its 95%
 * interval, the recall change in points with its interval on a diverging
 * bar around 0, the path it claimed against the path measured (a mismatch
 * marked), and the verdict. Rows not measured say why.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

#define BW 150 /* a harm bar's width in pixels */
#define BH 18

/* A document bisect wrote since it names its culprits (`culprits`, the
 * first line's list, and the run's `verdict`) is read by those, so that
 * the page says what the command said: a culprit by harm alone (a saved
 * golden, recall not measured) is one. An older document has only each
 * row's verdict, CULPRIT for a recall loss. */
static const json_t *named_culprits(const json_t *doc)
{
    const json_t *k = html_jget(doc, "culprits");
    return json_is_array(k) ? k : NULL;
}

static bool is_culprit(const json_t *doc, const json_t *c)
{
    const json_t *named = named_culprits(doc);
    if (!named)
        return !strcmp(html_jstr(c, "verdict", ""), "CULPRIT");
    size_t i;
    const json_t *k;
    json_array_foreach(named, i, k)
    {
        if (!strcmp(html_jstr(k, "name", ""), html_jstr(c, "name", "?")))
            return true;
    }
    return false;
}

/* The log axis of the harm bars: from a decade under the smallest positive
 * harm (or interval end) to a decade over the largest. */
static void harm_axis(const json_t *cs, struct axis *X)
{
    double lo = INFINITY, hi = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cs, i, c)
    {
        double v[3] = {html_jnum(c, "harm", NAN), NAN, NAN};
        const json_t *ci = html_jget(c, "harm_ci");
        if (json_array_size(ci) == 2) {
            v[1] = json_number_value(json_array_get(ci, 0));
            v[2] = json_number_value(json_array_get(ci, 1));
        }
        for (int k = 0; k < 3; k++)
            if (isfinite(v[k]) && v[k] > 0) {
                lo = v[k] < lo ? v[k] : lo;
                hi = v[k] > hi ? v[k] : hi;
            }
    }
    *X = (struct axis){.p0 = 2, .p1 = BW - 2, .log = true};
    X->lo = isfinite(lo) ? pow(10, floor(log10(lo))) : 1e-6;
    X->hi = hi > 0 ? pow(10, ceil(log10(hi))) : 1e-3;
    if (X->hi <= X->lo)
        X->hi = X->lo * 10;
}

static double clampx(const struct axis *X, double v)
{
    if (!isfinite(v) || v <= X->lo)
        return X->p0;
    return v >= X->hi ? X->p1 : html_axis_map(X, v);
}

static void harm_bar(struct buf *b, const json_t *c, const struct axis *X,
                     bool culprit)
{
    double h = html_jnum(c, "harm", NAN);
    buf_printf(b,
               "<svg class=\"bar\" viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\"><rect class=\"track\" x=\"0\" "
               "y=\"3\" width=\"%d\" height=\"%d\"/>",
               BW, BH, BW, BH, BW, BH - 6);
    double x = clampx(X, h);
    buf_printf(b,
               "<rect class=\"harm%s\" x=\"0\" y=\"4\" width=\"%.1f\" "
               "height=\"%d\"/>",
               culprit ? " culprit" : "", x, BH - 8);
    const json_t *ci = html_jget(c, "harm_ci");
    if (json_array_size(ci) == 2) {
        double a = clampx(X, json_number_value(json_array_get(ci, 0)));
        double z = clampx(X, json_number_value(json_array_get(ci, 1)));
        buf_printf(b,
                   "<path class=\"ci\" d=\"M%.1f %dv%dM%.1f %dH%.1fM%.1f "
                   "%dv%d\"/>",
                   a, 3, BH - 6, a, BH / 2, z, z, 3, BH - 6);
    }
    buf_adds(b, "</svg> ");
    html_fmt_sig(b, h);
    if (json_array_size(ci) == 2) {
        buf_adds(b, "<br><small>95% CI ");
        html_fmt_sig(b, json_number_value(json_array_get(ci, 0)));
        buf_adds(b, ", ");
        html_fmt_sig(b, json_number_value(json_array_get(ci, 1)));
        buf_adds(b, "</small>");
    }
}

/* The recall change (points) on -100..+100 around 0, its interval as a
 * whisker. */
static void recall_bar(struct buf *b, const json_t *c)
{
    double d = 100 * html_jnum(c, "pass_diff", NAN);
    const json_t *ci = html_jget(c, "pass_diff_ci");
    int w = 100;
    struct axis X = {.lo = -100, .hi = 100, .p0 = 2, .p1 = w - 2};
    buf_printf(b,
               "<svg class=\"bar\" viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\"><rect class=\"track\" x=\"0\" "
               "y=\"3\" width=\"%d\" height=\"%d\"/><line class=\"zero\" "
               "x1=\"%d\" x2=\"%d\" y1=\"1\" y2=\"%d\"/>",
               w, BH, w, BH, w, BH - 6, w / 2, w / 2, BH - 1);
    if (isfinite(d)) {
        double x0 = html_axis_map(&X, 0), x1 = html_axis_map(&X, d);
        buf_printf(b,
                   "<rect class=\"%s\" x=\"%.1f\" y=\"4\" width=\"%.1f\" "
                   "height=\"%d\"/>",
                   d < 0 ? "worse" : "better", x1 < x0 ? x1 : x0, fabs(x1 - x0),
                   BH - 8);
    }
    if (json_array_size(ci) == 2) {
        double a =
            html_axis_map(&X, 100 * json_number_value(json_array_get(ci, 0)));
        double z =
            html_axis_map(&X, 100 * json_number_value(json_array_get(ci, 1)));
        buf_printf(b,
                   "<path class=\"ci\" d=\"M%.1f %dv%dM%.1f %dH%.1fM%.1f "
                   "%dv%d\"/>",
                   a, 3, BH - 6, a, BH / 2, z, z, 3, BH - 6);
    }
    buf_adds(b, "</svg> ");
    if (isfinite(d))
        buf_printf(b, "%+.0f", d);
    else
        buf_addch(b, '-');
    if (json_array_size(ci) == 2)
        buf_printf(b, "<br><small>95%% CI %+.0f, %+.0f</small>",
                   100 * json_number_value(json_array_get(ci, 0)),
                   100 * json_number_value(json_array_get(ci, 1)));
    buf_adds(b, " <small>McNemar p ");
    html_fmt_sig(b, html_jnum(c, "mcnemar_p", NAN));
    buf_adds(b, "</small>");
}

/* The word of the summary: the run's own verdict where the document has
 * one (FAIL, INCONCLUSIVE or PASS, as bisect's exit status says). In an
 * older document: a culprit FAIL; drift without a recall loss WARN;
 * anything undecided or not measured INCONCLUSIVE; else PASS. */
static const char *word(const json_t *doc)
{
    size_t i;
    const json_t *c;
    bool warn = false, open = false;
    const char *v = html_jstr(doc, "verdict", "");
    if (named_culprits(doc) && (!strcmp(v, "FAIL") || !strcmp(v, "PASS") ||
                                !strcmp(v, "INCONCLUSIVE")))
        return v;
    if (!json_array_size(html_jget(doc, "configurations")))
        return "INCONCLUSIVE";
    json_array_foreach(html_jget(doc, "configurations"), i, c)
    {
        if (is_culprit(doc, c))
            return "FAIL";
        warn |= json_is_true(html_jget(c, "harmful"));
        open |= !json_is_true(html_jget(c, "measured")) ||
                json_is_true(html_jget(c, "undecided"));
    }
    return warn ? "WARN" : open ? "INCONCLUSIVE" : "PASS";
}

/* "culprit: a (harm 1e-4, recall -40 points); b (...)", or what the run
 * found instead. */
static void culprits(struct buf *b, const json_t *doc)
{
    size_t i, n = 0;
    const json_t *c;
    json_array_foreach(html_jget(doc, "configurations"), i, c)
    {
        if (!is_culprit(doc, c))
            continue;
        buf_adds(b, n++ ? "; <b>" : "culprit: <b>");
        html_esc(b, html_jstr(c, "name", "?"), 200);
        buf_adds(b, "</b> (harm ");
        html_fmt_sig(b, html_jnum(c, "harm", NAN));
        if (json_is_false(html_jget(c, "recall_measured")))
            buf_adds(b, ", recall not measured");
        else
            buf_printf(b, ", recall %+.0f points",
                       100 * html_jnum(c, "pass_diff", NAN));
        buf_adds(b, ", measured ");
        html_esc(b, html_jstr(c, "attribution", "-"), 60);
        buf_adds(b, ")");
    }
    if (!n && named_culprits(doc) && !strcmp(word(doc), "FAIL"))
        buf_adds(b, "no culprit named: some configuration is harmful, but "
                    "none alone explains it");
    else if (!n && named_culprits(doc))
        buf_adds(b, "no culprit");
    else if (!n)
        buf_adds(b, "no configuration lost recall significantly");
    if (html_jstr(doc, "interaction", NULL)) {
        buf_adds(b, "; interaction: <b>");
        html_esc(b, html_jstr(doc, "interaction", ""), 300);
        buf_adds(b, "</b> hurt only together");
    }
}

void rbisect_summary(const json_t *doc, struct buf *b)
{
    const char *w = word(doc);
    buf_printf(b,
               "<li class=\"sum\" id=\"sum-bisect\"><a href=\"#bisect\">"
               "bisect</a> <span class=\"v %s\">%s</span> ",
               w, w);
    culprits(b, doc);
    buf_adds(b, ".</li>\n");
}

int report_bisect_section(const json_t *doc, struct buf *b)
{
    if (!doc)
        return 0;
    const json_t *cs = html_jget(doc, "configurations");
    struct axis X;
    size_t i;
    const json_t *c;
    harm_axis(cs, &X);
    buf_adds(b, "<section id=\"bisect\"><h2>bisect: which setting breaks "
                "it</h2><p class=\"verdict\">Verdict: <span class=\"v ");
    buf_adds(b, word(doc));
    buf_adds(b, "\">");
    buf_adds(b, word(doc));
    buf_adds(b, "</span> ");
    culprits(b, doc);
    buf_printf(b, ". Mode ");
    html_esc(b, html_jstr(doc, "mode", "-"), 40);
    buf_printf(b, ", %lld launches (the golden included).</p>",
               html_jint(doc, "launches", 0));
    buf_adds(b, "<p class=\"note\">Ranked as bisect ranks them. Harm: the "
                "excess KL mean over the golden (log scale, the bar's "
                "whisker its 95% interval). Recall: the pass-rate change in "
                "points against the golden with its 95% interval and "
                "McNemar's p. A culprit's bar is red and its name marked "
                "&#9888;.</p><table class=\"bisect\"><thead><tr><th>"
                "configuration</th><th>harm (excess KL)</th><th>recall "
                "change (points)</th><th>claimed</th><th>measured</th>"
                "<th>verdict</th></tr></thead><tbody>");
    json_array_foreach(cs, i, c)
    {
        bool culprit = is_culprit(doc, c);
        buf_printf(b, "<tr%s><td class=\"cfg\">%s<b>",
                   culprit ? " class=\"culprit\"" : "",
                   culprit ? "&#9888; " : "");
        html_esc(b, html_jstr(c, "name", "?"), 200);
        buf_adds(b, "</b>");
        const json_t *t = html_jget(c, "toggles");
        if (json_array_size(t) > 1) {
            buf_adds(b, "<br><small>");
            html_esc_json(b, t, 300);
            buf_adds(b, "</small>");
        }
        buf_adds(b, "</td>");
        if (!json_is_true(html_jget(c, "measured"))) {
            buf_adds(b, "<td colspan=\"4\" class=\"err\">not measured: ");
            html_esc(b, html_jstr(c, "error", "-"), 400);
            buf_adds(b, "</td><td>");
            html_esc(b, html_jstr(c, "verdict", "-"), 80);
            buf_adds(b, "</td></tr>\n");
            continue;
        }
        buf_adds(b, "<td class=\"n\">");
        harm_bar(b, c, &X, culprit);
        buf_adds(b, "</td><td class=\"n\">");
        recall_bar(b, c);
        bool mm = json_is_true(html_jget(c, "path_mismatch"));
        buf_adds(b, "</td><td>");
        html_esc(b, html_jstr(c, "claimed", "-"), 60);
        buf_printf(b, "</td><td%s>", mm ? " class=\"warn\"" : "");
        html_esc(b, html_jstr(c, "attribution", "-"), 60);
        if (mm)
            buf_adds(b, "<br><small>(not the path claimed)</small>");
        buf_adds(b, "</td><td>");
        html_esc(b, html_jstr(c, "verdict", "-"), 80);
        if (html_jstr(c, "why_undecided", NULL)) {
            buf_adds(b, "<br><small>");
            html_esc(b, html_jstr(c, "why_undecided", ""), 300);
            buf_adds(b, "</small>");
        }
        buf_adds(b, "</td></tr>\n");
    }
    buf_adds(b, "</tbody></table></section>\n");
    return 0;
}
