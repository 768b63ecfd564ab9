/*
 * Checks before work (cli_check_* in src/cmd/cli.c): every command that
 * writes a file, a store or reads an input file checks it before it sends
 * a request or starts a server. Each case runs one command line against a
 * real `fidelity sim` with one unusable path and asserts the exit code,
 * that the message names the path as the user gave it (never a temporary
 * name), and that the sim saw no request at all (GET /sim/stats: every
 * endpoint's counter but the stats' own stays 0).
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

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/simtest.h"

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

/* Requests the sim has answered, its own /sim/stats left out. */
static long sim_requests(struct simt *t, const struct proc *p)
{
    long status, n = 0;
    json_t *st = simt_get(t, p, "/sim/stats", &status);
    assert_int_equal(status, 200);
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(st, "requests"), k, v)
    {
        if (strcmp(k, "sim_stats"))
            n += (long)json_integer_value(v);
    }
    json_decref(st);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* One case: argv with "@U" replaced by the sim's URL and "@D" by the
 * test's folder; the exit code wanted; the text the message must hold
 * (replaced the same way). */
struct check_case {
    const char *argv[24];
    int code;
    const char *says;
};

static char *subst(const char *s, const char *url)
{
    struct buf b = BUF_INIT;
    for (const char *p = s; *p;) {
        if (!strncmp(p, "@U", 2))
            buf_adds(&b, url), p += 2;
        else if (!strncmp(p, "@D", 2))
            buf_adds(&b, dir), p += 2;
        else
            buf_addch(&b, *p++);
    }
    char *r = xstrdup(buf_str(&b));
    buf_release(&b);
    return r;
}

static void run_case(struct simt *t, const struct proc *sim,
                     const struct check_case *c)
{
    const char *url = proc_url(sim);
    char *argv[24] = {0};
    size_t n = 0;
    for (; c->argv[n]; n++)
        argv[n] = subst(c->argv[n], url);
    struct buf out = BUF_INIT, err = BUF_INIT;
    int code = proc_run((const char *const *)argv, NULL, &out, &err, 60);
    char *says = subst(c->says, url);
    if (code != c->code || !strstr(buf_str(&err), says))
        print_message("fidelity %s ...: exit %d, stderr: %s\n", argv[0], code,
                      buf_str(&err));
    assert_int_equal(code, c->code);
    assert_non_null(strstr(buf_str(&err), says));
    assert_null(strstr(buf_str(&err), ".tmp"));
    assert_int_equal(sim_requests(t, sim), 0);
    for (size_t i = 0; i < n; i++)
        free(argv[i]);
    free(says);
    buf_release(&out);
    buf_release(&err);
}

static void test_paths_checked_before_any_request(void **state)
{
    struct simt *t = *state;
    struct proc *sim = simt_start(t, NULL);
    char *p = xasprintf("%s/notadb.txt", dir);
    write_file(p, "these are notes, not a database\n");
    free(p);
    p = xasprintf("%s/afile", dir);
    write_file(p, "x\n");
    free(p);
    p = xasprintf("%s/b.ini", dir);
    char *ini = xasprintf("[server]\ncommand = '%s' sim --listen "
                          "127.0.0.1:{port}\n\n[golden]\nurl = %s\n\n"
                          "[measure]\nprofile = test\n\n"
                          "[toggle a]\nargs = --seed 2\n",
                          fidelity_bin(), proc_url(sim));
    write_file(p, ini);
    free(ini);
    free(p);

    static const struct check_case cases[] = {
        {{"drift", "--golden", "@U", "--candidate", "@U", "--db",
          "@D/notadb.txt", NULL},
         4,
         "'@D/notadb.txt': file is not a database"},
        {{"drift", "--golden", "@U", "--candidate", "@U", "--no-store",
          "--json", "@D/nodir/d.json", NULL},
         2,
         "--json '@D/nodir/d.json': the folder '@D/nodir' does not exist"},
        {{"drift", "--golden", "@U", "--candidate", "@U", "--no-store",
          "--jsonl", "@D/nodir/d.jsonl", NULL},
         2,
         "--jsonl '@D/nodir/d.jsonl'"},
        {{"drift", "--golden", "@U", "--candidate", "@U", "--no-store",
          "--report", "@D/nodir/d.html", NULL},
         2,
         "--report '@D/nodir/d.html'"},
        {{"drift", "--golden", "@U", "--candidate", "@U", "--no-store",
          "--corpus", "@D/missing.jsonl", NULL},
         2,
         "--corpus '@D/missing.jsonl': No such file"},
        {{"probe", "--endpoint", "@U", "--no-store", "--json",
          "@D/nodir/p.json", NULL},
         2,
         "--json '@D/nodir/p.json': the folder '@D/nodir' does not exist"},
        {{"probe", "--endpoint", "@U", "--no-store", "--json", "@D", NULL},
         2,
         "--json '@D' is a folder"},
        {{"probe", "--endpoint", "@U", "--db", "@D/notadb.txt", NULL},
         4,
         "'@D/notadb.txt': file is not a database"},
        {{"probe", "--endpoint", "@U", "--db", "@D/nodir/p.db", NULL},
         2,
         "--db '@D/nodir/p.db'"},
        {{"probe", "--endpoint", "@U", "--no-store", "--report",
          "@D/nodir/p.html", NULL},
         2,
         "--report '@D/nodir/p.html'"},
        {{"probe", "--endpoint", "@U", "--no-store", "--junit",
          "@D/afile/j.xml", NULL},
         2,
         "--junit '@D/afile/j.xml': '@D/afile' is not a folder"},
        {{"inspect", "@U", "--json", "@D/nodir/i.json", NULL},
         2,
         "--json '@D/nodir/i.json'"},
        {{"bisect", "@D/b.ini", "--json", "@D/nodir/b.json", "--out", "@D/bout",
          NULL},
         2,
         "--json '@D/nodir/b.json'"},
        {{"bisect", "@D/b.ini", "--out", "@D/afile", NULL},
         2,
         "--out '@D/afile' is not a folder"},
        {{"bisect", "@D/missing.ini", NULL}, 2, "'@D/missing.ini'"},
        {{"record", "--upstream", "@U", "--listen", "127.0.0.1:0", "--db",
          "@D/notadb.txt", NULL},
         4,
         "'@D/notadb.txt': file is not a database"},
        {{"record", "--upstream", "@U", "--listen", "127.0.0.1:0", "--db",
          "@D/r.db", "--spill", "@D/nodir/s.jsonl", NULL},
         2,
         "--spill '@D/nodir/s.jsonl': the folder '@D/nodir' does not exist"},
        {{"record", "--upstream", "@U", "--listen", "127.0.0.1:0", "--db",
          "@D/nodir/r.db", NULL},
         2,
         "--db '@D/nodir/r.db'"},
        {{"report", "--db", "@D/notadb.txt", "-o", "@D/nodir/x.html", NULL},
         2,
         "--output '@D/nodir/x.html'"},
        {{"export", "--db", "@D/notadb.txt", "--format", "har", "-o",
          "@D/nodir/x.har", NULL},
         2,
         "--output '@D/nodir/x.har'"},
        {{"audit", "--db", "@D/notadb.txt", "--json", "@D/nodir/a.json", NULL},
         2,
         "--json '@D/nodir/a.json'"},
        {{"audit", "--db", "@D/notadb.txt", "--report", "@D/nodir/a.html",
          "--tokenize-url", "@U", NULL},
         2,
         "--report '@D/nodir/a.html'"},
        {{"sessions", "--db", "@D/notadb.txt", "--json", "@D/nodir/s.json",
          NULL},
         2,
         "--json '@D/nodir/s.json'"},
        {{"show", "abc", "--db", "@D/notadb.txt", "--json", "@D/nodir/s.json",
          NULL},
         2,
         "--json '@D/nodir/s.json'"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(t, sim, &cases[i]);
    /* no file was left behind by any of them */
    char *nodir = xasprintf("%s/nodir", dir), *bout = xasprintf("%s/bout", dir);
    struct stat st;
    assert_int_not_equal(stat(nodir, &st), 0);
    assert_int_not_equal(stat(bout, &st), 0);
    free(nodir);
    free(bout);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths_checked_before_any_request),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
