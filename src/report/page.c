/*
 * page: the report's frame. The CSS (a light and a dark scheme through
 * prefers-color-scheme, print rules), a Content-Security-Policy that
 * allows no script and nothing from outside the file, the header (what was
 * tested: endpoints, their fingerprints and server details, fidelity's
 * version, the command line, when) and the sections in a fixed order.
 * report_write puts the page in place through a temporary file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/url.h"
#include "core/xalloc.h"
#include "report/report.h"
#include "report/report_int.h"

static const char css[] =
    ":root{--bg:#fff;--fg:#1b1b1f;--mute:#5d5d66;--line:#d4d4da;"
    "--card:#f5f5f7;--s1:#0072b2;--s2:#d55e00;--s3:#009e73;--s4:#e69f00;"
    "--s5:#cc79a7;--s6:#56b4e9;--s7:var(--fg);--s8:var(--mute);"
    "--warn:#e69f00;"
    "--fail:#cc3311;--ok:#009e73;color-scheme:light dark}"
    "@media (prefers-color-scheme:dark){:root{--bg:#16161a;--fg:#e8e8ec;"
    "--mute:#a0a0aa;--line:#3a3a44;--card:#202026;--s1:#56b4e9;"
    "--s2:#f0a050;--s6:#0072b2;--s8:#f0e442}}"
    "body{background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,"
    "-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;"
    "max-width:1180px;padding:16px 20px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;"
    "border-bottom:1px solid var(--line);padding-bottom:4px}"
    "h3{font-size:15px;margin:18px 0 6px}"
    "table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}"
    "th,td{border:1px solid var(--line);padding:3px 7px;text-align:left;"
    "vertical-align:top}th{background:var(--card)}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "tr.all td{font-weight:600}"
    "table.cases "
    "td{max-width:520px;overflow-wrap:anywhere}td.url code{white-space:nowrap}"
    "code{font:12px/1.4 ui-monospace,'DejaVu Sans Mono',monospace;"
    "white-space:pre-wrap;overflow-wrap:anywhere}"
    "mark{background:var(--warn);color:#000}"
    ".note{color:var(--mute)}.warn{color:var(--fail);font-weight:600}"
    ".err{color:var(--fail)}"
    ".v.PASS,.v.info{color:var(--ok);font-weight:600}"
    ".v.WARN,.v.warn{color:var(--warn);font-weight:600}"
    ".v.INCONCLUSIVE{color:var(--mute);font-weight:600}"
    ".v.FAIL,.v.error{color:var(--fail);font-weight:600}"
    "figure{margin:8px 0 14px}figcaption{font-weight:600;margin-bottom:4px}"
    ".row{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}"
    ".legends{display:flex;flex-wrap:wrap;gap:18px}"
    "svg{max-width:100%;height:auto;font:11px system-ui,sans-serif}"
    "svg text{fill:var(--fg)}svg text.t{font-weight:600;font-size:12px}"
    "svg text.on{fill:#000}svg text.on-dark{fill:#fff}"
    "svg text.hl{fill:var(--mute)}"
    "rect.empty{fill:var(--card);stroke:var(--line)}"
    "path.few{fill:#000;stroke:#fff;stroke-width:.8}rect.sig{stroke:var(--fg);"
    "stroke-width:2.5}"
    "rect.frame{fill:none;stroke:var(--line)}"
    "line.grid{stroke:var(--line);stroke-width:.5}"
    "polyline.s1{fill:none;stroke:var(--s1);stroke-width:1.6}"
    "polyline.s2{fill:none;stroke:var(--s2);stroke-width:1.6;"
    "stroke-dasharray:5 3}"
    "circle.s1{fill:var(--s1)}rect.s2{fill:var(--s2)}"
    "polyline.s3,polyline.s4,polyline.s5,polyline.s6,polyline.s7,"
    "polyline.s8{fill:none;stroke-width:1.6}"
    "line.s3,line.s4,line.s5,line.s6,line.s7,line.s8{stroke-width:1.6}"
    ".s3{stroke:var(--s3);stroke-dasharray:1.5 2.5}"
    ".s4{stroke:var(--s4);stroke-dasharray:8 3 2 3}"
    ".s5{stroke:var(--s5);stroke-dasharray:3 3}"
    ".s6{stroke:var(--s6);stroke-dasharray:10 3}"
    ".s7{stroke:var(--s7);stroke-dasharray:4 2 1 2 1 2}"
    ".s8{stroke:var(--s8);stroke-dasharray:2 4}"
    "path.s3{fill:var(--s3);stroke:none}path.s4{fill:var(--s4);stroke:none}"
    "path.s5{fill:var(--s5);stroke:none}"
    "circle.s6{fill:none;stroke-width:1.8;stroke-dasharray:none}"
    "path.s7,path.s8{fill:none;stroke-width:2;stroke-dasharray:none}"
    "polyline.g2,line.g2{stroke-width:3}polyline.g3,line.g3{stroke-width:.8}"
    "ul.key{list-style:none;padding:0;margin:4px 0;display:flex;"
    "flex-wrap:wrap;gap:2px 16px}ul.key svg{vertical-align:middle;"
    "margin-right:4px}"
    "line.s1{stroke:var(--s1);stroke-width:1.6}"
    "line.s2{stroke:var(--s2);stroke-width:1.6;stroke-dasharray:5 3}"
    "path.ci{fill:none;stroke-width:1.2}path.ci.s1{stroke:var(--s1)}"
    "path.ci.s2{stroke:var(--s2)}"
    "line.th-warn{stroke:var(--warn);stroke-dasharray:2 3;stroke-width:1.4}"
    "line.th-fail{stroke:var(--fail);stroke-dasharray:8 3;stroke-width:1.4}"
    "line.decode{stroke:var(--mute);stroke-dasharray:1 2;stroke-width:2}"
    "path.m0{fill:#e69f00}rect.m1{fill:#d55e00}path.m2{fill:#cc79a7}"
    "circle.m3{fill:none;stroke:#0072b2;stroke-width:2}"
    "path.m4{stroke:var(--fg);stroke-width:2}"
    "dl.hdr{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;"
    "margin:8px 0}dl.hdr dt{color:var(--mute)}dl.hdr dd{margin:0}"
    "nav.summary{background:var(--card);border:1px solid var(--line);"
    "padding:6px 14px;margin:10px 0}nav.summary h2{margin:6px 0;border:0}"
    "ul.verdicts{list-style:none;padding:0;margin:4px 0}"
    "ul.verdicts>li{margin:3px 0}ul.verdicts>li>a{display:inline-block;"
    "min-width:7em;font-weight:600}ul.causes{margin:2px 0 4px;"
    "padding-left:22px;font-size:13px}ol.toc{margin:4px 0}"
    "td.rule{white-space:nowrap}details{margin:4px 0 10px}"
    "summary{cursor:pointer;color:var(--mute)}ul.vkey{font-size:12px}"
    ""
    "svg.bar{vertical-align:middle;max-width:none}rect.track{fill:var(--card);"
    "stroke:var(--line)}rect.harm{fill:var(--s1)}rect.harm.culprit,"
    "rect.worse{fill:var(--fail)}rect.better{fill:var(--ok)}"
    "line.zero{stroke:var(--fg)}svg.bar path.ci{stroke:var(--fg);"
    "stroke-width:1.2;fill:none}table.bisect td.n{white-space:nowrap;"
    "text-align:left}"
    "table.bisect td.cfg{white-space:normal;max-width:240px;"
    "overflow-wrap:anywhere}tr.culprit td.cfg{color:var(--fail)}"
    "@media "
    "print{details>*{display:block}body{max-width:none;padding:0;font-size:"
    "11px}"
    "section,figure,table{break-inside:avoid}h2{break-after:avoid}"
    ":root{--bg:#fff;--fg:#000;--card:#f0f0f0;--line:#bbb}}";

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* An object as "key: value" lines in key order (at most 8, each value cut
 * at 160 bytes); anything else as compact JSON. */
static void kv_lines(struct buf *b, const json_t *o)
{
    const char *keys[8];
    size_t n = 0;
    const char *k;
    const json_t *v;
    if (!json_is_object(o)) {
        buf_adds(b, "<code>");
        html_esc_json(b, o, 300);
        buf_adds(b, "</code>");
        return;
    }
    json_object_foreach((json_t *)o, k, v)
    {
        if (n < 8)
            keys[n++] = k;
    }
    qsort(keys, n, sizeof(*keys), cmp_str);
    for (size_t i = 0; i < n; i++) {
        buf_adds(b, i ? "<br><b>" : "<b>");
        html_esc(b, keys[i], 60);
        buf_adds(b, "</b>: <code>");
        html_esc_json(b, json_object_get(o, keys[i]), 160);
        buf_adds(b, "</code>");
    }
    if (json_object_size(o) > n)
        buf_printf(b, "<br>(%zu more)", json_object_size(o) - n);
}

/* One endpoint: probe's {url, model, fingerprint (hex), max_model_len,
 * tokenizer, server_info} or drift's {url, dialect, model, fingerprint
 * (what the server said about itself)}. */
static void ep_row(struct buf *b, const char *role, const json_t *e, bool raw)
{
    if (!json_is_object(e))
        return;
    buf_adds(b, "<tr><td>");
    html_esc(b, role, 0);
    buf_adds(b, "</td><td class=\"url\"><code>");
    html_esc(b, html_jstr(e, "url", "-"), 200);
    buf_adds(b, "</code></td><td>");
    html_esc(b, html_jstr(e, "model", "-"), 120);
    buf_adds(b, "</td><td class=\"n\">");
    long long ctx = html_jint(e, "max_model_len", -1);
    if (ctx > 0)
        buf_printf(b, "%lld", ctx);
    else
        buf_addch(b, '-');
    const json_t *fp = html_jget(e, "fingerprint");
    buf_adds(b, "</td><td><code>");
    if (json_is_string(fp))
        html_esc(b, json_string_value(fp), 80);
    else
        buf_addch(b, '-');
    if (!raw) {
        buf_adds(b, "</code></td></tr>\n");
        return;
    }
    buf_adds(b, "</code></td><td>");
    if (html_jstr(e, "tokenizer", NULL)) {
        buf_adds(b, "<b>tokens by</b>: ");
        html_esc(b, html_jstr(e, "tokenizer", ""), 40);
        buf_adds(b, "<br>");
    }
    if (html_jstr(e, "dialect", NULL)) {
        buf_adds(b, "<b>dialect</b>: ");
        html_esc(b, html_jstr(e, "dialect", ""), 40);
        buf_adds(b, "<br>");
    }
    kv_lines(b, json_is_string(fp) ? html_jget(e, "server_info") : fp);
    buf_adds(b, "</td></tr>\n");
}

/* A fingerprint as "key: value" lines, keys sorted, its flags indented
 * under "flags:" (plain text: smaller than JSON with its quotes escaped). */
static void fp_lines(struct buf *b, const json_t *o, const char *indent)
{
    const char *keys[512];
    size_t n = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        if (n < 512)
            keys[n++] = k;
    }
    qsort(keys, n, sizeof(*keys), cmp_str);
    for (size_t i = 0; i < n; i++) {
        v = json_object_get(o, keys[i]);
        buf_adds(b, indent);
        html_esc(b, keys[i], 200);
        if (json_is_object(v) && !*indent) {
            buf_adds(b, ":\n");
            fp_lines(b, v, "  ");
            continue;
        }
        buf_adds(b, *indent ? " = " : ": ");
        html_esc_json(b, v, 300);
        buf_addch(b, '\n');
    }
    if (json_object_size(o) > n)
        buf_printf(b, "%s(%zu more)\n", indent, json_object_size(o) - n);
}

/* The settings that differ between the servers shown (inspect's
 * normalised fingerprints), one row per field, one column per server; the
 * full fingerprints folded below. */
static void settings(const struct report_in *in, struct buf *b)
{
    size_t ns = json_array_size(in->servers), i;
    const json_t *s;
    if (!ns)
        return;
    buf_adds(b, "<h3 id=\"servers\">Server settings</h3>");
    if (ns == 1)
        buf_adds(b, "<p class=\"note\">One server: nothing to compare.</p>");
    else if (!json_array_size(in->server_diff))
        buf_adds(b, "<p>The servers report the same settings (as "
                    "<code>fidelity inspect</code> normalises them).</p>");
    else {
        buf_adds(b, "<p class=\"note\">The fields that differ between the "
                    "servers, as <code>fidelity inspect</code> normalises "
                    "them.</p><table class=\"settings\"><thead><tr><th>"
                    "field</th>");
        json_array_foreach(in->servers, i, s)
        {
            buf_adds(b, "<th>");
            html_esc(b, html_jstr(s, "role", "?"), 80);
            buf_adds(b, "</th>");
        }
        buf_adds(b, "</tr></thead><tbody>");
        const json_t *d;
        json_array_foreach(in->server_diff, i, d)
        {
            buf_adds(b, "<tr><td><code>");
            html_esc(b, html_jstr(d, "field", "?"), 200);
            buf_adds(b, "</code></td>");
            size_t j;
            const json_t *v;
            json_array_foreach(html_jget(d, "values"), j, v)
            {
                buf_adds(b, "<td><code>");
                html_esc_json(b, v, 300);
                buf_adds(b, "</code></td>");
            }
            buf_adds(b, "</tr>\n");
        }
        buf_adds(b, "</tbody></table>");
    }
    buf_adds(b, "<details class=\"fingerprints\"><summary>Full "
                "fingerprints</summary>");
    json_array_foreach(in->servers, i, s)
    {
        buf_adds(b, "<p><b>");
        html_esc(b, html_jstr(s, "role", "?"), 80);
        buf_adds(b, "</b></p><pre><code>");
        fp_lines(b, html_jget(s, "fingerprint"), "");
        buf_adds(b, "</code></pre>");
    }
    buf_adds(b, "</details>\n");
}

static void summary(const struct report_in *in, struct buf *b);

static void header(const struct report_in *in, struct buf *b)
{
    buf_adds(b, "<header><h1>fidelity report</h1><dl class=\"hdr\">"
                "<dt>generated</dt><dd>");
    html_fmt_time(b, (long long)in->generated);
    buf_adds(b, "</dd><dt>fidelity</dt><dd>");
    html_esc(b, in->version ? in->version : "-", 0);
    buf_adds(b, "</dd><dt>command line</dt><dd><code>");
    html_esc(b, in->cmdline ? in->cmdline : "-", 2000);
    buf_adds(b, "</code></dd>");
    const char *const origin[5] = {in->probe_origin, in->live_origin,
                                   in->drift_origin, in->audit_origin,
                                   in->bisect_origin};
    static const char *const what[5] = {"probe", "probe --live", "drift",
                                        "audit", "bisect"};
    for (int i = 0; i < 5; i++)
        if (origin[i]) {
            buf_printf(b, "<dt>%s</dt><dd>", what[i]);
            html_esc(b, origin[i], 400);
            buf_adds(b, "</dd>");
        }
    buf_adds(b, "</dl>");
    summary(in, b);
    if (in->probe || in->live || in->drift) {
        bool raw = !in->servers; /* no normalised settings: the raw JSON */
        buf_printf(b,
                   "<table><thead><tr><th>role</th><th>URL</th><th>model"
                   "</th><th>context length</th><th>fingerprint</th>%s"
                   "</tr></thead><tbody>",
                   raw ? "<th>server and flags seen</th>" : "");
        ep_row(b, "probe endpoint", html_jget(in->probe, "endpoint"), raw);
        ep_row(b, "probe baseline", html_jget(in->probe, "baseline"), raw);
        ep_row(b, "probe --live endpoint", html_jget(in->live, "endpoint"),
               raw);
        ep_row(b, "drift golden", html_jget(in->drift, "golden"), raw);
        ep_row(b, "drift candidate", html_jget(in->drift, "candidate"), raw);
        buf_adds(b, "</tbody></table>\n");
        settings(in, b);
    }
    buf_adds(b, "</header>\n");
}

/* The summary block: a line per section with its verdict word and cause,
 * linking to the section, then the contents. */
static void summary(const struct report_in *in, struct buf *b)
{
    if (!in->probe && !in->live && !in->drift && !in->audit && !in->bisect)
        return;
    buf_adds(b, "<nav class=\"summary\" id=\"summary\"><h2>Summary</h2>"
                "<ul class=\"verdicts\">");
    if (in->probe)
        rprobe_summary(in->probe, b);
    if (in->live)
        rlive_summary(in->live, b);
    if (in->drift)
        rdrift_summary(in->drift, b);
    if (in->audit)
        raudit_summary(in->audit, b);
    if (in->bisect)
        rbisect_summary(in->bisect, b);
    buf_adds(b, "</ul><h3>Contents</h3><ol class=\"toc\">");
    if (in->probe)
        buf_adds(b, "<li><a href=\"#probe\">probe: where recall breaks</a>"
                    "<ul><li><a href=\"#probe-why\">where it breaks and why"
                    "</a></li><li><a href=\"#probe-maps\">pass rate maps</a>"
                    "</li></ul></li>");
    if (in->live)
        buf_adds(b, "<li><a href=\"#probe-live\">live sessions</a></li>");
    if (in->drift)
        buf_adds(b, "<li><a href=\"#drift\">drift: candidate against "
                    "golden</a></li>");
    if (in->audit)
        buf_adds(b, "<li><a href=\"#audit\">audit: what the harness sent</a>"
                    "</li>");
    if (in->bisect)
        buf_adds(b, "<li><a href=\"#bisect\">bisect: which setting breaks "
                    "it</a></li>");
    buf_adds(b, "</ol></nav>\n");
}

int report_html(const struct report_in *in, struct buf *b)
{
    buf_adds(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
                "charset=\"utf-8\">\n<meta http-equiv=\"Content-Security-"
                "Policy\" content=\"default-src 'none'; style-src "
                "'unsafe-inline'; img-src data:\">\n<meta name=\"viewport\" "
                "content=\"width=device-width,initial-scale=1\">\n"
                "<meta name=\"color-scheme\" content=\"light dark\">\n"
                "<title>fidelity report</title>\n<style>");
    buf_adds(b, css);
    buf_adds(b, "</style></head>\n<body>\n");
    header(in, b);
    if (!in->probe && !in->live && !in->drift && !in->audit && !in->bisect)
        buf_adds(b, "<p>Nothing to show: no probe run, drift run or "
                    "recorded session was found.</p>");
    report_probe_section(in->probe, b);
    report_live_section(in->live, b);
    report_drift_section(in->drift, b);
    report_audit_section(in->audit, b);
    report_bisect_section(in->bisect, b);
    buf_adds(b, "<footer class=\"note\"><p>Colour scales: viridis (pass "
                "rate) and PuOr (differences), both readable with the "
                "common colour-vision deficiencies; every cell also holds "
                "its number.</p></footer>\n</body></html>\n");
    if (b->max && b->len >= b->max)
        return -ENOBUFS;
    return 0;
}

int report_write(const struct report_in *in, const char *path, struct diag *d)
{
    struct buf b;
    buf_init(&b, 0);
    int r = report_html(in, &b);
    if (r) {
        buf_release(&b);
        return diag_set(d, -r, "report too large");
    }
    if (!strcmp(path, "-")) {
        r = fwrite(b.data, 1, b.len, stdout) == b.len && !fflush(stdout)
                ? 0
                : diag_set(d, EIO, "cannot write the report to stdout");
        buf_release(&b);
        return r;
    }
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        r = diag_set(d, errno, "cannot write '%s': %s", path, strerror(errno));
        goto out;
    }
    size_t w = fwrite(b.data, 1, b.len, f);
    if (fclose(f) || w != b.len) {
        r = diag_set(d, EIO, "cannot write '%s'", path);
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path)) {
        r = diag_set(d, errno, "cannot write '%s': %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(tmp);
    buf_release(&b);
    return r;
}

/* ---- command line ---- */

static bool is_secret_opt(const char *name)
{
    static const char *const words[] = {"key",    "secret", "passw",     "auth",
                                        "header", "cookie", "credential"};
    char nm[64];
    size_t n = strcspn(name, "=");
    snprintf(nm, sizeof(nm), "%.*s", (int)n, name);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strstr(nm, words[i]))
            return true;
    /* --hf-token, not --max-tokens */
    return n >= 5 && n < sizeof(nm) && !strcmp(nm + n - 5, "token");
}

static void add_arg(struct buf *b, const char *a)
{
    bool plain = *a != '\0';
    for (const char *p = a; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789-_./:=,+@%",
                    *p))
            plain = false;
    if (plain) {
        buf_adds(b, a);
        return;
    }
    buf_addch(b, '\'');
    for (const char *p = a; *p; p++)
        if (*p == '\'')
            buf_adds(b, "'\\''");
        else
            buf_addch(b, *p);
    buf_addch(b, '\'');
}

char *report_cmdline(int argc, char **argv)
{
    struct buf b;
    bool hide_next = false;
    buf_init(&b, 0);
    buf_adds(&b, "fidelity");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        buf_addch(&b, ' ');
        if (hide_next) {
            buf_adds(&b, "***");
            hide_next = false;
            continue;
        }
        if (!strncmp(a, "--", 2) && is_secret_opt(a + 2)) {
            const char *eq = strchr(a, '=');
            if (eq) {
                buf_add(&b, a, (size_t)(eq - a) + 1);
                buf_adds(&b, "***");
            } else {
                buf_adds(&b, a);
                hide_next = true;
            }
            continue;
        }
        char *r = url_mask(a);
        add_arg(&b, r);
        free(r);
    }
    return buf_detach(&b, NULL);
}
