/*
 * Tests of `fidelity export` (src/cmd/cmd_export.c, src/store/export.c) on
 * the recorded harness sessions of tests/fixtures/ stored as record would
 * have stored them, plus a body that is not JSON: JSONL gives every
 * exchange's request bytes back exactly; HAR has every field the HAR 1.2
 * specification requires (checked here against its field list) and an
 * independent reader (npm's har-validator, tests/e2e/har/install.sh)
 * accepts it; the OpenAI form reads as a drift corpus; and a secret sent
 * in a header or a JSON body through `fidelity record` appears in no
 * output of `show` or `export`.
 */
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

#include "core/buf.h"
#include "core/xalloc.h"
#include "drift/corpus.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/need.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/sh.h"
#include "util/upstream.h"
#include "util/xchg_build.h"
#include "wire/jdump.h"

static const char *const fixtures[] = {
    "tests/fixtures/opencode-1.18.33/compaction-session.jsonl",
    "tests/fixtures/kilo-7.7.7/session.jsonl",
    "tests/fixtures/continue-1.5.47/session.jsonl",
};

static char *dir, *db;

/* A request whose body is not JSON (stored raw, bytes kept). */
static void put_raw(struct db *s)
{
    struct diag d;
    struct xchg x;
    static const char body[] = "not json: \x01\tline\n{\"a\":";
    xchg_init(&x);
    x.session = xstrdup("raw-body");
    x.kind = xstrdup("other");
    x.method = xstrdup("POST");
    x.path = xstrdup("/v1/completions?alt=1&x");
    x.req_headers = json_pack("{s:s}", "Host", "127.0.0.1:9");
    x.req_raw = xmalloc(sizeof(body));
    memcpy(x.req_raw, body, sizeof(body));
    x.req_raw_len = sizeof(body) - 1;
    x.req_malformed = true;
    x.status = 400;
    x.resp_raw = xstrdup("{\"error\":\"bad\"}");
    x.resp_raw_len = strlen(x.resp_raw);
    x.started = 1796137000.5;
    assert_int_equal(xchg_put(s, &x, &d), 0);
    xchg_release(&x);
}

/* A one-shot chat about titles: record's word-based guess stores it as a
 * title ("titles" early in its system prompt, "generate a title" in its
 * user text), but it quotes nothing another request sent: by structure a
 * main request, of a normal session. */
static void put_books(struct db *s)
{
    struct diag d;
    struct xchg x;
    xb_init(&x, 0, "ses_books",
            xb_body("m", json_pack("[o, o]",
                                   xb_msg("system", "You write titles for "
                                                    "books."),
                                   xb_msg("user", "Generate a title for my "
                                                  "novel about a lighthouse "
                                                  "keeper."))));
    x.kind = xstrdup("title");
    x.started = 1796137100.0;
    xb_reply(&x, "The Last Light", NULL, NULL, 30, 4, "stop");
    assert_int_equal(xchg_put(s, &x, &d), 0);
    xb_release(&x);
}

static int setup(void **state)
{
    (void)state;
    struct db *s;
    struct diag d = {{0}};
    dir = rec_tmpdir();
    db = xasprintf("%s/fixtures.db", dir);
    if (store_open(db, &s, &d) || xchg_schema(s, &d))
        return -1;
    for (size_t i = 0; i < sizeof(fixtures) / sizeof(*fixtures); i++)
        if (xchg_spill_each(fixtures[i], xb_put_copy, s, &d))
            return -1;
    put_raw(s);
    put_books(s);
    store_close(s);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rec_rmdir(dir);
    free(db);
    return 0;
}

/* Runs fidelity ARGV, expecting exit 0; its stdout, fresh. */
static char *run_ok(const char *const argv[])
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc)
        fail_msg("exit %d: %s", rc, buf_str(&err));
    buf_release(&err);
    return buf_detach(&out, NULL) ?: xstrdup("");
}

struct rows {
    json_t *by_id; /* decimal id -> the stored body's canonical bytes */
};

static int canon(const struct xchg *x, void *ud)
{
    struct rows *r = ud;
    char k[32];
    snprintf(k, sizeof(k), "%lld", (long long)x->id);
    if (x->req_body) {
        char *s = jdump_str(x->req_body, true, NULL);
        json_object_set_new(r->by_id, k, json_string(s));
        free(s);
    } else {
        json_object_set_new(
            r->by_id, k,
            json_pack("{s:s%}", "raw", x->req_raw, x->req_raw_len));
    }
    return 0;
}

/* Every exchange's request bytes are in its JSONL line exactly: the body
 * as the store's canonical text, a raw body as its text. */
static void test_jsonl_round_trips_request_bytes(void **state)
{
    (void)state;
    struct rows r = {json_object()};
    struct db *s;
    struct diag d;
    assert_int_equal(store_open(db, &s, &d), 0);
    assert_int_equal(xchg_each(s, NULL, canon, &r, &d), 0);
    store_close(s);
    const char *av[] = {"export", "--db", db, "--format", "jsonl", NULL};
    char *out = run_ok(av), *save = NULL;
    size_t lines = 0;
    for (char *l = strtok_r(out, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        assert_non_null(j);
        char k[32];
        snprintf(k, sizeof(k), "%lld",
                 (long long)json_integer_value(json_object_get(j, "id")));
        json_t *want = json_object_get(r.by_id, k),
               *req = json_object_get(j, "request");
        assert_non_null(want);
        if (json_is_string(want)) {
            char *needle = xasprintf("\"body\":%s}", json_string_value(want));
            if (!strstr(l, needle))
                fail_msg("exchange %s: the body differs from the store's "
                         "bytes:\n%.300s\n%.300s",
                         k, strstr(l, "\"body\":"), needle);
            free(needle);
        } else {
            json_t *raw = json_object_get(want, "raw");
            assert_true(json_equal(raw, json_object_get(req, "body_text")));
        }
        assert_non_null(json_object_get(j, "session"));
        assert_non_null(json_object_get(j, "timings"));
        json_decref(j);
        lines++;
    }
    assert_int_equal(lines, json_object_size(r.by_id));
    free(out);
    json_decref(r.by_id);
}

/*
 * The HAR 1.2 field list (http://www.softwareishard.com/blog/har-12-spec/):
 * for each object the fields the specification marks required, and their
 * JSON types ('s' string, 'n' number, 'o' object, 'a' array). Optional
 * fields written (pageref, postData, content.text, encoding) are checked
 * where they occur.
 */
struct har_field {
    const char *key;
    char type;
};
static const struct har_field har_log[] = {
    {"version", 's'}, {"creator", 'o'}, {"entries", 'a'}, {NULL, 0}};
static const struct har_field har_creator[] = {
    {"name", 's'}, {"version", 's'}, {NULL, 0}};
static const struct har_field har_page[] = {{"startedDateTime", 's'},
                                            {"id", 's'},
                                            {"title", 's'},
                                            {"pageTimings", 'o'},
                                            {NULL, 0}};
static const struct har_field har_entry[] = {{"startedDateTime", 's'},
                                             {"time", 'n'},
                                             {"request", 'o'},
                                             {"response", 'o'},
                                             {"cache", 'o'},
                                             {"timings", 'o'},
                                             {NULL, 0}};
static const struct har_field har_request[] = {
    {"method", 's'},      {"url", 's'},      {"httpVersion", 's'},
    {"cookies", 'a'},     {"headers", 'a'},  {"queryString", 'a'},
    {"headersSize", 'n'}, {"bodySize", 'n'}, {NULL, 0}};
static const struct har_field har_response[] = {
    {"status", 'n'},      {"statusText", 's'},
    {"httpVersion", 's'}, {"cookies", 'a'},
    {"headers", 'a'},     {"content", 'o'},
    {"redirectURL", 's'}, {"headersSize", 'n'},
    {"bodySize", 'n'},    {NULL, 0}};
static const struct har_field har_content[] = {
    {"size", 'n'}, {"mimeType", 's'}, {NULL, 0}};
static const struct har_field har_timings[] = {
    {"send", 'n'}, {"wait", 'n'}, {"receive", 'n'}, {NULL, 0}};
static const struct har_field har_pair[] = {
    {"name", 's'}, {"value", 's'}, {NULL, 0}};
static const struct har_field har_post[] = {{"mimeType", 's'}, {NULL, 0}};

static bool har_type(json_t *v, char t)
{
    return t == 's'   ? json_is_string(v)
           : t == 'n' ? json_is_number(v)
           : t == 'o' ? json_is_object(v)
                      : json_is_array(v);
}

static void har_need(json_t *o, const struct har_field *f, const char *what)
{
    if (!json_is_object(o))
        fail_msg("HAR: %s is not an object", what);
    for (; f->key; f++)
        if (!har_type(json_object_get(o, f->key), f->type))
            fail_msg("HAR: %s lacks '%s' (%c)", what, f->key, f->type);
}

static void har_pairs(json_t *a, const char *what)
{
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) har_need(v, har_pair, what);
}

/* "YYYY-MM-DDThh:mm:ss.sssZ": ISO 8601, as the specification asks. */
static void har_date(json_t *v)
{
    int y, mo, d, h, mi, s, ms;
    char z;
    const char *t = json_string_value(v);
    if (!t ||
        sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h, &mi, &s,
               &ms, &z) != 8 ||
        z != 'Z')
        fail_msg("HAR: startedDateTime '%s' is not ISO 8601", t ? t : "");
}

static void har_check_entry(json_t *e)
{
    har_need(e, har_entry, "entry");
    har_date(json_object_get(e, "startedDateTime"));
    json_t *rq = json_object_get(e, "request"),
           *rs = json_object_get(e, "response");
    har_need(rq, har_request, "request");
    har_need(rs, har_response, "response");
    har_need(json_object_get(rs, "content"), har_content, "content");
    for (int k = 0; k < 2; k++) {
        har_pairs(json_object_get(k ? rs : rq, "headers"), "header");
        har_pairs(json_object_get(k ? rs : rq, "cookies"), "cookie");
    }
    har_pairs(json_object_get(rq, "queryString"), "queryString");
    json_t *pd = json_object_get(rq, "postData");
    if (pd) {
        har_need(pd, har_post, "postData");
        assert_true(json_is_string(json_object_get(pd, "text")));
    }
    json_t *t = json_object_get(e, "timings");
    har_need(t, har_timings, "timings");
    double sum = 0;
    for (const struct har_field *f = har_timings; f->key; f++) {
        double v = json_number_value(json_object_get(t, f->key));
        assert_true(v >= 0);
        sum += v;
    }
    /* time: the sum of the timings that apply */
    assert_true(sum - json_number_value(json_object_get(e, "time")) < 1e-6);
    assert_true(json_number_value(json_object_get(e, "time")) - sum < 1e-6);
}

static json_t *export_har(const char *path)
{
    const char *av[] = {"export", "--db", db,   "--format",
                        "har",    "-o",   path, NULL};
    free(run_ok(av));
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("HAR does not parse: %s at line %d", e.text, e.line);
    return j;
}

static void test_har_has_the_required_fields(void **state)
{
    (void)state;
    char *path = xasprintf("%s/all.har", dir);
    json_t *j = export_har(path), *log = json_object_get(j, "log"), *v;
    size_t i;
    har_need(log, har_log, "log");
    assert_string_equal(json_string_value(json_object_get(log, "version")),
                        "1.2");
    har_need(json_object_get(log, "creator"), har_creator, "creator");
    json_array_foreach(json_object_get(log, "pages"), i, v)
    {
        har_need(v, har_page, "page");
        har_date(json_object_get(v, "startedDateTime"));
    }
    /* 16 + 14 + 11 exchanges of the fixtures, the raw one and the
     * one-shot chat */
    assert_int_equal(json_array_size(json_object_get(log, "entries")), 43);
    json_array_foreach(json_object_get(log, "entries"), i, v)
        har_check_entry(v);
    /* a stream's raw SSE is kept; the raw request body as its text */
    json_t *e0 = json_array_get(json_object_get(log, "entries"), 0);
    const char *text = json_string_value(json_object_get(
        json_object_get(json_object_get(e0, "response"), "content"), "text"));
    assert_non_null(text);
    assert_non_null(strstr(text, "data: {"));
    json_decref(j);
    free(path);
}

/* An independent reader: npm's har-validator (the HAR 1.2 JSON schema of
 * har-schema), installed by tests/e2e/har/install.sh. */
static void test_har_loads_in_har_validator(void **state)
{
    (void)state;
    const char *pkg = "tests/e2e/har/node_modules/har-validator";
    char *pj = xasprintf("%s/package.json", pkg);
    need_command("node");
    if (access(pj, R_OK))
        need_missing("npm's har-validator (tests/e2e/har/install.sh)");
    char *path = xasprintf("%s/v.har", dir);
    json_decref(export_har(path));
    char *abs = realpath(pkg, NULL);
    char *js = xasprintf(
        "const v = require('%s'); const fs = require('fs');"
        "v.har(JSON.parse(fs.readFileSync('%s', 'utf8')))"
        ".then(() => { console.log('valid'); process.exit(0); },"
        " e => { console.error(JSON.stringify(e.errors || String(e)));"
        " process.exit(1); });",
        abs, path);
    char *file = xasprintf("%s/check.js", dir), *cmd = NULL;
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(js, f);
    fclose(f);
    cmd = xasprintf("node '%s'", file);
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = sh_run(cmd, &out, &err, 60);
    if (rc)
        fail_msg("har-validator refused the HAR (exit %d): %s", rc,
                 buf_str(&err));
    assert_non_null(strstr(buf_str(&out), "valid"));
    buf_release(&out);
    buf_release(&err);
    free(js);
    free(cmd);
    free(file);
    free(abs);
    free(path);
    free(pj);
}

/* One conversation per session, each read by drift's --corpus parser,
 * ending with the reply. */
static void test_openai_reads_as_a_drift_corpus(void **state)
{
    (void)state;
    const char *av[] = {"export", "--db", db, "--format", "openai", NULL};
    char *out = run_ok(av), *save = NULL;
    size_t n = 0;
    for (char *l = strtok_r(out, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        struct drift_item it = {0};
        struct diag d;
        assert_int_equal(drift_corpus_parse_line(l, strlen(l), "x", &it, &d),
                         0);
        json_t *last =
            json_array_get(it.messages, json_array_size(it.messages) - 1);
        assert_string_equal(json_string_value(json_object_get(last, "role")),
                            "assistant");
        json_decref(it.messages);
        free(it.ids);
        n++;
    }
    /* the three harness sessions and the one-shot chat; the raw-body
     * session has no conversation */
    assert_int_equal(n, 4);
    free(out);
}

/* session -> {kind: n}, counted from export's JSONL lines */
static json_t *export_kinds(void)
{
    const char *av[] = {"export", "--db", db, "--format", "jsonl", NULL};
    char *out = run_ok(av), *save = NULL;
    json_t *by = json_object();
    for (char *l = strtok_r(out, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
        json_t *j = json_loads(l, 0, NULL);
        assert_non_null(j);
        const char *ses = json_string_value(json_object_get(j, "session"));
        const char *kind = json_string_value(json_object_get(j, "kind"));
        assert_non_null(ses);
        assert_non_null(kind);
        json_t *k = json_object_get(by, ses);
        if (!k)
            json_object_set_new(by, ses, k = json_object());
        json_object_set_new(
            k, kind,
            json_integer(json_integer_value(json_object_get(k, kind)) + 1));
        json_decref(j);
    }
    free(out);
    return by;
}

/* The session named ses among rows (an array of {"session", ...}). */
static json_t *row_of(json_t *rows, const char *ses)
{
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        if (!strcmp(json_string_value(json_object_get(r, "session")), ses))
            return r;
    }
    fail_msg("no session '%s'", ses);
    return NULL;
}

/* Export writes the kind audit decides by structure, not record's stored
 * guess: per session, the kinds of the JSONL lines are audit's and
 * sessions' counts. The harnesses' title requests stay titles; the
 * one-shot chat about book titles (stored as "title") is one main
 * request of a normal session, with no side request. */
static void test_kind_is_audits(void **state)
{
    (void)state;
    json_t *by = export_kinds();
    const char *aa[] = {"audit", "--db", db, "--json", "-", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    proc_run(aa, NULL, &out, &err, 60);
    json_t *audit = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(audit);
    const char *sa[] = {"sessions", "--db", db, "--json", "-", NULL};
    char *s = run_ok(sa);
    json_t *listed = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(listed);
    json_t *rows = json_object_get(audit, "sessions");
    assert_int_equal(json_array_size(rows), json_object_size(by));
    size_t i, titles = 0;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        const char *ses = json_string_value(json_object_get(r, "session"));
        json_t *kinds = json_object_get(r, "requests");
        json_t *got = json_object_get(by, ses);
        if (!json_equal(kinds, got))
            fail_msg("session %s: export's kinds %s, audit's %s", ses,
                     json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS),
                     json_dumps(kinds, JSON_COMPACT | JSON_SORT_KEYS));
        assert_true(json_equal(
            kinds,
            json_object_get(row_of(json_object_get(listed, "sessions"), ses),
                            "requests")));
        titles += (size_t)json_integer_value(json_object_get(kinds, "title"));
    }
    /* opencode's, Kilo's and Continue's title requests */
    assert_true(titles >= 3);
    /* HAR's "_kind" is the same kind, entry by entry */
    char *path = xasprintf("%s/kinds.har", dir);
    json_t *har = export_har(path), *e;
    json_array_foreach(json_object_get(json_object_get(har, "log"), "entries"),
                       i, e)
    {
        const char *ses = json_string_value(json_object_get(e, "pageref"));
        const char *kind = json_string_value(json_object_get(e, "_kind"));
        json_t *k = json_object_get(by, ses);
        assert_non_null(kind);
        assert_true(json_integer_value(json_object_get(k, kind)) > 0);
        json_object_set_new(
            k, kind,
            json_integer(json_integer_value(json_object_get(k, kind)) - 1));
    }
    json_decref(har);
    free(path);
    json_t *books = json_object_get(row_of(rows, "ses_books"), "requests");
    assert_int_equal(json_object_size(books), 1);
    assert_int_equal(json_integer_value(json_object_get(books, "main")), 1);
    json_decref(audit);
    json_decref(listed);
    json_decref(by);
    buf_release(&out);
    buf_release(&err);
}

#define HEADER_SECRET "sk-header-7f3a9c1e5b"
#define BODY_SECRET "sk-body-2d8e4f6a0c"

static void assert_no_secret(const char *const argv[], bool marked)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc)
        fail_msg("%s %s: exit %d: %s", argv[0], argv[1], rc, buf_str(&err));
    assert_true(out.len > 0);
    if (strstr(buf_str(&out), HEADER_SECRET) ||
        strstr(buf_str(&out), BODY_SECRET) || strstr(buf_str(&err), "sk-"))
        fail_msg("a secret is in the output of %s %s", argv[0], argv[1]);
    if (marked && !strstr(buf_str(&out), "[redacted]"))
        fail_msg("no redaction mark in %s %s: %.2000s", argv[0], argv[1],
                 buf_str(&out));
    buf_release(&out);
    buf_release(&err);
}

/* A secret in the Authorization header and one in the body's api_key,
 * sent through record: neither appears in show (text, JSON) or export
 * (each format). */
static void test_secrets_stay_redacted(void **state)
{
    (void)state;
    char *sdb = xasprintf("%s/secret.db", dir);
    struct upstream *u = upstream_start();
    assert_non_null(u);
    struct proc rec;
    assert_int_equal(rec_start_record(&rec, upstream_url(u), sdb, NULL), 0);
    char *url = xasprintf("%s/sse", proc_url(&rec));
    const char *h[] = {"Content-Type: application/json",
                       "Authorization: Bearer " HEADER_SECRET,
                       "x-session-affinity: ses_secret01", NULL};
    const char *body = "{\"model\":\"m\",\"api_key\":\"" BODY_SECRET "\","
                       "\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"Hello there.\"}],\"stream\":true}";
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(url, body, strlen(body), h, 0, &r), 0);
    rec_resp_release(&r);
    assert_int_equal(proc_stop(&rec), 0);
    upstream_stop(u);
    const char *show[] = {"show",       "ses_secret", "--db", sdb,
                          "--messages", "--full",     NULL};
    const char *showj[] = {"show",       "ses_secret", "--db", sdb,
                           "--messages", "--json",     "-",    NULL};
    assert_no_secret(show, true);
    assert_no_secret(showj, true);
    static const char *const fmts[] = {"har", "jsonl", "openai"};
    for (int i = 0; i < 3; i++) {
        const char *ex[] = {"export", "--db", sdb, "--format", fmts[i], NULL};
        assert_no_secret(ex, i < 2); /* openai: no headers, no api_key */
    }
    free(url);
    free(sdb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsonl_round_trips_request_bytes),
        cmocka_unit_test(test_har_has_the_required_fields),
        cmocka_unit_test(test_har_loads_in_har_validator),
        cmocka_unit_test(test_openai_reads_as_a_drift_corpus),
        cmocka_unit_test(test_kind_is_audits),
        cmocka_unit_test(test_secrets_stay_redacted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
