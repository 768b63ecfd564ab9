/*
 * server: the simulator's HTTP front on libevent's evhttp. It turns each
 * request into a struct sim_req, calls sim_handle(), and sends the answer:
 * at once, after --latency-ms, or as an SSE stream paced by
 * --token-interval-ms and cut after --cut-stream-after bytes. With
 * --batch-variance, model requests wait --batch-window-ms and are served
 * together as one batch.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/xalloc.h"
#include "sim/method.h"
#include "sim/sim.h"

struct server {
    struct sim *sim;
    struct event_base *base;
    struct evhttp *http;
    struct out **batch; /* model requests waiting for the batch window */
    size_t nbatch, batch_cap;
    struct event *batch_ev;
    unsigned running; /* model requests not yet fully answered */
};

/* One request from arrival to the last byte of its answer. Freed when the
 * answer is complete or the connection closes, whichever comes first. */
struct out {
    struct server *srv;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    char method[16];
    char *path;
    char *body;
    size_t len;
    struct sim_resp resp;
    struct event *timer;
    size_t next;   /* next SSE event */
    long sent;     /* SSE body bytes sent */
    bool watching; /* close callback installed */
    bool model;    /* counted in srv->running */
};

static void out_free(struct out *o)
{
    if (o->model)
        o->srv->running--;
    if (o->watching && o->conn)
        evhttp_connection_set_closecb(o->conn, NULL, NULL);
    if (o->timer)
        event_free(o->timer);
    sim_resp_release(&o->resp);
    free(o->path);
    free(o->body);
    free(o);
}

static void on_conn_close(struct evhttp_connection *conn, void *arg)
{
    struct out *o = arg;
    (void)conn;
    /* When the client went away mid-answer, libevent 2.1 detaches the
     * unfinished request from the connection and leaves it to us; when the
     * server itself shuts down, the request is still attached and libevent
     * frees it after this callback. */
    if (!evhttp_request_get_connection(o->req))
        evhttp_request_free(o->req);
    o->watching = false; /* the connection and request are going away */
    o->conn = NULL;
    struct server *srv = o->srv;
    for (size_t i = 0; i < srv->nbatch; i++)
        if (srv->batch[i] == o)
            srv->batch[i] = NULL;
    out_free(o);
}

static void watch(struct out *o)
{
    if (o->watching)
        return;
    o->conn = evhttp_request_get_connection(o->req);
    evhttp_connection_set_closecb(o->conn, on_conn_close, o);
    o->watching = true;
}

static void send_events(struct out *o);

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    send_events(arg);
}

static void arm(struct out *o, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (!o->timer)
        o->timer = evtimer_new(o->srv->base, on_timer, o);
    watch(o);
    evtimer_add(o->timer, &tv);
}

static void on_cut_flushed(struct evhttp_connection *conn, void *arg)
{
    (void)arg;
    struct bufferevent *bev = evhttp_connection_get_bufferevent(conn);
    shutdown(bufferevent_getfd(bev), SHUT_RDWR);
}

/* Sends the whole JSON answer, or the stream head, or the next events. */
static void send_events(struct out *o)
{
    struct sim_resp *r = &o->resp;
    struct evkeyvalq *h = evhttp_request_get_output_headers(o->req);
    if (!r->stream) {
        struct evbuffer *b = evbuffer_new();
        if (!r->ctype || *r->ctype)
            evhttp_add_header(h, "Content-Type",
                              r->ctype ? r->ctype : "application/json");
        evbuffer_add(b, buf_str(&r->body), r->body.len);
        evhttp_send_reply(o->req, r->status, r->reason, b);
        evbuffer_free(b);
        out_free(o);
        return;
    }
    if (o->next == 0 && o->sent == 0 && !o->method[15]) {
        o->method[15] = 1; /* head sent */
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(o->req, 200, "OK");
    }
    /* one chunk per event, as servers stream; evhttp drains b each time */
    struct evbuffer *b = evbuffer_new();
    while (o->next < r->nevents) {
        const char *ev = r->events[o->next++];
        long n = (long)strlen(ev);
        if (r->cut_after > 0 && o->sent + n > r->cut_after) {
            evbuffer_add(b, ev, (size_t)(r->cut_after - o->sent));
            watch(o);
            evhttp_send_reply_chunk_with_cb(o->req, b, on_cut_flushed, o);
            evbuffer_free(b);
            return; /* the close callback frees o */
        }
        evbuffer_add(b, ev, (size_t)n);
        evhttp_send_reply_chunk(o->req, b);
        o->sent += n;
        if (r->interval_ms > 0 && o->next < r->nevents) {
            evbuffer_free(b);
            arm(o, r->interval_ms);
            return;
        }
    }
    evbuffer_free(b);
    evhttp_send_reply_end(o->req);
    out_free(o);
}

static void process(struct out *o, unsigned batch)
{
    struct sim_req rq = {o->method, o->path,
                         o->body,   o->len,
                         batch,     o->srv->running - (o->model ? 1u : 0u)};
    sim_handle(o->srv->sim, &rq, &o->resp);
    if (o->resp.latency_ms > 0)
        arm(o, o->resp.latency_ms);
    else
        send_events(o);
}

static void on_batch(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;
    (void)fd;
    (void)what;
    size_t n = srv->nbatch, live = 0;
    struct out **list = srv->batch;
    srv->batch = NULL;
    srv->nbatch = srv->batch_cap = 0;
    for (size_t i = 0; i < n; i++)
        live += list[i] != NULL;
    for (size_t i = 0; i < n; i++)
        if (list[i])
            process(list[i], (unsigned)live);
    free(list);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct server *srv = arg;
    struct out *o = xcalloc(1, sizeof(*o));
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    o->srv = srv;
    o->req = req;
    snprintf(o->method, 15, "%s",
             sim_method_name(evhttp_request_get_command(req)));
    o->path = xstrdup(path && *path ? path : "/");
    o->len = evbuffer_get_length(in);
    o->body = xmalloc(o->len + 1);
    evbuffer_remove(in, o->body, o->len);
    o->body[o->len] = '\0';
    sim_resp_init(&o->resp);
    o->model = sim_is_model_path(o->path);
    srv->running += o->model;
    if (srv->sim->cfg.batch_variance > 0 && o->model) {
        if (srv->nbatch == srv->batch_cap) {
            srv->batch_cap = srv->batch_cap ? srv->batch_cap * 2 : 16;
            srv->batch =
                xrealloc(srv->batch, srv->batch_cap * sizeof(*srv->batch));
        }
        srv->batch[srv->nbatch++] = o;
        watch(o);
        if (srv->nbatch == 1) {
            long ms = srv->sim->cfg.batch_window_ms;
            struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
            evtimer_add(srv->batch_ev, &tv);
        }
        return;
    }
    process(o, 1);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

int sim_serve(struct sim *s, const char *host, int port,
              void (*on_ready)(int port, void *ud), void *ud, struct diag *d)
{
    struct server srv = {.sim = s};
    int ret = 0;
    signal(SIGPIPE, SIG_IGN);
    srv.base = event_base_new();
    srv.http = evhttp_new(srv.base);
    /* an answer without a Content-Type (the flush endpoints) stays so */
    evhttp_set_default_content_type(srv.http, NULL);
    evhttp_set_allowed_methods(
        srv.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                      EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                      EVHTTP_REQ_PATCH);
    /* Bodies up to twice the cap are read so that sim_handle can answer
     * 413 in the OpenAI shape; beyond that evhttp refuses on its own. */
    evhttp_set_max_body_size(srv.http,
                             (ev_ssize_t)(2 * s->cfg.max_body + 65536));
    evhttp_set_timeout(srv.http, 300);
    evhttp_set_gencb(srv.http, on_request, &srv);
    srv.batch_ev = evtimer_new(srv.base, on_batch, &srv);
    struct evhttp_bound_socket *bs =
        evhttp_bind_socket_with_handle(srv.http, host, (ev_uint16_t)port);
    if (!bs) {
        ret = diag_set(d, EADDRINUSE, "cannot listen on %s:%d: %s", host, port,
                       strerror(errno ? errno : EADDRINUSE));
        goto out;
    }
    /* accepted sockets inherit TCP_NODELAY on Linux: without it the tail
     * of a large answer waits for the client's delayed ACK (40 ms), as no
     * serving engine's answers do */
    int one = 1;
    setsockopt(evhttp_bound_socket_get_fd(bs), IPPROTO_TCP, TCP_NODELAY, &one,
               sizeof(one));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl);
    int bound = ss.ss_family == AF_INET6
                    ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                    : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    struct event *si = evsignal_new(srv.base, SIGINT, on_signal, srv.base);
    struct event *st = evsignal_new(srv.base, SIGTERM, on_signal, srv.base);
    event_add(si, NULL);
    event_add(st, NULL);
    on_ready(bound, ud);
    event_base_dispatch(srv.base);
    event_free(si);
    event_free(st);
out:
    event_free(srv.batch_ev);
    evhttp_free(srv.http);
    event_base_free(srv.base);
    free(srv.batch);
    return ret;
}
