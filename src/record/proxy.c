/*
 * proxy: the event loop of `fidelity record`. Client side: front.c, record's
 * own HTTP/1.1 server (requests handed over whole, replies streamed with
 * front_start/front_body/front_end). Upstream side: for an
 * http:// upstream, upclient.c (bufferevents, a keep-alive pool, h1.c's
 * parser); for https://, a curl multi handle driven by libevent
 * (curl_multi_socket_action with one event per socket and one timer, the
 * pattern of curl's hiperfifo example). One struct ex (record_int.h)
 * follows an exchange from the request callback to the moment it is
 * stored and the client has its last byte; storing it is writer.c's.
 */
#include <curl/curl.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "record/front.h"
#include "record/record.h"
#include "record/record_int.h"
#include "record/redact.h"
#include "record/rtiming.h"
#include "record/upclient.h"
#include "store/store.h"
#include "store/xchg.h"
#include "wire/jscan.h"
#include "wire/reply.h"
#include "wire/sse.h"

#define STOP_GRACE_S 5
/* finished exchanges kept for reuse (ex_get), with their client-side
 * buffers when these stay under SPARE_BUF_MAX */
#define SPARE_MAX 64
#define SPARE_BUF_MAX (16u << 10)

struct sock {
    struct event ev; /* embedded: reassigned, never reallocated */
    short kind;      /* what ev waits for; 0: not added yet */
};

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void record_logf(struct record *r, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    if (!r->o.log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->o.log(r->o.log_ud, msg);
}

/* ---- lists ---- */

static void list_add(struct ex **head, struct ex *e)
{
    e->prev = NULL;
    e->next = *head;
    if (*head)
        (*head)->prev = e;
    *head = e;
}

static void list_del(struct ex **head, struct ex *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        *head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static void set_reason(struct ex *e, const char *p, size_t n)
{
    if (e->reason != e->reason_in)
        free(e->reason);
    if (!n) {
        e->reason = NULL;
    } else if (n < sizeof(e->reason_in)) {
        memcpy(e->reason_in, p, n);
        e->reason_in[n] = '\0';
        e->reason = e->reason_in;
    } else {
        e->reason = xstrndup(p, n);
    }
}

/* Frees what e holds but the client-side buffers (rh, held), which a
 * reused ex keeps. stored: store_batch has released e->x and e->body (the
 * recorded copy is freed on the writer's side), nothing left there. */
static void ex_clear(struct ex *e, bool stored)
{
    if (e->hdrs) {
        curl_slist_free_all(e->hdrs);
        e->hdrs = NULL;
    }
    if (e->url) {
        free(e->url);
        e->url = NULL;
    }
    buf_release(&e->plain);
    if (!stored) {
        buf_release(&e->body);
        xchg_release(&e->x);
    }
    if (e->resp.data) /* detached by fill_response, but when it never ran */
        buf_release(&e->resp);
    if (e->reason)
        set_reason(e, NULL, 0);
    if (e->resp_hl.b.data) /* likewise moved to e->x */
        hdrs_release(&e->resp_hl);
}

static void ex_free(struct ex *e)
{
    if (!e)
        return;
    ex_clear(e, false);
    buf_release(&e->held);
    buf_release(&e->rh);
    free(e);
}

/* A zeroed exchange: a spare one (its rh and held emptied, their memory
 * kept: a small reply's head and held end need no allocation) or a new
 * one. */
static struct ex *ex_get(struct record *r)
{
    struct ex *e = r->spare;
    if (!e)
        return xcalloc(1, sizeof(*e));
    r->spare = e->next;
    r->nspare--;
    struct buf rh = e->rh, held = e->held;
    memset(e, 0, sizeof(*e));
    e->rh = rh;
    e->held = held;
    buf_reset(&e->rh);
    buf_reset(&e->held);
    return e;
}

/* Done with e, a stored exchange: kept for ex_get, or freed. */
static void ex_put(struct record *r, struct ex *e)
{
    if (r->nspare >= SPARE_MAX || r->stopping) {
        ex_free(e);
        return;
    }
    ex_clear(e, true);
    if (e->rh.alloc > SPARE_BUF_MAX)
        buf_release(&e->rh);
    if (e->held.alloc > SPARE_BUF_MAX)
        buf_release(&e->held);
    e->next = r->spare;
    r->spare = e;
    r->nspare++;
}

/* ---- curl multi driven by libevent ---- */

static void check_done(struct record *r);

static void on_sock_event(evutil_socket_t fd, short what, void *arg)
{
    struct record *r = arg;
    int running;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) |
                (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    curl_multi_socket_action(r->multi, fd, flags, &running);
    check_done(r);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct record *r = arg;
    int running;
    (void)fd;
    (void)what;
    curl_multi_socket_action(r->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(r);
}

static int curl_sock_cb(CURL *easy, curl_socket_t s, int what, void *userp,
                        void *socketp)
{
    struct record *r = userp;
    struct sock *sk = socketp;
    (void)easy;
    if (what == CURL_POLL_REMOVE) {
        if (sk) {
            event_del(&sk->ev);
            free(sk);
            curl_multi_assign(r->multi, s, NULL);
        }
        return 0;
    }
    short kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) |
                         (what & CURL_POLL_OUT ? EV_WRITE : 0) | EV_PERSIST);
    if (!sk) {
        sk = xcalloc(1, sizeof(*sk));
        curl_multi_assign(r->multi, s, sk);
    } else if (sk->kind == kind) {
        return 0; /* already waiting for that */
    } else {
        event_del(&sk->ev);
    }
    event_assign(&sk->ev, r->base, s, kind, on_sock_event, r);
    event_add(&sk->ev, NULL);
    sk->kind = kind;
    return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    struct record *r = userp;
    (void)multi;
    if (timeout_ms < 0) {
        evtimer_del(r->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(r->timer, &tv);
    return 0;
}

/* ---- request headers ---- */

/* Whether name (nl bytes) is lower (a name of as many bytes, in lower-case
 * letters, digits and '-'), ignoring ASCII case; callers pick lower by nl
 * first. Eight bytes at a time: where lower has a letter (bit 0x40 set)
 * the name's byte may differ from it in bit 0x20 only (its other case),
 * elsewhere not at all. */
static inline bool name_is_n(const char *name, const char *lower, size_t n)
{
    const uint64_t bit40 = 0x4040404040404040ull;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t a = 0, b = 0;
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(&a, name + i, k);
        memcpy(&b, lower + i, k);
        if ((a | (b & bit40) >> 1) != b)
            return false;
    }
    return true;
}
#define name_is(name, lower) name_is_n(name, lower "", sizeof(lower) - 1)

/* Field names are matched by length first: most names a request carries
 * are then told apart without comparing a byte. */
static bool is_hop_by_hop(const char *name, size_t nl)
{
    switch (nl) {
    case 2:
        return name_is(name, "te");
    case 7:
        return name_is(name, "trailer") || name_is(name, "upgrade");
    case 10:
        return name_is(name, "connection") || name_is(name, "keep-alive");
    case 16:
        return name_is(name, "proxy-connection");
    case 17:
        return name_is(name, "transfer-encoding");
    default:
        return false;
    }
}

/* memcmp(a, b, n) == 0 for the short strings of the memo, in 8-byte
 * words (the last one overlapping the one before) rather than a call. */
static bool same_bytes(const char *a, const char *b, size_t n)
{
    uint64_t x, y;
    if (n < 8) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i])
                return false;
        return true;
    }
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return false;
    }
    memcpy(&x, a + n - 8, 8);
    memcpy(&y, b + n - 8, 8);
    return x == y;
}

/* redact_is_secret_header() with a memo: the same few header names come with
 * every exchange, and the rule (a dozen substring searches on a lowered
 * copy) was most of the cost of copying headers. A direct-mapped table
 * keyed by the name's exact bytes; a collision only costs a recompute. */
static bool is_secret_memo(struct record *r, const char *name, size_t n)
{
    if (n >= sizeof(r->memo[0].name))
        return redact_is_secret_header(name);
    /* the slot: the length and the first and last four bytes */
    uint32_t h = (uint32_t)n * 0x9e3779b1u;
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, name, 4);
        memcpy(&b, name + n - 4, 4);
        h ^= a * 0x85ebca6bu ^ b * 0xc2b2ae35u;
    } else {
        for (size_t i = 0; i < n; i++)
            h = (h ^ (unsigned char)name[i]) * 16777619u;
    }
    h ^= h >> 15;
    struct name_memo *m = &r->memo[h % MEMO_SLOTS];
    if (m->len == n + 1 && same_bytes(m->name, name, n))
        return m->secret;
    memcpy(m->name, name, n);
    m->len = (uint8_t)(n + 1);
    m->secret = redact_is_secret_header(name);
    return m->secret;
}

/* Adds a field to the store's copy, its value redacted when the name is
 * a secret's: the secret never reaches the list. name is NUL-terminated
 * after its nl bytes. */
static void hl_add(struct record *r, struct hdrs *hl, const char *name,
                   size_t nl, const char *value, size_t vl)
{
    if (is_secret_memo(r, name, nl))
        hdrs_add(hl, name, nl, REDACT_MARK, sizeof(REDACT_MARK) - 1);
    else
        hdrs_add(hl, name, nl, value, vl);
}

/* Starts hl sized for the n fields of h; the bytes of their names and
 * values. */
static size_t hl_start(struct hdrs *hl, const struct h1_header *h, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += h[i].name_len + h[i].value_len;
    hdrs_start(hl);
    hdrs_reserve(hl, n, total + sizeof(REDACT_MARK));
    return total;
}

/* Headers not forwarded: hop-by-hop ones, and those the upstream
 * connection sets (Host, Content-Length, Expect). */
static bool is_not_forwarded(const char *name, size_t nl)
{
    switch (nl) {
    case 4:
        return name_is(name, "host");
    case 6:
        return name_is(name, "expect");
    case 14:
        return name_is(name, "content-length");
    default:
        return is_hop_by_hop(name, nl);
    }
}

/* Whether a Content-Type value (NUL-terminated) starts with
 * text/event-stream, in any case; most values are told by their first
 * letter without a call. */
static bool is_event_stream(const char *value)
{
    return (value[0] | 0x20) == 't' &&
           !strncasecmp(value, "text/event-stream", 17);
}

/* Appends "name: value\r\n" to b, grown once. */
static void add_field_line(struct buf *b, const char *name, size_t nl,
                           const char *value, size_t vl)
{
    size_t n = nl + vl + 4;
    buf_grow(b, n);
    char *w = b->data + b->len;
    memcpy(w, name, nl);
    memcpy(w + nl, ": ", 2);
    memcpy(w + nl + 2, value, vl);
    memcpy(w + nl + 2 + vl, "\r\n", 2);
    b->len += n;
    b->data[b->len] = '\0';
}

/* Copies the client's headers (q's, NUL-terminated in place by front.c)
 * into e->x.req_headers (redacted) and, for the upstream, onto wire (our
 * client: "Name: value" lines) or into e->hdrs (libcurl) when wire is
 * NULL. */
static void take_req_headers(struct ex *e, const struct h1_req *q,
                             struct buf *wire)
{
    bool has_accept = false, has_ctype = false;

    hl_start(&e->x.req_hl, q->headers, q->nheaders);
    e->ct = NULL;
    for (size_t i = 0; i < q->nheaders; i++) {
        const struct h1_header *h = &q->headers[i];
        const char *key = h->name, *value = h->value;
        hl_add(e->r, &e->x.req_hl, key, h->name_len, value, h->value_len);
        bool ctype = h->name_len == 12 && name_is(key, "content-type");
        if (ctype)
            e->ct = value;
        if (is_not_forwarded(key, h->name_len))
            continue;
        if (wire) {
            add_field_line(wire, key, h->name_len, value, h->value_len);
            continue;
        }
        has_accept |= h->name_len == 6 && name_is(key, "accept");
        has_ctype |= ctype;
        char *line =
            *value ? xasprintf("%s: %s", key, value) : xasprintf("%s;", key);
        e->hdrs = curl_slist_append(e->hdrs, line);
        free(line);
    }
    /* how the writer judges a body that does not parse */
    e->ct_json = e->ct ? strstr(e->ct, "json") != NULL : e->body.len > 0;
    if (wire)
        return;
    /* headers curl would add on its own */
    e->hdrs = curl_slist_append(e->hdrs, "Expect:");
    if (!has_accept)
        e->hdrs = curl_slist_append(e->hdrs, "Accept:");
    if (!has_ctype)
        e->hdrs = curl_slist_append(e->hdrs, "Content-Type:");
}

/* ---- client side ---- */

static void send_json_error(struct front_conn *c, int code, const char *type,
                            const char *msg)
{
    json_t *j = json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message", msg,
                          "type", type, "param", "code", type);
    char *s = json_dumps(j, JSON_COMPACT);
    front_json(c, code, s, strlen(s));
    free(s);
    json_decref(j);
}

static bool client_ok(const struct ex *e)
{
    return e->fc && !e->client_gone;
}

/* The status line and the upstream's headers (e->rh) go to the client;
 * front.c frames the body: sized when the upstream's was, else chunked
 * for an HTTP/1.1 client and until the close for HTTP/1.0. */
static int reply_code(const struct ex *e, bool *no_body)
{
    int code = e->status ? e->status : 200;
    *no_body = code < 200 || code == 204 || code == 304 || e->head_req;
    return code;
}

static void start_reply(struct ex *e)
{
    if (e->reply_started || !client_ok(e))
        return;
    e->reply_started = true;
    bool no_body;
    int code = reply_code(e, &no_body);
    front_start(e->fc, code, e->reason, e->reason ? strlen(e->reason) : 0,
                e->rh.data, e->rh.len, e->content_length, no_body);
}

/* Appends a forwarded response header line for the client. */
static void add_resp_line(struct ex *e, const char *name, size_t nl,
                          const char *value, size_t vl)
{
    add_field_line(&e->rh, name, nl, value, vl);
}

/* At the end of the upstream's headers. A sized body's status line and
 * headers wait for its first forwarded byte, or for complete() when the
 * whole body is held: they then leave in the same write as the body (one
 * write and one segment instead of two per small JSON reply). A stream's
 * go at once (at the end of this loop pass). */
static void start_reply_unless_sized(struct ex *e)
{
    if (e->content_length >= 0)
        return;
    start_reply(e);
}

static void send_now(struct ex *e, const char *p, size_t n)
{
    if (!n || !client_ok(e))
        return;
    start_reply(e);
    front_body(e->fc, p, n);
    if (!e->down_first)
        e->down_first = now_ms() - e->t0;
}

static void forward(struct ex *e, const char *p, size_t n)
{
    if (!client_ok(e) || !n)
        return;
    /* The piece that completes a sized body waits until the exchange is
     * stored: the client must not see the response complete first. It is
     * sent whole, in one write, by complete(). */
    if (e->content_length >= 0 &&
        e->forwarded + (int64_t)n >= e->content_length) {
        buf_add(&e->held, p, n);
        e->forwarded += (int64_t)n;
        return;
    }
    send_now(e, p, n);
    e->forwarded += (int64_t)n;
}

/* ---- curl callbacks ---- */

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    struct ex *e = ud;
    size_t len = sz * n;
    if (len >= 5 && !memcmp(p, "HTTP/", 5)) {
        const char *sp = memchr(p, ' ', len);
        e->status = sp ? atoi(sp + 1) : 0;
        set_reason(e, NULL, 0);
        const char *sp2 =
            sp ? memchr(sp + 1, ' ', len - (size_t)(sp + 1 - p)) : NULL;
        if (sp2) {
            size_t rl = len - (size_t)(sp2 + 1 - p);
            while (rl && (sp2[rl] == '\r' || sp2[rl] == '\n'))
                rl--;
            set_reason(e, sp2 + 1, rl);
        }
        hdrs_start(&e->resp_hl);
        e->content_length = -1;
        e->x.streamed = false;
        buf_reset(&e->rh);
        return len;
    }
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    if (!len) {
        if (e->status >= 200 && !e->headers_done) {
            e->headers_done = true;
            start_reply_unless_sized(e);
        }
        return sz * n;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || !e->resp_hl.set)
        return sz * n;
    char *name = xstrndup(p, (size_t)(colon - p));
    const char *v = colon + 1;
    while (v < p + len && (*v == ' ' || *v == '\t'))
        v++;
    char *value = xstrndup(v, (size_t)(p + len - v));
    size_t nl = strlen(name);
    hl_add(e->r, &e->resp_hl, name, nl, value, strlen(value));
    if (nl == 12 && name_is(name, "content-type"))
        e->x.streamed = is_event_stream(value);
    if (nl == 14 && name_is(name, "content-length"))
        e->content_length = strtoll(value, NULL, 10);
    if (!is_hop_by_hop(name, nl))
        add_resp_line(e, name, nl, value, strlen(value));
    free(name);
    free(value);
    return sz * n;
}

/* An event ended at time t (ms since the request came). */
static void on_event(struct ex *e, double t)
{
    if (e->last_event_ms >= 0 && t - e->last_event_ms > e->max_gap_ms)
        e->max_gap_ms = t - e->last_event_ms;
    e->last_event_ms = t;
}

/* A line of the stream ended. */
static void gap_line(struct ex *e, double *t)
{
    struct gap_scan *g = &e->gs;
    if (!g->len) {
        if (g->has_data) {
            if (*t < 0) /* one clock read per piece: its events came at once */
                *t = now_ms() - e->t0;
            on_event(e, *t);
        }
        g->has_data = false;
    } else if ((g->len >= 5 && !memcmp(g->head, "data:", 5)) ||
               (g->len == 4 && !memcmp(g->head, "data", 4))) {
        g->has_data = true;
    }
    g->len = 0;
}

/* Finds the line ends (CRLF, LF or CR) in a piece of the stream; only the
 * timing is taken here, the writer thread reassembles the reply from the
 * captured stream, keeping parsing off the forwarding path. */
static void gap_feed(struct ex *e, const char *s, size_t n)
{
    struct gap_scan *g = &e->gs;
    double t = -1;
    size_t i = 0;
    /* the first CR at or after i, searched again only once passed: a
     * stream's lines mostly end in a bare LF */
    const char *cr = memchr(s, '\r', n);
    while (i < n) {
        if (g->after_cr) {
            g->after_cr = false;
            if (s[i] == '\n') {
                i++;
                continue;
            }
        }
        if (cr && cr < s + i)
            cr = memchr(s + i, '\r', n - i);
        /* a blank line (the end of an event) is found without a call */
        const char *lf = s[i] == '\n' ? s + i : memchr(s + i, '\n', n - i);
        size_t end = lf ? (size_t)(lf - s) : n;
        if (cr && cr < s + end)
            end = (size_t)(cr - s);
        if (g->len < sizeof(g->head)) {
            size_t k = sizeof(g->head) - g->len;
            if (k > end - i)
                k = end - i;
            memcpy(g->head + g->len, s + i, k);
        }
        g->len += end - i;
        if (end == n)
            break;
        g->after_cr = s[end] == '\r';
        i = end + 1;
        gap_line(e, &t);
    }
}

/* A piece of the response body (transfer coding removed): captured,
 * timed, forwarded. */
static void got_body(struct ex *e, const char *p, size_t len)
{
    if (!e->headers_done) {
        e->headers_done = true;
        start_reply_unless_sized(e);
    }
    if (!e->up_first)
        e->up_first = now_ms() - e->t0;
    if (!e->resp_capped && buf_add(&e->resp, p, len))
        e->resp_capped = true;
    if (e->x.streamed)
        gap_feed(e, p, len);
    forward(e, p, len);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct ex *e = ud;
    if (e->client_gone)
        return 0; /* aborts the transfer */
    got_body(e, p, sz * n);
    return sz * n;
}

/* ---- upclient callbacks ---- */

static void up_head(void *ud, const struct h1_head *h, enum h1_framing f,
                    uint64_t len)
{
    struct ex *e = ud;
    e->status = h->status;
    set_reason(e, h->reason, h->reason_len);
    size_t bytes = hl_start(&e->resp_hl, h->headers, h->nheaders);
    buf_grow(&e->rh, bytes + 4 * h->nheaders); /* "name: value\r\n" */
    /* a body-less response is "sized" at 0: its head leaves with the
     * end, once stored */
    e->content_length = f == H1_SIZED ? (int64_t)len : f == H1_NONE ? 0 : -1;
    /* the capture buffer sized once: the body's length, or a stream's
     * usual few KiB, instead of doubling from 64 bytes */
    buf_grow(&e->resp,
             f == H1_SIZED && len < ((size_t)1 << 20) ? (size_t)len : 4096);
    for (size_t i = 0; i < h->nheaders; i++) {
        const struct h1_header *x = &h->headers[i];
        const char *name = x->name, *value = x->value; /* NUL-terminated */
        hl_add(e->r, &e->resp_hl, name, x->name_len, value, x->value_len);
        if (x->name_len == 12 && name_is(name, "content-type"))
            e->x.streamed = is_event_stream(value);
        if (!is_hop_by_hop(name, x->name_len))
            add_resp_line(e, x->name, x->name_len, x->value, x->value_len);
    }
    e->headers_done = true;
    start_reply_unless_sized(e);
}

static void up_body(void *ud, const char *p, size_t n)
{
    got_body(ud, p, n);
}
static void finish_as(struct ex *e, enum xchg_end end);

static void up_done(void *ud, int err, const char *why)
{
    struct ex *e = ud;
    enum xchg_end end;
    e->upq = NULL;
    e->up_err = err;
    if (err)
        snprintf(e->curl_err, sizeof(e->curl_err), "%s", why);
    if (e->client_gone)
        end = XCHG_CLIENT_GONE;
    else if (!err)
        end = XCHG_COMPLETE;
    else if (err == -ETIMEDOUT)
        end = XCHG_TIMEOUT;
    else if (!e->headers_done)
        end = XCHG_UPSTREAM_ERROR;
    else
        end = XCHG_UPSTREAM_RESET;
    finish_as(e, end);
}

static const struct upclient_cbs UP_CBS = {
    .head = up_head, .body = up_body, .done = up_done};

/* ---- finishing an exchange ---- */

static void release_easy(struct record *r, struct ex *e)
{
    if (!e->easy)
        return;
    curl_multi_remove_handle(r->multi, e->easy);
    if (r->npool < EASY_POOL && !r->stopping) {
        curl_easy_reset(e->easy);
        r->pool[r->npool++] = e->easy;
    } else {
        curl_easy_cleanup(e->easy);
    }
    e->easy = NULL;
}

static enum xchg_end end_of(const struct ex *e, CURLcode res)
{
    if (e->client_gone)
        return XCHG_CLIENT_GONE;
    if (res == CURLE_OK)
        return XCHG_COMPLETE;
    if (res == CURLE_OPERATION_TIMEDOUT)
        return XCHG_TIMEOUT;
    if (!e->headers_done)
        return XCHG_UPSTREAM_ERROR;
    return XCHG_UPSTREAM_RESET;
}

static void fill_response(struct ex *e, double t)
{
    struct xchg *x = &e->x;
    x->status = e->headers_done ? e->status : 0;
    hdrs_release(&x->resp_hl);
    x->resp_hl = e->resp_hl;
    memset(&e->resp_hl, 0, sizeof(e->resp_hl));
    x->resp_raw_len = e->resp.len;
    x->resp_raw = e->resp.len ? buf_detach(&e->resp, NULL) : NULL;
    /* the reply is assembled by the writer thread (see store_batch) */
    x->up_ttfb_ms = e->up_first;
    x->up_total_ms = t;
    x->down_ttfb_ms = e->down_first;
    x->down_total_ms = t;
}

void proxy_maybe_exit(struct record *r)
{
    if (r->stopping && r->nactive == 0 && r->nstoring == 0) {
        struct timeval tv = {0, 100000}; /* let the last replies flush */
        event_base_loopexit(r->base, &tv);
    }
}

static void reply_error(struct ex *e, enum xchg_end end)
{
    char msg[CURL_ERROR_SIZE + 300];
    const char *what = "is unreachable", *type = "upstream_unreachable";
    if (end == XCHG_TIMEOUT) {
        what = "timed out";
        type = "upstream_timeout";
    } else if (e->up_err == -EPROTO) {
        what = "sent a response record cannot parse";
        type = "upstream_bad_response";
    }
    /* the upstream's credentials never reach a client */
    url_mask_in(e->curl_err, sizeof(e->curl_err), e->r->upstream);
    snprintf(msg, sizeof(msg), "fidelity record: upstream '%s' %s: %s",
             e->r->upstream_shown, what,
             e->curl_err[0] ? e->curl_err : "no response");
    send_json_error(e->fc, xchg_own_status(end), type, msg);
}

/* The client side of a finished exchange, once it is stored or in the
 * intake log: its last byte, an error reply, or the close after an
 * upstream reset. */
static void answer(struct ex *e)
{
    if (!client_ok(e)) {
        /* the client went away meanwhile */
    } else if (e->x.end == XCHG_COMPLETE && !e->reply_started) {
        /* a sized reply held whole (the common small JSON one): head,
         * body and end in one write, now */
        bool no_body;
        int code = reply_code(e, &no_body);
        e->reply_started = true;
        if (e->held.len && !e->down_first)
            e->down_first = now_ms() - e->t0;
        front_whole(e->fc, code, e->reason, e->reason ? strlen(e->reason) : 0,
                    e->rh.data, e->rh.len, e->content_length, no_body,
                    e->held.data, e->held.len);
    } else if (e->x.end == XCHG_COMPLETE) {
        send_now(e, e->held.data, e->held.len);
        front_end(e->fc);
    } else if (!e->headers_done) {
        reply_error(e, e->x.end);
    } else { /* the status line and headers, what came, then the close */
        start_reply(e);
        front_abort(e->fc);
    }
    e->answered = true;
}

/* A stored exchange, answered now unless it was from the intake log. */
static void complete(struct record *r, struct ex *e)
{
    if (!e->answered)
        answer(e);
    ex_put(r, e);
}

static void finish_as(struct ex *e, enum xchg_end end)
{
    struct record *r = e->r;
    double t = now_ms() - e->t0;

    list_del(&r->active, e);
    r->nactive--;
    e->finished = true;
    release_easy(r, e);
    if (e->upq) { /* client gone, or stopping: cancel the upstream side */
        upclient_cancel(e->upq);
        e->upq = NULL;
    }
    e->x.end = end;
    /* the upstream has the request (upclient copied it, curl is done
     * with it): from here on the body is only kept, so its secrets go;
     * a compressed one is kept decoded, noted in its headers */
    if (e->coding) {
        buf_release(&e->body);
        e->body = e->plain;
        buf_init(&e->plain, 0);
        if (!e->body.data)
            buf_grow(&e->body, 1);
        e->body.data[e->body.len] = '\0';
        hl_add(r, &e->x.req_hl, "X-Fidelity-Decoded", 18, e->coding,
               strlen(e->coding));
    }
    /* a JSON body by its shape (clients label JSON as a form, as curl
     * does by default); else a form by its type */
    size_t lead = strspn(e->body.data, " \t\r\n");
    bool json_shape = lead < e->body.len &&
                      (e->body.data[lead] == '{' || e->body.data[lead] == '[');
    size_t hidden = redact_body(e->body.data, e->body.len, r->o.redact_keys,
                                r->o.n_redact_keys);
    if (!json_shape && redact_is_form(e->ct))
        hidden = redact_form(e->body.data, e->body.len, r->o.redact_keys,
                             r->o.n_redact_keys);
    e->x.req_redacted = hidden > 0;
    fill_response(e, t);
    r->stats.exchanges++;
    list_add(&r->storing, e);
    r->nstoring++;
    /* in the intake log or stored before the client sees the end:
     * complete() runs when the writer hands it back */
    if (!r->writer_started)
        return;
    double ta = r->timing ? now_ms() : 0;
    if (writer_intake_put(r, e)) {
        if (ta > 0) { /* the client's end waited for the append alone */
            double tb = now_ms();
            rtiming_add(r->timing, RT_APPEND, tb - ta);
            rtiming_add(r->timing, RT_HELD, tb - ta);
            rtiming_add(r->timing, RT_TOTAL, tb - e->t0);
        }
        answer(e);
        writer_enqueue(r, e);
    } else if (!writer_store_inline(r, e)) {
        writer_enqueue(r, e);
    }
}

static void finish(struct ex *e, CURLcode res)
{
    finish_as(e, end_of(e, res));
}

static void check_done(struct record *r)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(r->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct ex *e = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&e);
        finish(e, m->data.result);
    }
}

/* front.c: the client of an unanswered request went away. */
static void on_client_gone(void *ud, struct front_conn *c, void *cud)
{
    struct ex *e = cud;
    (void)ud;
    (void)c;
    if (!e)
        return;
    e->fc = NULL;
    e->client_gone = true;
    if (!e->finished) /* else it is being stored: complete() frees it */
        finish(e, CURLE_OK);
}

/* Loop side: a stored (or spilled) exchange is counted and its client
 * answered; now is now_ms() when timing, else 0. */
void proxy_stored_back(struct record *r, struct ex *e, double now)
{
    if (now > 0) { /* see note_batch */
        rtiming_add(r->timing, RT_BACK, now - e->x.down_total_ms);
        if (!e->in_end) { /* else answered at its append (finish_as) */
            rtiming_add(r->timing, RT_HELD, now - e->x.up_total_ms);
            rtiming_add(r->timing, RT_TOTAL, now - e->t0);
        }
    }
    list_del(&r->storing, e);
    r->nstoring--;
    if (e->in_end) {
        r->in_pending--;
        r->in_bytes -= e->in_size;
    }
    r->stats.stored += e->outcome == 0;
    atomic_store(&r->loop_stored, r->stats.stored);
    r->stats.spilled += e->outcome == 1;
    r->stats.lost += e->outcome == 2;
    r->stats.in_log += e->outcome == 3;
    r->waited += e->outcome == 4;
    complete(r, e);
}

/* Methods whose request carries a Content-Length even when empty. */
static bool sends_length(const char *m)
{
    return !strcmp(m, "POST") || !strcmp(m, "PUT") || !strcmp(m, "PATCH");
}

static CURL *get_easy(struct record *r)
{
    if (r->npool)
        return r->pool[--r->npool];
    CURL *c = curl_easy_init();
    if (!c)
        abort();
    return c;
}

static void setup_easy(struct record *r, struct ex *e)
{
    CURL *c = e->easy = get_easy(r);
    const char *m = e->x.method;
    curl_easy_setopt(c, CURLOPT_URL, e->url);
    curl_easy_setopt(c, CURLOPT_PRIVATE, e);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->hdrs);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, e);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, e->curl_err);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, r->o.timeout_ms);
    if (r->o.cacert)
        curl_easy_setopt(c, CURLOPT_CAINFO, r->o.cacert);
    if (r->o.insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (e->head_req)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (e->body.len || sends_length(m)) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)e->body.len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                         e->body.data ? e->body.data : "");
    }
    if (strcmp(m, "GET") && strcmp(m, "POST") && strcmp(m, "HEAD"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, m);
    else if (!strcmp(m, "GET") && e->body.len)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "GET");
}

/* Our client: the request is built in one buffer (request line, Host, the
 * client's headers, Content-Length, then the body), handed to upclient,
 * which gives back an earlier request's buffer for the next one. */
static void send_upstream(struct record *r, struct ex *e,
                          const struct h1_req *q, const char *uri)
{
    struct buf *b = &r->wire;
    size_t ul = strlen(uri), n = 0, fields = 0;
    bool slash = uri[0] != '/';
    for (size_t i = 0; i < q->nheaders; i++)
        fields += q->headers[i].name_len + q->headers[i].value_len + 4;
    /* sized once for the whole request (the head is at most the request
     * line, Host, the client's fields and a Content-Length), then the
     * request line and Host in one go */
    buf_reset(b);
    buf_grow(b, q->method_len + 2 + r->up_prefix_len + ul + r->up_host_len +
                    fields + 40 + e->body.len);
    char *w = b->data;
    memcpy(w + n, q->method, q->method_len);
    n += q->method_len;
    w[n++] = ' ';
    memcpy(w + n, r->up_prefix, r->up_prefix_len);
    n += r->up_prefix_len;
    if (slash)
        w[n++] = '/';
    memcpy(w + n, uri, ul);
    n += ul;
    memcpy(w + n, r->up_host_line, r->up_host_len + 1);
    b->len = n + r->up_host_len;
    take_req_headers(e, q, b);
    if (e->body.len || sends_length(e->x.method)) {
        char digits[24], *d = digits + sizeof(digits);
        size_t v = e->body.len;
        do
            *--d = (char)('0' + v % 10);
        while (v /= 10);
        buf_adds(b, "Content-Length: ");
        buf_add(b, d, (size_t)(digits + sizeof(digits) - d));
        buf_add(b, "\r\n", 2);
    }
    buf_add(b, "\r\n", 2);
    buf_add(b, e->body.data, e->body.len);
    e->upq = upclient_send(r->upc, b, e->head_req, &UP_CBS, e, e->curl_err,
                           sizeof(e->curl_err));
    if (!e->upq)
        finish_as(e, XCHG_UPSTREAM_ERROR);
}

/* The request target as a path: an absolute-form target
 * ("http://host/path", RFC 9112 section 3.2.2) loses its scheme and
 * authority. */
static const char *origin_form(const char *t)
{
    if (t[0] == '/')
        return t; /* origin-form, the usual */
    const char *p = !strncasecmp(t, "http://", 7)    ? t + 7
                    : !strncasecmp(t, "https://", 8) ? t + 8
                                                     : NULL;
    if (!p)
        return t;
    p += strcspn(p, "/?");
    return *p ? p : "/";
}

/* front.c: a complete request from a client. */
static void on_request(void *ud, struct front_conn *c,
                       const struct front_req *fq)
{
    struct record *r = ud;
    const struct h1_req *q = fq->h;
    if (r->stopping) {
        send_json_error(c, 503, "unavailable", "fidelity record is stopping");
        return;
    }
    /* a compressed body is decoded now: past --max-body it is refused
     * like a body sent that large, before anything is forwarded */
    const char *coding = NULL;
    int ncodings = 0;
    for (size_t i = 0; i < q->nheaders; i++)
        if (q->headers[i].name_len == 16 &&
            name_is(q->headers[i].name, "content-encoding") && !ncodings++)
            coding = redact_coding(q->headers[i].value);
    struct buf plain = BUF_INIT;
    if (coding && ncodings == 1 && fq->body_len) {
        int rc = redact_inflate(fq->body, fq->body_len, coding, r->o.max_body,
                                &plain);
        if (rc == 1) {
            char msg[300];
            buf_release(&plain);
            snprintf(msg, sizeof(msg),
                     "the request body inflates (Content-Encoding: %s) to "
                     "more than --max-body (%zu bytes); nothing was "
                     "forwarded. Start record with a larger --max-body to let "
                     "it through",
                     coding, r->o.max_body);
            send_json_error(c, 413, "request_too_large", msg);
            return;
        }
        if (rc < 0) /* not compressed after all: kept, redacted, as sent */
            coding = NULL;
    } else {
        coding = NULL;
    }
    struct ex *e = ex_get(r);
    const char *uri = origin_form(q->target);
    e->plain = plain;
    e->coding = coding;

    e->r = r;
    e->fc = c;
    front_set_ud(c, e);
    e->head_req = front_is_head(c);
    e->t0 = now_ms();
    e->content_length = -1;
    buf_init(&e->body, 0);
    buf_init(&e->resp, r->o.max_capture);
    e->last_event_ms = -1;
    /* e->x is zeroed (ex_get): xchg_init's state */
    e->x.started = wall_s();
    e->x.method = xstrndup(q->method, q->method_len);
    e->x.path = redact_path(uri);
    size_t n = fq->body_len;
    buf_grow(&e->body, n);
    if (n)
        memcpy(e->body.data, fq->body, n);
    e->body.len = n;
    e->body.data[n] = '\0';
    list_add(&r->active, e);
    r->nactive++;
    if (r->upc) {
        send_upstream(r, e, q, uri);
        return;
    }
    take_req_headers(e, q, NULL);
    e->url = xasprintf("%s%s%s", r->upstream, uri[0] == '/' ? "" : "/", uri);
    setup_easy(r, e);
    curl_multi_add_handle(r->multi, e->easy);
}

/* ---- lifecycle ---- */

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    record_stop(arg);
}

static void on_front_log(void *ud, const char *msg)
{
    record_logf(ud, "%s", msg);
}

static const struct front_cbs FRONT_CBS = {
    .request = on_request, .gone = on_client_gone, .log = on_front_log};

static int setup_front(struct record *r, struct diag *d)
{
    struct front_opts fo = {
        .host = r->o.host,
        .port = r->o.port,
        .max_body = r->o.max_body,
        .header_ms = r->o.header_timeout_ms,
        .idle_ms = r->o.idle_timeout_ms,
        /* above the upstream timeout: a slow generation is not a stall */
        .stall_s = r->o.timeout_ms ? r->o.timeout_ms / 1000 + 60 : 24 * 3600,
        .max_conns = r->o.max_conns,
    };
    int rc = front_new(r->base, &fo, &FRONT_CBS, r, &r->front, d);
    if (rc)
        return rc;
    r->port = front_port(r->front);
    return 0;
}

/* Splits an http:// upstream URL for our client: false (libcurl
 * forwards) for https://, user info, or what does not parse. */
static bool split_http_url(struct record *r)
{
    if (strncmp(r->upstream, "http://", 7))
        return false;
    const char *a = r->upstream + 7;
    size_t al = strcspn(a, "/?#");
    if (!al || memchr(a, '@', al) || (a[al] && a[al] != '/'))
        return false;
    char *auth = xstrndup(a, al);
    char *host = auth, *port = NULL;
    if (auth[0] == '[') {
        char *close = strchr(auth, ']');
        if (!close || (close[1] && close[1] != ':')) {
            free(auth);
            return false;
        }
        port = close[1] ? close + 2 : NULL;
        host = xstrndup(auth, (size_t)(close + 1 - auth));
    } else {
        char *colon = strrchr(auth, ':');
        host = xstrndup(auth, colon ? (size_t)(colon - auth) : al);
        port = colon ? colon + 1 : NULL;
    }
    long pn = 80;
    if (port) {
        char *end;
        pn = strtol(port, &end, 10);
        if (end == port || *end || pn < 1 || pn > 65535) {
            free(host);
            free(auth);
            return false;
        }
    }
    r->upc = upclient_new(r->base, host, (int)pn, r->o.timeout_ms);
    r->up_authority = auth;
    r->up_prefix = xstrdup(a + al);
    r->up_prefix_len = strlen(r->up_prefix);
    r->up_host_line = xasprintf(" HTTP/1.1\r\nHost: %s\r\n", auth);
    r->up_host_len = strlen(r->up_host_line);
    free(host);
    return true;
}

int record_new(const struct record_opts *o, struct record **out, struct diag *d)
{
    struct record *r = xcalloc(1, sizeof(*r));
    int rc;

    *out = NULL;
    r->o = *o;
    r->wake[0] = r->wake[1] = -1;
    if (!r->o.max_capture)
        r->o.max_capture = (size_t)256 << 20;
    r->upstream = xstrdup(o->upstream);
    size_t ul = strlen(r->upstream);
    while (ul && r->upstream[ul - 1] == '/')
        r->upstream[--ul] = '\0';
    r->upstream_shown = url_mask(r->upstream);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* The epoll changelist folds the enable/disable pairs evhttp and the
     * curl socket callback make within one loop pass into at most one
     * epoll_ctl per descriptor (libevent retries a MOD on a descriptor that
     * was closed and reopened as an ADD). */
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
        r->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    r->multi = curl_multi_init();
    r->cache = xchg_cache_new();
    r->ing = ingest_new(r->cache, r->o.max_capture);
    if (o->timing)
        r->timing = rtiming_new();
    if (!r->base || !r->multi) {
        rc = diag_set(d, ENOMEM, "cannot create the event loop");
        goto fail;
    }
    r->timer = evtimer_new(r->base, on_timer, r);
    buf_init(&r->wire, 0);
    if (!o->via_libcurl)
        split_http_url(r);
    curl_multi_setopt(r->multi, CURLMOPT_SOCKETFUNCTION, curl_sock_cb);
    curl_multi_setopt(r->multi, CURLMOPT_SOCKETDATA, r);
    curl_multi_setopt(r->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(r->multi, CURLMOPT_TIMERDATA, r);
    curl_multi_setopt(r->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    /* keep upstream connections for as many clients as are likely to be
     * open at once; curl's default cache closes them under load */
    curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS, 1024L);
    rc = writer_open(r, d);
    if (rc)
        goto fail;
    rc = setup_front(r, d);
    if (rc || (rc = writer_start(r, d)))
        goto fail;
    if (o->handle_signals) {
        r->sig[0] = evsignal_new(r->base, SIGINT, on_signal, r);
        r->sig[1] = evsignal_new(r->base, SIGTERM, on_signal, r);
        event_add(r->sig[0], NULL);
        event_add(r->sig[1], NULL);
        signal(SIGPIPE, SIG_IGN);
        /* a file size limit (RLIMIT_FSIZE) is a full disk: the write
         * fails with EFBIG, and the exchange is spilled or kept */
        signal(SIGXFSZ, SIG_IGN);
    }
    *out = r;
    return 0;
fail:
    record_free(r);
    return rc;
}

int record_port(const struct record *r)
{
    return r->port;
}

void record_stop(struct record *r)
{
    if (r->stopping)
        return;
    r->stopping = 1;
    if (r->front)
        front_stop_accepting(r->front);
    struct timeval grace = {STOP_GRACE_S, 0};
    event_base_loopexit(r->base, &grace);
    proxy_maybe_exit(r);
}

int record_run(struct record *r, struct diag *d)
{
    if (event_base_dispatch(r->base) < 0)
        return diag_set(d, EIO, "event loop failed");
    return 0;
}

void record_get_stats(const struct record *r, struct record_stats *s)
{
    writer_stats(r, s);
}

uint64_t record_stored(const struct record *r)
{
    return atomic_load(&r->loop_stored) + atomic_load(&r->caught_stored);
}

void record_free(struct record *r)
{
    if (!r)
        return;
    r->stopping = 1;
    /* Exchanges still in flight are finished (stored) as their clients'
     * connections close. */
    for (struct ex *e = r->active; e; e = e->next) {
        e->fc = NULL;
        e->client_gone = true;
    }
    for (struct ex *e = r->storing; e; e = e->next)
        e->fc = NULL;
    front_free(r->front);
    r->front = NULL;
    while (r->active)
        finish(r->active, CURLE_OPERATION_TIMEDOUT);
    writer_free(r);      /* stores what is queued, completes it */
    while (r->storing) { /* the writer never started */
        struct ex *e = r->storing;
        list_del(&r->storing, e);
        ex_free(e);
    }
    while (r->spare) {
        struct ex *e = r->spare;
        r->spare = e->next;
        ex_free(e);
    }
    upclient_free(r->upc);
    free(r->up_authority);
    free(r->up_prefix);
    free(r->up_host_line);
    buf_release(&r->wire);
    for (int i = 0; i < r->npool; i++)
        curl_easy_cleanup(r->pool[i]);
    if (r->multi)
        curl_multi_cleanup(r->multi);
    for (int i = 0; i < 2; i++)
        if (r->sig[i])
            event_free(r->sig[i]);
    if (r->timer)
        event_free(r->timer);
    if (r->base)
        event_base_free(r->base);
    ingest_free(r->ing);
    rtiming_free(r->timing);
    xchg_cache_free(r->cache); /* finalizes its statements first */
    store_close(r->db);
    free(r->upstream);
    free(r->upstream_shown);
    free(r);
}
