/*
 * Three records, one PostgreSQL: three `fidelity record` processes, each
 * with its own port and intake log, in front of one `fidelity sim` and
 * writing one database. 500 requests through each (JSON and SSE, chats
 * of three turns that extend the previous messages, some conversations
 * crossing all three records turn by turn, with and without a session
 * header). Every exchange is stored exactly once, each conversation is
 * one session, and audit reads the database as it reads the same traffic
 * recorded by one record into a SQLite file.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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
#include "http/client.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/pgsrv.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/xchg_build.h"

#define NREC 3
#define NCONV 500
#define NTURN 3
#define NCLIENT 4
/* conversations c with c % 5 < 2 cross the records (turn t through record
 * t): 200 of them, one request to each record; the other 300 stay on one
 * record, 100 each, 3 requests: 500 requests per record */
#define CROSSES(c) ((c) % 5 < 2)
#define PER_RECORD 500

static char dir[64];
static char home[PATH_MAX];
/* what the test started, stopped by teardown also when an assertion
 * failed */
static struct proc sim, recs[NREC];
static bool sim_up, rec_up[NREC];

/* record names its files after a URL in its current directory: the test
 * runs in a directory of its own, the binary by its absolute path */
static int setup(void **state)
{
    (void)state;
    return pgsrv_enter_dir(dir, "/tmp/fidelity-pgrep-XXXXXX", home);
}

static void stop_all(void)
{
    for (int i = 0; i < NREC; i++)
        if (rec_up[i]) {
            proc_stop(&recs[i]);
            rec_up[i] = false;
        }
    if (sim_up) {
        proc_stop(&sim);
        sim_up = false;
    }
}

static int teardown(void **state)
{
    (void)state;
    stop_all();
    return pgsrv_leave_dir(dir, home);
}

/* ---- the clients (threads: no cmocka assertion in them) ---- */

struct traffic {
    const char *url[NREC]; /* the record each turn's record index maps to */
    atomic_int next;       /* the next conversation to run */
    atomic_int sent[NREC];
    atomic_int failed;
    char why[512]; /* the first failure */
    pthread_mutex_t lock;
};

static void failure(struct traffic *tr, const char *fmt, ...)
{
    pthread_mutex_lock(&tr->lock);
    if (!atomic_fetch_add(&tr->failed, 1)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(tr->why, sizeof(tr->why), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&tr->lock);
}

/* The record of conversation c's turn t. */
static int record_of(int c, int t)
{
    if (CROSSES(c))
        return t;
    int local = c / 5 * 3 + c % 5 - 2; /* 0..299 over the others */
    return local % NREC;
}

/* The reply's text, from a JSON body or an SSE stream; NULL when the
 * answer holds none. */
static char *reply_text(const char *body, bool stream)
{
    if (!stream) {
        json_t *j = json_loads(body, 0, NULL);
        const char *t = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                            "message"),
            "content"));
        char *r = t ? xstrdup(t) : NULL;
        json_decref(j);
        return r;
    }
    struct buf text = BUF_INIT;
    char *copy = xstrdup(body), *save = NULL;
    bool done = false;
    for (char *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        done |= !strcmp(line, "data: [DONE]");
        json_t *c =
            strncmp(line, "data: {", 7) ? NULL : json_loads(line + 6, 0, NULL);
        json_t *delta = json_object_get(
            json_array_get(json_object_get(c, "choices"), 0), "delta");
        const char *t = json_string_value(json_object_get(delta, "content"));
        if (t)
            buf_adds(&text, t);
        json_decref(c);
    }
    free(copy);
    char *r = buf_detach(&text, NULL);
    if (!done || !r) {
        free(r);
        return NULL;
    }
    return r;
}

static const char *turn_text(int c, int t, char *tmp, size_t n)
{
    if (t == 0)
        snprintf(tmp, n, "Conversation %d. The access code for door %d is %d.",
                 c, c, 1000 + 7 * c);
    else if (t == 1)
        snprintf(tmp, n,
                 "Note %d: the meeting moved to room %d. Note: lunch is at "
                 "noon.",
                 c, 100 + c);
    else
        snprintf(tmp, n, "What is the access code for door %d?", c);
    return tmp;
}

/* One conversation: each turn the messages so far, the new user message,
 * through its record; JSON or SSE by turn. */
static void converse(struct traffic *tr, struct http_client *hc, int c)
{
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "system", "content",
                             "You are a helpful assistant.");
    char sid[64], tmp[256];
    snprintf(sid, sizeof(sid), "X-Session-Id: conv-%03d", c);
    const char *hdr[] = {"Content-Type: application/json", c % 2 ? NULL : sid,
                         NULL};
    for (int t = 0; t < NTURN; t++) {
        bool stream = (c + t) % 2;
        int r = record_of(c, t);
        json_array_append_new(msgs, xb_msg("user", turn_text(c, t, tmp, 256)));
        json_t *body = json_pack(
            "{s:s, s:O, s:f, s:i, s:b}", "model", "fidelity-sim", "messages",
            msgs, "temperature", 0.0, "max_tokens", 64, "stream", stream);
        char *s = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        char *url = xasprintf("%s/v1/chat/completions", tr->url[r]);
        struct http_req req = {.method = "POST",
                               .url = url,
                               .body = s,
                               .body_len = strlen(s),
                               .headers = hdr,
                               .timeout_ms = 30000};
        struct http_resp resp;
        struct diag d = {{0}};
        http_resp_init(&resp);
        int rc = http_do(hc, &req, &resp, &d);
        atomic_fetch_add(&tr->sent[r], 1);
        char *reply = rc || resp.status != 200
                          ? NULL
                          : reply_text(buf_str(&resp.body), stream);
        if (!reply)
            failure(tr, "conversation %d turn %d: rc %d status %ld: %s", c, t,
                    rc, resp.status, rc ? d.msg : buf_str(&resp.body));
        http_resp_release(&resp);
        free(url);
        free(s);
        if (!reply)
            break;
        json_array_append_new(msgs, xb_msg("assistant", reply));
        free(reply);
    }
    json_decref(msgs);
}

static void *client(void *arg)
{
    struct traffic *tr = arg;
    struct http_client *hc = http_client_new();
    for (int c; (c = atomic_fetch_add(&tr->next, 1)) < NCONV;)
        converse(tr, hc, c);
    http_client_free(hc);
    return NULL;
}

/* Sends every conversation through urls (NREC of them; the same one
 * thrice for one record), NCLIENT at a time. */
static void send_traffic(const char *const urls[NREC])
{
    struct traffic tr = {.lock = PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[NCLIENT];
    for (int i = 0; i < NREC; i++)
        tr.url[i] = urls[i];
    for (int i = 0; i < NCLIENT; i++)
        assert_int_equal(pthread_create(&th[i], NULL, client, &tr), 0);
    for (int i = 0; i < NCLIENT; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&tr.failed))
        fail_msg("%d requests failed; the first: %s", atomic_load(&tr.failed),
                 tr.why);
    for (int i = 0; i < NREC; i++)
        assert_int_equal(atomic_load(&tr.sent[i]), PER_RECORD);
}

/* ---- the servers ---- */

static void start_sim(void)
{
    /* a window of the last turn only: the third turn's question cannot see
     * its fact, which audit finds; no prefix cache, whose cached_tokens
     * would depend on how the concurrent conversations interleaved */
    const char *argv[] = {
        "sim", "--listen",       "127.0.0.1:0", "--keep-last-turns",
        "1",   "--cache-tokens", "0",           NULL};
    assert_int_equal(proc_start(&sim, argv), 0);
    sim_up = true;
}

static void start_record(int i, const char *db, char *err_path)
{
    char up[64], intake[128];
    snprintf(up, sizeof(up), "%s", proc_url(&sim));
    snprintf(intake, sizeof(intake), "%s/intake-%d", dir, i);
    sprintf(err_path, "%s/record-%d.err", dir, i);
    const char *argv[] = {
        "record", "--listen", "127.0.0.1:0", "--upstream", up,
        "--db",   db,         "--intake",    intake,       NULL};
    if (rec_start(&recs[i], argv, err_path))
        fail_msg("fidelity record %d did not start", i);
    rec_up[i] = true;
}

/* Stops record i and checks its last line: n exchanges, all stored. */
static void stop_record(int i, const char *err_path, int n)
{
    assert_int_equal(proc_stop(&recs[i]), 0);
    rec_up[i] = false;
    struct buf err = BUF_INIT;
    assert_int_equal(rec_read_file(err_path, &err), 0);
    char *want = xasprintf("%d exchanges, %d stored, 0 spilled", n, n);
    if (!strstr(buf_str(&err), want))
        fail_msg("record %d did not store all: %s", i, buf_str(&err));
    free(want);
    buf_release(&err);
}

/* Every conversation through db: three records at once when replicas,
 * else one record taking all three records' requests. */
static void record(const char *db, bool replicas)
{
    char err[NREC][128];
    const char *urls[NREC];
    start_sim();
    for (int i = 0; i < (replicas ? NREC : 1); i++)
        start_record(i, db, err[i]);
    for (int i = 0; i < NREC; i++)
        urls[i] = xstrdup(proc_url(&recs[replicas ? i : 0]));
    send_traffic(urls);
    for (int i = 0; i < NREC; i++)
        free((char *)urls[i]);
    for (int i = 0; i < (replicas ? NREC : 1); i++)
        stop_record(i, err[i], replicas ? PER_RECORD : NREC * PER_RECORD);
    proc_stop(&sim);
    sim_up = false;
}

/* ---- what the store holds ---- */

struct seen {
    int n[NCONV][NTURN];
    int other;
};

/* The conversation and turn of a stored request, from its messages:
 * 0, or -1 when it is none of the test's. */
static int which(const struct xchg *x, int *c, int *turn)
{
    json_t *msgs = json_object_get(x->req_body, "messages");
    const char *first =
        json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
    size_t n = json_array_size(msgs);
    if (!first || sscanf(first, "Conversation %d.", c) != 1 || *c < 0 ||
        *c >= NCONV || n % 2 || n < 2 || (n - 2) / 2 >= NTURN)
        return -1;
    *turn = (int)(n - 2) / 2;
    return 0;
}

static int tally(const struct xchg *x, void *ud)
{
    struct seen *s = ud;
    int c, t;
    if (which(x, &c, &t))
        s->other++;
    else
        s->n[c][t]++;
    return 0;
}

static int name_one(const struct xchg *x, void *ud)
{
    int c, t;
    char id[32];
    snprintf(id, sizeof(id), "%lld", (long long)x->id);
    if (!which(x, &c, &t))
        json_object_set_new(ud, id,
                            json_sprintf("conversation %d turn %d", c, t + 1));
    return 0;
}

/* What each exchange id of the store is: {"ID": "conversation C turn T"}. */
static json_t *id_names(const char *target)
{
    struct db *db = NULL;
    struct diag d = {{0}};
    json_t *names = json_object();
    assert_int_equal(store_open(target, &db, &d), 0);
    assert_int_equal(xchg_each(db, NULL, name_one, names, &d), 0);
    store_close(db);
    assert_int_equal(json_object_size(names), NREC * PER_RECORD);
    return names;
}

/* Replaces the exchange id of each finding ("request", and an evidence
 * key such as "prev_request") by what the exchange is. */
static void name_requests(json_t *findings, json_t *names)
{
    size_t i;
    json_t *f;
    json_array_foreach(findings, i, f)
    {
        json_t *ev = json_object_get(f, "evidence");
        const char *k;
        json_t *v;
        void *tmp;
        json_t *objs[] = {f, ev};
        for (int o = 0; o < 2; o++)
            json_object_foreach_safe(objs[o], tmp, k, v)
            {
                size_t kl = strlen(k);
                if (!json_is_integer(v) ||
                    (strcmp(k, "request") &&
                     (kl < 8 || strcmp(k + kl - 8, "_request"))))
                    continue;
                char id[32];
                snprintf(id, sizeof(id), "%lld",
                         (long long)json_integer_value(v));
                json_t *name = json_object_get(names, id);
                if (!name)
                    fail_msg("finding %s names exchange %s, not in the store",
                             json_string_value(json_object_get(f, "rule")), id);
                json_object_set(objs[o], k, name);
            }
    }
}

static int64_t one_int(struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db, sql, &st), DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    int64_t v = db_column_int64(st, 0);
    db_finalize(st);
    return v;
}

static void stored_once(const char *url)
{
    struct db *db = NULL;
    struct diag d = {{0}};
    assert_int_equal(store_open(url, &db, &d), 0);
    assert_int_equal(one_int(db, "SELECT count(*) FROM xchg"),
                     NREC * PER_RECORD);
    assert_int_equal(one_int(db, "SELECT count(DISTINCT id) FROM xchg"),
                     NREC * PER_RECORD);
    /* each request of each conversation, once */
    struct seen *s = xcalloc(1, sizeof(*s));
    assert_int_equal(xchg_each(db, NULL, tally, s, &d), 0);
    assert_int_equal(s->other, 0);
    for (int c = 0; c < NCONV; c++)
        for (int t = 0; t < NTURN; t++)
            if (s->n[c][t] != 1)
                fail_msg("conversation %d turn %d stored %d times", c, t,
                         s->n[c][t]);
    free(s);
    /* three intake logs, each its own frontier row */
    assert_int_equal(one_int(db, "SELECT count(*) FROM intake_log"), NREC);
    store_close(db);
}

/* `fidelity sessions --json`: one session per conversation, of its three
 * exchanges; the sessions by name. */
static json_t *sessions(const char *db)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"sessions", "--db", db, "--json", "-", NULL};
    int rc = proc_run(argv, NULL, &out, &err, 120);
    if (rc)
        fail_msg("sessions exited %d: %s", rc, buf_str(&err));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    json_t *ss = json_object_get(j, "sessions");
    assert_int_equal(json_array_size(ss), NCONV);
    int headed = 0;
    size_t i;
    json_t *s;
    json_array_foreach(ss, i, s)
    {
        assert_int_equal(json_integer_value(json_object_get(s, "exchanges")),
                         NTURN);
        const char *name = json_string_value(json_object_get(s, "session"));
        assert_non_null(name);
        headed += !strncmp(name, "conv-", 5);
    }
    assert_int_equal(headed, NCONV / 2);
    json_incref(ss);
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
    return ss;
}

static int by_session(const void *pa, const void *pb)
{
    json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    return strcmp(json_string_value(json_object_get(a, "session")),
                  json_string_value(json_object_get(b, "session")));
}

/* arr's elements in order of their "session" (a stable sort: a
 * session's findings keep their order) */
static json_t *sorted_by_session(json_t *arr)
{
    size_t n = json_array_size(arr);
    json_t **v = xcalloc(n + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(arr, i);
    /* insertion sort: stable, and n is small */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && by_session(&v[j - 1], &v[j]) > 0; j--) {
            json_t *t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(out, v[i]);
    free(v);
    return out;
}

static json_t *audit(const char *db)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"audit", "--db", db, "--json", "-", NULL};
    int rc = proc_run(argv, NULL, &out, &err, 120);
    if (rc != EXIT_FAIL)
        fail_msg("audit exited %d: %s", rc, buf_str(&err));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    buf_release(&out);
    buf_release(&err);
    return j;
}

/* Asserts that key of a and b is the same JSON. */
static void same(const char *key, json_t *a, json_t *b)
{
    char *x = json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS);
    char *y = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
    if (strcmp(x, y)) {
        size_t at = 0;
        while (x[at] && x[at] == y[at])
            at++;
        size_t from = at > 200 ? at - 200 : 0;
        fail_msg("%s differ at byte %zu:\nsqlite: ...%.400s\npostgresql: "
                 "...%.400s",
                 key, at, x + from, y + from);
    }
    free(x);
    free(y);
}

static void test_three_records_one_database(void **state)
{
    (void)state;
    char url[256], lite[128];
    pgsrv_db(url, sizeof(url));
    snprintf(lite, sizeof(lite), "%s/one.db", dir);

    record(url, true);
    stored_once(url);
    /* everything went to the database: no record spilled */
    char *spill = store_local_path(url, ".spill.jsonl");
    assert_int_not_equal(access(spill, F_OK), 0);
    free(spill);
    record(lite, false);

    json_t *ss_pg = sessions(url), *ss_lite = sessions(lite);
    json_t *a = sorted_by_session(ss_lite), *b = sorted_by_session(ss_pg);
    same("sessions", a, b);
    json_decref(a);
    json_decref(b);
    json_decref(ss_pg);
    json_decref(ss_lite);

    /*
     * audit's JSON, normalised only where the runs legitimately differ:
     * "db" names the store (a file, a URL); sessions and findings are
     * taken in order of their session's name, because the order of the
     * sessions follows the order in which the conversations arrived, and
     * four concurrent clients interleave them differently in each run
     * (within a session nothing is reordered); a finding names its
     * exchange by the id the store gave it, which follows the order the
     * exchanges were committed in (and on PostgreSQL the three records
     * draw ids from one sequence): each id is replaced by the
     * conversation and turn its request was. Times are not in audit's
     * JSON.
     */
    json_t *jl = audit(lite), *jp = audit(url);
    json_t *nl = id_names(lite), *np = id_names(url);
    name_requests(json_object_get(jl, "findings"), nl);
    name_requests(json_object_get(jp, "findings"), np);
    json_decref(nl);
    json_decref(np);
    const char *keys[] = {"sessions", "findings"};
    for (size_t k = 0; k < 2; k++) {
        a = sorted_by_session(json_object_get(jl, keys[k]));
        b = sorted_by_session(json_object_get(jp, keys[k]));
        same(keys[k], a, b);
        json_decref(a);
        json_decref(b);
    }
    json_object_del(jl, "db");
    json_object_del(jp, "db");
    json_object_del(jl, "sessions");
    json_object_del(jp, "sessions");
    json_object_del(jl, "findings");
    json_object_del(jp, "findings");
    same("the rest of audit's JSON", jl, jp);
    /* the fault was found, once in every conversation */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(jp, "counts"), "error")),
                     NCONV);
    json_decref(jl);
    json_decref(jp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_three_records_one_database, setup,
                                        teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    return rc;
}
