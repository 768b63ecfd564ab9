/*
 * upstream: the scripted test server (see upstream.h).
 */
#define _GNU_SOURCE
#include "util/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/xalloc.h"

struct upstream {
    int fd;
    int port;
    char url[64];
    pthread_t thr;
    atomic_int stop;
    atomic_int peer_gone;
    atomic_int requests;
    atomic_int dropped;
    atomic_int live; /* connection threads running */
    pthread_mutex_t lock;
    int conns[256];  /* open connection sockets, -1 when free */
    struct buf last; /* the raw bytes of the last request (under lock) */
};

static const char *const SSE_EVENTS[] = {
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
    "\"reasoning_content\":\"think \\u00e9\"},\"finish_reason\":null}]}\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},"
    "\"finish_reason\":null}]}\r\n\r\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\","
    "\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\","
    "\"function\":{\"name\":\"write\",\"arguments\":\"{\\\"a\\\":\"}}]},"
    "\"finish_reason\":null}]}\n\n",
    ": keep-alive comment\n\n",
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
    "\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":"
    "\"tool_calls\"}]}\n\n",
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
    "\"completion_tokens\":5,\"total_tokens\":12}}\n\n",
    "data: [DONE]\n\n",
    NULL};

static const char JSON_BODY[] =
    "{\"id\": \"x\",  \"choices\": [{\"index\": 0, \"message\": {\"role\": "
    "\"assistant\", \"content\": \"caf\\u00e9 \xc3\xa9\"}, \"finish_reason\":"
    " \"stop\"}], \"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": "
    "2}}\n";

/* The events of /sse (or the /json body when json) gzip-compressed as
 * one stream, flushed after each event; ends[i] is where piece i ends. */
static void gzip_pieces(bool json, struct buf *out, size_t *ends, int *n)
{
    z_stream z;
    unsigned char tmp[4096];
    memset(&z, 0, sizeof(z));
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    *n = 0;
    for (int i = 0; json ? i < 1 : SSE_EVENTS[i] != NULL; i++) {
        const char *ev = json ? JSON_BODY : SSE_EVENTS[i];
        bool last = json || !SSE_EVENTS[i + 1];
        z.next_in = (Bytef *)ev;
        z.avail_in = (uInt)strlen(ev);
        do {
            z.next_out = tmp;
            z.avail_out = sizeof(tmp);
            deflate(&z, last ? Z_FINISH : Z_SYNC_FLUSH);
            buf_add(out, tmp, sizeof(tmp) - z.avail_out);
        } while (z.avail_out == 0);
        ends[(*n)++] = out->len;
    }
    deflateEnd(&z);
}

/* n zero bytes, gzip-compressed (about 100 KB for 100 MB), into b. */
static void gzip_zeros(struct buf *b, size_t n)
{
    static unsigned char zeros[1 << 16];
    unsigned char out[1 << 16];
    z_stream z;
    memset(&z, 0, sizeof(z));
    deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
    for (size_t done = 0;;) {
        size_t k = n - done < sizeof(zeros) ? n - done : sizeof(zeros);
        z.next_in = zeros;
        z.avail_in = (uInt)k;
        done += k;
        int flush = done == n ? Z_FINISH : Z_NO_FLUSH;
        int zr;
        do {
            z.next_out = out;
            z.avail_out = sizeof(out);
            zr = deflate(&z, flush);
            buf_add(b, out, sizeof(out) - z.avail_out);
        } while (z.avail_out == 0);
        if (zr == Z_STREAM_END || done == n)
            break;
    }
    deflateEnd(&z);
}

char *upstream_body(const char *route, size_t *len)
{
    struct buf b = BUF_INIT;
    size_t ends[16];
    int n;
    if (!strcmp(route, "/gzip/bomb")) {
        gzip_zeros(&b, (size_t)100 << 20);
    } else if (!strcmp(route, "/gzip/json") || !strcmp(route, "/gzip/sse")) {
        gzip_pieces(route[6] == 'j', &b, ends, &n);
    } else if (!strcmp(route, "/json")) {
        buf_adds(&b, JSON_BODY);
    } else if (!strcmp(route, "/sse")) {
        for (int i = 0; SSE_EVENTS[i]; i++)
            buf_adds(&b, SSE_EVENTS[i]);
    } else if (!strcmp(route, "/reset")) {
        buf_adds(&b, SSE_EVENTS[0]);
        buf_adds(&b, SSE_EVENTS[1]);
    } else if (!strcmp(route, "/big")) {
        buf_adds(&b, "{\"pad\": \"");
        for (int i = 0; i < (1 << 20) / 64; i++)
            buf_printf(&b, "%063d.", i);
        buf_adds(&b, "\"}");
    } else if (!strcmp(route, "/chunked") || !strcmp(route, "/close") ||
               !strcmp(route, "/interim") || !strcmp(route, "/kaclose") ||
               !strcmp(route, "/dropnext") || !strcmp(route, "/bighead")) {
        buf_adds(&b, JSON_BODY);
    } else if (!strcmp(route, "/bigchunked")) {
        for (int i = 0; i < (3 << 20) / 32; i++)
            buf_printf(&b, "%031d\n", i * 7);
    } else if (!strcmp(route, "/resetsized")) {
        for (int i = 0; i < 500; i++)
            buf_addch(&b, (char)('a' + i % 26));
    }
    return buf_detach(&b, len);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_chunk(int fd, const char *s, size_t n)
{
    char head[32];
    int hl = snprintf(head, sizeof(head), "%zx\r\n", n);
    if (write_all(fd, head, (size_t)hl) || write_all(fd, s, n) ||
        write_all(fd, "\r\n", 2))
        return -1;
    return 0;
}

static int send_sized(int fd, const char *ctype, const char *body, size_t n)
{
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\nX-Test: yes\r\n\r\n",
                      ctype, n);
    return write_all(fd, head, (size_t)hl) || write_all(fd, body, n) ? -1 : 0;
}

static int send_sized_head(int fd, const char *ctype, size_t n)
{
    char head[256];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\nX-Test: yes\r\n\r\n",
                      ctype, n);
    return write_all(fd, head, (size_t)hl);
}

static const char SSE_HEAD[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";

/* /gzip/json (sized) or /gzip/sse (one chunk per event, as a server that
 * compresses a stream and flushes after each event sends it). */
static int send_gzip(int fd, bool json)
{
    struct buf z = BUF_INIT;
    size_t ends[16];
    int n, rc = 0;
    gzip_pieces(json, &z, ends, &n);
    char head[256];
    int hl;
    if (json) {
        hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Encoding: gzip\r\nContent-Length: %zu\r\n\r\n",
                      z.len);
        rc = write_all(fd, head, (size_t)hl) || write_all(fd, z.data, z.len);
    } else {
        hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Content-Encoding: gzip\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n");
        rc = write_all(fd, head, (size_t)hl);
        for (int i = 0; !rc && i < n; i++) {
            size_t from = i ? ends[i - 1] : 0;
            rc = send_chunk(fd, z.data + from, ends[i] - from);
            usleep(2000);
        }
        if (!rc)
            rc = write_all(fd, "0\r\n\r\n", 5);
    }
    buf_release(&z);
    return rc ? -1 : 0;
}

/* A chunked body in pieces of `piece` bytes, with a chunk extension on
 * the first and a trailer field at the end. */
static int send_chunked(int fd, const char *body, size_t n, size_t piece)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                               "application/json\r\nTransfer-Encoding: "
                               "chunked\r\n\r\n";
    if (write_all(fd, head, sizeof(head) - 1))
        return -1;
    for (size_t off = 0; off < n; off += piece) {
        size_t k = n - off < piece ? n - off : piece;
        char h[64];
        int hl = snprintf(h, sizeof(h), off ? "%zX\r\n" : "%zx;ext=1\r\n", k);
        if (write_all(fd, h, (size_t)hl) || write_all(fd, body + off, k) ||
            write_all(fd, "\r\n", 2))
            return -1;
    }
    static const char end[] = "0\r\nX-Trailer: t\r\n\r\n";
    return write_all(fd, end, sizeof(end) - 1);
}

/* The routes that exercise record's own HTTP/1.1 client: framings other
 * than Content-Length, responses without a body, connections closed by
 * the server. 1: not one of them. */
static int serve_framing(struct upstream *u, int fd, const char *method,
                         const char *path, int *drop_next)
{
    size_t n;
    char *body = NULL;
    int rc = 1;
    if (!strncmp(path, "/chunked", 8) || !strncmp(path, "/bigchunked", 11)) {
        body = upstream_body(path[1] == 'c' ? "/chunked" : "/bigchunked", &n);
        rc = send_chunked(fd, body, n, path[1] == 'c' ? 40 : 65536);
    } else if (!strncmp(path, "/close", 6)) {
        static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                                "application/json\r\nConnection: close\r\n\r\n";
        body = upstream_body("/close", &n);
        write_all(fd, h, sizeof(h) - 1);
        write_all(fd, body, n);
        rc = -1; /* the close ends the body */
    } else if (!strncmp(path, "/interim", 8)) {
        static const char h[] = "HTTP/1.1 100 Continue\r\n\r\n"
                                "HTTP/1.1 103 Early Hints\r\nLink: </a>; "
                                "rel=preload\r\n\r\n";
        body = upstream_body("/interim", &n);
        rc = write_all(fd, h, sizeof(h) - 1) ||
                     send_sized(fd, "application/json", body, n)
                 ? -1
                 : 0;
    } else if (!strncmp(path, "/204", 4)) {
        static const char h[] =
            "HTTP/1.1 204 No Content\r\nX-Test: yes\r\n\r\n";
        rc = write_all(fd, h, sizeof(h) - 1);
    } else if (!strncmp(path, "/304", 4)) {
        /* a Content-Length on a 304 describes the selected representation:
         * no body follows (RFC 9110 section 8.6) */
        static const char h[] = "HTTP/1.1 304 Not Modified\r\nETag: \"e1\"\r\n"
                                "Content-Length: 50\r\n\r\n";
        rc = write_all(fd, h, sizeof(h) - 1);
    } else if (!strncmp(path, "/kaclose", 8) ||
               !strncmp(path, "/dropnext", 9)) {
        body = upstream_body("/kaclose", &n);
        rc = send_sized(fd, "application/json", body, n);
        if (path[1] == 'k')
            rc = -1; /* keep-alive was not refused, yet the server closes */
        else
            *drop_next = 1;
    } else if (!strncmp(path, "/resetsized", 11)) {
        static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: "
                                "text/plain\r\nContent-Length: 1000\r\n\r\n";
        body = upstream_body("/resetsized", &n);
        write_all(fd, h, sizeof(h) - 1);
        write_all(fd, body, n);
        rc = -1;
    } else if (!strncmp(path, "/bighead", 8)) {
        /* a 12 KB header field, the head written 1,000 bytes at a time */
        struct buf h = BUF_INIT;
        body = upstream_body("/json", &n);
        buf_adds(&h, "HTTP/1.1 200 OK\r\nX-Big: ");
        for (int i = 0; i < 12000; i++)
            buf_addch(&h, (char)('a' + i % 26));
        buf_printf(&h, "\r\nContent-Length: %zu\r\n\r\n", n);
        rc = 0;
        for (size_t off = 0; off < h.len && !rc; off += 1000) {
            rc = write_all(fd, h.data + off,
                           h.len - off < 1000 ? h.len - off : 1000);
            usleep(2000);
        }
        rc = rc || write_all(fd, body, n) ? -1 : 0;
        buf_release(&h);
    } else if (!strncmp(path, "/hang", 5)) {
        /* reads the request, answers nothing for 3 s, then closes */
        for (int i = 0; i < 300 && !atomic_load(&u->stop); i++)
            usleep(10000);
        rc = -1;
    } else if (!strncmp(path, "/garbage", 8)) {
        static const char h[] = "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n";
        write_all(fd, h, sizeof(h) - 1);
        rc = -1;
    }
    (void)method;
    free(body);
    return rc;
}

/* Serves one request; returns 0 to keep the connection, -1 to close. */
static int serve(struct upstream *u, int fd, const char *method,
                 const char *path, const char *raw, size_t raw_len,
                 int *drop_next)
{
    size_t n;
    char *body;
    atomic_fetch_add(&u->requests, 1);
    pthread_mutex_lock(&u->lock);
    buf_reset(&u->last);
    buf_add(&u->last, raw, raw_len);
    pthread_mutex_unlock(&u->lock);
    int rc = serve_framing(u, fd, method, path, drop_next);
    if (rc != 1)
        return rc;
    if (!strncmp(path, "/json", 5) || !strncmp(path, "/big", 4)) {
        body = upstream_body(!strncmp(path, "/json", 5) ? "/json" : "/big", &n);
        if (!strcmp(method, "HEAD")) /* the head only, as for a GET */
            rc = send_sized_head(fd, "application/json", n);
        else
            rc = send_sized(fd, "application/json", body, n);
        free(body);
        return rc;
    }
    if (!strncmp(path, "/echo", 5))
        return send_sized(fd, "application/octet-stream", raw, raw_len);
    if (!strncmp(path, "/gzip/bomb", 10)) {
        body = upstream_body("/gzip/bomb", &n);
        char head[256];
        int hl = snprintf(head, sizeof(head),
                          "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                          "\r\nContent-Encoding: gzip\r\nContent-Length: "
                          "%zu\r\n\r\n",
                          n);
        rc = write_all(fd, head, (size_t)hl) || write_all(fd, body, n) ? -1 : 0;
        free(body);
        return rc;
    }
    if (!strncmp(path, "/gzip/", 6))
        return send_gzip(fd, path[6] == 'j');
    if (!strncmp(path, "/delay", 6)) { /* the /json reply after 500 ms */
        usleep(500000);
        body = upstream_body("/json", &n);
        rc = send_sized(fd, "application/json", body, n);
        free(body);
        return rc;
    }
    if (!strncmp(path, "/sse", 4) || !strncmp(path, "/reset", 6)) {
        bool reset = path[1] == 'r';
        if (write_all(fd, SSE_HEAD, sizeof(SSE_HEAD) - 1))
            return -1;
        for (int i = 0; SSE_EVENTS[i] && (!reset || i < 2); i++) {
            if (send_chunk(fd, SSE_EVENTS[i], strlen(SSE_EVENTS[i])))
                return -1;
            usleep(5000);
        }
        if (reset)
            return -1; /* close without the last chunk */
        return write_all(fd, "0\r\n\r\n", 5);
    }
    if (!strncmp(path, "/slow", 5)) {
        if (write_all(fd, SSE_HEAD, sizeof(SSE_HEAD) - 1))
            return -1;
        for (int i = 0; i < 500; i++) {
            if (send_chunk(fd, SSE_EVENTS[1], strlen(SSE_EVENTS[1]))) {
                atomic_fetch_add(&u->peer_gone, 1);
                return -1;
            }
            usleep(20000);
        }
        return write_all(fd, "0\r\n\r\n", 5);
    }
    if (!strncmp(path, "/quiet", 6)) { /* an event, 3.2 s of silence, one */
        if (write_all(fd, SSE_HEAD, sizeof(SSE_HEAD) - 1) ||
            send_chunk(fd, SSE_EVENTS[1], strlen(SSE_EVENTS[1])))
            return -1;
        for (int i = 0; i < 320 && !atomic_load(&u->stop); i++)
            usleep(10000);
        if (send_chunk(fd, SSE_EVENTS[1], strlen(SSE_EVENTS[1])))
            return -1;
        return write_all(fd, "0\r\n\r\n", 5);
    }
    static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0"
                             "\r\n\r\n";
    return write_all(fd, nf, sizeof(nf) - 1);
}

struct conn {
    struct upstream *u;
    int fd;
};

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct buf in = BUF_INIT;
    char tmp[65536];
    int drop_next = 0;
    for (;;) {
        char *end = in.len ? strstr(in.data, "\r\n\r\n") : NULL;
        if (end) {
            size_t head = (size_t)(end - in.data) + 4;
            const char *cl = strcasestr(in.data, "\r\nContent-Length:");
            size_t body = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
            if (in.len >= head + body) {
                char method[16] = "", path[256] = "";
                sscanf(in.data, "%15s %255s", method, path);
                if (drop_next) { /* closes as the next request arrives */
                    atomic_fetch_add(&c->u->dropped, 1);
                    break;
                }
                if (serve(c->u, c->fd, method, path, in.data, head + body,
                          &drop_next))
                    break;
                memmove(in.data, in.data + head + body, in.len - head - body);
                in.len -= head + body;
                in.data[in.len] = '\0';
                continue;
            }
        }
        ssize_t n = recv(c->fd, tmp, sizeof(tmp), 0);
        if (n <= 0)
            break;
        buf_add(&in, tmp, (size_t)n);
    }
    pthread_mutex_lock(&c->u->lock);
    for (int i = 0; i < 256; i++)
        if (c->u->conns[i] == c->fd)
            c->u->conns[i] = -1;
    pthread_mutex_unlock(&c->u->lock);
    close(c->fd);
    buf_release(&in);
    atomic_fetch_sub(&c->u->live, 1);
    free(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct upstream *u = arg;
    while (!atomic_load(&u->stop)) {
        struct pollfd p = {.fd = u->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(u->fd, NULL, NULL);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_mutex_lock(&u->lock);
        for (int i = 0; i < 256; i++)
            if (u->conns[i] < 0) {
                u->conns[i] = fd;
                break;
            }
        pthread_mutex_unlock(&u->lock);
        atomic_fetch_add(&u->live, 1);
        struct conn *c = xcalloc(1, sizeof(*c));
        c->u = u;
        c->fd = fd;
        pthread_t t;
        pthread_create(&t, NULL, conn_main, c);
        pthread_detach(t);
    }
    return NULL;
}

struct upstream *upstream_start(void)
{
    struct upstream *u = xcalloc(1, sizeof(*u));
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    int one = 1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pthread_mutex_init(&u->lock, NULL);
    for (int i = 0; i < 256; i++)
        u->conns[i] = -1;
    u->fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(u->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(u->fd, (struct sockaddr *)&a, sizeof(a)) || listen(u->fd, 128) ||
        getsockname(u->fd, (struct sockaddr *)&a, &al)) {
        close(u->fd);
        free(u);
        return NULL;
    }
    u->port = ntohs(a.sin_port);
    snprintf(u->url, sizeof(u->url), "http://127.0.0.1:%d", u->port);
    pthread_create(&u->thr, NULL, accept_main, u);
    return u;
}

int upstream_port(const struct upstream *u)
{
    return u->port;
}

const char *upstream_url(const struct upstream *u)
{
    return u->url;
}

int upstream_peer_gone(struct upstream *u)
{
    return atomic_load(&u->peer_gone);
}

int upstream_dropped(struct upstream *u)
{
    return atomic_load(&u->dropped);
}

int upstream_requests(struct upstream *u)
{
    return atomic_load(&u->requests);
}

char *upstream_last_request(struct upstream *u, size_t *len)
{
    pthread_mutex_lock(&u->lock);
    char *s = xmalloc(u->last.len + 1);
    memcpy(s, buf_str(&u->last), u->last.len + 1);
    *len = u->last.len;
    pthread_mutex_unlock(&u->lock);
    return s;
}

void upstream_stop(struct upstream *u)
{
    if (!u)
        return;
    atomic_store(&u->stop, 1);
    pthread_join(u->thr, NULL);
    close(u->fd);
    pthread_mutex_lock(&u->lock);
    for (int i = 0; i < 256; i++)
        if (u->conns[i] >= 0)
            shutdown(u->conns[i], SHUT_RDWR);
    pthread_mutex_unlock(&u->lock);
    for (int i = 0; i < 500 && atomic_load(&u->live) > 0; i++)
        usleep(10000);
    if (atomic_load(&u->live) > 0)
        return; /* a thread is stuck: leak rather than free under it */
    pthread_mutex_destroy(&u->lock);
    buf_release(&u->last);
    free(u);
}
