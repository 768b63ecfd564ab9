/*
 * html: the helpers every section of the report uses. Escaping (every byte
 * from the data goes through html_esc), fixed number formats so the page is
 * the same for the same input, the colour scales (viridis, van der Walt and
 * Smith for matplotlib 2015; ColorBrewer PuOr, Brewer 2003; both chosen for
 * readers with colour-vision deficiencies) and the axes of the SVG figures.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/utf8.h"
#include "report/report.h"
#include "report/report_int.h"

void html_escn(struct buf *b, const char *s, size_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, lim = max && max < len ? max : len;
    while (i < len) {
        size_t k = utf8_seq_len(p + i, len - i);
        if (i + (k ? k : 1) > lim) {
            buf_adds(b, "\xe2\x80\xa6"); /* ... */
            return;
        }
        if (!k) {
            buf_adds(b, "\xef\xbf\xbd");
            i++;
            continue;
        }
        unsigned char c = p[i];
        switch (c) {
        case '&':
            buf_adds(b, "&amp;");
            break;
        case '<':
            buf_adds(b, "&lt;");
            break;
        case '>':
            buf_adds(b, "&gt;");
            break;
        case '"':
            buf_adds(b, "&quot;");
            break;
        case '\'':
            buf_adds(b, "&#39;");
            break;
        default:
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
                buf_adds(b, "\xef\xbf\xbd");
            else
                buf_add(b, p + i, k);
        }
        i += k;
    }
}

void html_esc(struct buf *b, const char *s, size_t max)
{
    if (s)
        html_escn(b, s, strlen(s), max);
}

void html_esc_json(struct buf *b, const json_t *v, size_t max)
{
    if (!v || json_is_null(v)) {
        buf_addch(b, '-');
        return;
    }
    if (json_is_string(v)) {
        html_escn(b, json_string_value(v), json_string_length(v), max);
        return;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY |
                                JSON_REAL_PRECISION(6));
    html_esc(b, s ? s : "-", max);
    free(s);
}

void html_fmt_fixed(struct buf *b, double v, int prec)
{
    if (!isfinite(v))
        buf_addch(b, '-');
    else
        buf_printf(b, "%.*f", prec, v == 0 ? 0.0 : v); /* no "-0.0" */
}

void html_fmt_sig(struct buf *b, double v)
{
    if (!isfinite(v))
        buf_addch(b, '-');
    else
        buf_printf(b, "%.3g", v == 0 ? 0.0 : v);
}

void html_fmt_tokens(struct buf *b, long long v)
{
    if (v > 0 && v % 1024 == 0)
        buf_printf(b, "%lldk", v / 1024);
    else
        buf_printf(b, "%lld", v);
}

void html_fmt_time(struct buf *b, long long t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    char s[40];
    if (!gmtime_r(&tt, &tm) ||
        !strftime(s, sizeof(s), "%Y-%m-%d %H:%M:%S UTC", &tm))
        snprintf(s, sizeof(s), "%lld", t);
    buf_adds(b, s);
}

/* ---- colour scales ---- */

static const unsigned char viridis[9][3] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2c, 0x7a}, {0x3b, 0x51, 0x8b},
    {0x2c, 0x71, 0x8e}, {0x21, 0x90, 0x8d}, {0x27, 0xad, 0x81},
    {0x5c, 0xc8, 0x63}, {0xaa, 0xdc, 0x32}, {0xfd, 0xe7, 0x25}};
static const unsigned char puor[9][3] = {
    {0xb3, 0x58, 0x06}, {0xe0, 0x82, 0x14}, {0xfd, 0xb8, 0x63},
    {0xfe, 0xe0, 0xb6}, {0xf7, 0xf7, 0xf7}, {0xd8, 0xda, 0xeb},
    {0xb2, 0xab, 0xd2}, {0x80, 0x73, 0xac}, {0x54, 0x27, 0x88}};

static void lerp(const unsigned char st[9][3], double t, char out[8],
                 bool *dark)
{
    if (!(t >= 0))
        t = 0;
    if (t > 1)
        t = 1;
    double x = t * 8;
    int i = (int)floor(x);
    if (i > 7)
        i = 7;
    double f = x - i;
    int c[3];
    for (int k = 0; k < 3; k++)
        c[k] = (int)lround(st[i][k] + f * (st[i + 1][k] - st[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
    /* relative luminance (sRGB weights, no linearisation: enough to pick
     * black or white text) */
    double y = (0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]) / 255;
    *dark = y < 0.45;
}

void html_color_seq(double t, char out[8], bool *dark_bg)
{
    lerp(viridis, t, out, dark_bg);
}

void html_color_div(double t, char out[8], bool *dark_bg)
{
    lerp(puor, (t + 1) / 2, out, dark_bg);
}

/* ---- JSON accessors ---- */

const json_t *html_jget(const json_t *o, const char *k)
{
    return json_is_object(o) ? json_object_get(o, k) : NULL;
}

const json_t *html_jpath(const json_t *o, const char *a, const char *b)
{
    return html_jget(html_jget(o, a), b);
}

double html_jnum(const json_t *o, const char *k, double dflt)
{
    const json_t *v = html_jget(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

long long html_jint(const json_t *o, const char *k, long long dflt)
{
    const json_t *v = html_jget(o, k);
    if (json_is_integer(v))
        return json_integer_value(v);
    return json_is_real(v) ? llround(json_real_value(v)) : dflt;
}

const char *html_jstr(const json_t *o, const char *k, const char *dflt)
{
    const json_t *v = html_jget(o, k);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

/* ---- axes ---- */

double html_axis_map(const struct axis *a, double v)
{
    double lo = a->lo, hi = a->hi;
    if (a->log) {
        v = log10(v > 0 ? v : lo);
        lo = log10(lo);
        hi = log10(hi);
    }
    if (v < lo)
        v = lo;
    if (v > hi)
        v = hi;
    return hi > lo ? a->p0 + (v - lo) / (hi - lo) * (a->p1 - a->p0)
                   : (a->p0 + a->p1) / 2;
}

size_t html_axis_ticks(const struct axis *a, double *out, size_t max)
{
    size_t n = 0;
    if (a->log) {
        for (double e = floor(log10(a->lo)); e <= ceil(log10(a->hi)) && n < max;
             e++) {
            double v = pow(10, e);
            if (v >= a->lo * 0.999 && v <= a->hi * 1.001)
                out[n++] = v;
        }
        return n;
    }
    double span = a->hi - a->lo;
    if (!(span > 0))
        return 0;
    double step = pow(10, floor(log10(span / 4)));
    if (span / step > 8)
        step *= 2;
    if (span / step > 8)
        step *= 2.5;
    for (double v = ceil(a->lo / step) * step;
         v <= a->hi + step * 1e-9 && n < max; v += step)
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

/* ---- legends ---- */

static void strip(struct buf *b, const char *label, bool div, bool few)
{
    buf_printf(b, "<svg class=\"legend\" viewBox=\"0 0 420 46\" width=\"420\" "
                  "height=\"46\" role=\"img\"><text x=\"0\" y=\"12\">");
    html_esc(b, label, 0);
    buf_adds(b, "</text>");
    for (int i = 0; i < 20; i++) {
        char c[8];
        bool dk;
        double t = (i + 0.5) / 20;
        if (div)
            html_color_div(2 * t - 1, c, &dk);
        else
            html_color_seq(t, c, &dk);
        buf_printf(b,
                   "<rect x=\"%d\" y=\"18\" width=\"12\" height=\"12\" "
                   "fill=\"%s\"/>",
                   i * 12, c);
    }
    if (div)
        buf_adds(b, "<text x=\"0\" y=\"42\">-100</text>"
                    "<text x=\"120\" y=\"42\" text-anchor=\"middle\">0</text>"
                    "<text x=\"240\" y=\"42\" text-anchor=\"end\">+100 "
                    "points</text>");
    else
        buf_adds(b, "<text x=\"0\" y=\"42\">0%</text>"
                    "<text x=\"120\" y=\"42\" text-anchor=\"middle\">50%</text>"
                    "<text x=\"240\" y=\"42\" text-anchor=\"end\">100%</text>");
    if (div)
        buf_adds(b, "<rect x=\"262\" y=\"18\" width=\"12\" height=\"12\" "
                    "class=\"sig\"/><text x=\"280\" y=\"28\">intervals "
                    "apart (95%)</text>");
    else if (few)
        buf_printf(b,
                   "<rect x=\"262\" y=\"18\" width=\"12\" height=\"12\" "
                   "class=\"empty\"/><path class=\"few\" d=\"M268 18h6v6z\"/>"
                   "<text x=\"280\" y=\"28\">fewer than %d cases</text>",
                   REPORT_FEW_CASES);
    buf_adds(b, "</svg>\n");
}

void html_svg_seq_legend(struct buf *b, const char *label, bool few)
{
    strip(b, label, false, few);
}

void html_svg_div_legend(struct buf *b, const char *label)
{
    strip(b, label, true, false);
}
