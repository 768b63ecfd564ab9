/*
 * record on PostgreSQL when the server goes away: clients send steady
 * JSON and SSE chat traffic through `fidelity record --db postgresql://`
 * in front of a real `fidelity sim` while the test's PostgreSQL server is
 * stopped for 10 s. Every client gets its 200 with no added latency, and
 * once the server is back every exchange is in the database exactly once,
 * none spilled. And `kill -9` of record during traffic on PostgreSQL, then
 * a restart with the same intake log: every exchange a client got a reply
 * for is stored exactly once.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/pgsrv.h"
#include "util/proc.h"
#include "util/rec.h"

#define CLIENTS 4 /* even ones send JSON, odd ones SSE */
#define PER_CLIENT 2000
#define PACE_US 25000 /* between a client's requests, with the outage */

/* what a test started, stopped in teardown also when an assertion failed */
struct fx {
    struct proc sim, rec;
    char dir[64];
    char url[256];
    char *spill, *intake, *err;
};

struct sample {
    double t0, ms; /* sent (ms since the run began) and its latency */
    bool ok;       /* a 200 with a whole body */
};

struct run {
    char url[128];
    useconds_t pace; /* between a client's requests */
    double start;
    atomic_bool stop;
    atomic_bool dead; /* record was killed: failures end a client */
    atomic_int completed;
    struct client {
        struct run *run;
        int id, n;
        struct sample s[PER_CLIENT];
    } c[CLIENTS];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/fidelity-pgout-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->spill = xasprintf("%s/spill.jsonl", f->dir);
    f->intake = xasprintf("%s/intake", f->dir);
    f->err = xasprintf("%s/record.err", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->rec.pid)
        proc_stop(&f->rec);
    if (f->sim.pid)
        proc_stop(&f->sim);
    pgsrv_stop(); /* a paused server too; the next test starts its own */
    char *cmd = xasprintf("rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(cmd);
    free(f->spill);
    free(f->intake);
    free(f->err);
    free(f);
    return rc;
}

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    buf_add(ud, p, sz * n);
    return sz * n;
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct run *run = c->run;
    bool sse = c->id % 2;
    CURL *h = curl_easy_init();
    struct curl_slist *hd =
        curl_slist_append(NULL, "Content-Type: application/json");
    struct buf body = BUF_INIT;
    curl_easy_setopt(h, CURLOPT_URL, run->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    while (!atomic_load(&run->stop) && c->n < PER_CLIENT) {
        char req[200];
        snprintf(req, sizeof(req),
                 "{\"model\":\"fidelity-sim\",\"max_tokens\":16,\"stream\":%s,"
                 "\"messages\":[{\"role\":\"user\",\"content\":"
                 "\"outage c%d r%d\"}]}",
                 sse ? "true" : "false", c->id, c->n);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, req);
        buf_reset(&body);
        struct sample *s = &c->s[c->n++];
        double t0 = now_ms();
        long status = 0;
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        s->t0 = t0 - run->start;
        s->ms = now_ms() - t0;
        s->ok = rc == CURLE_OK && status == 200 && body.len > 0 &&
                (!sse || strstr(buf_str(&body), "data: [DONE]"));
        if (s->ok)
            atomic_fetch_add(&run->completed, 1);
        else if (atomic_load(&run->dead))
            break;
        if (run->pace)
            usleep(run->pace);
    }
    buf_release(&body);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return NULL;
}

static void start_clients(struct run *run, pthread_t *t, int port)
{
    snprintf(run->url, sizeof(run->url),
             "http://127.0.0.1:%d/v1/chat/completions", port);
    run->start = now_ms();
    for (int i = 0; i < CLIENTS; i++) {
        run->c[i].run = run;
        run->c[i].id = i;
        pthread_create(&t[i], NULL, client_main, &run->c[i]);
    }
}

static void join_clients(struct run *run, pthread_t *t)
{
    atomic_store(&run->stop, true);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);
}

static int start_record(struct fx *f)
{
    const char *av[] = {"record",     "--listen",        "127.0.0.1:0",
                        "--upstream", proc_url(&f->sim), "--db",
                        f->url,       "--spill",         f->spill,
                        "--intake",   f->intake,         NULL};
    char *up = xstrdup(av[4]);
    av[4] = up;
    int rc = rec_start(&f->rec, av, f->err);
    free(up);
    return rc;
}

static void start_sim_and_db(struct fx *f)
{
    const char *sargv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    pgsrv_db(f->url, sizeof(f->url));
    assert_int_equal(proc_start(&f->sim, sargv), 0);
}

/* How many times the store holds each client's request r (counts[c][r]),
 * and the exchanges that are none of them. */
struct held {
    unsigned char n[CLIENTS][PER_CLIENT];
    int total, other;
    int bad; /* rows that cannot be read (a blob they refer to missing) */
    char first_bad[160];
};

static int held_fn(const struct xchg *x, void *ud)
{
    struct held *h = ud;
    json_t *m = json_array_get(json_object_get(x->req_body, "messages"), 0);
    const char *t = json_string_value(json_object_get(m, "content"));
    int c, r;
    h->total++;
    if (t && sscanf(t, "outage c%d r%d", &c, &r) == 2 && c >= 0 &&
        c < CLIENTS && r >= 0 && r < PER_CLIENT) {
        if (h->n[c][r] < 255)
            h->n[c][r]++;
    } else {
        h->other++;
    }
    return 0;
}

static void bad_fn(const struct xchg_bad *b, void *ud)
{
    struct held *h = ud;
    if (!h->bad++)
        snprintf(h->first_bad, sizeof(h->first_bad), "exchange %lld: %s: %s",
                 (long long)b->id, b->column, b->why);
}

/* Reads what the store holds into *h: 0, or -1 when it cannot be read
 * (the server is not back yet). */
static int read_held(const char *url, struct held *h)
{
    struct db *db = NULL;
    struct diag d = {{0}};
    memset(h, 0, sizeof(*h));
    if (store_open(url, &db, &d))
        return -1;
    int rc = xchg_each_checked(db, NULL, held_fn, bad_fn, h, &d);
    store_close(db);
    return rc ? -1 : 0;
}

/* Client replies the store lacks (*missing) and requests it holds more
 * than once (*twice). */
static void tally(const struct run *run, const struct held *h, int *missing,
                  int *twice)
{
    *missing = *twice = 0;
    for (int c = 0; c < CLIENTS; c++)
        for (int r = 0; r < PER_CLIENT; r++) {
            *missing += r < run->c[c].n && run->c[c].s[r].ok && !h->n[c][r];
            *twice += h->n[c][r] > 1;
        }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The max and p99 of one client's latencies of requests sent in
 * [from, to) (ms since the start); *n how many, *at when the slowest was
 * sent. */
static void lat_stats(const struct client *c, double from, double to,
                      double *max, double *p99, int *n, double *at)
{
    double *v = xcalloc(PER_CLIENT, sizeof(*v));
    int k = 0;
    *at = 0;
    for (int i = 0; i < c->n; i++)
        if (c->s[i].t0 >= from && c->s[i].t0 < to) {
            v[k++] = c->s[i].ms;
            if (k == 1 || c->s[i].ms > *max) {
                *max = c->s[i].ms;
                *at = c->s[i].t0;
            }
        }
    qsort(v, (size_t)k, sizeof(*v), cmp_double);
    *n = k;
    *max = k ? v[k - 1] : 0;
    *p99 = k ? v[(size_t)((k - 1) * 0.99)] : 0;
    free(v);
}

#define UP_MS 2500.0   /* traffic before the server stops, and after */
#define DOWN_MS 10000. /* the server stopped */
#define CATCH_UP_MS 10000.0

static void test_server_stopped_for_10s(void **state)
{
    struct fx *f = *state;
    start_sim_and_db(f);
    assert_int_equal(start_record(f), 0);
    struct run *run = xcalloc(1, sizeof(*run));
    pthread_t t[CLIENTS];
    run->pace = PACE_US;
    start_clients(run, t, f->rec.port);
    usleep((useconds_t)(UP_MS * 1000));
    double down_at = now_ms() - run->start;
    pgsrv_pause();
    usleep((useconds_t)(DOWN_MS * 1000));
    pgsrv_resume();
    double back = now_ms(), back_at = back - run->start;
    printf("the server stopped at %.2f s, back at %.2f s\n", down_at / 1e3,
           back_at / 1e3);
    usleep((useconds_t)(UP_MS * 1000));
    join_clients(run, t);

    /* every exchange is in the database within CATCH_UP_MS of the server's
     * return, once */
    struct held *h = xcalloc(1, sizeof(*h));
    int missing = -1, twice = 0, sent = 0, ok = 0;
    for (int c = 0; c < CLIENTS; c++)
        for (int r = 0; r < run->c[c].n; r++) {
            sent++;
            ok += run->c[c].s[r].ok;
        }
    while (now_ms() - back < CATCH_UP_MS) {
        if (!read_held(f->url, h)) {
            tally(run, h, &missing, &twice);
            if (!missing)
                break;
        }
        usleep(200000);
    }
    double caught = now_ms() - back;
    printf("%d requests, %d answered; the store holds %d exchanges, %d of "
           "the answered missing, %d twice, %.1f s after the server's "
           "return\n",
           sent, ok, h->total, missing, twice, caught / 1e3);
    assert_int_equal(proc_stop(&f->rec), 0);
    f->rec.pid = 0;
    struct buf log = BUF_INIT;
    rec_read_file(f->err, &log);
    printf("record's log:\n%s", buf_str(&log));
    /* every client got its 200 */
    assert_int_equal(ok, sent);
    assert_true(sent > 200);
    assert_int_equal(missing, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(h->other, 0);
    assert_int_equal(h->bad, 0);
    assert_int_equal(h->total, sent);
    /* nothing was spilled: the exchanges waited in the intake log */
    struct stat st;
    assert_true(stat(f->spill, &st) != 0 || st.st_size == 0);
    /* one line when the store went away, one when it was back */
    assert_non_null(strstr(buf_str(&log), "cannot be reached"));
    assert_non_null(strstr(buf_str(&log), "answers again"));
    assert_non_null(strstr(buf_str(&log), " 0 spilled"));
    assert_null(strstr(buf_str(&log), "recoverable"));
    buf_release(&log);

    /* No added latency: a reply leaves once its exchange is appended to
     * the intake log, and the store's state is not on that path. Each
     * client's requests sent while the server was stopped, and after its
     * return (the catch-up), are compared with its own requests sent
     * before: the p99 with 4 times the p99 before plus 20 ms, the max with
     * 4 times the max before plus 250 ms. The slack is for the machine,
     * not for record: the phase of the outage has four times the samples
     * (its max reaches further into the same tail), PostgreSQL's shutdown
     * and start and the catch-up's commits take the CPUs that the
     * clients, record and the sim share, and on a small shared machine a
     * lone stall of tens of milliseconds comes and goes with other work.
     * A client that waited for the store would wait for the outage, 10 s,
     * or at least a try of the writer's (50 ms to 2 s apart), in many of
     * its requests: the p99 would show it. */
    for (int c = 0; c < CLIENTS; c++) {
        double up_max, up_p99, dn_max, dn_p99, af_max, af_p99, t1, t2, t3;
        int nu, nd, na;
        lat_stats(&run->c[c], 0, down_at, &up_max, &up_p99, &nu, &t1);
        lat_stats(&run->c[c], down_at, back_at, &dn_max, &dn_p99, &nd, &t2);
        lat_stats(&run->c[c], back_at, 1e12, &af_max, &af_p99, &na, &t3);
        printf("client %d (%s): before %d requests, max %.1f ms (at %.2f "
               "s), p99 %.1f ms; during %d, max %.1f ms (at %.2f s), p99 "
               "%.1f ms; after %d, max %.1f ms (at %.2f s), p99 %.1f ms\n",
               c, c % 2 ? "SSE" : "JSON", nu, up_max, t1 / 1e3, up_p99, nd,
               dn_max, t2 / 1e3, dn_p99, na, af_max, t3 / 1e3, af_p99);
        assert_true(nu > 20 && nd > 80 && na > 20);
        assert_true(dn_p99 <= 4 * up_p99 + 20);
        assert_true(af_p99 <= 4 * up_p99 + 20);
        assert_true(dn_max <= 4 * up_max + 250);
        assert_true(af_max <= 4 * up_max + 250);
    }
    free(h);
    free(run);
}

#define KILL_AT 300

static void test_kill9_then_restart(void **state)
{
    struct fx *f = *state;
    start_sim_and_db(f);
    assert_int_equal(start_record(f), 0);
    struct run *run = xcalloc(1, sizeof(*run));
    pthread_t t[CLIENTS];
    /* unpaced: the writer has exchanges of the log to commit when the
     * kill lands */
    start_clients(run, t, f->rec.port);
    for (int i = 0; i < 3000 && atomic_load(&run->completed) < KILL_AT; i++)
        usleep(5000);
    atomic_store(&run->dead, true);
    kill(f->rec.pid, SIGKILL);
    int status;
    waitpid(f->rec.pid, &status, 0);
    f->rec.pid = 0;
    join_clients(run, t);
    int answered = atomic_load(&run->completed);
    assert_true(answered >= KILL_AT);

    /* the same --db and --intake: the restart commits what the log
     * holds past the store's frontier, then serves */
    assert_int_equal(start_record(f), 0);
    assert_int_equal(proc_stop(&f->rec), 0);
    f->rec.pid = 0;
    struct buf log = BUF_INIT;
    rec_read_file(f->err, &log);
    printf("record's log:\n%s", buf_str(&log));
    buf_release(&log);
    struct held *h = xcalloc(1, sizeof(*h));
    int missing, twice;
    assert_int_equal(read_held(f->url, h), 0);
    tally(run, h, &missing, &twice);
    printf("kill -9 after %d answered; the store holds %d exchanges, %d of "
           "the answered missing, %d twice\n",
           answered, h->total, missing, twice);
    assert_int_equal(missing, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(h->other, 0);
    assert_int_equal(h->bad, 0);
    assert_true(h->total >= answered);
    free(h);
    free(run);
}

/* Ends record's sessions on the server (pg_terminate_backend: the
 * connection is reset, the server stays up): how many it ended. */
static int terminate_record(const char *url)
{
    PGconn *c = PQconnectdb(url);
    int n = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, "SELECT count(pg_terminate_backend(pid)) FROM"
                                " pg_stat_activity WHERE application_name ="
                                " 'fidelity' AND pid <> pg_backend_pid()");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            n = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
    }
    PQfinish(c);
    return n;
}

/* Waits until every answered request of run is stored (at most ms):
 * whether it is, with *h what the store holds. */
static bool all_held(const struct fx *f, const struct run *run, struct held *h,
                     double ms, int *twice)
{
    double t0 = now_ms();
    int missing = -1;
    *twice = 0;
    do {
        if (!read_held(f->url, h)) {
            tally(run, h, &missing, twice);
            if (!missing)
                return true;
        }
        usleep(100000);
    } while (now_ms() - t0 < ms);
    return false;
}

/* The connection reset while the server stays up (an administrator ends
 * record's session, RESETS times): not a refusal of the exchanges, so
 * nothing is spilled; the writer connects again and commits them from the
 * log, each exchange whole (a statement of a transaction whose connection
 * was lost once ran on the new one, outside it: the exchange's row was
 * committed without the message blobs it refers to). */
#define RESETS 12
/* a busy writer (about 1,500 exchanges a second here): most ends land in
 * one of its transactions */
#define RESET_PACE_US 2000
static void test_connection_reset(void **state)
{
    struct fx *f = *state;
    start_sim_and_db(f);
    assert_int_equal(start_record(f), 0);
    struct run *run = xcalloc(1, sizeof(*run));
    pthread_t t[CLIENTS];
    run->pace = RESET_PACE_US;
    start_clients(run, t, f->rec.port);
    int ended = 0;
    /* at uneven times, so that ends land on an idle connection, between
     * two statements of a transaction and on its COMMIT */
    for (int i = 0; i < RESETS; i++) {
        usleep(150000 + (useconds_t)(i * 97 % 200) * 1000);
        ended += terminate_record(f->url) > 0;
    }
    usleep(700000);
    join_clients(run, t);
    struct held *h = xcalloc(1, sizeof(*h));
    int twice;
    bool held = all_held(f, run, h, CATCH_UP_MS, &twice);
    assert_int_equal(proc_stop(&f->rec), 0);
    f->rec.pid = 0;
    struct buf log = BUF_INIT;
    rec_read_file(f->err, &log);
    printf("record's log:\n%s", buf_str(&log));
    int sent = 0, ok = 0;
    for (int c = 0; c < CLIENTS; c++)
        for (int r = 0; r < run->c[c].n; r++) {
            sent++;
            ok += run->c[c].s[r].ok;
        }
    printf("%d sessions ended; %d requests, %d answered, %d stored, %d "
           "unreadable %s\n",
           ended, sent, ok, h->total, h->bad, h->first_bad);
    if (!held) { /* late, or lost: what the store holds once record stopped */
        struct held *h2 = xcalloc(1, sizeof(*h2));
        int missing, twice2;
        if (!read_held(f->url, h2)) {
            tally(run, h2, &missing, &twice2);
            printf("after record stopped: %d stored, %d of the answered "
                   "missing, %d unreadable\n",
                   h2->total, missing, h2->bad);
        }
        free(h2);
    }
    assert_true(ended > 0);
    assert_int_equal(ok, sent);
    assert_true(held);
    assert_int_equal(twice, 0);
    assert_int_equal(h->total, sent);
    assert_int_equal(h->bad, 0);
    struct stat st;
    assert_true(stat(f->spill, &st) != 0 || st.st_size == 0);
    assert_null(strstr(buf_str(&log), "spilling"));
    buf_release(&log);
    free(h);
    free(run);
}

/* Stopped while the server is away: record tries it once more, then
 * leaves the exchanges in the log, says so and exits 4; the next start
 * with the same --intake commits them, once. */
static void test_stop_while_away(void **state)
{
    struct fx *f = *state;
    start_sim_and_db(f);
    assert_int_equal(start_record(f), 0);
    struct run *run = xcalloc(1, sizeof(*run));
    pthread_t t[CLIENTS];
    run->pace = PACE_US;
    start_clients(run, t, f->rec.port);
    usleep(1000000);
    pgsrv_pause();
    usleep(2000000);
    join_clients(run, t);
    int rc = proc_stop(&f->rec);
    f->rec.pid = 0;
    pgsrv_resume();
    struct buf log = BUF_INIT;
    rec_read_file(f->err, &log);
    printf("record's log:\n%s", buf_str(&log));
    assert_int_equal(rc, 4);
    /* counted as in the log, named as given */
    char *in_log = xasprintf("'%s' (recoverable", f->intake);
    assert_non_null(strstr(buf_str(&log), in_log));
    free(in_log);
    assert_null(strstr(buf_str(&log), "spilling"));
    assert_int_equal(start_record(f), 0);
    assert_int_equal(proc_stop(&f->rec), 0);
    f->rec.pid = 0;
    buf_reset(&log);
    rec_read_file(f->err, &log);
    assert_non_null(strstr(buf_str(&log), "a record that did not stop left"));
    buf_release(&log);
    struct held *h = xcalloc(1, sizeof(*h));
    int missing, twice, sent = 0;
    assert_int_equal(read_held(f->url, h), 0);
    tally(run, h, &missing, &twice);
    for (int c = 0; c < CLIENTS; c++)
        sent += run->c[c].n;
    printf("%d requests; the store holds %d, %d answered missing, %d twice\n",
           sent, h->total, missing, twice);
    assert_int_equal(missing, 0);
    assert_int_equal(twice, 0);
    assert_int_equal(h->total, sent);
    free(h);
    free(run);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_server_stopped_for_10s, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kill9_then_restart, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_connection_reset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_while_away, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pgsrv_stop();
    curl_global_cleanup();
    return rc;
}
