/*
 * A golden saved once (`drift --save-golden FILE`) and compared against
 * later (`drift --golden-file FILE --candidate URL`), against `fidelity
 * sim` servers on ephemeral 127.0.0.1 ports: the comparison against the
 * file gives the same --json summary as against the live golden (the
 * sim is deterministic); a candidate with another tokenizer, a truncated
 * or edited file, another file version and a contradicting option are
 * refused before any comparison, each naming what is wrong. Every server
 * is stopped by teardown, also after a failed assertion.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <xxhash.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/diag.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/proc.h"

static struct proc G, C, B;
static bool up_g, up_c, up_b;
static char dir[] = "/tmp/fidelity-gfile-XXXXXX";
static char gfile[128];

static int group_setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    if (up_g)
        proc_stop(&G);
    if (up_c)
        proc_stop(&C);
    if (up_b)
        proc_stop(&B);
    up_g = up_c = up_b = false;
    return 0;
}

static void start(struct proc *p, bool *up, const char *opt)
{
    const char *a[] = {"sim", "--listen", "127.0.0.1:0", opt, NULL};
    assert_int_equal(proc_start(p, a), 0);
    *up = true;
}

/* Runs fidelity with args (NULL-terminated); the exit status. */
static int run(const char *const *args, struct buf *err)
{
    struct buf out = BUF_INIT;
    buf_reset(err);
    int rc = proc_run(args, NULL, &out, err, 120);
    buf_release(&out);
    return rc;
}

static json_t *load(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("'%s': %s", path, e.text);
    return j;
}

/* The saving run: sim G's answers into gfile, without the decode path
 * (the test of the decode path saves its own). */
static void save(struct buf *err)
{
    char url[64];
    snprintf(url, sizeof(url), "%s", proc_url(&G));
    const char *a[] = {"drift", "--golden",    url,   "--save-golden",
                       gfile,   "--sequences", "2",   "--max-context",
                       "512",   "--bootstrap", "100", "--decode-tokens",
                       "0",     NULL};
    int rc = run(a, err);
    if (rc)
        fail_msg("save: exit %d: %s", rc, err->data);
    assert_non_null(strstr(err->data, "saved"));
}

/* The sim's count of model requests (completions and chat). */
static long model_requests(const struct proc *p)
{
    char url[128];
    struct diag d;
    long st = 0;
    json_t *s = NULL;
    struct http_client *h = http_client_new();
    snprintf(url, sizeof(url), "%s/sim/stats", proc_url(p));
    assert_int_equal(http_json(h, url, NULL, NULL, 5000, &st, &s, &d), 0);
    http_client_free(h);
    json_t *n = json_object_get(s, "model_requests");
    assert_true(json_is_integer(n));
    long v = (long)json_integer_value(n);
    json_decref(s);
    return v;
}

/* The same comparison against the live golden and against the file:
 * the same summary, figure for figure. */
static void test_file_gives_the_live_figures(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    char gurl[64], curl[64];
    char *live = xasprintf("%s/live.json", dir),
         *file = xasprintf("%s/file.json", dir);
    snprintf(gfile, sizeof(gfile), "%s/golden.fgold", dir);
    start(&G, &up_g, NULL);
    start(&C, &up_c, "--preset=routed-scaling");
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&G));
    snprintf(curl, sizeof(curl), "%s", proc_url(&C));
    save(&err);
    const char *l[] = {"drift", "--golden",        gurl,     "--candidate",
                       curl,    "--sequences",     "2",      "--max-context",
                       "512",   "--decode-tokens", "0",      "--bootstrap",
                       "100",   "--no-store",      "--json", live,
                       NULL};
    int rc_live = run(l, &err);
    /* the golden is gone: only the file answers for it */
    proc_stop(&G);
    up_g = false;
    const char *f[] = {
        "drift", "--golden-file", gfile,    "--candidate", curl, "--bootstrap",
        "100",   "--no-store",    "--json", file,          NULL};
    int rc_file = run(f, &err);
    assert_int_equal(rc_file, rc_live);
    assert_non_null(strstr(err.data, "answered from"));
    json_t *a = load(live), *b = load(file);
    assert_string_equal(json_string_value(json_object_get(b, "golden_file")),
                        gfile);
    json_object_del(b, "golden_file");
    char *sa = json_dumps(a, JSON_SORT_KEYS),
         *sb = json_dumps(b, JSON_SORT_KEYS);
    if (strcmp(sa, sb))
        fail_msg("the summaries differ:\nlive %.400s\nfile %.400s", sa, sb);
    /* the fault is seen through the file as live */
    assert_string_not_equal(json_string_value(json_object_get(b, "verdict")),
                            "PASS");
    free(sa);
    free(sb);
    json_decref(a);
    json_decref(b);
    free(live);
    free(file);
    buf_release(&err);
}

/* Runs drift against the live golden (gurl) and against file, with the
 * decode path, into DIR/NAME-live.json and DIR/NAME-file.json; checks
 * the exit codes agree and returns both summaries (file's without
 * golden_file; its decode section's saved_golden into *sg). */
static void decode_pair(const char *name, const char *gurl, const char *file,
                        const char *curl, json_t **live, json_t **saved,
                        json_t **sg)
{
    struct buf err = BUF_INIT;
    char *lj = xasprintf("%s/%s-live.json", dir, name),
         *fj = xasprintf("%s/%s-file.json", dir, name);
    const char *l[] = {"drift", "--golden",        gurl,     "--candidate",
                       curl,    "--sequences",     "2",      "--max-context",
                       "512",   "--decode-tokens", "16",     "--decode-seqs",
                       "1",     "--decode-prompt", "128",    "--bootstrap",
                       "100",   "--no-store",      "--json", lj,
                       NULL};
    int rc_live = run(l, &err);
    const char *f[] = {
        "drift",       "--golden-file", file,         "--candidate", curl,
        "--bootstrap", "100",           "--no-store", "--json",      fj,
        NULL};
    int rc_file = run(f, &err);
    if (rc_file != rc_live)
        fail_msg("%s: exit %d against the file, %d live: %s", name, rc_file,
                 rc_live, err.data);
    *live = load(lj);
    *saved = load(fj);
    json_object_del(*saved, "golden_file");
    json_t *dec = json_object_get(*saved, "decode");
    assert_non_null(dec);
    *sg = json_incref(json_object_get(dec, "saved_golden"));
    assert_non_null(*sg);
    json_object_del(dec, "saved_golden");
    free(lj);
    free(fj);
    buf_release(&err);
}

static long jint(const json_t *o, const char *k)
{
    return (long)json_integer_value(json_object_get(o, k));
}

static const json_t *dpath(const json_t *summary, const char *path)
{
    return json_object_get(json_object_get(summary, "decode"), path);
}

/* The decode path against a saved golden: the golden's greedy output is
 * saved; a candidate that generates the same output gives the live
 * summary, figure for figure; one whose decode steps are noisy (its
 * output parts from the golden's at the first step) is found by the same
 * decode-path FAIL and attribution as live, on the step where the two
 * part, compared with the golden's token. */
static void test_decode_path_from_the_file(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    char gurl[64], hurl[64], nurl[64];
    char *dfile = xasprintf("%s/decode.fgold", dir);
    start(&G, &up_g, NULL);
    start(&C, &up_c, NULL);
    start(&B, &up_b, "--decode-noise=0.3");
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&G));
    snprintf(hurl, sizeof(hurl), "%s", proc_url(&C));
    snprintf(nurl, sizeof(nurl), "%s", proc_url(&B));
    const char *a[] = {"drift", "--golden",
                       gurl,    "--save-golden",
                       dfile,   "--sequences",
                       "2",     "--max-context",
                       "512",   "--decode-tokens",
                       "16",    "--decode-seqs",
                       "1",     "--decode-prompt",
                       "128",   "--bootstrap",
                       "100",   NULL};
    int rc = run(a, &err);
    if (rc)
        fail_msg("save: exit %d: %s", rc, err.data);
    json_t *live, *file, *sg;
    /* the same output as the golden's: the live summary */
    decode_pair("healthy", gurl, dfile, hurl, &live, &file, &sg);
    assert_int_equal(jint(sg, "golden_steps"), 16);
    assert_int_equal(jint(sg, "shared_steps"), 16);
    assert_int_equal(jint(sg, "parted_steps"), 0);
    char *sa = json_dumps(live, JSON_SORT_KEYS),
         *sb = json_dumps(file, JSON_SORT_KEYS);
    if (strcmp(sa, sb))
        fail_msg("the summaries differ:\nlive %.600s\nfile %.600s", sa, sb);
    free(sa);
    free(sb);
    json_decref(live);
    json_decref(file);
    json_decref(sg);
    /* noisy decode steps: seen through the file as live */
    decode_pair("noisy", gurl, dfile, nurl, &live, &file, &sg);
    assert_int_equal(jint(sg, "shared_steps"), 0);
    assert_int_equal(jint(sg, "parted_steps"), 1);
    const char *paths[] = {"decode_vs_golden_prefill", "decode_vs_prefill",
                           "prefill_vs_prefill"};
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(json_string_value(json_object_get(
                                dpath(file, paths[i]), "verdict")),
                            json_string_value(json_object_get(
                                dpath(live, paths[i]), "verdict")));
    assert_string_equal(
        json_string_value(json_object_get(dpath(file, paths[0]), "verdict")),
        "FAIL");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(file, "attribution"), "kind")),
                        json_string_value(json_object_get(
                            json_object_get(live, "attribution"), "kind")));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(file, "attribution"), "kind")),
                        "decode");
    assert_string_equal(json_string_value(json_object_get(file, "verdict")),
                        json_string_value(json_object_get(live, "verdict")));
    json_decref(live);
    json_decref(file);
    json_decref(sg);
    free(dfile);
    buf_release(&err);
}

/* A candidate whose tokenizer is not the saved golden's: refused, naming
 * both, before any scoring request. */
static void test_other_tokenizer_refused(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    char burl[64];
    start(&B, &up_b, "--byte-tokens");
    snprintf(burl, sizeof(burl), "%s", proc_url(&B));
    const char *f[] = {"drift", "--golden-file", gfile, "--candidate",
                       burl,    "--no-store",    NULL};
    int rc = run(f, &err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err.data, "tokenizes differently"));
    assert_non_null(strstr(err.data, gfile));
    assert_non_null(strstr(err.data, burl));
    /* readiness and one /tokenize: nothing scored */
    assert_int_equal(model_requests(&B), 0);
    buf_release(&err);
}

/* Decompresses gfile, lets edit change the bytes, writes it to out. */
static void rewrite(const char *out, void (*edit)(struct buf *))
{
    struct buf b = BUF_INIT;
    char chunk[1 << 16];
    int n;
    gzFile in = gzopen(gfile, "rb");
    assert_non_null(in);
    while ((n = gzread(in, chunk, sizeof(chunk))) > 0)
        buf_add(&b, chunk, (size_t)n);
    gzclose(in);
    edit(&b);
    gzFile o = gzopen(out, "wb");
    assert_non_null(o);
    assert_int_equal(gzwrite(o, b.data, (unsigned)b.len), (int)b.len);
    gzclose(o);
    buf_release(&b);
}

static void cut_last_line(struct buf *b)
{
    b->len -= 2;
    while (b->len && b->data[b->len - 1] != '\n')
        b->len--;
}

static void change_a_digit(struct buf *b)
{
    /* a digit of an answer in the middle of the file */
    for (size_t i = b->len / 2; i < b->len; i++)
        if (b->data[i] >= '0' && b->data[i] <= '8') {
            b->data[i]++;
            return;
        }
    fail_msg("no digit to change");
}

/* Version 3 (one this fidelity does not know), with a checksum that
 * holds: refused for its version. */
static void version_3(struct buf *b)
{
    char *v = strstr(b->data, "\"version\":2");
    assert_non_null(v);
    v[10] = '3';
    char *trailer = b->data + b->len - 2;
    while (trailer > b->data && trailer[-1] != '\n')
        trailer--;
    char sum[17];
    snprintf(
        sum, sizeof(sum), "%016llx",
        (unsigned long long)XXH64(b->data, (size_t)(trailer - b->data), 0));
    char *x = strstr(trailer, "\"xxh64\":\"");
    assert_non_null(x);
    memcpy(x + 9, sum, 16);
}

static void test_damaged_files_refused(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    char curl[64], *bad = xasprintf("%s/bad.fgold", dir);
    start(&C, &up_c, NULL);
    snprintf(curl, sizeof(curl), "%s", proc_url(&C));
    const char *f[] = {"drift", "--golden-file", bad, "--candidate",
                       curl,    "--no-store",    NULL};
    static const struct {
        void (*edit)(struct buf *);
        const char *says;
    } cases[] = {
        {cut_last_line, "truncated"},
        {change_a_digit, "checksum"},
        {version_3, "version 3"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
        rewrite(bad, cases[k].edit);
        assert_int_equal(run(f, &err), 2);
        if (!strstr(err.data, cases[k].says))
            fail_msg("case %zu: '%s' not in: %s", k, cases[k].says, err.data);
        assert_non_null(strstr(err.data, bad));
    }
    /* a gzip stream cut short */
    FILE *w = fopen(bad, "wb");
    FILE *r = fopen(gfile, "rb");
    char chunk[4096];
    size_t n = fread(chunk, 1, sizeof(chunk), r);
    fwrite(chunk, 1, n / 2, w);
    fclose(r);
    fclose(w);
    assert_int_equal(run(f, &err), 2);
    assert_non_null(strstr(err.data, bad));
    /* a byte of the compressed stream changed: zlib's reason, in words
     * (its text was once read after the stream was closed) */
    w = fopen(bad, "wb");
    r = fopen(gfile, "rb");
    n = fread(chunk, 1, sizeof(chunk), r);
    chunk[100] ^= 0x5a;
    fwrite(chunk, 1, n, w);
    while ((n = fread(chunk, 1, sizeof(chunk), r)) > 0)
        fwrite(chunk, 1, n, w);
    fclose(r);
    fclose(w);
    assert_int_equal(run(f, &err), 2);
    const char *why = strstr(err.data, "is damaged (");
    assert_non_null(why);
    why += strlen("is damaged (");
    assert_true(*why >= 'a' && *why <= 'z');
    for (const char *p = err.data; *p; p++)
        if (*p != '\n' && (*p < ' ' || *p > '~'))
            fail_msg("not text at %zu: %s", (size_t)(p - err.data), err.data);
    /* none of them sent the candidate a scoring request */
    assert_int_equal(model_requests(&C), 0);
    free(bad);
    buf_release(&err);
}

/* Options: one that shapes the requests and contradicts the file is
 * refused with the file's value; the wrong combinations are usage
 * errors. */
static void test_options_checked(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    char curl[64];
    start(&C, &up_c, NULL);
    snprintf(curl, sizeof(curl), "%s", proc_url(&C));
    const char *seqs[] = {"drift", "--golden-file", gfile, "--candidate",
                          curl,    "--sequences",   "3",   "--no-store",
                          NULL};
    assert_int_equal(run(seqs, &err), 2);
    assert_non_null(strstr(err.data, "sequences '3' contradicts"));
    assert_non_null(strstr(err.data, "sequences '2'"));
    const char *both[] = {"drift", "--golden-file", gfile, "--golden",
                          curl,    "--candidate",   curl,  NULL};
    assert_int_equal(run(both, &err), 2);
    assert_non_null(strstr(err.data, "drop --golden"));
    const char *save_cand[] = {"drift", "--golden",      curl,  "--candidate",
                               curl,    "--save-golden", gfile, NULL};
    assert_int_equal(run(save_cand, &err), 2);
    assert_non_null(strstr(err.data, "drop --candidate"));
    const char *missing[] = {
        "drift", "--golden-file", "/nonexistent/g.fgold", "--candidate", curl,
        NULL};
    assert_int_equal(run(missing, &err), 2);
    assert_non_null(strstr(err.data, "/nonexistent/g.fgold"));
    assert_int_equal(model_requests(&C), 0);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_file_gives_the_live_figures, teardown),
        cmocka_unit_test_teardown(test_decode_path_from_the_file, teardown),
        cmocka_unit_test_teardown(test_other_tokenizer_refused, teardown),
        cmocka_unit_test_teardown(test_damaged_files_refused, teardown),
        cmocka_unit_test_teardown(test_options_checked, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
