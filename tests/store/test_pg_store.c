/*
 * Tests of the stores' real code on PostgreSQL against SQLite: exchanges
 * written through the record writer's path (xchg_put_batch with a cache
 * and the intake frontier as its last statement) into a SQLite file and
 * into a PostgreSQL database read back identical, field by field; the
 * other schemas (probe's results and runs, probe --live's, drift's runs
 * and buckets, the intake frontier) created and used on both with the
 * same answers. A batch held up by another writer's lock is retried.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/clock.h"
#include "core/xalloc.h"
#include "drift/dstore.h"
#include "probe/live.h"
#include "probe/probe.h"
#include "probe/probe_int.h"
#include "store/intake.h"
#include "store/runs.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/pgsrv.h"
#include "util/xchg_build.h"

struct pair {
    char dir[64];
    char lite[128];
    char pg[256];
    struct db *db[2]; /* SQLite, PostgreSQL */
};

static void pair_open(struct pair *p)
{
    struct diag d = {{0}};
    snprintf(p->dir, sizeof(p->dir), "/tmp/fidelity-pgst-XXXXXX");
    assert_non_null(mkdtemp(p->dir));
    snprintf(p->lite, sizeof(p->lite), "%s/t.db", p->dir);
    pgsrv_db(p->pg, sizeof(p->pg));
    if (store_open(p->lite, &p->db[0], &d) || store_open(p->pg, &p->db[1], &d))
        fail_msg("%s", d.msg);
}

static void pair_close(struct pair *p)
{
    char cmd[128];
    store_close(p->db[0]);
    store_close(p->db[1]);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- exchanges ---- */

#define NX 9

static json_t *turns(int n, const char *big)
{
    json_t *m = json_array();
    json_array_append_new(m, xb_msg("system", "You are terse."));
    for (int i = 0; i < n; i++) {
        char s[64];
        snprintf(s, sizeof(s), "question %d \xe2\x80\x94 caf\xc3\xa9", i);
        json_array_append_new(m, xb_msg("user", s));
        snprintf(s, sizeof(s), "answer %d", i);
        json_array_append_new(m, xb_msg("assistant", s));
    }
    json_array_append_new(m, xb_msg("user", big ? big : "last"));
    return m;
}

/* The exchanges: a growing conversation (stored as prefixes of one
 * another), one with tools, a large compressible message, a GET with a
 * binary body holding NUL bytes, an unparsable request, a cut exchange. */
static void build(struct xchg *xs)
{
    char *big = xmalloc(20001);
    for (int i = 0; i < 20000; i++)
        big[i] = "abcdefgh "[i % 9];
    big[20000] = 0;
    for (int i = 0; i < 4; i++) {
        xb_init(&xs[i], 0, "s-1", xb_body("m-1", turns(i + 1, NULL)));
        xb_reply(&xs[i], "fine", i == 2 ? "thinking" : NULL, NULL, 100 + i, 7,
                 "stop");
        xs[i].started = 1790000000.125 + i;
        xs[i].kind = xstrdup("main");
    }
    json_t *body = xb_body("m-2", turns(2, big));
    json_object_set_new(body, "tools",
                        json_pack("[{s:s, s:{s:s}}]", "type", "function",
                                  "function", "name", "grep"));
    json_object_set_new(body, "temperature", json_real(0.1));
    xb_init(&xs[4], 0, "s-2", body);
    xb_reply(&xs[4], "", NULL,
             json_pack("[{s:s, s:s}]", "id", "c1", "type", "function"), 20001,
             3, "tool_calls");
    xs[4].started = 1790000100.5;
    xb_init(&xs[5], 0, "s-2", xb_body("m-2", turns(3, big)));
    xs[5].started = 1790000101.75;
    free(big);

    xchg_init(&xs[6]);
    xs[6].session = xstrdup("s-3");
    xs[6].kind = xstrdup("other");
    xs[6].method = xstrdup("GET");
    xs[6].path = xstrdup("/v1/models");
    xs[6].status = 200;
    static const char bin[] = "\x00\xff\xfe{\"a\":1}\x00\x80";
    xs[6].resp_raw = xmalloc(sizeof(bin));
    memcpy(xs[6].resp_raw, bin, sizeof(bin));
    xs[6].resp_raw_len = sizeof(bin) - 1;
    xs[6].resp_headers = json_pack("{s:s}", "Content-Type", "x/bin");
    xs[6].started = 1790000200.0;
    xs[6].up_total_ms = 0.000123456789;

    xchg_init(&xs[7]);
    xs[7].session = xstrdup("s-3");
    xs[7].method = xstrdup("POST");
    xs[7].path = xstrdup("/v1/chat/completions");
    xs[7].req_raw = xstrdup("{\"messages\": [tru");
    xs[7].req_raw_len = strlen(xs[7].req_raw);
    xs[7].req_malformed = true;
    xs[7].status = 400;
    xs[7].started = 1790000201.0;

    xb_init(&xs[8], 0, "s-1", xb_body("m-1", turns(5, NULL)));
    xs[8].end = XCHG_UPSTREAM_RESET;
    xs[8].status = 0;
    xs[8].started = 1790000300.0;
    xs[8].req_redacted = true;
}

struct writer {
    struct intake in; /* for intake_mark: its statement only */
    uint64_t off;
};

static int on_commit(struct db *db, void *ud)
{
    struct writer *w = ud;
    w->off += 100;
    return intake_mark(&w->in, db, 7, w->off);
}

/* Writes the exchanges; the first gets id first. */
static void write_all(struct db *db, int first)
{
    struct xchg xs[NX];
    struct diag d = {{0}};
    build(xs);
    if (xchg_schema(db, &d) || intake_schema(db, &d))
        fail_msg("%s", d.msg);
    struct writer w;
    memset(&w, 0, sizeof(w));
    struct xchg_cache *c = xchg_cache_new();
    xchg_cache_pre_commit(c, on_commit, &w);
    struct xchg *p[NX];
    int rcs[NX];
    for (int i = 0; i < NX; i++)
        p[i] = &xs[i];
    /* batches as the writer makes them: one, several, one */
    assert_int_equal(xchg_put_batch(db, c, p, 1, rcs, &d), 0);
    assert_int_equal(xchg_put_batch(db, c, p + 1, 5, rcs, &d), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rcs[i], 0);
    assert_int_equal(xchg_put_batch(db, c, p + 6, 3, rcs, &d), 0);
    for (int i = 0; i < NX; i++)
        assert_int_equal(xs[i].id, first + i);
    xchg_cache_free(c);
    db_finalize(w.in.mark);
    uint64_t epoch, off;
    assert_int_equal(intake_frontier(db, 7, &epoch, &off, &d), 0);
    assert_int_equal(epoch, 7);
    assert_int_equal(off, 300);
    for (int i = 0; i < NX; i++)
        xb_release(&xs[i]);
}

struct dump {
    char *s[NX + 1];
    int n;
};

static int dump_fn(const struct xchg *x, void *ud)
{
    struct dump *d = ud;
    assert_true(d->n < NX);
    json_t *j = xchg_to_json(x);
    json_object_set_new(j, "id", json_integer(x->id));
    d->s[d->n++] = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return 0;
}

static void test_exchanges_same(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p);
    struct dump got[2];
    memset(got, 0, sizeof(got));
    int64_t msg[2], req[2], resp[2];
    for (int b = 0; b < 2; b++) {
        struct diag d = {{0}};
        write_all(p.db[b], 1);
        if (xchg_each(p.db[b], NULL, dump_fn, &got[b], &d))
            fail_msg("%s", d.msg);
        assert_int_equal(xchg_storage_bytes(p.db[b], &msg[b], &req[b], &d), 0);
        assert_int_equal(xchg_storage_response_bytes(p.db[b], &resp[b], &d), 0);
    }
    assert_int_equal(got[0].n, NX);
    assert_int_equal(got[1].n, NX);
    /* what was written is what is compared */
    assert_non_null(strstr(got[1].s[3], "question 3 \xe2\x80\x94 caf"));
    assert_non_null(strstr(got[1].s[4], "\"name\":\"grep\""));
    assert_non_null(strstr(got[1].s[5], "abcdefgh abcdefgh"));
    assert_non_null(strstr(got[1].s[6], "resp_raw_b64"));
    assert_non_null(strstr(got[1].s[7], "{\\\"messages\\\": [tru"));
    assert_non_null(strstr(got[1].s[8], "\"req_redacted\":true"));
    for (int i = 0; i < NX; i++) {
        if (strcmp(got[0].s[i], got[1].s[i]))
            fail_msg("exchange %d differs:\nsqlite: %s\npostgresql: %s", i + 1,
                     got[0].s[i], got[1].s[i]);
        free(got[0].s[i]);
        free(got[1].s[i]);
    }
    /* stored alike, down to the byte counts */
    assert_int_equal(msg[0], msg[1]);
    assert_int_equal(req[0], req[1]);
    assert_int_equal(resp[0], resp[1]);
    /* one session read alone */
    struct dump s2;
    memset(&s2, 0, sizeof(s2));
    struct diag d = {{0}};
    assert_int_equal(xchg_each(p.db[1], "s-2", dump_fn, &s2, &d), 0);
    assert_int_equal(s2.n, 2);
    for (int i = 0; i < s2.n; i++)
        free(s2.s[i]);
    /* blobs shared: a second writer storing the same conversation adds no
     * message blob */
    int64_t before = msg[1];
    write_all(p.db[1], NX + 1);
    assert_int_equal(xchg_storage_bytes(p.db[1], &msg[1], &req[1], &d), 0);
    assert_int_equal(msg[1], before);
    pair_close(&p);
}

/* A batch that waited past the lock timeout for another writer's
 * transaction (which holds the blob table here; between records, the
 * same message inserted by each, or two batches each waiting for the
 * other) is begun again, not refused: it is stored once the other
 * commits, and the spill file is left for a store that fails. */
struct locked_put {
    struct db *db;
    int rc, one;
    struct diag d;
};

static void *put_while_locked(void *arg)
{
    struct locked_put *lp = arg;
    struct xchg_cache *c = xchg_cache_new();
    struct xchg x;
    xb_init(&x, 0, "s-locked", xb_body("m", turns(1, "while locked")));
    xb_reply(&x, "done", NULL, NULL, 10, 2, "stop");
    struct xchg *xs[] = {&x};
    lp->rc = xchg_put_batch(lp->db, c, xs, 1, &lp->one, &lp->d);
    xb_release(&x);
    xchg_cache_free(c);
    return NULL;
}

static void test_peer_lock_retried(void **state)
{
    (void)state;
    char url[256];
    struct diag d = {{0}};
    struct db *holder = NULL;
    struct locked_put lp = {0};
    pgsrv_db(url, sizeof(url));
    if (store_open(url, &holder, &d) || store_open(url, &lp.db, &d))
        fail_msg("%s", d.msg);
    assert_int_equal(xchg_schema(holder, &d), 0);
    db_busy_timeout(lp.db, 100);
    assert_int_equal(db_exec(holder, "BEGIN", NULL), DB_OK);
    assert_int_equal(
        db_exec(holder, "LOCK TABLE xchg_blob IN EXCLUSIVE MODE", NULL), DB_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, put_while_locked, &lp), 0);
    clock_nap_ms(300); /* three lock timeouts */
    assert_int_equal(db_exec(holder, "COMMIT", NULL), DB_OK);
    pthread_join(th, NULL);
    if (lp.rc || lp.one)
        fail_msg("refused (%d, %d): %s", lp.rc, lp.one, lp.d.msg);
    struct dump got;
    memset(&got, 0, sizeof(got));
    assert_int_equal(xchg_each(holder, NULL, dump_fn, &got, &d), 0);
    assert_int_equal(got.n, 1);
    assert_non_null(strstr(got.s[0], "while locked"));
    free(got.s[0]);
    store_close(lp.db);
    store_close(holder);
}

/* ---- the other schemas ---- */

static char *run_summary(struct db *db,
                         int (*get)(struct db *, int64_t, struct store_run *,
                                    struct diag *),
                         int64_t id)
{
    struct store_run r;
    struct diag d = {{0}};
    if (get(db, id, &r, &d))
        fail_msg("%s", d.msg);
    char *j = json_dumps(r.summary, JSON_COMPACT | JSON_SORT_KEYS);
    char *s = xasprintf("%lld %s", (long long)r.id, j);
    free(j);
    json_decref(r.summary);
    return s;
}

static void test_drift_store(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p);
    char *got[2][2];
    for (int b = 0; b < 2; b++) {
        struct diag d = {{0}};
        json_t *sum = json_pack(
            "{s:{s:s, s:s}, s:{s:s, s:s}, s:i, s:i, s:s, s:[{s:i, s:i, "
            "s:{s:i, s:f, s:f, s:f, s:f, s:f}, s:{s:f}, s:s}]}",
            "golden", "url", "http://u:pw@127.0.0.1:1/v1", "dialect", "vllm",
            "candidate", "url", "http://127.0.0.1:2/v1", "dialect", "sglang",
            "sequences", 4, "positions", 512, "verdict", "drift", "buckets",
            "from", 0, "to", 256, "candidate", "count", 256, "kl_mean", 0.125,
            "kl_p999", 1.5, "kl_max", 2.25, "top1_agreement", 0.99, "dp_rms",
            1e-3, "excess", "kl_mean", 0.0625, "verdict", "ok");
        int64_t id[2];
        for (int k = 0; k < 2; k++)
            if (drift_store_save(p.db[b], sum, &id[k], &d))
                fail_msg("%s", d.msg);
        assert_int_equal(id[0], 1);
        assert_int_equal(id[1], 2);
        json_decref(sum);
        got[b][0] = run_summary(p.db[b], drift_store_run_get, 1);
        got[b][1] = run_summary(p.db[b], drift_store_run_get, 0); /* last */
        struct db_stmt *st = NULL;
        assert_int_equal(db_prepare(p.db[b],
                                    "SELECT golden_url, count(*), sum(kl_max)"
                                    " FROM drift_run JOIN drift_bucket"
                                    " ON run_id = id GROUP BY golden_url",
                                    &st),
                         DB_OK);
        assert_int_equal(db_step(st), DB_ROW);
        assert_string_equal((const char *)db_column_text(st, 0),
                            "http://***@127.0.0.1:1/v1");
        assert_int_equal(db_column_int64(st, 1), 2);
        assert_true(db_column_double(st, 2) == 4.5);
        db_finalize(st);
    }
    for (int k = 0; k < 2; k++) {
        assert_string_equal(got[0][k], got[1][k]);
        free(got[0][k]);
        free(got[1][k]);
    }
    pair_close(&p);
}

static void test_probe_stores(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p);
    for (int b = 0; b < 2; b++) {
        struct db *db = p.db[b];
        struct diag d = {{0}};
        if (probe_store_init(db, &d) || probe_live_store_init(db, &d))
            fail_msg("%s", d.msg);
        /* twice: the schema is made once */
        assert_int_equal(probe_store_init(db, &d), 0);
        json_t *sum = json_pack("{s:s, s:i}", "verdict", "ok", "n", 3);
        long long id = 0;
        for (int k = 1; k <= 3; k++) {
            if (probe_store_run(db, "fp-a", k == 2 ? NULL : "fp-b", sum, &id,
                                &d))
                fail_msg("%s", d.msg);
            assert_int_equal(id, k);
        }
        json_decref(sum);
        char *s = run_summary(db, probe_store_run_get, 2);
        assert_string_equal(s, "2 {\"n\":3,\"verdict\":\"ok\"}");
        free(s);
        s = run_summary(db, probe_store_run_get, 0);
        assert_string_equal(s, "3 {\"n\":3,\"verdict\":\"ok\"}");
        free(s);
        assert_int_equal(probe_store_results(db, "fp-a", &d), 0);
        assert_int_equal(probe_store_canary_length(db, "nope", &d), 0);
        /* two endpoints of one info fingerprint, under two canaries */
        struct probe_endpoint e[2], other;
        memset(e, 0, sizeof(e));
        memset(&other, 0, sizeof(other));
        for (int k = 0; k < 2; k++) {
            snprintf(e[k].fp, sizeof(e[k].fp), "fp-%c", 'a' + k);
            snprintf(e[k].info_fp, sizeof(e[k].info_fp), "info");
            e[k].url = xstrdup("http://127.0.0.1:9");
            e[k].canary_done = true;
            e[k].canary_length = 1000u * (unsigned)(k + 1);
            e[k].canary_status = 200;
            e[k].canary_prompt_tokens = 999 + k;
            e[k].canary_deterministic = k == 1;
            snprintf(e[k].canary_answer, sizeof(e[k].canary_answer),
                     "answer \xc3\xa9 %d", k);
            if (probe_store_endpoint(db, &e[k], &d) ||
                probe_store_canary(db, &e[k], &d) ||
                probe_store_canary(db, &e[k], &d)) /* replaced */
                fail_msg("%s", d.msg);
        }
        assert_int_equal(probe_store_canary_length(db, "info", &d), 1000);
        long results = -1;
        /* fp-b has no result yet: not a comparable run */
        assert_int_equal(
            probe_store_other_canary(db, &e[0], &other, &results, &d), 0);
        struct probe_spec sp;
        memset(&sp, 0, sizeof(sp));
        sp.length = 4096;
        sp.target = 4000;
        sp.depth = 50;
        sp.temperature = 0.7;
        sp.seed = UINT64_MAX; /* stored as text */
        struct probe_result res, back;
        memset(&res, 0, sizeof(res));
        snprintf(res.key, sizeof(res.key), "key-1");
        res.expected = 4000;
        res.prompt_tokens = 3999;
        res.status = 200;
        res.attempts = 2;
        res.latency = 1.0 / 3.0;
        snprintf(res.finish, sizeof(res.finish), "stop");
        snprintf(res.reply, sizeof(res.reply), "it's \"42\"");
        res.path_tokens = 4100;
        res.lost = true;
        res.drop_ratio = 0.25;
        for (int k = 0; k < 2; k++) { /* the second replaces the first */
            res.status = 200 + k;
            if (probe_store_put(db, "fp-b", &sp, &res, &d))
                fail_msg("%s", d.msg);
        }
        assert_int_equal(probe_store_results(db, "fp-b", &d), 1);
        assert_int_equal(probe_store_get(db, "key-1", &back, &d), 1);
        assert_int_equal(back.status, 201);
        assert_int_equal(back.prompt_tokens, 3999);
        assert_int_equal(back.attempts, 2);
        assert_true(back.latency == 1.0 / 3.0);
        assert_string_equal(back.reply, "it's \"42\"");
        assert_int_equal(back.path_tokens, 4100);
        assert_true(back.lost);
        assert_true(back.drop_ratio == 0.25);
        assert_int_equal(
            probe_store_other_canary(db, &e[0], &other, &results, &d), 1);
        assert_string_equal(other.fp, "fp-b");
        assert_int_equal(other.canary_length, 2000);
        assert_int_equal(other.canary_prompt_tokens, 1000);
        assert_true(other.canary_deterministic);
        assert_string_equal(other.canary_answer, "answer \xc3\xa9 1");
        assert_int_equal(results, 1);
        for (int k = 0; k < 2; k++)
            free(e[k].url);
        /* probe --live's runs */
        json_t *doc = json_pack("{s:s}", "cells", "x");
        for (int k = 1; k <= 2; k++) {
            if (probe_live_store_run(db, "fp-a", doc, &id, &d))
                fail_msg("%s", d.msg);
            assert_int_equal(id, k);
        }
        json_decref(doc);
        s = run_summary(db, probe_live_store_run_get, 0);
        assert_string_equal(s, "2 {\"cells\":\"x\"}");
        free(s);
    }
    pair_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exchanges_same),
        cmocka_unit_test(test_peer_lock_retried),
        cmocka_unit_test(test_drift_store),
        cmocka_unit_test(test_probe_stores),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
