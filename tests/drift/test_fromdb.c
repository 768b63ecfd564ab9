/*
 * Tests for drift --from-db: sessions recorded in the store become
 * conversations (the main thread's last request plus its reply), and
 * `fidelity drift --from-db` runs them against two sims.
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

#include "core/xalloc.h"
#include "drift/corpus.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/proc.h"
#include "util/xchg_build.h"

static char db_path[] = "/tmp/drift-fromdb-XXXXXX";

static void put_at(struct db *db, const char *session, const char *kind,
                   const char *user, const char *reply, double started)
{
    struct xchg x;
    struct diag d;
    json_t *msgs = json_array();
    json_array_append_new(msgs, xb_msg("system", "Be brief."));
    json_array_append_new(msgs, xb_msg("user", user));
    xb_init(&x, 0, session, xb_body("m", msgs));
    x.started = started;
    x.kind = xstrdup(kind);
    xb_reply(&x, reply, NULL, NULL, 10, 5, "stop");
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xb_release(&x);
}

static void put(struct db *db, long long id, const char *session,
                const char *kind, const char *user, const char *reply)
{
    (void)id; /* the store gives ids in the order of the calls */
    put_at(db, session, kind, user, reply, 0);
}

static int setup(void **state)
{
    (void)state;
    int fd = mkstemp(db_path);
    if (fd < 0)
        return -1;
    close(fd);
    struct db *db;
    struct diag d;
    if (store_open(db_path, &db, &d) || xchg_schema(db, &d))
        return -1;
    put(db, 1, "s1", "main", "The pin for the red door is 1234.", "Noted.");
    put(db, 2, "s2", "main", "Hello there, how are you today?", "Fine.");
    put(db, 3, "s1", "title", "Write a title.", "Red door");
    put(db, 4, "s1", "main", "What is the pin for the red door?",
        "The pin for the red door is 1234.");
    store_close(db);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char side[64];
    unlink(db_path);
    snprintf(side, sizeof(side), "%s-wal", db_path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", db_path);
    unlink(side);
    return 0;
}

static void test_sessions_become_conversations(void **state)
{
    (void)state;
    struct drift_corpus c;
    struct diag d;
    drift_corpus_init(&c);
    assert_int_equal(drift_corpus_from_db(&c, db_path, NULL, &d), 0);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.items[0].name, "session s1");
    /* s1: the last main request (not the title request) plus its reply */
    json_t *m = c.items[0].messages;
    assert_int_equal(json_array_size(m), 3);
    const char *u =
        json_string_value(json_object_get(json_array_get(m, 1), "content"));
    assert_string_equal(u, "What is the pin for the red door?");
    const json_t *last = json_array_get(m, 2);
    assert_string_equal(json_string_value(json_object_get(last, "role")),
                        "assistant");
    drift_corpus_release(&c);

    drift_corpus_init(&c);
    assert_int_equal(drift_corpus_from_db(&c, db_path, "s2", &d), 0);
    assert_int_equal(c.n, 1);
    drift_corpus_release(&c);
    assert_int_equal(drift_corpus_from_db(&c, db_path, "nope", &d), -ENODATA);
    assert_non_null(strstr(d.msg, "no recorded chat session"));
    drift_corpus_release(&c);
}

/* Several records writing one PostgreSQL store commit a conversation's
 * turns in any order: a later turn, through a record whose writer was
 * quicker, may have the smaller id. The conversation is the session's
 * last request by the time it started, not by its id. */
static void test_last_by_start_not_id(void **state)
{
    (void)state;
    char path[] = "/tmp/drift-fromdb-order-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct db *db;
    struct diag d;
    assert_int_equal(store_open(path, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    put_at(db, "s3", "main", "What is the pin for the blue door?",
           "The pin for the blue door is 5678.", 1796000002.5);
    put_at(db, "s3", "main", "The pin for the blue door is 5678.", "Noted.",
           1796000001.0);
    store_close(db);
    struct drift_corpus c;
    drift_corpus_init(&c);
    assert_int_equal(drift_corpus_from_db(&c, path, NULL, &d), 0);
    assert_int_equal(c.n, 1);
    json_t *m = c.items[0].messages;
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(m, 1), "content")),
        "What is the pin for the blue door?");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(m, 2), "content")),
        "The pin for the blue door is 5678.");
    drift_corpus_release(&c);
    char *cmd = xasprintf("rm -f '%s' '%s-wal' '%s-shm'", path, path, path);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

static void test_drift_from_db_end_to_end(void **state)
{
    (void)state;
    struct proc g, c;
    const char *sa[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&g, sa), 0);
    if (proc_start(&c, sa)) {
        proc_stop(&g);
        fail_msg("sim did not start");
    }
    char gurl[64], curl[64];
    snprintf(gurl, sizeof(gurl), "%s", proc_url(&g));
    snprintf(curl, sizeof(curl), "%s", proc_url(&c));
    const char *av[] = {
        "drift", "--golden", gurl, "--candidate",     curl, "--from-db", "--db",
        db_path, "--json",   "-",  "--decode-tokens", "8",  NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(av, NULL, &out, &err, 60);
    proc_stop(&g);
    proc_stop(&c);
    assert_int_equal(rc, 0);
    json_error_t e;
    json_t *j = json_loads(buf_str(&out), 0, &e);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "sequences")), 2);
    assert_string_equal(json_string_value(json_object_get(j, "verdict")),
                        "PASS");
    assert_non_null(strstr(buf_str(&err), "verdict: PASS"));
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sessions_become_conversations),
        cmocka_unit_test(test_last_by_start_not_id),
        cmocka_unit_test(test_drift_from_db_end_to_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
