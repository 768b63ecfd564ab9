/*
 * ready: the readiness request probe and drift send to each endpoint
 * before any long one, so that a server that is down, stuck or not an
 * OpenAI-compatible LLM server at all is told in one line within
 * --ready-timeout (default 30 s) instead of after a per-request timeout of
 * minutes. On a terminal a wait longer than 2 s says what it waits for.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "core/clock.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "http/client.h"

/* Waits shorter than this draw nothing. */
#define WAIT_QUIET_S 2.0

struct waiter {
    const char *url;
    double limit_s;
    double t0;  /* clock_now_s() at the start */
    long shown; /* last whole second drawn; 0: nothing drawn */
};

static void on_wait(void *ud)
{
    struct waiter *w = ud;
    double el = clock_now_s() - w->t0;
    if (el <= WAIT_QUIET_S || (long)el == w->shown)
        return;
    w->shown = (long)el;
    fprintf(stderr, "\rwaiting for %s (%ld s of %g)\033[K", w->url, w->shown,
            w->limit_s);
    fflush(stderr);
}

int cli_parse_ready_timeout(const char *s, long *ms)
{
    double v;
    if (cli_parse_double(s, 0.1, 86400, &v))
        return -EINVAL;
    *ms = (long)(v * 1000 + 0.5);
    return 0;
}

static bool is_json(const struct http_resp *r)
{
    json_error_t je;
    json_t *j =
        json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
    json_decref(j);
    return j != NULL;
}

/* An answer that shows the server is something else: a body that is not
 * JSON, or no body with a success status. An empty error (a 404 of a server
 * without /v1/models, such as an older TGI) leaves the verdict to the
 * caller's own requests. */
static bool is_foreign(const struct http_resp *r)
{
    if (!r->body.len)
        return r->status >= 200 && r->status <= 299;
    return !is_json(r);
}

int cli_ready(const char *cmd, const char *what, const char *base,
              const char *const *headers, long timeout_ms)
{
    bool retry = timeout_ms > 0;
    if (timeout_ms < 0)
        timeout_ms = -timeout_ms;
    char *url = xasprintf("%s/v1/models", base), *show = url_mask(url);
    struct waiter w = {.url = show, .limit_s = (double)timeout_ms / 1000.0};
    struct http_req req = {.url = url,
                           .headers = headers,
                           .timeout_ms = timeout_ms,
                           .max_body = (size_t)16 << 20};
    struct http_client *c = http_client_new();
    struct http_resp resp;
    struct diag d;
    char line[1024];
    int code = EXIT_PASS;

    if (cli_is_tty(2)) {
        req.on_wait = on_wait;
        req.wait_ud = &w;
    }
    w.t0 = clock_now_s();
    http_resp_init(&resp);
    int r = http_do(c, &req, &resp, &d);
    /* nothing listens yet: a server still starting; try again until the
     * wait is over (a name that does not resolve is not retried) */
    bool refused = false;
    while (retry && r == -ECONNREFUSED && !strstr(d.msg, "resolve")) {
        double left = w.limit_s - (clock_now_s() - w.t0);
        refused = true;
        if (left <= 0.2)
            break;
        if (req.on_wait)
            on_wait(&w);
        usleep(200000);
        req.timeout_ms = (long)((left - 0.2) * 1000);
        http_resp_release(&resp);
        http_resp_init(&resp);
        r = http_do(c, &req, &resp, &d);
    }
    if (w.shown)
        fputs("\r\033[K", stderr);
    if (r == -ETIMEDOUT)
        code = cli_error(cmd, EXIT_UNREACHABLE,
                         "%s: '%s' did not answer within %g s "
                         "(--ready-timeout): is the server stuck or still "
                         "starting?",
                         what, show, w.limit_s);
    else if (r && r != -ENOBUFS) {
        url_mask_in(d.msg, sizeof(d.msg), url); /* curl's messages quote it */
        code = cli_error(cmd, EXIT_UNREACHABLE, "%s: %s%s", what, d.msg,
                         refused ? " (and still so at the end of "
                                   "--ready-timeout)"
                                 : "");
    } else if (!r && is_foreign(&resp))
        code = cli_error(cmd, EXIT_UNREACHABLE, "%s: %s", what,
                         http_resp_describe(&resp, show,
                                            "not JSON: not an "
                                            "OpenAI-compatible LLM server",
                                            line, sizeof(line)));
    http_resp_release(&resp);
    http_client_free(c);
    free(show);
    free(url);
    return code;
}
