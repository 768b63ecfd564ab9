/*
 * One JSON convention: every command's --json document carries
 * "schema": "fidelity.<command>/<N>" (and "verdict" where the command
 * judges) and validates against its JSON Schema file in docs/schema/.
 * Each command runs for real against `fidelity sim` (probe, probe --live,
 * drift, inspect, bisect, and audit, sessions and show over a session
 * recorded through `fidelity record`); tests/e2e/schema/validate.py checks
 * the documents with Debian's python3-jsonschema. Every schema file is
 * used, and a document with its schema key removed is refused, so the
 * validation can fail.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/need.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/simtest.h"

#define SCHEMA_DIR "docs/schema"
#define VALIDATE "tests/e2e/schema/validate.py"

static char *dir;

static int setup(void **state)
{
    dir = rec_tmpdir();
    if (!dir)
        return -1;
    return simt_setup(state);
}

static int teardown(void **state)
{
    int r = simt_teardown(state);
    rec_rmdir(dir);
    return r;
}

static char *tpath(const char *name)
{
    return xasprintf("%s/%s", dir, name);
}

/* Runs fidelity argv; asserts the exit code is one of ok (0 or 1). */
static void run(const char *const *argv, int a, int b)
{
    struct buf err = BUF_INIT;
    int rc = proc_run(argv, NULL, NULL, &err, 300);
    if (rc != a && rc != b)
        print_message("fidelity %s: exit %d: %s\n", argv[0], rc, buf_str(&err));
    assert_true(rc == a || rc == b);
    buf_release(&err);
}

/* validate.py's exit code for doc against docs/schema/NAME.schema.json. */
static int validate(const char *name, const char *doc)
{
    char *cmd =
        xasprintf("python3 " VALIDATE " " SCHEMA_DIR "/%s.schema.json '%s' >&2",
                  name, doc);
    int st = system(cmd);
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool used[16];
static const char *names[16];
static size_t n_names;

/* Validates doc (written by the command) against its schema, and checks
 * its schema key names the command. */
static void check(const char *name, const char *doc, bool judges)
{
    for (size_t i = 0; i < n_names; i++)
        if (!strcmp(names[i], name))
            used[i] = true;
    json_t *j = json_load_file(doc, 0, NULL);
    assert_non_null(j);
    char *want = xasprintf("fidelity.%s/1", name);
    assert_string_equal(json_string_value(json_object_get(j, "schema")), want);
    if (judges)
        assert_non_null(json_string_value(json_object_get(j, "verdict")));
    free(want);
    json_decref(j);
    assert_int_equal(validate(name, doc), 0);
}

static void list_schemas(void)
{
    DIR *d = opendir(SCHEMA_DIR);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name), k = strlen(".schema.json");
        if (n > k && !strcmp(e->d_name + n - k, ".schema.json")) {
            assert_true(n_names < 16);
            names[n_names++] = xstrndup(e->d_name, n - k);
        }
    }
    closedir(d);
    assert_true(n_names >= 8);
}

static void test_every_json_output_validates(void **state)
{
    struct simt *t = *state;
    if (system("python3 -c 'import jsonschema' 2>/dev/null") != 0)
        need_missing("python3-jsonschema (Debian package)");
    list_schemas();
    struct proc *sim = simt_start(t, NULL);
    struct proc *bad = simt_start(t, "--preset", "sparse-indexer", NULL);
    char *url = xstrdup(proc_url(sim)), *burl = xstrdup(proc_url(bad));

    char *p = tpath("probe.json");
    const char *pa[] = {"probe",    "--endpoint", url,         "--no-store",
                        "--kinds",  "needle",     "--lengths", "1k,2k",
                        "--depths", "0,100",      "--json",    p,
                        NULL};
    run(pa, 0, 1);
    check("probe", p, true);

    char *l = tpath("live.json");
    const char *la[] = {"probe",  "--endpoint", url, "--no-store",
                        "--live", "--turns",    "4", "--seeds",
                        "1",      "--json",     l,   NULL};
    run(la, 0, 1);
    check("probe-live", l, true);

    char *d = tpath("drift.json");
    const char *da[] = {"drift",
                        "--golden",
                        url,
                        "--candidate",
                        burl,
                        "--no-store",
                        "--sequences",
                        "1",
                        "--max-context",
                        "512",
                        "--decode-tokens",
                        "4",
                        "--no-cache-arm",
                        "--json",
                        d,
                        NULL};
    run(da, 0, 1);
    check("drift", d, true);

    char *in = tpath("inspect.json");
    const char *ia[] = {"inspect", url, burl, "--json", in, NULL};
    run(ia, 0, 0);
    check("inspect", in, false);

    /* a short session through record */
    char *db = tpath("rec.db");
    struct proc rec;
    assert_int_equal(rec_start_record(&rec, url, db, NULL), 0);
    json_t *msgs = json_array();
    json_array_append_new(msgs, simt_msg("user", "The code of the safe is "
                                                 "4711. What is the code of "
                                                 "the safe?"));
    long status;
    json_t *ans =
        simt_postj(t, &rec, "/v1/chat/completions", simt_chat(msgs), &status);
    assert_int_equal(status, 200);
    json_decref(ans);
    proc_stop(&rec);

    char *a = tpath("audit.json");
    const char *aa[] = {"audit", "--db", db, "--json", a, NULL};
    run(aa, 0, 1);
    check("audit", a, true);
    char *s = tpath("sessions.json");
    const char *sa[] = {"sessions", "--db", db, "--json", s, NULL};
    run(sa, 0, 0);
    check("sessions", s, false);
    json_t *sj = json_load_file(s, 0, NULL);
    const char *id = json_string_value(json_object_get(
        json_array_get(json_object_get(sj, "sessions"), 0), "session"));
    assert_non_null(id);
    char *sh = tpath("show.json");
    const char *ha[] = {"show", id, "--db", db, "--json", sh, NULL};
    run(ha, 0, 0);
    check("show", sh, false);
    json_decref(sj);

    /* bisect: one toggle on the sim, the healthy sim as the golden */
    char *ini = tpath("b.ini"), *b = tpath("bisect.json"),
         *bo = tpath("bisect.out");
    FILE *f = fopen(ini, "w");
    assert_non_null(f);
    fprintf(f,
            "[server]\ncommand = exec '%s' sim --listen 127.0.0.1:{port}\n"
            "ready_timeout = 20\nstop_grace = 3\n\n[golden]\nurl = %s\n\n"
            "[measure]\nprofile = test\n\n[toggle decode-noise]\n"
            "args = --decode-noise 0.3\npath = decode\n",
            fidelity_bin(), url);
    fclose(f);
    const char *ba[] = {"bisect", ini, "--mode", "one-at-a-time", "--out", bo,
                        "--json", b,   NULL};
    run(ba, 0, 1);
    check("bisect", b, true);

    for (size_t i = 0; i < n_names; i++) {
        if (!used[i])
            print_message("docs/schema/%s.schema.json: no test document\n",
                          names[i]);
        assert_true(used[i]);
    }

    /* the validation can fail: without its schema key, probe's document
     * is refused */
    json_t *j = json_load_file(p, 0, NULL);
    json_object_del(j, "schema");
    char *broken = tpath("broken.json");
    assert_int_equal(json_dump_file(j, broken, 0), 0);
    json_decref(j);
    assert_int_equal(validate("probe", broken), 1);

    for (size_t i = 0; i < n_names; i++)
        free((char *)names[i]);
    free(broken);
    free(ini);
    free(b);
    free(bo);
    free(p);
    free(l);
    free(d);
    free(in);
    free(db);
    free(a);
    free(s);
    free(sh);
    free(url);
    free(burl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_json_output_validates, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
