/*
 * chart: the line charts of the report (drift's metrics against position,
 * the live sessions' recall and reasoning against turn). The frame with
 * its grid and tick labels, a series as a polyline with a marker per
 * point and optional whiskers, and a key of a series' style for a legend.
 * Series differ by marker shape and dash as well as colour (Okabe-Ito),
 * so that they stay apart in grey print and for readers with colour-vision
 * deficiencies. Style 0 and 1 are the two series drift draws.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

static const char *const cls[CHART_STYLES] = {"s1", "s2", "s3", "s4",
                                              "s5", "s6", "s7", "s8"};
static const char *const group_cls[3] = {"", " g2", " g3"};

const char *chart_class(unsigned style)
{
    return cls[style % CHART_STYLES];
}

static const char *group_of(unsigned style)
{
    return group_cls[(style / CHART_STYLES) % 3];
}

/* Shapes by slot: circle, square, triangle up, diamond, triangle down,
 * ring, cross, plus; each about 7 pixels across. */
void chart_marker(struct buf *b, unsigned style, double x, double y)
{
    const char *c = chart_class(style);
    switch (style % CHART_STYLES) {
    case 0:
        buf_printf(b,
                   "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"/>",
                   c, x, y);
        break;
    case 1:
        buf_printf(b,
                   "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"7\" "
                   "height=\"7\"/>",
                   c, x - 3.5, y - 3.5);
        break;
    case 2:
        buf_printf(b, "<path class=\"%s\" d=\"M%.1f %.1fl4 7h-8z\"/>", c, x,
                   y - 4);
        break;
    case 3:
        buf_printf(b, "<path class=\"%s\" d=\"M%.1f %.1fl4 4l-4 4l-4 -4z\"/>",
                   c, x, y - 4);
        break;
    case 4:
        buf_printf(b, "<path class=\"%s\" d=\"M%.1f %.1fl4 -7h-8z\"/>", c, x,
                   y + 4);
        break;
    case 5:
        buf_printf(b,
                   "<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"/>",
                   c, x, y);
        break;
    case 6:
        buf_printf(b, "<path class=\"%s\" d=\"M%.1f %.1fl7 7m0 -7l-7 7\"/>", c,
                   x - 3.5, y - 3.5);
        break;
    default:
        buf_printf(b, "<path class=\"%s\" d=\"M%.1f %.1fh8m-4 -4v8\"/>", c,
                   x - 4, y);
    }
}

static void tick_label(struct buf *b, const struct axis *a, double v)
{
    if (a->log && (v >= 1e4 || v < 1e-2))
        buf_printf(b, "1e%d", (int)lround(log10(v)));
    else if (v >= 1024 && fmod(v, 1024) == 0)
        html_fmt_tokens(b, (long long)v);
    else
        buf_printf(b, "%g", v);
}

void chart_axes(struct buf *b, const struct axis *X, const struct axis *Y,
                const char *xlabel)
{
    double t[16];
    size_t n = html_axis_ticks(X, t, 16);
    buf_printf(b,
               "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" "
               "height=\"%d\"/>",
               CHART_PL, CHART_PT, CHART_W - CHART_PL - CHART_PR,
               CHART_H - CHART_PT - CHART_PB);
    for (size_t i = 0; i < n; i++) {
        double x = html_axis_map(X, t[i]);
        buf_printf(b,
                   "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" "
                   "y2=\"%d\"/><text x=\"%.1f\" y=\"%d\" "
                   "text-anchor=\"middle\">",
                   x, x, CHART_PT, CHART_H - CHART_PB, x,
                   CHART_H - CHART_PB + 14);
        tick_label(b, X, t[i]);
        buf_adds(b, "</text>");
    }
    buf_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
               (CHART_W + CHART_PL) / 2, CHART_H - 6);
    html_esc(b, xlabel, 0);
    buf_adds(b, "</text>");
    n = html_axis_ticks(Y, t, 16);
    for (size_t i = 0; i < n; i++) {
        double y = html_axis_map(Y, t[i]);
        buf_printf(b,
                   "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" "
                   "y2=\"%.1f\"/><text x=\"%d\" y=\"%.1f\" "
                   "text-anchor=\"end\">",
                   CHART_PL, CHART_W - CHART_PR, y, y, CHART_PL - 4, y + 4);
        tick_label(b, Y, t[i]);
        buf_adds(b, "</text>");
    }
}

void chart_series(struct buf *b, const struct axis *X, const struct axis *Y,
                  const struct chart_series *s)
{
    const char *c = chart_class(s->style);
    if (!s->n)
        return;
    buf_printf(b, "<polyline class=\"%s%s\" points=\"", c, group_of(s->style));
    for (size_t i = 0; i < s->n; i++)
        buf_printf(b, "%s%.1f,%.1f", i ? " " : "", html_axis_map(X, s->x[i]),
                   html_axis_map(Y, s->y[i]));
    buf_adds(b, "\"/>");
    for (size_t i = 0; i < s->n; i++) {
        double x = html_axis_map(X, s->x[i]);
        if (s->ci && s->ci[i])
            buf_printf(b,
                       "<path class=\"ci %s\" d=\"M%.1f %.1fV%.1fM%.1f "
                       "%.1fh8M%.1f %.1fh8\"/>",
                       c, x, html_axis_map(Y, s->lo[i]),
                       html_axis_map(Y, s->hi[i]), x - 4,
                       html_axis_map(Y, s->lo[i]), x - 4,
                       html_axis_map(Y, s->hi[i]));
        chart_marker(b, s->style, x, html_axis_map(Y, s->y[i]));
    }
}

void chart_key(struct buf *b, unsigned style)
{
    buf_printf(b,
               "<svg class=\"key\" viewBox=\"0 0 30 12\" width=\"30\" "
               "height=\"12\" role=\"img\"><line class=\"%s%s\" x1=\"2\" "
               "x2=\"28\" y1=\"6\" y2=\"6\"/>",
               chart_class(style), group_of(style));
    chart_marker(b, style, 15, 6);
    buf_adds(b, "</svg>");
}
