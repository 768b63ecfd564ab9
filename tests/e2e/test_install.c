/*
 * `make install` and `make uninstall` as a packager runs them: into a
 * DESTDIR with PREFIX=/usr. The installed files are exactly the binary,
 * one man page per command in the table (plus fidelity(1)) and the bash
 * and zsh completion; the installed
 * binary runs, `man` renders an installed page, and uninstall removes
 * those files and nothing else that lives beside them. Also: `make deps`
 * finds every part the tests use present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "util/need.h"
#include "util/rec.h"
#include "util/sh.h"

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
    rec_rmdir(dir); /* frees dir */
    return 0;
}

/* Runs cmd (printf format); asserts exit 0 and returns its stdout. */
static void run_ok(struct buf *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void run_ok(struct buf *out, const char *fmt, ...)
{
    va_list ap;
    char cmd[2048];
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    struct buf err = BUF_INIT;
    int rc = sh_run(cmd, out, &err, 300);
    if (rc != 0)
        fail_msg("'%s' exited %d: %s", cmd, rc, buf_str(&err));
    buf_release(&err);
}

/* The files under dir, one "./path" a line, sorted. */
static void files(struct buf *out)
{
    buf_reset(out);
    run_ok(out, "cd '%s' && find . -type f -o -type l | LC_ALL=C sort", dir);
}

static void put(const char *rel)
{
    char *path = xasprintf("%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not fidelity's\n", f);
    assert_int_equal(fclose(f), 0);
    free(path);
}

/* What the directory must hold after install: the neighbours, the binary,
 * fidelity.1 and a page per command of the table, the bash and zsh
 * completion, sorted as files() is. */
static void expected(struct buf *want)
{
    struct buf list = BUF_INIT;
    buf_adds(&list, "./usr/bin/fidelity\n./usr/bin/other\n"
                    "./usr/share/man/man1/fidelity.1\n"
                    "./usr/share/man/man1/other.1\n"
                    "./usr/share/bash-completion/completions/fidelity\n"
                    "./usr/share/zsh/site-functions/_fidelity\n");
    for (const struct cmd *c = commands; c->name; c++)
        buf_printf(&list, "./usr/share/man/man1/fidelity-%s.1\n", c->name);
    char *path = xasprintf("%s.list", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(list.data, 1, list.len, f), list.len);
    assert_int_equal(fclose(f), 0);
    run_ok(want, "LC_ALL=C sort '%s' && rm -f '%s'", path, path);
    free(path);
    buf_release(&list);
}

static const char *make_vars(void)
{
    static char vars[600];
    const char *build = getenv("BUILD");
    snprintf(vars, sizeof(vars), "DESTDIR='%s' PREFIX=/usr BUILD='%s'", dir,
             build && *build ? build : "build");
    return vars;
}

static void test_install_then_uninstall(void **state)
{
    (void)state;
    struct buf out = BUF_INIT, want = BUF_INIT;
    need_command("make");
    need_command("man");
    /* a neighbour in each directory install writes to */
    run_ok(NULL, "mkdir -p '%s/usr/bin' '%s/usr/share/man/man1'", dir, dir);
    put("usr/bin/other");
    put("usr/share/man/man1/other.1");

    run_ok(NULL, "make -s install %s", make_vars());
    files(&out);
    expected(&want);
    assert_string_equal(buf_str(&out), buf_str(&want));

    struct stat st;
    char *bin = xasprintf("%s/usr/bin/fidelity", dir);
    assert_int_equal(stat(bin, &st), 0);
    assert_true(st.st_mode & S_IXUSR);
    buf_reset(&out);
    run_ok(&out, "'%s' help", bin);
    assert_non_null(strstr(buf_str(&out), "commands:"));
    assert_non_null(strstr(buf_str(&out), "probe"));
    free(bin);

    /* the page renders from its file, and `man NAME` finds it in the
     * installed tree */
    buf_reset(&out);
    run_ok(&out,
           "MANWIDTH=100 man -l -P cat "
           "'%s/usr/share/man/man1/fidelity-probe.1'",
           dir);
    assert_non_null(strstr(buf_str(&out), "fidelity-probe - "));
    assert_non_null(strstr(buf_str(&out), "--endpoint URL"));
    buf_reset(&out);
    run_ok(&out, "MANWIDTH=100 man -M '%s/usr/share/man' -P cat fidelity", dir);
    assert_non_null(strstr(buf_str(&out), "fidelity-probe(1)"));

    run_ok(NULL, "make -s uninstall %s", make_vars());
    files(&out);
    assert_string_equal(buf_str(&out), "./usr/bin/other\n"
                                       "./usr/share/man/man1/other.1\n");
    buf_release(&out);
    buf_release(&want);
}

/* `make deps` finds every part present (the Debian packages and the
 * pinned npm tools) on a machine where it has run: what the tests use is
 * what it installs. */
static void test_deps_are_all_present(void **state)
{
    (void)state;
    need_command("make");
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = sh_run("make -s deps", &out, &err, 300);
    if (rc != 0) {
        char part[600];
        snprintf(part, sizeof(part), "parts of 'make deps' (exit %d: %.*s)", rc,
                 (int)strcspn(buf_str(&out), "\n"), buf_str(&out));
        need_missing(part);
    }
    assert_non_null(strstr(buf_str(&out), "deps: all Debian packages present"));
    assert_non_null(strstr(buf_str(&out), "deps: npm tools present"));
    buf_release(&out);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_then_uninstall),
        cmocka_unit_test(test_deps_are_all_present),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
