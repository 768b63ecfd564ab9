/*
 * bench/pace.c: an open-loop load generator that drives several targets
 * at the same time, with requests to each arriving at random (a Poisson
 * process of RATE requests/s per target), and prints each target's
 * latency percentiles.
 *
 * Why not wrk, one target after the other: on the development machine the
 * CPU itself slows down several times over for windows of one to tens of
 * milliseconds, tens of times a second (docs/PERFORMANCE.md, "Measuring
 * the p99 added"). A p99 is made of such windows, so the p99s of two runs
 * a few seconds apart differ by more than a proxy adds. Driven together,
 * with their arrivals mixed at random, the targets meet the same windows
 * and their p99s can be compared: a difference is what the path adds.
 * One thread and one libevent loop send all requests; each connection has
 * at most one request in flight (HTTP/1.1 keep-alive, no pipelining).
 * Latency runs from the request handed to the connection to the last byte
 * of the answer read (as wrk measures it). An arrival that finds every
 * connection of its target busy waits for one, and is counted as late.
 *
 *   pace --rate 1000 --duration 10 --conns 8 --body req.json \
 *        [--header 'Authorization: Bearer x'] [--warmup 1] [--raw FILE] \
 *        direct=http://127.0.0.1:8000/v1/chat/completions \
 *        record=http://127.0.0.1:8001/v1/chat/completions
 *
 * Prints one line per target:
 *   NAME n=N err=E late=L p50=MS p90=MS p99=MS p99.9=MS max=MS
 * Exit status: 0, 2 on bad arguments, 1 when a target answered nothing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#define MAX_TARGETS 8
#define MAX_HEADERS 16

struct conn {
    struct target *t;
    struct evhttp_connection *evcon;
    double sent; /* us, CLOCK_MONOTONIC */
    struct conn *next_idle;
};

struct target {
    const char *name;
    char host[256];
    int port;
    char path[1024];
    struct conn *conns, *idle;
    long waiting; /* arrivals waiting for a connection */
    double *lat;  /* us */
    long n, cap, err, late;
    double next; /* next arrival, us */
};

static struct event_base *base;
static struct target targets[MAX_TARGETS];
static int ntargets;
static const char *headers[MAX_HEADERS];
static int nheaders;
static char *body;
static size_t body_len;
static double rate = 1000, duration = 10, warmup = 1, t_start, t_rec, t_end;
static int nconns = 8;
static FILE *raw;
static struct event *tick;
static unsigned long long rng = 0x9e3779b97f4a7c15ULL;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* xorshift64*: the arrivals need to be random, not good */
static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static double exp_gap_us(void)
{
    return -log(1.0 - uniform()) * 1e6 / rate;
}

static void send_one(struct conn *c);
static long inflight;

static void on_done(struct evhttp_request *req, void *arg)
{
    struct conn *c = arg;
    struct target *t = c->t;
    double now = now_us();
    inflight--;
    int ok = req && evhttp_request_get_response_code(req) == 200;
    if (c->sent >= t_rec && c->sent < t_end) {
        if (!ok) {
            t->err++;
        } else {
            if (t->n == t->cap) {
                t->cap = t->cap ? 2 * t->cap : 4096;
                t->lat = realloc(t->lat, (size_t)t->cap * sizeof(*t->lat));
                if (!t->lat) {
                    fprintf(stderr, "pace: out of memory\n");
                    exit(1);
                }
            }
            t->lat[t->n++] = now - c->sent;
            if (raw)
                fprintf(raw, "%s %.1f %.1f\n", t->name, c->sent - t_start,
                        now - c->sent);
        }
    }
    if (t->waiting > 0) {
        t->waiting--;
        send_one(c);
        return;
    }
    c->next_idle = t->idle;
    t->idle = c;
    /* after the end, the last answers are waited for: a slow one is not
     * left out */
    if (now >= t_end && inflight == 0)
        event_base_loopexit(base, NULL);
}

static void send_one(struct conn *c)
{
    struct target *t = c->t;
    struct evhttp_request *req = evhttp_request_new(on_done, c);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char hostport[300];
    snprintf(hostport, sizeof(hostport), "%s:%d", t->host, t->port);
    evhttp_add_header(h, "Host", hostport);
    evhttp_add_header(h, "Content-Type", "application/json");
    for (int i = 0; i < nheaders; i++) {
        char k[256];
        const char *colon = strchr(headers[i], ':');
        size_t kl = (size_t)(colon - headers[i]);
        memcpy(k, headers[i], kl);
        k[kl] = '\0';
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        evhttp_add_header(h, k, v);
    }
    evbuffer_add(evhttp_request_get_output_buffer(req), body, body_len);
    c->sent = now_us();
    inflight++;
    if (evhttp_make_request(c->evcon, req, EVHTTP_REQ_POST, t->path) != 0) {
        fprintf(stderr, "pace: cannot send to %s\n", t->name);
        exit(1);
    }
}

static void arrive(struct target *t, double now)
{
    if (now >= t_rec && now < t_end && !t->idle)
        t->late++;
    if (!t->idle) {
        t->waiting++;
        return;
    }
    struct conn *c = t->idle;
    t->idle = c->next_idle;
    send_one(c);
}

/* The arrival clock: a timer set to the earliest next arrival. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    double now = now_us();
    if (now >= t_end) {
        for (int i = 0; i < ntargets; i++)
            targets[i].waiting = 0;
        if (inflight == 0)
            event_base_loopexit(base, NULL);
        else {
            struct timeval cap = {30, 0};
            event_base_loopexit(base, &cap);
        }
        return;
    }
    /* the arrivals due, in the order they were due: when the timer fires
     * late (a slow window), no target goes first by its place in the list */
    double next;
    for (;;) {
        struct target *first = &targets[0];
        for (int i = 1; i < ntargets; i++)
            if (targets[i].next < first->next)
                first = &targets[i];
        next = first->next;
        if (next > now)
            break;
        arrive(first, now);
        first->next += exp_gap_us();
    }
    if (next > t_end)
        next = t_end;
    double wait = next - now_us();
    if (wait < 0)
        wait = 0;
    struct timeval tv = {(long)(wait / 1e6), (long)fmod(wait, 1e6)};
    evtimer_add(tick, &tv);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const struct target *t, double p)
{
    long i = (long)ceil(p / 100.0 * (double)t->n) - 1;
    if (i < 0)
        i = 0;
    return t->lat[i] / 1e3;
}

static int parse_target(const char *arg, struct target *t)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return -1;
    char *name = strndup(arg, (size_t)(eq - arg));
    struct evhttp_uri *u = evhttp_uri_parse(eq + 1);
    if (!u || !evhttp_uri_get_host(u) || evhttp_uri_get_port(u) <= 0) {
        free(name);
        if (u)
            evhttp_uri_free(u);
        return -1;
    }
    t->name = name;
    snprintf(t->host, sizeof(t->host), "%s", evhttp_uri_get_host(u));
    t->port = evhttp_uri_get_port(u);
    const char *p = evhttp_uri_get_path(u);
    snprintf(t->path, sizeof(t->path), "%s", p && *p ? p : "/");
    evhttp_uri_free(u);
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *s = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n + 4096 > cap) {
            cap = 2 * cap + 4096;
            s = realloc(s, cap);
        }
        r = fread(s + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return s;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pace [--rate N] [--duration S] [--warmup S] [--conns C]\n"
            "            --body FILE [--header 'K: V']... [--raw FILE]\n"
            "            NAME=http://HOST:PORT/PATH ...\n"
            "  each target gets N requests/s (Poisson) for S s after S of\n"
            "  warmup, on C keep-alive connections\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *body_path = NULL, *raw_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--rate") && v)
            rate = atof(argv[++i]);
        else if (!strcmp(a, "--duration") && v)
            duration = atof(argv[++i]);
        else if (!strcmp(a, "--warmup") && v)
            warmup = atof(argv[++i]);
        else if (!strcmp(a, "--conns") && v)
            nconns = atoi(argv[++i]);
        else if (!strcmp(a, "--body") && v)
            body_path = argv[++i];
        else if (!strcmp(a, "--raw") && v)
            raw_path = argv[++i];
        else if (!strcmp(a, "--header") && v && strchr(v, ':') &&
                 nheaders < MAX_HEADERS)
            headers[nheaders++] = argv[++i];
        else if (a[0] != '-' && ntargets < MAX_TARGETS) {
            if (parse_target(a, &targets[ntargets]) != 0) {
                fprintf(stderr, "pace: bad target '%s' (want NAME=URL)\n", a);
                return 2;
            }
            ntargets++;
        } else
            usage();
    }
    if (!body_path || !ntargets || rate <= 0 || duration <= 0 || nconns < 1)
        usage();
    body = read_file(body_path, &body_len);
    if (!body) {
        fprintf(stderr, "pace: cannot read '%s': %s\n", body_path,
                strerror(errno));
        return 2;
    }
    if (raw_path && !(raw = fopen(raw_path, "w"))) {
        fprintf(stderr, "pace: cannot write '%s': %s\n", raw_path,
                strerror(errno));
        return 2;
    }
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    rng ^= (unsigned long long)now_us();
    for (int i = 0; i < ntargets; i++) {
        struct target *t = &targets[i];
        t->conns = calloc((size_t)nconns, sizeof(*t->conns));
        for (int k = 0; k < nconns; k++) {
            struct conn *c = &t->conns[k];
            c->t = t;
            c->evcon = evhttp_connection_base_new(base, NULL, t->host,
                                                  (unsigned short)t->port);
            evhttp_connection_set_timeout(c->evcon, 30);
            c->next_idle = t->idle;
            t->idle = c;
        }
    }
    t_start = now_us();
    t_rec = t_start + warmup * 1e6;
    t_end = t_rec + duration * 1e6;
    for (int i = 0; i < ntargets; i++)
        targets[i].next = t_start + exp_gap_us();
    tick = evtimer_new(base, on_tick, NULL);
    on_tick(-1, 0, NULL);
    event_base_dispatch(base);
    int bad = 0;
    for (int i = 0; i < ntargets; i++) {
        struct target *t = &targets[i];
        if (t->n == 0) {
            printf("%s n=0 err=%ld late=%ld\n", t->name, t->err, t->late);
            bad = 1;
            continue;
        }
        qsort(t->lat, (size_t)t->n, sizeof(*t->lat), cmp_double);
        printf("%s n=%ld err=%ld late=%ld p50=%.3f p90=%.3f p99=%.3f "
               "p99.9=%.3f max=%.3f\n",
               t->name, t->n, t->err, t->late, pct(t, 50), pct(t, 90),
               pct(t, 99), pct(t, 99.9), t->lat[t->n - 1] / 1e3);
    }
    if (raw)
        fclose(raw);
    return bad;
}
