/*
 * End-to-end tests of `fidelity record`: the real binary on an ephemeral
 * 127.0.0.1 port in front of a scripted upstream in this process (whose
 * exact bytes are known) or of `fidelity sim`. Byte-exactness, secrets,
 * each fault of issue 3, the spill file, and what the store holds.
 */
#include <curl/curl.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "store/replay.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/rec.h"
#include "util/recfx.h"
#include "util/upstream.h"

static int fx_setup_with(void **state, const char *const extra[],
                         const char *upstream)
{
    return (*state = recfx_start(extra, upstream)) ? 0 : -1;
}

static int fx_setup(void **state)
{
    return fx_setup_with(state, NULL, NULL);
}

static int fx_teardown(void **state)
{
    recfx_stop(*state);
    return 0;
}

/* Stops record (SIGTERM: it must exit 0 with everything stored) and loads
 * the store. */
static json_t *stop_and_load(struct recfx *f)
{
    assert_int_equal(proc_stop(&f->rec), 0);
    json_t *all = rec_load(f->db);
    assert_non_null(all);
    return all;
}

static const char *jstr(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (path2)
        v = json_object_get(v, path2);
    return json_string_value(v);
}

static char *url_of(const struct recfx *f, const char *path)
{
    return xasprintf("%s%s", f->url, path);
}

static void fetch_ok(const char *url, const char *body, struct rec_resp *r)
{
    rec_resp_init(r);
    assert_int_equal(rec_fetch(url, body, body ? strlen(body) : 0, NULL, 0, r),
                     0);
    assert_int_equal(r->status, 200);
}

/* What a client receives through record equals what the upstream sent,
 * byte for byte, for a sized JSON body, a chunked SSE stream and 1 MiB. */
static void test_byte_exact_scripted(void **state)
{
    struct recfx *f = *state;
    static const char *const routes[] = {"/json", "/sse", "/big"};
    for (int i = 0; i < 3; i++) {
        struct rec_resp direct, proxied;
        char *u1 = xasprintf("%s%s", upstream_url(f->up), routes[i]);
        char *u2 = url_of(f, routes[i]);
        size_t n;
        char *expect = upstream_body(routes[i], &n);
        fetch_ok(u1, "{}", &direct);
        fetch_ok(u2, "{}", &proxied);
        assert_int_equal(direct.body.len, n);
        assert_int_equal(proxied.body.len, n);
        assert_memory_equal(proxied.body.data, expect, n);
        assert_memory_equal(direct.body.data, proxied.body.data, n);
        assert_true(rec_contains(proxied.headers.data, proxied.headers.len,
                                 "X-Test: yes") ||
                    i == 1);
        free(expect);
        free(u1);
        free(u2);
        rec_resp_release(&direct);
        rec_resp_release(&proxied);
    }
    /* the request body reaches the upstream untouched too */
    static const char odd[] = "{ \"z\":1,\"messages\" :[ {\"role\":\"user\","
                              "\"content\":\"\\u00e9 \xc3\xa9\"}],\"a\":1.50}";
    struct rec_resp echo;
    char *u = url_of(f, "/echo?x=1");
    fetch_ok(u, odd, &echo);
    assert_true(echo.body.len > strlen(odd));
    assert_memory_equal(echo.body.data + echo.body.len - strlen(odd), odd,
                        strlen(odd));
    assert_true(
        rec_contains(echo.body.data, echo.body.len, "POST /echo?x=1 HTTP/1.1"));
    free(u);
    rec_resp_release(&echo);

    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 4);
    /* the SSE exchange: stored raw and reassembled */
    json_t *sse = json_array_get(all, 1);
    size_t n;
    char *expect = upstream_body("/sse", &n);
    assert_string_equal(jstr(sse, "resp_raw", NULL), expect);
    free(expect);
    assert_true(json_is_true(json_object_get(sse, "streamed")));
    assert_string_equal(jstr(sse, "end", NULL), "complete");
    json_t *reply = json_object_get(sse, "reply");
    assert_string_equal(jstr(reply, "content", NULL), "Hello world");
    assert_string_equal(jstr(reply, "reasoning_content", NULL),
                        "think \xc3\xa9");
    assert_string_equal(jstr(reply, "finish_reason", NULL), "tool_calls");
    assert_true(json_is_true(json_object_get(reply, "done")));
    assert_int_equal(json_integer_value(json_object_get(reply, "chunks")), 5);
    json_t *call = json_array_get(json_object_get(reply, "tool_calls"), 0);
    assert_string_equal(jstr(call, "id", NULL), "call_1");
    assert_string_equal(jstr(call, "function", "name"), "write");
    assert_string_equal(jstr(call, "function", "arguments"), "{\"a\":1}");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(reply, "usage"), "prompt_tokens")),
                     7);
    assert_true(json_number_value(json_object_get(sse, "up_ttfb_ms")) > 0);
    assert_true(json_number_value(json_object_get(sse, "down_total_ms")) >=
                json_number_value(json_object_get(sse, "down_ttfb_ms")));
    /* the JSON exchange */
    json_t *js = json_array_get(all, 0);
    assert_false(json_is_true(json_object_get(js, "streamed")));
    assert_string_equal(jstr(json_object_get(js, "reply"), "content", NULL),
                        "caf\xc3\xa9 \xc3\xa9");
    /* the echo request: a chat body, rebuilt from its messages */
    json_t *ec = json_array_get(all, 3);
    assert_string_equal(jstr(ec, "path", NULL), "/echo?x=1");
    json_t *want = json_loads(odd, 0, NULL);
    assert_true(json_equal(json_object_get(ec, "req_body"), want));
    json_decref(want);
    json_decref(all);
}

/* Zeroes the digits of every "created":N (the sim stamps wall-clock
 * seconds), leaving every other byte as it was. */
static void mask_created(struct buf *b)
{
    char *p = b->data;
    while (p && (p = strstr(p, "\"created\":"))) {
        p += 10;
        while (*p >= '0' && *p <= '9')
            *p++ = '0';
    }
}

static int start_sim(struct proc *p, char url[64])
{
    const char *const av[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    if (proc_start(p, av))
        return -1;
    snprintf(url, 64, "http://127.0.0.1:%d", p->port);
    return 0;
}

/* Through record, sim's answers are byte-identical to direct ones. Two
 * fresh sims get the same sequence of requests, one directly and one
 * through record (sim numbers its responses); only the wall-clock
 * "created" seconds are masked before comparing. */
static void test_byte_exact_sim(void **state)
{
    struct recfx *f = *state;
    struct proc sim_a, sim_b, rec;
    char url_a[64], url_b[64], db[300];
    assert_int_equal(start_sim(&sim_a, url_a), 0);
    assert_int_equal(start_sim(&sim_b, url_b), 0);
    snprintf(db, sizeof(db), "%s/sim.db", f->dir);
    assert_int_equal(rec_start_record(&rec, url_b, db, NULL), 0);

    static const char *const bodies[] = {
        "{\"model\":\"m\",\"temperature\":0,\"messages\":[{\"role\":\"user\","
        "\"content\":\"The access code for the blue door is 4812. What is "
        "the access code for the blue door?\"}]}",
        "{\"model\":\"m\",\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":"
        "\"user\",\"content\":\"Let X = 5. What is the value of X?\"}]}",
        "{\"model\":\"m\",\"stream\":true,\"reasoning_effort\":\"high\","
        "\"messages\":[{\"role\":\"user\",\"content\":\"hello there\"}]}",
        NULL};
    for (int i = 0; bodies[i]; i++) {
        struct rec_resp d, p;
        char *ud = xasprintf("%s/v1/chat/completions", url_a);
        char *up =
            xasprintf("http://127.0.0.1:%d/v1/chat/completions", rec.port);
        const char *const h[] = {"Content-Type: application/json", NULL};
        rec_resp_init(&d);
        rec_resp_init(&p);
        assert_int_equal(rec_fetch(ud, bodies[i], strlen(bodies[i]), h, 0, &d),
                         0);
        assert_int_equal(rec_fetch(up, bodies[i], strlen(bodies[i]), h, 0, &p),
                         0);
        assert_int_equal(p.status, 200);
        assert_true(p.body.len > 20);
        mask_created(&d.body);
        mask_created(&p.body);
        if (p.body.len != d.body.len ||
            memcmp(p.body.data, d.body.data, p.body.len))
            fprintf(stderr, "direct: %s\nproxied: %s\n", d.body.data,
                    p.body.data);
        assert_int_equal(p.body.len, d.body.len);
        assert_memory_equal(p.body.data, d.body.data, p.body.len);
        free(ud);
        free(up);
        rec_resp_release(&d);
        rec_resp_release(&p);
    }
    assert_int_equal(proc_stop(&rec), 0);
    proc_stop(&sim_a);
    proc_stop(&sim_b);
    json_t *all = rec_load(db);
    assert_int_equal(json_array_size(all), 3);
    json_t *r0 = json_object_get(json_array_get(all, 0), "reply");
    assert_non_null(strstr(jstr(r0, "content", NULL), "4812"));
    json_t *r1 = json_object_get(json_array_get(all, 1), "reply");
    assert_non_null(strstr(jstr(r1, "content", NULL), "5"));
    assert_true(json_is_true(json_object_get(r1, "done")));
    assert_true(json_is_object(json_object_get(r1, "usage")));
    json_t *r2 = json_object_get(json_array_get(all, 2), "reply");
    assert_true(json_string_length(json_object_get(r2, "reasoning_content")) >
                0);
    json_decref(all);
}

/* Hold an exclusive lock on the store so that record must spill. */
struct spill_count {
    int n;
    int complete;
};

static int count_fn(const struct xchg *x, void *ud)
{
    struct spill_count *c = ud;
    c->n++;
    c->complete +=
        x->end == XCHG_COMPLETE && x->status == 200 && x->reply != NULL;
    return 0;
}

/* The client has its answer once the exchange is in the intake log; the
 * writer commits it after. With the store locked, waits (5 s at most)
 * until n exchanges are in the spill file, before the lock goes. */
static void wait_spilled(const char *spill, int n)
{
    struct spill_count c = {0};
    for (int i = 0; i < 500 && c.n < n; i++) {
        struct diag d = {{0}};
        c.n = 0;
        if (access(spill, F_OK) == 0)
            xchg_spill_each(spill, count_fn, &c, &d);
        if (c.n < n)
            usleep(10000);
    }
    assert_int_equal(c.n, n);
}

/* Waits (5 s at most) until the store holds n exchanges: the client had
 * its answer when the exchange was in the intake log, the commit follows. */
static void wait_rows(const char *db, size_t n)
{
    size_t got = 0;
    for (int i = 0; i < 500 && got < n; i++) {
        json_t *all = rec_load(db);
        got = all ? json_array_size(all) : 0;
        json_decref(all);
        if (got < n)
            usleep(10000);
    }
    assert_int_equal(got, n);
}

static struct db *lock_store(const char *db)
{
    struct db *s = NULL;
    struct diag d = {{0}};
    assert_int_equal(store_open(db, &s, &d), 0);
    assert_int_equal(store_exec(s, "BEGIN EXCLUSIVE", &d), 0);
    return s;
}

static void unlock_store(struct db *s)
{
    store_exec(s, "COMMIT", NULL);
    store_close(s);
}

/* A sent API key reaches the upstream but never the store, its WAL, or
 * the spill file. */
static void test_secrets_never_stored(void **state)
{
    struct recfx *f = *state;
    const char *const h[] = {"Authorization: Bearer sk-test-SECRET-4242",
                             "x-api-key: SECRET-4243",
                             "api-key: SECRET-4244",
                             "Cookie: session=SECRET-4245",
                             "Proxy-Authorization: Basic SECRET-4246",
                             "X-Goog-Api-Key: SECRET-4247",
                             NULL};
    static const char body[] = "{\"messages\":[{\"role\":\"user\","
                               "\"content\":\"hi\"}]}";
    struct rec_resp r;
    /* forwarded untouched: the upstream sees the credentials (what it
     * received, not an echo in its response: a response that repeats a
     * key is the upstream's doing, stored as sent, not a header leak) */
    char *u = url_of(f, "/json");
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, body, strlen(body), h, 0, &r), 0);
    assert_int_equal(r.status, 200);
    rec_resp_release(&r);
    free(u);
    size_t seen_len;
    char *seen = upstream_last_request(f->up, &seen_len);
    for (int i = 0; h[i]; i++)
        assert_true(rec_contains(seen, seen_len, h[i]));
    free(seen);
    /* stored redacted, in the store and (with the store locked) spilled */
    u = url_of(f, "/sse?key=SECRET-4248&x=1");
    for (int i = 0; i < 2; i++) {
        if (i)
            wait_rows(f->db, 2); /* the two before are committed */
        struct db *lock = i ? lock_store(f->db) : NULL;
        rec_resp_init(&r);
        assert_int_equal(rec_fetch(u, body, strlen(body), h, 0, &r), 0);
        assert_int_equal(r.status, 200);
        rec_resp_release(&r);
        if (lock) {
            wait_spilled(f->spill, 1);
            unlock_store(lock);
        }
    }
    free(u);
    /* the intake log too, while record runs (it is removed at the end) */
    struct buf bytes = BUF_INIT;
    char *log = xasprintf("%s-intake", f->db);
    assert_int_equal(rec_read_file(log, &bytes), 0);
    free(log);
    assert_true(rec_contains(bytes.data, bytes.len, "[redacted]"));
    json_t *all = stop_and_load(f);
    /* every exchange's bytes, the spilled one's included: no key anywhere */
    const char *const suffixes[] = {"", "-wal", "-shm", ".spill.jsonl"};
    for (int i = 0; i < 4; i++) {
        char *p = xasprintf("%s%s", f->db, suffixes[i]);
        rec_read_file(p, &bytes);
        free(p);
    }
    assert_true(bytes.len > 1000);
    assert_true(rec_contains(bytes.data, bytes.len, "[redacted]"));
    assert_false(rec_contains(bytes.data, bytes.len, "SECRET-42"));
    buf_release(&bytes);
    /* the two stored ones (the third is in the spill file) */
    assert_int_equal(json_array_size(all), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *x = json_array_get(all, i);
        assert_string_equal(jstr(x, "req_headers", "Authorization"),
                            "[redacted]");
        assert_string_equal(jstr(x, "req_headers", "x-api-key"), "[redacted]");
    }
    assert_string_equal(jstr(json_array_get(all, 1), "path", NULL),
                        "/sse?key=[redacted]&x=1");
    json_decref(all);
}

/* Every file of the store directory (store, -wal, -shm, intake log,
 * spill file) appended to b. */
static void read_store_files(const struct recfx *f, struct buf *b)
{
    const char *const suffixes[] = {"", "-wal", "-shm", "-intake",
                                    ".spill.jsonl"};
    for (int i = 0; i < 5; i++) {
        char *p = xasprintf("%s%s", f->db, suffixes[i]);
        rec_read_file(p, b);
        free(p);
    }
}

/* Secrets in the forms the first redaction missed: a query parameter
 * whose name is percent-encoded (?api%5Fkey=), and a form-encoded body
 * (application/x-www-form-urlencoded) with api_key= and password= pairs.
 * The upstream gets them as sent; no file of the store holds them. */
static void test_encoded_secrets_never_stored(void **state)
{
    struct recfx *f = *state;
    const char *const h[] = {"Content-Type: application/x-www-form-urlencoded",
                             NULL};
    static const char form[] =
        "grant_type=x&api_key=SECRET-5501&pass%77ord=SECRET-5502&"
        "Client_Secret=SECRET-5503&note=kept";
    struct rec_resp r;
    char *u = url_of(f, "/json?api%5Fkey=SECRET-5504&API%5fKEY=SECRET-5505"
                        "&x=1");
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, form, strlen(form), h, 0, &r), 0);
    assert_int_equal(r.status, 200);
    rec_resp_release(&r);
    free(u);
    size_t seen_len;
    char *seen = upstream_last_request(f->up, &seen_len);
    assert_true(rec_contains(seen, seen_len, form));
    assert_true(rec_contains(seen, seen_len, "api%5Fkey=SECRET-5504"));
    free(seen);
    json_t *all = stop_and_load(f);
    struct buf bytes = BUF_INIT;
    read_store_files(f, &bytes);
    assert_true(rec_contains(bytes.data, bytes.len, "[redacted]"));
    assert_false(rec_contains(bytes.data, bytes.len, "SECRET-55"));
    buf_release(&bytes);
    json_t *x = json_array_get(all, 0);
    assert_string_equal(jstr(x, "path", NULL),
                        "/json?api%5Fkey=[redacted]&API%5fKEY=[redacted]&x=1");
    assert_true(json_is_true(json_object_get(x, "req_redacted")));
    const char *raw = jstr(x, "req_raw", NULL);
    assert_non_null(raw);
    assert_non_null(strstr(raw, "grant_type=x&api_key=[redacted]"));
    assert_non_null(strstr(raw, "&note=kept"));
    assert_int_equal(strlen(raw), strlen(form)); /* the length is kept */
    json_decref(all);
}

/* src compressed into out: gzip (wb 31) or zlib (wb 15). */
static void compress_wb(const char *src, size_t n, int wb, struct buf *out)
{
    z_stream z;
    unsigned char tmp[4096];
    memset(&z, 0, sizeof(z));
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, wb, 8, Z_DEFAULT_STRATEGY),
                     Z_OK);
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)n;
    int zr;
    do {
        z.next_out = tmp;
        z.avail_out = sizeof(tmp);
        zr = deflate(&z, Z_FINISH);
        buf_add(out, tmp, sizeof(tmp) - z.avail_out);
    } while (zr == Z_OK);
    assert_int_equal(zr, Z_STREAM_END);
    deflateEnd(&z);
}

/* Regression: a request body sent with Content-Encoding gzip or deflate
 * was stored compressed, its api_key inside. Now the upstream still gets
 * the compressed bytes as sent, and the store keeps the body decoded and
 * redacted, its headers noting the coding (X-Fidelity-Decoded). */
static void test_compressed_body_redacted(void **state)
{
    struct recfx *f = *state;
    static const char *const codings[] = {"gzip", "deflate"};
    static const char *const bodies[] = {
        "{\"model\":\"m\",\"api_key\":\"SECRET-6601\",\"messages\":"
        "[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"model\":\"m\",\"password\":\"SECRET-6602\",\"messages\":"
        "[{\"role\":\"user\",\"content\":\"hi\"}]}"};
    for (int i = 0; i < 2; i++) {
        struct buf z = BUF_INIT;
        compress_wb(bodies[i], strlen(bodies[i]), i ? 15 : 31, &z);
        char ce[64];
        snprintf(ce, sizeof(ce), "Content-Encoding: %s", codings[i]);
        const char *const h[] = {"Content-Type: application/json", ce, NULL};
        char *u = url_of(f, "/json");
        struct rec_resp r;
        rec_resp_init(&r);
        assert_int_equal(rec_fetch(u, z.data, z.len, h, 0, &r), 0);
        assert_int_equal(r.status, 200);
        rec_resp_release(&r);
        free(u);
        size_t seen_len;
        char *seen = upstream_last_request(f->up, &seen_len);
        assert_true(seen_len >= z.len);
        assert_memory_equal(seen + seen_len - z.len, z.data, z.len);
        free(seen);
        buf_release(&z);
    }
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 2);
    char *dump = json_dumps(all, 0);
    assert_null(strstr(dump, "SECRET-66"));
    free(dump);
    struct buf bytes = BUF_INIT;
    read_store_files(f, &bytes);
    assert_false(rec_contains(bytes.data, bytes.len, "SECRET-66"));
    buf_release(&bytes);
    for (int i = 0; i < 2; i++) {
        json_t *x = json_array_get(all, (size_t)i);
        /* decoded: the JSON object, not base64 of the compressed bytes */
        assert_null(json_object_get(x, "req_raw_b64"));
        json_t *body = json_object_get(x, "req_body");
        assert_non_null(body);
        /* the marker, padded to the secret's length */
        assert_string_equal(jstr(body, i ? "password" : "api_key", NULL),
                            "[redacted]*");
        assert_string_equal(jstr(body, "model", NULL), "m");
        assert_true(json_is_true(json_object_get(x, "req_redacted")));
        assert_string_equal(jstr(x, "req_headers", "X-Fidelity-Decoded"),
                            codings[i]);
        assert_string_equal(jstr(x, "req_headers", "Content-Encoding"),
                            codings[i]);
    }
    json_decref(all);
}

/* The upstream URL's credentials (http://user:password@host) never reach
 * a client or a log: not in the 502 body when the upstream is down, not
 * in the first line on stdout, not on stderr. */
static void test_upstream_credentials_masked(void **state)
{
    (void)state;
    char *dir = rec_tmpdir(), *db = xasprintf("%s/r.db", dir),
         *err = xasprintf("%s/err.log", dir);
    /* port 1 of 127.0.0.1: nothing listens, the connect is refused */
    const char *const av[] = {"record",
                              "--listen",
                              "127.0.0.1:0",
                              "--upstream",
                              "http://alice:PW-SECRET-77@127.0.0.1:1/v1",
                              "--db",
                              db,
                              NULL};
    struct proc p;
    assert_int_equal(proc_start_err(&p, av, err), 0);
    assert_null(strstr(p.line, "PW-SECRET"));
    assert_non_null(strstr(p.line, "http://***@127.0.0.1:1/v1"));
    char *u = xasprintf("%s/chat/completions", proc_url(&p));
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, "{}", 2, NULL, 0, &r), 0);
    assert_int_equal(r.status, 502);
    assert_false(rec_contains(r.body.data, r.body.len, "PW-SECRET"));
    assert_false(rec_contains(r.body.data, r.body.len, "alice"));
    assert_true(rec_contains(r.body.data, r.body.len, "***@127.0.0.1:1"));
    rec_resp_release(&r);
    free(u);
    proc_stop(&p);
    struct buf e = BUF_INIT;
    rec_read_file(err, &e);
    assert_false(rec_contains(e.data, e.len, "PW-SECRET"));
    buf_release(&e);
    rec_rmdir(dir);
    free(db);
    free(err);
}

static int fx_setup_redact_key(void **state)
{
    static const char *const extra[] = {"--redact-key", "X-Custom-Cred", NULL};
    return fx_setup_with(state, extra, NULL);
}

/* Secrets sent inside a JSON body (each key name, top level, nested in
 * objects and arrays, in a tool call's arguments, in a streamed request)
 * reach the upstream as sent but none of the store's files; plain
 * "token" and a tool schema's "password" property are kept. */
static void test_body_secrets_never_stored(void **state)
{
    struct recfx *f = *state;
    static const char *const names[] = {
        "api_key",  "apiKey",        "api-key",      "password",
        "secret",   "client_secret", "access_token", "refresh_token",
        "id_token", "authorization", "PASSWORD",     "x-custom-cred"};
    const size_t nn = sizeof(names) / sizeof(*names);
    for (size_t i = 0; i <= nn; i++) {
        const char *name = names[i % nn];
        bool spilled = i == nn; /* the last one with the store locked */
        char *body = xasprintf(
            "{\"model\":\"m\",\"%s\":\"BODYSECRET-%zu-top\",\"stream\":%s,"
            "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
            "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
            "\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":"
            "\"login\",\"arguments\":\"{\\\"%s\\\":\\\"BODYSECRET-%zu-arg\\\"}"
            "\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":"
            "\"ok\"}],\"extra\":{\"auth\":{\"%s\":\"BODYSECRET-%zu-nested\"},"
            "\"list\":[{\"%s\":\"BODYSECRET-%zu-array\"}]},"
            "\"token\":\"KEEP-TOKEN\",\"tools\":[{\"type\":\"function\","
            "\"function\":{\"name\":\"login\",\"parameters\":{\"type\":"
            "\"object\",\"properties\":{\"%s\":{\"type\":\"string\"}}}}}]}",
            name, i, i % 2 ? "true" : "false", name, i, name, i, name, i, name);
        struct db *lock = NULL;
        if (spilled) {
            wait_rows(f->db, nn);
            lock = lock_store(f->db);
        }
        struct rec_resp r;
        char *u = url_of(f, i % 2 ? "/sse" : "/json");
        rec_resp_init(&r);
        assert_int_equal(rec_fetch(u, body, strlen(body), NULL, 0, &r), 0);
        assert_int_equal(r.status, 200);
        rec_resp_release(&r);
        free(u);
        /* the upstream got the body byte for byte */
        size_t seen_len;
        char *seen = upstream_last_request(f->up, &seen_len);
        assert_true(seen_len >= strlen(body));
        assert_memory_equal(seen + seen_len - strlen(body), body, strlen(body));
        free(seen);
        free(body);
        if (lock) {
            wait_spilled(f->spill, 1);
            unlock_store(lock);
        }
    }
    /* while record runs: the log, the WAL and its index hold bytes */
    struct buf bytes = BUF_INIT;
    read_store_files(f, &bytes);
    assert_true(rec_contains(bytes.data, bytes.len, "[redacted]"));
    assert_false(rec_contains(bytes.data, bytes.len, "BODYSECRET"));
    buf_release(&bytes);
    json_t *all = stop_and_load(f);
    read_store_files(f, &bytes);
    assert_true(bytes.len > 1000);
    assert_false(rec_contains(bytes.data, bytes.len, "BODYSECRET"));
    assert_true(rec_contains(bytes.data, bytes.len, "KEEP-TOKEN"));
    buf_release(&bytes);
    assert_int_equal(json_array_size(all), nn);
    for (size_t i = 0; i < nn; i++) {
        json_t *x = json_array_get(all, i);
        json_t *b = json_object_get(x, "req_body");
        assert_true(json_is_true(json_object_get(x, "req_redacted")));
        /* the marker keeps the length: "BODYSECRET-N-top" */
        char *secret = xasprintf("BODYSECRET-%zu-top", i);
        char *want = xasprintf("[redacted]%.*s", (int)(strlen(secret) - 10),
                               "**********");
        free(secret);
        assert_string_equal(json_string_value(json_object_get(b, names[i])),
                            want);
        free(want);
        assert_string_equal(json_string_value(json_object_get(b, "token")),
                            "KEEP-TOKEN");
        json_t *props = json_object_get(
            json_object_get(
                json_object_get(
                    json_object_get(
                        json_array_get(json_object_get(b, "tools"), 0),
                        "function"),
                    "parameters"),
                "properties"),
            names[i]);
        assert_true(json_is_object(props));
    }
    json_decref(all);
}

static void test_upstream_down_gives_502_json(void **state)
{
    (void)state;
    char *dir = rec_tmpdir();
    char *db = xasprintf("%s/r.db", dir);
    struct proc rec;
    /* a port nobody listens on: bind one, then close it */
    struct upstream *u = upstream_start();
    char *down = xstrdup(upstream_url(u));
    upstream_stop(u);
    assert_int_equal(rec_start_record(&rec, down, db, NULL), 0);
    char *url = xasprintf("http://127.0.0.1:%d/v1/chat/completions", rec.port);
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(url, "{\"messages\":[]}", 15, NULL, 0, &r), 0);
    assert_int_equal(r.status, 502);
    json_t *j = json_loadb(r.body.data, r.body.len, 0, NULL);
    assert_non_null(j);
    const char *msg = jstr(json_object_get(j, "error"), "message", NULL);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "unreachable"));
    assert_non_null(strstr(msg, down));
    assert_string_equal(jstr(json_object_get(j, "error"), "type", NULL),
                        "upstream_unreachable");
    json_decref(j);
    rec_resp_release(&r);
    assert_int_equal(proc_stop(&rec), 0);
    json_t *all = rec_load(db);
    assert_int_equal(json_array_size(all), 1);
    assert_string_equal(jstr(json_array_get(all, 0), "end", NULL),
                        "upstream_error");
    assert_int_equal(
        json_integer_value(json_object_get(json_array_get(all, 0), "status")),
        0);
    json_decref(all);
    free(url);
    free(down);
    free(db);
    rec_rmdir(dir);
}

static int fx_setup_small_body(void **state)
{
    const char *const extra[] = {"--max-body", "1000", NULL};
    return fx_setup_with(state, extra, NULL);
}

static void test_oversize_request_413(void **state)
{
    struct recfx *f = *state;
    char big[2001], ok[901];
    memset(big, 'a', 2000);
    big[2000] = '\0';
    memset(ok, 'a', 900);
    ok[900] = '\0';
    char *u = url_of(f, "/json");
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, big, 2000, NULL, 0, &r), 0);
    assert_int_equal(r.status, 413);
    /* a JSON error naming the option, not libevent's HTML page */
    json_t *j = json_loadb(r.body.data, r.body.len, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(jstr(err, "type", NULL), "request_too_large");
    assert_non_null(strstr(jstr(err, "message", NULL), "--max-body (1000"));
    assert_true(rec_contains(r.headers.data, r.headers.len,
                             "Content-Type: application/json"));
    json_decref(j);
    rec_resp_release(&r);
    /* the same for a chunked body that grows past the limit */
    const char *const chunked[] = {"Transfer-Encoding: chunked", NULL};
    rec_resp_init(&r);
    rec_fetch(u, big, 2000, chunked, 0, &r);
    assert_int_equal(r.status, 413);
    assert_true(rec_contains(r.body.data, r.body.len, "request_too_large"));
    rec_resp_release(&r);
    /* and for a compressed body that inflates past it (5,000 zeros in a
     * few dozen bytes), before anything is forwarded */
    struct buf z = BUF_INIT;
    char zeros[5000] = {0};
    compress_wb(zeros, sizeof(zeros), 31, &z);
    assert_true(z.len < 1000);
    const char *const gz[] = {"Content-Encoding: gzip", NULL};
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, z.data, z.len, gz, 0, &r), 0);
    assert_int_equal(r.status, 413);
    assert_true(rec_contains(r.body.data, r.body.len, "inflates"));
    rec_resp_release(&r);
    buf_release(&z);
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, ok, 900, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    rec_resp_release(&r);
    free(u);
    assert_int_equal(upstream_requests(f->up), 1);
}

static void test_malformed_json_forwarded_and_flagged(void **state)
{
    struct recfx *f = *state;
    static const char bad[] = "{\"messages\": [{\"role\": \"user\", oops";
    const char *const h[] = {"Content-Type: application/json", NULL};
    char *u = url_of(f, "/echo");
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, bad, strlen(bad), h, 0, &r), 0);
    assert_int_equal(r.status, 200);
    assert_memory_equal(r.body.data + r.body.len - strlen(bad), bad,
                        strlen(bad));
    rec_resp_release(&r);
    free(u);
    json_t *all = stop_and_load(f);
    json_t *x = json_array_get(all, 0);
    assert_true(json_is_true(json_object_get(x, "req_malformed")));
    assert_string_equal(jstr(x, "req_raw", NULL), bad);
    assert_null(json_object_get(x, "req_body"));
    assert_string_equal(jstr(x, "end", NULL), "complete");
    json_decref(all);
}

/* The upstream closes mid-stream: the client gets every byte the upstream
 * sent, then the connection closes without the end of the response. */
static void test_upstream_reset_mid_stream(void **state)
{
    struct recfx *f = *state;
    size_t n;
    char *sent = upstream_body("/reset", &n);
    char *u = url_of(f, "/reset");
    struct rec_resp r;
    rec_resp_init(&r);
    int rc = rec_fetch(u, "{}", 2, NULL, 0, &r);
    assert_true(rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, n);
    assert_memory_equal(r.body.data, sent, n);
    rec_resp_release(&r);
    /* the proxy keeps serving */
    char *u2 = url_of(f, "/json");
    fetch_ok(u2, NULL, &r);
    rec_resp_release(&r);
    free(u2);
    free(u);
    json_t *all = stop_and_load(f);
    json_t *x = json_array_get(all, 0);
    assert_string_equal(jstr(x, "end", NULL), "upstream_reset");
    assert_string_equal(jstr(x, "resp_raw", NULL), sent);
    assert_false(
        json_is_true(json_object_get(json_object_get(x, "reply"), "done")));
    assert_string_equal(jstr(json_array_get(all, 1), "end", NULL), "complete");
    free(sent);
    json_decref(all);
}

/* The client goes away mid-stream: record cancels the upstream transfer
 * (the upstream sees its peer close) and stores the exchange. */
static void test_client_gone_cancels_upstream(void **state)
{
    struct recfx *f = *state;
    char *u = url_of(f, "/slow");
    struct rec_resp r;
    rec_resp_init(&r);
    int rc = rec_fetch(u, "{}", 2, NULL, 100, &r);
    assert_int_equal(rc, CURLE_WRITE_ERROR);
    rec_resp_release(&r);
    free(u);
    /* /slow would stream for 10 s; the cancellation must reach it soon */
    for (int i = 0; i < 300 && upstream_peer_gone(f->up) == 0; i++)
        usleep(10000);
    assert_int_equal(upstream_peer_gone(f->up), 1);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 1);
    json_t *x = json_array_get(all, 0);
    assert_string_equal(jstr(x, "end", NULL), "client_gone");
    assert_true(json_integer_value(json_object_get(json_object_get(x, "reply"),
                                                   "chunks")) >= 1);
    json_decref(all);
}

/* With the store locked, proxying goes on and exchanges go to the spill
 * file, which xchg_spill_each reads back. */
static void test_store_locked_spills(void **state)
{
    struct recfx *f = *state;
    struct rec_resp r;
    char *u = url_of(f, "/json");
    fetch_ok(u, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", &r);
    rec_resp_release(&r);
    wait_rows(f->db, 1);
    struct db *lock = lock_store(f->db);
    for (int i = 0; i < 3; i++) {
        fetch_ok(u, "{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}",
                 &r);
        size_t n;
        char *expect = upstream_body("/json", &n);
        assert_int_equal(r.body.len, n);
        free(expect);
        rec_resp_release(&r);
    }
    wait_spilled(f->spill, 3);
    unlock_store(lock);
    free(u);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 1);
    json_decref(all);
    struct spill_count c = {0};
    struct diag d = {{0}};
    assert_int_equal(xchg_spill_each(f->spill, count_fn, &c, &d), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.complete, 3);
}

/* Rows of the store whose path holds what. */
static size_t rows_with(const char *db, const char *what)
{
    json_t *all = rec_load(db), *x;
    size_t i, n = 0;
    json_array_foreach(all, i, x)
    {
        const char *p = json_string_value(json_object_get(x, "path"));
        n += p && strstr(p, what);
    }
    json_decref(all);
    return n;
}

/* The store refuses one exchange of a batch (a trigger) and the spill
 * file cannot take it (a directory stands at its path): the batch is
 * stored one by one, so the intake log's frontier never passes the
 * refused exchange, which the next start commits, once, with those after
 * it; nothing is lost and nothing is stored twice. A slow exchange (a
 * trigger counting, a body too big to be stored on the loop) holds the
 * writer while the next three queue up into one batch. */
static void test_refused_in_batch_stays_in_log(void **state)
{
    struct recfx *f = *state;
    struct rec_resp r;
    struct diag d = {{0}};
    static const char small[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}";
    char *u = url_of(f, "/json?first");
    fetch_ok(u, small, &r);
    rec_resp_release(&r);
    free(u);
    wait_rows(f->db, 1);
    struct db *s = NULL;
    assert_int_equal(store_open(f->db, &s, &d), 0);
    assert_int_equal(
        store_exec(s,
                   "CREATE TRIGGER slow BEFORE INSERT ON xchg"
                   " WHEN NEW.path LIKE '%slow%' BEGIN SELECT count(*) FROM"
                   " (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1"
                   " FROM c WHERE x < 3000000) SELECT x FROM c); END;"
                   "CREATE TRIGGER refuse BEFORE INSERT ON xchg"
                   " WHEN NEW.path LIKE '%n=1%'"
                   " BEGIN SELECT RAISE(ABORT, 'refused'); END;",
                   &d),
        0);
    store_close(s);
    assert_int_equal(mkdir(f->spill, 0700), 0);
    size_t big_n = 80u << 10;
    char *big = xmalloc(big_n + 64);
    int k =
        snprintf(big, 64, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    memset(big + k, 'x', big_n);
    strcpy(big + k + big_n, "\"}]}");
    u = url_of(f, "/json?slow");
    fetch_ok(u, big, &r);
    rec_resp_release(&r);
    free(u);
    free(big);
    for (int i = 0; i < 3; i++) {
        char path[32];
        snprintf(path, sizeof(path), "/json?n=%d", i);
        u = url_of(f, path);
        fetch_ok(u, small, &r);
        rec_resp_release(&r);
        free(u);
    }
    /* record stops with the refused one (and those after it) still in
     * its intake log */
    proc_stop(&f->rec);
    assert_int_equal(rows_with(f->db, "n=1"), 0);
    assert_int_equal(rmdir(f->spill), 0);
    assert_int_equal(store_open(f->db, &s, &d), 0);
    assert_int_equal(
        store_exec(s, "DROP TRIGGER refuse; DROP TRIGGER slow", &d), 0);
    store_close(s);
    uint64_t n = 0;
    assert_int_equal(store_replay(f->db, f->spill, &n, NULL, &d), 0);
    assert_true(n >= 1);
    assert_int_equal(rows_with(f->db, "first"), 1);
    assert_int_equal(rows_with(f->db, "slow"), 1);
    for (int i = 0; i < 3; i++) {
        char what[8];
        snprintf(what, sizeof(what), "n=%d", i);
        assert_int_equal(rows_with(f->db, what), 1);
    }
}

/* Session header and request kinds. */
static void test_session_header_and_kinds(void **state)
{
    struct recfx *f = *state;
    const char *const h[] = {"x-session-affinity: ses_abc",
                             "Content-Type: application/json", NULL};
    static const char title[] =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a title "
        "generator. You output ONLY a thread title.\"},{\"role\":\"user\","
        "\"content\":\"Generate a title for this conversation:\\n\"}]}";
    static const char main_req[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"task\"}}"
        "],\"messages\":[{\"role\":\"system\",\"content\":\"You are an "
        "agent.\"},{\"role\":\"user\",\"content\":\"hello\"}]}";
    char *u = url_of(f, "/json");
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, title, strlen(title), h, 0, &r), 0);
    rec_resp_release(&r);
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, main_req, strlen(main_req), NULL, 0, &r), 0);
    rec_resp_release(&r);
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, NULL, 0, NULL, 0, &r), 0);
    rec_resp_release(&r);
    free(u);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 3);
    assert_string_equal(jstr(json_array_get(all, 0), "session", NULL),
                        "ses_abc");
    assert_string_equal(jstr(json_array_get(all, 0), "kind", NULL), "title");
    assert_int_equal(
        strncmp(jstr(json_array_get(all, 1), "session", NULL), "p:", 2), 0);
    assert_string_equal(jstr(json_array_get(all, 1), "kind", NULL), "main");
    assert_string_equal(jstr(json_array_get(all, 2), "kind", NULL), "other");
    assert_string_equal(jstr(json_array_get(all, 2), "method", NULL), "GET");
    json_decref(all);
}

static size_t discard(char *p, size_t sz, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return sz * n;
}

/* Keep-alive on the client side: a second request reuses the connection. */
static void test_keep_alive(void **state)
{
    struct recfx *f = *state;
    char *u = url_of(f, "/json");
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, u);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    long connects = -1;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(curl_easy_perform(c), CURLE_OK);
        curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
        assert_int_equal(connects, i == 0 ? 1 : 0);
    }
    curl_easy_cleanup(c);
    free(u);
}

static int fx_setup_timeout(void **state)
{
    const char *const extra[] = {"--timeout", "1", NULL};
    return fx_setup_with(state, extra, NULL);
}

/* An upstream slower than --timeout: the client gets what arrived, then
 * the connection closes; stored as a timeout. */
static void test_upstream_timeout(void **state)
{
    struct recfx *f = *state;
    char *u = url_of(f, "/slow");
    struct rec_resp r;
    rec_resp_init(&r);
    int rc = rec_fetch(u, "{}", 2, NULL, 0, &r);
    assert_true(rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR);
    assert_int_equal(r.status, 200);
    assert_true(r.body.len > 0);
    rec_resp_release(&r);
    free(u);
    json_t *all = stop_and_load(f);
    assert_string_equal(jstr(json_array_get(all, 0), "end", NULL), "timeout");
    json_decref(all);
}

/* --help teaches with examples; usage errors exit 2 with a hint; SIGINT
 * stops cleanly (exit 0) with the first line in the documented form. */
static void test_cli(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *const help[] = {"record", "--help", NULL};
    assert_int_equal(proc_run(help, NULL, &out, &err, 10), 0);
    assert_non_null(strstr(buf_str(&out), "examples:"));
    assert_non_null(strstr(buf_str(&out), "--upstream URL"));
    buf_reset(&out);
    const char *const bad[] = {"record", "--upstream", "http://x", "--nope",
                               NULL};
    assert_int_equal(proc_run(bad, NULL, &out, &err, 10), 2);
    assert_non_null(strstr(buf_str(&err), "unknown option '--nope'"));
    assert_non_null(strstr(buf_str(&err), "hint:"));
    buf_reset(&err);
    const char *const none[] = {"record", NULL};
    assert_int_equal(proc_run(none, NULL, &out, &err, 10), 2);
    assert_non_null(strstr(buf_str(&err), "--upstream URL is required"));
    buf_reset(&err);
    const char *const scheme[] = {"record", "--upstream", "ftp://x", NULL};
    assert_int_equal(proc_run(scheme, NULL, &out, &err, 10), 2);
    buf_reset(&err);
    const char *const size[] = {"record",     "--upstream", "http://x",
                                "--max-body", "12Q",        NULL};
    assert_int_equal(proc_run(size, NULL, &out, &err, 10), 2);
    assert_non_null(strstr(buf_str(&err), "--max-body '12Q'"));
    buf_release(&out);
    buf_release(&err);

    char *dir = rec_tmpdir();
    char *db = xasprintf("%s/c.db", dir);
    struct proc p;
    assert_int_equal(rec_start_record(&p, "http://127.0.0.1:9", db, NULL), 0);
    kill(p.pid, SIGINT);
    int status = -1;
    for (int i = 0; i < 300; i++) {
        if (waitpid(p.pid, &status, WNOHANG) == p.pid)
            break;
        usleep(10000);
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close(p.out_fd);
    free(db);
    rec_rmdir(dir);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_byte_exact_scripted, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_byte_exact_sim, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_secrets_never_stored, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_encoded_secrets_never_stored,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_compressed_body_redacted, fx_setup,
                                        fx_teardown),
        cmocka_unit_test(test_upstream_credentials_masked),
        cmocka_unit_test_setup_teardown(test_body_secrets_never_stored,
                                        fx_setup_redact_key, fx_teardown),
        cmocka_unit_test(test_upstream_down_gives_502_json),
        cmocka_unit_test_setup_teardown(test_oversize_request_413,
                                        fx_setup_small_body, fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_malformed_json_forwarded_and_flagged, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_upstream_reset_mid_stream,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_client_gone_cancels_upstream,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_store_locked_spills, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_refused_in_batch_stays_in_log,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_session_header_and_kinds, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_upstream_timeout, fx_setup_timeout,
                                        fx_teardown),
        cmocka_unit_test(test_cli),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
