/*
 * gateway: the rewriting proxy of the tests (see gateway.h). One thread
 * accepts, one thread per connection reads one request, rewrites its body,
 * opens a fresh connection to the upstream with "Connection: close", and
 * copies the answer back as it arrives (so SSE streams are not held), then
 * closes both.
 */
#define _GNU_SOURCE
#include "util/gateway.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/hash.h"
#include "core/xalloc.h"

#define MAX_SEEN 4096
#define MAX_CONV 256
#define MAX_CONNS 256

/* A compaction remembered for one conversation. */
struct conv {
    uint64_t key;  /* hash of the first non-system message */
    size_t cut;    /* non-system messages the summary replaces */
    uint64_t head; /* hash of those messages, to see they are the same */
    char *summary;
};

struct gateway {
    struct gateway_opts o;
    char *set_field, *set_json;
    char up_host[64], up_prefix[256];
    int up_port;
    int fd, port;
    char url[64];
    pthread_t thr;
    atomic_int stop, live;
    pthread_mutex_t lock; /* the fields below */
    struct gateway_counts n;
    uint64_t seen[MAX_SEEN];
    size_t n_seen;
    struct conv conv[MAX_CONV];
    size_t n_conv;
    int conns[MAX_CONNS];
    struct gateway *next_live;
};

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gateway *all;

/* ---- the rewrite ---- */

static bool is_role(json_t *m, const char *role)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r && !strcmp(r, role);
}

static bool is_system(json_t *m)
{
    return is_role(m, "system") || is_role(m, "developer");
}

static size_t n_system(json_t *msgs)
{
    size_t i = 0;
    while (i < json_array_size(msgs) && is_system(json_array_get(msgs, i)))
        i++;
    return i;
}

/* The index of the start of each turn at or after `from` into starts:
 * every user message starts one; messages before the first user message
 * belong to the first turn. Returns the number of turns. */
static size_t turn_starts(json_t *msgs, size_t from, size_t *starts, size_t max)
{
    size_t n = 0;
    for (size_t i = from; i < json_array_size(msgs) && n < max; i++)
        if (is_role(json_array_get(msgs, i), "user"))
            starts[n++] = i;
    if (n)
        starts[0] = from;
    else if (json_array_size(msgs) > from)
        starts[n++] = from;
    return n;
}

/* Removes messages [from, to) of msgs. */
static void drop_range(json_t *msgs, size_t from, size_t to)
{
    for (size_t i = to; i > from; i--)
        json_array_remove(msgs, i - 1);
}

static size_t keep_last(json_t *msgs, unsigned n)
{
    size_t starts[4096];
    size_t s = n_system(msgs);
    size_t t = turn_starts(msgs, s, starts, 4096);
    if (t <= n)
        return 0;
    drop_range(msgs, s, starts[t - n]);
    return t - n;
}

/* Keeps the last n messages after the system prompt, wherever that cuts
 * a turn (a window by messages may start on an assistant message). */
static size_t keep_last_msgs(json_t *msgs, unsigned n)
{
    size_t s = n_system(msgs), len = json_array_size(msgs);
    if (len - s <= n)
        return 0;
    drop_range(msgs, s, len - n);
    return len - n - s;
}

static size_t drop_oldest(json_t *msgs, unsigned k)
{
    size_t starts[4096];
    size_t s = n_system(msgs);
    size_t t = turn_starts(msgs, s, starts, 4096);
    if (t <= 1)
        return 0;
    if (k > t - 1)
        k = (unsigned)(t - 1); /* the last turn stays */
    drop_range(msgs, s, starts[k]);
    return k;
}

static uint64_t hash_msgs(json_t *msgs, size_t from, size_t to)
{
    uint64_t h = 0x9a7e;
    for (size_t i = from; i < to; i++) {
        char *s =
            json_dumps(json_array_get(msgs, i), JSON_COMPACT | JSON_SORT_KEYS);
        h = hash_mix2(h, hash64(s, strlen(s), 0));
        free(s);
    }
    return h;
}

/* A summary of msgs[from, to): how many messages, and the start of each
 * user message (so that it reads as a summary and is short). */
static char *make_summary(json_t *msgs, size_t from, size_t to)
{
    struct buf b = BUF_INIT;
    buf_printf(
        &b, "Summary of the earlier conversation (%zu messages):", to - from);
    for (size_t i = from; i < to && b.len < 400; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *c = json_string_value(json_object_get(m, "content"));
        if (!is_role(m, "user") || !c)
            continue;
        buf_printf(&b, " the user wrote \"%.60s\";", c);
    }
    return buf_detach(&b, NULL);
}

static struct conv *conv_find(struct gateway *g, uint64_t key)
{
    for (size_t i = 0; i < g->n_conv; i++)
        if (g->conv[i].key == key)
            return &g->conv[i];
    return NULL;
}

/* Puts the remembered summary in place of its head, then compacts when
 * the history after it is longer than N turns (once per conversation, or
 * every time). Called under g->lock. */
static void compact(struct gateway *g, json_t *msgs, struct gateway_counts *n)
{
    size_t s = n_system(msgs), starts[4096];
    if (json_array_size(msgs) <= s)
        return;
    json_t *orig = json_deep_copy(msgs);
    uint64_t key = hash_msgs(msgs, s, s + 1);
    struct conv *cv = conv_find(g, key);
    size_t base = 0; /* messages of the original the summary stands for */
    if (cv && json_array_size(msgs) - s > cv->cut &&
        hash_msgs(msgs, s, s + cv->cut) == cv->head) {
        drop_range(msgs, s, s + cv->cut);
        json_array_insert_new(
            msgs, s,
            json_pack("{s:s,s:s}", "role", "user", "content", cv->summary));
        base = cv->cut;
        n->summarised++;
    }
    if (base && !g->o.compact_every)
        goto out;
    size_t from = s + (base ? 1 : 0); /* the turns after the summary */
    size_t t = turn_starts(msgs, from, starts, 4096);
    if (t <= g->o.compact_after)
        goto out;
    size_t end = starts[t - 1]; /* the last turn stays */
    size_t covered = base + (end - from);
    char *sum = make_summary(msgs, s, end);
    drop_range(msgs, s, end);
    json_array_insert_new(
        msgs, s, json_pack("{s:s,s:s}", "role", "user", "content", sum));
    n->compactions++;
    n->summarised += !base;
    if (!cv && g->n_conv < MAX_CONV)
        cv = &g->conv[g->n_conv++];
    if (!cv) {
        free(sum);
        goto out;
    }
    free(cv->summary);
    cv->key = key;
    cv->cut = covered;
    cv->summary = sum;
    cv->head = hash_msgs(orig, s, s + covered);
out:
    json_decref(orig);
}

/* Cuts s to at most c bytes, on a UTF-8 boundary. NULL when short. */
static json_t *clipped(const char *s, unsigned c)
{
    size_t len = strlen(s);
    if (len <= c)
        return NULL;
    size_t k = c;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--;
    return json_stringn(s, k);
}

static void clip_msgs(json_t *msgs, unsigned c, struct gateway_counts *n)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *v = json_object_get(m, "content");
        json_t *cut =
            json_is_string(v) ? clipped(json_string_value(v), c) : NULL;
        if (cut) {
            json_object_set_new(m, "content", cut);
            n->clipped++;
        }
        size_t k;
        json_t *part;
        json_array_foreach(v, k, part)
        {
            json_t *t = json_object_get(part, "text");
            cut = json_is_string(t) ? clipped(json_string_value(t), c) : NULL;
            if (cut) {
                json_object_set_new(part, "text", cut);
                n->clipped++;
            }
        }
    }
}

static void prune(json_t *msgs, unsigned keep, struct gateway_counts *n)
{
    size_t tools = 0, i;
    json_t *m;
    json_array_foreach(msgs, i, m) tools += is_role(m, "tool");
    json_array_foreach(msgs, i, m)
    {
        if (!is_role(m, "tool") || tools-- <= keep)
            continue;
        json_object_set_new(m, "content", json_string(GATEWAY_PRUNED));
        n->pruned++;
    }
}

static void strip(json_t *msgs, struct gateway_counts *n)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!is_role(m, "assistant"))
            continue;
        n->stripped += json_object_del(m, "reasoning_content") == 0;
        n->stripped += json_object_del(m, "reasoning") == 0;
    }
}

static bool is_tokenize(const char *path)
{
    return strstr(path, "tokenize") != NULL;
}

/* Rewrites j (a request body with messages) in place; under g->lock. */
static void rewrite_msgs(struct gateway *g, json_t *j, struct gateway_counts *n)
{
    json_t *msgs = json_object_get(j, "messages");
    const struct gateway_opts *o = &g->o;
    if (o->compact_after)
        compact(g, msgs, n);
    if (o->drop_oldest)
        n->turns_dropped += (unsigned)drop_oldest(msgs, o->drop_oldest);
    if (o->keep_last)
        n->turns_dropped += (unsigned)keep_last(msgs, o->keep_last);
    if (o->keep_last_msgs)
        n->msgs_dropped += (unsigned)keep_last_msgs(msgs, o->keep_last_msgs);
    if (o->prune_tools)
        prune(msgs, o->prune_keep, n);
    if (o->strip_reasoning)
        strip(msgs, n);
    if (o->clip)
        clip_msgs(msgs, o->clip, n);
}

static void add_counts(struct gateway_counts *to,
                       const struct gateway_counts *from)
{
    unsigned *d = (unsigned *)to;
    const unsigned *s = (const unsigned *)from;
    for (size_t i = 0; i < sizeof(*to) / sizeof(unsigned); i++)
        d[i] += s[i];
}

char *gateway_rewrite(struct gateway *g, const char *path, const char *body,
                      size_t len, struct gateway_counts *counts)
{
    struct gateway_counts n = {0};
    bool tok = is_tokenize(path);
    json_t *j = json_loadb(body, len, 0, NULL);
    char *out = NULL;
    if (!json_is_object(j))
        goto out_free;
    json_t *msgs = json_object_get(j, "messages");
    json_t *prompt = json_object_get(j, "prompt");
    if (tok)
        n.tokenize++;
    else if (json_is_array(msgs))
        n.chat++;
    if (tok && !g->o.tokenize)
        goto out_count;
    pthread_mutex_lock(&g->lock);
    char *before = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    if (json_is_array(msgs))
        rewrite_msgs(g, j, &n);
    if (tok && g->o.clip && json_is_string(prompt)) {
        json_t *cut = clipped(json_string_value(prompt), g->o.clip);
        if (cut) {
            json_object_set_new(j, "prompt", cut);
            n.clipped++;
        }
    }
    if (!tok && json_is_array(msgs) && g->set_field &&
        g->n.chat + 1 >= (g->o.set_from ? g->o.set_from : 1)) {
        json_t *v = json_loads(g->set_json, JSON_DECODE_ANY, NULL);
        if (v) {
            json_object_set_new(j, g->set_field, v);
            n.fields_set++;
        }
    }
    char *after = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    if (strcmp(before, after)) {
        out = json_dumps(j, JSON_COMPACT);
        n.rewritten++;
        n.tokenize_rewritten += tok;
    }
    free(before);
    free(after);
    pthread_mutex_unlock(&g->lock);
out_count:
    pthread_mutex_lock(&g->lock);
    add_counts(&g->n, &n);
    pthread_mutex_unlock(&g->lock);
    if (counts)
        add_counts(counts, &n);
out_free:
    json_decref(j);
    return out;
}

/* ---- the proxy ---- */

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

/* Reads one request (head and a Content-Length body) into in; *head_len
 * gets the head's length with its blank line. -1 on EOF or error. */
/* Decodes a chunked body (RFC 9112 section 7.1) of n bytes at p into out:
 * 1 when complete, 0 when more is needed, -1 when it is not chunked. */
static int dechunk(const char *p, size_t n, struct buf *out)
{
    size_t i = 0;
    buf_reset(out);
    for (;;) {
        const char *eol = memmem(p + i, n - i, "\r\n", 2);
        if (!eol)
            return 0;
        char *end;
        unsigned long k = strtoul(p + i, &end, 16);
        if (end == p + i)
            return -1;
        i = (size_t)(eol - p) + 2;
        if (k == 0) /* trailer fields, then a blank line */
            return memmem(p + i - 2, n - i + 2, "\r\n\r\n", 4) ? 1 : 0;
        if (n - i < k + 2)
            return 0;
        buf_add(out, p + i, k);
        i += k + 2;
    }
}

static int read_request(int fd, struct buf *in, size_t *head_len,
                        size_t *body_len)
{
    char tmp[65536];
    bool continued = false;
    for (;;) {
        char *end = in->len ? strstr(in->data, "\r\n\r\n") : NULL;
        if (end) {
            *head_len = (size_t)(end - in->data) + 4;
            *end = '\0';
            const char *cl = strcasestr(in->data, "\r\nContent-Length:");
            const char *ex = strcasestr(in->data, "\r\nExpect: 100-continue");
            const char *te = strcasestr(in->data, "\r\nTransfer-Encoding:");
            bool chunked = te && strcasestr(te, "chunked");
            *end = '\r';
            *body_len = cl ? strtoul(cl + 17, NULL, 10) : 0;
            if (ex && !continued) {
                static const char c100[] = "HTTP/1.1 100 Continue\r\n\r\n";
                write_all(fd, c100, sizeof(c100) - 1);
                continued = true;
            }
            if (chunked) {
                /* the body is forwarded with a Content-Length */
                struct buf body = BUF_INIT;
                int r =
                    dechunk(in->data + *head_len, in->len - *head_len, &body);
                if (r == 1) {
                    in->len = *head_len;
                    buf_add(in, body.data ? body.data : "", body.len);
                    *body_len = body.len;
                }
                buf_release(&body);
                if (r < 0)
                    return -1;
                if (r == 1)
                    return 0;
            } else if (in->len >= *head_len + *body_len) {
                return 0;
            }
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 30000) <= 0)
            return -1;
        ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
        if (n <= 0)
            return -1;
        buf_add(in, tmp, (size_t)n);
    }
}

static bool hop_header(const char *line, size_t n)
{
    static const char *const drop[] = {
        "connection:", "content-length:", "expect:",
        "host:",       "keep-alive:",     "transfer-encoding:"};
    for (size_t i = 0; i < sizeof(drop) / sizeof(*drop); i++) {
        size_t k = strlen(drop[i]);
        if (n >= k && !strncasecmp(line, drop[i], k))
            return true;
    }
    return false;
}

/* Copies the header lines of head (after its first line) except the hop
 * ones into out. */
static void copy_headers(struct buf *out, const char *head, size_t len)
{
    const char *p = memchr(head, '\n', len);
    const char *end = head + len;
    for (p = p ? p + 1 : end; p < end;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t n = e ? (size_t)(e - p) + 1 : (size_t)(end - p);
        if (n > 2 && !hop_header(p, n))
            buf_add(out, p, n);
        p += n;
    }
}

static int connect_up(struct gateway *g)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_port = htons((uint16_t)g->up_port);
    if (inet_pton(AF_INET, g->up_host, &a.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void answer(int fd, int status, const char *msg)
{
    char b[512];
    char body[256];
    int bl =
        snprintf(body, sizeof(body),
                 "{\"error\":{\"message\":\"%s\",\"type\":\"gateway\"}}", msg);
    int n = snprintf(
        b, sizeof(b),
        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
        "Retry-After: 0\r\nContent-Length: %d\r\n"
        "Connection: close\r\n\r\n%s",
        status, status == 429 ? "Too Many Requests" : "Bad Gateway", bl, body);
    write_all(fd, b, (size_t)n);
}

/* True when this request was seen before; remembers it otherwise. */
static bool seen_before(struct gateway *g, const char *method, const char *path,
                        const char *body, size_t len)
{
    uint64_t h = hash_mix2(
        hash64(method, strlen(method), 1),
        hash_mix2(hash64(path, strlen(path), 2), hash64(body, len, 3)));
    bool seen = false;
    pthread_mutex_lock(&g->lock);
    for (size_t i = 0; i < g->n_seen && !seen; i++)
        seen = g->seen[i] == h;
    if (!seen && g->n_seen < MAX_SEEN)
        g->seen[g->n_seen++] = h;
    if (!seen)
        g->n.refused++;
    pthread_mutex_unlock(&g->lock);
    return seen;
}

/* Where an answer's body ends: by Content-Length, by the chunked framing
 * (RFC 9112 section 7.1), or at the close. */
struct framing {
    int kind; /* 0: close, 1: sized, 2: chunked */
    size_t left;
    /* chunked: 0 size, 4 extension, 1 data, 2 CRLF after data, 3 trailer */
    int st;
    size_t line;
};

static int hexval(char c)
{
    return isdigit((unsigned char)c) ? c - '0'
                                     : tolower((unsigned char)c) - 'a' + 10;
}

/* Feeds n body bytes; true once the body is complete. */
static bool body_done(struct framing *f, const char *p, size_t n)
{
    if (f->kind == 1) {
        f->left -= n < f->left ? n : f->left;
        return f->left == 0;
    }
    for (size_t i = 0; f->kind == 2 && i < n; i++) {
        char c = p[i];
        switch (f->st) {
        case 0:
        case 4:
            if (c == '\n') {
                f->st = f->left ? 1 : 3;
                f->line = 0;
            } else if (f->st == 0 && isxdigit((unsigned char)c)) {
                f->left = f->left * 16 + (size_t)hexval(c);
            } else if (c != '\r') {
                f->st = 4;
            }
            break;
        case 1: {
            size_t k = n - i < f->left ? n - i : f->left;
            f->left -= k;
            i += k - 1;
            if (!f->left)
                f->st = 2;
            break;
        }
        case 2:
            if (c == '\n') {
                f->st = 0;
                f->left = 0;
            }
            break;
        default:
            if (c == '\n') {
                if (f->line == 0)
                    return true;
                f->line = 0;
            } else if (c != '\r') {
                f->line++;
            }
        }
    }
    return false;
}

/* Copies the upstream's answer to the client, its head with "Connection:
 * close", the rest as it comes, until the body ends. */
static void relay(int up, int fd, bool head_only)
{
    struct buf in = BUF_INIT;
    char tmp[65536];
    bool head_done = false;
    struct framing f = {0};
    for (;;) {
        ssize_t n = recv(up, tmp, sizeof(tmp), 0);
        if (n <= 0)
            break;
        if (head_done) {
            if (write_all(fd, tmp, (size_t)n) || body_done(&f, tmp, (size_t)n))
                break;
            continue;
        }
        buf_add(&in, tmp, (size_t)n);
        char *end = strstr(in.data, "\r\n\r\n");
        if (!end)
            continue;
        size_t hl = (size_t)(end - in.data) + 4;
        struct buf h = BUF_INIT;
        const char *eol = strstr(in.data, "\r\n");
        int status = atoi(in.data + 9);
        buf_add(&h, in.data, (size_t)(eol - in.data) + 2);
        copy_headers(&h, in.data, hl - 2);
        const char *cl = strcasestr(in.data, "\r\nContent-Length:");
        if (cl && cl < end) {
            const char *e = strstr(cl + 2, "\r\n");
            buf_add(&h, cl + 2, (size_t)(e - cl));
            f.kind = 1;
            f.left = strtoul(cl + 17, NULL, 10);
        }
        const char *te = strcasestr(in.data, "\r\nTransfer-Encoding:");
        if (te && te < end) {
            const char *e = strstr(te + 2, "\r\n");
            buf_add(&h, te + 2, (size_t)(e - te));
            f.kind = strcasestr(te, "chunked") < e ? 2 : 0;
        }
        if (head_only || status == 204 || status == 304)
            f = (struct framing){.kind = 1, .left = 0};
        buf_adds(&h, "Connection: close\r\n\r\n");
        int r = write_all(fd, h.data, h.len) ||
                write_all(fd, in.data + hl, in.len - hl);
        buf_release(&h);
        if (r || (f.kind == 1 && !f.left) ||
            body_done(&f, in.data + hl, in.len - hl))
            break;
        head_done = true;
    }
    buf_release(&in);
}

static void track(struct gateway *g, int fd, int put)
{
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        if (g->conns[i] == (put ? -1 : fd)) {
            g->conns[i] = put ? fd : -1;
            break;
        }
    pthread_mutex_unlock(&g->lock);
}

static void serve(struct gateway *g, int fd)
{
    struct buf in = BUF_INIT, out = BUF_INIT;
    size_t hl, bl;
    char method[16] = "", path[1024] = "";
    if (read_request(fd, &in, &hl, &bl))
        goto out_free;
    sscanf(in.data, "%15s %1023s", method, path);
    pthread_mutex_lock(&g->lock);
    g->n.requests++;
    pthread_mutex_unlock(&g->lock);
    const char *body = in.data + hl;
    size_t len = bl;
    char *nb = bl ? gateway_rewrite(g, path, body, bl, NULL) : NULL;
    if (nb) {
        body = nb;
        len = strlen(nb);
    }
    if (g->o.no_tokenize && is_tokenize(path)) {
        answer(fd, 404, "no /tokenize behind this gateway");
        goto out_nb;
    }
    if (g->o.fail_first && !seen_before(g, method, path, body, len)) {
        answer(fd, 429, "first attempt refused by the test gateway");
        goto out_nb;
    }
    int up = connect_up(g);
    if (up < 0) {
        answer(fd, 502, "cannot connect to the upstream");
        goto out_nb;
    }
    buf_printf(&out, "%s %s%s HTTP/1.1\r\nHost: %s:%d\r\n", method,
               g->up_prefix, path, g->up_host, g->up_port);
    copy_headers(&out, in.data, hl - 2);
    if (bl || !strcmp(method, "POST") || !strcmp(method, "PUT"))
        buf_printf(&out, "Content-Length: %zu\r\n", len);
    buf_adds(&out, "Connection: close\r\n\r\n");
    track(g, up, 1);
    if (!write_all(up, out.data, out.len) && !write_all(up, body, len))
        relay(up, fd, !strcmp(method, "HEAD"));
    track(g, up, 0);
    close(up);
out_nb:
    free(nb);
out_free:
    buf_release(&in);
    buf_release(&out);
}

struct conn {
    struct gateway *g;
    int fd;
};

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    struct gateway *g = c->g;
    serve(g, c->fd);
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        if (g->conns[i] == c->fd)
            g->conns[i] = -1;
    pthread_mutex_unlock(&g->lock);
    close(c->fd);
    free(c);
    atomic_fetch_sub(&g->live, 1);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct gateway *g = arg;
    while (!atomic_load(&g->stop)) {
        struct pollfd p = {.fd = g->fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(g->fd, NULL, NULL);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_mutex_lock(&g->lock);
        for (int i = 0; i < MAX_CONNS; i++)
            if (g->conns[i] < 0) {
                g->conns[i] = fd;
                break;
            }
        pthread_mutex_unlock(&g->lock);
        atomic_fetch_add(&g->live, 1);
        struct conn *c = xcalloc(1, sizeof(*c));
        c->g = g;
        c->fd = fd;
        pthread_t t;
        if (pthread_create(&t, NULL, conn_main, c)) {
            atomic_fetch_sub(&g->live, 1);
            close(fd);
            free(c);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

/* "http://HOST:PORT[/prefix]" into g; -1 when it is not that. */
static int parse_upstream(struct gateway *g, const char *url)
{
    if (strncmp(url, "http://", 7))
        return -1;
    const char *h = url + 7, *colon = strchr(h, ':');
    if (!colon || (size_t)(colon - h) >= sizeof(g->up_host))
        return -1;
    memcpy(g->up_host, h, (size_t)(colon - h));
    g->up_host[colon - h] = '\0';
    if (!strcmp(g->up_host, "localhost"))
        snprintf(g->up_host, sizeof(g->up_host), "127.0.0.1");
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (port <= 0 || port > 65535)
        return -1;
    g->up_port = (int)port;
    snprintf(g->up_prefix, sizeof(g->up_prefix), "%s", end);
    size_t pl = strlen(g->up_prefix);
    if (pl && g->up_prefix[pl - 1] == '/')
        g->up_prefix[pl - 1] = '\0';
    return 0;
}

struct gateway *gateway_start(const char *upstream,
                              const struct gateway_opts *o)
{
    struct gateway *g = xcalloc(1, sizeof(*g));
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    int one = 1;
    if (o)
        g->o = *o;
    if (parse_upstream(g, upstream))
        goto out_free;
    g->set_field = g->o.set_field ? xstrdup(g->o.set_field) : NULL;
    g->set_json = g->o.set_json ? xstrdup(g->o.set_json) : NULL;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    pthread_mutex_init(&g->lock, NULL);
    for (int i = 0; i < MAX_CONNS; i++)
        g->conns[i] = -1;
    g->fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(g->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(g->fd, (struct sockaddr *)&a, sizeof(a)) || listen(g->fd, 128) ||
        getsockname(g->fd, (struct sockaddr *)&a, &al)) {
        close(g->fd);
        pthread_mutex_destroy(&g->lock);
        goto out_free;
    }
    g->port = ntohs(a.sin_port);
    snprintf(g->url, sizeof(g->url), "http://127.0.0.1:%d", g->port);
    pthread_create(&g->thr, NULL, accept_main, g);
    pthread_mutex_lock(&all_lock);
    g->next_live = all;
    all = g;
    pthread_mutex_unlock(&all_lock);
    return g;
out_free:
    free(g->set_field);
    free(g->set_json);
    free(g);
    return NULL;
}

int gateway_port(const struct gateway *g)
{
    return g->port;
}

const char *gateway_url(const struct gateway *g)
{
    return g->url;
}

void gateway_counts(struct gateway *g, struct gateway_counts *out)
{
    pthread_mutex_lock(&g->lock);
    *out = g->n;
    pthread_mutex_unlock(&g->lock);
}

void gateway_stop(struct gateway *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&all_lock);
    for (struct gateway **p = &all; *p; p = &(*p)->next_live)
        if (*p == g) {
            *p = g->next_live;
            break;
        }
    pthread_mutex_unlock(&all_lock);
    atomic_store(&g->stop, 1);
    pthread_join(g->thr, NULL);
    close(g->fd);
    pthread_mutex_lock(&g->lock);
    for (int i = 0; i < MAX_CONNS; i++)
        if (g->conns[i] >= 0)
            shutdown(g->conns[i], SHUT_RDWR);
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < 500 && atomic_load(&g->live) > 0; i++)
        usleep(10000);
    if (atomic_load(&g->live) > 0)
        return; /* a thread is stuck: leak rather than free under it */
    for (size_t i = 0; i < g->n_conv; i++)
        free(g->conv[i].summary);
    pthread_mutex_destroy(&g->lock);
    free(g->set_field);
    free(g->set_json);
    free(g);
}

void gateway_stop_all(void)
{
    for (;;) {
        pthread_mutex_lock(&all_lock);
        struct gateway *g = all;
        pthread_mutex_unlock(&all_lock);
        if (!g)
            break;
        gateway_stop(g);
    }
}
