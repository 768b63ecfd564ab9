/*
 * front: record's HTTP/1.1 server side (see front.h). A connection is a
 * socket with one persistent read event, a write event armed only while
 * the socket refuses output, an input buffer and an output buffer. It is
 * reading a request (head, then body), or busy (the request is with the
 * caller), or lingering (its last response written and the write side
 * shut, draining the client's leftovers until it closes, so that a close
 * never resets a response the client has not read yet). Heads that do not
 * arrive in time, idle keep-alive connections, clients that stop reading
 * and lingering ones are closed by a sweep (once a second, four times with
 * deadlines under 4 s): no timer is touched per read or write. The
 * listener is paused while accept(2) fails (descriptors exhausted) and
 * resumed when a connection closes or after RESUME_MS; it is also paused,
 * until a connection closes, while the client connections fill their share
 * of the descriptor limit (the rest is reserved for upstream sockets).
 */
#include "record/front.h"

#include <errno.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/xalloc.h"

/* free space a read asks for at least (4095: buffers of 4 KiB) */
#define READ_MIN 4095
/* buffered beyond the request being answered: more, and reading pauses */
#define BUSY_READ_MAX (H1_MAX_HEAD + 65536)
#define LINGER_MS 2000
#define RESUME_MS 100        /* accept is retried this often while it fails */
#define BIG_BUF (256 * 1024) /* an emptied buffer this large is freed */

enum out_mode { OUT_NONE, OUT_RAW, OUT_CHUNKED };

struct front_conn {
    struct front *f;
    struct front_conn *prev, *next;   /* f->conns */
    struct front_conn *dprev, *dnext; /* f->dirty */
    bool dirty;
    int fd;
    struct event rev, wev;
    bool rev_on, wev_on;
    struct buf in; /* unconsumed input: in.data[in_off .. in.len) */
    size_t in_off;
    struct buf out; /* unwritten output: out.data[out_off .. out.len) */
    size_t out_off;
    int64_t last;  /* ms: last progress, for the sweep */
    int64_t since; /* ms: start of the wait for a head (or, kept, for the
                      next request of a keep-alive connection) */
    bool kept;     /* waiting idle for the next request */
    bool over;     /* answered 503 beyond max_conns; not counted */
    /* the request being read (positions relative to in_off) */
    bool head_seen, continued;
    size_t head_len;
    enum h1_framing fr;
    uint64_t clen;
    struct h1_chunked ch;
    size_t raw_used; /* chunked bytes after the head already decoded */
    struct buf body; /* the decoded chunked body */
    /* the request being answered */
    bool busy, keep, head_req, close_after, linger, dead;
    /* the client shut its side (or closed): what it sent before is still
     * answered; reading stops, a failed write says whether it is gone */
    bool rd_eof;
    int minor;
    enum out_mode mode;
    void *cud;
};

struct front {
    struct event_base *base;
    struct evconnlistener *lis;
    int port;
    struct front_cbs cbs;
    void *ud;
    size_t max_body;
    int64_t header_ms, idle_ms, stall_ms;
    size_t max_conns;
    size_t max_clients; /* client connections, refused ones included */
    struct front_conn *conns, *dirty;
    size_t nconns;  /* open, the refused ones included */
    size_t nserved; /* open and counted against max_conns */
    struct event *flush_ev, *sweep_ev;
    /* accept(2) failing: the listener is paused */
    bool paused;
    struct event *resume_ev;
    uint64_t accept_fails; /* since the last log line */
    int64_t logged_ms;     /* when that line was written */
    struct h1_req req;     /* scratch: one request head parsed at a time */
};

static int64_t now_ms(const struct front *f)
{
    struct timeval tv;
    event_base_gettimeofday_cached(f->base, &tv);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static void resume_accepting(struct front *f);

/* ---- connection lifecycle ---- */

static void undirty(struct front_conn *c)
{
    if (!c->dirty)
        return;
    if (c->dprev)
        c->dprev->dnext = c->dnext;
    else
        c->f->dirty = c->dnext;
    if (c->dnext)
        c->dnext->dprev = c->dprev;
    c->dprev = c->dnext = NULL;
    c->dirty = false;
}

static void mark_dirty(struct front_conn *c)
{
    struct front *f = c->f;
    if (c->dirty)
        return;
    c->dirty = true;
    c->dprev = NULL;
    c->dnext = f->dirty;
    if (f->dirty)
        f->dirty->dprev = c;
    f->dirty = c;
    event_active(f->flush_ev, EV_TIMEOUT, 0);
}

static void conn_free(struct front_conn *c)
{
    struct front *f = c->f;
    undirty(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->nconns--;
    if (!c->over)
        f->nserved--;
    event_del(&c->rev);
    event_del(&c->wev);
    close(c->fd);
    buf_release(&c->in);
    buf_release(&c->out);
    buf_release(&c->body);
    free(c);
    if (f->paused) /* a descriptor came free */
        resume_accepting(f);
}

/* Ends c from one of front's own callbacks: the caller hears of a request
 * it still holds, then c is freed. */
static void conn_fail(struct front_conn *c)
{
    struct front *f = c->f;
    if (c->busy && f->cbs.gone) {
        void *cud = c->cud;
        c->busy = false;
        f->cbs.gone(f->ud, c, cud);
    }
    conn_free(c);
}

/* Runs c's read callback from the loop soon (no read: EV_TIMEOUT), for
 * work that must not happen inside a caller's front_* call. */
static void defer(struct front_conn *c)
{
    event_active(&c->rev, EV_TIMEOUT, 1);
}

static void read_on(struct front_conn *c)
{
    if (!c->rev_on) {
        event_add(&c->rev, NULL);
        c->rev_on = true;
    }
}

/* The response written, the write side is shut; the client's leftovers
 * are read and dropped until it closes (or LINGER_S pass). */
static void start_linger(struct front_conn *c)
{
    shutdown(c->fd, SHUT_WR);
    c->linger = true;
    c->last = now_ms(c->f);
    read_on(c);
}

/* Writes what c's output holds; 0, or -1 when the socket failed. */
static int flush(struct front_conn *c)
{
    undirty(c);
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off,
                         c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->last = now_ms(c->f);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->wev_on) {
                event_add(&c->wev, NULL);
                c->wev_on = true;
            }
            return 0;
        }
        return -1;
    }
    c->out_off = 0;
    if (c->out.alloc > BIG_BUF)
        buf_release(&c->out);
    else
        buf_reset(&c->out);
    if (c->wev_on) {
        event_del(&c->wev);
        c->wev_on = false;
    }
    if (c->close_after && !c->linger)
        start_linger(c);
    return 0;
}

/* ---- responses ---- */

static const char *reason_of(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 417:
        return "Expectation Failed";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "";
    }
}

static void add_status(struct front_conn *c, int status, const char *reason,
                       size_t rl)
{
    char line[16] = "HTTP/1.1 000 ";
    line[7] = c->minor ? '1' : '0';
    line[9] = (char)('0' + status / 100 % 10);
    line[10] = (char)('0' + status / 10 % 10);
    line[11] = (char)('0' + status % 10);
    if (!reason) {
        reason = reason_of(status);
        rl = strlen(reason);
    }
    struct buf *o = &c->out;
    buf_grow(o, 13 + rl + 2);
    memcpy(o->data + o->len, line, 13);
    memcpy(o->data + o->len + 13, reason, rl);
    memcpy(o->data + o->len + 13 + rl, "\r\n", 3); /* with the NUL */
    o->len += 13 + rl + 2;
}

static void add_decimal(struct buf *b, uint64_t v)
{
    char digits[24], *d = digits + sizeof(digits);
    do
        *--d = (char)('0' + v % 10);
    while (v /= 10);
    buf_add(b, d, (size_t)(digits + sizeof(digits) - d));
}

/* The Connection field this response needs, and the blank line. */
static void end_head(struct front_conn *c)
{
    static const char close_[] = "Connection: close\r\n\r\n",
                      keep[] = "Connection: keep-alive\r\n\r\n";
    if (!c->keep)
        buf_add(&c->out, close_, sizeof(close_) - 1);
    else if (!c->minor)
        buf_add(&c->out, keep, sizeof(keep) - 1);
    else
        buf_add(&c->out, "\r\n", 2);
}

/* front_start without the flush at the end of the loop pass. */
static void start_head(struct front_conn *c, int status, const char *reason,
                       size_t reason_len, const char *hdrs, size_t hl,
                       int64_t length, bool no_body)
{
    add_status(c, status, reason, reason_len);
    buf_add(&c->out, hdrs, hl);
    if (no_body) {
        c->mode = OUT_NONE;
    } else if (length >= 0) {
        c->mode = OUT_RAW;
    } else if (c->minor) {
        buf_adds(&c->out, "Transfer-Encoding: chunked\r\n");
        c->mode = OUT_CHUNKED;
    } else { /* HTTP/1.0: the close ends the body */
        c->mode = OUT_RAW;
        c->keep = false;
    }
    end_head(c);
}

void front_start(struct front_conn *c, int status, const char *reason,
                 size_t reason_len, const char *hdrs, size_t hl, int64_t length,
                 bool no_body)
{
    start_head(c, status, reason, reason_len, hdrs, hl, length, no_body);
    mark_dirty(c);
}

/* One chunk (RFC 9112 section 7.1): size line, data, CRLF, in one copy. */
static void add_chunk(struct buf *out, const char *p, size_t n)
{
    char head[20];
    /* the size in hex without leading zeros: as many digits as n has
     * nibbles up to its highest set bit, one for 0 */
    uint64_t v = n;
    size_t digits = v ? (size_t)(67 - __builtin_clzll(v)) / 4 : 1;
    for (size_t k = digits; k-- > 0; v >>= 4)
        head[k] = "0123456789abcdef"[v & 0xf];
    size_t hl = digits;
    head[hl++] = '\r';
    head[hl++] = '\n';
    if (out->alloc - out->len <= hl + n + 2) /* no room: a call */
        buf_grow(out, hl + n + 2);
    char *w = out->data + out->len;
    memcpy(w, head, hl);
    memcpy(w + hl, p, n);
    memcpy(w + hl + n, "\r\n", 2);
    out->len += hl + n + 2;
    out->data[out->len] = '\0';
}

/* Body bytes, framed, into the output (not yet written). */
static void add_body(struct front_conn *c, const char *p, size_t n)
{
    if (c->mode == OUT_CHUNKED)
        add_chunk(&c->out, p, n);
    else
        buf_add(&c->out, p, n);
}

void front_body(struct front_conn *c, const char *p, size_t n)
{
    if (!n || c->mode == OUT_NONE)
        return;
    add_body(c, p, n);
    mark_dirty(c);
}

/* The response is over: write it now; what follows (a failure, the next
 * pipelined request) runs from the loop, not inside the caller's call. */
static void response_done(struct front_conn *c)
{
    c->busy = false;
    c->cud = NULL;
    /* after a half-close, the close follows the last request it sent */
    if (!c->keep || (c->rd_eof && c->in.len == c->in_off))
        c->close_after = true;
    if (flush(c)) {
        c->dead = true;
        defer(c);
        return;
    }
    if (!c->rd_eof)
        read_on(c);
    if (c->in.len == c->in_off && c->in.alloc > BIG_BUF) {
        buf_release(&c->in); /* after a large upload */
        c->in_off = 0;
    }
    /* the next head's deadline runs from now when it has begun (a
     * pipelined request), else the keep-alive wait does */
    c->since = now_ms(c->f);
    c->kept = c->in.len == c->in_off;
    if (!c->close_after && c->in.len > c->in_off)
        defer(c);
}

void front_end(struct front_conn *c)
{
    if (c->mode == OUT_CHUNKED)
        buf_add(&c->out, "0\r\n\r\n", 5);
    response_done(c);
}

void front_whole(struct front_conn *c, int status, const char *reason,
                 size_t reason_len, const char *hdrs, size_t hl, int64_t length,
                 bool no_body, const char *body, size_t n)
{
    start_head(c, status, reason, reason_len, hdrs, hl, length, no_body);
    if (n && c->mode != OUT_NONE)
        add_body(c, body, n);
    front_end(c);
}

void front_abort(struct front_conn *c)
{
    c->keep = false;
    response_done(c);
}

static void simple_response(struct front_conn *c, int status, const char *json,
                            size_t len)
{
    add_status(c, status, NULL, 0);
    buf_adds(&c->out, "Content-Type: application/json\r\nContent-Length: ");
    add_decimal(&c->out, len);
    buf_add(&c->out, "\r\n", 2);
    end_head(c);
    if (!c->head_req)
        buf_add(&c->out, json, len);
    c->mode = OUT_NONE;
}

void front_json(struct front_conn *c, int status, const char *json, size_t len)
{
    simple_response(c, status, json, len);
    response_done(c);
}

/* A request front answers itself, with the connection closed after it
 * (what follows on the connection cannot be trusted to be a request). */
static void refuse(struct front_conn *c, int status, const char *type,
                   const char *msg)
{
    char json[600];
    int n = snprintf(json, sizeof(json),
                     "{\"error\":{\"message\":\"fidelity record: %s\","
                     "\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
                     msg, type, type);
    if (n < 0 || (size_t)n >= sizeof(json))
        n = 0;
    c->keep = false;
    c->busy = false;
    c->head_seen = false;
    /* the request's own version may be what is wrong; a HEAD before it
     * does not make this answer body-less */
    c->minor = 1;
    c->head_req = false;
    c->in_off = c->in.len; /* nothing more is parsed */
    simple_response(c, status, json, (size_t)n);
    c->close_after = true;
    if (flush(c))
        c->dead = true;
}

/* ---- an HTTP/2 client ---- */

/* The client connection preface of HTTP/2 with prior knowledge (RFC 9113
 * 3.4): a request line no HTTP/1.1 server accepts, chosen so for this */
static const char H2_PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H2_PREFACE_LEN (sizeof(H2_PREFACE) - 1)

/* Appends an HTTP/2 frame header (RFC 9113 4.1) on stream 0 */
static void h2_frame(struct buf *b, size_t len, unsigned char type)
{
    unsigned char h[9] = {(unsigned char)(len >> 16),
                          (unsigned char)(len >> 8),
                          (unsigned char)len,
                          type,
                          0,
                          0,
                          0,
                          0,
                          0};
    buf_add(b, h, sizeof(h));
}

/* Answers an HTTP/2 client in its own protocol rather than with an
 * HTTP/1.1 400 it cannot read ("empty reply from server"): an empty
 * SETTINGS frame (the server preface, RFC 9113 3.4) and a GOAWAY (6.8)
 * with last stream 0, error HTTP_1_1_REQUIRED (7: 0xd) and a message as
 * debug data; then the connection is closed. */
static void refuse_h2(struct front_conn *c)
{
    static const char why[] =
        "fidelity record speaks HTTP/1.1 to clients: send requests "
        "without HTTP/2 prior knowledge";
    static const unsigned char last_and_code[8] = {0, 0, 0, 0, 0, 0, 0, 0xd};
    c->keep = false;
    c->busy = false;
    c->in_off = c->in.len; /* nothing more is parsed */
    h2_frame(&c->out, 0, 0x4);
    h2_frame(&c->out, sizeof(last_and_code) + sizeof(why) - 1, 0x7);
    buf_add(&c->out, last_and_code, sizeof(last_and_code));
    buf_add(&c->out, why, sizeof(why) - 1);
    c->mode = OUT_NONE;
    c->close_after = true;
    if (flush(c))
        c->dead = true;
}

/* 1: p starts with the HTTP/2 preface; -2: with a part of it, so far; 0:
 * not */
static int h2_preface(const char *p, size_t n)
{
    size_t k = n < H2_PREFACE_LEN ? n : H2_PREFACE_LEN;
    if (memcmp(p, H2_PREFACE, k))
        return 0;
    return k == H2_PREFACE_LEN ? 1 : -2;
}

/* ---- requests ---- */

static void terminate_in_place(const struct h1_req *q)
{
    ((char *)q->method)[q->method_len] = '\0';
    ((char *)q->target)[q->target_len] = '\0';
    for (size_t i = 0; i < q->nheaders; i++) {
        const struct h1_header *h = &q->headers[i];
        ((char *)h->name)[h->name_len] = '\0';
        ((char *)h->value)[h->value_len] = '\0';
    }
}

static bool method_is(const struct h1_req *q, const char *m)
{
    size_t n = strlen(m);
    return q->method_len == n && !memcmp(q->method, m, n);
}

/* Checks a new request head; false when it was refused. */
static bool accept_head(struct front_conn *c, const struct h1_req *q)
{
    struct front *f = c->f;
    char msg[300];
    if (method_is(q, "CONNECT")) {
        refuse(c, 405, "method_not_allowed",
               "CONNECT is not proxied; send requests to record directly");
        return false;
    }
    if (h1_req_host_ok(q)) {
        refuse(c, 400, "bad_request",
               "an HTTP/1.1 request must have exactly one Host header field "
               "(and an HTTP/1.0 one at most one)");
        return false;
    }
    if (h1_req_framing(q, &c->fr, &c->clen)) {
        refuse(c, 400, "bad_request",
               "the request's Content-Length or Transfer-Encoding is invalid "
               "(malformed, differing values, or both fields at once)");
        return false;
    }
    if (c->fr == H1_SIZED && c->clen > f->max_body) {
        snprintf(msg, sizeof(msg),
                 "the request body is larger than --max-body (%zu bytes); "
                 "nothing was forwarded. Start record with a larger "
                 "--max-body to let it through",
                 f->max_body);
        refuse(c, 413, "request_too_large", msg);
        return false;
    }
    for (size_t i = 0; i < q->nheaders; i++) {
        const struct h1_header *h = &q->headers[i];
        if (!h1_name_is(h, "expect"))
            continue;
        if (h->value_len != 12 || strncasecmp(h->value, "100-continue", 12)) {
            refuse(c, 417, "expectation_failed",
                   "the only Expect value understood is 100-continue");
            return false;
        }
        c->continued = q->minor == 0; /* 1.0 clients get no 100 */
        return true;
    }
    c->continued = true; /* nothing to answer */
    return true;
}

/* The body's bytes so far, when chunked: decoded into c->body, the raw
 * bytes dropped. 1 when the body is complete, 0 for more, -1 refused. */
static int read_chunked(struct front_conn *c)
{
    char *raw = c->in.data + c->in_off + c->head_len;
    size_t avail = c->in.len - c->in_off - c->head_len;
    int rc = 0;
    while (c->raw_used < avail) {
        size_t used, off, dl;
        rc = h1_chunked_feed(&c->ch, raw + c->raw_used, avail - c->raw_used,
                             &used, &off, &dl);
        if (rc < 0) {
            refuse(c, 400, "bad_request",
                   "the request's chunked body is malformed");
            return -1;
        }
        if (rc == 1 && c->body.len + dl > c->f->max_body) {
            char msg[300];
            snprintf(msg, sizeof(msg),
                     "the request body is larger than --max-body (%zu "
                     "bytes); nothing was forwarded. Start record with a "
                     "larger --max-body to let it through",
                     c->f->max_body);
            refuse(c, 413, "request_too_large", msg);
            return -1;
        }
        if (rc == 1)
            buf_add(&c->body, raw + c->raw_used + off, dl);
        c->raw_used += used;
        if (rc == 2)
            return 1;
        if (rc == 0)
            break;
    }
    /* the decoded bytes are kept; the raw ones need not be */
    memmove(raw, raw + c->raw_used, avail - c->raw_used);
    c->in.len -= c->raw_used;
    c->raw_used = 0;
    return 0;
}

/* Parses c's next request when it is all there and hands it over. */
static void process(struct front_conn *c)
{
    struct front *f = c->f;
    struct h1_req *q = &f->req;
    while (!c->busy && !c->linger && !c->dead) {
        char *p = c->in.data + c->in_off;
        size_t avail = c->in.len - c->in_off;
        if (!avail)
            return;
        if (!c->head_seen && p[0] == 'P') {
            int h2 = h2_preface(p, avail);
            if (h2 == -2)
                return;
            if (h2 == 1) {
                refuse_h2(c);
                return;
            }
        }
        int hl = h1_parse_request(p, avail, q);
        if (hl == -2)
            return;
        if (hl == -1) {
            refuse(c, 400, "bad_request",
                   "malformed request: the request line must be 'METHOD "
                   "/path HTTP/1.1' and each header 'Name: value'");
            return;
        }
        if (hl == -3) {
            refuse(c, 431, "request_header_too_large",
                   "the request head is longer than 64 KiB or has more than "
                   "100 header fields");
            return;
        }
        if (!c->head_seen) {
            if (!accept_head(c, q))
                return;
            c->head_seen = true;
            c->head_len = (size_t)hl;
            c->raw_used = 0;
            h1_chunked_init(&c->ch);
            buf_reset(&c->body);
        }
        const char *body = NULL;
        size_t blen = 0, used = c->head_len;
        int done = 1;
        if (c->fr == H1_SIZED) {
            done = avail - c->head_len >= c->clen;
            if (!done)
                buf_grow(&c->in, c->head_len + (size_t)c->clen - avail);
            body = p + c->head_len;
            blen = (size_t)c->clen;
            used += blen;
        } else if (c->fr == H1_CHUNKED) {
            done = read_chunked(c);
            if (done < 0)
                return;
            body = c->body.data;
            blen = c->body.len;
            used += c->raw_used;
        }
        if (!done) {
            if (!c->continued) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                c->continued = true;
                buf_add(&c->out, cont, sizeof(cont) - 1);
                if (flush(c))
                    c->dead = true;
            }
            return;
        }
        terminate_in_place(q);
        c->head_seen = false;
        c->busy = true;
        c->keep = h1_req_keep_alive(q);
        c->minor = q->minor;
        c->head_req = method_is(q, "HEAD");
        c->close_after = false;
        c->mode = OUT_NONE;
        c->cud = NULL;
        c->in_off += used;
        struct front_req r = {.h = q, .body = body, .body_len = blen};
        f->cbs.request(f->ud, c, &r);
    }
}

/* Reads what the socket has; false when c is to be closed (c->dead). */
static bool read_in(struct front_conn *c)
{
    if (c->linger) {
        char tmp[4096];
        ssize_t n = read(c->fd, tmp, sizeof(tmp));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            c->dead = true;
        return !c->dead;
    }
    if (c->in_off == c->in.len) {
        c->in_off = 0;
        c->in.len = 0;
    }
    if (c->in.alloc < c->in.len + READ_MIN + 1) {
        if (c->in_off) { /* what was consumed makes room */
            memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
            c->in.len -= c->in_off;
            c->in_off = 0;
        }
        if (c->in.alloc < c->in.len + READ_MIN + 1)
            buf_grow(&c->in, READ_MIN);
    }
    ssize_t n =
        read(c->fd, c->in.data + c->in.len, c->in.alloc - c->in.len - 1);
    if (n > 0) {
        c->in.len += (size_t)n;
        c->in.data[c->in.len] = '\0';
        c->last = now_ms(c->f);
        if (c->kept) { /* a new request begins: its head's deadline */
            c->kept = false;
            c->since = c->last;
        }
        if (c->busy && c->in.len - c->in_off > BUSY_READ_MAX) {
            event_del(&c->rev); /* enough waits; read on after the reply */
            c->rev_on = false;
        }
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return true;
    if (n == 0) {
        /* the client shut its side (shutdown(SHUT_WR), or a close: the
         * same FIN). Its complete requests are answered; reading stops
         * (the end of file would be read again and again) */
        c->rd_eof = true;
        event_del(&c->rev);
        c->rev_on = false;
        return true;
    }
    c->dead = true; /* the client failed */
    return false;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct front_conn *c = arg;
    (void)fd;
    if (!c->dead && (what & EV_READ))
        read_in(c);
    if (!c->dead && !c->busy && !c->linger)
        process(c);
    /* half-closed with nothing (more) to answer: an unfinished request
     * can never be completed */
    if (!c->dead && c->rd_eof && !c->busy && !c->linger && !c->close_after)
        c->dead = true;
    if (c->dead)
        conn_fail(c);
    else if (!c->busy && c->in.alloc > BIG_BUF && c->in.len == c->in_off)
        buf_release(&c->in);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct front_conn *c = arg;
    (void)fd;
    (void)what;
    if (flush(c))
        conn_fail(c);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct front *f = arg;
    (void)fd;
    (void)what;
    while (f->dirty) {
        struct front_conn *c = f->dirty;
        if (flush(c))
            conn_fail(c);
    }
}

/* A request that did not arrive in time: 408 when it had begun, a quiet
 * close when nothing came (nginx does the same for client_header_timeout). */
static void request_late(struct front_conn *c)
{
    if (c->head_seen || c->in.len > c->in_off) {
        refuse(c, 408, "request_timeout",
               "the request did not arrive within --header-timeout");
        if (!c->dead)
            return;
    }
    conn_fail(c);
}

/* What the sweep does with c: nothing, or close it. */
static void sweep_one(struct front *f, struct front_conn *c, int64_t now)
{
    if (c->linger) {
        if (now - c->last >= LINGER_MS)
            conn_free(c);
    } else if (c->out_off < c->out.len) {
        /* a client not reading what it was sent */
        if (now - c->last >= f->stall_ms)
            conn_fail(c);
    } else if (c->busy) {
        /* the response is the caller's: however quiet, never cut here */
    } else if (c->kept) {
        if (now - c->since >= f->idle_ms)
            conn_fail(c);
    } else if (c->head_seen ? now - c->last >= f->header_ms
                            : now - c->since >= f->header_ms) {
        /* the head by its deadline; the body without a pause as long */
        request_late(c);
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct front *f = arg;
    int64_t now = now_ms(f);
    (void)fd;
    (void)what;
    for (struct front_conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        sweep_one(f, c, now);
    }
}

/* The client connections' share of the descriptor limit reached: logged
 * at most once a second. */
static void log_reserve(struct front *f)
{
    int64_t now = now_ms(f);
    if (now - f->logged_ms < 1000 || !f->cbs.log)
        return;
    char msg[300];
    snprintf(msg, sizeof(msg),
             "%zu client connections are open, the most the descriptor limit "
             "allows with one descriptor kept for each one's upstream socket; "
             "accepting paused until one closes",
             f->nconns);
    f->cbs.log(f->ud, msg);
    f->logged_ms = now;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd,
                      struct sockaddr *sa, int sl, void *arg)
{
    struct front *f = arg;
    struct front_conn *c = xcalloc(1, sizeof(*c));
    (void)l;
    (void)sa;
    (void)sl;
    c->f = f;
    c->fd = fd;
    buf_init(&c->in, 0);
    buf_init(&c->out, 0);
    buf_init(&c->body, 0);
    c->last = c->since = now_ms(f);
    event_assign(&c->rev, f->base, fd, EV_READ | EV_PERSIST, on_read, c);
    event_assign(&c->wev, f->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    read_on(c);
    c->next = f->conns;
    if (f->conns)
        f->conns->prev = c;
    f->conns = c;
    f->nconns++;
    if (f->nconns >= f->max_clients) {
        /* the descriptors left are the upstream side's: the next clients
         * wait in the kernel's queue until a connection closes */
        evconnlistener_disable(f->lis);
        f->paused = true;
        log_reserve(f);
    }
    if (f->nserved < f->max_conns) {
        f->nserved++;
        return;
    }
    /* one too many: answered at once, its request read and dropped */
    char msg[200];
    snprintf(msg, sizeof(msg),
             "%zu connections are open, the most --max-conns allows; retry "
             "shortly",
             f->max_conns);
    c->over = true;
    refuse(c, 503, "too_many_connections", msg);
    if (c->dead)
        conn_free(c);
}

/* ---- accepting while descriptors run out ---- */

static void resume_accepting(struct front *f)
{
    evtimer_del(f->resume_ev);
    if (f->nconns >= f->max_clients)
        return; /* still paused: the reserve is reached */
    f->paused = false;
    if (f->lis)
        evconnlistener_enable(f->lis);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    resume_accepting(arg);
}

/* accept(2) failed (libevent has dealt with EAGAIN and ECONNABORTED):
 * mostly EMFILE or ENFILE, descriptors exhausted. The pending connection
 * stays in the kernel's queue, so retrying at once would fail at once,
 * forever; the listener pauses until a connection closes or RESUME_MS
 * pass, and the failures are counted into one log line a second. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct front *f = arg;
    int err = EVUTIL_SOCKET_ERROR();
    int64_t now = now_ms(f);
    struct timeval tv = {0, RESUME_MS * 1000};
    evconnlistener_disable(l);
    f->paused = true;
    evtimer_add(f->resume_ev, &tv);
    f->accept_fails++;
    if (now - f->logged_ms < 1000 || !f->cbs.log)
        return;
    char msg[300];
    snprintf(msg, sizeof(msg),
             "cannot accept connections: %s (%zu open); accepting paused, "
             "retried every %d ms and when a connection closes (%llu failed "
             "accepts since the last such message)",
             strerror(err), f->nconns, RESUME_MS,
             (unsigned long long)f->accept_fails);
    f->cbs.log(f->ud, msg);
    f->logged_ms = now;
    f->accept_fails = 0;
}

/* ---- the listener ---- */

static int listen_on(struct front *f, const char *host, int port,
                     struct diag *d)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char ps[16];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc || !ai)
        return diag_set(d, EADDRNOTAVAIL, "cannot listen on %s:%d: %s", host,
                        port, rc ? gai_strerror(rc) : "no address");
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, err = 0;
    if (fd < 0)
        err = errno;
    if (!err) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        /* accepted sockets inherit TCP_NODELAY on Linux: small SSE events
         * and the held end of a body must not wait for delayed ACKs */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1024))
            err = errno;
    }
    freeaddrinfo(ai);
    if (err) {
        if (fd >= 0)
            close(fd);
        return diag_set(d, err, "cannot listen on %s:%d: %s", host, port,
                        strerror(err));
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    f->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    f->lis =
        evconnlistener_new(f->base, on_accept, f, LEV_OPT_CLOSE_ON_FREE, 0, fd);
    if (!f->lis) {
        close(fd);
        return diag_set(d, ENOMEM, "cannot listen on %s:%d", host, port);
    }
    evconnlistener_set_error_cb(f->lis, on_accept_error);
    return 0;
}

int front_new(struct event_base *base, const struct front_opts *o,
              const struct front_cbs *cbs, void *ud, struct front **out,
              struct diag *d)
{
    struct front *f = xcalloc(1, sizeof(*f));
    *out = NULL;
    f->base = base;
    f->cbs = *cbs;
    f->ud = ud;
    f->max_body = o->max_body;
    f->header_ms = o->header_ms > 0 ? o->header_ms : 30000;
    f->idle_ms = o->idle_ms > 0 ? o->idle_ms : 75000;
    f->stall_ms = (o->stall_s > 0 ? o->stall_s : 600) * (int64_t)1000;
    f->max_conns = o->max_conns ? o->max_conns : front_default_max_conns();
    f->max_clients = front_max_clients(f->max_conns);
    f->logged_ms = INT64_MIN / 2;
    int rc = listen_on(f, o->host, o->port, d);
    if (rc) {
        free(f);
        return rc;
    }
    f->flush_ev = event_new(base, -1, 0, on_flush, f);
    f->sweep_ev = event_new(base, -1, EV_PERSIST, on_sweep, f);
    f->resume_ev = evtimer_new(base, on_resume, f);
    /* a deadline is kept to within a quarter of itself, at worst 1 s */
    int64_t shortest = f->header_ms < f->idle_ms ? f->header_ms : f->idle_ms;
    long tick_ms = shortest < 4000 ? 250 : 1000;
    struct timeval tv = {tick_ms / 1000, tick_ms % 1000 * 1000};
    event_add(f->sweep_ev, &tv);
    *out = f;
    return 0;
}

int front_port(const struct front *f)
{
    return f->port;
}

size_t front_connections(const struct front *f)
{
    return f->nconns;
}

void front_stop_accepting(struct front *f)
{
    if (f->lis) {
        evconnlistener_free(f->lis);
        f->lis = NULL;
    }
    f->paused = false;
    evtimer_del(f->resume_ev);
}

size_t front_default_max_conns(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (1u << 20))
        return (size_t)1 << 19;
    size_t n = rl.rlim_cur > 64 ? (size_t)(rl.rlim_cur - 64) / 2 : 0;
    return n < 16 ? 16 : n;
}

size_t front_max_clients(size_t max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > (1u << 20))
        return SIZE_MAX;
    size_t budget = rl.rlim_cur > 64 ? (size_t)rl.rlim_cur - 64 : 0;
    size_t half = budget / 2 < 16 ? 16 : budget / 2;
    size_t up = max_conns < half ? max_conns : half; /* the reserve */
    return budget > 2 * up ? budget - up : up;
}

void front_free(struct front *f)
{
    if (!f)
        return;
    front_stop_accepting(f);
    while (f->conns)
        conn_free(f->conns);
    event_free(f->flush_ev);
    event_free(f->sweep_ev);
    event_free(f->resume_ev);
    free(f);
}

void front_set_ud(struct front_conn *c, void *cud)
{
    c->cud = cud;
}

bool front_is_head(const struct front_conn *c)
{
    return c->head_req;
}
