/*
 * record's own HTTP/1.1 server side (src/record/front.c) end to end, over
 * raw sockets so that every byte the client sends and receives is known:
 * malformed requests (400 with a JSON body), a head too large (431),
 * pipelined requests, Expect: 100-continue, a chunked upload, HTTP/1.0
 * with and without keep-alive, a client that sends its head a few bytes
 * at a time, an Expect value record does not know (417), an HTTP/2 client
 * with prior knowledge (answered in HTTP/2: GOAWAY, HTTP_1_1_REQUIRED),
 * versions other than 1.0 and 1.1 and a wrong count of Host fields (400),
 * a request followed by a half-close (answered),
 * and that the store holds what the upstream was sent. The real `fidelity
 * record` runs in front of the scripted upstream (tests/util/upstream.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

static int fx_setup(void **state)
{
    const char *const extra[] = {"--max-body", "4096", NULL};
    return (*state = recfx_start(extra, NULL)) ? 0 : -1;
}

static int fx_teardown(void **state)
{
    recfx_stop(*state);
    return 0;
}

static int dial(const struct recfx *f)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)f->rec.port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_str(int fd, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads until the peer closes (or 20 s pass without a byte). */
static void read_to_eof(int fd, struct buf *out)
{
    char tmp[4096];
    ssize_t n;
    while ((n = recv(fd, tmp, sizeof(tmp), 0)) > 0)
        buf_add(out, tmp, (size_t)n);
}

/* Reads until out holds needle; false when the peer closed first. */
static bool read_until(int fd, struct buf *out, const char *needle)
{
    char tmp[4096];
    while (!strstr(buf_str(out), needle)) {
        ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0)
            return false;
        buf_add(out, tmp, (size_t)n);
    }
    return true;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* Sends req on a fresh connection and reads everything until the close. */
static void exchange(const struct recfx *f, const char *req, struct buf *out)
{
    int fd = dial(f);
    send_str(fd, req);
    read_to_eof(fd, out);
    close(fd);
}

/* A refused request: the status, a JSON error of that type, the close. */
static void assert_refused(const char *got, const char *status,
                           const char *type)
{
    assert_int_equal(strncmp(got, status, strlen(status)), 0);
    assert_non_null(strstr(got, "Content-Type: application/json\r\n"));
    assert_non_null(strstr(got, "Connection: close\r\n"));
    const char *body = strstr(got, "\r\n\r\n");
    assert_non_null(body);
    json_t *j = json_loads(body + 4, 0, NULL);
    assert_non_null(j);
    json_t *err = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(err, "type")), type);
    assert_non_null(strstr(json_string_value(json_object_get(err, "message")),
                           "fidelity record: "));
    json_decref(j);
}

/* Malformed request lines and headers get a 400 with a JSON body saying
 * what is wrong, and the connection closes; nothing reaches the upstream. */
static void test_malformed_requests_400(void **state)
{
    struct recfx *f = *state;
    static const char *const bad[] = {
        "GARBAGE\r\n\r\n",
        "GET /json HTTP/2.0\r\nHost: x\r\n\r\n",
        "GET /json HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "GET /json HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
        "POST /echo HTTP/1.1\r\nContent-Length: 2, 3\r\n\r\n{}",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        NULL};
    for (int i = 0; bad[i]; i++) {
        struct buf got = BUF_INIT;
        exchange(f, bad[i], &got);
        assert_refused(buf_str(&got), "HTTP/1.", "bad_request");
        assert_non_null(strstr(buf_str(&got), " 400 Bad Request\r\n"));
        buf_release(&got);
    }
    struct buf got = BUF_INIT;
    exchange(f, "GET /json HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n\r\n", &got);
    assert_refused(buf_str(&got), "HTTP/1.1 417", "expectation_failed");
    buf_release(&got);
    assert_int_equal(upstream_requests(f->up), 0);
    /* a malformed request after a HEAD still gets its JSON body (the
     * HEAD's "no body" once leaked into the refusal) */
    buf_init(&got, 0);
    exchange(f, "HEAD /json HTTP/1.1\r\n\r\nGARBAGE\r\n\r\n", &got);
    const char *second = strstr(buf_str(&got), "HTTP/1.1 400");
    assert_non_null(second);
    assert_refused(second, "HTTP/1.1 400", "bad_request");
    buf_release(&got);
}

/* HTTP versions other than 1.0 and 1.1 (RFC 9112 section 2.3), an
 * HTTP/1.1 request without a Host field or with two, and an HTTP/1.0 one
 * with two (section 3.2) are answered 400; nothing reaches the upstream.
 * An HTTP/1.0 request without Host is served. */
static void test_version_and_host_400(void **state)
{
    struct recfx *f = *state;
    static const char *const bad[] = {
        "GET /json HTTP/1.2\r\nHost: x\r\n\r\n",
        "GET /json HTTP/1.9\r\nHost: x\r\n\r\n",
        "GET /json HTTP/1.1\r\n\r\n",
        "GET /json HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        "GET /json HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
        "POST /json HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        "GET /json HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        NULL};
    for (int i = 0; bad[i]; i++) {
        struct buf got = BUF_INIT;
        exchange(f, bad[i], &got);
        if (!strstr(buf_str(&got), " 400 Bad Request\r\n"))
            fail_msg("'%s' was answered '%s'", bad[i], buf_str(&got));
        assert_refused(buf_str(&got), "HTTP/1.", "bad_request");
        buf_release(&got);
    }
    assert_int_equal(upstream_requests(f->up), 0);
    struct buf got = BUF_INIT;
    exchange(f, "GET /json HTTP/1.0\r\n\r\n", &got);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.0 200 ", 13), 0);
    buf_release(&got);
}

/* A client that sends its request and then shuts its side
 * (shutdown(SHUT_WR), as `nc -N` and some SDKs' last request do) is
 * answered like any other, then closed; two pipelined requests before the
 * half-close get both answers; the exchanges are stored complete, not
 * client_gone. A half-close in the middle of a head is closed quietly. */
static void test_half_close_answered(void **state)
{
    struct recfx *f = *state;
    struct buf got = BUF_INIT;
    int fd = dial(f);
    send_str(fd, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                 "\r\n{}");
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200 ", 13), 0);
    buf_reset(&got);
    fd = dial(f);
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n"
                 "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(count(buf_str(&got), "HTTP/1.1 200 "), 2);
    buf_reset(&got);
    fd = dial(f);
    send_str(fd, "GET /json HTTP/1.1\r\nHo");
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(got.len, 0);
    buf_release(&got);
    assert_int_equal(proc_stop(&f->rec), 0);
    json_t *all = rec_load(f->db);
    assert_non_null(all);
    assert_int_equal(json_array_size(all), 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(
            json_string_value(json_object_get(json_array_get(all, i), "end")),
            "complete");
    json_decref(all);
}

/* A head longer than 64 KiB: 431. */
static void test_head_too_large_431(void **state)
{
    struct recfx *f = *state;
    struct buf req = BUF_INIT, got = BUF_INIT;
    buf_adds(&req, "GET /json HTTP/1.1\r\nX-Big: ");
    while (req.len < 70 * 1024)
        buf_addch(&req, 'x');
    buf_adds(&req, "\r\n\r\n");
    int fd = dial(f);
    /* record may close before taking it all: send what it takes */
    send(fd, req.data, req.len, MSG_NOSIGNAL);
    read_to_eof(fd, &got);
    close(fd);
    assert_refused(buf_str(&got), "HTTP/1.1 431", "request_header_too_large");
    buf_release(&req);
    buf_release(&got);
}

/* Two requests in one write: two responses, in order, on the one
 * connection; the second says close, so the connection ends after it. */
static void test_pipelined_requests(void **state)
{
    struct recfx *f = *state;
    struct buf got = BUF_INIT;
    exchange(f,
             "GET /json HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /echo?second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Length: 7\r\n\r\npayload",
             &got);
    const char *s = buf_str(&got);
    assert_int_equal(count(s, "HTTP/1.1 200"), 2);
    size_t n;
    char *json = upstream_body("/json", &n);
    const char *first = strstr(s, json);
    const char *second = strstr(s, "POST /echo?second HTTP/1.1");
    assert_non_null(first);
    assert_non_null(second);
    assert_true(first < second);
    assert_int_equal(strcmp(s + got.len - 7, "payload"), 0);
    free(json);
    buf_release(&got);
    assert_int_equal(upstream_requests(f->up), 2);
}

/* Expect: 100-continue: record answers 100 before the body is sent,
 * takes the body, and the upstream gets it with no Expect field. */
static void test_expect_100_continue(void **state)
{
    struct recfx *f = *state;
    int fd = dial(f);
    struct buf got = BUF_INIT;
    send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n"
                 "Expect: 100-continue\r\nConnection: close\r\n\r\n");
    assert_true(read_until(fd, &got, "\r\n\r\n"));
    assert_string_equal(buf_str(&got), "HTTP/1.1 100 Continue\r\n\r\n");
    send_str(fd, "hello world");
    read_to_eof(fd, &got);
    close(fd);
    const char *s = buf_str(&got);
    assert_non_null(strstr(s, "HTTP/1.1 200"));
    assert_int_equal(strcmp(s + got.len - 11, "hello world"), 0);
    assert_non_null(strstr(s, "Content-Length: 11\r\n"));
    assert_null(strstr(s, "Expect"));
    buf_release(&got);
    /* a body above --max-body is refused before it is sent */
    fd = dial(f);
    buf_init(&got, 0);
    send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
                 "Expect: 100-continue\r\n\r\n");
    read_to_eof(fd, &got);
    close(fd);
    assert_refused(buf_str(&got), "HTTP/1.1 413", "request_too_large");
    assert_non_null(strstr(buf_str(&got), "--max-body (4096 bytes)"));
    buf_release(&got);
}

/* A chunked upload reaches the upstream dechunked, with a Content-Length,
 * and is stored as sent. */
static void test_chunked_upload(void **state)
{
    struct recfx *f = *state;
    int fd = dial(f);
    struct buf got = BUF_INIT;
    send_str(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                 "chunked\r\nConnection: close\r\n\r\n5;ext=1\r\nhello\r\n");
    usleep(20000); /* the rest in a second segment */
    send_str(fd, "6\r\n world\r\n0\r\nTrailer-X: y\r\n\r\n");
    read_to_eof(fd, &got);
    close(fd);
    const char *s = buf_str(&got);
    assert_non_null(strstr(s, "HTTP/1.1 200"));
    assert_int_equal(strcmp(s + got.len - 11, "hello world"), 0);
    assert_non_null(strstr(s, "Content-Length: 11\r\n"));
    assert_null(strstr(s, "chunked"));
    buf_release(&got);
    /* a chunked body growing past --max-body: 413 */
    struct buf req = BUF_INIT;
    buf_adds(&req, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                   "chunked\r\n\r\n");
    for (int i = 0; i < 5; i++) {
        buf_adds(&req, "400\r\n");
        for (int k = 0; k < 0x400; k++)
            buf_addch(&req, 'a');
        buf_adds(&req, "\r\n");
    }
    buf_adds(&req, "0\r\n\r\n");
    buf_init(&got, 0);
    exchange(f, buf_str(&req), &got);
    assert_refused(buf_str(&got), "HTTP/1.1 413", "request_too_large");
    buf_release(&req);
    buf_release(&got);
    assert_int_equal(proc_stop(&f->rec), 0);
    json_t *all = rec_load(f->db);
    assert_int_equal(json_array_size(all), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(all, 0), "req_raw")),
        "hello world");
    json_decref(all);
}

/* HTTP/1.0: without keep-alive the response says close and the connection
 * ends; with it, the connection carries a second request. */
static void test_http10_keep_alive_rules(void **state)
{
    struct recfx *f = *state;
    size_t n;
    char *json = upstream_body("/json", &n);
    struct buf got = BUF_INIT;
    exchange(f, "GET /json HTTP/1.0\r\n\r\n", &got);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.0 200 ", 13), 0);
    assert_non_null(strstr(buf_str(&got), "Connection: close\r\n"));
    assert_int_equal(memcmp(got.data + got.len - n, json, n), 0);
    buf_release(&got);

    int fd = dial(f);
    buf_init(&got, 0);
    send_str(fd, "GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_true(read_until(fd, &got, json));
    assert_non_null(strstr(buf_str(&got), "Connection: keep-alive\r\n"));
    send_str(fd, "GET /json HTTP/1.0\r\n\r\n");
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(count(buf_str(&got), "HTTP/1.0 200"), 2);
    buf_release(&got);
    free(json);
}

/* A client that sends its head and body a few bytes at a time gets the
 * same answer as one that sends them at once. */
static void test_slow_client_head_in_pieces(void **state)
{
    struct recfx *f = *state;
    static const char req[] = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: 15\r\n"
                              "Connection: close\r\n\r\n{\"messages\":[]}";
    int fd = dial(f);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (size_t i = 0; i < sizeof(req) - 1; i += 7) {
        size_t k = sizeof(req) - 1 - i < 7 ? sizeof(req) - 1 - i : 7;
        assert_int_equal(send(fd, req + i, k, MSG_NOSIGNAL), (ssize_t)k);
        usleep(2000);
    }
    struct buf got = BUF_INIT;
    read_to_eof(fd, &got);
    close(fd);
    const char *s = buf_str(&got);
    assert_int_equal(strncmp(s, "HTTP/1.1 200", 12), 0);
    assert_int_equal(strcmp(s + got.len - 15, "{\"messages\":[]}"), 0);
    assert_non_null(strstr(s, "Content-Type: application/json\r\n"));
    buf_release(&got);
}

/* The HTTP/2 preface, whole or in pieces, after a SETTINGS frame or
 * alone, gets an empty SETTINGS frame and a GOAWAY with last stream 0 and
 * HTTP_1_1_REQUIRED (RFC 9113 3.4, 6.8, 7), then the close; nothing
 * reaches the upstream, and an HTTP/1.1 request on a new connection is
 * answered as before. */
static void test_h2_prior_knowledge_goaway(void **state)
{
    struct recfx *f = *state;
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    static const unsigned char settings[9] = {0, 0, 0, 4, 0, 0, 0, 0, 0};
    for (int split = 0; split < 3; split++) {
        int fd = dial(f);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (split == 1) { /* a byte at a time */
            for (size_t i = 0; i < sizeof(preface) - 1; i++) {
                assert_int_equal(send(fd, preface + i, 1, MSG_NOSIGNAL), 1);
                usleep(1000);
            }
        } else {
            send_str(fd, preface);
        }
        if (split == 2) /* the client's own SETTINGS follows the preface */
            assert_int_equal(send(fd, settings, 9, MSG_NOSIGNAL), 9);
        struct buf got = BUF_INIT;
        read_to_eof(fd, &got);
        close(fd);
        const unsigned char *b = (const unsigned char *)got.data;
        assert_true(got.len > 9 + 9 + 8);
        assert_memory_equal(b, settings, 9);
        const unsigned char *g = b + 9;
        size_t len = (size_t)g[0] << 16 | (size_t)g[1] << 8 | g[2];
        assert_int_equal(g[3], 7); /* GOAWAY */
        assert_int_equal(g[4], 0);
        assert_memory_equal(g + 5, "\0\0\0\0", 4); /* stream 0 */
        assert_int_equal(got.len, 9 + 9 + len);
        static const unsigned char last_and_code[8] = {0, 0, 0, 0,
                                                       0, 0, 0, 0xd};
        assert_memory_equal(g + 9, last_and_code, 8);
        char *why = xstrndup((const char *)g + 17, len - 8);
        assert_non_null(strstr(why, "HTTP/1.1"));
        free(why);
        buf_release(&got);
    }
    assert_int_equal(upstream_requests(f->up), 0);
    struct buf got = BUF_INIT;
    exchange(f, "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             &got);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    buf_release(&got);
    /* a method that starts like the preface is still HTTP/1.1's */
    buf_init(&got, 0);
    exchange(f, "PRI /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             &got);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 ", 9), 0);
    buf_release(&got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_malformed_requests_400, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_version_and_host_400, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_half_close_answered, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_head_too_large_431, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_requests, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_expect_100_continue, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_chunked_upload, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_http10_keep_alive_rules, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_slow_client_head_in_pieces,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_h2_prior_knowledge_goaway,
                                        fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
