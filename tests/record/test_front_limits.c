/*
 * The limits of record's client side (src/record/front.c) end to end: what
 * a client can hold and for how long. Descriptors exhausted (the child's
 * RLIMIT_NOFILE lowered, more idle connections than descriptors) must not
 * spin or flood the log, and a client is answered once a slot frees; a
 * request head sent a byte a second meets --header-timeout; an idle
 * keep-alive connection meets --idle-timeout, a quiet stream does not;
 * --max-conns (given, or derived from the descriptor limit) answers 503;
 * the client side stops at its share of the descriptor limit, the rest
 * kept for upstream sockets, so that no admitted client gets a 502;
 * a --listen that is not provably loopback ('*', a name that does not
 * resolve, every form of 0.0.0.0 and ::) needs --allow-remote, for record
 * and sim, loopback forms bind where they say, and an IPv6 address is
 * printed in brackets. The real `fidelity record` runs in front of the
 * scripted upstream (tests/util/upstream.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/xalloc.h"
#include "util/need.h"
#include "util/rec.h"
#include "util/upstream.h"

/* record in front of the scripted upstream, with its own options and
 * descriptor limit (0: the test's); stderr kept in err. */
struct lim {
    struct upstream *up;
    char *dir;
    char db[256], err[256];
    struct proc rec;
};

static struct lim *lim_start(const char *const extra[], long nofile)
{
    struct lim *l = xcalloc(1, sizeof(*l));
    const char *av[32] = {"record", "--listen", "127.0.0.1:0", "--upstream"};
    int n = 4;
    l->up = upstream_start();
    l->dir = rec_tmpdir();
    assert_non_null(l->up);
    assert_non_null(l->dir);
    snprintf(l->db, sizeof(l->db), "%s/r.db", l->dir);
    snprintf(l->err, sizeof(l->err), "%s/err.log", l->dir);
    av[n++] = upstream_url(l->up);
    av[n++] = "--db";
    av[n++] = l->db;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        av[n++] = extra[i];
    av[n] = NULL;
    assert_int_equal(proc_start_nofile(&l->rec, av, l->err, nofile), 0);
    return l;
}

static void lim_stop(struct lim *l)
{
    if (l->rec.pid > 0)
        proc_stop(&l->rec);
    upstream_stop(l->up);
    rec_rmdir(l->dir);
    free(l);
}

static int lim_teardown(void **state)
{
    if (*state)
        lim_stop(*state);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int dial(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void send_str(int fd, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads until the peer closes (or 10 s pass without a byte). */
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

/* A JSON error response of that status and type from record. */
static void assert_json_error(const char *got, const char *status,
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

/* The process's CPU time so far (user + system), from /proc/PID/stat. */
static double cpu_seconds(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    /* fields after the command's closing parenthesis: state is field 3,
     * utime 14, stime 15 */
    const char *p = strrchr(line, ')');
    assert_non_null(p);
    unsigned long ut = 0, st = 0;
    assert_int_equal(sscanf(p + 2,
                            "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                            "%lu %lu",
                            &ut, &st),
                     2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int count_lines(const char *path)
{
    struct buf b = BUF_INIT;
    assert_int_equal(rec_read_file(path, &b), 0);
    int n = 0;
    for (size_t i = 0; i < b.len; i++)
        n += b.data[i] == '\n';
    buf_release(&b);
    return n;
}

static bool file_has(const char *path, const char *needle)
{
    struct buf b = BUF_INIT;
    assert_int_equal(rec_read_file(path, &b), 0);
    bool has = rec_contains(b.data, b.len, needle);
    buf_release(&b);
    return has;
}

#define IDLE 160 /* idle connections: more than the child's descriptors */

/* Regression: with descriptors exhausted, record retried the failing
 * accept(2) at once, forever (90 % CPU, millions of "Too many open files"
 * lines, nobody served). Now it pauses accepting: its CPU time stays low,
 * the log short, and a client waiting behind the idle ones is answered
 * within 2 s of the slots freeing. */
static void test_descriptors_exhausted_no_busy_loop(void **state)
{
    /* the limit, not max-conns, is what runs out here: 32 descriptors
     * are fewer than record's own files and the 16 client connections it
     * admits at least */
    const char *const extra[] = {"--max-conns", "100000", NULL};
    struct lim *l = *state = lim_start(extra, 32);
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) /* the kernel queues what is not taken */
        idle[i] = dial(l->rec.port);
    usleep(500000);
    assert_true(file_has(l->err, "Too many open files")); /* it ran out */
    double cpu0 = cpu_seconds(l->rec.pid), t0 = now_s();
    usleep(3000000);
    double cpu = cpu_seconds(l->rec.pid) - cpu0, window = now_s() - t0;
    assert_true(cpu < 0.1 * window); /* it was 90 % */

    int good = dial(l->rec.port);
    send_str(good,
             "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    struct pollfd pfd = {.fd = good, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 500), 0); /* queued: nothing to read */
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    double freed = now_s();
    struct buf got = BUF_INIT;
    assert_true(read_until(good, &got, "\r\n\r\n"));
    assert_true(now_s() - freed < 2.0);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    read_to_eof(good, &got);
    close(good);
    buf_release(&got);
    assert_int_equal(proc_stop(&l->rec), 0);
    assert_true(count_lines(l->err) < 100);
    assert_true(file_has(l->err, "cannot accept connections: Too many open "
                                 "files ("));
}

/* A client sending its request head a byte a second gets a 408 and the
 * close once --header-timeout (1 s) has passed; nothing is forwarded. A
 * connection that sends nothing is closed without a word. */
static void test_header_timeout_slow_head(void **state)
{
    const char *const extra[] = {"--header-timeout", "1", NULL};
    struct lim *l = *state = lim_start(extra, 0);
    static const char req[] = "GET /json HTTP/1.1\r\nHost: x\r\n\r\n";
    int fd = dial(l->rec.port);
    double t0 = now_s(), closed = 0;
    struct buf got = BUF_INIT;
    for (size_t i = 0; i < sizeof(req) - 1 && !closed; i++) {
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 1000) == 1) {
            read_to_eof(fd, &got);
            closed = now_s();
        }
    }
    close(fd);
    assert_true(closed > 0);
    assert_true(closed - t0 >= 0.9);
    assert_true(closed - t0 < 2.5);
    assert_json_error(buf_str(&got), "HTTP/1.1 408", "request_timeout");
    assert_int_equal(upstream_requests(l->up), 0);
    buf_release(&got);

    fd = dial(l->rec.port);
    t0 = now_s();
    buf_init(&got, 0);
    read_to_eof(fd, &got);
    assert_int_equal(got.len, 0);
    assert_true(now_s() - t0 >= 0.9);
    assert_true(now_s() - t0 < 2.5);
    close(fd);
}

/* Reads one sized response (head and Content-Length bytes) into out. */
static void read_sized(int fd, struct buf *out)
{
    assert_true(read_until(fd, out, "\r\n\r\n"));
    const char *cl = strstr(buf_str(out), "Content-Length: ");
    assert_non_null(cl);
    size_t head = (size_t)(strstr(out->data, "\r\n\r\n") - out->data) + 4;
    size_t want = head + strtoul(cl + 16, NULL, 10);
    char tmp[4096];
    while (out->len < want) {
        ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
        assert_true(n > 0);
        buf_add(out, tmp, (size_t)n);
    }
}

/* A keep-alive connection idle after its response is closed once
 * --idle-timeout (1 s) has passed, while one that keeps sending requests
 * within it is served on. */
static void test_idle_keep_alive_closed(void **state)
{
    const char *const extra[] = {"--idle-timeout", "1", NULL};
    struct lim *l = *state = lim_start(extra, 0);
    int fd = dial(l->rec.port), busy = dial(l->rec.port);
    struct buf got = BUF_INIT;
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
    read_sized(fd, &got);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    double t0 = now_s();
    for (int i = 0; i < 5; i++) { /* 2.5 s of requests 0.5 s apart */
        buf_reset(&got);
        send_str(busy, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
        read_sized(busy, &got);
        assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
        usleep(500000);
    }
    buf_reset(&got);
    read_to_eof(fd, &got); /* closed long ago: EOF at once */
    assert_int_equal(got.len, 0);
    close(fd);
    (void)t0;

    /* when exactly: between 1 s and 1 s plus a sweep */
    fd = dial(l->rec.port);
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
    read_sized(fd, &got);
    t0 = now_s();
    buf_reset(&got);
    read_to_eof(fd, &got);
    assert_int_equal(got.len, 0);
    assert_true(now_s() - t0 >= 0.9);
    assert_true(now_s() - t0 < 2.5);
    close(fd);
    close(busy);
    buf_release(&got);
}

/* A streamed response silent for 3.2 s, longer than both timeouts (1 s),
 * reaches its end: a response still streaming is never cut. */
static void test_quiet_stream_not_cut(void **state)
{
    const char *const extra[] = {"--idle-timeout", "1", "--header-timeout", "1",
                                 NULL};
    struct lim *l = *state = lim_start(extra, 0);
    int fd = dial(l->rec.port);
    double t0 = now_s();
    send_str(fd, "GET /quiet HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    struct buf got = BUF_INIT;
    read_to_eof(fd, &got);
    close(fd);
    assert_true(now_s() - t0 >= 3.0);
    const char *s = buf_str(&got);
    assert_int_equal(strncmp(s, "HTTP/1.1 200", 12), 0);
    assert_non_null(strstr(s, "Transfer-Encoding: chunked\r\n"));
    assert_true(got.len > 5);
    assert_string_equal(s + got.len - 5, "0\r\n\r\n"); /* the last chunk */
    const char *first = strstr(s, "data: ");
    assert_non_null(first);
    assert_non_null(strstr(first + 1, "data: ")); /* the event after */
    buf_release(&got);
}

/* --max-conns 4 and 6 clients: the 4 that came first are served (each
 * receiving its stream), the other 2 get 503 with a JSON error; once the
 * 4 close, a new client is served again. */
static void test_max_conns_503(void **state)
{
    const char *const extra[] = {"--max-conns", "4", NULL};
    struct lim *l = *state = lim_start(extra, 0);
    int served[4];
    struct buf got = BUF_INIT;
    for (int i = 0; i < 4; i++) {
        served[i] = dial(l->rec.port);
        send_str(served[i], "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
        buf_reset(&got);
        assert_true(read_until(served[i], &got, "data: "));
        assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    }
    for (int i = 0; i < 2; i++) {
        int fd = dial(l->rec.port);
        send_str(fd, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2"
                     "\r\n\r\n{}");
        buf_reset(&got);
        read_to_eof(fd, &got);
        close(fd);
        assert_json_error(buf_str(&got), "HTTP/1.1 503",
                          "too_many_connections");
        assert_non_null(strstr(buf_str(&got), "--max-conns"));
    }
    assert_int_equal(upstream_requests(l->up), 4);
    for (int i = 0; i < 4; i++)
        close(served[i]);
    usleep(300000);
    int fd = dial(l->rec.port);
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    buf_reset(&got);
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    buf_release(&got);
}

/* Without --max-conns the limit comes from the descriptor limit: 96
 * descriptors leave (96 - 64) / 2 = 16 client connections, and 16 more
 * are kept for their upstream sockets; the 17th waits in the kernel's
 * queue (no 503: that would take a reserved descriptor) and is served once
 * one of the 16 closes. */
static void test_default_max_conns_from_nofile(void **state)
{
    struct lim *l = *state = lim_start(NULL, 96);
    int fds[16];
    struct buf got = BUF_INIT;
    for (int i = 0; i < 16; i++) { /* each served: it is counted */
        fds[i] = dial(l->rec.port);
        send_str(fds[i], "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
        buf_reset(&got);
        read_sized(fds[i], &got);
        assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    }
    int fd = dial(l->rec.port);
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 500), 0); /* queued: nothing to read */
    assert_true(file_has(l->err, "16 client connections are open"));
    close(fds[0]);
    buf_reset(&got);
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    for (int i = 1; i < 16; i++)
        close(fds[i]);
    buf_release(&got);
}

#define BURST 100 /* client connections at once: more than the limit fits */

/* Regression: connections refused with 503 held descriptors (lingering up
 * to 2 s), so an admitted client's upstream socket found none and the
 * client got "502 cannot connect ...: Too many open files". Now the client
 * connections stop at their share of the descriptor limit (96: 16 served,
 * 16 kept for their upstream sockets): every client that gets an answer
 * gets the upstream's, a client refused is refused before any byte. */
static void test_upstream_descriptors_reserved(void **state)
{
    struct lim *l = *state = lim_start(NULL, 96);
    int fds[BURST];
    size_t n;
    char *want = upstream_body("/json", &n);
    for (int i = 0; i < BURST; i++) {
        fds[i] = dial(l->rec.port);
        send_str(fds[i], "GET /delay HTTP/1.1\r\nHost: x\r\n"
                         "Connection: close\r\n\r\n");
    }
    int ok = 0, refused = 0;
    struct buf got = BUF_INIT;
    for (int i = 0; i < BURST; i++) {
        buf_reset(&got);
        read_to_eof(fds[i], &got);
        close(fds[i]);
        if (!got.len) {
            refused++;
            continue;
        }
        if (strncmp(buf_str(&got), "HTTP/1.1 200", 12) ||
            !rec_contains(got.data, got.len, want))
            fail_msg("client %d of %d: %.200s", i, BURST, buf_str(&got));
        ok++;
    }
    assert_true(ok >= 16);
    assert_int_equal(ok + refused, BURST);
    assert_false(file_has(l->err, "Too many open files"));
    free(want);
    buf_release(&got);
}

/* A non-loopback --listen is refused (exit 2, the reason named) without
 * --allow-remote; with it, record starts and warns on stderr, naming the
 * address and that there is no authentication. */
static void test_remote_listen_needs_allow_remote(void **state)
{
    char *dir = rec_tmpdir();
    char db[256], err[256];
    (void)state;
    assert_non_null(dir);
    snprintf(db, sizeof(db), "%s/r.db", dir);
    snprintf(err, sizeof(err), "%s/err.log", dir);
    /* every form of the wildcard, '*', a name that does not resolve:
     * none is provably loopback; record and sim alike */
    static const char *const addrs[] = {
        "0.0.0.0:0",  "[::]:0", "*:0",
        "[*]:0",      "0:0",    "[::ffff:0.0.0.0]:0",
        "[0:0::0]:0", "0x0:0",  "no-such-host.invalid:0"};
    for (size_t i = 0; i < sizeof(addrs) / sizeof(*addrs); i++) {
        for (int sim = 0; sim < 2; sim++) {
            const char *av[] = {
                sim ? "sim" : "record", "--listen", addrs[i], "--upstream",
                "http://127.0.0.1:9",   "--db",     db,       NULL};
            if (sim)
                av[3] = NULL;
            struct buf out = BUF_INIT, e = BUF_INIT;
            int rc = proc_run(av, NULL, &out, &e, 5);
            if (rc != 2)
                fail_msg("%s --listen %s: exit %d, %s%s", av[0], addrs[i], rc,
                         buf_str(&out), buf_str(&e));
            assert_int_equal(out.len, 0);
            assert_non_null(strstr(buf_str(&e), "loopback"));
            assert_non_null(strstr(buf_str(&e), "--allow-remote"));
            assert_non_null(strstr(buf_str(&e), addrs[i]));
            buf_release(&out);
            buf_release(&e);
        }
    }
    const char *av[] = {"record",         "--listen",   "0.0.0.0:0",
                        "--allow-remote", "--upstream", "http://127.0.0.1:9",
                        "--db",           db,           NULL};
    struct proc p;
    assert_int_equal(proc_start_err(&p, av, err), 0);
    char want[64];
    snprintf(want, sizeof(want), "warning: listening on 0.0.0.0:%d,", p.port);
    assert_int_equal(proc_stop(&p), 0);
    assert_true(file_has(err, want));
    assert_true(file_has(err, "no authentication"));
    rec_rmdir(dir);
}

/* The local address of pid's listening TCP socket on port, as
 * /proc/PID/net/tcp{,6} writes it (hex, the kernel's byte order): false
 * when there is none. */
static bool bound_addr(pid_t pid, int port, char *out, size_t size)
{
    static const char *const files[] = {"tcp", "tcp6"};
    for (int k = 0; k < 2; k++) {
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, files[k]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof(line), f)) {
            char local[64];
            unsigned p, st;
            if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %*s %x", local, &p,
                       &st) == 3 &&
                (int)p == port && st == 0x0A) {
                snprintf(out, size, "%s", local);
                fclose(f);
                return true;
            }
        }
        fclose(f);
    }
    return false;
}

/* Loopback forms need no flag: record and sim start on them with no
 * warning, and the socket each binds (read from the kernel's table, not by
 * connecting) is on that loopback address. */
static void test_loopback_forms_bound(void **state)
{
    char *dir = rec_tmpdir();
    char db[256], err[256];
    (void)state;
    assert_non_null(dir);
    snprintf(db, sizeof(db), "%s/r.db", dir);
    snprintf(err, sizeof(err), "%s/err.log", dir);
    static const struct {
        const char *listen, *hex;
    } forms[] = {{"127.0.0.1:0", "0100007F"},
                 {"127.0.0.2:0", "0200007F"},
                 {"localhost:0", NULL}, /* 127.0.0.1 or ::1 */
                 {":0", "0100007F"}};
    for (size_t i = 0; i < sizeof(forms) / sizeof(*forms); i++) {
        for (int sim = 0; sim < 2; sim++) {
            const char *av[] = {sim ? "sim" : "record",
                                "--listen",
                                forms[i].listen,
                                "--upstream",
                                "http://127.0.0.1:9",
                                "--db",
                                db,
                                NULL};
            if (sim)
                av[3] = NULL;
            struct proc p;
            char got[64];
            assert_int_equal(proc_start_err(&p, av, err), 0);
            bool found = bound_addr(p.pid, p.port, got, sizeof(got));
            assert_int_equal(proc_stop(&p), 0);
            assert_true(found);
            if (forms[i].hex)
                assert_string_equal(got, forms[i].hex);
            else
                assert_true(!strcmp(got, "0100007F") ||
                            !strcmp(got, "00000000000000000000000001000000"));
        }
    }
    assert_false(file_has(err, "warning"));
    rec_rmdir(dir);
}

/* The IPv6 loopback: no flag needed, no warning, the URL printed with the
 * address in brackets (it was "http://::1:PORT"), and served over IPv6. */
static void test_ipv6_listen_bracketed(void **state)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    a.sin6_addr = in6addr_loopback;
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    bool has_v6 = probe >= 0 && !bind(probe, (struct sockaddr *)&a, sizeof(a));
    if (probe >= 0)
        close(probe);
    if (!has_v6) {
        need_missing("an IPv6 loopback address (::1)");
    }
    const char *const extra[] = {"--listen", "[::1]:0", NULL};
    struct lim *l = *state = lim_start(extra, 0);
    char want[96];
    snprintf(want, sizeof(want),
             "fidelity record: listening on http://[::1]:%d -> ", l->rec.port);
    assert_int_equal(strncmp(l->rec.line, want, strlen(want)), 0);
    a.sin6_port = htons((uint16_t)l->rec.port);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    send_str(fd, "GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    struct buf got = BUF_INIT;
    read_to_eof(fd, &got);
    close(fd);
    assert_int_equal(strncmp(buf_str(&got), "HTTP/1.1 200", 12), 0);
    buf_release(&got);
    assert_int_equal(proc_stop(&l->rec), 0);
    assert_false(file_has(l->err, "warning"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_descriptors_exhausted_no_busy_loop,
                                  lim_teardown),
        cmocka_unit_test_teardown(test_header_timeout_slow_head, lim_teardown),
        cmocka_unit_test_teardown(test_idle_keep_alive_closed, lim_teardown),
        cmocka_unit_test_teardown(test_quiet_stream_not_cut, lim_teardown),
        cmocka_unit_test_teardown(test_max_conns_503, lim_teardown),
        cmocka_unit_test_teardown(test_default_max_conns_from_nofile,
                                  lim_teardown),
        cmocka_unit_test_teardown(test_upstream_descriptors_reserved,
                                  lim_teardown),
        cmocka_unit_test(test_remote_listen_needs_allow_remote),
        cmocka_unit_test(test_loopback_forms_bound),
        cmocka_unit_test_teardown(test_ipv6_listen_bracketed, lim_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
