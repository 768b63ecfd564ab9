/*
 * End-to-end: a scripted multi-turn client (libcurl) talks to a real
 * `fidelity sim` on 127.0.0.1 through a real `fidelity record`, with and
 * without a fault; then `fidelity audit --json -` reads the store record
 * wrote and must report the fault's finding, and nothing on the clean run.
 * Also replays opencode's own compaction requests (the captures in
 * tests/fixtures/) through record: audit must find the compaction.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "audit_test.h"
#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "store/store.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/upstream.h"

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

/* Sends body through record; returns the reply text from the SSE deltas. */
static char *exchange(struct http_client *hc, const char *url,
                      const char *session, json_t *body)
{
    struct http_resp resp;
    struct diag d;
    struct buf text = BUF_INIT;
    char *sid = xasprintf("X-Session-Id: %s", session);
    const char *hdr[] = {"Content-Type: application/json",
                         "User-Agent: e2e-client/1.0", sid, NULL};
    char *s = json_dumps(body, JSON_COMPACT), *save = NULL;
    struct http_req req = {.method = "POST",
                           .url = url,
                           .body = s,
                           .body_len = strlen(s),
                           .headers = hdr,
                           .timeout_ms = 20000};
    http_resp_init(&resp);
    assert_int_equal(http_do(hc, &req, &resp, &d), 0);
    assert_int_equal(resp.status, 200);
    for (char *line = strtok_r(resp.body.data, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *c =
            strncmp(line, "data: {", 7) ? NULL : json_loads(line + 6, 0, NULL);
        json_t *delta = json_object_get(
            json_array_get(json_object_get(c, "choices"), 0), "delta");
        const char *t = json_string_value(json_object_get(delta, "content"));
        if (t)
            buf_adds(&text, t);
        json_decref(c);
    }
    http_resp_release(&resp);
    free(s);
    free(sid);
    return buf_detach(&text, NULL);
}

/* A three-turn conversation through record_url: a fact, filler that grows
 * the prompt, the question. Returns the last reply. */
static char *converse(const char *record_url, const char *session, int filler)
{
    struct http_client *hc = http_client_new();
    char *url = xasprintf("%s/v1/chat/completions", record_url);
    char *reply = NULL;
    const char *users[] = {"The access code for the blue door is 4812.", NULL,
                           "What is the access code for the blue door?"};
    struct buf pad = BUF_INIT;
    for (int i = 0; i < filler; i++)
        buf_printf(&pad, "Note %d: the meeting moved to room %d. ", i, 100 + i);
    users[1] = pad.len ? pad.data : "Let X = 123.";
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content",
                             "You are a helpful assistant.");
    for (int t = 0; t < 3; t++) {
        json_array_append_new(msgs, xb_msg("user", users[t]));
        json_t *body = json_pack(
            "{s:s, s:O, s:f, s:i, s:b, s:{s:b}}", "model", "fidelity-sim",
            "messages", msgs, "temperature", 0.0, "max_tokens", 256, "stream",
            1, "stream_options", "include_usage", 1);
        free(reply);
        reply = exchange(hc, url, session, body);
        json_decref(body);
        json_array_append_new(msgs, xb_msg("assistant", reply));
    }
    json_decref(msgs);
    buf_release(&pad);
    free(url);
    http_client_free(hc);
    return reply;
}

/* sim with fault options (NULL-terminated, may be NULL) and record in
 * front of it storing into db. */
static void start_pair(struct proc *sim, struct proc *rec,
                       const char *const faults[], const char *db)
{
    const char *argv[16] = {"sim", "--listen", "127.0.0.1:0"};
    int n = 3;
    for (int i = 0; faults && faults[i]; i++)
        argv[n++] = faults[i];
    argv[n] = NULL;
    assert_int_equal(proc_start(sim, argv), 0);
    char *up = xstrdup(proc_url(sim));
    if (rec_start_record(rec, up, db, NULL)) {
        proc_stop(sim);
        fail_msg("fidelity record did not start");
    }
    free(up);
}

/* Stops record first: it stores every finished exchange before exiting. */
static void stop_pair(struct proc *sim, struct proc *rec)
{
    proc_stop(rec);
    proc_stop(sim);
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
    struct proc sim, rec;
    char *db = xasprintf("%s/clean.db", dir);
    start_pair(&sim, &rec, NULL, db);
    char *reply = converse(proc_url(&rec), "e2e-clean", 0);
    proc_stop(&rec);
    char *tok = xasprintf("%s/tokenize", proc_url(&sim));
    const char *extra[] = {"--expect", "temperature=0", "--tokenize-url", tok,
                           NULL};
    json_t *j = audit_json(db, extra, EXIT_PASS);
    proc_stop(&sim);
    assert_non_null(strstr(reply, "4812"));
    assert_int_equal(count_at_least_warn(j), 0);
    /* the sampling parameters the client sent, as record stored them */
    json_t *s = finding(j, "sampling.sent");
    assert_non_null(s);
    json_t *sent = json_object_get(json_object_get(s, "evidence"), "sent");
    assert_true(json_number_value(json_object_get(sent, "temperature")) == 0);
    assert_int_equal(json_integer_value(json_object_get(sent, "max_tokens")),
                     256);
    assert_string_equal(json_string_value(json_object_get(s, "session")),
                        "e2e-clean");
    /* the context length came from the sim's /tokenize answer */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(j, "options"), "context_length")),
                     131072);
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
    struct proc sim, rec;
    const char *faults[] = {"--keep-last-turns", "1", NULL};
    char *db = xasprintf("%s/window.db", dir);
    start_pair(&sim, &rec, faults, db);
    char *reply = converse(proc_url(&rec), "e2e-window", 0);
    stop_pair(&sim, &rec);
    json_t *j = audit_json(db, NULL, EXIT_FAIL);
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
    assert_null(finding(j, "history.echo"));
    json_decref(j);
    free(reply);
    free(db);
}

/* The server keeps 120 tokens and drops the middle with HTTP 200: the
 * prompt stops growing, sits at the limit, and /tokenize disagrees. */
static void test_overflow_middle_gives_truncation_findings(void **state)
{
    (void)state;
    struct proc sim, rec;
    const char *faults[] = {"--context-limit", "120", "--overflow", "middle",
                            NULL};
    char *db = xasprintf("%s/overflow.db", dir);
    start_pair(&sim, &rec, faults, db);
    char *reply = converse(proc_url(&rec), "e2e-overflow", 20);
    proc_stop(&rec);
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
    assert_non_null(finding(j, "truncation.flat"));
    json_decref(j);
    free(tok);
    free(reply);
    free(db);
}

/* opencode's last request before auto-compaction, its summary request and
 * the request after it, sent through record with opencode's own headers. */
/* A stream the upstream cuts after N bytes: audit's finding says N (the
 * audit copy of an exchange once zeroed the length of every 2xx body, so
 * each stream finding said "after 0 bytes"). */
static void test_cut_stream_finding_says_bytes(void **state)
{
    (void)state;
    struct upstream *up = upstream_start();
    assert_non_null(up);
    struct proc rec;
    char *db = xasprintf("%s/cut.db", dir);
    if (rec_start_record(&rec, upstream_url(up), db, NULL)) {
        upstream_stop(up);
        fail_msg("fidelity record did not start");
    }
    char *url = xasprintf("%s/reset", proc_url(&rec));
    static const char body[] = "{\"model\":\"m\",\"stream\":true,\"messages\":"
                               "[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct rec_resp r;
    rec_resp_init(&r);
    rec_fetch(url, body, strlen(body), NULL, 0, &r);
    size_t n;
    char *sent = upstream_body("/reset", &n);
    size_t got = r.body.len;
    rec_resp_release(&r);
    free(sent);
    free(url);
    proc_stop(&rec);
    upstream_stop(up);
    assert_true(n > 0);
    assert_int_equal(got, n); /* the client had those N bytes */
    json_t *rep = audit_json(db, NULL, 1);
    json_t *f = finding(rep, "stream.incomplete");
    assert_non_null(f);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(f, "evidence"), "bytes")),
                     (json_int_t)n);
    char *want = xasprintf("after %zu bytes", n);
    const char *summary = json_string_value(json_object_get(f, "summary"));
    if (!strstr(summary, want))
        fail_msg("summary '%s' does not say '%s'", summary, want);
    free(want);
    json_decref(rep);
    free(db);
}

static void test_opencode_compaction_through_record(void **state)
{
    (void)state;
    static const char *const files[] = {
        "compact-02-pre-compaction-request.json",
        "compact-03-compaction-summary-request.json",
        "compact-04-post-compaction-request.json"};
    struct proc sim, rec;
    char *db = xasprintf("%s/compact.db", dir);
    start_pair(&sim, &rec, NULL, db);
    char *url = xasprintf("%s/v1/chat/completions", proc_url(&rec));
    for (int i = 0; i < 3; i++) {
        json_t *h = fixture_headers(files[i]), *v;
        json_t *b = fixture_body(files[i]);
        const char *hdr[16], *k;
        char *owned[16];
        int n = 0;
        json_object_foreach(h, k, v)
        {
            if (strcasecmp(k, "host") && strcasecmp(k, "content-length") &&
                strcasecmp(k, "accept-encoding") && n < 15) {
                owned[n] = xasprintf("%s: %s", k, json_string_value(v));
                hdr[n] = owned[n];
                n++;
            }
        }
        hdr[n] = NULL;
        char *body = json_dumps(b, JSON_COMPACT);
        struct rec_resp r;
        rec_resp_init(&r);
        assert_int_equal(rec_fetch(url, body, strlen(body), hdr, 0, &r), 0);
        assert_int_equal(r.status, 200);
        rec_resp_release(&r);
        free(body);
        for (int k2 = 0; k2 < n; k2++)
            free(owned[k2]);
        json_decref(h);
        json_decref(b);
    }
    stop_pair(&sim, &rec);
    json_t *j = audit_json(db, NULL, EXIT_FAIL);
    json_t *f = finding(j, "history.compaction");
    assert_non_null(f);
    assert_int_equal(json_integer_value(json_object_get(f, "request")), 3);
    assert_string_equal(json_string_value(json_object_get(f, "session")),
                        "ses_REDACTED");
    json_t *ev = json_object_get(f, "evidence");
    assert_int_equal(json_integer_value(json_object_get(ev, "prev_request")),
                     1);
    assert_true(json_is_true(json_object_get(ev, "continue_injected")));
    json_decref(j);
    free(url);
    free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_sim_session_has_no_findings),
        cmocka_unit_test(test_keep_last_turns_gives_first_message_finding),
        cmocka_unit_test(test_overflow_middle_gives_truncation_findings),
        cmocka_unit_test(test_opencode_compaction_through_record),
        cmocka_unit_test(test_cut_stream_finding_says_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
