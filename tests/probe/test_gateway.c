/*
 * The rewriting gateway of the tests (tests/util/gateway.c), which probe's
 * and audit's tests put between a client and a server: each rewrite is
 * checked on what the upstream received (the scripted upstream's /echo
 * route answers with the raw request), streams are checked to pass byte
 * for byte, and a sim behind it shows the rewrite reaching the model
 * (usage.prompt_tokens).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/gateway.h"
#include "util/rec.h"
#include "util/simtest.h"
#include "util/upstream.h"

static struct upstream *up;

static int setup(void **state)
{
    (void)state;
    up = upstream_start();
    return up ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    gateway_stop_all();
    upstream_stop(up);
    up = NULL;
    return 0;
}

static int sim_teardown(void **state)
{
    gateway_stop_all();
    return simt_teardown(state);
}

/* A conversation: a system message, then `turns` user turns each with an
 * assistant reply (reasoning_content on each) except the last; with tools,
 * each reply calls a tool and a tool result follows. */
static json_t *conversation(unsigned turns, bool tools)
{
    json_t *m = json_array();
    json_array_append_new(m, json_pack("{s:s,s:s}", "role", "system", "content",
                                       "You are terse."));
    for (unsigned i = 1; i <= turns; i++) {
        char u[64], a[64], r[64];
        snprintf(u, sizeof(u), "user turn %u asks something long enough", i);
        json_array_append_new(
            m, json_pack("{s:s,s:s}", "role", "user", "content", u));
        if (i == turns)
            break;
        snprintf(a, sizeof(a), "reply %u", i);
        snprintf(r, sizeof(r), "thinking %u", i);
        json_array_append_new(m,
                              json_pack("{s:s,s:s,s:s}", "role", "assistant",
                                        "content", a, "reasoning_content", r));
        if (tools) {
            char res[64];
            snprintf(res, sizeof(res), "tool output %u", i);
            json_array_append_new(m, json_pack("{s:s,s:s,s:s}", "role", "tool",
                                               "tool_call_id", "c", "content",
                                               res));
        }
    }
    return m;
}

/* POSTs body (stolen) to the gateway at path and returns what the upstream
 * received as the body (parsed). *status gets the answer's status. */
static json_t *through(struct gateway *g, const char *path, json_t *body,
                       long *status)
{
    struct http_client *c = http_client_new();
    char url[256];
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    snprintf(url, sizeof(url), "%s%s", gateway_url(g), path);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = text,
                           .body_len = strlen(text),
                           .timeout_ms = 10000};
    struct http_resp r;
    struct diag d;
    http_resp_init(&r);
    assert_int_equal(http_do(c, &req, &r, &d), 0);
    *status = r.status;
    json_t *j = NULL;
    const char *b = strstr(buf_str(&r.body), "\r\n\r\n");
    if (r.status == 200) {
        assert_non_null(b);
        j = json_loads(b + 4, 0, NULL);
        assert_non_null(j);
    }
    http_resp_release(&r);
    http_client_free(c);
    free(text);
    return j;
}

static json_t *echo(struct gateway *g, const char *path, json_t *body)
{
    long status;
    json_t *j = through(g, path, body, &status);
    assert_int_equal(status, 200);
    return j;
}

static const char *content_at(json_t *body, size_t i)
{
    json_t *m = json_array_get(json_object_get(body, "messages"), i);
    const char *s = json_string_value(json_object_get(m, "content"));
    return s ? s : "";
}

static size_t n_msgs(json_t *body)
{
    return json_array_size(json_object_get(body, "messages"));
}

static json_t *chat(json_t *msgs)
{
    return json_pack("{s:s,s:o,s:f}", "model", "sim", "messages", msgs,
                     "temperature", 0.0);
}

static void test_pass_through_changes_nothing(void **state)
{
    (void)state;
    struct gateway *g = gateway_start(upstream_url(up), NULL);
    assert_non_null(g);
    json_t *sent = chat(conversation(5, true));
    json_t *got = echo(g, "/echo/v1/chat/completions", json_deep_copy(sent));
    assert_true(json_equal(sent, got));
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.requests, 1);
    assert_int_equal(n.chat, 1);
    assert_int_equal(n.rewritten, 0);
    json_decref(sent);
    json_decref(got);
    gateway_stop(g);
}

/* A request body sent chunked is rewritten and forwarded sized. */
static void test_chunked_request_body(void **state)
{
    (void)state;
    struct gateway_opts o = {.keep_last = 1};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    json_t *body = chat(conversation(3, false));
    char *text = json_dumps(body, JSON_COMPACT);
    size_t n = strlen(text), half = n / 2;
    struct buf req = BUF_INIT;
    buf_printf(&req,
               "POST /echo/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
               "Content-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n%zx;ext=1\r\n",
               half);
    buf_add(&req, text, half);
    buf_printf(&req, "\r\n%zX\r\n", n - half);
    buf_add(&req, text + half, n - half);
    buf_adds(&req, "\r\n0\r\nX-Trailer: t\r\n\r\n");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_port = htons((uint16_t)gateway_port(g));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, req.data, req.len), (ssize_t)req.len);
    struct buf ans = BUF_INIT;
    char tmp[4096];
    ssize_t k;
    while ((k = read(fd, tmp, sizeof(tmp))) > 0) /* the gateway closes */
        buf_add(&ans, tmp, (size_t)k);
    close(fd);
    assert_non_null(strstr(buf_str(&ans), "HTTP/1.1 200"));
    /* the echo: what the upstream received, sized, with one turn left */
    const char *echo_head = strstr(buf_str(&ans), "\r\n\r\n") + 4;
    const char *b = strstr(echo_head, "\r\n\r\n");
    assert_non_null(b);
    char head[1024];
    snprintf(head, sizeof(head), "%.*s", (int)(b - echo_head), echo_head);
    assert_non_null(strstr(head, "Content-Length: "));
    assert_null(strcasestr(head, "chunked"));
    json_t *j = json_loads(b + 4, 0, NULL);
    assert_non_null(j);
    assert_int_equal(n_msgs(j), 2);
    json_decref(j);
    buf_release(&ans);
    buf_release(&req);
    free(text);
    json_decref(body);
    gateway_stop(g);
}

static void test_stream_passes_byte_for_byte(void **state)
{
    (void)state;
    struct gateway *g = gateway_start(upstream_url(up), NULL);
    struct http_client *c = http_client_new();
    char url[128];
    snprintf(url, sizeof(url), "%s/sse", gateway_url(g));
    struct http_req req = {.url = url, .timeout_ms = 10000};
    struct http_resp r;
    struct diag d;
    size_t n;
    char *want = upstream_body("/sse", &n);
    http_resp_init(&r);
    assert_int_equal(http_do(c, &req, &r, &d), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, n);
    assert_memory_equal(r.body.data, want, n);
    assert_non_null(strstr(buf_str(&r.headers), "text/event-stream"));
    free(want);
    http_resp_release(&r);
    http_client_free(c);
    gateway_stop(g);
}

static void test_keep_last_turns_keeps_system(void **state)
{
    (void)state;
    struct gateway_opts o = {.keep_last = 2};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    json_t *got =
        echo(g, "/echo/v1/chat/completions", chat(conversation(5, false)));
    /* system + turn 4 (user, assistant) + turn 5 (user) */
    assert_int_equal(n_msgs(got), 4);
    assert_string_equal(content_at(got, 0), "You are terse.");
    assert_non_null(strstr(content_at(got, 1), "user turn 4"));
    assert_non_null(strstr(content_at(got, 3), "user turn 5"));
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.turns_dropped, 3);
    assert_int_equal(n.rewritten, 1);
    json_decref(got);
    /* a short history is left alone */
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(2, false)));
    assert_int_equal(n_msgs(got), 4);
    json_decref(got);
    gateway_stop(g);
}

static void test_drop_oldest_turns(void **state)
{
    (void)state;
    struct gateway_opts o = {.drop_oldest = 2};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    json_t *got =
        echo(g, "/echo/v1/chat/completions", chat(conversation(4, true)));
    /* system + turn 3 (user, assistant, tool) + turn 4 (user) */
    assert_int_equal(n_msgs(got), 5);
    assert_non_null(strstr(content_at(got, 1), "user turn 3"));
    json_decref(got);
    /* the last turn is never dropped */
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(2, false)));
    assert_int_equal(n_msgs(got), 2);
    assert_non_null(strstr(content_at(got, 1), "user turn 2"));
    json_decref(got);
    gateway_stop(g);
}

static void test_compact_once_and_every(void **state)
{
    (void)state;
    struct gateway_opts o = {.compact_after = 3};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    /* 3 turns: no compaction */
    json_t *got =
        echo(g, "/echo/v1/chat/completions", chat(conversation(3, false)));
    assert_int_equal(n_msgs(got), 6);
    json_decref(got);
    /* 4 turns: system, summary, turn 4 */
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(4, false)));
    assert_int_equal(n_msgs(got), 3);
    assert_non_null(
        strstr(content_at(got, 1), "Summary of the earlier conversation"));
    assert_non_null(strstr(content_at(got, 1), "user turn 1"));
    assert_non_null(strstr(content_at(got, 2), "user turn 4"));
    json_decref(got);
    /* the same conversation grown to 8 turns: the same summary in place of
     * the same head, the rest kept (once) */
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(8, false)));
    assert_int_equal(n_msgs(got), 11);
    assert_non_null(
        strstr(content_at(got, 1), "Summary of the earlier conversation (6"));
    assert_non_null(strstr(content_at(got, 2), "user turn 4"));
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.compactions, 1);
    assert_int_equal(n.summarised, 2);
    json_decref(got);
    gateway_stop(g);

    o.compact_every = true;
    g = gateway_start(upstream_url(up), &o);
    json_decref(
        echo(g, "/echo/v1/chat/completions", chat(conversation(4, false))));
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(8, false)));
    /* summary of turns 1-3, then turns 4-8: compacted again */
    assert_int_equal(n_msgs(got), 3);
    assert_non_null(
        strstr(content_at(got, 1), "Summary of the earlier conversation"));
    assert_non_null(strstr(content_at(got, 2), "user turn 8"));
    json_decref(got);
    /* and the second summary is re-applied to the next request */
    got = echo(g, "/echo/v1/chat/completions", chat(conversation(9, false)));
    assert_int_equal(n_msgs(got), 5);
    assert_non_null(strstr(content_at(got, 2), "user turn 8"));
    gateway_counts(g, &n);
    assert_int_equal(n.compactions, 2);
    json_decref(got);
    gateway_stop(g);
}

static void test_clip_prune_strip(void **state)
{
    (void)state;
    struct gateway_opts o = {.clip = 10,
                             .prune_tools = true,
                             .prune_keep = 1,
                             .strip_reasoning = true};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    json_t *got =
        echo(g, "/echo/v1/chat/completions", chat(conversation(4, true)));
    json_t *m = json_object_get(got, "messages");
    size_t i, tools = 0;
    json_t *x;
    json_array_foreach(m, i, x)
    {
        const char *c = json_string_value(json_object_get(x, "content"));
        const char *role = json_string_value(json_object_get(x, "role"));
        assert_true(strlen(c) <= 10);
        assert_null(json_object_get(x, "reasoning_content"));
        if (!strcmp(role, "tool"))
            tools++;
    }
    assert_int_equal(tools, 3);
    /* the two older tool results were pruned (then clipped), the last kept */
    assert_string_equal(content_at(got, 3), "[tool resu");
    assert_string_equal(content_at(got, 9), "tool outpu");
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.pruned, 2);
    assert_int_equal(n.stripped, 3);
    assert_true(n.clipped >= 7);
    json_decref(got);
    gateway_stop(g);
}

static void test_set_field_from_nth(void **state)
{
    (void)state;
    struct gateway_opts o = {
        .set_field = "temperature", .set_json = "0.9", .set_from = 3};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    for (int i = 1; i <= 4; i++) {
        json_t *got =
            echo(g, "/echo/v1/chat/completions", chat(conversation(2, false)));
        double t = json_real_value(json_object_get(got, "temperature"));
        assert_true(i < 3 ? t == 0.0 : t == 0.9);
        json_decref(got);
    }
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.fields_set, 2);
    gateway_stop(g);
}

static void test_tokenize_rewritten_only_when_asked(void **state)
{
    (void)state;
    struct gateway_opts o = {.keep_last = 1, .clip = 8};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    json_t *sent = chat(conversation(3, false));
    json_t *got = echo(g, "/echo/tokenize", json_deep_copy(sent));
    assert_true(json_equal(sent, got));
    json_decref(got);
    o.tokenize = true;
    struct gateway *g2 = gateway_start(upstream_url(up), &o);
    got = echo(g2, "/echo/tokenize", json_deep_copy(sent));
    assert_int_equal(n_msgs(got), 2);
    json_decref(got);
    got = echo(g2, "/echo/tokenize",
               json_pack("{s:s}", "prompt", "a prompt longer than eight"));
    assert_string_equal(json_string_value(json_object_get(got, "prompt")),
                        "a prompt");
    json_decref(got);
    struct gateway_counts n;
    gateway_counts(g2, &n);
    assert_int_equal(n.tokenize, 2);
    assert_int_equal(n.tokenize_rewritten, 2);
    gateway_counts(g, &n);
    assert_int_equal(n.tokenize, 1);
    assert_int_equal(n.rewritten, 0);
    json_decref(sent);
    gateway_stop(g);
    gateway_stop(g2);
}

static void test_first_attempt_refused(void **state)
{
    (void)state;
    struct gateway_opts o = {.fail_first = true};
    struct gateway *g = gateway_start(upstream_url(up), &o);
    long status;
    json_t *a = chat(conversation(2, false)), *b = chat(conversation(3, false));
    assert_null(through(g, "/echo/x", json_deep_copy(a), &status));
    assert_int_equal(status, 429);
    json_decref(echo(g, "/echo/x", json_deep_copy(a)));
    json_decref(echo(g, "/echo/x", json_deep_copy(a)));
    assert_null(through(g, "/echo/x", json_deep_copy(b), &status));
    assert_int_equal(status, 429);
    json_decref(echo(g, "/echo/x", json_deep_copy(b)));
    struct gateway_counts n;
    gateway_counts(g, &n);
    assert_int_equal(n.refused, 2);
    assert_int_equal(n.requests, 5);
    assert_int_equal(upstream_requests(up), 3);
    json_decref(a);
    json_decref(b);
    gateway_stop(g);
}

/* Behind the gateway the sim sees the shorter history: its prompt token
 * count drops, and streaming through it still ends with [DONE]. */
static void test_sim_behind_gateway(void **state)
{
    struct simt *t = *state;
    struct proc *sim = simt_start(t, NULL);
    struct gateway *pass = gateway_start(proc_url(sim), NULL);
    struct gateway_opts o = {.keep_last = 1};
    struct gateway *keep = gateway_start(proc_url(sim), &o);
    long full = 0, kept = 0;
    for (int i = 0; i < 2; i++) {
        struct http_client *c = http_client_new();
        char url[128];
        long status;
        json_t *j = NULL;
        struct diag d;
        snprintf(url, sizeof(url), "%s/v1/chat/completions",
                 gateway_url(i ? keep : pass));
        json_t *body = chat(conversation(6, false));
        assert_int_equal(http_json(c, url, body, NULL, 10000, &status, &j, &d),
                         0);
        json_decref(body);
        assert_int_equal(status, 200);
        *(i ? &kept : &full) = simt_prompt_tokens(j);
        json_decref(j);
        http_client_free(c);
    }
    assert_true(kept > 0 && kept < full / 2);
    struct http_client *c = http_client_new();
    char url[128];
    snprintf(url, sizeof(url), "%s/v1/chat/completions", gateway_url(keep));
    json_t *body = chat(conversation(6, false));
    json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = text,
                           .body_len = strlen(text),
                           .timeout_ms = 10000};
    struct http_resp r;
    struct diag d;
    http_resp_init(&r);
    assert_int_equal(http_do(c, &req, &r, &d), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(buf_str(&r.body), "data: [DONE]"));
    http_resp_release(&r);
    free(text);
    json_decref(body);
    http_client_free(c);
    gateway_stop(pass);
    gateway_stop(keep);
}

/* Sends a chat request (streamed or not) with a 4-turn history to url;
 * returns the HTTP status. */
static long post_chat(const char *url, bool stream)
{
    struct http_client *c = http_client_new();
    char u[128];
    snprintf(u, sizeof(u), "%s/v1/chat/completions", url);
    json_t *body = chat(conversation(4, false));
    if (stream)
        json_object_set_new(body, "stream", json_true());
    char *text = json_dumps(body, JSON_COMPACT);
    const char *h[] = {"Content-Type: application/json", NULL};
    struct http_req req = {.method = "POST",
                           .url = u,
                           .body = text,
                           .body_len = strlen(text),
                           .headers = h,
                           .timeout_ms = 10000};
    struct http_resp r;
    struct diag d;
    http_resp_init(&r);
    long status = http_do(c, &req, &r, &d) ? -1 : r.status;
    if (stream && !strstr(buf_str(&r.body), "data: [DONE]"))
        status = -2;
    http_resp_release(&r);
    free(text);
    json_decref(body);
    http_client_free(c);
    return status;
}

/* The messages of each stored exchange's request. */
static size_t stored_msgs(json_t *all, size_t i)
{
    json_t *b = json_object_get(json_array_get(all, i), "req_body");
    return json_array_size(json_object_get(b, "messages"));
}

/* The two places the gateway takes beside `record`: between record and
 * the server (record stores what the client sent) and between the client
 * and record (record stores what the gateway made of it). */
static void test_gateway_beside_record(void **state)
{
    struct simt *t = *state;
    struct proc *sim = simt_start(t, NULL);
    struct gateway_opts o = {.keep_last = 1};
    char *dir = rec_tmpdir();
    char *db_a = xasprintf("%s/a.db", dir), *db_b = xasprintf("%s/b.db", dir);
    struct proc ra, rb;
    long st[4];

    /* client -> record -> gateway -> sim */
    struct gateway *ga = gateway_start(proc_url(sim), &o);
    assert_int_equal(rec_start_record(&ra, gateway_url(ga), db_a, NULL), 0);
    st[0] = post_chat(proc_url(&ra), false);
    st[1] = post_chat(proc_url(&ra), true);
    proc_stop(&ra);
    /* client -> gateway -> record -> sim */
    assert_int_equal(rec_start_record(&rb, proc_url(sim), db_b, NULL), 0);
    struct gateway *gb = gateway_start(proc_url(&rb), &o);
    st[2] = post_chat(gateway_url(gb), false);
    st[3] = post_chat(gateway_url(gb), true);
    proc_stop(&rb);
    gateway_stop(ga);
    gateway_stop(gb);

    for (int i = 0; i < 4; i++)
        assert_int_equal(st[i], 200);
    json_t *a = rec_load(db_a), *b = rec_load(db_b);
    assert_int_equal(json_array_size(a), 2);
    assert_int_equal(json_array_size(b), 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(stored_msgs(a, i), 8); /* as the client sent it */
        assert_int_equal(stored_msgs(b, i), 2); /* system + the last turn */
    }
    json_decref(a);
    json_decref(b);
    free(db_a);
    free(db_b);
    rec_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_pass_through_changes_nothing),
        T(test_stream_passes_byte_for_byte),
        T(test_chunked_request_body),
        T(test_keep_last_turns_keeps_system),
        T(test_drop_oldest_turns),
        T(test_compact_once_and_every),
        T(test_clip_prune_strip),
        T(test_set_field_from_nth),
        T(test_tokenize_rewritten_only_when_asked),
        T(test_first_attempt_refused),
        cmocka_unit_test_setup_teardown(test_sim_behind_gateway, simt_setup,
                                        sim_teardown),
        cmocka_unit_test_setup_teardown(test_gateway_beside_record, simt_setup,
                                        sim_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
