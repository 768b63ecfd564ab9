/*
 * Record's own HTTP/1.1 client (src/record/upclient.c) end to end: the
 * real `fidelity record` in front of the scripted upstream
 * (tests/util/upstream.h), for what the older proxy tests do not reach:
 * chunked and close-delimited replies, interim 1xx responses, replies
 * without a body (204, 304 with a Content-Length, HEAD), an upstream that
 * closes a keep-alive connection between requests or drops the request
 * that reuses it, a sized body cut short, a malformed status line, and
 * large bodies both ways. What the client receives through record must
 * equal what it receives directly, and the store must say how each ended.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/rec.h"
#include "util/recfx.h"
#include "util/upstream.h"

static int fx_setup_with(void **state, const char *timeout)
{
    const char *const extra[] = {"--timeout", timeout, NULL};
    return (*state = recfx_start(extra, NULL)) ? 0 : -1;
}

static int fx_setup(void **state)
{
    return fx_setup_with(state, "10");
}

static int fx_teardown(void **state)
{
    recfx_stop(*state);
    return 0;
}

static json_t *stop_and_load(struct recfx *f)
{
    assert_int_equal(proc_stop(&f->rec), 0);
    json_t *all = rec_load(f->db);
    assert_non_null(all);
    return all;
}

static const char *jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static long jint(json_t *o, const char *key)
{
    return (long)json_integer_value(json_object_get(o, key));
}

/* GETs path directly and through record; both must succeed with the
 * same status and body, and the body must be what the upstream sent. */
static void same_both_ways(struct recfx *f, const char *path, long status)
{
    struct rec_resp d, p;
    char *ud = xasprintf("%s%s", upstream_url(f->up), path);
    char *up = xasprintf("%s%s", f->url, path);
    rec_resp_init(&d);
    rec_resp_init(&p);
    assert_int_equal(rec_fetch(ud, NULL, 0, NULL, 0, &d), 0);
    assert_int_equal(rec_fetch(up, NULL, 0, NULL, 0, &p), 0);
    assert_int_equal(d.status, status);
    assert_int_equal(p.status, status);
    assert_int_equal(p.body.len, d.body.len);
    if (p.body.len)
        assert_memory_equal(p.body.data, d.body.data, p.body.len);
    size_t n;
    char *expect = upstream_body(path, &n);
    assert_int_equal(p.body.len, n);
    if (n)
        assert_memory_equal(p.body.data, expect, n);
    free(expect);
    free(ud);
    free(up);
    rec_resp_release(&d);
    rec_resp_release(&p);
}

/* Chunked (with an extension and a trailer), 3 MiB chunked, delimited by
 * the close, after 100 and 103 interim responses, and after a 12 KB head
 * that arrives in pieces: byte-identical, stored complete with the body as
 * the client got it. */
static void test_framings_byte_exact(void **state)
{
    struct recfx *f = *state;
    static const char *const paths[] = {"/chunked", "/bigchunked", "/close",
                                        "/interim", "/bighead",    NULL};
    for (int i = 0; paths[i]; i++)
        same_both_ways(f, paths[i], 200);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 5);
    for (int i = 0; paths[i]; i++) {
        json_t *x = json_array_get(all, (size_t)i);
        size_t n;
        char *expect = upstream_body(paths[i], &n);
        assert_string_equal(jstr(x, "path"), paths[i]);
        assert_string_equal(jstr(x, "end"), "complete");
        assert_int_equal(jint(x, "status"), 200);
        assert_int_equal(strlen(jstr(x, "resp_raw")), n);
        assert_memory_equal(jstr(x, "resp_raw"), expect, n);
        free(expect);
    }
    /* the reply was reassembled from the de-chunked body */
    json_t *reply = json_object_get(json_array_get(all, 0), "reply");
    assert_string_equal(jstr(reply, "content"), "caf\xc3\xa9 \xc3\xa9");
    json_decref(all);
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    buf_add(ud, p, sz * n);
    return sz * n;
}

/* One client connection: 204, 304 (whose Content-Length announces no
 * body), HEAD, then a GET. Had record read a body after the 304 or the
 * HEAD, the next exchange on its upstream connection would hang or get
 * the wrong bytes. */
static void test_responses_without_body(void **state)
{
    struct recfx *f = *state;
    static const char *const paths[] = {"/204", "/304", "/json", "/json"};
    static const long want[] = {204, 304, 200, 200};
    struct buf body = BUF_INIT, head = BUF_INIT;
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    for (int i = 0; i < 4; i++) {
        char *u = xasprintf("%s%s", f->url, paths[i]);
        buf_reset(&body);
        buf_reset(&head);
        curl_easy_setopt(c, CURLOPT_URL, u);
        curl_easy_setopt(c, CURLOPT_NOBODY, i == 2 ? 1L : 0L);
        if (i == 3)
            curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        assert_int_equal(curl_easy_perform(c), CURLE_OK);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        assert_int_equal(status, want[i]);
        free(u);
        if (i < 3)
            assert_int_equal(body.len, 0);
        if (i == 0)
            assert_true(rec_contains(head.data, head.len, "X-Test: yes"));
        if (i == 1)
            assert_true(rec_contains(head.data, head.len, "ETag: \"e1\""));
        if (i == 2) /* the HEAD's headers are those of the GET */
            assert_true(rec_contains(head.data, head.len, "Content-Length: "));
    }
    size_t n;
    char *expect = upstream_body("/json", &n);
    assert_int_equal(body.len, n);
    assert_memory_equal(body.data, expect, n);
    free(expect);
    long connects = -1;
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
    assert_int_equal(connects, 0); /* the client's connection was kept */
    curl_easy_cleanup(c);
    buf_release(&body);
    buf_release(&head);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *x = json_array_get(all, i);
        assert_string_equal(jstr(x, "end"), "complete");
        assert_int_equal(jint(x, "status"), want[i]);
    }
    assert_string_equal(jstr(json_array_get(all, 2), "method"), "HEAD");
    json_decref(all);
}

static void get_json_through(struct recfx *f, const char *path)
{
    struct rec_resp r;
    char *u = xasprintf("%s%s", f->url, path);
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, NULL, 0, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    size_t n;
    char *expect = upstream_body(path, &n);
    assert_int_equal(r.body.len, n);
    assert_memory_equal(r.body.data, expect, n);
    free(expect);
    free(u);
    rec_resp_release(&r);
}

/* The upstream closes a pooled keep-alive connection after a reply
 * (/kaclose), or when the next request arrives on it (/dropnext): the
 * request after each still gets its answer; the dropped one was sent
 * again on a new connection. */
static void test_upstream_closes_keepalive(void **state)
{
    struct recfx *f = *state;
    get_json_through(f, "/kaclose");
    get_json_through(f, "/json");
    get_json_through(f, "/dropnext");
    get_json_through(f, "/json");
    get_json_through(f, "/json");
    assert_int_equal(upstream_dropped(f->up), 1);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 5);
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(jstr(json_array_get(all, i), "end"), "complete");
    json_decref(all);
}

/* A sized body cut short by the upstream: the client gets the bytes that
 * came, then the connection closes; stored as a reset. A malformed status
 * line: 502 with a JSON error naming the upstream, stored as an upstream
 * error. Record keeps serving after both. */
static void test_upstream_faults(void **state)
{
    struct recfx *f = *state;
    struct rec_resp r;
    size_t n;
    char *sent = upstream_body("/resetsized", &n);
    char *u = xasprintf("%s/resetsized", f->url);
    rec_resp_init(&r);
    int rc = rec_fetch(u, NULL, 0, NULL, 0, &r);
    assert_true(rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, n);
    assert_memory_equal(r.body.data, sent, n);
    rec_resp_release(&r);
    free(u);
    u = xasprintf("%s/garbage", f->url);
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, NULL, 0, NULL, 0, &r), 0);
    assert_int_equal(r.status, 502);
    json_t *j = json_loadb(r.body.data, r.body.len, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(jstr(err, "type"), "upstream_bad_response");
    assert_non_null(strstr(jstr(err, "message"), upstream_url(f->up)));
    json_decref(j);
    rec_resp_release(&r);
    free(u);
    get_json_through(f, "/json");
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 3);
    json_t *x = json_array_get(all, 0);
    assert_string_equal(jstr(x, "end"), "upstream_reset");
    assert_int_equal(strlen(jstr(x, "resp_raw")), n);
    assert_string_equal(jstr(json_array_get(all, 1), "end"), "upstream_error");
    assert_int_equal(jint(json_array_get(all, 1), "status"), 0);
    assert_string_equal(jstr(json_array_get(all, 2), "end"), "complete");
    free(sent);
    json_decref(all);
}

/* 3 MiB of request body reach the upstream untouched. */
static void test_large_request_body(void **state)
{
    struct recfx *f = *state;
    size_t n = (size_t)3 << 20;
    char *body = xmalloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (char)('A' + (i * 7 + i / 4096) % 26);
    char *u = xasprintf("%s/echo", f->url);
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, body, n, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.body.len > n);
    assert_memory_equal(r.body.data + r.body.len - n, body, n);
    assert_true(rec_contains(r.body.data, r.body.len - n,
                             "Content-Length: 3145728\r\n"));
    rec_resp_release(&r);
    free(u);
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 1);
    const char *raw = jstr(json_array_get(all, 0), "req_raw");
    assert_non_null(raw);
    assert_int_equal(strlen(raw), n);
    assert_memory_equal(raw, body, n);
    json_decref(all);
    free(body);
}

/* Everything a raw HTTP/1.0 request gets back (record closes the
 * connection after the response). */
static void raw_exchange(int port, const char *req, struct buf *out)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    assert_int_equal(send(fd, req, strlen(req), 0), (ssize_t)strlen(req));
    char tmp[4096];
    ssize_t n;
    while ((n = recv(fd, tmp, sizeof(tmp), 0)) > 0)
        buf_add(out, tmp, (size_t)n);
    close(fd);
}

/* An HTTP/1.0 client cannot take chunks: a stream (chunked upstream) and
 * a chunked JSON reply reach it as plain bytes ended by the close. */
static void test_http10_client_gets_unchunked(void **state)
{
    struct recfx *f = *state;
    static const char *const paths[] = {"/sse", "/chunked"};
    for (int i = 0; i < 2; i++) {
        struct buf got = BUF_INIT;
        char *req = xasprintf("GET %s HTTP/1.0\r\nHost: x\r\n\r\n", paths[i]);
        raw_exchange(f->rec.port, req, &got);
        free(req);
        const char *end = strstr(buf_str(&got), "\r\n\r\n");
        assert_non_null(end);
        assert_int_equal(strncmp(buf_str(&got), "HTTP/1.0 200", 12), 0);
        assert_false(rec_contains(got.data, (size_t)(end - got.data),
                                  "Transfer-Encoding"));
        size_t n;
        char *expect = upstream_body(paths[i], &n);
        size_t body = got.len - (size_t)(end + 4 - got.data);
        assert_int_equal(body, n);
        assert_memory_equal(end + 4, expect, n);
        free(expect);
        buf_release(&got);
    }
}

static int fx_setup_timeout(void **state)
{
    return fx_setup_with(state, "1");
}

/* An upstream that answers nothing within --timeout: 504 with a JSON
 * error, stored as a timeout; the next request on a fresh connection is
 * served. */
static void test_upstream_silent_gives_504(void **state)
{
    struct recfx *f = *state;
    char *u = xasprintf("%s/hang", f->url);
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, "{}", 2, NULL, 0, &r), 0);
    assert_int_equal(r.status, 504);
    json_t *j = json_loadb(r.body.data, r.body.len, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(jstr(err, "type"), "upstream_timeout");
    assert_non_null(strstr(jstr(err, "message"), "timed out"));
    json_decref(j);
    rec_resp_release(&r);
    free(u);
    get_json_through(f, "/json");
    json_t *all = stop_and_load(f);
    assert_int_equal(json_array_size(all), 2);
    assert_string_equal(jstr(json_array_get(all, 0), "end"), "timeout");
    assert_int_equal(jint(json_array_get(all, 0), "status"), 0);
    assert_string_equal(jstr(json_array_get(all, 1), "end"), "complete");
    json_decref(all);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_framings_byte_exact, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_responses_without_body, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_upstream_closes_keepalive,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_upstream_faults, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_large_request_body, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_http10_client_gets_unchunked,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_upstream_silent_gives_504,
                                        fx_setup_timeout, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
