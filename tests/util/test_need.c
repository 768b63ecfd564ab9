/*
 * Tests for tests/util/need: a test whose part is missing is skipped with
 * one line naming it, and fails with that line under CI=true; a part that
 * is present lets the test go on. The binary runs itself (NEED_INNER set)
 * as a small cmocka suite and reads that run's summary and exit code.
 */
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

#include "core/buf.h"
#include "util/need.h"
#include "util/sh.h"

static char self[PATH_MAX];

/* inner suite: one test per case, picked by NEED_INNER */
static void inner_missing(void **state)
{
    (void)state;
    need_missing("the frobnicator (npm frob 1.0)");
    fail_msg("need_missing returned");
}

static void inner_command_absent(void **state)
{
    (void)state;
    need_command("no-such-command-fidelity-needs");
    fail_msg("need_command returned for a missing command");
}

static void inner_command_present(void **state)
{
    (void)state;
    need_command("sh");
    print_message("went on after need_command\n");
}

static int inner(const char *which)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(inner_missing),
        cmocka_unit_test(inner_command_absent),
        cmocka_unit_test(inner_command_present),
    };
    size_t i = !strcmp(which, "missing") ? 0 : !strcmp(which, "absent") ? 1 : 2;
    return _cmocka_run_group_tests("inner", &all[i], 1, NULL, NULL);
}

/* Runs the inner case with CI set to ci (NULL: unset); returns its exit
 * code, everything it printed in out. */
static int run_inner(const char *which, const char *ci, struct buf *out)
{
    char cmd[PATH_MAX + 128];
    if (ci)
        snprintf(cmd, sizeof(cmd), "CI=%s NEED_INNER=%s '%s' 2>&1", ci, which,
                 self);
    else
        snprintf(cmd, sizeof(cmd), "env -u CI NEED_INNER=%s '%s' 2>&1", which,
                 self);
    buf_reset(out);
    return sh_run(cmd, out, NULL, 30);
}

static void test_missing_part_skips_outside_ci(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    assert_int_equal(run_inner("missing", NULL, &out), 0);
    assert_non_null(strstr(buf_str(&out), "[  SKIPPED ] inner_missing"));
    assert_non_null(strstr(buf_str(&out),
                           "missing the frobnicator (npm frob 1.0): run "
                           "'make deps'; test skipped\n"));
    assert_null(strstr(buf_str(&out), "FAILED"));
    /* CI set to anything but true is not CI */
    assert_int_equal(run_inner("missing", "false", &out), 0);
    assert_non_null(strstr(buf_str(&out), "SKIPPED"));
    buf_release(&out);
}

static void test_missing_part_fails_under_ci(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    assert_int_not_equal(run_inner("missing", "true", &out), 0);
    assert_non_null(strstr(buf_str(&out), "[  FAILED  ] inner_missing"));
    assert_non_null(strstr(buf_str(&out),
                           "missing the frobnicator (npm frob 1.0): run "
                           "'make deps' (CI=true: a missing part fails the "
                           "test)\n"));
    assert_null(strstr(buf_str(&out), "SKIPPED"));
    buf_release(&out);
}

static void test_need_command(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    assert_int_equal(run_inner("absent", NULL, &out), 0);
    assert_non_null(strstr(buf_str(&out), "missing the "
                                          "'no-such-command-fidelity-needs' "
                                          "command: run 'make deps'"));
    assert_non_null(strstr(buf_str(&out), "SKIPPED"));
    assert_int_not_equal(run_inner("absent", "true", &out), 0);
    assert_non_null(strstr(buf_str(&out), "FAILED"));
    /* present: the test goes on and passes, under CI too */
    assert_int_equal(run_inner("present", "true", &out), 0);
    assert_non_null(strstr(buf_str(&out), "went on after need_command"));
    assert_non_null(strstr(buf_str(&out), "[  PASSED  ] 1 test"));
    buf_release(&out);
}

/* No test skips on its own: cmocka's skip macro is called nowhere in tests/
 * but through need_missing, so CI=true catches every missing part. */
static void test_no_bare_skip(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    int rc = sh_run("grep -rnE '(^|[^_[:alnum:]])skip[[:space:]]*\\(\\)' "
                    "tests --include='*.c' --include='*.h'",
                    &out, NULL, 30);
    if (rc != 1)
        fail_msg("a bare skip call (use need_missing):\n%s", buf_str(&out));
    buf_release(&out);
}

int main(void)
{
    const char *which = getenv("NEED_INNER");
    if (which)
        return inner(which);
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_part_skips_outside_ci),
        cmocka_unit_test(test_missing_part_fails_under_ci),
        cmocka_unit_test(test_need_command),
        cmocka_unit_test(test_no_bare_skip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
