/*
 * proxy: the event loop of `fidelity record`. Client side: front.c, record's
 * own HTTP/1.1 server (requests handed over whole, replies streamed with
 * front_start/front_body/front_end). Upstream side: for an
 * http:// upstream, upclient.c (bufferevents, a keep-alive pool, h1.c's
 * parser); for https://, a curl multi handle driven by libevent
 * (curl_multi_socket_action with one event per socket and one timer, the
 * pattern of curl's hiperfifo example). One struct ex follows an exchange
 * from the request callback to the moment it is stored and the client has
 * its last byte.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <curl/curl.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "record/front.h"
#include "record/record.h"
#include "record/redact.h"
#include "record/rtiming.h"
#include "record/upclient.h"
#include "store/classify.h"
#include "store/ingest.h"
#include "store/intake.h"
#include "wire/jscan.h"
#include "store/replay.h"
#include "wire/reply.h"
#include "wire/sse.h"
#include "store/store.h"
#include "store/xchg.h"

#define EASY_POOL 64
#define STOP_GRACE_S 5
#define BATCH_MAX 256
/* Under sustained load (the last batch held LINGER_FROM or more), the
 * writer waits up to LINGER_NS for LINGER_N exchanges before it takes the
 * queue: a transaction's own cost (about six fcntl locks on the WAL index,
 * the commit, the rewrite of the pages its rows share) is then shared by
 * more exchanges. A lone exchange, or light load, is never held for it. */
#define LINGER_FROM 8
#define LINGER_N 32
#define LINGER_NS 200000L
/* in flight at most, for an exchange to be stored on the loop's thread */
#define INLINE_MAX_ACTIVE 64
#define MEMO_SLOTS 64
/* finished exchanges kept for reuse (ex_get), with their client-side
 * buffers when these stay under SPARE_BUF_MAX */
#define SPARE_MAX 64
#define SPARE_BUF_MAX (16u << 10)

struct name_memo {
    char name[40];
    uint8_t len; /* name length + 1; 0: empty slot */
    bool secret;
};

struct ex;

struct record {
    struct record_opts o;
    char *upstream; /* without a trailing slash */
    struct event_base *base;
    struct front *front; /* the client side */
    int port;
    CURLM *multi;
    struct event *timer;
    struct event *sig[2];
    sqlite3 *db;
    struct xchg_cache *cache;
    /* builds each row from its exchange (store/ingest.h: classifies,
     * reassembles the reply); store_batch's, which runs on one thread at
     * a time */
    struct ingest *ing;
    struct ex *active;  /* in flight, doubly linked */
    struct ex *storing; /* finished, with the writer thread */
    struct ex *spare;   /* completed, for reuse (ex_get), linked by next */
    size_t nspare;
    size_t nactive, nstoring;
    /* The writer thread: parses requests, classifies and commits finished
     * exchanges in batches (one transaction each); the loop completes the
     * client side of each once it is stored. */
    pthread_t writer;
    bool writer_started;
    /* Hand-offs without a lock: a writer at SCHED_IDLE preempted inside
     * one would hold the loop up until it ran again. q_in: to store,
     * pushed by the loop (a stack, newest first; the writer takes it whole
     * and reverses it); q_n: pushed and not yet in a batch; d_in: stored,
     * pushed back by the writer (likewise). The writer sleeps on the
     * futex w_sleep until q_n reaches w_want (writer_wait). */
    _Atomic(struct ex *) q_in;
    atomic_size_t q_n;
    _Atomic(struct ex *) d_in;
    atomic_uint w_sleep;
    atomic_size_t w_want;
    atomic_bool quit;
    atomic_bool storing_now; /* store_batch is running, on either thread */
    struct event *done_ev;
    int wake[2]; /* writer -> loop: a byte per handed-back batch; a pipe
                  * rather than event_active keeps libevent lock-free */
    int stopping;
    struct record_stats stats;
    CURL *pool[EASY_POOL];
    int npool;
    /* http:// upstreams: our own client (NULL: libcurl forwards) */
    struct upc *upc;
    char *up_authority; /* host[:port] as in the URL, for Host */
    char *up_prefix;    /* path prefix of the URL, without trailing '/' */
    size_t up_prefix_len;
    /* " HTTP/1.1\r\nHost: <up_authority>\r\n", after the target */
    char *up_host_line;
    size_t up_host_len;
    struct buf wire; /* the request being built (upc_send swaps it) */
    struct name_memo memo[MEMO_SLOTS]; /* is_secret_memo() */
    /* the checkpointer thread and its own connection (checkpointer_*) */
    sqlite3 *ck_db;
    pthread_t ck_thread;
    bool ck_started, ck_due, ck_quit;
    pthread_mutex_t ck_mu;
    pthread_cond_t ck_cv;
    /* The intake log (intake.h; NULL: every exchange is held until it is
     * committed): exchanges appended to it are answered at once and
     * committed by the writer later. in_pending, in_bytes: how many of
     * those are not handed back yet, and their request and response bytes
     * (the loop's counts). mark_*: the frontier
     * the writer's batch moves (store_batch, on_intake_commit). */
    struct intake *intake;
    size_t in_pending, in_bytes;
    uint64_t mark_epoch, mark_off;
    bool mark_due; /* the batch being stored moves the frontier */
    /* the batch being stored and its results, for on_intake_commit, which
     * refuses to move the frontier past one of the log's exchanges that
     * failed (batch_refused): the batch is then stored one by one */
    struct ex **batch_ex;
    const int *batch_rcs;
    size_t batch_n;
    bool batch_refused;
    atomic_bool in_failed; /* an append failed: the log is not used */
    /* An exchange of the log could be neither stored nor spilled: the
     * frontier stays before it, and the writer leaves the later ones of
     * the log there too (outcome 3), for the next start to commit; the
     * log is neither emptied nor removed. Set by the writer. */
    atomic_bool log_stuck;
    bool idle_ok; /* the writer may leave SCHED_IDLE again (writer_main) */
};

struct sock {
    struct event ev; /* embedded: reassigned, never reallocated */
    short kind;      /* what ev waits for; 0: not added yet */
};

/* Where the events of a stream end (the HTML standard's event stream
 * grammar: a blank line ends an event, which counts when it had a data
 * field), for the gaps between them; the writer parses the stream. */
struct gap_scan {
    size_t len;   /* bytes of the current line so far */
    char head[5]; /* its first bytes */
    bool after_cr, has_data;
};

struct ex {
    struct record *r;
    struct ex *prev, *next;
    struct ex *wnext; /* writer queues */
    bool ct_json;     /* request Content-Type mentions json */
    const char *ct;   /* its Content-Type, during intake */
    /* 0 stored, 1 spilled, 2 lost, 3 left in the intake log for the next
     * start (neither stored nor spilled, past the frontier) */
    int outcome;
    struct front_conn *fc;   /* the client's connection; NULL once gone */
    bool head_req, finished; /* a HEAD request; finish_as() ran */
    CURL *easy;
    struct upc_req *upq; /* the upclient request, while in flight */
    int up_err;          /* how upclient ended it (upclient.h) */
    struct curl_slist *hdrs;
    char *url;
    struct buf body;
    struct xchg x;
    struct buf resp;
    bool resp_capped;
    struct gap_scan gs; /* event boundaries, for the gaps */
    double last_event_ms, max_gap_ms;
    bool headers_done, reply_started, client_gone;
    int status;
    char *reason; /* reason_in, or allocated when longer */
    char reason_in[32];
    struct hdrs resp_hl;    /* moved to x by fill_response */
    int64_t content_length; /* -1: none */
    int64_t forwarded;
    struct buf held; /* the end of a sized body, sent once stored */
    struct buf rh;   /* response header lines for the client */
    double t0, up_first, down_first;
    char curl_err[CURL_ERROR_SIZE];
    /* appended to the intake log (in_end: the offset after its record,
     * 0 when not) and already answered */
    uint64_t in_epoch, in_end;
    size_t in_size; /* its bytes in r->in_bytes */
    bool answered;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void logf_(struct record *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logf_(struct record *r, const char *fmt, ...)
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

/* is_secret_header() with a memo: the same few header names come with
 * every exchange, and the rule (a dozen substring searches on a lowered
 * copy) was most of the cost of copying headers. A direct-mapped table
 * keyed by the name's exact bytes; a collision only costs a recompute. */
static bool is_secret_memo(struct record *r, const char *name, size_t n)
{
    if (n >= sizeof(r->memo[0].name))
        return is_secret_header(name);
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
    m->secret = is_secret_header(name);
    return m->secret;
}

/* Adds a field to the store's copy, its value redacted when the name is
 * a secret's: the secret never reaches the list. name is NUL-terminated
 * after its nl bytes. */
static void hl_add(struct record *r, struct hdrs *hl, const char *name,
                   size_t nl, const char *value, size_t vl)
{
    if (is_secret_memo(r, name, nl))
        hdrs_add(hl, name, nl, REDACTED, sizeof(REDACTED) - 1);
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
    hdrs_reserve(hl, n, total + sizeof(REDACTED));
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

static void store_batch(struct record *r, struct ex **batch, size_t n);

/* Pushes e onto the stack *top (newest first), any thread. */
static void push(_Atomic(struct ex *) *top, struct ex *first, struct ex *last)
{
    struct ex *head = atomic_load(top);
    do
        last->wnext = head;
    while (!atomic_compare_exchange_weak(top, &head, first));
}

/* Takes the whole stack *top, oldest first. */
static struct ex *take_all(_Atomic(struct ex *) *top)
{
    struct ex *e = atomic_exchange(top, NULL), *fifo = NULL;
    while (e) {
        struct ex *next = e->wnext;
        e->wnext = fifo;
        fifo = e;
        e = next;
    }
    return fifo;
}

/* Hands stored exchanges back to the loop, in one push. */
static void handed_back(struct record *r, struct ex **batch, size_t n)
{
    for (size_t i = 1; i < n; i++)
        batch[i]->wnext = batch[i - 1];
    push(&r->d_in, batch[n - 1], batch[0]);
}

static void futex_wait(atomic_uint *a, unsigned val, const struct timespec *rel)
{
    syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, val, rel, NULL, 0);
}

/* Loop side: wakes the writer if it waits for at most n exchanges. */
static void wake_writer(struct record *r, size_t n)
{
    if (atomic_load(&r->w_sleep) && n >= atomic_load(&r->w_want)) {
        atomic_store(&r->w_sleep, 0);
        syscall(SYS_futex, &r->w_sleep, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* CPU time spent storing (store_batch, on either thread), in ns: the
 * storing load that decides where a lone exchange is stored. Process-wide;
 * one record per process outside the tests. */
static _Atomic uint64_t store_ns;

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Storing took more CPU than 1/INLINE_LOAD of the last LOAD_WINDOW_NS:
 * leave it to the writer thread, beside the loop. A tenth, not a fifth as
 * before: a saturated SSE run (64 connections, storing about 15 % of the
 * time) counted as light and stored nearly every exchange inline, one
 * transaction each (6 fcntl locks and the WAL frames of the pages it
 * touched, per exchange; 12 system calls per exchange on the loop's thread
 * instead of 6), while the writer would have taken them in batches. At
 * 1,000 requests/s storing is 2-3 % of the time, and an exchange is still
 * stored inline even when wrk's paced connections arrive together (which
 * counting the exchanges in flight instead did not allow). */
#define LOAD_WINDOW_NS 50000000u
#define INLINE_LOAD 10

/* Whether storing has been light lately (the loop's thread, per loop). */
static bool storing_light(void)
{
    static _Thread_local uint64_t win_start, win_stored;
    static _Thread_local bool heavy;
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (now - win_start >= LOAD_WINDOW_NS) {
        uint64_t s = atomic_load_explicit(&store_ns, memory_order_relaxed);
        heavy = (s - win_stored) * INLINE_LOAD > now - win_start;
        win_start = now;
        win_stored = s;
    }
    return !heavy;
}

/* Bytes of request and response above which an exchange is left to the
 * writer thread: storing it would hold up the other exchanges' forwarding
 * (a long session's 40 KB request costs about 0.5M instructions) */
#define INLINE_MAX_BYTES (64u << 10)

static void stored_back(struct record *r, struct ex *e, double now);
static void maybe_exit(struct record *r);

/* Stores a lone exchange on the loop's own thread when the writer is idle
 * with nothing queued, the exchange is small (INLINE_MAX_BYTES) and storing
 * has taken less than a fifth of the last 50 ms (storing_light): the writer
 * would take it alone anyway, and the two thread hand-offs (wake the writer,
 * wake the loop) are most of what a lone exchange waits for on a busy machine;
 * they also let exchanges pile up into batches whose last member waits for all
 * the others. Under load the writer thread does the work, in batches, beside
 * the loop. The client still gets its last byte only after the commit.
 *
 * Once stored, the exchange is completed here, directly, not through an
 * activated event (a loop pass later: about 0.4 ms at p99 on a busy
 * machine). That is safe from every caller of finish_as: upclient calls
 * its done callback last, with the request already freed and its
 * connection pooled or closed, and never from inside upc_send; curl's
 * results are read (check_done) outside its callbacks; front lets a
 * request be answered from inside its request callback and never calls
 * gone from inside a front_* call; and complete() touches only the
 * client's connection (front_*, which defers what follows a response to
 * the loop) and the exchange, which nothing up the stack uses after
 * finish_as. */
static bool store_inline(struct record *r, struct ex *e)
{
    bool mine;
    if (r->nactive > INLINE_MAX_ACTIVE ||
        e->body.len + e->x.resp_raw_len > INLINE_MAX_BYTES || !storing_light())
        return false;
    bool idle = false;
    mine = atomic_load(&r->q_n) == 0 &&
           atomic_compare_exchange_strong(&r->storing_now, &idle, true);
    if (!mine)
        return false;
    store_batch(r, &e, 1);
    if (rtiming_on())
        rtiming_add(RT_INLINE, 1);
    atomic_store(&r->storing_now, false);
    stored_back(r, e, rtiming_on() ? now_ms() : 0);
    maybe_exit(r);
    return true;
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

static const struct upc_cbs UP_CBS = {
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

static void maybe_exit(struct record *r)
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
    snprintf(msg, sizeof(msg), "fidelity record: upstream '%s' %s: %s",
             e->r->upstream, what,
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

static void enqueue(struct record *r, struct ex *e)
{
    push(&r->q_in, e, e);
    /* the writer waits for the first, or lingers for LINGER_N */
    wake_writer(r, atomic_fetch_add(&r->q_n, 1) + 1);
}

/* Exchanges past these wait for their commit as without the log: the
 * writer has fallen this far behind (memory), or the log is this long and
 * is emptied once they are all committed (on_stored). */
#define INTAKE_MAX_QUEUED 4096
#define INTAKE_MAX_BYTES ((size_t)64 << 20)
#define INTAKE_ROTATE ((uint64_t)64 << 20)

/* Appends e to the intake log: true when it is there (then the client may
 * have its end now), false when it must be held until committed. */
static bool intake_put(struct record *r, struct ex *e)
{
    struct intake *in = r->intake;
    size_t bytes = e->body.len + e->x.resp_raw_len;
    if (!in || r->in_failed || r->in_pending >= INTAKE_MAX_QUEUED ||
        r->in_bytes + bytes > INTAKE_MAX_BYTES || in->size >= INTAKE_ROTATE)
        return false;
    const struct xchg *x = &e->x;
    struct intake_rec ir = {
        .started = x->started,
        .up_ttfb_ms = x->up_ttfb_ms,
        .up_total_ms = x->up_total_ms,
        .down_ttfb_ms = x->down_ttfb_ms,
        .down_total_ms = x->down_total_ms,
        .max_gap_ms = e->max_gap_ms,
        .status = x->status,
        .end = (uint8_t)x->end,
        .streamed = x->streamed,
        .resp_capped = e->resp_capped,
        .ct_json = e->ct_json,
        .req_redacted = x->req_redacted,
        .method = x->method,
        .method_len = strlen(x->method),
        .path = x->path,
        .path_len = strlen(x->path),
        .req_hl = x->req_hl.b.data,
        .req_hl_len = x->req_hl.b.len,
        .req_hl_n = x->req_hl.n,
        .req_hl_set = x->req_hl.set,
        .resp_hl = x->resp_hl.b.data,
        .resp_hl_len = x->resp_hl.b.len,
        .resp_hl_n = x->resp_hl.n,
        .resp_hl_set = x->resp_hl.set,
        .body = e->body.data,
        .body_len = e->body.len,
        .resp = x->resp_raw,
        .resp_len = x->resp_raw_len,
    };
    int rc = intake_append(in, &ir, &e->in_end);
    if (rc) {
        logf_(r,
              "cannot append to the intake log '%s': %s; exchanges are "
              "now held until they are committed",
              in->path, strerror(-rc));
        r->in_failed = true;
        return false;
    }
    e->in_epoch = in->epoch;
    e->in_size = bytes;
    r->in_pending++;
    r->in_bytes += bytes;
    return true;
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
        upc_cancel(e->upq);
        e->upq = NULL;
    }
    e->x.end = end;
    /* the upstream has the request (upclient copied it, curl is done
     * with it): from here on the body is only kept, so its secrets go */
    e->x.req_redacted = redact_body(e->body.data, e->body.len, r->o.redact_keys,
                                    r->o.n_redact_keys) > 0;
    fill_response(e, t);
    r->stats.exchanges++;
    list_add(&r->storing, e);
    r->nstoring++;
    /* in the intake log or stored before the client sees the end:
     * complete() runs when the writer hands it back */
    if (!r->writer_started)
        return;
    double ta = rtiming_on() ? now_ms() : 0;
    if (intake_put(r, e)) {
        if (ta > 0) { /* the client's end waited for the append alone */
            double tb = now_ms();
            rtiming_add(RT_APPEND, tb - ta);
            rtiming_add(RT_HELD, tb - ta);
            rtiming_add(RT_TOTAL, tb - e->t0);
        }
        answer(e);
        enqueue(r, e);
    } else if (!store_inline(r, e)) {
        enqueue(r, e);
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

/* ---- the writer thread ---- */

/* Appends an exchange the store refused to the spill file: 1, or when
 * that fails too, 3 if in_log (it stays in the intake log, past the
 * frontier, for the next start), else 2 (lost). */
static int spill(struct record *r, struct ex *e, const char *why, bool in_log)
{
    struct diag sd = {{0}};
    logf_(r, "cannot store %s %s: %s; spilling to '%s'", e->x.method, e->x.path,
          why, r->o.spill_path);
    if (!xchg_spill_append(r->o.spill_path, &e->x, &sd))
        return 1;
    if (in_log) {
        if (!atomic_exchange(&r->log_stuck, true))
            logf_(r,
                  "exchange %s %s: %s; it stays in the intake log '%s', "
                  "with the exchanges after it, and the next start commits "
                  "them",
                  e->x.method, e->x.path, sd.msg, r->intake->path);
        return 3;
    }
    logf_(r, "exchange %s %s lost: %s", e->x.method, e->x.path, sd.msg);
    return 2;
}

/* Releases what the writer's work on e holds (its copy is stored,
 * spilled or left in the log), keeping how it ended and its timing
 * samples for the loop. */
static void writer_done(struct ex *e, bool timing)
{
    enum xchg_end end = e->x.end;
    double queued = e->x.up_total_ms;
    xchg_release(&e->x);
    e->x.end = end;
    e->x.up_total_ms = queued;
    e->x.down_total_ms = timing ? now_ms() : 0;
    buf_release(&e->body);
}

/* FIDELITY_RECORD_TIMING (rtiming.h): samples of a stored batch. Once
 * its row is written the exchange's xchg is released; its timing fields
 * then carry, until the loop completes it, when it was queued (up_total_ms)
 * and stored (down_total_ms), in now_ms() time. */
static void note_batch(struct ex **batch, size_t n, double t0, double t1,
                       double t2)
{
    for (size_t i = 0; i < n; i++) {
        struct xchg *x = &batch[i]->x;
        double queued = batch[i]->t0 + x->down_total_ms;
        rtiming_add(RT_WAIT, t0 - queued);
        rtiming_add(RT_BUILD, t1 - t0);
        rtiming_add(RT_PUT, t2 - t1);
        rtiming_add(RT_BATCH, (double)n);
        x->up_total_ms = queued;
    }
}

/* What the transaction storing batch[0..n) (results in rcs) does to the
 * intake log's frontier: it moves past the batch's last exchange of the
 * log (on_intake_commit). */
static void set_mark(struct record *r, struct ex **batch, size_t n,
                     const int *rcs)
{
    r->mark_due = false;
    for (size_t i = 0; i < n; i++)
        if (batch[i]->in_end) { /* the queue keeps the log's order */
            r->mark_epoch = batch[i]->in_epoch;
            r->mark_off = batch[i]->in_end;
            r->mark_due = true;
        }
    r->batch_ex = batch;
    r->batch_rcs = rcs;
    r->batch_n = n;
    r->batch_refused = false;
}

/* Parses, classifies and stores a batch; failures go to the spill file.
 * Once the log is stuck (log_stuck), its exchanges stay there. */
static void store_batch(struct record *r, struct ex **all, size_t nall)
{
    struct xchg *xs[BATCH_MAX];
    struct ex *batch[BATCH_MAX];
    int rcs[BATCH_MAX];
    struct diag d = {{0}};
    bool timing = rtiming_on();
    double t0 = timing ? now_ms() : 0, t1 = 0;
    uint64_t start_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    size_t n = 0;
    for (size_t i = 0; i < nall; i++) {
        if (all[i]->in_end && atomic_load(&r->log_stuck)) {
            all[i]->outcome = 3;
            writer_done(all[i], timing);
        } else {
            batch[n++] = all[i];
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct xchg *x = &batch[i]->x;
        struct ingest_src src = {
            .body = batch[i]->body.data,
            .body_len = batch[i]->body.len,
            .ct_json = batch[i]->ct_json,
            .resp_capped = batch[i]->resp_capped,
            .max_gap_ms = batch[i]->max_gap_ms,
        };
        ingest_build(r->ing, x, &src);
        xs[i] = x;
    }
    if (timing)
        t1 = now_ms();
    set_mark(r, batch, n, rcs);
    /* when the transaction did not commit, the frontier stayed before
     * the batch: an exchange of the log that cannot be spilled either is
     * still there for the next start. It commits only when every exchange
     * of the log in it was stored (on_intake_commit): else the batch is
     * stored again one by one, so that the frontier never passes an
     * exchange that is neither stored nor spilled. */
    bool rolled_back = n && xchg_put_batch(r->db, r->cache, xs, n, rcs, &d);
    if (timing)
        note_batch(batch, n, t0, t1, now_ms());
    bool one_by_one = rolled_back && r->batch_refused;
    for (size_t i = 0; i < n; i++) {
        struct ex *e = batch[i];
        bool in_log = e->in_end && rolled_back;
        struct diag d1 = {{0}};
        if (one_by_one && e->in_end && atomic_load(&r->log_stuck)) {
            e->outcome = 3; /* with the one before it */
            writer_done(e, timing);
            continue;
        }
        if (one_by_one) {
            set_mark(r, &batch[i], 1, &rcs[i]);
            bool back =
                xchg_put_batch(r->db, r->cache, &xs[i], 1, &rcs[i], &d1);
            in_log = e->in_end && back;
        }
        e->outcome =
            rcs[i] ? spill(r, e, one_by_one ? d1.msg : d.msg, in_log) : 0;
        /* free the recorded copy here, off the forwarding loop; the loop
         * needs only how it ended (and the timing samples) */
        writer_done(e, timing);
    }
    atomic_fetch_add_explicit(&store_ns,
                              clock_ns(CLOCK_THREAD_CPUTIME_ID) - start_ns,
                              memory_order_relaxed);
}

/* xchg_put_batch's last statement in each transaction: the intake log's
 * frontier moves past the batch's last exchange from the log. */
static int on_intake_commit(sqlite3 *db, void *ud)
{
    struct record *r = ud;
    if (!r->mark_due)
        return SQLITE_OK;
    /* an exchange of the log the store refused: committing would move the
     * frontier past it, and were the spill file to fail too it would be
     * lost; the batch is stored again one by one (store_batch) */
    for (size_t i = 0; i < r->batch_n; i++)
        if (r->batch_rcs[i] && r->batch_ex[i]->in_end) {
            r->batch_refused = true;
            return SQLITE_ABORT;
        }
    return intake_mark(r->intake, db, r->mark_epoch, r->mark_off);
}

/* Writer side: waits until want exchanges are queued, quit, or (ns > 0)
 * ns nanoseconds have passed. w_sleep is set before q_n is read, and the
 * loop adds to q_n before it reads w_sleep (all sequentially consistent),
 * so one of the two sees the other: no wake-up is lost. */
static void writer_wait(struct record *r, size_t want, long ns)
{
    uint64_t end = ns > 0 ? clock_ns(CLOCK_MONOTONIC) + (uint64_t)ns : 0;
    atomic_store(&r->w_want, want);
    for (;;) {
        atomic_store(&r->w_sleep, 1);
        if (atomic_load(&r->q_n) >= want || atomic_load(&r->quit))
            break;
        struct timespec rel, *relp = NULL;
        if (end) {
            uint64_t now = clock_ns(CLOCK_MONOTONIC);
            if (now >= end)
                break;
            rel.tv_sec = (time_t)((end - now) / 1000000000u);
            rel.tv_nsec = (long)((end - now) % 1000000000u);
            relp = &rel;
        }
        futex_wait(&r->w_sleep, 1, relp);
    }
    atomic_store(&r->w_sleep, 0);
}

/* With the intake log, no client waits for the writer, which then runs at
 * SCHED_IDLE while it keeps up: its work yields to the loop, the upstream
 * and the clients on a busy machine (their p99 is the cost of anything
 * running beside them). When WRITER_BEHIND exchanges wait, or once the log
 * is off, it runs as any thread again, until fewer than WRITER_CAUGHT_UP
 * wait. A thread can leave SCHED_IDLE only with CAP_SYS_NICE or an
 * RLIMIT_NICE of 20 (sched(7)); without them the writer runs at
 * SCHED_BATCH instead, whose wake-ups do not preempt the loop. */
#define WRITER_BEHIND 256
#define WRITER_CAUGHT_UP 32

static bool can_leave_idle(void)
{
    struct rlimit rl;
    return geteuid() == 0 ||
           (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 20);
}

static void writer_policy(struct record *r, bool *idle, size_t waiting)
{
    struct sched_param sp = {0};
    bool want = r->idle_ok && !atomic_load(&r->in_failed) &&
                waiting < (*idle ? WRITER_BEHIND : WRITER_CAUGHT_UP);
    if (want != *idle &&
        !pthread_setschedparam(pthread_self(), want ? SCHED_IDLE : SCHED_OTHER,
                               &sp))
        *idle = want;
}

static void *writer_main(void *arg)
{
    struct record *r = arg;
    struct ex *batch[BATCH_MAX];
    size_t last = 0;
    bool idle = false;
    if (r->intake && !r->idle_ok) {
        struct sched_param sp = {0};
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    }
    struct ex *head = NULL, *tail = NULL; /* taken from q_in, in order */
    for (;;) {
        size_t n = 0;
        if (!head)
            writer_wait(r, 1, 0);
        if (last >= LINGER_FROM)
            writer_wait(r, LINGER_N, LINGER_NS);
        for (struct ex *e = take_all(&r->q_in); e; e = e->wnext) {
            if (tail)
                tail->wnext = e;
            else
                head = e;
            tail = e;
        }
        while (head && n < BATCH_MAX) {
            batch[n++] = head;
            head = head->wnext;
        }
        if (!head)
            tail = NULL;
        last = n;
        size_t waiting = atomic_fetch_sub(&r->q_n, n);
        if (r->intake)
            writer_policy(r, &idle, waiting);
        if (!n) {
            if (atomic_load(&r->quit))
                break; /* quit with an empty queue */
            continue;
        }
        /* the loop may be storing a lone exchange (store_inline) */
        for (bool no = false;
             !atomic_compare_exchange_weak(&r->storing_now, &no, true);
             no = false)
            sched_yield();
        store_batch(r, batch, n);
        for (size_t i = 0; i < n && rtiming_on(); i++)
            rtiming_add(RT_INLINE, 0);
        atomic_store(&r->storing_now, false);
        handed_back(r, batch, n);
        if (write(r->wake[1], "x", 1) < 0) {
            /* full pipe: the loop has wake-ups pending already */
        }
    }
    return NULL;
}

/* Loop side: a stored (or spilled) exchange is counted and its client
 * answered; now is now_ms() when timing, else 0. */
static void stored_back(struct record *r, struct ex *e, double now)
{
    if (now > 0) { /* see note_batch */
        rtiming_add(RT_BACK, now - e->x.down_total_ms);
        if (!e->in_end) { /* else answered at its append (finish_as) */
            rtiming_add(RT_HELD, now - e->x.up_total_ms);
            rtiming_add(RT_TOTAL, now - e->t0);
        }
    }
    list_del(&r->storing, e);
    r->nstoring--;
    if (e->in_end) {
        r->in_pending--;
        r->in_bytes -= e->in_size;
    }
    r->stats.stored += e->outcome == 0;
    r->stats.spilled += e->outcome == 1;
    r->stats.lost += e->outcome == 2;
    r->stats.in_log += e->outcome == 3;
    complete(r, e);
}

/* Loop side: exchanges the writer has stored (or spilled). */
static void on_stored(evutil_socket_t fd, short what, void *arg)
{
    struct record *r = arg;
    char drain[256];
    (void)what;
    /* a short read emptied the pipe: no second read to learn EAGAIN */
    while (fd >= 0 && read(fd, drain, sizeof(drain)) == (ssize_t)sizeof(drain))
        ;
    struct ex *e = take_all(&r->d_in);
    double now = rtiming_on() ? now_ms() : 0;
    while (e) {
        struct ex *next = e->wnext;
        stored_back(r, e, now);
        e = next;
    }
    /* a long log is emptied once all it holds is committed; exchanges
     * wait for their commit meanwhile (intake_put) */
    if (r->intake && !r->in_failed && !r->in_pending &&
        !atomic_load(&r->log_stuck) && r->intake->size >= INTAKE_ROTATE) {
        struct diag d = {{0}};
        if (intake_reset(r->intake, &d)) {
            logf_(r, "%s; exchanges are now held until they are committed",
                  d.msg);
            r->in_failed = true;
        }
    }
    if (fd < 0 && rtiming_on()) /* the last call, from writer_stop */
        rtiming_report(r->o.log, r->o.log_ud);
    maybe_exit(r);
}

static void writer_stop(struct record *r)
{
    if (!r->writer_started)
        return;
    atomic_store(&r->quit, true);
    atomic_store(&r->w_want, 0);
    wake_writer(r, 0);
    pthread_join(r->writer, NULL);
    r->writer_started = false;
    on_stored(-1, 0, r);
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
    e->upq = upc_send(r->upc, b, e->head_req, &UP_CBS, e, e->curl_err,
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
    struct ex *e = ex_get(r);
    const char *uri = origin_form(q->target);

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

/* ---- the checkpointer ----
 *
 * In WAL mode a commit appends to the WAL without fsync (synchronous=
 * NORMAL); SQLite's automatic checkpoint then runs inside the commit that
 * crosses 1,000 WAL pages, copying pages into the database and fsyncing
 * it: milliseconds during which every exchange waiting for its commit (and
 * so its client's last byte) waits too. Instead, the writer's commit hook
 * only signals a thread that checkpoints on its own connection (PASSIVE:
 * it never blocks the writer), so commits never wait for a disk flush.
 * Durability is unchanged: what a commit wrote is in the WAL either way. */
#define CKPT_PAGES 1000

static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct record *r = arg;
    (void)db;
    (void)name;
    if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&r->ck_mu);
        r->ck_due = true;
        pthread_cond_signal(&r->ck_cv);
        pthread_mutex_unlock(&r->ck_mu);
    }
    return SQLITE_OK;
}

static void *checkpointer_main(void *arg)
{
    struct record *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->ck_mu);
        while (!r->ck_due && !r->ck_quit)
            pthread_cond_wait(&r->ck_cv, &r->ck_mu);
        bool quit = r->ck_quit;
        r->ck_due = false;
        pthread_mutex_unlock(&r->ck_mu);
        if (quit)
            break;
        sqlite3_wal_checkpoint_v2(r->ck_db, NULL, SQLITE_CHECKPOINT_PASSIVE,
                                  NULL, NULL);
    }
    return NULL;
}

/* Starts the checkpointer; when it cannot (a second connection fails),
 * SQLite's automatic checkpoints stay on. */
static void checkpointer_start(struct record *r)
{
    struct diag d = {{0}};
    if (store_open(r->o.db_path, &r->ck_db, &d))
        return;
    pthread_mutex_init(&r->ck_mu, NULL);
    pthread_cond_init(&r->ck_cv, NULL);
    if (pthread_create(&r->ck_thread, NULL, checkpointer_main, r)) {
        pthread_mutex_destroy(&r->ck_mu);
        pthread_cond_destroy(&r->ck_cv);
        store_close(r->ck_db);
        r->ck_db = NULL;
        return;
    }
    pthread_setname_np(r->ck_thread, "record-ckpt");
    r->ck_started = true;
    /* replaces the automatic checkpoint, which is itself a WAL hook */
    sqlite3_wal_hook(r->db, on_wal_commit, r);
}

static void checkpointer_stop(struct record *r)
{
    if (!r->ck_started)
        return;
    pthread_mutex_lock(&r->ck_mu);
    r->ck_quit = true;
    pthread_cond_signal(&r->ck_cv);
    pthread_mutex_unlock(&r->ck_mu);
    pthread_join(r->ck_thread, NULL);
    store_close(r->ck_db);
    r->ck_db = NULL;
    pthread_mutex_destroy(&r->ck_mu);
    pthread_cond_destroy(&r->ck_cv);
    r->ck_started = false;
}

static int open_store(struct record *r, struct diag *d)
{
    /* one thread at a time: the writer, or the loop for a lone exchange
     * (store_inline), ordered by the atomic storing_now */
    int rc = store_open_unshared(r->o.db_path, &r->db, d);
    if (rc)
        return rc;
    /* A locked store must not stall the proxy: fail fast and spill. */
    sqlite3_busy_timeout(r->db, 200);
    rc = xchg_schema(r->db, d);
    if (rc) {
        diag_prefix(d, "'%s'", r->o.db_path);
        return rc;
    }
    return 0;
}

/* ---- the intake log ---- */

/* Opens r's intake log and commits what it holds. Without a log (another
 * record holds it, or it cannot be opened) exchanges are held until they
 * are committed, as before the log: a log line says so. -1 with d set when
 * what the log holds cannot be committed. */
static int open_intake(struct record *r, struct diag *d)
{
    struct diag od = {{0}};
    int rc = intake_schema(r->db, d);
    if (rc)
        return rc;
    rc = intake_open(r->o.db_path, &r->intake, &od);
    if (rc) {
        logf_(r, "%s; exchanges are held until they are committed",
              rc == 1 ? "the intake log is locked by another fidelity record"
                      : od.msg);
        return 0;
    }
    /* what a record that did not stop left in it (store/replay.h) */
    struct replay_counts k;
    rc = replay_log(r->db, r->cache, r->ing, r->intake, r->o.spill_path, &k, d);
    if (k.stored || k.spilled || k.kept || k.torn)
        logf_(r,
              "intake log '%s': %llu exchange%s a record that did not stop "
              "left %s committed (%llu to the spill file, %llu kept in the "
              "log); %llu bytes of an unfinished append ignored",
              r->intake->path, (unsigned long long)k.stored, plural_s(k.stored),
              plural(k.stored, "was", "were"), (unsigned long long)k.spilled,
              (unsigned long long)k.kept, (unsigned long long)k.torn);
    if (rc) {
        intake_close(r->intake, false);
        r->intake = NULL;
        return -1;
    }
    xchg_cache_pre_commit(r->cache, on_intake_commit, r);
    r->idle_ok = can_leave_idle();
    return 0;
}

static void on_front_log(void *ud, const char *msg)
{
    logf_(ud, "%s", msg);
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
    r->upc = upc_new(r->base, host, (int)pn, r->o.timeout_ms);
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
    rc = open_store(r, d);
    if (rc || (rc = open_intake(r, d)))
        goto fail;
    rc = setup_front(r, d);
    if (rc)
        goto fail;
    if (pipe(r->wake)) {
        rc = diag_set(d, errno, "cannot create a pipe: %s", strerror(errno));
        goto fail;
    }
    evutil_make_socket_nonblocking(r->wake[0]);
    evutil_make_socket_nonblocking(r->wake[1]);
    r->done_ev =
        event_new(r->base, r->wake[0], EV_READ | EV_PERSIST, on_stored, r);
    event_add(r->done_ev, NULL);
    checkpointer_start(r); /* before the writer uses the connection */
    if (pthread_create(&r->writer, NULL, writer_main, r)) {
        rc = diag_set(d, EAGAIN, "cannot start the store writer thread");
        goto fail;
    }
    r->writer_started = true;
    /* named, so that CPU time per thread can be told apart
     * (/proc/PID/task/TID/comm; bench/record.sh) */
    pthread_setname_np(r->writer, "record-writer");
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
    maybe_exit(r);
}

int record_run(struct record *r, struct diag *d)
{
    if (event_base_dispatch(r->base) < 0)
        return diag_set(d, EIO, "event loop failed");
    return 0;
}

void record_get_stats(const struct record *r, struct record_stats *s)
{
    *s = r->stats;
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
    writer_stop(r); /* stores what is queued, completes it */
    checkpointer_stop(r);
    /* all it held is committed or in the spill file, unless exchanges
     * were left in it for the next start */
    intake_close(r->intake, r->stats.in_log == 0 && r->stats.lost == 0);
    r->intake = NULL;
    while (r->storing) { /* the writer never started */
        struct ex *e = r->storing;
        list_del(&r->storing, e);
        ex_free(e);
    }
    if (r->done_ev)
        event_free(r->done_ev);
    if (r->wake[0] >= 0) {
        close(r->wake[0]);
        close(r->wake[1]);
    }
    while (r->spare) {
        struct ex *e = r->spare;
        r->spare = e->next;
        ex_free(e);
    }
    upc_free(r->upc);
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
    xchg_cache_free(r->cache); /* finalizes its statements first */
    store_close(r->db);
    free(r->upstream);
    free(r);
}
