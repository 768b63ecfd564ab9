/*
 * rlive: the "Live sessions" section of the report, from a
 * fidelity-probe-live/1 document (docs/PROBE.md, "Live sessions"). Per
 * cell the turn at which recall breaks (median and range over the seeds,
 * how many sessions never broke), two line charts with one series per cell
 * (recall rate by question turn; median reasoning bytes by turn), the
 * cell that breaks first in a sentence, and McNemar's exact test of every
 * other cell against it. Cell names hold the --vary values a user wrote
 * and session errors what a server answered: all escaped.
 */
#include <math.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

#define MAXT 64 /* PROBE_LIVE_MAX_TURNS */

/* A turn number as a break turn: "never" past the last turn. */
static void turn_text(struct buf *b, double t, long long turns)
{
    if (!isfinite(t))
        buf_addch(b, '-');
    else if (turns > 0 && t > (double)turns)
        buf_adds(b, "never");
    else if (t == floor(t))
        buf_printf(b, "%.0f", t);
    else
        buf_printf(b, "%.1f", t);
}

/* The cells' legend under a chart: each cell's key and name. */
static void key_list(struct buf *b, const json_t *cells, size_t n)
{
    size_t i;
    const json_t *c;
    buf_adds(b, "<ul class=\"key\">");
    json_array_foreach(cells, i, c)
    {
        if (i >= n)
            break;
        buf_adds(b, "<li>");
        chart_key(b, (unsigned)i);
        html_esc(b, html_jstr(c, "cell", "?"), 200);
        buf_adds(b, "</li>");
    }
    buf_adds(b, "</ul>");
}

/* One series per cell of by_turn[] values: recall rate in percent at the
 * question turns, or the median reasoning bytes at every turn. */
static void live_chart(struct buf *b, const json_t *doc, bool recall)
{
    const json_t *cells = html_jget(doc, "cells");
    size_t nc = json_array_size(cells), i, k;
    const json_t *c, *t;
    long long turns = html_jint(doc, "turns", 0);
    double ymax = 0;
    if (nc > CHART_MAX_SERIES)
        nc = CHART_MAX_SERIES;
    double xs[CHART_MAX_SERIES][MAXT], ys[CHART_MAX_SERIES][MAXT];
    struct chart_series s[CHART_MAX_SERIES];
    json_array_foreach(cells, i, c)
    {
        if (i >= nc)
            break;
        s[i] = (struct chart_series){.name = html_jstr(c, "cell", "?"),
                                     .style = (unsigned)i,
                                     .x = xs[i],
                                     .y = ys[i]};
        json_array_foreach(html_jget(c, "by_turn"), k, t)
        {
            const json_t *r = html_jget(t, "recall");
            double v = recall ? 100 * html_jnum(r, "rate", NAN)
                              : html_jnum(t, "reasoning_bytes_median", NAN);
            if (s[i].n >= MAXT || (recall && !r) || !isfinite(v))
                continue;
            xs[i][s[i].n] = (double)html_jint(t, "turn", 0);
            ys[i][s[i].n++] = v;
            ymax = v > ymax ? v : ymax;
        }
    }
    struct axis X = {.lo = 1,
                     .hi = turns > 1 ? (double)turns : 2,
                     .p0 = CHART_PL + 8,
                     .p1 = CHART_W - CHART_PR - 8};
    struct axis Y = {.lo = 0,
                     .hi = recall     ? 100
                           : ymax > 0 ? ymax * 1.15
                                      : 1,
                     .p0 = CHART_H - CHART_PB,
                     .p1 = CHART_PT};
    buf_printf(b,
               "<figure class=\"chart\"><figcaption>%s</figcaption><svg "
               "viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
               "role=\"img\">",
               recall ? "Recall by question turn (% of the seeds' answers "
                        "that held the fact)"
                      : "Reasoning bytes by turn (median over the seeds)",
               CHART_W, CHART_H, CHART_W, CHART_H);
    chart_axes(b, &X, &Y, recall ? "question turn" : "turn");
    for (i = 0; i < nc; i++)
        chart_series(b, &X, &Y, &s[i]);
    buf_adds(b, "</svg>");
    key_list(b, cells, nc);
    if (json_array_size(cells) > nc)
        buf_printf(b,
                   "<p class=\"note\">The first %d cells are drawn; the "
                   "table has them all.</p>",
                   CHART_MAX_SERIES);
    buf_adds(b, "</figure>\n");
}

static void cell_table(struct buf *b, const json_t *doc)
{
    size_t i;
    const json_t *c;
    long long turns = html_jint(doc, "turns", 0);
    buf_adds(b, "<table><thead><tr><th></th><th>cell</th><th>sessions "
                "finished</th><th>broken</th><th>breaks at (median)</th>"
                "<th>range</th><th>never broke</th><th>recall</th></tr>"
                "</thead><tbody>");
    json_array_foreach(html_jget(doc, "cells"), i, c)
    {
        const json_t *bt = html_jget(c, "break_turn");
        long long asked = html_jint(c, "asked", 0);
        buf_adds(b, "<tr><td>");
        if (i < CHART_MAX_SERIES)
            chart_key(b, (unsigned)i);
        buf_adds(b, "</td><td>");
        html_esc(b, html_jstr(c, "cell", "?"), 300);
        buf_printf(b,
                   "</td><td class=\"n\">%lld/%lld</td><td class=\"n\">%lld"
                   "</td><td class=\"n\">",
                   html_jint(c, "finished", 0), html_jint(c, "sessions", 0),
                   html_jint(c, "broken", 0));
        if (json_is_object(bt)) {
            turn_text(b, html_jnum(bt, "median", NAN), turns);
            buf_adds(b, "</td><td class=\"n\">");
            turn_text(b, html_jnum(bt, "low", NAN), turns);
            if (html_jnum(bt, "high", NAN) != html_jnum(bt, "low", NAN)) {
                buf_adds(b, "-");
                turn_text(b, html_jnum(bt, "high", NAN), turns);
            }
            buf_printf(b, "</td><td class=\"n\">%lld",
                       html_jint(bt, "never", 0));
        } else {
            buf_adds(b, "-</td><td class=\"n\">-</td><td class=\"n\">-");
        }
        buf_printf(b, "</td><td class=\"n\">%lld/%lld (",
                   html_jint(c, "recalled", 0), asked);
        html_fmt_fixed(b,
                       asked ? 100.0 * (double)html_jint(c, "recalled", 0) /
                                   (double)asked
                             : NAN,
                       0);
        buf_adds(b, "%)</td></tr>\n");
    }
    buf_adds(b, "</tbody></table>\n");
}

static void first_break(struct buf *b, const json_t *doc)
{
    const json_t *fb = html_jget(doc, "first_break");
    if (!json_is_object(fb)) {
        buf_printf(b,
                   "<p class=\"breaks\">No cell breaks within %lld turns."
                   "</p>",
                   html_jint(doc, "turns", 0));
        return;
    }
    long long sessions = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(html_jget(doc, "cells"), i, c)
    {
        if (!strcmp(html_jstr(c, "cell", ""), html_jstr(fb, "cell", "?")))
            sessions = html_jint(c, "finished", 0);
    }
    buf_adds(b, "<p class=\"breaks\">Breaks first: <b>");
    html_esc(b, html_jstr(fb, "cell", "?"), 300);
    buf_adds(b, "</b>, at turn ");
    turn_text(b, html_jnum(fb, "median_turn", NAN), html_jint(doc, "turns", 0));
    buf_printf(b, " (median of %lld).</p>", sessions);
}

static void mcnemar_table(struct buf *b, const json_t *doc)
{
    const json_t *fb = html_jget(doc, "first_break");
    size_t i;
    const json_t *c;
    if (!json_is_object(fb) || json_array_size(html_jget(doc, "cells")) < 2)
        return;
    buf_adds(b, "<h3>Against the cell that breaks first (paired: the same "
                "seed and question turn, McNemar exact)</h3><table><thead>"
                "<tr><th>cell</th><th>both recall</th><th>this only</th>"
                "<th>first-breaking only</th><th>neither</th><th>p</th>"
                "<th></th></tr></thead><tbody>");
    json_array_foreach(html_jget(doc, "cells"), i, c)
    {
        const json_t *p = html_jget(c, "vs_first");
        if (!p)
            continue;
        buf_adds(b, "<tr><td>");
        html_esc(b, html_jstr(c, "cell", "?"), 300);
        buf_printf(b,
                   "</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
                   "<td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
                   "<td class=\"n\">",
                   html_jint(p, "both_recall", 0), html_jint(p, "this_only", 0),
                   html_jint(p, "other_only", 0), html_jint(p, "neither", 0));
        html_fmt_sig(b, html_jnum(p, "p_value", NAN));
        buf_printf(b, "</td><td>%s</td></tr>\n",
                   json_is_true(html_jget(p, "significant"))
                       ? "<b>significant</b>"
                       : "no");
    }
    buf_adds(b, "</tbody></table>\n");
}

/* Sessions that ended with an error (at most 12), with what the server or
 * the client said. */
static void errors(struct buf *b, const json_t *doc)
{
    size_t i, shown = 0, total = 0;
    const json_t *s;
    json_array_foreach(html_jget(doc, "sessions"), i, s)
    {
        if (!html_jstr(s, "error", NULL))
            continue;
        if (total++ >= 12)
            continue;
        if (!shown++)
            buf_adds(b, "<h3>Sessions that ended with an error</h3><table "
                        "class=\"cases\"><thead><tr><th>cell</th><th>seed"
                        "</th><th>turns played</th><th>error</th></tr>"
                        "</thead><tbody>");
        const json_t *c = json_array_get(html_jget(doc, "cells"),
                                         (size_t)html_jint(s, "cell", -1));
        buf_adds(b, "<tr><td>");
        html_esc(b, html_jstr(c, "cell", "?"), 300);
        buf_printf(b,
                   "</td><td class=\"n\">%lld</td><td class=\"n\">%lld</td>"
                   "<td><span class=\"err\">",
                   html_jint(s, "seed_index", 0) + 1,
                   html_jint(s, "turns_played", 0));
        html_esc(b, html_jstr(s, "error", ""), 300);
        buf_adds(b, "</span></td></tr>\n");
    }
    if (shown)
        buf_adds(b, "</tbody></table>\n");
    if (total > shown)
        buf_printf(b,
                   "<p class=\"note\">%zu more sessions ended with an "
                   "error (the JSON has them all).</p>",
                   total - shown);
}

void rlive_summary(const json_t *doc, struct buf *b)
{
    const json_t *fb = html_jget(doc, "first_break");
    long long done = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(html_jget(doc, "cells"), i, c) done +=
        html_jint(c, "finished", 0);
    /* the command's word when the document has it (as the exit code),
     * else from the breaks */
    const char *w = html_jstr(doc, "verdict", NULL);
    if (!w ||
        (strcmp(w, "PASS") && strcmp(w, "FAIL") && strcmp(w, "INCONCLUSIVE")))
        w = json_is_object(fb) ? "FAIL" : done ? "PASS" : "INCONCLUSIVE";
    buf_printf(b,
               "<li class=\"sum\" id=\"sum-probe-live\"><a "
               "href=\"#probe-live\">live sessions</a> <span class=\"v %s\">"
               "%s</span> ",
               w, w);
    if (json_is_object(fb)) {
        buf_adds(b, "recall breaks first in <b>");
        html_esc(b, html_jstr(fb, "cell", "?"), 300);
        buf_adds(b, "</b>, at turn ");
        turn_text(b, html_jnum(fb, "median_turn", NAN),
                  html_jint(doc, "turns", 0));
        buf_adds(b, " (median over its seeds).");
    } else if (done)
        buf_printf(b, "no cell breaks within %lld turns.",
                   html_jint(doc, "turns", 0));
    else
        buf_adds(b, "no session finished.");
    buf_adds(b, "</li>\n");
}

int report_live_section(const json_t *doc, struct buf *b)
{
    size_t i;
    const json_t *q;
    if (!doc)
        return 0;
    buf_adds(b, "<section id=\"probe-live\"><h2>Live sessions: where recall "
                "breaks when the model's own replies are carried forward"
                "</h2>");
    buf_printf(b,
               "<p>%lld turns a session, %lld seed%s a cell; the planted "
               "facts are asked at turns",
               html_jint(doc, "turns", 0), html_jint(doc, "seeds", 0),
               html_jint(doc, "seeds", 0) == 1 ? "" : "s");
    json_array_foreach(html_jget(doc, "question_turns"), i, q) buf_printf(
        b, "%s%lld", i ? ", " : " ", (long long)json_integer_value(q));
    buf_adds(b, ". A session that never breaks counts as turns + 1 in the "
                "median and range.</p>");
    if (json_is_true(html_jget(doc, "interrupted")))
        buf_adds(b, "<p class=\"warn\">The run was interrupted: not every "
                    "session finished.</p>");
    first_break(b, doc);
    cell_table(b, doc);
    if (json_array_size(html_jget(doc, "cells"))) {
        live_chart(b, doc, true);
        live_chart(b, doc, false);
    }
    mcnemar_table(b, doc);
    errors(b, doc);
    buf_adds(b, "</section>\n");
    return 0;
}
