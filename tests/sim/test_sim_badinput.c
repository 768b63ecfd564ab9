/*
 * End-to-end: bad input to `fidelity sim` and many clients at once. Every
 * malformed body (broken JSON, missing or mistyped fields, invalid UTF-8,
 * a body over --max-body, out-of-range token ids) gets a 4xx with an
 * OpenAI-style {"error": {...}} naming the problem, and the server keeps
 * serving; so it does after broken connections. 64 simultaneous clients
 * are all answered, each with its own conversation's fact.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/simtest.h"

struct bad_case {
    const char *path;
    const char *body;
    long status;
    const char *needle; /* the error message must mention it; NULL: any */
};

#define CHAT "/v1/chat/completions"
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const struct bad_case cases[] = {
    {CHAT, "{\"messages\": [", 400, "JSON"},
    {CHAT, "", 400, NULL},
    {CHAT, "not json at all", 400, "JSON"},
    {CHAT, "[1, 2, 3]", 400, NULL},
    {CHAT, "{\"model\":\"sim\"}", 400, "messages"},
    {CHAT, "{\"messages\":\"hi\"}", 400, "messages"},
    {CHAT, "{\"messages\":[]}", 400, "messages"},
    {CHAT, "{\"messages\":[42]}", 400, "messages"},
    {CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "role"},
    {CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", 400,
     "role"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":42}]}", 400,
     "content"},
    {CHAT, "{" MSGS ",\"max_tokens\":\"ten\"}", 400, "max_tokens"},
    {CHAT, "{" MSGS ",\"max_tokens\":-5}", 400, "max_tokens"},
    {CHAT, "{" MSGS ",\"temperature\":\"hot\"}", 400, "temperature"},
    {CHAT, "{" MSGS ",\"stream\":\"yes\"}", 400, "stream"},
    {CHAT, "{" MSGS ",\"logprobs\":true,\"top_logprobs\":\"x\"}", 400,
     "top_logprobs"},
    {CHAT, "{" MSGS ",\"tools\":\"get_weather\"}", 400, "tools"},
    {CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff\xfe "
     "byte\"}]}",
     400, "UTF"},
    {CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"overlong \xc0\xaf"
     "\"}]}",
     400, "UTF"},
    {CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"cut \xe6\x9d\"}]}",
     400, "UTF"},
    {"/v1/completions", "{\"model\":\"sim\"}", 400, "prompt"},
    {"/v1/completions", "{\"prompt\":42}", 400, "prompt"},
    {"/v1/completions", "{\"prompt\":[1,\"x\"]}", 400, "prompt"},
    {"/v1/completions", "{\"prompt\":[-1]}", 400, NULL},
    {"/v1/completions", "{\"prompt\":[30037412]}", 400, NULL},
    {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":\"many\"}", 400,
     "logprobs"},
    {"/tokenize", "{}", 400, NULL},
    {"/tokenize", "{\"prompt\":[1,2]}", 400, "prompt"},
    {"/detokenize", "{\"tokens\":\"abc\"}", 400, "tokens"},
    {"/detokenize", "{}", 400, "tokens"},
    {"/detokenize", "{\"tokens\":[1,-3]}", 400, NULL},
    {"/detokenize", "{\"tokens\":[99999999999]}", 400, NULL},
    {"/generate", "{}", 400, NULL},
    {"/generate", "{\"input_ids\":\"abc\"}", 400, "input_ids"},
    {"/generate",
     "{\"text\":\"hi\",\"sampling_params\":{\"max_new_tokens\":"
     "\"x\"}}",
     400, "max_new_tokens"},
    {"/sim/config", "{\"forget_after\":\"soon\"}", 400, "forget_after"},
    {"/sim/config", "{\"overflow\":\"sideways\"}", 400, "overflow"},
};

static void test_bad_bodies_get_named_4xx(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const struct bad_case *c = &cases[i];
        struct http_resp r;
        http_resp_init(&r);
        assert_int_equal(simt_raw(t, p, "POST", c->path, c->body,
                                  strlen(c->body), "application/json", &r),
                         0);
        if (r.status != c->status)
            fail_msg("POST %s '%s': HTTP %ld, expected %ld: %s", c->path,
                     c->body, r.status, c->status, buf_str(&r.body));
        json_t *j = json_loads(buf_str(&r.body), 0, NULL);
        if (!j)
            fail_msg("POST %s '%s': error body is not JSON: %s", c->path,
                     c->body, buf_str(&r.body));
        print_message("case %zu: %s\n", i,
                      json_string_value(json_object_get(
                          json_object_get(j, "error"), "message")));
        simt_assert_error(j, c->needle);
        json_decref(j);
        http_resp_release(&r);
        simt_assert_alive(t, p);
    }
    /* and it still answers properly */
    char *s = simt_ask(t, p,
                       simt_chat1("The access code for the blue door is "
                                  "4812. What is the access code for the "
                                  "blue door?"));
    assert_string_equal(s, "The access code for the blue door is 4812.");
    free(s);
}

static void test_body_over_cap_is_413(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--max-body", "4096", NULL);
    /* between the cap and twice the cap: the sim's own OpenAI-shaped 413 */
    char *fill = simt_filler(1300, 1);
    json_t *b = simt_chat1(fill);
    free(fill);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    assert_true(strlen(text) > 4096 && strlen(text) < 8192);
    long st = 0;
    json_t *r = simt_post(t, p, CHAT, text, &st);
    free(text);
    assert_int_equal(st, 413);
    simt_assert_error(r, "4096");
    json_decref(r);
    simt_assert_alive(t, p);
    /* far over the cap: refused before it is read (413, any body) */
    char *big = simt_filler(20000, 2);
    struct http_resp hr;
    http_resp_init(&hr);
    simt_raw(t, p, "POST", CHAT, big, strlen(big), "application/json", &hr);
    assert_int_equal(hr.status, 413);
    http_resp_release(&hr);
    free(big);
    simt_assert_alive(t, p);
    /* a body under the cap is served */
    char *s = simt_ask(t, p, simt_chat1("Describe a calm harbour."));
    assert_true(strlen(s) > 0);
    free(s);
}

static int connect_to(const struct proc *p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void send_all(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        assert_true(n > 0);
        s += n;
        len -= (size_t)n;
    }
}

static void test_broken_connections_do_not_stop_the_server(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    /* half a body, then close */
    int fd = connect_to(p);
    send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                 "Content-Type: application/json\r\nContent-Length: 1000\r\n"
                 "\r\n{\"messages\":[");
    close(fd);
    simt_assert_alive(t, p);
    /* not HTTP at all */
    fd = connect_to(p);
    send_all(fd, "\x16\x03\x01 this is not http\r\n\r\n");
    char tmp[512];
    (void)!read(fd, tmp, sizeof(tmp));
    close(fd);
    simt_assert_alive(t, p);
    /* a streamed request whose client goes away after the headers */
    fd = connect_to(p);
    const char *body = "{\"stream\":true," MSGS "}";
    char req[512];
    snprintf(req, sizeof(req),
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    send_all(fd, req);
    (void)!read(fd, tmp, 16);
    close(fd);
    simt_assert_alive(t, p);
    /* many connections opened and dropped */
    for (int i = 0; i < 100; i++)
        close(connect_to(p));
    simt_assert_alive(t, p);
}

#define NCONC 64

struct conc_arg {
    const struct proc *p;
    pthread_barrier_t *bar;
    int i;
    long status;
    char *reply;
    char err[256]; /* the client's error, when the request failed */
};

static void *conc_one(void *ud)
{
    struct conc_arg *a = ud;
    struct http_client *c = http_client_new();
    char *text = xasprintf("The code for the door %d is %d. What is the code "
                           "for the door %d?",
                           a->i, a->i * 7 + 1, a->i);
    json_t *body = simt_chat1(text);
    char *url = xasprintf("%s" CHAT, proc_url(a->p));
    json_t *out = NULL;
    struct diag d;
    pthread_barrier_wait(a->bar);
    if (http_json(c, url, body, NULL, 60000, &a->status, &out, &d)) {
        snprintf(a->err, sizeof(a->err), "%s", d.msg);
    } else {
        json_t *m = json_object_get(
            json_array_get(json_object_get(out, "choices"), 0), "message");
        const char *s = json_string_value(json_object_get(m, "content"));
        a->reply = s ? xstrdup(s) : NULL;
    }
    json_decref(out);
    json_decref(body);
    free(url);
    free(text);
    http_client_free(c);
    return NULL;
}

static void test_64_simultaneous_connections(void **state)
{
    struct simt *t = *state;
    /* the latency keeps every request in flight at the same time */
    struct proc *p = simt_start(t, "--latency-ms", "200", NULL);
    pthread_t th[NCONC];
    struct conc_arg args[NCONC];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, NCONC);
    for (int i = 0; i < NCONC; i++) {
        args[i] = (struct conc_arg){.p = p, .bar = &bar, .i = i};
        assert_int_equal(pthread_create(&th[i], NULL, conc_one, &args[i]), 0);
    }
    for (int i = 0; i < NCONC; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    int bad = 0;
    for (int i = 0; i < NCONC; i++) {
        char want[96];
        snprintf(want, sizeof(want), "The code for the door %d is %d.", i,
                 i * 7 + 1);
        if (args[i].status != 200 || !args[i].reply ||
            strcmp(args[i].reply, want)) {
            print_message("client %d: HTTP %ld '%s' %s\n", i, args[i].status,
                          args[i].reply ? args[i].reply : "(none)",
                          args[i].err);
            bad++;
        }
        free(args[i].reply);
    }
    assert_int_equal(bad, 0);
    simt_assert_alive(t, p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_bad_bodies_get_named_4xx),
        T(test_body_over_cap_is_413),
        T(test_broken_connections_do_not_stop_the_server),
        T(test_64_simultaneous_connections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
