/*
 * The layering of src/ (docs/DESIGN.md): every `#include "dir/file.h"` of a
 * file under src/ points down the layers, core <- wire, http <- store <-
 * the subsystems <- cmd <- main, or along one of the few edges between
 * subsystems that DESIGN.md names. A header reached from a folder above
 * it in the layering fails here with the file and the line, so an arrow
 * that the picture does not show cannot creep in.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/need.h"
#include "util/sh.h"

/* The layer of each folder of src/; main.c is its own top layer. */
static const struct {
    const char *dir;
    int layer;
} layers[] = {
    {"core", 0},  {"wire", 1},   {"http", 1},   {"store", 2},
    {"audit", 3}, {"sim", 3},    {"record", 3}, {"probe", 3},
    {"drift", 3}, {"report", 3}, {"bisect", 3}, {"cmd", 4},
};

/* The edges between subsystems of one layer that DESIGN.md draws. */
static const struct {
    const char *from, *to;
} sideways[] = {
    {"probe", "audit"},  /* --vary reads values with audit's --expect rule */
    {"report", "audit"}, /* the page runs the audit of the sessions */
    {"report", "probe"}, /* the page reads probe's stored runs */
    {"report", "drift"}, /* the page reads drift's stored runs */
    {"bisect", "drift"}, /* [golden] file: the saved golden's header */
};

static int layer_of(const char *dir)
{
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        if (!strcmp(layers[i].dir, dir))
            return layers[i].layer;
    return -1;
}

static bool is_allowed(const char *from, const char *to)
{
    if (!strcmp(from, to))
        return true;
    int lf = layer_of(from), lt = layer_of(to);
    if (lt < 0)
        return false;
    if (lt < lf)
        return true;
    if (lt > lf)
        return false;
    for (size_t i = 0; i < sizeof sideways / sizeof sideways[0]; i++)
        if (!strcmp(sideways[i].from, from) && !strcmp(sideways[i].to, to))
            return true;
    return false;
}

/* Checks one file's includes; appends a line per wrong one to bad. */
static int check_file(const char *dir, const char *path, struct buf *bad)
{
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open '%s'", path);
    char line[1024], to[64], slash;
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        /* "version.h" at src/'s top is below every layer's concern */
        if (sscanf(line, "#include \"%63[a-z_]%c", to, &slash) != 2 ||
            slash != '/')
            continue;
        n++;
        if (!is_allowed(dir, to))
            buf_printf(bad, "%s:%d: %s/ includes from %s/\n", path, lineno, dir,
                       to);
    }
    fclose(f);
    return n;
}

static void test_includes_point_down(void **state)
{
    (void)state;
    struct buf bad = BUF_INIT;
    int files = 0, includes = 0;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "src/%s", layers[i].dir);
        DIR *d = opendir(path);
        if (!d)
            fail_msg("cannot open '%s': run the tests from the repository "
                     "root",
                     path);
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t len = strlen(e->d_name);
            if (len < 3 || e->d_name[0] == '.' ||
                (strcmp(e->d_name + len - 2, ".c") &&
                 strcmp(e->d_name + len - 2, ".h")))
                continue;
            snprintf(path, sizeof path, "src/%s/%s", layers[i].dir, e->d_name);
            includes += check_file(layers[i].dir, path, &bad);
            files++;
        }
        closedir(d);
    }
    if (bad.len)
        fail_msg("includes against the layering (docs/DESIGN.md):\n%s",
                 buf_str(&bad));
    assert_true(files > 100);
    assert_true(includes > 300);
    buf_release(&bad);
}

/* Every folder of src/ has a layer: a new one must be placed on purpose. */
static void test_every_folder_has_a_layer(void **state)
{
    (void)state;
    DIR *d = opendir("src");
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR)
            continue;
        if (layer_of(e->d_name) < 0)
            fail_msg("src/%s/ has no layer: add it to tests/e2e/"
                     "test_layers.c and to docs/DESIGN.md",
                     e->d_name);
    }
    closedir(d);
}

/* The rule itself: an upward include and an undrawn sideways one fail. */
static void test_rule_refuses_upward_and_undrawn(void **state)
{
    (void)state;
    assert_true(is_allowed("cmd", "probe"));
    assert_true(is_allowed("store", "wire"));
    assert_true(is_allowed("probe", "audit"));
    assert_false(is_allowed("store", "audit"));
    assert_false(is_allowed("drift", "report"));
    assert_false(is_allowed("audit", "probe"));
    assert_false(is_allowed("core", "store"));
    assert_false(is_allowed("wire", "http"));
    assert_false(is_allowed("probe", "nowhere"));
}

/* Names in the archive: an exported function or object never shares its
 * name with a static elsewhere (grep and the debugger would take one for
 * the other), and none squats jansson's json_ namespace. */
static void test_exported_names_are_unique(void **state)
{
    (void)state;
    need_command("nm");
    const char *build = getenv("BUILD");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "nm -o %s/libfidelity.a | awk 'NF == 3 { n = $3; "
             "sub(/\\.[0-9]+$/, \"\", n); "
             "if ($2 ~ /^[TDBR]$/) g[n] = 1; else if ($2 ~ /^[tdbr]$/) "
             "s[n] = 1 } END { for (n in g) { c++; if (n in s) "
             "print n \" is exported and also a static elsewhere\"; "
             "if (n ~ /^json_/) print n \" is exported under json_, "
             "the jansson namespace\" } print \"total\", c }'",
             build && *build ? build : "build");
    struct buf out = BUF_INIT;
    assert_int_equal(sh_run(cmd, &out, NULL, 60), 0);
    const char *last = strstr(out.data ? out.data : "", "total ");
    assert_non_null(last);
    if (last != out.data)
        fail_msg("names in libfidelity.a:\n%.*s", (int)(last - out.data),
                 out.data);
    assert_true(atoi(last + 6) > 300);
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_includes_point_down),
        cmocka_unit_test(test_every_folder_has_a_layer),
        cmocka_unit_test(test_rule_refuses_upward_and_undrawn),
        cmocka_unit_test(test_exported_names_are_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
