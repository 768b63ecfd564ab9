/*
 * End-to-end: a scripted multi-turn client (libcurl) talks to a real
 * `fidelity sim` on 127.0.0.1, with and without a fault, then the real
 * `fidelity audit --json -` reads what was recorded. Until `fidelity
 * record` is in the tree the client records each exchange itself (request
 * body, the SSE stream reassembled, first-byte time) with xchg_put; the
 * analysis and the binary under test are the same either way.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "audit_test.h"
#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "store/store.h"
#include "util/proc.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/fidelity-e2e-audit-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (getenv("AUDIT_TEST_KEEP")) /* to look at a failure */
        return 0;
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

/* The reply reassembled from an OpenAI SSE stream, in xchg.h's shape. */
static json_t *reassemble(const char *sse)
{
    struct buf content = BUF_INIT;
    json_t *reply = json_object(), *usage = NULL;
    const char *finish = NULL;
    int chunks = 0;
    bool done = false;
    char *copy = xstrdup(sse), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "data: ", 6))
            continue;
        if (!strcmp(line + 6, "[DONE]")) {
            done = true;
            continue;
        }
        json_t *c = json_loads(line + 6, 0, NULL);
        json_t *ch = json_array_get(json_object_get(c, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        const char *t = json_string_value(json_object_get(delta, "content"));
        chunks++;
        if (t)
            buf_adds(&content, t);
        if (json_is_string(json_object_get(ch, "finish_reason")))
            finish = json_string_value(json_object_get(ch, "finish_reason"));
        if (json_is_object(json_object_get(c, "usage"))) {
            json_decref(usage);
            usage = json_incref(json_object_get(c, "usage"));
        }
        if (finish)
            json_object_set_new(reply, "finish_reason", json_string(finish));
        finish = NULL;
        json_decref(c);
    }
    json_object_set_new(reply, "content", json_string(buf_str(&content)));
    json_object_set_new(reply, "usage", usage ? usage : json_null());
    json_object_set_new(reply, "done", json_boolean(done));
    json_object_set_new(reply, "chunks", json_integer(chunks));
    json_object_set_new(reply, "max_gap_ms", json_real(0));
    buf_release(&content);
    free(copy);
    return reply;
}

/* Sends body to the sim, stores the exchange, returns the reply text. */
static char *exchange(struct http_client *hc, sqlite3 *db, const char *url,
                      const char *session, json_t *body)
{
    struct http_resp resp;
    struct diag d;
    struct xchg x;
    const char *hdr[] = {"Content-Type: application/json",
                         "User-Agent: e2e-client/1.0", NULL};
    char *s = json_dumps(body, JSON_COMPACT);
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = s,
                           .body_len = strlen(s),
                           .headers = hdr,
                           .timeout_ms = 20000};
    http_resp_init(&resp);
    assert_int_equal(http_do(hc, &req, &resp, &d), 0);
    assert_int_equal(resp.status, 200);
    xchg_init(&x);
    x.session = xstrdup(session);
    x.kind = xstrdup("main");
    x.method = xstrdup("POST");
    x.path = xstrdup("/v1/chat/completions");
    x.req_headers = json_pack("{s:s}", "User-Agent", "e2e-client/1.0");
    x.req_body = json_deep_copy(body);
    x.status = (int)resp.status;
    x.streamed = true;
    x.resp_raw = xstrdup(buf_str(&resp.body));
    x.resp_raw_len = resp.body.len;
    x.reply = reassemble(buf_str(&resp.body));
    x.up_ttfb_ms = x.down_ttfb_ms = resp.t_first_byte * 1000;
    x.up_total_ms = x.down_total_ms = resp.t_total * 1000;
    x.end = XCHG_COMPLETE;
    assert_int_equal(xchg_put(db, &x, &d), 0);
    char *text =
        xstrdup(json_string_value(json_object_get(x.reply, "content")));
    xchg_release(&x);
    http_resp_release(&resp);
    free(s);
    return text;
}

/* A three-turn conversation: a fact, filler that grows the prompt, the
 * question. Returns the last reply. */
static char *converse(const char *sim_url, const char *db_path,
                      const char *session, int filler)
{
    struct http_client *hc = http_client_new();
    sqlite3 *db;
    struct diag d;
    char *url = xasprintf("%s/v1/chat/completions", sim_url);
    char *reply = NULL;
    const char *users[] = {"The access code for the blue door is 4812.", NULL,
                           "What is the access code for the blue door?"};
    struct buf pad = BUF_INIT;
    for (int i = 0; i < filler; i++)
        buf_printf(&pad, "Note %d: the meeting moved to room %d. ", i, 100 + i);
    users[1] = pad.len ? pad.data : "Let X = 123.";
    assert_int_equal(store_open(db_path, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content",
                             "You are a helpful assistant.");
    for (int t = 0; t < 3; t++) {
        json_array_append_new(msgs, xb_msg("user", users[t]));
        json_t *body = json_pack(
            "{s:s, s:O, s:f, s:i, s:b, s:{s:b}}", "model", "fidelity-sim",
            "messages", msgs, "temperature", 0.0, "max_tokens", 256, "stream",
            1, "stream_options", "include_usage", 1);
        free(reply);
        reply = exchange(hc, db, url, session, body);
        json_decref(body);
        json_array_append_new(msgs, xb_msg("assistant", reply));
    }
    json_decref(msgs);
    store_close(db);
    buf_release(&pad);
    free(url);
    http_client_free(hc);
    return reply;
}

static json_t *audit_json(const char *db_path, const char *const extra[],
                          int want_rc)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[16] = {"audit", "--db", db_path, "--json", "-"};
    int n = 5;
    for (int i = 0; extra && extra[i]; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc != want_rc)
        print_message("audit exited %d: %s%s\n", rc, buf_str(&out),
                      buf_str(&err));
    assert_int_equal(rc, want_rc);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    buf_release(&out);
    buf_release(&err);
    return j;
}

static json_t *finding(json_t *report, const char *rule)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(report, "findings"), i, f)
    {
        if (!strcmp(json_string_value(json_object_get(f, "rule")), rule))
            return f;
    }
    return NULL;
}

static size_t count_at_least_warn(json_t *report)
{
    json_t *c = json_object_get(report, "counts");
    return (size_t)(json_integer_value(json_object_get(c, "warn")) +
                    json_integer_value(json_object_get(c, "error")));
}

static void test_clean_sim_session_has_no_findings(void **state)
{
    (void)state;
    struct proc sim;
    const char *argv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    char *db = xasprintf("%s/clean.db", dir);
    assert_int_equal(proc_start(&sim, argv), 0);
    char *reply = converse(proc_url(&sim), db, "e2e-clean", 0);
    char *tok = xasprintf("%s/tokenize", proc_url(&sim));
    const char *extra[] = {"--expect", "temperature=0", "--tokenize-url", tok,
                           NULL};
    json_t *j = audit_json(db, extra, EXIT_PASS);
    proc_stop(&sim);
    assert_non_null(strstr(reply, "4812"));
    assert_int_equal(count_at_least_warn(j), 0);
    assert_non_null(finding(j, "sampling.sent"));
    json_decref(j);
    free(tok);
    free(reply);
    free(db);
}

/* The server renders only the last user turn: the question arrives with
 * its history, the reply says there is none, and the server is blamed. */
static void test_keep_last_turns_gives_first_message_finding(void **state)
{
    (void)state;
    struct proc sim;
    const char *argv[] = {"sim", "--listen", "127.0.0.1:0", "--keep-last-turns",
                          "1",   NULL};
    char *db = xasprintf("%s/window.db", dir);
    assert_int_equal(proc_start(&sim, argv), 0);
    char *reply = converse(proc_url(&sim), db, "e2e-window", 0);
    json_t *j = audit_json(db, NULL, EXIT_FAIL);
    proc_stop(&sim);
    assert_non_null(strstr(reply, "start of our conversation"));
    json_t *f = finding(j, "first_message.claim");
    assert_non_null(f);
    assert_int_equal(json_integer_value(json_object_get(f, "request")), 3);
    json_t *ev = json_object_get(f, "evidence");
    assert_string_equal(json_string_value(json_object_get(ev, "blame")),
                        "server");
    assert_int_equal(json_integer_value(json_object_get(ev, "user_turns_sent")),
                     3);
    assert_null(finding(j, "history.rewrite"));
    json_decref(j);
    free(reply);
    free(db);
}

/* The server keeps 120 tokens and drops the middle with HTTP 200: the
 * prompt stops growing, sits at the limit, and /tokenize disagrees. */
static void test_overflow_middle_gives_truncation_findings(void **state)
{
    (void)state;
    struct proc sim;
    const char *argv[] = {"sim", "--listen",   "127.0.0.1:0", "--context-limit",
                          "120", "--overflow", "middle",      NULL};
    char *db = xasprintf("%s/overflow.db", dir);
    assert_int_equal(proc_start(&sim, argv), 0);
    char *reply = converse(proc_url(&sim), db, "e2e-overflow", 20);
    char *tok = xasprintf("%s/tokenize", proc_url(&sim));
    const char *extra[] = {"--tokenize-url", tok, "--context-length", "120",
                           NULL};
    json_t *j = audit_json(db, extra, EXIT_FAIL);
    proc_stop(&sim);
    json_t *below = finding(j, "truncation.below");
    assert_non_null(below);
    json_t *ev = json_object_get(below, "evidence");
    assert_string_equal(json_string_value(json_object_get(ev, "source")),
                        "tokenize");
    assert_true(json_integer_value(json_object_get(ev, "prompt_tokens")) <=
                120);
    assert_non_null(finding(j, "truncation.at_limit"));
    json_decref(j);
    free(tok);
    free(reply);
    free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_sim_session_has_no_findings),
        cmocka_unit_test(test_keep_last_turns_gives_first_message_finding),
        cmocka_unit_test(test_overflow_middle_gives_truncation_findings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
