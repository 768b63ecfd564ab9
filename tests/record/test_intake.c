/*
 * The intake log (src/record/intake.c) and its replay (record_replay):
 * records read back as appended, a torn end is ignored, the frontier
 * decides what is replayed, a replay commits each exchange once, and a log
 * a live record holds is left alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "record/intake.h"
#include "record/record.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/rec.h"
#include "util/upstream.h"

#define N 3

struct fx {
    char *dir, *db;
    struct hdrs hl[N], rhl[N];
    char body[N][200], resp[N][200], path[N][32];
};

static int fx_setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    f->dir = rec_tmpdir();
    f->db = xasprintf("%s/i.db", f->dir);
    for (int i = 0; i < N; i++) {
        hdrs_start(&f->hl[i]);
        hdrs_add(&f->hl[i], "Content-Type", 12, "application/json", 16);
        hdrs_add(&f->hl[i], "Authorization", 13, "[redacted]", 10);
        hdrs_start(&f->rhl[i]);
        hdrs_add(&f->rhl[i], "content-type", 12, "application/json", 16);
        snprintf(f->path[i], sizeof(f->path[i]), "/v1/chat/completions?n=%d",
                 i);
        snprintf(f->body[i], sizeof(f->body[i]),
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"intake %d\"}]}",
                 i);
        snprintf(f->resp[i], sizeof(f->resp[i]),
                 "{\"choices\":[{\"index\":0,\"message\":{\"role\":"
                 "\"assistant\",\"content\":\"reply %d\"},"
                 "\"finish_reason\":\"stop\"}]}",
                 i);
    }
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < N; i++) {
        hdrs_release(&f->hl[i]);
        hdrs_release(&f->rhl[i]);
    }
    rec_rmdir(f->dir);
    free(f->db);
    free(f);
    return 0;
}

static struct intake_rec rec_of(struct fx *f, int i)
{
    struct intake_rec r = {
        .started = 1700000000.5 + i,
        .up_ttfb_ms = 1.25,
        .up_total_ms = 2.5 + i,
        .down_ttfb_ms = 1.5,
        .down_total_ms = 3.0 + i,
        .max_gap_ms = 0,
        .status = 200,
        .end = 0,
        .ct_json = true,
        .method = "POST",
        .method_len = 4,
        .path = f->path[i],
        .path_len = strlen(f->path[i]),
        .req_hl = f->hl[i].b.data,
        .req_hl_len = f->hl[i].b.len,
        .req_hl_n = f->hl[i].n,
        .req_hl_set = true,
        .resp_hl = f->rhl[i].b.data,
        .resp_hl_len = f->rhl[i].b.len,
        .resp_hl_n = f->rhl[i].n,
        .resp_hl_set = true,
        .body = f->body[i],
        .body_len = strlen(f->body[i]),
        .resp = f->resp[i],
        .resp_len = strlen(f->resp[i]),
    };
    return r;
}

/* Writes the N exchanges to a fresh log; ends[i]: the offset after i. */
static struct intake *write_log(struct fx *f, uint64_t ends[N])
{
    struct intake *in = NULL;
    struct diag d = {{0}};
    assert_int_equal(intake_open(f->db, &in, &d), 0);
    assert_int_equal(intake_reset(in, &d), 0);
    for (int i = 0; i < N; i++) {
        struct intake_rec r = rec_of(f, i);
        assert_int_equal(intake_append(in, &r, &ends[i]), 0);
    }
    return in;
}

struct seen {
    struct fx *f;
    int n;
    int first; /* the index of the first record read */
    uint64_t ends[N];
};

static int seen_fn(const struct intake_rec *r, uint64_t end, void *ud)
{
    struct seen *s = ud;
    int i = s->first + s->n;
    struct intake_rec w = rec_of(s->f, i);
    assert_true(i < N);
    assert_int_equal(r->path_len, w.path_len);
    assert_memory_equal(r->path, w.path, w.path_len);
    assert_int_equal(r->body_len, w.body_len);
    assert_memory_equal(r->body, w.body, w.body_len);
    assert_int_equal(r->resp_len, w.resp_len);
    assert_memory_equal(r->resp, w.resp, w.resp_len);
    assert_int_equal(r->req_hl_len, w.req_hl_len);
    assert_memory_equal(r->req_hl, w.req_hl, w.req_hl_len);
    assert_int_equal(r->req_hl_n, 2);
    assert_int_equal(r->resp_hl_n, 1);
    assert_true(r->req_hl_set && r->resp_hl_set && r->ct_json);
    assert_false(r->streamed || r->resp_capped);
    assert_int_equal(r->status, 200);
    assert_true(r->started == w.started && r->up_total_ms == w.up_total_ms &&
                r->down_total_ms == w.down_total_ms);
    s->ends[s->n++] = end;
    return 0;
}

static void test_records_read_back_and_torn_end_ignored(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], torn;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);

    struct seen s = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, seen_fn, &s, &torn, &d), 0);
    assert_int_equal(s.n, N);
    assert_int_equal(torn, 0);
    assert_memory_equal(s.ends, ends, sizeof(ends));
    assert_int_equal(ends[N - 1], in->size);

    /* the frontier after the first: the rest; another epoch: all */
    struct seen s2 = {f, 0, 1, {0}};
    assert_int_equal(
        intake_read(in->fd, in->epoch, ends[0], seen_fn, &s2, &torn, &d), 0);
    assert_int_equal(s2.n, N - 1);
    struct seen s3 = {f, 0, 0, {0}};
    assert_int_equal(
        intake_read(in->fd, in->epoch + 1, ends[0], seen_fn, &s3, &torn, &d),
        0);
    assert_int_equal(s3.n, N);

    /* an append cut short (the process died inside write): ignored */
    char junk[40];
    memcpy(junk, "INTK", 4);
    memset(junk + 4, 0x7f, sizeof(junk) - 4);
    assert_int_equal(write(in->fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    struct seen s4 = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, seen_fn, &s4, &torn, &d), 0);
    assert_int_equal(s4.n, N);
    assert_int_equal(torn, sizeof(junk));

    /* a record whose bytes changed ends the log there */
    char b;
    int fd = open(in->path, O_RDWR); /* in->fd appends, whatever pwrite says */
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, (off_t)ends[0] + 40), 1);
    b ^= 1;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)ends[0] + 40), 1);
    close(fd);
    struct seen s5 = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, seen_fn, &s5, &torn, &d), 0);
    assert_int_equal(s5.n, 1);
    intake_close(in, true);
}

static int count_rows(const char *db, const char *like)
{
    json_t *all = rec_load(db);
    int n = 0;
    assert_non_null(all);
    for (size_t i = 0; i < json_array_size(all); i++) {
        const char *p =
            json_string_value(json_object_get(json_array_get(all, i), "path"));
        n += p && strstr(p, like) != NULL;
    }
    json_decref(all);
    return n;
}

static void test_replay_commits_each_once(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 9;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);
    intake_close(in, false); /* as kill -9 leaves it */
    char *log = intake_path(f->db);
    assert_int_equal(access(log, F_OK), 0);

    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    assert_int_equal(n, N);
    assert_int_not_equal(access(log, F_OK), 0); /* emptied and removed */
    json_t *all = rec_load(f->db);
    assert_int_equal(json_array_size(all), N);
    for (int i = 0; i < N; i++) {
        json_t *x = json_array_get(all, i);
        assert_string_equal(json_string_value(json_object_get(x, "path")),
                            f->path[i]);
        json_t *reply = json_object_get(x, "reply");
        char want[32];
        snprintf(want, sizeof(want), "reply %d", i);
        assert_string_equal(
            json_string_value(json_object_get(reply, "content")), want);
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(x, "req_headers"),
                                              "Authorization")),
            "[redacted]");
    }
    json_decref(all);

    /* again: nothing more */
    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    assert_int_equal(n, 0);
    assert_int_equal(count_rows(f->db, "n="), N);
    free(log);
}

static void test_replay_starts_at_the_frontier(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 0;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);
    /* the first two were committed (as the writer's batch marks them) */
    sqlite3 *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    assert_int_equal(intake_mark(in, db, in->epoch, ends[1]), SQLITE_OK);
    uint64_t e, o;
    assert_int_equal(intake_frontier(db, &e, &o, &d), 0);
    assert_true(e == in->epoch && o == ends[1]);
    intake_close(in, false);
    store_close(db);

    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    assert_int_equal(n, 1);
    assert_int_equal(count_rows(f->db, "n=2"), 1);
    assert_int_equal(count_rows(f->db, "n="), 1);
}

static void test_live_log_left_alone(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 9;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends); /* held: a live record */
    struct intake *other = NULL;
    assert_int_equal(intake_open(f->db, &other, &d), 1);
    assert_null(other);
    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    assert_int_equal(n, 0);
    char *log = intake_path(f->db);
    assert_int_equal(access(log, F_OK), 0);
    intake_close(in, false);
    /* released: now it is replayed */
    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    assert_int_equal(n, N);
    free(log);
}

/* `fidelity sessions` (as audit, show, drift --from-db) commits a log left
 * behind before it reads, and says so on stderr. */
static void test_sessions_commits_log_first(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N];
    struct buf out = BUF_INIT, err = BUF_INIT;
    intake_close(write_log(f, ends), false);
    const char *const argv[] = {"sessions", "--db", f->db, "--json", "-", NULL};
    assert_int_equal(proc_run(argv, NULL, &out, &err, 60), 0);
    assert_non_null(strstr(buf_str(&err), "committed 3 exchanges"));
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    json_t *ss = json_object_get(j, "sessions");
    assert_int_equal(json_array_size(ss), N); /* one prompt each */
    json_decref(j);
    assert_int_equal(count_rows(f->db, "n="), N);
    buf_release(&out);
    buf_release(&err);
}

/* record itself commits a log left behind before it serves. */
static void test_record_replays_at_start(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N];
    struct proc rec;
    intake_close(write_log(f, ends), false);
    assert_int_equal(rec_start_record(&rec, "http://127.0.0.1:9", f->db, NULL),
                     0);
    assert_int_equal(proc_stop(&rec), 0);
    assert_int_equal(count_rows(f->db, "n="), N);
    char *log = intake_path(f->db);
    assert_int_not_equal(access(log, F_OK), 0); /* removed at the end */
    free(log);
}

/* Past 64 MiB the log is emptied once all it holds is committed (with a
 * new epoch); exchanges after that are in the new log, and a kill -9 then
 * loses none of them. 1 MiB bodies: 80 exchanges cross the line. */
#define BIG_N 80
#define BIG (1u << 20)

static void test_log_emptied_past_64_mib(void **state)
{
    struct fx *f = *state;
    struct upstream *up = upstream_start();
    struct proc rec;
    struct stat st;
    struct diag d = {{0}};
    uint64_t n = 0;
    char *log = intake_path(f->db);
    char *body = xmalloc(BIG + 64);
    int len = snprintf(body, 64,
                       "{\"messages\":[{\"role\":\"user\","
                       "\"content\":\"");
    memset(body + len, 'a', BIG);
    len += BIG;
    len += snprintf(body + len, 32, "%s", "\"}]}");

    assert_non_null(up);
    assert_int_equal(rec_start_record(&rec, upstream_url(up), f->db, NULL), 0);
    char *url = xasprintf("http://127.0.0.1:%d/json", rec.port);
    uint64_t biggest = 0;
    for (int i = 0; i < BIG_N; i++) {
        struct rec_resp r;
        body[len - 5] = (char)('A' + i % 26); /* each message its own */
        body[len - 6] = (char)('A' + i / 26);
        rec_resp_init(&r);
        assert_int_equal(rec_fetch(url, body, (size_t)len, NULL, 0, &r), 0);
        assert_int_equal(r.status, 200);
        rec_resp_release(&r);
        assert_int_equal(stat(log, &st), 0);
        if ((uint64_t)st.st_size > biggest)
            biggest = (uint64_t)st.st_size;
    }
    /* it grew past 64 MiB, then was emptied: now it holds the rest only */
    assert_true(biggest >= (64u << 20));
    assert_int_equal(stat(log, &st), 0);
    assert_true((uint64_t)st.st_size < (uint64_t)(BIG_N - 60) * BIG);
    kill(rec.pid, SIGKILL);
    waitpid(rec.pid, NULL, 0);
    rec.pid = 0;
    assert_int_equal(record_replay(f->db, NULL, &n, &d), 0);
    printf("%llu exchanges committed from the new log\n",
           (unsigned long long)n);
    assert_int_equal(count_rows(f->db, "/json"), BIG_N);
    free(url);
    free(body);
    free(log);
    upstream_stop(up);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_records_read_back_and_torn_end_ignored, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_replay_commits_each_once, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_replay_starts_at_the_frontier,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_live_log_left_alone, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_record_replays_at_start, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_sessions_commits_log_first,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_log_emptied_past_64_mib, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
