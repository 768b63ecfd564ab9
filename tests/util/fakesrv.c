/*
 * fakesrv: see fakesrv.h.
 */
#define _GNU_SOURCE
#include "util/fakesrv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

struct fakesrv {
    int fd;
    volatile int stop;
    pthread_t th;
    fakesrv_fn fn;
    void *ud;
};

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve_one(struct fakesrv *s, int c)
{
    struct buf in = BUF_INIT, out = BUF_INIT;
    char tmp[65536], method[16] = "", path[512] = "";
    size_t hdr_end = 0, clen = 0;
    for (;;) {
        struct pollfd p = {.fd = c, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0)
            goto done;
        ssize_t n = read(c, tmp, sizeof(tmp));
        if (n <= 0)
            goto done;
        buf_add(&in, tmp, (size_t)n);
        if (!hdr_end) {
            char *e = strstr(in.data, "\r\n\r\n");
            if (!e)
                continue;
            hdr_end = (size_t)(e - in.data) + 4;
            sscanf(in.data, "%15s %511s", method, path);
            *e = '\0';
            const char *h = strcasestr(in.data, "\r\nContent-Length:");
            if (h)
                clen = strtoul(h + 17, NULL, 10);
            *e = '\r';
        }
        if (in.len >= hdr_end + clen)
            break;
    }
    long status = 200;
    const char *ctype = "application/json";
    s->fn(s->ud, method, path, in.data + hdr_end, clen, &status, &ctype, &out);
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %ld X\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, ctype, out.len);
    if (!write_all(c, head, (size_t)hn))
        write_all(c, out.data ? out.data : "", out.len);
done:
    buf_release(&in);
    buf_release(&out);
    close(c);
}

static void *loop(void *arg)
{
    struct fakesrv *s = arg;
    while (!s->stop) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(s->fd, NULL, NULL);
        if (c >= 0)
            serve_one(s, c);
    }
    return NULL;
}

struct fakesrv *fakesrv_start(fakesrv_fn fn, void *ud, int *port)
{
    struct fakesrv *s = calloc(1, sizeof(*s));
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t al = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->fn = fn;
    s->ud = ud;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(s->fd, 16) || getsockname(s->fd, (struct sockaddr *)&a, &al) ||
        pthread_create(&s->th, NULL, loop, s)) {
        if (s->fd >= 0)
            close(s->fd);
        free(s);
        return NULL;
    }
    *port = ntohs(a.sin_port);
    return s;
}

void fakesrv_stop(struct fakesrv *s)
{
    if (!s)
        return;
    s->stop = 1;
    pthread_join(s->th, NULL);
    close(s->fd);
    free(s);
}

void fakesrv_files(void *ud, const char *method, const char *path,
                   const char *body, size_t len, long *status,
                   const char **ctype, struct buf *out)
{
    (void)method;
    (void)body;
    (void)len;
    const struct fakesrv_route *r = ud;
    *ctype = "application/json";
    for (; r->path; r++)
        if (!strcmp(path, r->path)) {
            char p[256];
            snprintf(p, sizeof(p), "tests/fixtures/inspect/%s", r->file);
            FILE *f = fopen(p, "r");
            char chunk[4096];
            size_t n;
            while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                buf_add(out, chunk, n);
            if (f)
                fclose(f);
            *status = f ? 200 : 500;
            return;
        }
    *status = 404;
    buf_adds(out, "{\"detail\":\"Not Found\"}");
}
