/*
 * The report in a real browser: Debian's chromium (installed by `make
 * deps`), headless. A page from a seeded probe run against `fidelity sim`
 * is screenshot at a fixed window size; the PNG is decoded here (zlib and
 * the five PNG row filters) and must have that size and not be blank
 * (many colours, luminance spread), where a screenshot of an empty page
 * has one colour. Then payloads (<script>, "><img src=x onerror=...>,
 * </svg>) are put into a recorded session's messages, the reasoning a
 * server sent and the replies, through `fidelity record` in front of a
 * scripted server; `fidelity audit --report` draws them and chromium's
 * --dump-dom must hold them as text, with no element made from them.
 * The same for a `probe --live --report` page whose cell names hold the
 * payload (a --vary value a user wrote).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <zlib.h>

#include "core/xalloc.h"
#include "http/client.h"
#include "util/fakesrv.h"
#include "util/golden.h"
#include "util/need.h"
#include "util/proc.h"
#include "util/rec.h"

#define W 1024
#define H 768

static struct proc P[2];
static bool up[2];
static struct fakesrv *fake;
static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 1; i >= 0; i--)
        if (up[i]) {
            proc_stop(&P[i]);
            up[i] = false;
        }
    fakesrv_stop(fake);
    fake = NULL;
    if (!getenv("REPORT_TEST_KEEP"))
        rec_rmdir(dir);
    dir = NULL;
    return 0;
}

/* Debian's chromium, from DEBS: skipped without it, failed under CI. */
static const char *chromium(void)
{
    static const char *const paths[] = {"/usr/bin/chromium",
                                        "/usr/bin/chromium-browser"};
    for (size_t i = 0; i < 2; i++)
        if (!access(paths[i], X_OK))
            return paths[i];
    need_missing("chromium (Debian's chromium package)");
    return NULL;
}

/* Runs chromium headless on file with extra (one option), stdout into
 * out_path; its own process group, killed after 60 s. Exit status. */
static int run_chromium(const char *file, const char *extra,
                        const char *out_path)
{
    char *url = xasprintf("file://%s", file);
    char *prof = xasprintf("--user-data-dir=%s/chromium", dir);
    char *size = xasprintf("--window-size=%d,%d", W, H);
    const char *av[] = {chromium(),
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-background-networking",
                        "--no-first-run",
                        prof,
                        size,
                        extra,
                        url,
                        NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        int o = open(out_path ? out_path : "/dev/null",
                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open("/dev/null", O_WRONLY);
        dup2(o, 1);
        dup2(e, 2);
        execv(av[0], (char *const *)av);
        _exit(127);
    }
    int st = -1;
    for (int i = 0; i < 600; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (i == 599) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
        }
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL); /* helpers it left behind, if any */
    free(url);
    free(prof);
    free(size);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- a PNG reader: 8-bit RGB or RGBA, not interlaced ---- */

struct image {
    uint32_t w, h;
    unsigned bpp;
    unsigned char *px; /* h rows of w * bpp bytes */
};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

static void png_read(const char *path, struct image *im)
{
    size_t n;
    unsigned char *s = (unsigned char *)golden_read(path, &n);
    assert_non_null(s);
    assert_true(n > 33 && !memcmp(s, "\x89PNG\r\n\x1a\n", 8));
    struct buf idat = BUF_INIT;
    memset(im, 0, sizeof(*im));
    for (size_t p = 8; p + 12 <= n;) {
        uint32_t len = be32(s + p);
        const unsigned char *type = s + p + 4, *data = s + p + 8;
        assert_true(p + 12 + len <= n);
        if (!memcmp(type, "IHDR", 4)) {
            im->w = be32(data);
            im->h = be32(data + 4);
            assert_int_equal(data[8], 8);  /* bit depth */
            assert_int_equal(data[12], 0); /* not interlaced */
            assert_true(data[9] == 2 || data[9] == 6);
            im->bpp = data[9] == 6 ? 4 : 3;
        } else if (!memcmp(type, "IDAT", 4)) {
            buf_add(&idat, data, len);
        }
        p += 12 + len;
    }
    size_t stride = (size_t)im->w * im->bpp;
    uLongf raw_len = (uLongf)((stride + 1) * im->h);
    unsigned char *raw = xmalloc(raw_len);
    assert_int_equal(
        uncompress(raw, &raw_len, (unsigned char *)idat.data, (uLong)idat.len),
        Z_OK);
    assert_int_equal(raw_len, (stride + 1) * im->h);
    im->px = xmalloc(stride * im->h);
    for (uint32_t y = 0; y < im->h; y++) {
        unsigned char f = raw[y * (stride + 1)];
        const unsigned char *in = raw + y * (stride + 1) + 1;
        unsigned char *out = im->px + y * stride;
        const unsigned char *prev = y ? out - stride : NULL;
        for (size_t x = 0; x < stride; x++) {
            int a = x >= im->bpp ? out[x - im->bpp] : 0;
            int b = prev ? prev[x] : 0;
            int c = prev && x >= im->bpp ? prev[x - im->bpp] : 0;
            int v = f == 0   ? 0
                    : f == 1 ? a
                    : f == 2 ? b
                    : f == 3 ? (a + b) / 2
                             : paeth(a, b, c);
            assert_true(f <= 4);
            out[x] = (unsigned char)(in[x] + v);
        }
    }
    free(raw);
    buf_release(&idat);
    free(s);
}

/* Distinct colours (capped at 1000) and the luminance's standard
 * deviation. */
static void png_stats(const struct image *im, size_t *colours, double *sd)
{
    uint32_t seen[1000];
    size_t ns = 0;
    double sum = 0, sq = 0, n = (double)im->w * im->h;
    for (size_t i = 0; i < (size_t)im->w * im->h; i++) {
        const unsigned char *p = im->px + i * im->bpp;
        uint32_t c = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        double y = 0.2126 * p[0] + 0.7152 * p[1] + 0.0722 * p[2];
        sum += y;
        sq += y * y;
        size_t k = 0;
        while (k < ns && seen[k] != c)
            k++;
        if (k == ns && ns < 1000)
            seen[ns++] = c;
    }
    *colours = ns;
    double m = sum / n;
    *sd = sqrt(sq / n - m * m > 0 ? sq / n - m * m : 0);
}

static void screenshot(const char *page, struct image *im)
{
    char *png = xasprintf("%s/shot.png", dir);
    char *opt = xasprintf("--screenshot=%s", png);
    unlink(png);
    assert_int_equal(run_chromium(page, opt, NULL), 0);
    png_read(png, im);
    free(opt);
    free(png);
}

static void test_screenshot_has_size_and_is_not_blank(void **state)
{
    (void)state;
    chromium();
    const char *faulty[] = {
        "sim",  "--listen",   "127.0.0.1:0", "--context-limit",
        "2048", "--overflow", "middle",      NULL};
    assert_int_equal(proc_start(&P[0], faulty), 0);
    up[0] = true;
    char *url = xstrdup(proc_url(&P[0]));
    char *page = xasprintf("%s/probe.html", dir);
    char *db = xasprintf("%s/probe.db", dir);
    const char *av[] = {"probe",    "--endpoint", url,     "--kinds",
                        "needle",   "--lengths",  "1k,4k", "--depths",
                        "0,50,100", "--db",       db,      "--report",
                        page,       NULL};
    /* exit 1: the faulty sim fails the default --fail-under 90 */
    assert_int_equal(proc_run(av, NULL, NULL, NULL, 120), 1);
    struct image im;
    size_t colours;
    double sd;
    screenshot(page, &im);
    assert_int_equal(im.w, W);
    assert_int_equal(im.h, H);
    png_stats(&im, &colours, &sd);
    print_message("report: %zu colours, luminance sd %.1f\n", colours, sd);
    assert_true(colours >= 20); /* text, heatmap cells, legend */
    assert_true(sd > 10);
    free(im.px);

    /* the same check on an empty page tells it apart */
    char *empty = xasprintf("%s/empty.html", dir);
    FILE *f = fopen(empty, "w");
    assert_non_null(f);
    fputs("<!DOCTYPE html><html><head><title>empty</title></head>"
          "<body style=\"background:#fff\"></body></html>\n",
          f);
    fclose(f);
    screenshot(empty, &im);
    assert_int_equal(im.w, W);
    png_stats(&im, &colours, &sd);
    assert_true(colours <= 2);
    assert_true(sd < 1);
    free(im.px);
    free(empty);
    free(db);
    free(page);
    free(url);
}

#define PAYLOAD                                                                \
    "<script>document.title='pwned'</script>\"><img src=x "                    \
    "onerror=alert(1)></svg><svg onload=alert(2)>"

/* A chat server whose replies carry the payload in content and in
 * reasoning_content, and whose reasoning claims a first message. */
static void answer(void *ud, const char *method, const char *path,
                   const char *body, size_t len, long *status,
                   const char **ctype, struct buf *out)
{
    (void)ud;
    (void)method;
    (void)path;
    (void)body;
    (void)len;
    json_t *a =
        json_pack("{s:s, s:s, s:i, s:s, s:[{s:i, s:{s:s, s:s, s:s}, s:s}], "
                  "s:{s:i, s:i, s:i}}",
                  "id", "chatcmpl-x", "object", "chat.completion", "created", 0,
                  "model", "m", "choices", "index", 0, "message", "role",
                  "assistant", "content", "Sure. " PAYLOAD, "reasoning_content",
                  "This looks like the start of our conversation. " PAYLOAD,
                  "finish_reason", "stop", "usage", "prompt_tokens", 20,
                  "completion_tokens", 5, "total_tokens", 25);
    char *s = json_dumps(a, JSON_COMPACT);
    buf_adds(out, s);
    free(s);
    json_decref(a);
    *status = 200;
    *ctype = "application/json";
}

static json_t *post(struct http_client *hc, const char *url, json_t *msgs)
{
    const char *hdr[] = {"Content-Type: application/json",
                         "X-Session-Id: s<script>alert(3)</script>", NULL};
    json_t *body = json_pack("{s:s, s:O}", "model", "m", "messages", msgs);
    char *s = json_dumps(body, JSON_COMPACT);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = s,
                           .body_len = strlen(s),
                           .headers = hdr,
                           .timeout_ms = 20000};
    struct http_resp resp;
    struct diag d;
    http_resp_init(&resp);
    assert_int_equal(http_do(hc, &req, &resp, &d), 0);
    assert_int_equal(resp.status, 200);
    json_t *a = json_loads(buf_str(&resp.body), 0, NULL);
    assert_non_null(a);
    http_resp_release(&resp);
    json_decref(body);
    free(s);
    return a;
}

/* True when some occurrence of attr sits inside a tag of dom. */
static bool in_a_tag(const char *dom, const char *attr)
{
    for (const char *p = dom; (p = strstr(p, attr)); p++) {
        const char *q = p;
        while (q > dom && *q != '<' && *q != '>')
            q--;
        if (*q == '<')
            return true;
    }
    return false;
}

static void test_payloads_stay_text(void **state)
{
    (void)state;
    chromium();
    int port = 0;
    fake = fakesrv_start(answer, NULL, &port);
    assert_non_null(fake);
    char *up_url = xasprintf("http://127.0.0.1:%d", port);
    char *db = xasprintf("%s/xss.db", dir), *page = NULL;
    assert_int_equal(rec_start_record(&P[1], up_url, db, NULL), 0);
    up[1] = true;
    struct http_client *hc = http_client_new();
    char *url = xasprintf("%s/v1/chat/completions", proc_url(&P[1]));
    json_t *msgs =
        json_pack("[{s:s, s:s}]", "role", "user", "content", "hello " PAYLOAD);
    json_t *a = post(hc, url, msgs);
    json_t *m = json_object_get(
        json_array_get(json_object_get(a, "choices"), 0), "message");
    /* sent back altered (history.echo shows both) with its reasoning */
    json_array_append_new(msgs,
                          json_pack("{s:s, s:s, s:O}", "role", "assistant",
                                    "content", "Sure.", "reasoning_content",
                                    json_object_get(m, "reasoning_content")));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user",
                                          "content", "and " PAYLOAD));
    json_decref(post(hc, url, msgs));
    json_decref(a);
    json_decref(msgs);
    http_client_free(hc);
    proc_stop(&P[1]);
    up[1] = false;

    page = xasprintf("%s/xss.html", dir);
    const char *av[] = {"audit", "--db", db, "--report", page, NULL};
    int rc = proc_run(av, NULL, NULL, NULL, 60);
    assert_true(rc == 0 || rc == 1);
    char *html = golden_read(page, NULL);
    assert_non_null(html);
    /* the payloads are drawn: in the messages, the reasoning, the reply */
    assert_non_null(strstr(html, "first_message.claim"));
    assert_non_null(strstr(html, "history.echo"));
    assert_true(golden_count(html, "&lt;script&gt;document.title") >= 2);

    char *dump = xasprintf("%s/dom.html", dir);
    assert_int_equal(run_chromium(page, "--dump-dom", dump), 0);
    char *dom = golden_read(dump, NULL);
    assert_non_null(dom);
    assert_non_null(strstr(dom, "<title>fidelity report</title>"));
    assert_true(golden_count(dom, "&lt;script&gt;document.title") >= 2);
    assert_true(golden_count(dom, "&lt;img src=x onerror=alert(1)&gt;") >= 2);
    assert_true(golden_count(dom, "&lt;/svg&gt;&lt;svg onload") >= 2);
    assert_non_null(strstr(dom, "s&lt;script&gt;alert(3)")); /* session */
    /* no element came from the data */
    assert_int_equal(golden_count(dom, "<script"), 0);
    assert_int_equal(golden_count(dom, "<img"), 0);
    assert_int_equal(golden_count(dom, "<svg"), golden_count(html, "<svg"));
    assert_int_equal(golden_count(dom, "</svg>"), golden_count(html, "</svg>"));
    assert_false(in_a_tag(dom, "onerror"));
    assert_false(in_a_tag(dom, "onload"));
    free(dom);
    free(dump);
    free(html);
    free(page);
    free(url);
    free(db);
    free(up_url);
}

static void test_live_payloads_stay_text(void **state)
{
    (void)state;
    chromium();
    const char *sim[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&P[0], sim), 0);
    up[0] = true;
    char *url = xstrdup(proc_url(&P[0]));
    char *page = xasprintf("%s/live.html", dir);
    const char *av[] = {
        "probe",      "--endpoint", url,  "--live", "--turns",
        "4",          "--seeds",    "1",  "--vary", "tag=a," PAYLOAD,
        "--no-store", "--report",   page, NULL};
    assert_int_equal(proc_run(av, NULL, NULL, NULL, 60), 0);
    char *html = golden_read(page, NULL);
    assert_non_null(html);
    assert_non_null(strstr(html, "<section id=\"probe-live\">"));
    char *dump = xasprintf("%s/dom.html", dir);
    assert_int_equal(run_chromium(page, "--dump-dom", dump), 0);
    char *dom = golden_read(dump, NULL);
    assert_non_null(dom);
    /* the cell's name in the table, both charts' keys and the command
     * line, as text */
    assert_true(golden_count(dom, "&lt;script&gt;document.title") >= 4);
    assert_true(golden_count(dom, "&lt;img src=x onerror=alert(1)&gt;") >= 4);
    assert_int_equal(golden_count(dom, "<script"), 0);
    assert_int_equal(golden_count(dom, "<img"), 0);
    assert_int_equal(golden_count(dom, "<svg"), golden_count(html, "<svg"));
    assert_false(in_a_tag(dom, "onerror"));
    assert_false(in_a_tag(dom, "onload"));
    free(dom);
    free(dump);
    free(html);
    free(page);
    free(url);
}

/* ---- layout: measured in the browser ---- */

/* The report forbids script (its Content-Security-Policy), so layout is
 * measured on a test-only copy: the page with its policy line taken out and
 * this script added at the end of <body>. The script runs after layout and
 * compares boxes as the browser laid them out at W x H: every <text> of
 * the heatmaps, legends and charts inside its <svg>; the heatmaps' and
 * legends' labels on one line not overlapping; titles (h1-h3,
 * figcaption), keys, legends, the summary's lines, tables and figures
 * neither wider than themselves (scrollWidth) nor outside their
 * container. It writes what it found, as JSON, into <pre id="measure">,
 * which chromium's --dump-dom hands back. The report itself is drawn
 * unchanged. */
static const char measure_js[] =
    "(function () {\n"
    "  var out = {checked: 0, overflow: [], summary: [], sections: []};\n"
    "  function box(e) { return e.getBoundingClientRect(); }\n"
    "  function name(e) {\n"
    "    var c = e.getAttribute('class') || '';\n"
    "    var t = (e.textContent || '').slice(0, 40).replace(/[<>&\"\\\\]/g, "
    "'?');\n"
    "    return e.tagName.toLowerCase() + (c ? '.' + c : '') + ' [' + t + "
    "']';\n"
    "  }\n"
    "  function inside(e, c, why) {\n"
    "    var a = box(e), b = box(c);\n"
    "    out.checked++;\n"
    "    if (a.width === 0 && a.height === 0) return;\n"
    "    if (a.left < b.left - 0.5 || a.right > b.right + 0.5 ||\n"
    "        a.top < b.top - 0.5 || a.bottom > b.bottom + 0.5)\n"
    "      out.overflow.push(why + ': ' + name(e) + ' x ' + Math.round(a.left) "
    "+\n"
    "                        '-' + Math.round(a.right) + ' outside ' +\n"
    "                        name(c).slice(0, 30) + ' x ' + Math.round(b.left) "
    "+\n"
    "                        '-' + Math.round(b.right));\n"
    "  }\n"
    "  function fits(e, why) {\n"
    "    out.checked++;\n"
    "    if (e.scrollWidth > e.clientWidth + 1)\n"
    "      out.overflow.push(why + ': ' + name(e) + ' scrollWidth ' +\n"
    "                        e.scrollWidth + ' exceeds ' + e.clientWidth);\n"
    "    if (e.parentElement) inside(e, e.parentElement, why);\n"
    "  }\n"
    "  document.querySelectorAll('svg.heat, svg.legend, figure svg').forEach(\n"
    "    function (s) {\n"
    "      var rows = {};\n"
    "      s.querySelectorAll('text').forEach(function (t) {\n"
    "        inside(t, s, 'svg text');\n"
    "        var y = t.getAttribute('y');\n"
    "        (rows[y] = rows[y] || []).push(t);\n"
    "      });\n"
    "      if (!s.matches('svg.heat, svg.legend')) return;\n"
    "      Object.keys(rows).forEach(function (y) {\n"
    "        var ts = rows[y].slice().sort(function (p, q) {\n"
    "          return box(p).left - box(q).left;\n"
    "        });\n"
    "        for (var i = 1; i < ts.length; i++) {\n"
    "          out.checked++;\n"
    "          if (box(ts[i]).left < box(ts[i - 1]).right - 0.5)\n"
    "            out.overflow.push('labels overlap: ' + name(ts[i - 1]) + ' "
    "and ' +\n"
    "                              name(ts[i]));\n"
    "        }\n"
    "      });\n"
    "    });\n"
    "  document.querySelectorAll('h1, h2, h3, figcaption, ul.key, .legends, ' "
    "+\n"
    "                            'nav.summary li, table, figure')\n"
    "    .forEach(function (e) { fits(e, 'box'); });\n"
    "  document.querySelectorAll('ul.key li').forEach(function (e) {\n"
    "    inside(e, e.parentElement, 'key');\n"
    "  });\n"
    "  document.querySelectorAll('nav.summary li.sum').forEach(function (li) "
    "{\n"
    "    var a = li.querySelector('a'), v = li.querySelector('.v');\n"
    "    var id = a ? (a.getAttribute('href') || '').slice(1) : '';\n"
    "    out.summary.push({section: id, verdict: v ? v.textContent : '',\n"
    "                      target: !!document.getElementById(id)});\n"
    "  });\n"
    "  document.querySelectorAll('section[id]').forEach(function (e) {\n"
    "    out.sections.push(e.id);\n"
    "  });\n"
    "  var pre = document.createElement('pre');\n"
    "  pre.id = 'measure';\n"
    "  pre.textContent = JSON.stringify(out);\n"
    "  document.body.appendChild(pre);\n"
    "})();\n";

struct layout {
    json_t *m;       /* the script's JSON */
    size_t overflow; /* boxes that overflow */
    size_t checked;  /* boxes compared */
};

static void measure(const char *page, struct layout *l)
{
    char *html = golden_read(page, NULL);
    assert_non_null(html);
    char *csp = strstr(html, "<meta http-equiv=\"Content-Security-Policy\"");
    assert_non_null(csp);
    char *csp_end = strchr(csp, '>');
    char *body_end = strstr(html, "</body>");
    assert_non_null(body_end);
    char *wrap = xasprintf("%s.measure.html", page);
    FILE *f = fopen(wrap, "w");
    assert_non_null(f);
    fprintf(f, "%.*s%.*s<script>%s</script>%s", (int)(csp - html), html,
            (int)(body_end - csp_end - 1), csp_end + 1, measure_js, body_end);
    fclose(f);
    char *dump = xasprintf("%s.dom", page);
    assert_int_equal(run_chromium(wrap, "--dump-dom", dump), 0);
    char *dom = golden_read(dump, NULL);
    assert_non_null(dom);
    char *a = strstr(dom, "<pre id=\"measure\">");
    assert_non_null(a);
    a += strlen("<pre id=\"measure\">");
    char *b = strstr(a, "</pre>");
    assert_non_null(b);
    *b = '\0';
    json_error_t e;
    l->m = json_loads(a, 0, &e);
    assert_non_null(l->m);
    l->checked = (size_t)json_integer_value(json_object_get(l->m, "checked"));
    const json_t *ov = json_object_get(l->m, "overflow");
    l->overflow = json_array_size(ov);
    for (size_t i = 0; i < l->overflow && i < 20; i++)
        print_message("overflow: %s\n",
                      json_string_value(json_array_get(ov, i)));
    free(dom);
    free(dump);
    free(wrap);
    free(html);
}

/* Each section drawn has one line in the summary, with a verdict word,
 * linking to it. */
static void assert_summary(const json_t *m)
{
    const json_t *sum = json_object_get(m, "summary"),
                 *sec = json_object_get(m, "sections");
    assert_true(json_array_size(sec) > 0);
    assert_int_equal(json_array_size(sum), json_array_size(sec));
    for (size_t i = 0; i < json_array_size(sec); i++) {
        const json_t *x = json_array_get(sum, i);
        const char *v = json_string_value(json_object_get(x, "verdict"));
        assert_string_equal(json_string_value(json_object_get(x, "section")),
                            json_string_value(json_array_get(sec, i)));
        assert_true(json_is_true(json_object_get(x, "target")));
        assert_true(!strcmp(v, "PASS") || !strcmp(v, "WARN") ||
                    !strcmp(v, "FAIL") || !strcmp(v, "INCONCLUSIVE"));
    }
}

/* The demo's page (scripts/probe_demo.sh's run: a sim that drops the
 * middle of prompts past 8k against a healthy one), then the same store
 * with a drift run beside it drawn by `fidelity report`, then a page of
 * the reasoning kind, whose variant names are long: nothing overflows,
 * and the summary has a verdict per section. The check itself is shown to
 * catch an overflow on a page made to overflow. */
static void test_layout_fits(void **state)
{
    (void)state;
    chromium();
    const char *healthy[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    const char *faulty[] = {
        "sim",  "--listen",   "127.0.0.1:0", "--context-limit",
        "8192", "--overflow", "middle",      NULL};
    assert_int_equal(proc_start(&P[0], healthy), 0);
    up[0] = true;
    assert_int_equal(proc_start(&P[1], faulty), 0);
    up[1] = true;
    char *h = xstrdup(proc_url(&P[0])), *f = xstrdup(proc_url(&P[1]));
    char *page = xasprintf("%s/demo.html", dir);
    char *db = xasprintf("%s/demo.db", dir);
    const char *av[] = {"probe",
                        "--endpoint",
                        f,
                        "--baseline",
                        h,
                        "--kinds",
                        "needle,multi-needle,canary,first-message,variables",
                        "--lengths",
                        "2k,4k,8k,16k,32k",
                        "--depths",
                        "0,25,50,75,100",
                        "--db",
                        db,
                        "--report",
                        page,
                        NULL};
    assert_int_equal(proc_run(av, NULL, NULL, NULL, 300), 1);
    struct layout l;
    measure(page, &l);
    print_message("demo page: %zu boxes checked\n", l.checked);
    assert_true(l.checked > 500);
    assert_int_equal(l.overflow, 0);
    assert_summary(l.m);
    json_decref(l.m);

    /* probe and drift on one page from the store */
    const char *dr[] = {"drift", "--golden",    h,    "--candidate",
                        f,       "--sequences", "1",  "--max-context",
                        "1024",  "--bootstrap", "20", "--decode-tokens",
                        "4",     "--db",        db,   NULL};
    int rc = proc_run(dr, NULL, NULL, NULL, 300);
    assert_true(rc == 0 || rc == 1);
    char *all = xasprintf("%s/all.html", dir);
    const char *rp[] = {"report", "--db", db, "-o", all, NULL};
    assert_int_equal(proc_run(rp, NULL, NULL, NULL, 120), 0);
    measure(all, &l);
    assert_int_equal(l.overflow, 0);
    assert_summary(l.m);
    assert_int_equal(json_array_size(json_object_get(l.m, "sections")), 2);
    json_decref(l.m);

    /* a bisect report, alone and with the probe and drift runs */
    const char *bp[] = {"report",
                        "--db",
                        "none.db",
                        "--bisect",
                        "tests/report/fixtures/bisect.json",
                        "-o",
                        all,
                        NULL};
    assert_int_equal(proc_run(bp, NULL, NULL, NULL, 120), 0);
    measure(all, &l);
    assert_int_equal(l.overflow, 0);
    assert_summary(l.m);
    json_decref(l.m);
    const char *ip[] = {
        "report", "--db", db,  "--bisect", "tests/report/fixtures/bisect.json",
        "-o",     all,    NULL};
    assert_int_equal(proc_run(ip, NULL, NULL, NULL, 120), 0);
    measure(all, &l);
    assert_int_equal(l.overflow, 0);
    assert_summary(l.m);
    assert_int_equal(json_array_size(json_object_get(l.m, "sections")), 3);
    json_decref(l.m);

    /* long variant names */
    char *rpage = xasprintf("%s/reasoning.html", dir);
    const char *ra[] = {"probe",     "--endpoint", f,       "--kinds",
                        "reasoning", "--lengths",  "1k,2k", "--no-store",
                        "--report",  rpage,        NULL};
    rc = proc_run(ra, NULL, NULL, NULL, 300);
    assert_true(rc == 0 || rc == 1);
    measure(rpage, &l);
    assert_int_equal(l.overflow, 0);
    assert_summary(l.m);
    json_decref(l.m);

    /* the check catches what it is meant to: a title and a label too
     * long for their boxes */
    char *bad = xasprintf("%s/bad.html", dir);
    FILE *fp = fopen(bad, "w");
    assert_non_null(fp);
    fputs("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-"
          "Policy\" content=\"default-src 'none'\"></head><body>"
          "<figure style=\"width:200px\"><figcaption style=\"white-space:"
          "nowrap\">a caption far too long for its two hundred "
          "pixels</figcaption>"
          "<svg class=\"heat\" viewBox=\"0 0 60 30\" width=\"60\" "
          "height=\"30\"><text x=\"2\" y=\"20\">reasoning_content"
          "</text></svg></figure></body></html>\n",
          fp);
    fclose(fp);
    measure(bad, &l);
    assert_true(l.overflow >= 2);
    json_decref(l.m);
    free(bad);
    free(rpage);
    free(all);
    free(db);
    free(page);
    free(h);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_screenshot_has_size_and_is_not_blank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_payloads_stay_text, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_live_payloads_stay_text, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_layout_fits, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
