/*
 * http client: a thin, capped wrapper over one libcurl easy handle.
 */
#include "http/client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/xalloc.h"

struct http_client {
    CURL *easy;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct http_client *http_client_new(void)
{
    pthread_once(&global_once, global_init);
    struct http_client *c = xcalloc(1, sizeof(*c));
    c->easy = curl_easy_init();
    if (!c->easy)
        abort();
    return c;
}

void http_client_free(struct http_client *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->easy);
    free(c);
}

void http_resp_init(struct http_resp *r)
{
    memset(r, 0, sizeof(*r));
    buf_init(&r->body, 0);
    buf_init(&r->headers, 1 << 20);
}

void http_resp_release(struct http_resp *r)
{
    buf_release(&r->body);
    buf_release(&r->headers);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    struct buf *b = ud;
    if (buf_add(b, p, sz * n))
        return 0; /* over the cap: curl aborts with CURLE_WRITE_ERROR */
    return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    struct buf *b = ud;
    /* A new status line starts a new header block (1xx, redirects). */
    if (n * sz > 5 && !memcmp(p, "HTTP/", 5))
        buf_reset(b);
    buf_add(b, p, sz * n);
    return sz * n;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut,
                   curl_off_t un)
{
    const struct http_req *req = ud;
    (void)dt, (void)dn, (void)ut, (void)un;
    req->on_wait(req->wait_ud);
    return 0;
}

int http_do(struct http_client *c, const struct http_req *req,
            struct http_resp *resp, struct diag *d)
{
    CURL *e = c->easy;
    struct curl_slist *hdrs = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    int ret = 0;

    curl_easy_reset(e);
    buf_reset(&resp->body);
    buf_reset(&resp->headers);
    resp->body.max = req->max_body ? req->max_body : (size_t)256 << 20;
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     req->timeout_ms > 0 ? req->timeout_ms : 300000L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &resp->body);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &resp->headers);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    if (req->on_wait) {
        curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(e, CURLOPT_XFERINFODATA, req);
        curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    }
    if (req->method && strcmp(req->method, "GET"))
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    if (req->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)req->body_len);
    }
    hdrs = curl_slist_append(hdrs, "Expect:");
    for (const char *const *h = req->headers; h && *h; h++)
        hdrs = curl_slist_append(hdrs, *h);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);

    CURLcode rc = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME, &resp->t_first_byte);
    curl_easy_getinfo(e, CURLINFO_TOTAL_TIME, &resp->t_total);
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    switch (rc) {
    case CURLE_OK:
        break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        ret = diag_set(d, ECONNREFUSED, "cannot reach '%s': %s", req->url, why);
        break;
    case CURLE_OPERATION_TIMEDOUT:
        ret = diag_set(d, ETIMEDOUT, "'%s' timed out: %s", req->url, why);
        break;
    case CURLE_WRITE_ERROR:
        ret = diag_set(d, ENOBUFS, "answer from '%s' is larger than %zu bytes",
                       req->url, resp->body.max);
        break;
    default:
        ret = diag_set(d, EIO, "request to '%s' failed: %s", req->url, why);
    }
    curl_slist_free_all(hdrs);
    return ret;
}

char *http_resp_ctype(const struct http_resp *r, char *out, size_t n)
{
    const char *h = buf_str(&r->headers);
    out[0] = '\0';
    for (const char *l = h; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : l) {
        if (strncasecmp(l, "content-type:", 13))
            continue;
        const char *v = l + 13;
        v += strspn(v, " \t");
        size_t k = strcspn(v, ";\r\n");
        while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
            k--;
        snprintf(out, n, "%.*s", (int)k, v);
        break;
    }
    return out;
}

char *http_resp_describe(const struct http_resp *r, const char *url,
                         const char *what, char *out, size_t n)
{
    char ct[128], head[HTTP_DESCRIBE_BYTES + 1];
    size_t k = 0;
    bool space = false;
    for (size_t i = 0; i < r->body.len && k < HTTP_DESCRIBE_BYTES; i++) {
        unsigned char ch = (unsigned char)r->body.data[i];
        if (ch == ' ' || (ch >= '\t' && ch <= '\r')) {
            space = k > 0;
            continue;
        }
        if (ch < 0x20 || ch > 0x7e)
            continue;
        if (space && k < HTTP_DESCRIBE_BYTES - 1)
            head[k++] = ' ';
        space = false;
        head[k++] = (char)ch;
    }
    head[k] = '\0';
    http_resp_ctype(r, ct, sizeof(ct));
    snprintf(out, n, "'%s' answered HTTP %ld (%s), %s: '%s'", url, r->status,
             ct[0] ? ct : "no content type", what, head);
    return out;
}

void http_json_headers(const char **hdrs, const char *const *extra)
{
    size_t n = 0;

    hdrs[n++] = "Content-Type: application/json";
    for (const char *const *h = extra; h && *h && n < HTTP_JSON_HEADERS_MAX - 1;
         h++)
        hdrs[n++] = *h;
    hdrs[n] = NULL;
}

int http_json(struct http_client *c, const char *url, json_t *body,
              const char *const *headers, long timeout_ms, long *status,
              json_t **out, struct diag *d)
{
    const char *hdrs[HTTP_JSON_HEADERS_MAX];
    char *text = NULL;
    struct http_resp resp;
    int ret;

    http_json_headers(hdrs, headers);
    struct http_req req = {.method = body ? "POST" : "GET",
                           .url = url,
                           .headers = hdrs,
                           .timeout_ms = timeout_ms};
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        req.body = text;
        req.body_len = strlen(text);
    }
    http_resp_init(&resp);
    *out = NULL;
    ret = http_do(c, &req, &resp, d);
    *status = resp.status;
    if (ret)
        goto out;
    json_error_t jerr;
    *out = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0,
                      &jerr);
    if (!*out) {
        char line[sizeof(d->msg)];
        ret = diag_set(
            d, EBADMSG, "%s",
            http_resp_describe(&resp, url, "not JSON", line, sizeof(line)));
    }
out:
    free(text);
    http_resp_release(&resp);
    return ret;
}
