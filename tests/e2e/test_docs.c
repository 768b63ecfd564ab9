/*
 * The documents a clone ships (README.md and the Markdown files in docs/):
 * they speak of the product, not of how it was developed (no development
 * session or branch is named; a recorded "session" is the product's own word),
 * and every benchmark script docs/PERFORMANCE.md names exists.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/need.h"
#include "util/sh.h"

static void test_no_development_history_in_documents(void **state)
{
    (void)state;
    need_command("grep");
    struct buf out = BUF_INIT;
    int rc = sh_run("grep -rniE '\\b(session [0-9]+|this session|"
                    "branch `)' docs README.md",
                    &out, NULL, 30);
    if (rc != 1)
        fail_msg("documents name development work (exit %d):\n%s", rc,
                 buf_str(&out));
    buf_release(&out);
}

static void test_performance_names_existing_benchmarks(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    int rc = sh_run("grep -oE 'bench/[a-z_]+\\.(sh|c|lua)' "
                    "docs/PERFORMANCE.md | sort -u",
                    &out, NULL, 30);
    assert_int_equal(rc, 0);
    int n = 0;
    for (char *p = out.data, *nl; p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (access(p, R_OK))
            fail_msg("docs/PERFORMANCE.md names '%s', which does not exist", p);
        n++;
    }
    assert_true(n >= 5); /* sim, probe, record, audit, drift at least */
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_development_history_in_documents),
        cmocka_unit_test(test_performance_names_existing_benchmarks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
