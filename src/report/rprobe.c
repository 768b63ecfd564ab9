/*
 * rprobe: the probe section of the report, from a fidelity-probe/1
 * document (docs/PROBE.md). A length x depth heatmap per kind, variant and
 * temperature (kinds whose cells all share one depth are drawn length x
 * variant), the baseline's map beside it and a difference map with the
 * cells whose 95% Wilson intervals do not overlap outlined; effective
 * context lengths by RULER's and NoLiMa's rules; failures by
 * classification (whatever outcome names the document holds, so new
 * classifications appear without a change here); the paired comparison;
 * the first failed cases with their replies.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

#define MAXR 64
#define MAXC 64
#define CW 54
#define CH 24
#define LEFT 58
#define TOP 38

struct hmap {
    const char *kind;
    const char *variant; /* NULL: columns are variants */
    double temp;
    bool show_temp;
    long long rows[MAXR];
    size_t nr;
    long long dcols[MAXC];
    const char *vcols[MAXC];
    size_t nc;
    bool nodepth; /* one column of a kind without depth */
    bool abbrev;  /* variant columns labelled v1.. with a key under the map */
    bool few;     /* mark the cells with fewer than REPORT_FEW_CASES cases */
};

/* Variant names longer than this do not fit a column (CW at 11px). */
#define LABEL_FIT 7

static int cmp_outcome(const void *a, const void *b);

static bool same_str(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

static bool in_map(const struct hmap *m, const json_t *c)
{
    return same_str(html_jstr(c, "kind", NULL), m->kind) &&
           (!m->variant || same_str(html_jstr(c, "variant", ""), m->variant)) &&
           html_jnum(c, "temperature", 0) == m->temp;
}

static void add_sorted(long long *v, size_t *n, size_t max, long long x)
{
    for (size_t i = 0; i < *n; i++)
        if (v[i] == x)
            return;
    if (*n >= max)
        return;
    size_t p = (*n)++;
    while (p > 0 && v[p - 1] > x) {
        v[p] = v[p - 1];
        p--;
    }
    v[p] = x;
}

static void add_str(const char **v, size_t *n, size_t max, const char *x)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(v[i], x))
            return;
    if (*n < max)
        v[(*n)++] = x;
}

static void map_axes(struct hmap *m, const json_t *cells)
{
    size_t i;
    const json_t *c;
    m->nr = m->nc = 0;
    json_array_foreach(cells, i, c)
    {
        if (!in_map(m, c))
            continue;
        add_sorted(m->rows, &m->nr, MAXR, html_jint(c, "length", 0));
        if (m->variant)
            add_sorted(m->dcols, &m->nc, MAXC, html_jint(c, "depth", 0));
        else
            add_str(m->vcols, &m->nc, MAXC, html_jstr(c, "variant", "-"));
    }
}

static const json_t *find_cell(const struct hmap *m, const json_t *cells,
                               size_t r, size_t col)
{
    size_t i;
    const json_t *c;
    json_array_foreach(cells, i, c)
    {
        if (!in_map(m, c) || html_jint(c, "length", 0) != m->rows[r])
            continue;
        if (m->variant ? html_jint(c, "depth", 0) == m->dcols[col]
                       : same_str(html_jstr(c, "variant", "-"), m->vcols[col]))
            return c;
    }
    return NULL;
}

/* A column's label: its depth, its variant or, where variant names do not
 * fit, "v1".. (the key under the map says which); full: the whole name, for
 * tooltips and the key. */
static void col_label(struct buf *b, const struct hmap *m, size_t c, bool full)
{
    if (m->nodepth)
        buf_adds(b, "all");
    else if (m->variant && m->dcols[c] < 0) /* no depth: -1 */
        buf_adds(b, "all");
    else if (m->variant)
        buf_printf(b, "%lld%%", m->dcols[c]);
    else if (m->abbrev && !full)
        buf_printf(b, "v%zu", c + 1);
    else
        html_esc(b, m->vcols[c], 0);
}

static void map_title(struct buf *b, const struct hmap *m)
{
    html_esc(b, m->kind, 0);
    if (m->variant && strcmp(m->variant, "-")) {
        buf_adds(b, " [");
        html_esc(b, m->variant, 0);
        buf_addch(b, ']');
    }
    if (m->show_temp) {
        buf_adds(b, " t=");
        html_fmt_fixed(b, m->temp, 2);
    }
}

static void svg_open(struct buf *b, const struct hmap *m, const char *who)
{
    int w = LEFT + (int)m->nc * CW + 8, h = TOP + (int)m->nr * CH + 8;
    int tw = 8 * (int)strlen(who) + 8; /* the title at 12px bold fits */
    w = w < tw ? tw : w;
    buf_printf(b,
               "<svg class=\"heat\" viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\"><text class=\"t\" x=\"0\" "
               "y=\"13\">",
               w, h, w, h);
    html_esc(b, who, 0);
    buf_printf(b,
               "</text><text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s"
               "</text>",
               LEFT - 6, TOP - 8, "length");
    for (size_t c = 0; c < m->nc; c++) {
        buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
                   LEFT + (int)c * CW + CW / 2, TOP - 8);
        col_label(b, m, c, false);
        buf_adds(b, "</text>");
    }
    for (size_t r = 0; r < m->nr; r++) {
        buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", LEFT - 6,
                   TOP + (int)r * CH + CH / 2 + 4);
        html_fmt_tokens(b, m->rows[r]);
        buf_adds(b, "</text>");
    }
}

static void cell_tip(struct buf *b, const struct hmap *m, const json_t *c,
                     size_t r, size_t col)
{
    buf_adds(b, "<title>");
    map_title(b, m);
    buf_adds(b, ", length ");
    html_fmt_tokens(b, m->rows[r]);
    if (!m->nodepth) {
        buf_adds(b, m->variant ? ", depth " : ", ");
        col_label(b, m, col, true);
    }
    buf_printf(b, ": %lld of %lld passed", html_jint(c, "passed", 0),
               html_jint(c, "cases", 0));
    const json_t *w = html_jget(c, "wilson95");
    if (json_array_size(w) == 2) {
        buf_adds(b, " (95% CI ");
        html_fmt_fixed(b, 100 * json_number_value(json_array_get(w, 0)), 0);
        buf_adds(b, "-");
        html_fmt_fixed(b, 100 * json_number_value(json_array_get(w, 1)), 0);
        buf_adds(b, "%)");
    }
    /* in name order: a document read back from the store has its keys
     * sorted, one still in memory has them in the order they were made */
    const char *names[32];
    size_t n = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)html_jget(c, "outcomes"), k, v)
        add_str(names, &n, 32, k);
    qsort(names, n, sizeof(*names), cmp_outcome);
    for (size_t i = 0; i < n; i++) {
        long long cnt = html_jint(html_jget(c, "outcomes"), names[i], 0);
        if (strcmp(names[i], "pass") && cnt > 0) {
            buf_printf(b, "; %lld ", cnt);
            html_esc(b, names[i], 0);
        }
    }
    buf_adds(b, "</title>");
}

static void heat_svg(struct buf *b, const struct hmap *m, const json_t *cells,
                     const char *who)
{
    svg_open(b, m, who);
    for (size_t r = 0; r < m->nr; r++)
        for (size_t col = 0; col < m->nc; col++) {
            const json_t *c = find_cell(m, cells, r, col);
            int x = LEFT + (int)col * CW, y = TOP + (int)r * CH;
            long long n = c ? html_jint(c, "cases", 0) : 0;
            if (!n) {
                buf_printf(b,
                           "<rect x=\"%d\" y=\"%d\" width=\"%d\" "
                           "height=\"%d\" class=\"empty\"/>",
                           x, y, CW - 2, CH - 2);
                continue;
            }
            double rate = html_jnum(c, "pass_rate", 0);
            char fill[8];
            bool dark;
            html_color_seq(rate, fill, &dark);
            buf_printf(b,
                       "<g><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                       "fill=\"%s\"/>",
                       x, y, CW - 2, CH - 2, fill);
            cell_tip(b, m, c, r, col);
            buf_printf(b,
                       "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
                       "class=\"%s\">",
                       x + CW / 2 - 1, y + CH / 2 + 4, dark ? "on-dark" : "on");
            html_fmt_fixed(b, 100 * rate, 0);
            const char *fl = html_jstr(c, "failure", NULL);
            if (fl && rate < 1) {
                buf_addch(b, ' ');
                html_esc(b, fl, 1);
            }
            buf_adds(b, "</text>");
            if (m->few && n < REPORT_FEW_CASES)
                buf_printf(b, "<path class=\"few\" d=\"M%d %dh7v7z\"/>",
                           x + CW - 9, y);
            buf_adds(b, "</g>\n");
        }
    buf_adds(b, "</svg>\n");
}

static bool apart(const json_t *a, const json_t *c)
{
    const json_t *wa = html_jget(a, "wilson95"), *wc = html_jget(c, "wilson95");
    if (json_array_size(wa) != 2 || json_array_size(wc) != 2)
        return false;
    double alo = json_number_value(json_array_get(wa, 0));
    double ahi = json_number_value(json_array_get(wa, 1));
    double clo = json_number_value(json_array_get(wc, 0));
    double chi = json_number_value(json_array_get(wc, 1));
    return ahi < clo || chi < alo;
}

static void diff_svg(struct buf *b, const struct hmap *m, const json_t *ec,
                     const json_t *bc)
{
    svg_open(b, m, "endpoint - baseline (points)");
    for (size_t r = 0; r < m->nr; r++)
        for (size_t col = 0; col < m->nc; col++) {
            const json_t *e = find_cell(m, ec, r, col);
            const json_t *x = find_cell(m, bc, r, col);
            int px = LEFT + (int)col * CW, py = TOP + (int)r * CH;
            if (!e || !x || !html_jint(e, "cases", 0) ||
                !html_jint(x, "cases", 0)) {
                buf_printf(b,
                           "<rect x=\"%d\" y=\"%d\" width=\"%d\" "
                           "height=\"%d\" class=\"empty\"/>",
                           px, py, CW - 2, CH - 2);
                continue;
            }
            double d =
                html_jnum(e, "pass_rate", 0) - html_jnum(x, "pass_rate", 0);
            char fill[8];
            bool dark;
            html_color_div(d, fill, &dark);
            bool sig = apart(e, x);
            buf_printf(b,
                       "<g><rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                       "fill=\"%s\"%s/><title>",
                       px, py, CW - 2, CH - 2, fill,
                       sig ? " class=\"sig\"" : "");
            map_title(b, m);
            buf_adds(b, ", length ");
            html_fmt_tokens(b, m->rows[r]);
            buf_adds(b, ": ");
            html_fmt_fixed(b, 100 * html_jnum(e, "pass_rate", 0), 0);
            buf_adds(b, "% vs ");
            html_fmt_fixed(b, 100 * html_jnum(x, "pass_rate", 0), 0);
            buf_printf(b,
                       "%%%s</title><text x=\"%d\" y=\"%d\" "
                       "text-anchor=\"middle\" class=\"%s\">",
                       sig ? ", 95% intervals apart" : "", px + CW / 2 - 1,
                       py + CH / 2 + 4, dark ? "on-dark" : "on");
            if (fabs(d) < 0.005)
                buf_addch(b, '0');
            else
                buf_printf(b, "%+.0f", 100 * d);
            buf_adds(b, "</text></g>\n");
        }
    buf_adds(b, "</svg>\n");
}

/* The maps of the document: per kind in order of first appearance. */
static size_t plan_maps(const json_t *cells, struct hmap *maps, size_t max)
{
    const char *kinds[32];
    size_t nk = 0, n = 0, i;
    const json_t *c;
    json_array_foreach(cells, i, c)
        add_str(kinds, &nk, 32, html_jstr(c, "kind", "?"));
    for (size_t k = 0; k < nk; k++) {
        const char *vars[MAXC];
        long long depths[MAXC];
        double temps[8];
        size_t nv = 0, nd = 0, nt = 0;
        json_array_foreach(cells, i, c)
        {
            if (!same_str(html_jstr(c, "kind", "?"), kinds[k]))
                continue;
            add_str(vars, &nv, MAXC, html_jstr(c, "variant", "-"));
            add_sorted(depths, &nd, MAXC, html_jint(c, "depth", 0));
            double t = html_jnum(c, "temperature", 0);
            size_t j = 0;
            while (j < nt && temps[j] != t)
                j++;
            if (j == nt && nt < 8)
                temps[nt++] = t;
        }
        /* kinds without depth hold depth -1 (first-message) */
        bool nodepth = nd == 1 && depths[0] < 0 && nv == 1;
        bool by_variant = nd == 1 && nv > 1;
        for (size_t t = 0; t < nt; t++)
            for (size_t v = 0; v < (by_variant ? 1 : nv) && n < max; v++) {
                struct hmap *m = &maps[n++];
                memset(m, 0, sizeof(*m));
                m->kind = kinds[k];
                m->variant = by_variant ? NULL : vars[v];
                m->temp = temps[t];
                m->show_temp = nt > 1;
                m->nodepth = nodepth;
                map_axes(m, cells);
                for (size_t j = 0; !m->variant && j < m->nc; j++)
                    m->abbrev |= strlen(m->vcols[j]) > LABEL_FIT;
            }
    }
    return n;
}

/* Whether some cells of cells have fewer than REPORT_FEW_CASES finished
 * cases (*few) and some as many or more (*many). */
static void case_counts(const json_t *cells, bool *few, bool *many)
{
    size_t i;
    const json_t *c;
    json_array_foreach(cells, i, c)
    {
        long long n = html_jint(c, "cases", 0);
        *few |= n > 0 && n < REPORT_FEW_CASES;
        *many |= n >= REPORT_FEW_CASES;
    }
}

static bool any_letter(const json_t *cells)
{
    size_t i;
    const json_t *c;
    json_array_foreach(cells, i, c)
    {
        if (html_jstr(c, "failure", NULL) && html_jnum(c, "pass_rate", 1) < 1)
            return true;
    }
    return false;
}

static void variant_key(struct buf *b, const struct hmap *m)
{
    if (!m->abbrev)
        return;
    buf_adds(b, "<ul class=\"key vkey\">");
    for (size_t c = 0; c < m->nc; c++) {
        buf_printf(b, "<li><b>v%zu</b> ", c + 1);
        html_esc(b, m->vcols[c], 0);
        buf_adds(b, "</li>");
    }
    buf_adds(b, "</ul>");
}

static void heatmaps(struct buf *b, const json_t *doc)
{
    const json_t *ec = html_jpath(doc, "results", "cells");
    const json_t *bc = html_jpath(doc, "baseline_results", "cells");
    if (!json_array_size(ec)) {
        buf_adds(b, "<p class=\"note\">No per-cell results in this run (it "
                    "was stored before cells were kept).</p>");
        return;
    }
    bool few = false, many = false;
    case_counts(ec, &few, &many);
    case_counts(bc, &few, &many);
    /* a mark on every cell tells nothing: then one sentence says it */
    bool mark = few && many;
    struct hmap *maps = calloc(128, sizeof(*maps));
    size_t n = plan_maps(ec, maps, 128);
    buf_adds(b, "<h3 id=\"probe-maps\">Pass rate by length and depth</h3>"
                "<div class=\"legends\">");
    html_svg_seq_legend(b, "pass rate (number in each cell: %)", mark);
    if (json_array_size(bc))
        html_svg_div_legend(b, "difference, endpoint minus baseline");
    buf_adds(b, "</div>");
    if (any_letter(ec) || any_letter(bc))
        buf_adds(b, "<p class=\"note legend-letters\">The letter after a "
                    "cell's number is its most common failure: <b>T</b> "
                    "truncated-by-server, <b>D</b> dropped-before-the-model, "
                    "<b>M</b> missed, <b>C</b> output-clipped, <b>E</b> "
                    "server-error.</p>");
    if (few && !many)
        buf_printf(b,
                   "<p class=\"note\">Every cell holds fewer than %d "
                   "finished cases: one case decides a cell; read the kinds' "
                   "totals below, not single cells.</p>",
                   REPORT_FEW_CASES);
    for (size_t i = 0; i < n; i++) {
        maps[i].few = mark;
        buf_adds(b, "<figure class=\"maps\"><figcaption>");
        map_title(b, &maps[i]);
        if (maps[i].nodepth)
            buf_adds(b, ": pass % by length (the kind has no depth)");
        else if (!maps[i].variant)
            buf_adds(b, ": pass % by length x variant");
        else if (!strcmp(maps[i].kind, "canary"))
            buf_adds(b, ": pass % by length x turn position (the turn-loss "
                        "map: which turns the server still sees)");
        else
            buf_adds(b, ": pass % by length x depth");
        buf_adds(b, "</figcaption><div class=\"row\">");
        heat_svg(b, &maps[i], ec, "endpoint");
        if (json_array_size(bc)) {
            heat_svg(b, &maps[i], bc, "baseline");
            diff_svg(b, &maps[i], ec, bc);
        }
        buf_adds(b, "</div>");
        variant_key(b, &maps[i]);
        buf_adds(b, "</figure>\n");
    }
    free(maps);
}

static void eff_cell(struct buf *b, const json_t *e, const char *rule)
{
    long long v = html_jint(e, rule, -1);
    buf_adds(b, "<td class=\"n\">");
    if (v < 0)
        buf_addch(b, '-');
    else if (v == 0)
        buf_adds(b, "&lt;min");
    else
        html_fmt_tokens(b, v);
    buf_adds(b, "</td>");
}

static const json_t *kind_of(const json_t *side, const char *kind)
{
    size_t i;
    const json_t *k;
    json_array_foreach(
        html_jget(side, "kinds"), i,
        k) if (same_str(html_jstr(k, "kind", NULL), kind)) return k;
    return NULL;
}

static void effective_table(struct buf *b, const json_t *doc)
{
    const json_t *e = html_jget(doc, "results"),
                 *x = html_jget(doc, "baseline_results");
    buf_adds(b, "<h3>Effective context length</h3><p class=\"note\">RULER: "
                "the longest length before the first whose pass rate is "
                "below 85.6%. NoLiMa: the same with 85% of the mean pass "
                "rate at the three shortest lengths. &lt;min: even the "
                "shortest length fails.</p><table><thead><tr><th>kind</th>"
                "<th>endpoint RULER</th><th>endpoint NoLiMa</th>");
    if (x)
        buf_adds(b, "<th>baseline RULER</th><th>baseline NoLiMa</th>");
    buf_adds(b, "</tr></thead><tbody>");
    size_t i;
    const json_t *k;
    json_array_foreach(html_jget(e, "kinds"), i, k)
    {
        const char *name = html_jstr(k, "kind", "?");
        buf_adds(b, "<tr><td>");
        html_esc(b, name, 0);
        buf_adds(b, "</td>");
        eff_cell(b, html_jget(k, "effective_length"), "ruler");
        eff_cell(b, html_jget(k, "effective_length"), "nolima");
        if (x) {
            const json_t *bk = kind_of(x, name);
            eff_cell(b, html_jget(bk, "effective_length"), "ruler");
            eff_cell(b, html_jget(bk, "effective_length"), "nolima");
        }
        buf_adds(b, "</tr>\n");
    }
    buf_adds(b, "<tr class=\"all\"><td>all kinds</td>");
    eff_cell(b, html_jget(e, "effective_length"), "ruler");
    eff_cell(b, html_jget(e, "effective_length"), "nolima");
    if (x) {
        eff_cell(b, html_jget(x, "effective_length"), "ruler");
        eff_cell(b, html_jget(x, "effective_length"), "nolima");
    }
    buf_adds(b, "</tr></tbody></table>\n");
}

static int cmp_outcome(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    if (!strcmp(x, "pass") || !strcmp(y, "pass"))
        return strcmp(y, "pass") ? -1 : strcmp(x, "pass") ? 1 : 0;
    return strcmp(x, y);
}

static void outcome_row(struct buf *b, const json_t *t, const char **names,
                        size_t n)
{
    buf_printf(b, "<td class=\"n\">%lld</td>", html_jint(t, "cases", 0));
    for (size_t o = 0; o < n; o++)
        buf_printf(b, "<td class=\"n\">%lld</td>",
                   html_jint(html_jget(t, "outcomes"), names[o], 0));
    buf_printf(b, "<td class=\"n\">%lld</td></tr>\n",
               html_jint(t, "no_context_replies", 0));
}

static void failures_table(struct buf *b, const json_t *side, const char *who)
{
    const char *names[32];
    size_t n = 0, i;
    const json_t *k;
    const char *key;
    const json_t *v;
    json_array_foreach(html_jget(side, "kinds"), i, k)
        json_object_foreach((json_t *)html_jget(k, "outcomes"), key, v)
            add_str(names, &n, 32, key);
    qsort(names, n, sizeof(*names), cmp_outcome);
    buf_adds(b, "<h3>Failures by classification (");
    html_esc(b, who, 0);
    buf_adds(b, ")</h3><table><thead><tr><th>kind</th><th>cases</th>");
    for (size_t o = 0; o < n; o++) {
        buf_adds(b, "<th>");
        html_esc(b, names[o], 0);
        buf_adds(b, "</th>");
    }
    buf_adds(b, "<th>no-context replies</th></tr></thead><tbody>");
    json_array_foreach(html_jget(side, "kinds"), i, k)
    {
        buf_adds(b, "<tr><td>");
        html_esc(b, html_jstr(k, "kind", "?"), 0);
        buf_adds(b, "</td>");
        outcome_row(b, k, names, n);
    }
    buf_adds(b, "<tr class=\"all\"><td>all kinds</td>");
    outcome_row(b, side, names, n);
    buf_adds(b, "</tbody></table>\n");
}

static void pairs_row(struct buf *b, const char *name, const json_t *p)
{
    buf_adds(b, "<tr><td>");
    html_esc(b, name, 0);
    buf_printf(
        b,
        "</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
        "<td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
        "<td class=\"n\">",
        html_jint(p, "both_pass", 0), html_jint(p, "endpoint_only_pass", 0),
        html_jint(p, "baseline_only_pass", 0), html_jint(p, "both_fail", 0));
    html_fmt_sig(b, html_jnum(p, "p_value", NAN));
    buf_printf(b, "</td><td>%s</td></tr>\n",
               json_is_true(html_jget(p, "significant")) ? "<b>significant</b>"
                                                         : "no");
}

static void comparison_table(struct buf *b, const json_t *cmp,
                             const json_t *side)
{
    if (!cmp)
        return;
    buf_adds(b, "<h3>Endpoint against baseline (paired cases, McNemar "
                "exact)</h3><table><thead><tr><th>kind</th><th>both pass</th>"
                "<th>endpoint only</th><th>baseline only</th><th>both fail"
                "</th><th>p</th><th></th></tr></thead><tbody>");
    pairs_row(b, "all", html_jget(cmp, "overall"));
    size_t i;
    const json_t *k;
    json_array_foreach(html_jget(side, "kinds"), i, k)
    {
        const char *name = html_jstr(k, "kind", "?");
        const json_t *p = html_jpath(cmp, "by_kind", name);
        if (p)
            pairs_row(b, name, p);
    }
    buf_adds(b, "</tbody></table>\n");
}

static void examples(struct buf *b, const json_t *side, const char *who)
{
    size_t i, shown = 0;
    const json_t *c;
    json_array_foreach(html_jget(side, "case_results"), i, c)
    {
        if (json_is_true(html_jget(c, "passed")) ||
            same_str(html_jstr(c, "outcome", ""), "not-run"))
            continue;
        if (shown >= REPORT_PROBE_EXAMPLES)
            break;
        if (!shown++) {
            buf_adds(b, "<h3>First failed cases (");
            html_esc(b, who, 0);
            buf_adds(b, ")</h3><table class=\"cases\"><thead><tr><th>kind"
                        "</th><th>length</th><th>depth</th><th>variant</th>"
                        "<th>outcome</th><th>prompt / expected tokens</th>"
                        "<th>reply or error</th></tr></thead><tbody>");
        }
        buf_adds(b, "<tr><td>");
        html_esc(b, html_jstr(c, "kind", "?"), 0);
        buf_adds(b, "</td><td class=\"n\">");
        html_fmt_tokens(b, html_jint(c, "length", 0));
        buf_printf(b, "</td><td class=\"n\">%lld</td><td>",
                   html_jint(c, "depth", 0));
        html_esc(b, html_jstr(c, "variant", "-"), 0);
        buf_adds(b, "</td><td>");
        html_esc(b, html_jstr(c, "outcome", "?"), 0);
        buf_printf(b, "</td><td class=\"n\">%lld / %lld</td><td><q>",
                   html_jint(c, "prompt_tokens", 0),
                   html_jint(c, "expected_tokens", 0));
        html_esc(b, html_jstr(c, "reply", ""), 400);
        buf_adds(b, "</q>");
        if (html_jstr(c, "error", NULL)) {
            buf_adds(b, " <span class=\"err\">");
            html_esc(b, html_jstr(c, "error", ""), 300);
            buf_adds(b, "</span>");
        }
        buf_adds(b, "</td></tr>\n");
    }
    if (shown)
        buf_adds(b, "</tbody></table>\n");
}

static void summary_row(struct buf *b, const char *who, const json_t *side)
{
    buf_adds(b, "<tr><td>");
    html_esc(b, who, 0);
    buf_printf(b,
               "</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
               "<td class=\"n\">",
               html_jint(side, "cases", 0), html_jint(side, "passed", 0));
    html_fmt_fixed(b, 100 * html_jnum(side, "pass_rate", NAN), 1);
    buf_adds(b, "%</td><td class=\"n\">");
    const json_t *w = html_jget(side, "wilson95");
    html_fmt_fixed(b, 100 * json_number_value(json_array_get(w, 0)), 1);
    buf_adds(b, "-");
    html_fmt_fixed(b, 100 * json_number_value(json_array_get(w, 1)), 1);
    buf_adds(b, "%</td></tr>\n");
}

/* The verdict's word ("PASS", "FAIL", "INCONCLUSIVE": the document's
 * "verdict") into w, and the terminal's line after its word
 * ("verdict_line") in *rest. A run stored before they were kept has
 * none: INCONCLUSIVE, fail closed. */
static void verdict_of(const json_t *doc, char w[16], const char **rest)
{
    const char *v = html_jstr(doc, "verdict", NULL);
    const char *line = html_jstr(doc, "verdict_line", NULL);
    const char *colon = line ? strchr(line, ':') : NULL;
    if (!v ||
        (strcmp(v, "PASS") && strcmp(v, "FAIL") && strcmp(v, "INCONCLUSIVE"))) {
        snprintf(w, 16, "INCONCLUSIVE");
        *rest = "this run was stored without its verdict (probe stores it "
                "since the report shows it)";
        return;
    }
    snprintf(w, 16, "%s", v);
    *rest = colon ? colon + 1 + (colon[1] == ' ') : "";
}

/* probe's "where it breaks and why" per kind (the terminal's lines, kept
 * in the document as each kind's "why"); none: every case passed. */
static size_t causes(struct buf *b, const json_t *side, bool reasoning)
{
    size_t i, n = 0;
    const json_t *k;
    json_array_foreach(html_jget(side, "kinds"), i, k)
    {
        const char *why = html_jstr(k, "why", NULL);
        if (!why)
            continue;
        buf_adds(b, n++ ? "<li><b>" : "<ul class=\"causes\"><li><b>");
        html_esc(b, html_jstr(k, "kind", "?"), 0);
        buf_adds(b, "</b>: ");
        html_esc(b, why, 0);
        const char *rw =
            html_jstr(html_jget(k, "reasoning_fields"), "conclusion", NULL);
        if (reasoning && rw) {
            buf_adds(b, "<br>");
            html_esc(b, rw, 0);
        }
        buf_adds(b, "</li>");
    }
    if (n)
        buf_adds(b, "</ul>");
    return n;
}

void rprobe_summary(const json_t *doc, struct buf *b)
{
    char w[16];
    const char *rest;
    verdict_of(doc, w, &rest);
    buf_adds(b, "<li class=\"sum\" id=\"sum-probe\"><a href=\"#probe\">"
                "probe</a> <span class=\"v ");
    html_esc(b, w, 0);
    buf_adds(b, "\">");
    html_esc(b, w, 0);
    buf_adds(b, "</span> ");
    html_esc(b, rest, 0);
    if (!causes(b, html_jget(doc, "results"), false) &&
        json_array_size(html_jpath(doc, "results", "kinds")))
        buf_adds(b, " Every finished case passed.");
    buf_adds(b, "</li>\n");
}

int report_probe_section(const json_t *doc, struct buf *b)
{
    if (!doc)
        return 0;
    const json_t *e = html_jget(doc, "results"),
                 *x = html_jget(doc, "baseline_results");
    buf_adds(b, "<section id=\"probe\"><h2>probe: where recall breaks</h2>");
    if (json_is_true(html_jget(doc, "interrupted")))
        buf_adds(b, "<p class=\"warn\">The run was interrupted: not every "
                    "case finished.</p>");
    char w[16];
    const char *rest;
    verdict_of(doc, w, &rest);
    buf_adds(b, "<p class=\"verdict\">Verdict: <span class=\"v ");
    html_esc(b, w, 0);
    buf_adds(b, "\">");
    html_esc(b, w, 0);
    buf_adds(b, "</span> ");
    html_esc(b, rest, 0);
    buf_adds(b, "</p><h3 id=\"probe-why\">Where it breaks and why "
                "(endpoint)</h3>");
    if (!causes(b, e, true))
        buf_adds(b, "<p>Every finished case passed.</p>");
    if (x) {
        buf_adds(b, "<h3>Where it breaks and why (baseline)</h3>");
        if (!causes(b, x, true))
            buf_adds(b, "<p>Every finished case passed.</p>");
    }
    buf_adds(b, "<table><thead><tr><th></th><th>cases</th><th>passed</th>"
                "<th>pass rate</th><th>95% CI</th></tr></thead><tbody>");
    summary_row(b, "endpoint", e);
    if (x)
        summary_row(b, "baseline", x);
    buf_adds(b, "</tbody></table>\n");
    heatmaps(b, doc);
    effective_table(b, doc);
    failures_table(b, e, "endpoint");
    if (x)
        failures_table(b, x, "baseline");
    comparison_table(b, html_jget(doc, "comparison"), e);
    examples(b, e, "endpoint");
    if (x)
        examples(b, x, "baseline");
    buf_adds(b, "</section>\n");
    return 0;
}
