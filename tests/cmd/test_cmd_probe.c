/*
 * Tests of `fidelity probe`'s store options (src/cmd/cmd_probe.c), the
 * same as drift's: --no-store runs the cases against a real `fidelity sim`
 * and writes no store at all (and, run twice, sends every case twice:
 * nothing is reused); without it the same --db file holds the run. Both
 * helps list --db FILE and --no-store in the same words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "util/proc.h"
#include "util/rec.h"

static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rec_rmdir(dir);
    return 0;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int probe(const char *url, const char *db, bool no_store,
                 struct buf *out)
{
    const char *argv[] = {
        "probe", "--endpoint", url,      "--db",
        db,      "--kinds",    "needle", "--lengths",
        "1k",    "--depths",   "0",      no_store ? "--no-store" : NULL,
        NULL};
    struct buf err = BUF_INIT;
    buf_reset(out);
    int code = proc_run(argv, NULL, out, &err, 120);
    if (code)
        print_message("%s", buf_str(&err));
    buf_release(&err);
    return code;
}

static void test_no_store_writes_no_store(void **state)
{
    (void)state;
    struct proc sim;
    const char *sargv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&sim, sargv), 0);
    char *db = xasprintf("%s/probe.db", dir);
    struct buf out = BUF_INIT;
    const char *url = proc_url(&sim);

    assert_int_equal(probe(url, db, true, &out), 0);
    assert_non_null(strstr(buf_str(&out), "1 of 1 case finished (0 from the "
                                          "store, 1 chat request sent)"));
    assert_false(exists(db));
    char *wal = xasprintf("%s-wal", db);
    assert_false(exists(wal));
    /* again: nothing was kept, so the case is sent again */
    assert_int_equal(probe(url, db, true, &out), 0);
    assert_non_null(strstr(buf_str(&out), "(0 from the store, 1 chat request "
                                          "sent)"));
    assert_false(exists(db));

    /* without --no-store the same --db holds the case, reused next time */
    assert_int_equal(probe(url, db, false, &out), 0);
    assert_true(exists(db));
    assert_int_equal(probe(url, db, false, &out), 0);
    assert_non_null(strstr(buf_str(&out), "(1 from the store, 0 chat "
                                          "requests sent)"));
    proc_stop(&sim);
    free(wal);
    free(db);
    buf_release(&out);
}

/* Nothing is judged on nothing: an endpoint that answers every case with
 * HTTP 500 gets no pass rate (0% was a PASS under --fail-under 0) but an
 * error naming the count and the first error, exit 1. */
static void test_no_usable_answer_is_an_error(void **state)
{
    (void)state;
    struct proc sim;
    const char *sargv[] = {"sim",        "--listen", "127.0.0.1:0",
                           "--rate-500", "1",        NULL};
    assert_int_equal(proc_start(&sim, sargv), 0);
    const char *argv[] = {
        "probe",     "--endpoint", proc_url(&sim), "--no-store", "--kinds",
        "needle",    "--lengths",  "1k",           "--depths",   "0,50",
        "--retries", "0",          "--fail-under", "0",          NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int code = proc_run(argv, NULL, &out, &err, 120);
    proc_stop(&sim);
    if (code != 1 ||
        !strstr(buf_str(&err), "no case could be judged: none "
                               "of the 2 finished cases got a "
                               "usable answer") ||
        !strstr(buf_str(&err), "HTTP 500"))
        fail_msg("exit %d:\n%s\n%s", code, buf_str(&out), buf_str(&err));
    assert_null(strstr(buf_str(&out), "PASS"));
    buf_release(&out);
    buf_release(&err);
}

static void test_store_options_same_in_both_helps(void **state)
{
    (void)state;
    const char *names[] = {"probe", "drift"};
    for (int i = 0; i < 2; i++) {
        struct buf out = BUF_INIT;
        const char *argv[] = {"help", names[i], NULL};
        assert_int_equal(proc_run(argv, NULL, &out, NULL, 30), 0);
        assert_non_null(strstr(buf_str(&out), CLI_STORE_HELP));
        assert_non_null(strstr(buf_str(&out), "  --ready-timeout SEC "));
        buf_release(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_store_writes_no_store),
        cmocka_unit_test(test_no_usable_answer_is_an_error),
        cmocka_unit_test(test_store_options_same_in_both_helps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
