/*
 * upclient: HTTP/1.1 to one plain-http upstream on libevent bufferevents
 * (see upclient.h). A connection is idle (in the pool, watched for the
 * server closing it), or busy with one request: its head is written, then
 * the response is read as head (h1_parse_head), then body by its framing
 * (sized, chunked, until close, none). A connection goes back to the pool
 * only when the response was complete, both sides agreed on keep-alive and
 * nothing unread or unwritten is left on it.
 */
#include "record/upclient.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/xalloc.h"

#define CONNECT_TIMEOUT_S 10
#define MAX_IDLE 1024

enum phase { P_IDLE, P_HEAD, P_BODY };

struct upc_conn {
    struct upc *u;
    struct bufferevent *bev;
    struct upc_conn *prev, *next; /* u->idle or u->busy */
    struct upc_req *q;
    enum phase phase;
    bool connected, reused, keep;
    bool in_cb, dead; /* a callback runs; closed during it */
    enum h1_framing fr;
    uint64_t left;
    size_t scanned; /* head bytes already searched for its end */
    struct h1_chunked ch;
};

struct upc_req {
    struct upc *u;
    struct upc_conn *c;
    struct evbuffer *msg;
    bool head_req, retried, got_bytes;
    const struct upc_cbs *cbs;
    void *ud;
    struct event timer;
    bool timer_on;
};

struct upc {
    struct event_base *base;
    char *host;
    int port;
    long timeout_ms;
    struct sockaddr_storage addr;
    socklen_t addr_len; /* 0: not resolved */
    struct upc_conn *idle, *busy;
    size_t nidle, nconn;
    struct h1_head head; /* scratch for parsing, one response at a time */
};

static void conn_list_add(struct upc_conn **head, struct upc_conn *c)
{
    c->prev = NULL;
    c->next = *head;
    if (*head)
        (*head)->prev = c;
    *head = c;
}

static void conn_list_del(struct upc_conn **head, struct upc_conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        *head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

struct upc *upc_new(struct event_base *base, const char *host, int port,
                    long timeout_ms)
{
    struct upc *u = xcalloc(1, sizeof(*u));
    u->base = base;
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']')
        u->host = xstrndup(host + 1, hl - 2);
    else
        u->host = xstrdup(host);
    u->port = port;
    u->timeout_ms = timeout_ms;
    return u;
}

size_t upc_connections(const struct upc *u)
{
    return u->nconn;
}

static void conn_free(struct upc_conn *c)
{
    struct upc *u = c->u;
    conn_list_del(c->phase == P_IDLE ? &u->idle : &u->busy, c);
    if (c->phase == P_IDLE)
        u->nidle--;
    u->nconn--;
    bufferevent_free(c->bev);
    free(c);
}

/* Closes c, now or, when one of its callbacks is running, once it
 * returns. */
static void conn_close(struct upc_conn *c)
{
    if (c->in_cb) {
        c->dead = true;
        bufferevent_disable(c->bev, EV_READ | EV_WRITE);
        return;
    }
    conn_free(c);
}

static void req_free(struct upc_req *q)
{
    if (q->timer_on)
        event_del(&q->timer);
    if (q->msg)
        evbuffer_free(q->msg);
    free(q);
}

static void on_idle_read(struct bufferevent *bev, void *arg);
static void on_idle_event(struct bufferevent *bev, short what, void *arg);
static void start_on(struct upc_req *q, struct upc_conn *c);
static struct upc_conn *conn_new(struct upc *u, char *why, size_t wl);

/* Ends q with err, detaching it from its connection first; the connection
 * goes back to the pool when it can carry another request. */
static void finish(struct upc_req *q, int err, const char *why)
{
    struct upc_conn *c = q->c;
    struct upc *u = q->u;
    if (c) {
        c->q = NULL;
        q->c = NULL;
        bool clean = !err && c->keep && !c->dead &&
                     evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
                     evbuffer_get_length(bufferevent_get_input(c->bev)) == 0 &&
                     u->nidle < MAX_IDLE;
        if (clean) {
            conn_list_del(&u->busy, c);
            c->phase = P_IDLE;
            c->reused = true;
            conn_list_add(&u->idle, c);
            u->nidle++;
            bufferevent_setcb(c->bev, on_idle_read, NULL, on_idle_event, c);
        } else {
            conn_close(c);
        }
    }
    const struct upc_cbs *cbs = q->cbs;
    void *ud = q->ud;
    req_free(q);
    cbs->done(ud, err, why);
}

/* A failure on q's connection before anything of the response came: once,
 * on a reused connection, the request goes out again on a new one. */
static void fail(struct upc_req *q, int err, const char *why)
{
    struct upc_conn *c = q->c;
    char w[256];
    if (c && c->reused && !q->got_bytes && !q->retried && err != -ETIMEDOUT &&
        err != -EPROTO) {
        c->q = NULL;
        q->c = NULL;
        conn_close(c);
        q->retried = true;
        struct upc_conn *n = conn_new(q->u, w, sizeof(w));
        if (n) {
            start_on(q, n);
            return;
        }
        why = w;
        err = -ECONNRESET;
    }
    finish(q, err, why);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upc_req *q = arg;
    (void)fd;
    (void)what;
    q->timer_on = false;
    char why[64];
    snprintf(why, sizeof(why), "no complete response within %ld ms",
             q->u->timeout_ms);
    finish(q, -ETIMEDOUT, why);
}

/* Calls a callback of q with c marked busy; false when q was cancelled or
 * c closed meanwhile (the caller must stop touching both). */
static bool after_cb(struct upc_conn *c, struct upc_req *q)
{
    c->in_cb = false;
    if (c->dead) {
        conn_free(c);
        return false;
    }
    return c->q == q;
}

static void deliver(struct upc_conn *c, struct upc_req *q, const char *p,
                    size_t n, bool *alive)
{
    c->in_cb = true;
    q->cbs->body(q->ud, p, n);
    *alive = after_cb(c, q);
}

/* Sends the readable bytes of in, up to max, to the body callback a
 * contiguous piece at a time; returns how many went, or -1 when q or c
 * went away meanwhile. */
static long pass_body(struct upc_conn *c, struct upc_req *q,
                      struct evbuffer *in, uint64_t max)
{
    uint64_t sent = 0;
    while (sent < max) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || !v.iov_len)
            break;
        size_t n = v.iov_len;
        if (n > max - sent)
            n = (size_t)(max - sent);
        bool alive;
        deliver(c, q, v.iov_base, n, &alive);
        if (!alive)
            return -1;
        evbuffer_drain(in, n);
        sent += n;
    }
    return (long)sent;
}

/* Whether the blank line that ends a head (CRLF CRLF or LF LF) may be in
 * in, looking from a little before `from`. */
static bool has_head_end(struct evbuffer *in, size_t from)
{
    struct evbuffer_ptr start;
    size_t back = from > 3 ? from - 3 : 0;
    if (evbuffer_ptr_set(in, &start, back, EVBUFFER_PTR_SET))
        return true;
    return evbuffer_search(in, "\n\r\n", 3, &start).pos >= 0 ||
           evbuffer_search(in, "\n\n", 2, &start).pos >= 0;
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
static int read_head(struct upc_conn *c, struct upc_req *q, struct evbuffer *in)
{
    struct upc *u = c->u;
    for (;;) {
        size_t avail = evbuffer_get_length(in);
        if (!avail)
            return 0;
        size_t want = avail < H1_MAX_HEAD ? avail : H1_MAX_HEAD;
        /* a head arriving in many small reads is linearised and parsed
         * again only once its end may be there: linear, not quadratic */
        if (avail > 4096 && avail < H1_MAX_HEAD &&
            !has_head_end(in, c->scanned)) {
            c->scanned = avail;
            return 0;
        }
        const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)want);
        int hl = h1_parse_head(p, want, &u->head);
        if (hl == -2)
            return 0;
        c->scanned = 0;
        if (hl < 0) {
            fail(q, -EPROTO, "malformed response head");
            return -1;
        }
        if (u->head.status == 101) {
            fail(q, -EPROTO, "protocol upgrade (101) is not supported");
            return -1;
        }
        if (u->head.status < 200) { /* 100 Continue, 103 Early Hints */
            evbuffer_drain(in, (size_t)hl);
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
        evbuffer_drain(in, (size_t)hl);
        c->phase = P_BODY;
        return 1;
    }
}

/* Chunked body: decodes what is readable; 1 when the body ended, 0 for
 * more input, -1 when q is finished or gone. */
static int read_chunked(struct upc_conn *c, struct upc_req *q,
                        struct evbuffer *in)
{
    for (;;) {
        size_t avail = evbuffer_get_length(in);
        if (!avail)
            return 0;
        /* the data of a chunk is passed without linearising the buffer;
         * only framing bytes need a contiguous view */
        const char *p = (const char *)evbuffer_pullup(in, -1);
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
        evbuffer_drain(in, used);
        if (rc == 2)
            return 1;
        if (rc == 0)
            return 0;
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct upc_conn *c = arg;
    struct upc_req *q = c->q;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (!q)
        return;
    if (!q->got_bytes) {
        q->got_bytes = true;
        /* no retry from here on: the copy kept for one is not needed
         * (what is still unwritten is referenced by the output buffer) */
        evbuffer_free(q->msg);
        q->msg = NULL;
    }
    if (c->phase == P_HEAD) {
        int rc = read_head(c, q, in);
        if (rc <= 0)
            return;
    }
    switch (c->fr) {
    case H1_NONE:
        break;
    case H1_SIZED:
        if (c->left) {
            long n = pass_body(c, q, in, c->left);
            if (n < 0)
                return;
            c->left -= (uint64_t)n;
        }
        if (c->left)
            return;
        break;
    case H1_CHUNKED:
        if (read_chunked(c, q, in) <= 0)
            return;
        break;
    case H1_CLOSE:
        pass_body(c, q, in, UINT64_MAX);
        return; /* ends at EOF */
    }
    finish(q, 0, "complete");
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct upc_conn *c = arg;
    struct upc_req *q = c->q;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        c->connected = true;
        bufferevent_set_timeouts(c->bev, NULL, NULL);
        evutil_socket_t fd = bufferevent_getfd(c->bev);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return;
    }
    if (!q) {
        conn_close(c);
        return;
    }
    if ((what & BEV_EVENT_EOF) && c->phase == P_BODY && c->fr == H1_CLOSE) {
        on_read(c->bev, c); /* what is left in the buffer */
        if (c->q == q)
            finish(q, 0, "complete");
        return;
    }
    char why[200];
    int err = EVUTIL_SOCKET_ERROR();
    if (!c->connected && (!err || err == EAGAIN || err == EINPROGRESS))
        err = ECONNREFUSED; /* libevent reports a refusal it saw at once
                             * from connect() without errno */
    if (what & BEV_EVENT_TIMEOUT) {
        snprintf(why, sizeof(why), "cannot connect to %s:%d within %d s",
                 c->u->host, c->u->port, CONNECT_TIMEOUT_S);
        fail(q, -ETIMEDOUT, why);
        return;
    }
    if ((what & BEV_EVENT_ERROR) && err) {
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

static void on_idle_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_close(arg); /* nothing may arrive on an idle connection */
}

static void on_idle_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    (void)what;
    conn_close(arg);
}

static int resolve(struct upc *u, char *why, size_t wl)
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

static struct upc_conn *conn_new(struct upc *u, char *why, size_t wl)
{
    if (!u->addr_len && resolve(u, why, wl))
        return NULL;
    struct upc_conn *c = xcalloc(1, sizeof(*c));
    c->u = u;
    c->bev = bufferevent_socket_new(u->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev)
        abort();
    c->phase = P_HEAD;
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    struct timeval tv = {CONNECT_TIMEOUT_S, 0};
    bufferevent_set_timeouts(c->bev, NULL, &tv);
    conn_list_add(&u->busy, c);
    u->nconn++;
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&u->addr,
                                   (int)u->addr_len)) {
        int err = EVUTIL_SOCKET_ERROR();
        snprintf(why, wl, "cannot connect to %s:%d: %s", u->host, u->port,
                 evutil_socket_error_to_string(err));
        u->addr_len = 0; /* resolve again next time */
        conn_free(c);
        return NULL;
    }
    return c;
}

static void start_on(struct upc_req *q, struct upc_conn *c)
{
    q->c = c;
    c->q = q;
    c->phase = P_HEAD;
    c->keep = false;
    c->scanned = 0;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (!c->connected || evbuffer_get_length(out)) {
        evbuffer_add_buffer_reference(out, q->msg);
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
        return;
    }
    /* A pooled connection takes the request at once, in one writev; the
     * write event is armed only for what the socket did not take (and to
     * learn of a write error), which saves two epoll_ctl per exchange.
     * (A socket bufferevent's output buffer cannot be written from
     * outside, hence writev on the request's own pieces; q->msg stays
     * whole for a retry.) */
    struct evbuffer_iovec v[8];
    struct iovec iov[8];
    int nv = evbuffer_peek(q->msg, -1, NULL, v, 8);
    size_t total = evbuffer_get_length(q->msg);
    ssize_t w = -1;
    if (nv > 0 && nv <= 8) {
        for (int i = 0; i < nv; i++) {
            iov[i].iov_base = v[i].iov_base;
            iov[i].iov_len = v[i].iov_len;
        }
        w = writev(bufferevent_getfd(c->bev), iov, nv);
    }
    bufferevent_enable(c->bev, EV_READ);
    if (w == (ssize_t)total)
        return;
    if (w <= 0) { /* not written (or failed): the bufferevent does it */
        evbuffer_add_buffer_reference(out, q->msg);
    } else {
        struct evbuffer_ptr at;
        evbuffer_ptr_set(q->msg, &at, (size_t)w, EVBUFFER_PTR_SET);
        char *rest = xmalloc(total - (size_t)w);
        evbuffer_copyout_from(q->msg, &at, rest, total - (size_t)w);
        evbuffer_add(out, rest, total - (size_t)w);
        free(rest);
    }
    bufferevent_enable(c->bev, EV_WRITE);
}

struct upc_req *upc_send(struct upc *u, struct evbuffer *msg, bool head_req,
                         const struct upc_cbs *cbs, void *ud, char *why,
                         size_t wl)
{
    struct upc_conn *c = u->idle;
    if (c) {
        conn_list_del(&u->idle, c);
        u->nidle--;
        conn_list_add(&u->busy, c);
        bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    } else {
        c = conn_new(u, why, wl);
        if (!c) {
            evbuffer_free(msg);
            return NULL;
        }
    }
    struct upc_req *q = xcalloc(1, sizeof(*q));
    q->u = u;
    q->msg = msg;
    q->head_req = head_req;
    q->cbs = cbs;
    q->ud = ud;
    if (u->timeout_ms > 0) {
        struct timeval tv = {u->timeout_ms / 1000,
                             (u->timeout_ms % 1000) * 1000};
        event_assign(&q->timer, u->base, -1, 0, on_timeout, q);
        event_add(&q->timer, &tv);
        q->timer_on = true;
    }
    start_on(q, c);
    return q;
}

void upc_cancel(struct upc_req *q)
{
    if (!q)
        return;
    struct upc_conn *c = q->c;
    if (c) {
        c->q = NULL;
        conn_close(c);
    }
    req_free(q);
}

void upc_free(struct upc *u)
{
    if (!u)
        return;
    while (u->idle)
        conn_free(u->idle);
    while (u->busy) {
        struct upc_conn *c = u->busy;
        if (c->q) {
            c->q->c = NULL;
            req_free(c->q);
        }
        conn_free(c);
    }
    free(u->host);
    free(u);
}
