/*
 * upclient: HTTP/1.1 to one plain-http upstream on non-blocking sockets
 * (see upclient.h). A connection is idle (in the pool, watched for the
 * server closing it), or busy with one request: its head is written, then
 * the response is read as head (h1_parse_head), then body by its framing
 * (sized, chunked, until close, none). A connection goes back to the pool
 * only when the response was complete, both sides agreed on keep-alive and
 * nothing unread or unwritten is left on it.
 */
#include "record/upclient.h"

#include <errno.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"

#define CONNECT_TIMEOUT_S 10
#define MAX_IDLE 1024
/* free space a read asks for at least (4095: buffers of 4 KiB) */
#define READ_MIN 4095
#define READ_MAX 65536 /* ... and at most, when reads keep filling it */
#define BIG_BUF (256 * 1024)
/* ended requests kept for reuse, with their request buffer when it stays
 * under SPARE_MSG_MAX (upclient_send hands it back to the caller) */
#define SPARE_MAX 64
#define SPARE_MSG_MAX (16u << 10)
#define IN_FLIGHT_MSG_MAX (4u << 10)

enum phase { P_IDLE, P_HEAD, P_BODY };

struct upclient_conn {
    struct upclient *u;
    int fd;
    struct event rev, wev; /* readable (armed unless closing), writable */
    bool wev_on;
    struct buf in; /* unread response bytes: in.data[in_off .. in.len) */
    size_t in_off;
    struct upclient_conn *prev, *next; /* u->idle or u->busy */
    struct upclient_req *q;
    enum phase phase;
    bool connected, reused, keep;
    bool in_cb, dead; /* a callback runs; closed during it */
    enum h1_framing fr;
    uint64_t left;
    struct h1_chunked ch;
};

struct upclient_req {
    struct upclient *u;
    struct upclient_conn *c;
    struct buf msg; /* the request; kept for a retry until a response byte */
    size_t sent;    /* bytes of msg written on c */
    bool all_sent, head_req, retried, got_bytes;
    const struct upclient_cbs *cbs;
    void *ud;
    /* in u's deadline queue (timer_on), in the order sent */
    bool timer_on;
    struct upclient_req *tprev, *tnext;
    uint64_t deadline_us; /* monotonic */
    struct upclient_req *next_spare;
};

struct upclient {
    struct event_base *base;
    char *host;
    int port;
    long timeout_ms;
    struct sockaddr_storage addr;
    socklen_t addr_len; /* 0: not resolved */
    struct upclient_conn *idle, *busy;
    size_t nidle, nconn;
    struct upclient_req *spare; /* linked by next_spare */
    size_t nspare;
    /* Requests with a deadline, oldest first: all have the same timeout,
     * so the order sent is the order due, and one timer (armed for the
     * head's deadline, re-armed when it fires) serves them all; an ended
     * request only leaves the queue, no timer is touched per request. */
    struct upclient_req *tq_head, *tq_tail;
    struct event tq_timer;
    bool tq_armed;
    struct h1_head head; /* scratch for parsing, one response at a time */
};

static void conn_list_add(struct upclient_conn **head, struct upclient_conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void conn_list_del(struct upclient_conn **head, struct upclient_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg);
static void tq_del(struct upclient_req *q);

struct upclient *upclient_new(struct event_base *base, const char *host,
                              int port, long timeout_ms)
{
    struct upclient *u = xcalloc(1, sizeof(*u));
    u->base = base;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']')
        u->host = xstrndup(host + 1, hl - 2);
    else
        u->host = xstrdup(host);
    u->port = port;
    u->timeout_ms = timeout_ms;
    evtimer_assign(&u->tq_timer, base, on_deadline, u);
    return u;
}

size_t upclient_connections(const struct upclient *u)
{
    return u->nconn;
}

static void conn_free(struct upclient_conn *c)
{
    struct upclient *u = c->u;
    conn_list_del(c->phase == P_IDLE ? &u->idle : &u->busy, c);
    if (c->phase == P_IDLE)
        u->nidle--;
    u->nconn--;
    event_del(&c->rev);
    event_del(&c->wev);
    close(c->fd);
    buf_release(&c->in);
    free(c);
}

/* Closes c, now or, when one of its callbacks is running, once it
 * returns. */
static void conn_close(struct upclient_conn *c)
{
    if (c->in_cb) {
        c->dead = true;
        event_del(&c->rev);
        event_del(&c->wev);
        c->wev_on = false;
        return;
    }
    conn_free(c);
}

/* Done with q: kept for reuse (upclient_send) or freed. */
static void req_free(struct upclient_req *q)
{
    struct upclient *u = q->u;
    if (q->timer_on)
        tq_del(q);
    if (u->nspare >= SPARE_MAX) {
        buf_release(&q->msg);
        free(q);
        return;
    }
    if (q->msg.alloc > SPARE_MSG_MAX)
        buf_release(&q->msg);
    q->next_spare = u->spare;
    u->spare = q;
    u->nspare++;
}

/* Lets go of a request's bytes once they are no longer needed (sent, and
 * no retry possible): kept for reuse when small (IN_FLIGHT_MSG_MAX: a
 * thousand open streams then hold at most 4 MiB of them). */
static void drop_msg(struct upclient_req *q)
{
    if (q->msg.alloc > IN_FLIGHT_MSG_MAX)
        buf_release(&q->msg);
    else
        buf_reset(&q->msg);
}

static void start_on(struct upclient_req *q, struct upclient_conn *c);
static struct upclient_conn *conn_new(struct upclient *u, char *why, size_t wl);

/* ---- the deadline queue ---- */

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Arms the timer for the head's deadline, unless it is armed already
 * (then for an earlier or equal one) or nothing waits. */
static void tq_arm(struct upclient *u, uint64_t now)
{
    if (u->tq_armed || !u->tq_head)
        return;
    uint64_t d = u->tq_head->deadline_us, wait = d > now ? d - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000u),
                         (suseconds_t)(wait % 1000000u)};
    evtimer_add(&u->tq_timer, &tv);
    u->tq_armed = true;
}

static void tq_add(struct upclient *u, struct upclient_req *q)
{
    uint64_t now = now_us();
    q->deadline_us = now + (uint64_t)u->timeout_ms * 1000u;
    q->tnext = NULL;
    q->tprev = u->tq_tail;
    if (u->tq_tail)
        u->tq_tail->tnext = q;
    else
        u->tq_head = q;
    u->tq_tail = q;
    q->timer_on = true;
    tq_arm(u, now);
}

static void tq_del(struct upclient_req *q)
{
    struct upclient *u = q->u;
    if (q->tprev)
        q->tprev->tnext = q->tnext;
    else
        u->tq_head = q->tnext;
    if (q->tnext)
        q->tnext->tprev = q->tprev;
    else
        u->tq_tail = q->tprev;
    q->tprev = q->tnext = NULL;
    q->timer_on = false;
}

/* Ends q with err, detaching it from its connection first; the connection
 * goes back to the pool when it can carry another request. */
static void finish(struct upclient_req *q, int err, const char *why)
{
    struct upclient_conn *c = q->c;
    struct upclient *u = q->u;
    if (c) {
        c->q = NULL;
        q->c = NULL;
        bool clean = !err && c->keep && !c->dead && q->all_sent &&
                     c->in.len == c->in_off && u->nidle < MAX_IDLE;
        if (clean) {
            conn_list_del(&u->busy, c);
            c->phase = P_IDLE;
            c->reused = true;
            conn_list_add(&u->idle, c);
            u->nidle++;
            c->in.len = c->in_off = 0;
            if (c->in.alloc > BIG_BUF)
                buf_release(&c->in);
        } else {
            conn_close(c);
        }
    }
    const struct upclient_cbs *cbs = q->cbs;
    void *ud = q->ud;
    req_free(q);
    cbs->done(ud, err, why);
}

/* A failure on q's connection before anything of the response came: once,
 * on a reused connection, the request goes out again on a new one. */
static void fail(struct upclient_req *q, int err, const char *why)
{
    struct upclient_conn *c = q->c;
    char w[256];
    if (c && c->reused && !q->got_bytes && !q->retried && err != -ETIMEDOUT &&
        err != -EPROTO) {
        c->q = NULL;
        q->c = NULL;
        conn_close(c);
        q->retried = true;
        struct upclient_conn *n = conn_new(q->u, w, sizeof(w));
        if (n) {
            start_on(q, n);
            return;
        }
        why = w;
        err = -ECONNRESET;
    }
    finish(q, err, why);
}

/* Ends q: it did not complete within timeout_ms. */
static void time_out(struct upclient_req *q)
{
    char why[64];
    snprintf(why, sizeof(why), "no complete response within %ld ms",
             q->u->timeout_ms);
    finish(q, -ETIMEDOUT, why);
}

/* The deadline timer: every request due is timed out (each done
 * callback may send or end others: the head is read again each time),
 * then the timer waits for the next one due. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct upclient *u = arg;
    (void)fd;
    (void)what;
    u->tq_armed = false;
    uint64_t now = now_us();
    while (u->tq_head && u->tq_head->deadline_us <= now) {
        struct upclient_req *q = u->tq_head;
        tq_del(q);
        time_out(q);
    }
    tq_arm(u, now);
}

/* Calls a callback of q with c marked busy; false when q was cancelled or
 * c closed meanwhile (the caller must stop touching both). */
static bool after_cb(struct upclient_conn *c, struct upclient_req *q)
{
    c->in_cb = false;
    if (c->dead) {
        conn_free(c);
        return false;
    }
    return c->q == q;
}

static void deliver(struct upclient_conn *c, struct upclient_req *q,
                    const char *p, size_t n, bool *alive)
{
    c->in_cb = true;
    q->cbs->body(q->ud, p, n);
    *alive = after_cb(c, q);
}

/* Ends the reason, names and values of h with a NUL in place (the byte
 * after each is a colon, blank or line end of the head, which is
 * consumed once parsed). */
static void terminate_in_place(const struct h1_head *h)
{
    ((char *)h->reason)[h->reason_len] = '\0';
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct h1_header *f = &h->headers[i];
        ((char *)f->name)[f->name_len] = '\0';
        ((char *)f->value)[f->value_len] = '\0';
    }
}

/* Reads the response head; 1 when the body phase began, 0 for more input,
 * -1 when q is finished or gone. */
static int read_head(struct upclient_conn *c, struct upclient_req *q)
{
    struct upclient *u = c->u;
    for (;;) {
        size_t avail = c->in.len - c->in_off;
        if (!avail)
            return 0;
        char *p = c->in.data + c->in_off;
        int hl = h1_parse_head(p, avail, &u->head);
        if (hl == -2)
            return 0;
        if (hl < 0) {
            fail(q, -EPROTO, "malformed response head");
            return -1;
        }
        if (u->head.status == 101) {
            fail(q, -EPROTO, "protocol upgrade (101) is not supported");
            return -1;
        }
        if (u->head.status < 200) { /* 100 Continue, 103 Early Hints */
            c->in_off += (size_t)hl;
            continue;
        }
        uint64_t len;
        if (h1_framing(&u->head, q->head_req, &c->fr, &len)) {
            fail(q, -EPROTO, "invalid Content-Length in the response");
            return -1;
        }
        c->keep = h1_keep_alive(&u->head) && c->fr != H1_CLOSE;
        c->left = len;
        h1_chunked_init(&c->ch);
        terminate_in_place(&u->head);
        c->in_cb = true;
        q->cbs->head(q->ud, &u->head, c->fr, len);
        if (!after_cb(c, q))
            return -1;
        c->in_off += (size_t)hl;
        c->phase = P_BODY;
        return 1;
    }
}

/* Passes up to max readable bytes to the body callback in one piece;
 * returns how many went, or -1 when q or c went away meanwhile. */
static long pass_body(struct upclient_conn *c, struct upclient_req *q,
                      uint64_t max)
{
    size_t n = c->in.len - c->in_off;
    if (n > max)
        n = (size_t)max;
    if (!n)
        return 0;
    bool alive;
    deliver(c, q, c->in.data + c->in_off, n, &alive);
    if (!alive)
        return -1;
    c->in_off += n;
    return (long)n;
}

/* Chunked body: decodes what is readable; 1 when the body ended, 0 for
 * more input, -1 when q is finished or gone. */
static int read_chunked(struct upclient_conn *c, struct upclient_req *q)
{
    for (;;) {
        size_t avail = c->in.len - c->in_off;
        if (!avail)
            return 0;
        const char *p = c->in.data + c->in_off;
        size_t used, off, dl;
        int rc = h1_chunked_feed(&c->ch, p, avail, &used, &off, &dl);
        if (rc < 0) {
            fail(q, -EPROTO, "malformed chunked coding in the response");
            return -1;
        }
        if (rc == 1) {
            bool alive;
            deliver(c, q, p + off, dl, &alive);
            if (!alive)
                return -1;
        }
        c->in_off += used;
        if (rc == 2)
            return 1;
        if (rc == 0)
            return 0;
    }
}

/* What the buffer holds of q's response, by phase and framing. */
static void on_data(struct upclient_conn *c, struct upclient_req *q)
{
    if (!q->got_bytes) {
        q->got_bytes = true; /* no retry from here on */
        if (q->all_sent)
            drop_msg(q);
    }
    if (c->phase == P_HEAD && read_head(c, q) <= 0)
        return;
    switch (c->fr) {
    case H1_NONE:
        break;
    case H1_SIZED:
        if (c->left) {
            long n = pass_body(c, q, c->left);
            if (n < 0)
                return;
            c->left -= (uint64_t)n;
        }
        if (c->left)
            return;
        break;
    case H1_CHUNKED:
        if (read_chunked(c, q) <= 0)
            return;
        break;
    case H1_CLOSE:
        pass_body(c, q, UINT64_MAX);
        return; /* ends at EOF */
    }
    finish(q, 0, "complete");
}

/* The connection failed or closed (err: errno, 0 for EOF). */
static void on_gone(struct upclient_conn *c, struct upclient_req *q, int err)
{
    char why[200];
    if (!err && c->phase == P_BODY && c->fr == H1_CLOSE) {
        finish(q, 0, "complete");
        return;
    }
    if (err) {
        snprintf(why, sizeof(why), "%s %s:%d: %s",
                 c->connected ? "connection to" : "cannot connect to",
                 c->u->host, c->u->port, evutil_socket_error_to_string(err));
        fail(q, c->connected ? -ECONNRESET : -err, why);
        return;
    }
    snprintf(why, sizeof(why), "%s:%d closed the connection %s", c->u->host,
             c->u->port,
             c->phase == P_HEAD ? "before responding" : "mid-response");
    fail(q, -ECONNRESET, why);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct upclient_conn *c = arg;
    struct upclient_req *q = c->q;
    (void)what;
    if (!q) { /* nothing may arrive on an idle connection */
        conn_close(c);
        return;
    }
    if (c->in_off == c->in.len)
        c->in.len = c->in_off = 0;
    if (c->in.alloc < c->in.len + READ_MIN + 1) {
        if (c->in_off) {
            memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
            c->in.len -= c->in_off;
            c->in_off = 0;
        }
        if (c->in.alloc < c->in.len + READ_MIN + 1)
            buf_grow(&c->in, READ_MIN);
    }
    size_t space = c->in.alloc - c->in.len - 1;
    ssize_t n = read(fd, c->in.data + c->in.len, space);
    if (n > 0) {
        c->in.len += (size_t)n;
        if ((size_t)n == space && c->in.alloc < READ_MAX)
            buf_grow(&c->in, c->in.alloc); /* a large body: larger reads */
        on_data(c, q);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    on_gone(c, q, n < 0 ? errno : 0);
}

/* Writes what is left of q's request; 0, or an errno. */
static int write_req(struct upclient_conn *c, struct upclient_req *q)
{
    while (q->sent < q->msg.len) {
        ssize_t n = send(c->fd, q->msg.data + q->sent, q->msg.len - q->sent,
                         MSG_NOSIGNAL);
        if (n > 0) {
            q->sent += (size_t)n;
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
        return n < 0 ? errno : EPIPE;
    }
    if (c->wev_on) {
        event_del(&c->wev);
        c->wev_on = false;
    }
    q->all_sent = true;
    if (q->got_bytes)
        drop_msg(q);
    return 0;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct upclient_conn *c = arg;
    struct upclient_req *q = c->q;
    (void)fd;
    if (!q) {
        conn_close(c);
        return;
    }
    if (!c->connected) {
        char why[200];
        int err = 0;
        socklen_t el = sizeof(err);
        if (what & EV_TIMEOUT) {
            snprintf(why, sizeof(why), "cannot connect to %s:%d within %d s",
                     c->u->host, c->u->port, CONNECT_TIMEOUT_S);
            fail(q, -ETIMEDOUT, why);
            return;
        }
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
            err = errno;
        if (err) {
            on_gone(c, q, err);
            return;
        }
        c->connected = true;
        event_del(&c->wev); /* re-armed without the connect timeout */
        c->wev_on = false;
        event_add(&c->rev, NULL);
    }
    int err = write_req(c, q);
    if (err)
        on_gone(c, q, err);
}

static int resolve(struct upclient *u, char *why, size_t wl)
{
    struct addrinfo hints = {0}, *ai = NULL;
    char port[16];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%d", u->port);
    int rc = getaddrinfo(u->host, port, &hints, &ai);
    if (rc || !ai) {
        snprintf(why, wl, "cannot resolve '%s': %s", u->host,
                 rc ? gai_strerror(rc) : "no address");
        return -EHOSTUNREACH;
    }
    memcpy(&u->addr, ai->ai_addr, ai->ai_addrlen);
    u->addr_len = (socklen_t)ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static struct upclient_conn *conn_new(struct upclient *u, char *why, size_t wl)
{
    if (!u->addr_len && resolve(u, why, wl))
        return NULL;
    int fd = socket(u->addr.ss_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = fd < 0 ? errno : 0;
    if (!err) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&u->addr, u->addr_len) &&
            errno != EINPROGRESS)
            err = errno;
    }
    if (err) {
        snprintf(why, wl, "cannot connect to %s:%d: %s", u->host, u->port,
                 evutil_socket_error_to_string(err));
        u->addr_len = 0; /* resolve again next time */
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    struct upclient_conn *c = xcalloc(1, sizeof(*c));
    c->u = u;
    c->fd = fd;
    c->phase = P_HEAD;
    buf_init(&c->in, 0);
    event_assign(&c->rev, u->base, fd, EV_READ | EV_PERSIST, on_read, c);
    event_assign(&c->wev, u->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    /* connected when writable; reading starts then */
    struct timeval tv = {CONNECT_TIMEOUT_S, 0};
    event_add(&c->wev, &tv);
    c->wev_on = true;
    conn_list_add(&u->busy, c);
    u->nconn++;
    return c;
}

static void start_on(struct upclient_req *q, struct upclient_conn *c)
{
    q->c = c;
    q->sent = 0;
    q->all_sent = false;
    c->q = q;
    c->phase = P_HEAD;
    c->keep = false;
    if (!c->connected)
        return; /* on_write sends it once connected */
    /* A pooled connection takes the request at once, in one send; the
     * write event is armed only for what the socket does not take. A
     * failure is reported from the loop (the write event, which fails
     * again), never from inside upclient_send. */
    if (write_req(c, q))
        event_active(&c->wev, EV_WRITE, 1);
}

struct upclient_req *upclient_send(struct upclient *u, struct buf *msg,
                                   bool head_req,
                                   const struct upclient_cbs *cbs, void *ud,
                                   char *why, size_t wl)
{
    struct upclient_conn *c = u->idle;
    if (c) {
        conn_list_del(&u->idle, c);
        u->nidle--;
        conn_list_add(&u->busy, c);
    } else {
        c = conn_new(u, why, wl);
        if (!c) {
            buf_release(msg);
            return NULL;
        }
    }
    struct upclient_req *q = u->spare;
    struct buf back = BUF_INIT; /* for msg: a spare request's buffer */
    if (q) {
        u->spare = q->next_spare;
        u->nspare--;
        back = q->msg;
        buf_reset(&back);
        memset(q, 0, sizeof(*q));
    } else {
        q = xcalloc(1, sizeof(*q));
    }
    back.max = msg->max;
    q->u = u;
    q->msg = *msg;
    *msg = back;
    q->head_req = head_req;
    q->cbs = cbs;
    q->ud = ud;
    if (u->timeout_ms > 0)
        tq_add(u, q);
    start_on(q, c);
    return q;
}

void upclient_cancel(struct upclient_req *q)
{
    if (!q)
        return;
    struct upclient_conn *c = q->c;
    if (c) {
        c->q = NULL;
        conn_close(c);
    }
    req_free(q);
}

void upclient_free(struct upclient *u)
{
    if (!u)
        return;
    while (u->idle)
        conn_free(u->idle);
    while (u->busy) {
        struct upclient_conn *c = u->busy;
        if (c->q) {
            c->q->c = NULL;
            req_free(c->q);
        }
        conn_free(c);
    }
    event_del(&u->tq_timer);
    while (u->spare) {
        struct upclient_req *q = u->spare;
        u->spare = q->next_spare;
        buf_release(&q->msg);
        free(q);
    }
    free(u->host);
    free(u);
}
