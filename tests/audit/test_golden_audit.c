/*
 * Golden files of what `fidelity audit`, `fidelity sessions` and `fidelity
 * show` print, as text and as JSON, on one fixed store: three harness
 * sessions of tests/fixtures/ (opencode's two compactions, Kilo's tool
 * call, interrupt and compaction, Continue's titles and /compact), also
 * `show --messages` of each (the compactions and the replies sent back
 * without their reasoning named) and the abbreviated ids, stored
 * row by row in file order as record would have stored them. The output is
 * compared byte for byte with tests/audit/golden/ after the one
 * normalisation of tests/util/golden.h (the temporary directory becomes
 * DIR); FIDELITY_GOLDEN_UPDATE=1 (`make golden`) rewrites the files, to be
 * reviewed as a diff.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/golden.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/xchg_build.h"

#define GOLDEN "tests/audit/golden/"

/* The recorded sessions, in the order they are stored: one of each
 * harness, so that the store has one side session (Kilo's title) to
 * attach. */
static const char *const fixtures[] = {
    "tests/fixtures/opencode-1.18.33/compaction-session.jsonl",
    "tests/fixtures/kilo-7.7.7/session.jsonl",
    "tests/fixtures/continue-1.5.47/session.jsonl",
};

/* Their session keys: opencode's and Kilo's from their session headers,
 * Continue's (no header) from its first messages. */
#define OPENCODE "ses_dcdd8ae0effet1oqJEGYMcZ1ak"
#define KILO "ses_dcd4efc6effeYack6r0ISx8vve"
#define CONTINUE "p:262f88083d4a86b1"

static char *dir, *db;
static const char *subs[3];

/* Creates the store path holding the fixtures names[0..n), in order. */
static int make_store(const char *path, const char *const *names, size_t n)
{
    struct db *s;
    struct diag d = {{0}};
    if (store_open(path, &s, &d) || xchg_schema(s, &d)) {
        fprintf(stderr, "cannot create '%s': %s\n", path, d.msg);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        if ((rc = xchg_spill_each(names[i], xb_put_copy, s, &d)))
            fprintf(stderr, "cannot read '%s': %s\n", names[i], d.msg);
    store_close(s);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    if (!dir)
        return -1;
    db = xasprintf("%s/fixtures.db", dir);
    subs[0] = dir;
    subs[1] = "DIR";
    subs[2] = NULL;
    return make_store(db, fixtures, sizeof(fixtures) / sizeof(*fixtures)) ? -1
                                                                          : 0;
}

static int teardown(void **state)
{
    (void)state;
    rec_rmdir(dir);
    dir = NULL;
    free(db);
    db = NULL;
    return 0;
}

static void test_audit_text(void **state)
{
    (void)state;
    const char *av[] = {"audit", "--db", db, NULL};
    assert_true(golden_cmd(GOLDEN "audit.txt", 1, subs, av, 60, NULL));
}

static void test_audit_json(void **state)
{
    (void)state;
    const char *av[] = {"audit", "--db", db, "--json", "-", NULL};
    assert_true(golden_cmd(GOLDEN "audit.json", 1, subs, av, 60, NULL));
}

/* The options a deployment's audit gives: the temperature the model card
 * asks for, DeepSeek's reasoning policy, the server's context length. */
static void test_audit_expect_text(void **state)
{
    (void)state;
    const char *av[] = {"audit",
                        "--db",
                        db,
                        "--expect",
                        "temperature=0.6",
                        "--reasoning-policy",
                        "keep-with-tools",
                        "--context-length",
                        "16384",
                        "--fail-on",
                        "error",
                        NULL};
    assert_true(golden_cmd(GOLDEN "audit-expect.txt", 1, subs, av, 60, NULL));
}

/* sessions --findings: the listing with the audit's counts. */
static void test_sessions_text(void **state)
{
    (void)state;
    const char *av[] = {"sessions", "--db", db, "--findings", NULL};
    assert_true(golden_cmd(GOLDEN "sessions.txt", 0, subs, av, 60, NULL));
}

static void test_sessions_json(void **state)
{
    (void)state;
    const char *av[] = {"sessions", "--db",       db,  "--json",
                        "-",        "--findings", NULL};
    assert_true(golden_cmd(GOLDEN "sessions.json", 0, subs, av, 60, NULL));
}

/* sessions alone runs no audit: the same rows, findings null (not a
 * count of 0) and no findings column. */
static void test_sessions_list_text(void **state)
{
    (void)state;
    const char *av[] = {"sessions", "--db", db, NULL};
    assert_true(golden_cmd(GOLDEN "sessions-list.txt", 0, subs, av, 60, NULL));
}

static void test_sessions_list_json(void **state)
{
    (void)state;
    const char *av[] = {"sessions", "--db", db, "--json", "-", NULL};
    assert_true(golden_cmd(GOLDEN "sessions-list.json", 0, subs, av, 60, NULL));
}

/* show SESSION as text and JSON into NAME.txt and NAME.json. */
static void show(const char *session, const char *name)
{
    char *txt = xasprintf(GOLDEN "show-%s.txt", name);
    char *json = xasprintf(GOLDEN "show-%s.json", name);
    const char *av[] = {"show", session, "--db", db, NULL};
    const char *aj[] = {"show", session, "--db", db, "--json", "-", NULL};
    bool ok = golden_cmd(txt, 0, subs, av, 60, NULL);
    ok = golden_cmd(json, 0, subs, aj, 60, NULL) && ok;
    free(txt);
    free(json);
    assert_true(ok);
}

/* show SESSION --messages into show-NAME-messages.txt; the text must name
 * what the name says. */
static void show_messages(const char *session, const char *name,
                          const char *must)
{
    char *txt = xasprintf(GOLDEN "show-%s-messages.txt", name);
    const char *av[] = {"show", session, "--db", db, "--messages", NULL};
    bool ok = golden_cmd(txt, 0, subs, av, 60, NULL);
    char *got = golden_read(txt, NULL);
    assert_non_null(got);
    if (!strstr(got, must))
        fail_msg("'%s' does not say '%s'", txt, must);
    free(got);
    free(txt);
    assert_true(ok);
}

/* opencode's two compactions: the history before each replaced by the
 * summary of the compaction request */
static void test_show_messages_opencode(void **state)
{
    (void)state;
    show_messages(OPENCODE, "opencode",
                  "HISTORY COMPACTED: 10 messages removed");
}

static void test_show_messages_kilo(void **state)
{
    (void)state;
    show_messages(KILO, "kilo", "replaced by the summary of #28 at [");
}

/* Continue sends its replies back without their reasoning */
static void test_show_messages_continue(void **state)
{
    (void)state;
    show_messages(CONTINUE, "continue",
                  "its reply sent back at [2] WITHOUT its reasoning (dropped)");
}

/* One exchange, its texts whole. */
static void test_show_one_request_full(void **state)
{
    (void)state;
    const char *av[] = {"show",      "262f", "--db",   db,
                        "--request", "40",   "--full", NULL};
    assert_true(
        golden_cmd(GOLDEN "show-continue-40-full.txt", 0, subs, av, 60, NULL));
}

/* An abbreviated id works; an ambiguous one lists the sessions it
 * matches, an unknown one says so: both exit 2. */
static void test_show_abbreviated_ids(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *shortid[] = {"show", "ses_dcdd8", "--db", db, NULL};
    assert_int_equal(proc_run(shortid, NULL, &out, &err, 60), 0);
    assert_non_null(strstr(buf_str(&out), "session " OPENCODE " "));
    buf_reset(&out);
    const char *nop[] = {"show", "262f88", "--db", db, NULL};
    assert_int_equal(proc_run(nop, NULL, &out, &err, 60), 0);
    assert_non_null(strstr(buf_str(&out), "session " CONTINUE " "));
    buf_reset(&out);
    buf_reset(&err);
    const char *amb[] = {"show", "ses_dcd", "--db", db, NULL};
    assert_int_equal(proc_run(amb, NULL, &out, &err, 60), 2);
    assert_non_null(
        strstr(buf_str(&err), "'ses_dcd' is ambiguous: 2 sessions"));
    assert_non_null(strstr(buf_str(&err), OPENCODE));
    assert_non_null(strstr(buf_str(&err), KILO));
    assert_int_equal(out.len, 0);
    buf_reset(&err);
    const char *unk[] = {"show", "ses_nope", "--db", db, NULL};
    assert_int_equal(proc_run(unk, NULL, &out, &err, 60), 2);
    assert_non_null(strstr(buf_str(&err), "no session 'ses_nope' in '"));
    buf_reset(&err);
    const char *noreq[] = {"show",      "ses_dcdd8", "--db", db,
                           "--request", "99",        NULL};
    assert_int_equal(proc_run(noreq, NULL, &out, &err, 60), 2);
    assert_non_null(strstr(buf_str(&err), "has no exchange 99"));
    buf_release(&out);
    buf_release(&err);
}

static void test_show_opencode(void **state)
{
    (void)state;
    show(OPENCODE, "opencode");
}

static void test_show_kilo(void **state)
{
    (void)state;
    show(KILO, "kilo");
}

static void test_show_continue(void **state)
{
    (void)state;
    show(CONTINUE, "continue");
}

/* Kilo's two sessions, then Continue's, in one store: the
 * side sessions (titles, summaries) were attached while the session array
 * was being compacted, reading moved and freed slots (a crash of
 * sessions, audit and show). Each command now lists the three sessions. */
static void test_three_sessions_in_one_store(void **state)
{
    (void)state;
    static const char *const order[] = {
        "tests/fixtures/kilo-7.7.7/compaction-session.jsonl",
        "tests/fixtures/kilo-7.7.7/session.jsonl",
        "tests/fixtures/continue-1.5.47/session.jsonl",
    };
    char *three = xasprintf("%s/three.db", dir);
    assert_int_equal(make_store(three, order, 3), 0);
    const char *av[] = {"sessions", "--db", three, "--json", "-", NULL};
    struct buf out = BUF_INIT;
    assert_int_equal(proc_run(av, NULL, &out, NULL, 60), 0);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    json_t *list = json_is_array(j) ? j : json_object_get(j, "sessions");
    assert_int_equal(json_array_size(list), 3);
    json_decref(j);
    buf_release(&out);
    const char *aud[] = {"audit", "--db", three, NULL};
    assert_int_equal(proc_run(aud, NULL, &out, NULL, 60), 1);
    buf_release(&out);
    free(three);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_sessions_in_one_store),
        cmocka_unit_test(test_audit_text),
        cmocka_unit_test(test_audit_json),
        cmocka_unit_test(test_audit_expect_text),
        cmocka_unit_test(test_sessions_text),
        cmocka_unit_test(test_sessions_json),
        cmocka_unit_test(test_sessions_list_text),
        cmocka_unit_test(test_sessions_list_json),
        cmocka_unit_test(test_show_opencode),
        cmocka_unit_test(test_show_kilo),
        cmocka_unit_test(test_show_continue),
        cmocka_unit_test(test_show_messages_opencode),
        cmocka_unit_test(test_show_messages_kilo),
        cmocka_unit_test(test_show_messages_continue),
        cmocka_unit_test(test_show_one_request_full),
        cmocka_unit_test(test_show_abbreviated_ids),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
