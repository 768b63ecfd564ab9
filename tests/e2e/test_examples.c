/*
 * examples/ against the sim, as `make demo` runs them: examples/demo.sh
 * (which runs client.sh through record-audit.sh, drift-pair.sh and
 * bisect.sh over bisect-sim.ini) with the binary under test and every
 * output in a fresh folder. Each output is checked for what the example
 * exists to show: probe fails the faulty endpoint, audit blames the
 * server for a "start of our conversation" reply, drift attributes
 * mhc-bf16 to prefill, bisect names sparse-indexer, flags mhc-bf16's
 * claimed path and calls the inert toggle inert, and the report holds the
 * probe, drift and audit sections. The README lists every man page and
 * says how the sim answers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

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

static json_t *load(const char *name)
{
    char *p = xasprintf("%s/out/%s", dir, name);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j)
        print_message("cannot read '%s'\n", p);
    assert_non_null(j);
    free(p);
    return j;
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    assert_non_null(s);
    return s;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    struct buf b = BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_add(&b, chunk, n);
    fclose(f);
    char *s = xstrdup(buf_str(&b));
    buf_release(&b);
    return s;
}

static void test_demo_runs_every_example(void **state)
{
    (void)state;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char *cmd = xasprintf("OUT='%s/out' FIDELITY='%s' sh examples/demo.sh "
                          ">'%s/demo.txt' 2>&1",
                          dir, fidelity_bin(), dir);
    int st = system(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char *log = xasprintf("%s/demo.txt", dir);
    char *text = slurp(log);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        print_message("%s\n", text);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    print_message("examples/demo.sh: %.0f s\n",
                  (double)(t1.tv_sec - t0.tv_sec));
    /* it says where each output went */
    static const char *const outs[] = {"probe.json",  "audit.json",
                                       "show.json",   "drift.json",
                                       "bisect.json", "report.html"};
    for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++) {
        char *p = xasprintf("%s/out/%s", dir, outs[i]);
        assert_non_null(strstr(text, p));
        free(p);
    }

    json_t *probe = load("probe.json");
    assert_string_equal(str(probe, "verdict"), "FAIL");

    json_t *audit = load("audit.json");
    assert_string_equal(str(audit, "verdict"), "FAIL");
    bool claim = false;
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(audit, "findings"), i, f)
    {
        if (!strcmp(str(f, "rule"), "first_message.claim"))
            claim =
                !strcmp(str(json_object_get(f, "evidence"), "blame"), "server");
    }
    assert_true(claim);

    json_t *drift = load("drift.json");
    assert_string_equal(str(drift, "verdict"), "FAIL");
    assert_string_equal(str(json_object_get(drift, "attribution"), "kind"),
                        "prefill");

    json_t *bisect = load("bisect.json");
    assert_string_equal(str(bisect, "verdict"), "FAIL");
    int seen = 0;
    json_array_foreach(json_object_get(bisect, "configurations"), i, f)
    {
        const char *name = str(f, "name"), *v = str(f, "verdict");
        if (!strcmp(name, "sparse-indexer"))
            assert_string_equal(v, "CULPRIT"), seen |= 1;
        else if (!strcmp(name, "mhc-bf16"))
            assert_true(json_is_true(json_object_get(f, "path_mismatch"))),
                seen |= 2;
        else if (!strcmp(name, "debug-log"))
            assert_string_equal(v, "inert"), seen |= 4;
        else
            assert_null(strstr(v, "CULPRIT")), seen |= 8;
    }
    assert_int_equal(seen, 15);

    char *rp = xasprintf("%s/out/report.html", dir);
    char *html = slurp(rp);
    assert_non_null(strstr(html, "<h2>probe:"));
    assert_non_null(strstr(html, "<h2>drift:"));
    assert_non_null(strstr(html, "<h2>audit:"));
    free(html);
    free(rp);

    json_decref(probe);
    json_decref(audit);
    json_decref(drift);
    json_decref(bisect);
    free(text);
    free(log);
    free(cmd);
}

static void test_readme_lists_every_man_page_and_the_fact_syntax(void **state)
{
    (void)state;
    char *readme = slurp("README.md");
    for (const struct cmd *c = commands; c->name; c++) {
        char *a = xasprintf("`fidelity-%s`", c->name);
        char *b = xasprintf("`-%s`", c->name);
        if (!strstr(readme, a) && !strstr(readme, b))
            print_message("README.md does not list the man page of %s\n",
                          c->name);
        assert_true(strstr(readme, a) || strstr(readme, b));
        free(a);
        free(b);
    }
    assert_non_null(strstr(readme, "`The X of Y is Z.`"));
    free(readme);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_runs_every_example),
        cmocka_unit_test(test_readme_lists_every_man_page_and_the_fact_syntax),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
