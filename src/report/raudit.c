/*
 * raudit: the audit section of the report, from report_audit_doc(). Per
 * session, prompt tokens against the request index (the user turn marked
 * on the axis), with a marker above each request a finding is about:
 * history rewritten (history.*), truncation suspected (truncation.*), a
 * "first message" reply (first_message.*), sampling changed (sampling.*),
 * any other warning or error; shape and colour both tell them apart. Then the
 * findings table with each finding's evidence. Every session id, rule, summary
 * and evidence string is escaped: they hold what harnesses and models wrote.
 */
#include <math.h>
#include <string.h>

#include "report/report.h"
#include "report/report_int.h"

#define W 660
#define H 230
#define PL 64
#define PR 16
#define PT 26
#define PB 40
#define MAX_SESSIONS 40
#define MAX_FINDINGS 500

enum mark { MK_REWRITE, MK_TRUNC, MK_FIRST, MK_SAMPLING, MK_OTHER, MK_N };
static const char *const mark_name[MK_N] = {
    "history rewritten", "truncation suspected", "first-message reply",
    "sampling changed", "other finding"};

static enum mark mark_of(const char *rule)
{
    static const struct {
        const char *prefix;
        enum mark m;
    } map[] = {{"history.", MK_REWRITE},
               {"truncation.", MK_TRUNC},
               {"first_message.", MK_FIRST},
               {"sampling.", MK_SAMPLING}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strncmp(rule, map[i].prefix, strlen(map[i].prefix)))
            return map[i].m;
    return MK_OTHER;
}

/* A marker of kind m centred at (x, y); shapes: triangle, square,
 * diamond, ring, cross. */
static void mark_svg(struct buf *b, enum mark m, double x, double y)
{
    switch (m) {
    case MK_REWRITE:
        buf_printf(b, "<path class=\"m0\" d=\"M%.1f %.1fl5 9h-10z\"/>", x,
                   y - 5);
        break;
    case MK_TRUNC:
        buf_printf(b,
                   "<rect class=\"m1\" x=\"%.1f\" y=\"%.1f\" width=\"9\" "
                   "height=\"9\"/>",
                   x - 4.5, y - 4.5);
        break;
    case MK_FIRST:
        buf_printf(b, "<path class=\"m2\" d=\"M%.1f %.1fl5 5l-5 5l-5 -5z\"/>",
                   x, y - 5);
        break;
    case MK_SAMPLING:
        buf_printf(b, "<circle class=\"m3\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\"/>",
                   x, y);
        break;
    default:
        buf_printf(b, "<path class=\"m4\" d=\"M%.1f %.1fl8 8m0 -8l-8 8\"/>",
                   x - 4, y - 4);
    }
}

static void legend(struct buf *b)
{
    /* HTML text beside each marker, so a name wraps instead of being cut */
    buf_adds(b, "<ul class=\"key marks\">");
    for (int m = 0; m < MK_N; m++) {
        buf_adds(b, "<li><svg viewBox=\"0 0 16 20\" width=\"16\" "
                    "height=\"20\" role=\"img\">");
        mark_svg(b, (enum mark)m, 8, 10);
        buf_printf(b, "</svg>%s</li>", mark_name[m]);
    }
    buf_adds(b, "</ul>\n");
}

/* Warnings and errors get a marker, and a sampling change whatever its
 * severity; other informational findings (the parameters sent, say) are
 * only in the table. */
static bool is_marked(const json_t *f)
{
    return strcmp(html_jstr(f, "severity", "info"), "info") ||
           !strcmp(html_jstr(f, "rule", ""), "sampling.changed");
}

/* Which marks each request of the session has (bit per enum mark). */
static void marks_of(const json_t *findings, const char *session,
                     const json_t *reqs, unsigned *bits, size_t n)
{
    size_t i, j;
    const json_t *f, *r;
    memset(bits, 0, n * sizeof(*bits));
    json_array_foreach(findings, i, f)
    {
        if (strcmp(html_jstr(f, "session", ""), session) || !is_marked(f))
            continue;
        long long id = html_jint(f, "request", -1);
        json_array_foreach(reqs, j,
                           r) if (j < n && html_jint(r, "request", -2) == id)
            bits[j] |= 1u << mark_of(html_jstr(f, "rule", ""));
    }
}

static void session_chart(struct buf *b, const json_t *t,
                          const json_t *findings)
{
    const char *sid = html_jstr(t, "session", "");
    const json_t *reqs = html_jget(t, "requests");
    size_t n = json_array_size(reqs), i;
    const json_t *r;
    if (!n)
        return;
    unsigned bits[4096];
    size_t nb = n < 4096 ? n : 4096;
    marks_of(findings, sid, reqs, bits, nb);
    double ymax = 0;
    json_array_foreach(reqs, i, r)
    {
        double v = html_jnum(r, "prompt_tokens", 0);
        ymax = v > ymax ? v : ymax;
    }
    if (ymax <= 0) {
        /* no count to draw: a flat line at 0 would claim empty prompts */
        buf_adds(b, "<figure class=\"chart\"><figcaption>session <code>");
        html_esc(b, sid, 120);
        buf_printf(b,
                   "</code>: prompt tokens unknown</figcaption><p "
                   "class=\"note unknown\">None of its %zu request%s has a "
                   "prompt token count (the server reported no usage and "
                   "no /tokenize count was taken), so there is no chart; "
                   "its findings are in the table below.</p></figure>\n",
                   n, n == 1 ? "" : "s");
        return;
    }
    struct axis X = {
        .lo = 1, .hi = n > 1 ? (double)n : 2, .p0 = PL + 8, .p1 = W - PR - 8};
    struct axis Y = {
        .lo = 0, .hi = ymax > 0 ? ymax * 1.15 : 1, .p0 = H - PB, .p1 = PT};
    buf_adds(b, "<figure class=\"chart\"><figcaption>session <code>");
    html_esc(b, sid, 120);
    buf_printf(b,
               "</code>: prompt tokens per request (%zu request%s)"
               "</figcaption><svg viewBox=\"0 0 %d %d\" width=\"%d\" "
               "height=\"%d\" role=\"img\"><rect class=\"frame\" x=\"%d\" "
               "y=\"%d\" width=\"%d\" height=\"%d\"/>",
               n, n == 1 ? "" : "s", W, H, W, H, PL, PT, W - PL - PR,
               H - PT - PB);
    double ticks[16];
    size_t nt = html_axis_ticks(&Y, ticks, 16);
    for (size_t k = 0; k < nt; k++) {
        double y = html_axis_map(&Y, ticks[k]);
        buf_printf(b,
                   "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" "
                   "y2=\"%.1f\"/><text x=\"%d\" y=\"%.1f\" "
                   "text-anchor=\"end\">%.0f</text>",
                   PL, W - PR, y, y, PL - 4, y + 4, ticks[k]);
    }
    /* the user turn under the first request of each turn, when there is
     * room for its label */
    long long last_turn = -1;
    double last_x = -100;
    json_array_foreach(reqs, i, r)
    {
        long long turn = html_jint(r, "turn", 0);
        double x = html_axis_map(&X, (double)(i + 1));
        if (turn != last_turn && x - last_x >= 26) {
            buf_printf(b,
                       "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">"
                       "%lld</text>",
                       x, H - PB + 14, turn);
            last_x = x;
        }
        last_turn = turn;
    }
    buf_printf(b,
               "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">user turn "
               "(one point per request)</text><polyline class=\"s1\" "
               "points=\"",
               (W + PL) / 2, H - 6);
    json_array_foreach(reqs, i, r) buf_printf(
        b, "%s%.1f,%.1f", i ? " " : "", html_axis_map(&X, (double)i + 1),
        html_axis_map(&Y, html_jnum(r, "prompt_tokens", 0)));
    buf_adds(b, "\"/>");
    json_array_foreach(reqs, i, r)
    {
        double x = html_axis_map(&X, (double)i + 1);
        double y = html_axis_map(&Y, html_jnum(r, "prompt_tokens", 0));
        buf_printf(b,
                   "<circle class=\"s1\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\">"
                   "<title>request %lld, turn %lld: %lld prompt tokens"
                   "</title></circle>",
                   x, y, html_jint(r, "request", 0), html_jint(r, "turn", 0),
                   html_jint(r, "prompt_tokens", 0));
        double my = y - 12;
        for (int m = 0; i < nb && m < MK_N; m++)
            if (bits[i] >> m & 1) {
                mark_svg(b, (enum mark)m, x, my < PT + 4 ? PT + 4 : my);
                my -= 11;
            }
    }
    buf_adds(b, "</svg></figure>\n");
}

static void findings_table(struct buf *b, const json_t *findings)
{
    size_t i;
    const json_t *f;
    buf_printf(b, "<h3>Findings (%zu)</h3>\n", json_array_size(findings));
    if (!json_array_size(findings)) {
        buf_adds(b, "<p>No findings.</p>");
        return;
    }
    buf_adds(b, "<table class=\"cases\"><thead><tr><th>severity</th>"
                "<th>rule</th><th>session</th><th>request</th><th>turn</th>"
                "<th>summary</th><th>evidence</th></tr></thead><tbody>");
    json_array_foreach(findings, i, f)
    {
        if (i >= MAX_FINDINGS) {
            buf_printf(b,
                       "<tr><td colspan=\"7\">... and %zu more (the JSON "
                       "output has them all)</td></tr>\n",
                       json_array_size(findings) - MAX_FINDINGS);
            break;
        }
        buf_adds(b, "<tr><td class=\"v ");
        html_esc(b, html_jstr(f, "severity", "-"), 8);
        buf_adds(b, "\">");
        html_esc(b, html_jstr(f, "severity", "-"), 0);
        buf_adds(b, "</td><td class=\"rule\">");
        html_esc(b, html_jstr(f, "rule", "-"), 0);
        buf_adds(b, "</td><td><code>");
        html_esc(b, html_jstr(f, "session", ""), 60);
        buf_printf(b,
                   "</code></td><td class=\"n\">%lld</td><td class=\"n\">"
                   "%lld</td><td>",
                   html_jint(f, "request", 0), html_jint(f, "turn", 0));
        html_esc(b, html_jstr(f, "summary", ""), 400);
        buf_adds(b, "</td><td><code class=\"ev\">");
        html_esc_json(b, html_jget(f, "evidence"), 800);
        buf_adds(b, "</code></td></tr>\n");
    }
    buf_adds(b, "</tbody></table>\n");
}

/* The summary's audit line: the worst severity found as the word (error:
 * FAIL, warn: WARN, none: PASS; no session: INCONCLUSIVE) and the first
 * three findings at that severity. */
void raudit_summary(const json_t *doc, struct buf *b)
{
    const json_t *findings = html_jget(doc, "findings");
    size_t i, nerr = 0, nwarn = 0, shown = 0;
    const json_t *f;
    json_array_foreach(findings, i, f)
    {
        nerr += !strcmp(html_jstr(f, "severity", ""), "error");
        nwarn += !strcmp(html_jstr(f, "severity", ""), "warn");
    }
    size_t ns = json_array_size(html_jget(doc, "turns"));
    const char *w = !ns     ? "INCONCLUSIVE"
                    : nerr  ? "FAIL"
                    : nwarn ? "WARN"
                            : "PASS";
    buf_printf(b,
               "<li class=\"sum\" id=\"sum-audit\"><a href=\"#audit\">"
               "audit</a> <span class=\"v %s\">%s</span> %zu session%s, "
               "%zu error%s, %zu warning%s",
               w, w, ns, ns == 1 ? "" : "s", nerr, nerr == 1 ? "" : "s", nwarn,
               nwarn == 1 ? "" : "s");
    const char *top = nerr ? "error" : "warn";
    json_array_foreach(findings, i, f)
    {
        if (strcmp(html_jstr(f, "severity", ""), top) || shown >= 3)
            continue;
        buf_adds(b, shown++ ? "</li><li>" : "<ul class=\"causes\"><li>");
        buf_adds(b, "<code>");
        html_esc(b, html_jstr(f, "rule", "-"), 0);
        buf_adds(b, "</code>: ");
        html_esc(b, html_jstr(f, "summary", ""), 300);
    }
    if (shown)
        buf_adds(b, "</li></ul>");
    buf_adds(b, "</li>\n");
}

int report_audit_section(const json_t *doc, struct buf *b)
{
    if (!doc)
        return 0;
    const json_t *turns = html_jget(doc, "turns");
    const json_t *findings = html_jget(doc, "findings");
    size_t i;
    const json_t *t;
    buf_printf(b,
               "<section id=\"audit\"><h2>audit: what the harness sent"
               "</h2><p>Sessions: %zu; findings: %zu.</p>",
               json_array_size(turns), json_array_size(findings));
    if (json_array_size(turns))
        legend(b);
    json_array_foreach(turns, i, t)
    {
        if (i >= MAX_SESSIONS) {
            buf_printf(b,
                       "<p class=\"note\">%zu more %s not drawn "
                       "(give --session KEY for one).</p>",
                       json_array_size(turns) - MAX_SESSIONS,
                       json_array_size(turns) - MAX_SESSIONS == 1
                           ? "session is"
                           : "sessions are");
            break;
        }
        session_chart(b, t, findings);
    }
    findings_table(b, findings);
    buf_adds(b, "</section>\n");
    return 0;
}

json_t *report_audit_doc(const struct audit_set *set,
                         const struct audit_list *l)
{
    json_t *sessions = json_array(), *findings = json_array();
    json_t *turns = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(findings, audit_finding_json(&l->v[i]));
    for (size_t i = 0; i < set->n; i++) {
        json_array_append_new(sessions, audit_session_json(&set->s[i], l));
        json_array_append_new(
            turns,
            json_pack("{s:s, s:o}", "session", set->s[i].id ? set->s[i].id : "",
                      "requests", audit_session_turns(&set->s[i])));
    }
    return json_pack("{s:o, s:o, s:o}", "sessions", sessions, "findings",
                     findings, "turns", turns);
}
