/*
 * Tests for `fidelity audit`, `sessions` and `show` as a user runs them:
 * exchanges built from the opencode captures are stored with xchg_put (and
 * one appended to a spill file), then the real binary reads them: the
 * compaction is found, a clean session passes, exit codes and bad input
 * follow src/cmd/cmd.h.
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
#include "store/store.h"
#include "util/proc.h"

static char dir[64], db_path[128], spill_path[128];

static json_t *msg_at(const char *file, size_t i)
{
    json_t *b = fixture_body(file);
    json_t *m = json_incref(json_array_get(json_object_get(b, "messages"), i));
    json_decref(b);
    return m;
}

static void add(struct db *db, long long id, const char *session,
                const char *kind, const char *file, const char *reply)
{
    struct xchg x;
    struct diag d;
    xb_init(&x, id, session, fixture_body(file));
    x.id = 0;
    x.kind = xstrdup(kind);
    x.started = 1790000000.0 + (double)id;
    json_decref(x.req_headers);
    x.req_headers = fixture_headers(file);
    json_object_set_new(x.req_headers, "Authorization",
                        json_string("[redacted]"));
    xb_reply(&x, reply, NULL, NULL, xb_tokens(x.req_body), 20, "stop");
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xb_release(&x);
}

/* Stores one main request of session with messages msgs (taken) and a
 * reply of completion tokens 2 and prompt tokens ptok. */
static void put_chat(struct db *db, const char *session, json_t *msgs,
                     const char *reply, int ptok)
{
    struct xchg x;
    struct diag d;
    xb_init(&x, 0, session, xb_body("m", msgs));
    x.kind = xstrdup("main");
    xb_reply(&x, reply, NULL, NULL, ptok, 2, "stop");
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xb_release(&x);
}

/* ses_compact: compact-02, -03 (summary), -04. ses_plain: the title
 * request and plain-02 -> plain-03, a clean two-turn session. */
static int setup(void **state)
{
    (void)state;
    struct db *db;
    struct diag d;
    strcpy(dir, "/tmp/fidelity-audit-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(db_path, sizeof(db_path), "%s/run.db", dir);
    snprintf(spill_path, sizeof(spill_path), "%s/run.spill", dir);
    assert_int_equal(store_open(db_path, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    json_t *code = msg_at("plain-03-turn2-after-continue.json", 2);
    json_t *sum = msg_at("compact-04-post-compaction-request.json", 2);
    const char *code_s = json_string_value(json_object_get(code, "content"));
    add(db, 1, "ses_compact", "main", "compact-02-pre-compaction-request.json",
        code_s);
    add(db, 2, "ses_compact", "compaction",
        "compact-03-compaction-summary-request.json",
        json_string_value(json_object_get(sum, "content")));
    add(db, 3, "ses_compact", "main", "compact-04-post-compaction-request.json",
        "Done.");
    add(db, 4, "ses_plain", "title", "plain-01-title-request.json",
        "Tic tac toe in Python");
    add(db, 5, "ses_plain", "main", "plain-02-turn1-first-request.json",
        code_s);
    add(db, 6, "ses_plain", "main", "plain-03-turn2-after-continue.json",
        "Which file name?");
    store_close(db);
    json_decref(code);
    json_decref(sum);
    return 0;
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

static int run(const char *const argv[], struct buf *out, struct buf *err)
{
    buf_reset(out);
    buf_reset(err);
    return proc_run(argv, NULL, out, err, 60);
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

static void test_audit_finds_compaction_in_store(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"audit", "--db", db_path, "--json", "-", NULL};
    assert_int_equal(run(argv, &out, &err), EXIT_FAIL);
    json_t *j = json_loads(out.data, 0, NULL);
    assert_non_null(j);
    json_t *f = finding(j, "history.compaction");
    assert_non_null(f);
    assert_string_equal(json_string_value(json_object_get(f, "session")),
                        "ses_compact");
    assert_string_equal(json_string_value(json_object_get(f, "severity")),
                        "warn");
    assert_int_equal(json_integer_value(json_object_get(f, "request")), 3);
    json_t *ev = json_object_get(f, "evidence");
    assert_int_equal(json_integer_value(json_object_get(ev, "summary_request")),
                     2);
    /* no history finding in the clean session, and sampling reported */
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(j, "findings"), i, g)
    {
        const char *s = json_string_value(json_object_get(g, "session"));
        if (!strcmp(s, "ses_plain"))
            assert_string_equal(
                json_string_value(json_object_get(g, "severity")), "info");
    }
    assert_non_null(finding(j, "sampling.sent"));
    assert_true(json_integer_value(json_object_get(json_object_get(j, "counts"),
                                                   "warn")) >= 1);
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
}

static void test_audit_human_output_and_exit_codes(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *clean[] = {"audit",     "--db",      db_path,
                           "--session", "ses_plain", NULL};
    assert_int_equal(run(clean, &out, &err), EXIT_PASS);
    assert_non_null(strstr(out.data, "session ses_plain (opencode/1.18.33"));
    assert_non_null(strstr(out.data, "0 error, 0 warn"));
    const char *all[] = {"audit", "--db", db_path, NULL};
    assert_int_equal(run(all, &out, &err), EXIT_FAIL);
    /* grouped by session, the compaction with its evidence line */
    char *c = strstr(out.data, "warn  history.compaction: request 3");
    assert_non_null(c);
    assert_non_null(strstr(c, "\n      evidence: {"));
    assert_true(strstr(out.data, "session ses_compact") < c);
    const char *never[] = {"audit",     "--db",  db_path,
                           "--fail-on", "never", NULL};
    assert_int_equal(run(never, &out, &err), EXIT_PASS);
    const char *expect[] = {"audit",           "--db",      db_path,
                            "--session",       "ses_plain", "--expect",
                            "temperature=0.6", NULL};
    assert_int_equal(run(expect, &out, &err), EXIT_FAIL);
    assert_non_null(strstr(out.data, "sampling.expect"));
    assert_non_null(strstr(out.data, "the server's default applies"));
    buf_release(&out);
    buf_release(&err);
}

static void test_bad_input_is_usage_error(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *missing[] = {"audit", "--db", "/nonexistent/x.db", NULL};
    assert_int_equal(run(missing, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "'/nonexistent/x.db'"));
    const char *bad_expect[] = {"audit",    "--db", db_path,
                                "--expect", "temp", NULL};
    assert_int_equal(run(bad_expect, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "KEY=VALUE"));
    const char *bad_policy[] = {
        "audit", "--db", db_path, "--reasoning-policy", "sometimes", NULL};
    assert_int_equal(run(bad_policy, &out, &err), EXIT_USAGE);
    const char *bad_opt[] = {"audit", "--frobnicate", NULL};
    assert_int_equal(run(bad_opt, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "--frobnicate"));
    char *prof = xasprintf("%s/p.json", dir);
    FILE *f = fopen(prof, "w");
    fputs("{\"models\": {\"qwen3*\": {\"temprature\": 0.6}}}", f);
    fclose(f);
    const char *bad_prof[] = {"audit",     "--db", db_path,
                              "--profile", prof,   NULL};
    assert_int_equal(run(bad_prof, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "'temprature'"));
    free(prof);
    /* a store with the schema and no exchange: what a record that never
     * bound leaves; it is no clean run */
    struct db *edb;
    struct diag d;
    char *empty = xasprintf("%s/empty.db", dir);
    assert_int_equal(store_open(empty, &edb, &d), 0);
    assert_int_equal(xchg_schema(edb, &d), 0);
    store_close(edb);
    const char *a_empty[] = {"audit", "--db", empty, NULL};
    assert_int_equal(run(a_empty, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "no exchanges in"));
    assert_non_null(strstr(err.data, empty));
    assert_non_null(strstr(err.data, "is record running"));
    assert_null(strstr(out.data ? out.data : "", "0 findings"));
    free(empty);
    const char *show_none[] = {"show", "--db", db_path, NULL};
    assert_int_equal(run(show_none, &out, &err), EXIT_USAGE);
    const char *show_unknown[] = {"show", "nope", "--db", db_path, NULL};
    assert_int_equal(run(show_unknown, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "no session 'nope'"));
    buf_release(&out);
    buf_release(&err);
}

static void test_store_errors_exit_4(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    char *bad = xasprintf("%s/garbage.db", dir);
    char *spill = xasprintf("%s/bad.spill.jsonl", dir);
    FILE *f = fopen(bad, "w");
    for (int i = 0; i < 4096; i++)
        fputc("not a database "[i % 15], f);
    fclose(f);
    const char *a[] = {"audit", "--db", bad, NULL};
    assert_int_equal(run(a, &out, &err), EXIT_INTERNAL);
    assert_non_null(strstr(err.data, bad));
    const char *s[] = {"sessions", "--db", bad, NULL};
    assert_int_equal(run(s, &out, &err), EXIT_INTERNAL);
    f = fopen(spill, "w");
    fputs("not json\n{\"method\":\"POST\"}\n", f);
    fclose(f);
    const char *b[] = {"audit", "--db", db_path, "--spill", spill, NULL};
    assert_int_equal(run(b, &out, &err), EXIT_INTERNAL);
    assert_non_null(strstr(err.data, "line 1"));
    free(bad);
    free(spill);
    buf_release(&out);
    buf_release(&err);
}

static void test_profile_file(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    char *prof = xasprintf("%s/good.json", dir);
    FILE *f = fopen(prof, "w");
    fputs("{\"models\": {\"qwen3*\": {\"params\": {\"max_tokens\": 16384, "
          "\"temperature\": 0.6}, \"context_length\": 131072, "
          "\"note\": \"Qwen3 model card\"}}}",
          f);
    fclose(f);
    const char *argv[] = {"audit",     "--db",      db_path, "--session",
                          "ses_plain", "--profile", prof,    "--json",
                          "-",         NULL};
    assert_int_equal(run(argv, &out, &err), EXIT_FAIL);
    json_t *j = json_loads(out.data, 0, NULL);
    json_t *e = finding(j, "sampling.expect");
    assert_non_null(e);
    json_t *ev = json_object_get(e, "evidence");
    assert_string_equal(json_string_value(json_object_get(ev, "param")),
                        "temperature");
    assert_string_equal(json_string_value(json_object_get(ev, "source")),
                        "profile");
    json_decref(j);
    free(prof);
    buf_release(&out);
    buf_release(&err);
}

/* Counts of one read "1 exchange", "1 turn", "1 request", "1 session":
 * no "(s)" and no "1 exchanges". */
static void test_plural_of_one(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    char *one = xasprintf("%s/one.db", dir);
    struct db *db;
    struct diag d;
    assert_int_equal(store_open(one, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    put_chat(db, "ses_one", json_pack("[o]", xb_msg("user", "Hello there.")),
             "Hi.", 10);
    store_close(db);
    const char *argv[] = {"audit", "--db", one, "--fail-on", "never", NULL};
    assert_int_equal(run(argv, &out, &err), EXIT_PASS);
    print_message("%s", out.data);
    assert_non_null(strstr(out.data, "session ses_one (test-harness/1.0, "
                                     "1 exchange, 1 turn)\n"));
    assert_non_null(strstr(out.data, "m (main, 1 request) sent: (none); "));
    assert_non_null(strstr(out.data, " parameters left to the server"));
    assert_non_null(strstr(out.data, " info in 1 session\n"));
    assert_null(strstr(out.data, "(s)"));
    free(one);
    buf_release(&out);
    buf_release(&err);
}

/* A profile that cannot be read: the file and the reason, no JSON line. */
static void test_missing_profile_names_file_and_reason(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *miss[] = {"audit",     "--db",          db_path,
                          "--profile", "/missing.json", NULL};
    assert_int_equal(run(miss, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "fidelity audit: cannot read profile "
                                     "'/missing.json': No such file or "
                                     "directory\n"));
    assert_null(strstr(err.data, "line"));
    const char *isdir[] = {"audit", "--db", db_path, "--profile", dir, NULL};
    assert_int_equal(run(isdir, &out, &err), EXIT_USAGE);
    assert_non_null(strstr(err.data, "': Is a directory\n"));
    assert_null(strstr(err.data, "line"));
    buf_release(&out);
    buf_release(&err);
}

static void test_sessions_and_show(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *sj[] = {"sessions", "--db",       db_path, "--json",
                        "-",        "--findings", NULL};
    assert_int_equal(run(sj, &out, &err), EXIT_PASS);
    json_t *j = json_loads(out.data, 0, NULL);
    json_t *rows = json_object_get(j, "sessions");
    assert_int_equal(json_array_size(rows), 2);
    json_t *plain = json_array_get(rows, 1);
    assert_string_equal(json_string_value(json_object_get(plain, "session")),
                        "ses_plain");
    assert_string_equal(json_string_value(json_object_get(plain, "harness")),
                        "opencode/1.18.33");
    json_t *kinds = json_object_get(plain, "requests");
    assert_int_equal(json_integer_value(json_object_get(kinds, "main")), 2);
    assert_int_equal(json_integer_value(json_object_get(kinds, "title")), 1);
    assert_int_equal(json_integer_value(json_object_get(plain, "turns")), 2);
    /* the prompt tokens the three exchanges reported, summed */
    long sum = 0;
    const char *files[] = {"plain-01-title-request.json",
                           "plain-02-turn1-first-request.json",
                           "plain-03-turn2-after-continue.json"};
    for (int i = 0; i < 3; i++) {
        json_t *b = fixture_body(files[i]);
        sum += xb_tokens(b);
        json_decref(b);
    }
    assert_int_equal(
        json_integer_value(json_object_get(plain, "prompt_tokens")), sum);
    json_t *comp = json_array_get(rows, 0);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(comp, "findings"), "warn")),
                     1);
    json_decref(j);
    /* without --findings: no audit, findings null, the rest alike (twice:
     * the second listing reads the rows the first kept) */
    for (int k = 0; k < 2; k++) {
        sj[5] = NULL;
        assert_int_equal(run(sj, &out, &err), EXIT_PASS);
        j = json_loads(out.data, 0, NULL);
        rows = json_object_get(j, "sessions");
        assert_int_equal(json_array_size(rows), 2);
        assert_true(
            json_is_null(json_object_get(json_array_get(rows, 0), "findings")));
        assert_int_equal(json_integer_value(json_object_get(
                             json_array_get(rows, 1), "prompt_tokens")),
                         sum);
        json_decref(j);
    }
    const char *st[] = {"sessions", "--db", db_path, NULL};
    assert_int_equal(run(st, &out, &err), EXIT_PASS);
    assert_non_null(strstr(out.data, "ses_plain"));
    assert_non_null(strstr(out.data, "title 1, main 2"));
    const char *sh[] = {"show", "ses_compact", "--db", db_path, NULL};
    assert_int_equal(run(sh, &out, &err), EXIT_PASS);
    char *r3 = strstr(out.data, "#3 ");
    assert_non_null(strstr(out.data, "#2     compaction"));
    assert_non_null(r3);
    assert_non_null(strstr(r3, "warn  history.compaction"));
    buf_release(&out);
    buf_release(&err);
}

static void test_spill_file_is_audited(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    struct xchg x;
    struct diag d;
    xb_init(
        &x, 0, "ses_spill",
        xb_body("m", json_pack("[o, o, o]", xb_msg("user", "The code is 4812."),
                               xb_msg("assistant", "Noted."),
                               xb_msg("user", "what was it?"))));
    x.kind = xstrdup("main");
    xb_reply(&x,
             "This is the very first message of our conversation, so I "
             "don't know what \"that\" refers to.",
             NULL, NULL, 30, 20, "stop");
    assert_int_equal(xchg_spill_append(spill_path, &x, &d), 0);
    xb_release(&x);
    const char *argv[] = {"audit",    "--db",   db_path, "--spill",
                          spill_path, "--json", "-",     NULL};
    assert_int_equal(run(argv, &out, &err), EXIT_FAIL);
    json_t *j = json_loads(out.data, 0, NULL);
    json_t *f = finding(j, "first_message.claim");
    assert_non_null(f);
    assert_string_equal(json_string_value(json_object_get(f, "session")),
                        "ses_spill");
    assert_int_equal(json_integer_value(json_object_get(f, "request")), -1);
    json_t *sp = finding(j, "record.spilled");
    assert_non_null(sp);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(sp, "evidence"), "spilled")),
                     1);
    json_decref(j);
    /* without --spill, record's default beside the store is read */
    char *def = xasprintf("%s.spill.jsonl", db_path);
    assert_int_equal(rename(spill_path, def), 0);
    const char *dflt[] = {"audit", "--db", db_path, "--json", "-", NULL};
    assert_int_equal(run(dflt, &out, &err), EXIT_FAIL);
    j = json_loads(out.data, 0, NULL);
    assert_non_null(finding(j, "record.spilled"));
    json_decref(j);
    free(def);
    buf_release(&out);
    buf_release(&err);
}

/* A spilled request whose message list holds elements that are no
 * message objects ([{...}, 5, null]): the spill reader keeps them as
 * sent, as the store's reader does, so the session is there for audit
 * and show, and a finding says what is malformed. */
static void test_spill_keeps_non_object_messages(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    struct xchg x;
    struct diag d;
    char *spill = xasprintf("%s/odd.spill.jsonl", dir);
    xb_init(&x, 0, "ses_odd",
            xb_body("m", json_pack("[o, i, n]",
                                   xb_msg("user", "Remember 4812."), 5)));
    x.kind = xstrdup("main");
    xb_reply(&x, "Noted.", NULL, NULL, 30, 20, "stop");
    assert_int_equal(xchg_spill_append(spill, &x, &d), 0);
    xb_release(&x);
    const char *argv[] = {"audit", "--db",   db_path, "--spill",
                          spill,   "--json", "-",     NULL};
    run(argv, &out, &err);
    json_t *j = json_loads(out.data, 0, NULL);
    assert_non_null(j);
    json_t *f = finding(j, "request.malformed_messages");
    if (!f)
        fail_msg("no request.malformed_messages finding:\n%s", out.data);
    assert_string_equal(json_string_value(json_object_get(f, "session")),
                        "ses_odd");
    json_t *ev = json_object_get(f, "evidence");
    assert_int_equal(json_integer_value(json_object_get(ev, "messages")), 3);
    json_decref(j);
    const char *show[] = {"show",    "ses_odd", "--db", db_path,
                          "--spill", spill,     NULL};
    int rc = run(show, &out, &err);
    if (rc != 0)
        fail_msg("show exit %d: %s", rc, buf_str(&err));
    assert_non_null(strstr(buf_str(&out), "3 msgs"));
    assert_non_null(strstr(buf_str(&out), "messages[1] is a number"));
    unlink(spill);
    free(spill);
    buf_release(&out);
    buf_release(&err);
}

/* A later request that extends the history with an element that is not a
 * message object: the finding is that request's, not the earlier one's
 * whose stored view shares the array (the store loads a session's
 * messages as one array that each request sees the first of). */
static void test_malformed_element_is_its_requests(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    char *one = xasprintf("%s/ext.db", dir);
    struct db *db;
    struct diag d;
    assert_int_equal(store_open(one, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    put_chat(db, "ses_ext", json_pack("[o]", xb_msg("user", "Remember 4812.")),
             "Noted.", 10);
    put_chat(db, "ses_ext",
             json_pack("[o, o, i, o]", xb_msg("user", "Remember 4812."),
                       xb_msg("assistant", "Noted."), 5,
                       xb_msg("user", "What was it?")),
             "4812.", 20);
    store_close(db);
    const char *argv[] = {"audit", "--db", one, "--json", "-", NULL};
    run(argv, &out, &err);
    json_t *j = json_loads(out.data, 0, NULL);
    assert_non_null(j);
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(j, "findings"), i, f)
    {
        if (strcmp(json_string_value(json_object_get(f, "rule")),
                   "request.malformed_messages"))
            continue;
        n++;
        assert_int_equal(json_integer_value(json_object_get(f, "request")), 2);
        json_t *ev = json_object_get(f, "evidence");
        assert_int_equal(json_integer_value(json_object_get(ev, "messages")),
                         4);
        assert_int_equal(json_integer_value(
                             json_array_get(json_object_get(ev, "indexes"), 0)),
                         2);
    }
    if (n != 1)
        fail_msg("%zu request.malformed_messages findings, not 1:\n%s", n,
                 out.data);
    json_decref(j);
    free(one);
    buf_release(&out);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_audit_finds_compaction_in_store),
        cmocka_unit_test(test_malformed_element_is_its_requests),
        cmocka_unit_test(test_audit_human_output_and_exit_codes),
        cmocka_unit_test(test_bad_input_is_usage_error),
        cmocka_unit_test(test_store_errors_exit_4),
        cmocka_unit_test(test_profile_file),
        cmocka_unit_test(test_missing_profile_names_file_and_reason),
        cmocka_unit_test(test_plural_of_one),
        cmocka_unit_test(test_sessions_and_show),
        cmocka_unit_test(test_spill_file_is_audited),
        cmocka_unit_test(test_spill_keeps_non_object_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
