/*
 * Tests for `fidelity help` and the man pages `fidelity help --man` makes
 * from the same texts (src/cmd/cmd_help.c): every command in the table has
 * a page, every option its help names is in the rendered page, groff finds
 * nothing to warn about, and fidelity(1) lists every command. The pages
 * are rendered with the real man-db and groff, as a user reads them.
 */
#include <ctype.h>
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
#include "sim/config.h"
#include "util/need.h"
#include "util/proc.h"
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

/* `fidelity help [--man] [name]` into out; asserts exit 0. */
static void help(const char *flag, const char *name, struct buf *out)
{
    const char *argv[4] = {"help", NULL, NULL, NULL};
    int n = 1;
    if (flag)
        argv[n++] = flag;
    if (name)
        argv[n++] = name;
    struct buf err = BUF_INIT;
    int rc = proc_run(argv, NULL, out, &err, 30);
    if (rc != 0)
        fail_msg("fidelity help %s %s: exit %d: %s", flag ? flag : "",
                 name ? name : "", rc, buf_str(&err));
    buf_release(&err);
}

/* Writes the man page of name (NULL: fidelity(1)) to DIR/PAGE and returns
 * the path (a new string). */
static char *page(const char *name)
{
    struct buf roff = BUF_INIT;
    help("--man", name, &roff);
    char *path = name ? xasprintf("%s/fidelity-%s.1", dir, name)
                      : xasprintf("%s/fidelity.1", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(roff.data, 1, roff.len, f), roff.len);
    assert_int_equal(fclose(f), 0);
    buf_release(&roff);
    return path;
}

/* The page as `man -l` shows it, wide enough that no line is broken. */
static void render(const char *path, struct buf *out)
{
    need_command("man");
    char *cmd = xasprintf("MANWIDTH=200 man -l -P cat '%s'", path);
    struct buf err = BUF_INIT;
    int rc = sh_run(cmd, out, &err, 60);
    if (rc != 0 || out->len == 0)
        fail_msg("'%s' failed (exit %d): %s", cmd, rc, buf_str(&err));
    buf_release(&err);
    free(cmd);
}

static bool is_optch(char c)
{
    return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-';
}

/* True when text holds opt as a whole option (not a prefix of a longer
 * one: --json is not found in --jsonl). */
static bool has_option(const char *text, const char *opt)
{
    size_t n = strlen(opt);
    for (const char *p = text; (p = strstr(p, opt)); p++)
        if ((p == text || !is_optch(p[-1])) && !is_optch(p[n]))
            return true;
    return false;
}

/* Calls fn for every long option (--xxx) in text; returns how many. */
static int each_option(const char *text, void (*fn)(const char *, void *),
                       void *ud)
{
    int count = 0;
    for (const char *p = text; (p = strstr(p, "--"));) {
        if (p > text && is_optch(p[-1])) {
            p += 2;
            continue;
        }
        size_t n = 2;
        while (is_optch(p[n]))
            n++;
        while (n > 2 && p[n - 1] == '-') /* --golden-X: the --golden- part */
            n--;
        if (n > 3 && islower((unsigned char)p[2])) {
            char opt[64];
            snprintf(opt, sizeof(opt), "%.*s", (int)n, p);
            fn(opt, ud);
            count++;
        }
        p += n;
    }
    return count;
}

struct check {
    const char *name;
    const char *rendered;
    int missing;
};

static void check_one(const char *opt, void *ud)
{
    struct check *c = ud;
    if (!has_option(c->rendered, opt)) {
        print_error("fidelity-%s(1) lacks '%s'\n", c->name, opt);
        c->missing++;
    }
}

/* Every option each help text names appears in the command's rendered
 * page; the count proves the options were found at all. */
static void test_every_option_is_in_its_man_page(void **state)
{
    (void)state;
    int total = 0, missing = 0;
    for (const struct cmd *c = commands; c->name; c++) {
        struct buf text = BUF_INIT, shown = BUF_INIT;
        help(NULL, c->name, &text);
        char *path = page(c->name);
        render(path, &shown);
        struct check k = {c->name, buf_str(&shown), 0};
        total += each_option(buf_str(&text), check_one, &k);
        missing += k.missing;
        /* the page is the command's: its name and summary head it */
        char *head = xasprintf("fidelity-%s - ", c->name);
        assert_non_null(strstr(buf_str(&shown), head));
        free(head);
        free(path);
        buf_release(&text);
        buf_release(&shown);
    }
    assert_int_equal(missing, 0);
    assert_true(total > 100); /* record, audit, probe, drift, sim, ... */
}

static void lint(const char *name)
{
    need_command("groff");
    char *path = page(name);
    char *cmd = xasprintf("groff -man -ww -z '%s'", path);
    struct buf err = BUF_INIT;
    int rc = sh_run(cmd, NULL, &err, 60);
    if (rc != 0 || err.len)
        fail_msg("'%s': exit %d: %s", cmd, rc, buf_str(&err));
    buf_release(&err);
    free(cmd);
    free(path);
}

/* groff in its strictest warning mode says nothing about any page. */
static void test_pages_are_lint_clean(void **state)
{
    (void)state;
    lint(NULL);
    for (const struct cmd *c = commands; c->name; c++)
        lint(c->name);
}

/* fidelity(1) names every command's page and the exit codes. */
static void test_main_page_lists_every_command(void **state)
{
    (void)state;
    struct buf shown = BUF_INIT;
    char *path = page(NULL);
    render(path, &shown);
    for (const struct cmd *c = commands; c->name; c++) {
        char *ref = xasprintf("fidelity-%s(1)", c->name);
        if (!strstr(buf_str(&shown), ref))
            fail_msg("fidelity(1) does not list '%s'", ref);
        free(ref);
    }
    assert_non_null(strstr(buf_str(&shown), "EXIT STATUS"));
    assert_non_null(strstr(buf_str(&shown), "FIDELITY_DB"));
    free(path);
    buf_release(&shown);
}

/* The roff escapes keep an example's backslash and quotes: the rendered
 * page shows the command line as the help prints it. */
static void test_examples_survive_rendering(void **state)
{
    (void)state;
    struct buf shown = BUF_INIT;
    char *path = page("probe");
    render(path, &shown);
    assert_non_null(strstr(buf_str(&shown),
                           "--extra-body '{\"chat_template_kwargs\": "
                           "{\"thinking\": true}}' \\"));
    free(path);
    buf_release(&shown);
}

static void test_man_of_unknown_command_is_usage_error(void **state)
{
    (void)state;
    const char *argv[] = {"help", "--man", "nosuch", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    assert_int_equal(proc_run(argv, NULL, &out, &err, 30), EXIT_USAGE);
    assert_int_equal(out.len, 0);
    assert_non_null(
        strstr(buf_str(&err), "'nosuch' is not a fidelity command"));
    buf_release(&out);
    buf_release(&err);
}

/* The line of `fidelity help sim` that starts with "  NAME ", or NULL. */
static const char *preset_line(const char *text, const char *name, size_t *n)
{
    size_t k = strlen(name);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > k + 3 && !strncmp(p, "  ", 2) && !strncmp(p + 2, name, k) &&
            p[2 + k] == ' ') {
            *n = len;
            return p;
        }
        p += len + (nl != NULL);
    }
    return NULL;
}

/* Every preset the sim knows has one line in its help: the fault it
 * causes, a colon, the patch it plays. And every line in the presets
 * block names a preset the sim knows. */
static void test_sim_help_has_a_line_per_preset(void **state)
{
    (void)state;
    struct buf text = BUF_INIT;
    help(NULL, "sim", &text);
    size_t i, n;
    for (i = 0; sim_config_preset_name(i); i++) {
        const char *name = sim_config_preset_name(i);
        const char *l = preset_line(buf_str(&text), name, &n);
        if (!l)
            fail_msg("'fidelity help sim' has no line for preset '%s'", name);
        const char *colon = memchr(l, ':', n);
        if (!colon || colon - l < (ptrdiff_t)strlen(name) + 6 ||
            l + n - colon < 8)
            fail_msg("preset line '%.*s' does not say 'fault: patch'", (int)n,
                     l);
    }
    assert_true(i >= 4);
    const char *block = strstr(buf_str(&text), "\nPresets ");
    assert_non_null(block);
    block = strstr(block, ":\n") + 2;
    for (const char *p = block; *p == ' ';) {
        char name[64];
        assert_int_equal(sscanf(p, " %63s", name), 1);
        bool known = false;
        for (i = 0; sim_config_preset_name(i); i++)
            known |= !strcmp(sim_config_preset_name(i), name);
        if (!known)
            fail_msg("'fidelity help sim' lists '%s', not a preset", name);
        p = strchr(p, '\n') + 1;
    }
    buf_release(&text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_option_is_in_its_man_page),
        cmocka_unit_test(test_pages_are_lint_clean),
        cmocka_unit_test(test_main_page_lists_every_command),
        cmocka_unit_test(test_examples_survive_rendering),
        cmocka_unit_test(test_man_of_unknown_command_is_usage_error),
        cmocka_unit_test(test_sim_help_has_a_line_per_preset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
