/*
 * End-to-end on PostgreSQL: `fidelity record --db postgresql://...` in
 * front of a real `fidelity sim` with a fault, then `fidelity audit --db`
 * the same URL, must give the same findings as the same traffic recorded
 * into a SQLite file; sessions, export and report read the URL as they
 * read the file. A password in the URL is in none of their output.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/pgsrv.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/xchg_build.h"

static char dir[64];
static char home[PATH_MAX];

/* record names its intake log after a URL in its current directory: the
 * test runs in a directory of its own, the binary by its absolute path */
static int setup(void **state)
{
    (void)state;
    return pgsrv_enter_dir(dir, "/tmp/fidelity-pgrec-XXXXXX", home);
}

static int teardown(void **state)
{
    (void)state;
    return pgsrv_leave_dir(dir, home);
}

static char *exchange(struct http_client *hc, const char *url,
                      const char *session, json_t *body)
{
    struct http_resp resp;
    struct diag d;
    struct buf text = BUF_INIT;
    char *sid = xasprintf("X-Session-Id: %s", session);
    const char *hdr[] = {"Content-Type: application/json", sid, NULL};
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
    char *r = buf_detach(&text, NULL);
    return r ? r : xstrdup("");
}

/* A three-turn conversation: a fact, filler, the question. */
static void converse(const char *record_url, const char *session, int filler)
{
    struct http_client *hc = http_client_new();
    char *url = xasprintf("%s/v1/chat/completions", record_url);
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
            "{s:s, s:O, s:f, s:i, s:b}", "model", "fidelity-sim", "messages",
            msgs, "temperature", 0.0, "max_tokens", 128, "stream", 1);
        char *reply = exchange(hc, url, session, body);
        json_decref(body);
        json_array_append_new(msgs, xb_msg("assistant", reply));
        free(reply);
    }
    json_decref(msgs);
    buf_release(&pad);
    free(url);
    http_client_free(hc);
}

/* Records the traffic into db through a sim that keeps the last turn
 * only, and returns audit's JSON report of it. */
static json_t *record_and_audit(const char *db)
{
    struct proc sim, rec;
    const char *sargv[] = {
        "sim", "--listen", "127.0.0.1:0", "--keep-last-turns", "1", NULL};
    assert_int_equal(proc_start(&sim, sargv), 0);
    char *up = xstrdup(proc_url(&sim));
    char *spill = xasprintf("%s/spill-%d.jsonl", dir, db[0] == '/');
    const char *extra[] = {"--spill", spill, NULL};
    if (rec_start_record(&rec, up, db, extra)) {
        proc_stop(&sim);
        fail_msg("fidelity record did not start");
    }
    converse(proc_url(&rec), "s-window", 0);
    converse(proc_url(&rec), "s-filler", 12);
    proc_stop(&rec);
    proc_stop(&sim);
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"audit", "--db",   db,  "--spill",
                          spill,   "--json", "-", NULL};
    int rc = proc_run(argv, NULL, &out, &err, 60);
    if (rc != EXIT_FAIL)
        fail_msg("audit exited %d: %s%s", rc, buf_str(&out), buf_str(&err));
    /* a password in the URL is nowhere in what audit wrote */
    assert_null(strstr(buf_str(&out), "s3cret"));
    assert_null(strstr(buf_str(&err), "s3cret"));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    buf_release(&out);
    buf_release(&err);
    free(spill);
    free(up);
    return j;
}

static void test_audit_same_as_sqlite(void **state)
{
    (void)state;
    char url[256], db[128];
    pgsrv_db_password(url, sizeof(url), "s3cret");
    snprintf(db, sizeof(db), "%s/t.db", dir);
    json_t *lite = record_and_audit(db);
    json_t *pg = record_and_audit(url);
    char *shown = xasprintf("postgresql://***@%s", strchr(url, '@') + 1);
    assert_string_equal(json_string_value(json_object_get(pg, "db")), shown);
    free(shown);
    /* the same sessions and findings; the stores' names differ */
    const char *keys[] = {"sessions", "findings", "counts"};
    for (size_t k = 0; k < 3; k++) {
        char *a = json_dumps(json_object_get(lite, keys[k]),
                             JSON_COMPACT | JSON_SORT_KEYS);
        char *b = json_dumps(json_object_get(pg, keys[k]),
                             JSON_COMPACT | JSON_SORT_KEYS);
        if (strcmp(a, b))
            fail_msg("%s differ:\nsqlite: %s\npostgresql: %s", keys[k], a, b);
        free(a);
        free(b);
    }
    /* and the fault was found */
    assert_true(json_array_size(json_object_get(pg, "findings")) > 0);
    char *found = json_dumps(json_object_get(pg, "findings"), 0);
    assert_non_null(strstr(found, "first_message.claim"));
    free(found);
    json_decref(lite);
    json_decref(pg);
    /* sessions, export and report read the URL too, the password masked */
    char *rows[2];
    const char *dbs[2] = {db, url};
    for (int k = 0; k < 2; k++) {
        struct buf out = BUF_INIT, err = BUF_INIT;
        const char *sargv[] = {"sessions", "--db", dbs[k], "--json", "-", NULL};
        assert_int_equal(proc_run(sargv, NULL, &out, &err, 60), 0);
        assert_null(strstr(buf_str(&out), "s3cret"));
        json_t *j = json_loads(buf_str(&out), 0, NULL);
        assert_non_null(j);
        rows[k] = json_dumps(json_object_get(j, "sessions"),
                             JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(j);
        buf_reset(&out);
        const char *eargv[] = {"export",   "--db",   dbs[k],
                               "--format", "openai", NULL};
        assert_int_equal(proc_run(eargv, NULL, &out, &err, 60), 0);
        assert_non_null(strstr(buf_str(&out), "blue door"));
        char *html = xasprintf("%s/r%d.html", dir, k);
        const char *rargv[] = {"report", "--db", dbs[k], "-o", html, NULL};
        assert_int_equal(proc_run(rargv, NULL, &out, &err, 60), 0);
        assert_null(strstr(buf_str(&err), "s3cret"));
        buf_reset(&out);
        assert_int_equal(rec_read_file(html, &out), 0);
        assert_null(strstr(buf_str(&out), "s3cret"));
        assert_non_null(strstr(buf_str(&out), "first_message.claim"));
        free(html);
        buf_release(&out);
        buf_release(&err);
    }
    assert_string_equal(rows[0], rows[1]);
    free(rows[0]);
    free(rows[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_audit_same_as_sqlite, setup,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
