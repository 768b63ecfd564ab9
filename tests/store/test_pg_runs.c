/*
 * probe, drift and report on PostgreSQL: `fidelity probe` and `fidelity
 * drift` against two `fidelity sim` servers (one plain, one with a
 * context limit and noise) store their runs with `--db postgresql://...`
 * as they do in a SQLite file. The same runs made on each store give the
 * same JSON; a second probe reads every case back from the store; the
 * stored probe and drift runs and drift's buckets read back the same from
 * both; `fidelity report` draws the same page from both; and `probe
 * --live` stores its sessions in each and reads every one back the
 * second time.
 */
#include <errno.h>
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
#include <jansson.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "drift/dstore.h"
#include "probe/probe.h"
#include "store/runs.h"
#include "store/store.h"
#include "util/golden.h"
#include "util/pgsrv.h"
#include "util/proc.h"
#include "util/rec.h"

static char dir[64];
static char home[PATH_MAX];
static struct proc sims[2];
static bool up[2];

/* A directory of its own as the current one (a command given a URL keeps
 * any local file there), the binary by its absolute path. */
static int setup(void **state)
{
    (void)state;
    setenv("SOURCE_DATE_EPOCH", "86400", 1);
    return pgsrv_enter_dir(dir, "/tmp/fidelity-pgruns-XXXXXX", home);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++)
        if (up[i]) {
            proc_stop(&sims[i]);
            up[i] = false;
        }
    return pgsrv_leave_dir(dir, home);
}

static char *start_sim(int i, const char *const *opts)
{
    const char *av[16] = {"sim", "--listen", "127.0.0.1:0"};
    size_t n = 3;
    for (size_t k = 0; opts && opts[k] && n < 15; k++)
        av[n++] = opts[k];
    av[n] = NULL;
    assert_int_equal(proc_start(&sims[i], av), 0);
    up[i] = true;
    return xstrdup(proc_url(&sims[i]));
}

/* Runs a command that writes --json FILE; want is its exit code. */
static json_t *run_json(const char *const *av, const char *file, int want)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(av, NULL, &out, &err, 180);
    if (rc != want)
        fail_msg("fidelity %s exited %d, not %d: %s%s", av[0], rc, want,
                 buf_str(&out), buf_str(&err));
    assert_null(strstr(buf_str(&err), "s3cret"));
    json_error_t e;
    json_t *j = json_load_file(file, 0, &e);
    if (!j)
        fail_msg("%s: %s", file, e.text);
    buf_release(&out);
    buf_release(&err);
    return j;
}

static char *dump(json_t *j)
{
    return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
}

static void same(const char *what, const char *a, const char *b)
{
    if (strcmp(a, b)) {
        size_t at = 0;
        while (a[at] && a[at] == b[at])
            at++;
        size_t from = at > 300 ? at - 300 : 0;
        fail_msg("%s differ at byte %zu:\nsqlite: ...%.600s\npostgresql: "
                 "...%.600s",
                 what, at, a + from, b + from);
    }
}

/* What one store gives back. */
struct got {
    char *probe, *probe_again, *drift; /* the commands' JSON */
    char *probe_run, *drift_run, *buckets;
    char *page;
    char *live, *live_again; /* probe --live's JSON, made and stored */
};

/* A stored run: its id and document (its time is the moment it was
 * made, which differs between the stores). */
static char *run_of(struct db *db,
                    int (*get)(struct db *, int64_t, struct store_run *,
                               struct diag *),
                    int64_t want_id)
{
    struct store_run r;
    struct diag d = {{0}};
    if (get(db, 0, &r, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(r.id, want_id);
    assert_true(r.created > 86400); /* the clock's, not SOURCE_DATE_EPOCH */
    char *s = dump(r.summary);
    json_decref(r.summary);
    return s;
}

static char *buckets_of(struct db *db)
{
    struct db_stmt *st = NULL;
    struct buf b = BUF_INIT;
    assert_int_equal(db_prepare(db,
                                "SELECT run_id, pos_from, pos_to, count,"
                                " kl_mean, kl_p999, kl_max, excess_kl_mean,"
                                " top1_agreement, dp_rms, verdict"
                                " FROM drift_bucket ORDER BY run_id, pos_from",
                                &st),
                     DB_OK);
    int rows = 0;
    while (db_step(st) == DB_ROW) {
        rows++;
        for (int i = 0; i < 4; i++)
            buf_printf(&b, "%lld ", (long long)db_column_int64(st, i));
        for (int i = 4; i < 10; i++)
            buf_printf(&b, "%a ", db_column_double(st, i));
        buf_printf(&b, "%s\n", db_column_text(st, 10));
    }
    db_finalize(st);
    assert_true(rows > 0);
    return buf_detach(&b, NULL);
}

/* Replaces every occurrence of from in s (a heap string) by to. */
static char *replace_all(char *s, const char *from, const char *to)
{
    struct buf b = BUF_INIT;
    size_t n = strlen(from);
    const char *p = s, *q;
    while ((q = strstr(p, from))) {
        buf_add(&b, p, (size_t)(q - p));
        buf_adds(&b, to);
        p = q + n;
    }
    buf_adds(&b, p);
    free(s);
    return buf_detach(&b, NULL);
}

/* Replaces the n bytes after each occurrence of mark in s by 'x's. */
static void blank_after(char *s, const char *mark, size_t n)
{
    size_t m = strlen(mark);
    for (char *p = strstr(s, mark); p; p = strstr(p + m, mark))
        for (size_t i = 0; i < n && p[m + i]; i++)
            p[m + i] = 'x';
}

static void runs_on(const char *db, const char *shown, const char *plain,
                    const char *faulty, struct got *g)
{
    char *pj = xasprintf("%s/probe.json", dir);
    char *dj = xasprintf("%s/drift.json", dir);
    char *page = xasprintf("%s/report.html", dir);
    /* exit 1: below --fail-under on the faulty endpoint */
    const char *probe[] = {"probe", "--endpoint", faulty,   "--baseline",
                           plain,   "--kinds",    "needle", "--lengths",
                           "1k,8k", "--depths",   "0,50",   "--seed",
                           "3",     "-j",         "2",      "--db",
                           db,      "--json",     pj,       NULL};
    json_t *j = run_json(probe, pj, 1);
    g->probe = dump(j);
    json_decref(j);
    /* again: every case read back from the store */
    j = run_json(probe, pj, 1);
    const char *sides[] = {"results", "baseline_results"};
    for (int k = 0; k < 2; k++) {
        size_t i, cached = 0, n = 0;
        json_t *r;
        json_array_foreach(
            json_object_get(json_object_get(j, sides[k]), "case_results"), i, r)
        {
            n++;
            cached += json_is_true(json_object_get(r, "cached"));
            json_object_set_new(r, "cached", json_false());
        }
        assert_int_equal(n, 4);
        assert_int_equal(cached, n);
    }
    g->probe_again = dump(j);
    json_decref(j);
    const char *drift[] = {"drift", "--golden",        plain, "--candidate",
                           faulty,  "--sequences",     "2",   "--max-context",
                           "1024",  "--bootstrap",     "50",  "--seed",
                           "1",     "--decode-tokens", "16",  "--db",
                           db,      "--json",          dj,    NULL};
    j = run_json(drift, dj, 0); /* WARN: exit 0 */
    g->drift = dump(j);
    json_decref(j);

    struct db *s = NULL;
    struct diag d = {{0}};
    if (store_open(db, &s, &d))
        fail_msg("%s", d.msg);
    g->probe_run = run_of(s, probe_store_run_get, 2);
    g->drift_run = run_of(s, drift_store_run_get, 1);
    g->buckets = buckets_of(s);
    store_close(s);

    /* the page from the store. Where the stores legitimately differ:
     * its command line names the store (a URL quoted for the shell),
     * which becomes DB; the header says when each run was stored (the
     * clock's "YYYY-MM-DD HH:MM:SS"), which is blanked */
    const char *rep[] = {"report", "--db", db, "-o", page, NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run(rep, NULL, &out, &err, 120);
    if (rc)
        fail_msg("report exited %d: %s", rc, buf_str(&err));
    g->page = golden_read(page, NULL);
    assert_non_null(g->page);
    assert_null(strstr(g->page, "s3cret"));
    g->page = replace_all(g->page, shown, "DB");
    g->page = replace_all(g->page, "&#39;DB&#39;", "DB");
    blank_after(g->page, "run 1, stored ", 19);
    blank_after(g->page, "run 2, stored ", 19);
    /* both runs are drawn */
    const char *ids[] = {"probe", "drift"};
    for (int k = 0; k < 2; k++) {
        char *sec = golden_section(g->page, ids[k]);
        assert_non_null(sec);
        free(sec);
    }
    buf_release(&out);
    buf_release(&err);

    /* probe --live: its sessions stored, then every one read back */
    char *lj = xasprintf("%s/live.json", dir);
    const char *live[] = {"probe", "--live", "--endpoint", plain, "--db",
                          db,      "--json", lj,           NULL};
    for (int round = 0; round < 2; round++) {
        j = run_json(live, lj, 0);
        size_t i, cached = 0, n = 0;
        json_t *r;
        json_array_foreach(json_object_get(j, "sessions"), i, r)
        {
            n++;
            cached += json_is_true(json_object_get(r, "cached"));
            json_object_set_new(r, "cached", json_false());
        }
        assert_true(n > 0);
        assert_int_equal(cached, round ? n : 0);
        *(round ? &g->live_again : &g->live) = dump(j);
        json_decref(j);
    }
    free(lj);
    free(pj);
    free(dj);
    free(page);
}

static void got_release(struct got *g)
{
    char **all[] = {&g->probe,     &g->probe_again, &g->drift,
                    &g->probe_run, &g->drift_run,   &g->buckets,
                    &g->page,      &g->live,        &g->live_again};
    for (size_t i = 0; i < sizeof(all) / sizeof(*all); i++)
        free(*all[i]);
}

static void test_runs_same_on_both(void **state)
{
    (void)state;
    char url[256], lite[128];
    /* with a password, which nothing may print */
    pgsrv_db_password(url, sizeof(url), "s3cret");
    char *shown = xasprintf("postgresql://***@%s", strchr(url, '@') + 1);
    snprintf(lite, sizeof(lite), "%s/runs.db", dir);
    const char *fault[] = {"--context-limit",
                           "4096",
                           "--overflow",
                           "middle",
                           "--prefill-noise",
                           "0.02",
                           "--noise-growth",
                           "0.5",
                           "--decode-noise",
                           "0.05",
                           NULL};
    char *plain = start_sim(0, NULL), *faulty = start_sim(1, fault);
    struct got g[2];
    memset(g, 0, sizeof(g));
    runs_on(lite, lite, plain, faulty, &g[0]);
    runs_on(url, shown, plain, faulty, &g[1]);
    same("probe's JSON", g[0].probe, g[1].probe);
    same("probe's JSON from the store", g[0].probe_again, g[1].probe_again);
    same("probe's JSON, stored and made", g[1].probe, g[1].probe_again);
    same("drift's JSON", g[0].drift, g[1].drift);
    same("the stored probe run", g[0].probe_run, g[1].probe_run);
    same("the stored drift run", g[0].drift_run, g[1].drift_run);
    same("drift's buckets", g[0].buckets, g[1].buckets);
    same("the report", g[0].page, g[1].page);
    same("probe --live's JSON", g[0].live, g[1].live);
    same("probe --live's JSON from the store", g[0].live_again,
         g[1].live_again);
    same("probe --live's JSON, stored and made", g[1].live, g[1].live_again);
    got_release(&g[0]);
    got_release(&g[1]);
    free(shown);
    free(plain);
    free(faulty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runs_same_on_both, setup,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
