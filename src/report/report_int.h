/*
 * report_int: what the files of src/report/ share: escaping, fixed number
 * formatting, the colour scales and small JSON accessors. Not a contract
 * for anyone outside src/report/. Each name carries the prefix of the
 * file that defines it: html_ (html.c), chart_ (chart.c).
 */
#ifndef REPORT_REPORT_INT_H
#define REPORT_REPORT_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

/* Appends s escaped for HTML text and attribute values (& < > " '):
 * invalid UTF-8 and control characters other than tab and newline become
 * U+FFFD, so no byte of s can end an element, an attribute or a comment.
 * At most max bytes of s are taken (0: all), cut on a character boundary,
 * with an ellipsis when cut. */
void html_esc(struct buf *b, const char *s, size_t max);
/* The same for len bytes that may hold NULs (shown as U+FFFD). */
void html_escn(struct buf *b, const char *s, size_t len, size_t max);
/* html_esc of a JSON value: strings as their text, others compact with
 * sorted keys; null and absent as "-". */
void html_esc_json(struct buf *b, const json_t *v, size_t max);

/* Fixed formats: "%.*f" with '-' for NaN or a missing number. */
void html_fmt_fixed(struct buf *b, double v, int prec);
/* 3 significant digits in plain or e notation ("%.3g"), '-' for NaN. */
void html_fmt_sig(struct buf *b, double v);
/* A token count: 4096 -> "4k", 1500 -> "1500". */
void html_fmt_tokens(struct buf *b, long long v);
/* UTC "YYYY-MM-DD HH:MM:SS UTC". */
void html_fmt_time(struct buf *b, long long t);

/* Sequential colour-blind-safe scale (viridis) for t in [0, 1] -> "#rrggbb"
 * in out[8]; *dark_bg tells whether white text reads on it. */
void html_color_seq(double t, char out[8], bool *dark_bg);
/* Diverging scale (ColorBrewer PuOr) for t in [-1, 1]. */
void html_color_div(double t, char out[8], bool *dark_bg);

/* JSON accessors: the member or a default. */
double html_jnum(const json_t *o, const char *k, double dflt);
long long html_jint(const json_t *o, const char *k, long long dflt);
const char *html_jstr(const json_t *o, const char *k, const char *dflt);
const json_t *html_jget(const json_t *o, const char *k);
const json_t *html_jpath(const json_t *o, const char *a, const char *b);

/* A figure's axes: linear or log10, data range -> pixel range. */
struct axis {
    double lo, hi; /* data */
    double p0, p1; /* pixels */
    bool log;
};
double html_axis_map(const struct axis *a, double v);
/* Ticks for a: powers of ten for log axes, 5 nice steps for linear; n
 * ticks written to out (at most max). */
size_t html_axis_ticks(const struct axis *a, double *out, size_t max);

/* Line charts (chart.c): CHART_W x CHART_H pixels, the plot inside the
 * margins. A series' style picks its marker shape, dash and colour (8
 * slots, Okabe-Ito and grey); styles past 8 repeat a slot with a thicker
 * (8-15) or thinner (16-23) line, so up to CHART_MAX_SERIES series differ. */
#define CHART_W 660
#define CHART_H 250
#define CHART_PL 64
#define CHART_PR 16
#define CHART_PT 22
#define CHART_PB 40
#define CHART_STYLES 8
#define CHART_MAX_SERIES 24

struct chart_series {
    const char *name;
    unsigned style;
    size_t n;
    const double *x, *y;
    const double *lo, *hi; /* whiskers where ci[i]; ci may be NULL */
    const bool *ci;
};
/* The CSS class of a style ("s1".."s8"). */
const char *chart_class(unsigned style);
/* The frame, the grid lines and tick labels of both axes, the x label. */
void chart_axes(struct buf *b, const struct axis *X, const struct axis *Y,
                const char *xlabel);
/* A polyline of the points, whiskers where given, a marker per point. */
void chart_series(struct buf *b, const struct axis *X, const struct axis *Y,
                  const struct chart_series *s);
void chart_marker(struct buf *b, unsigned style, double x, double y);
/* A small inline SVG of the style's line and marker, for a legend in the
 * page's text. */
void chart_key(struct buf *b, unsigned style);

/* The legend of html_color_seq as an SVG strip (0..100%), with the few-cases
 * mark explained when few (the maps draw it). */
void html_svg_seq_legend(struct buf *b, const char *label, bool few);
void html_svg_div_legend(struct buf *b, const char *label);

/* One line of the page's summary block per section (an <li> linking to the
 * section): its verdict word and cause. Each in its section's file. */
void rprobe_summary(const json_t *doc, struct buf *b);
void rlive_summary(const json_t *doc, struct buf *b);
void rdrift_summary(const json_t *doc, struct buf *b);
void raudit_summary(const json_t *doc, struct buf *b);
void rbisect_summary(const json_t *doc, struct buf *b);

#endif
