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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_screenshot_has_size_and_is_not_blank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_payloads_stay_text, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_live_payloads_stay_text, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
