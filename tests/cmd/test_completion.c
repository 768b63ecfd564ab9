/*
 * Shell completion (src/cmd/completion.c): `fidelity help --completion
 * bash|zsh` lists every command and, for each, every option of the option
 * table its help documents (cli_help_opts, the man pages' source). The
 * table itself is checked against the commands' real option parsers: an
 * option it gives a value must be refused alone with "needs a value", a
 * flag must be taken with no value (the next word then read as an option
 * of its own). The bash script passes `bash -n`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "util/proc.h"

static char *script(const char *shell)
{
    struct buf out = BUF_INIT;
    const char *argv[] = {"help", "--completion", shell, NULL};
    assert_int_equal(proc_run(argv, NULL, &out, NULL, 30), 0);
    char *s = xstrdup(buf_str(&out));
    buf_release(&out);
    return s;
}

static void test_scripts_list_every_command_and_option(void **state)
{
    (void)state;
    char *b = script("bash"), *z = script("zsh");
    for (const struct cmd *c = commands; c->name; c++) {
        char *w = xasprintf(" %s", c->name);
        assert_non_null(strstr(b, w)); /* the first word's list */
        free(w);
        char *zc = xasprintf("'%s:", c->name);
        assert_non_null(strstr(z, zc));
        free(zc);
        if (!strcmp(c->name, "help"))
            continue;
        size_t n;
        struct cli_opt *o = cli_help_opts(c->name, &n);
        assert_true(n > 0);
        /* bash: the command's opts line is exactly the table's names */
        struct buf want = BUF_INIT;
        buf_adds(&want, "        opts='");
        for (size_t i = 0; i < n; i++) {
            if (i)
                buf_addch(&want, ' ');
            buf_adds(&want, o[i].name);
        }
        buf_adds(&want, " --help'\n");
        char *sect = xasprintf("\n    %s)\n%s", c->name, buf_str(&want));
        if (!strstr(b, sect))
            print_message("bash: no line %s", sect);
        assert_non_null(strstr(b, sect));
        /* zsh: one spec per option, a value's name after it */
        for (size_t i = 0; i < n; i++) {
            char *spec = xasprintf("'%s[", o[i].name);
            assert_non_null(strstr(z, spec));
            free(spec);
        }
        free(sect);
        buf_release(&want);
        free(o);
    }
    free(b);
    free(z);
}

static void test_option_tables_match_the_parsers(void **state)
{
    (void)state;
    size_t checked = 0;
    for (const struct cmd *c = commands; c->name; c++) {
        size_t n;
        struct cli_opt *o = cli_help_opts(c->name, &n);
        for (size_t i = 0; i < n; i++) {
            struct buf err = BUF_INIT;
            const char *flag[] = {c->name, o[i].name, "--zzzq", NULL};
            const char *valued[] = {c->name, o[i].name, NULL};
            int rc =
                proc_run(o[i].arg[0] ? valued : flag, NULL, NULL, &err, 20);
            char *want = o[i].arg[0]
                             ? xasprintf("option '%s' needs a value", o[i].name)
                             : xstrdup("unknown option '--zzzq'");
            if (rc != 2 || !strstr(buf_str(&err), want))
                print_message("fidelity %s %s%s: exit %d: %s(wanted: %s)\n",
                              c->name, o[i].name, o[i].arg[0] ? "" : " --zzzq",
                              rc, buf_str(&err), want);
            assert_int_equal(rc, 2);
            assert_non_null(strstr(buf_str(&err), want));
            free(want);
            buf_release(&err);
            checked++;
        }
        free(o);
    }
    assert_true(checked > 150);
}

static void test_bash_script_parses(void **state)
{
    (void)state;
    char *b = script("bash");
    char path[] = "/tmp/fidelity-completion-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, strlen(b)), (ssize_t)strlen(b));
    close(fd);
    char *cmd = xasprintf("bash -n '%s'", path);
    int st = system(cmd);
    unlink(path);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    free(cmd);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scripts_list_every_command_and_option),
        cmocka_unit_test(test_option_tables_match_the_parsers),
        cmocka_unit_test(test_bash_script_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
