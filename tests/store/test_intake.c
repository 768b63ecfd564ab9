/*
 * The intake log (src/store/intake.c) and its replay (store_replay,
 * src/store/replay.c): records read back as appended, a torn end is ignored,
 * the frontier decides what is replayed, a replay commits each exchange once,
 * and a log a live record holds is left alone. Damage in the log is said by
 * offset and costs only what it hit; a store record may not write is
 * refused before it listens; a full disk's message says how to avoid it.
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "store/intake.h"
#include "store/replay.h"
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

static int count_fn(const struct intake_rec *r, uint64_t end, void *ud)
{
    struct seen *s = ud;
    (void)r;
    if (s->n < N)
        s->ends[s->n] = end;
    s->n++;
    return 0;
}

static void test_records_read_back_and_torn_end_ignored(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N];
    struct intake_damage dmg;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);

    struct seen s = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, seen_fn, &s, &dmg, &d), 0);
    assert_int_equal(s.n, N);
    assert_int_equal(dmg.torn, 0);
    assert_memory_equal(s.ends, ends, sizeof(ends));
    assert_int_equal(ends[N - 1], in->size);

    /* the frontier after the first: the rest; another epoch: all */
    struct seen s2 = {f, 0, 1, {0}};
    assert_int_equal(
        intake_read(in->fd, in->epoch, ends[0], seen_fn, &s2, &dmg, &d), 0);
    assert_int_equal(s2.n, N - 1);
    struct seen s3 = {f, 0, 0, {0}};
    assert_int_equal(
        intake_read(in->fd, in->epoch + 1, ends[0], seen_fn, &s3, &dmg, &d), 0);
    assert_int_equal(s3.n, N);

    /* an append cut short (the process died inside write): ignored */
    char junk[40];
    memcpy(junk, "INTK", 4);
    memset(junk + 4, 0x7f, sizeof(junk) - 4);
    assert_int_equal(write(in->fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    struct seen s4 = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, seen_fn, &s4, &dmg, &d), 0);
    assert_int_equal(s4.n, N);
    assert_int_equal(dmg.torn, sizeof(junk));

    /* a record whose bytes changed is skipped: the one after it is read,
     * and the damage is said by offset */
    char b;
    int fd = open(in->path, O_RDWR); /* in->fd appends, whatever pwrite says */
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, (off_t)ends[0] + 40), 1);
    b ^= 1;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)ends[0] + 40), 1);
    close(fd);
    struct seen s5 = {f, 0, 0, {0}};
    assert_int_equal(intake_read(in->fd, 0, 0, count_fn, &s5, &dmg, &d), 0);
    assert_int_equal(s5.n, 2);
    assert_int_equal(dmg.bad_spans, 1);
    assert_int_equal(dmg.bad_at, ends[0]);
    assert_int_equal(dmg.bad_bytes, ends[1] - ends[0]);
    assert_int_equal(dmg.lost, 1);
    assert_int_equal(dmg.torn, sizeof(junk));
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

    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
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
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
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
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    assert_int_equal(intake_mark(in, db, in->epoch, ends[1]), DB_OK);
    uint64_t e, o;
    assert_int_equal(intake_frontier(db, in->epoch, &e, &o, &d), 0);
    assert_true(e == in->epoch && o == ends[1]);
    intake_close(in, false);
    store_close(db);

    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, 1);
    assert_int_equal(count_rows(f->db, "n=2"), 1);
    assert_int_equal(count_rows(f->db, "n="), 1);
}

/* An exchange the store refuses and the spill file cannot take stays in
 * the log with those after it, and the frontier never passes it: the
 * batch is stored one exchange at a time. The next replay commits exactly
 * the rest, none twice. */
static void test_replay_keeps_what_it_cannot_commit(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 9;
    struct diag d = {{0}};
    intake_close(write_log(f, ends), false);
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    assert_int_equal(store_exec(db,
                                "CREATE TRIGGER full BEFORE INSERT ON xchg"
                                " WHEN NEW.path LIKE '%n=1%'"
                                " BEGIN SELECT RAISE(ABORT, 'disk full'); END",
                                &d),
                     0);
    store_close(db);
    char *spill = xasprintf("%s/no/such/dir/s.jsonl", f->dir);
    assert_int_equal(store_replay(f->db, spill, &n, NULL, &d), -1);
    assert_non_null(strstr(d.msg, "cannot commit 2 exchanges"));
    assert_int_equal(n, 1);
    assert_int_equal(count_rows(f->db, "n=0"), 1);
    assert_int_equal(count_rows(f->db, "n="), 1);
    char *log = intake_path(f->db);
    assert_int_equal(access(log, F_OK), 0); /* kept */
    /* room again: the two left, once */
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(store_exec(db, "DROP TRIGGER full", &d), 0);
    store_close(db);
    assert_int_equal(store_replay(f->db, spill, &n, NULL, &d), 0);
    assert_int_equal(n, 2);
    assert_int_equal(count_rows(f->db, "n="), N);
    assert_int_equal(count_rows(f->db, "n=0"), 1);
    assert_int_not_equal(access(log, F_OK), 0);
    free(log);
    free(spill);
}

/* A damaged frontier (the intake table's row) is never read on a guess:
 * one inside a record, or not a number, fails the replay and keeps the
 * log, which a good frontier then replays whole; one past the end of the
 * log (its tail undone by a power loss) means nothing is left to commit. */
static void test_damaged_frontier_keeps_the_log(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 9;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);
    uint64_t epoch = in->epoch;
    intake_close(in, false);
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    char *sql =
        xasprintf("INSERT OR REPLACE INTO intake_log VALUES (%lld, %llu)",
                  (long long)epoch, (unsigned long long)ends[0] + 5);
    assert_int_equal(store_exec(db, sql, &d), 0);
    free(sql);
    store_close(db);
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), -1);
    assert_non_null(strstr(d.msg, "not where a record of the log starts"));
    assert_int_equal(n, 0);
    char *log = intake_path(f->db);
    assert_int_equal(access(log, F_OK), 0);
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(
        store_exec(db, "UPDATE intake_log SET off = 'somewhere'", &d), 0);
    store_close(db);
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), -1);
    assert_non_null(strstr(d.msg, "not two numbers"));
    assert_int_equal(access(log, F_OK), 0);
    /* repaired (the first one committed): the other two, once */
    assert_int_equal(store_open(f->db, &db, &d), 0);
    sql = xasprintf("UPDATE intake_log SET off = %llu",
                    (unsigned long long)ends[0]);
    assert_int_equal(store_exec(db, sql, &d), 0);
    free(sql);
    store_close(db);
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, N - 1);
    assert_int_equal(count_rows(f->db, "n=0"), 0);
    assert_int_equal(count_rows(f->db, "n="), N - 1);
    /* past the end: nothing to commit, the log emptied */
    in = write_log(f, ends);
    epoch = in->epoch;
    intake_close(in, false);
    assert_int_equal(store_open(f->db, &db, &d), 0);
    sql = xasprintf("INSERT OR REPLACE INTO intake_log VALUES (%lld, %llu)",
                    (long long)epoch, (unsigned long long)ends[N - 1] + 4096);
    assert_int_equal(store_exec(db, sql, &d), 0);
    free(sql);
    store_close(db);
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, 0);
    assert_int_equal(count_rows(f->db, "n="), N - 1);
    assert_int_not_equal(access(log, F_OK), 0);
    free(log);
}

/* A store from before the frontier had a row per log keeps its one
 * frontier (the table `intake`, row id 1): it moves to intake_log, and the
 * log it names replays from there. */
static void test_old_frontier_table_migrates(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N], n = 0;
    struct diag d = {{0}};
    struct intake *in = write_log(f, ends);
    uint64_t epoch = in->epoch;
    intake_close(in, false);
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    char *sql =
        xasprintf("CREATE TABLE intake (id INTEGER PRIMARY KEY CHECK (id = 1),"
                  " epoch INTEGER NOT NULL, off INTEGER NOT NULL);"
                  "INSERT INTO intake VALUES (1, %lld, %llu)",
                  (long long)epoch, (unsigned long long)ends[1]);
    assert_int_equal(store_exec(db, sql, &d), 0);
    free(sql);
    assert_int_equal(intake_schema(db, &d), 0);
    assert_false(db_has_table(db, "intake"));
    uint64_t e, o;
    assert_int_equal(intake_frontier(db, epoch, &e, &o, &d), 0);
    assert_true(e == epoch && o == ends[1]);
    store_close(db);
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, N - 2);
    assert_int_equal(count_rows(f->db, "n="), N - 2);
}

/* Two logs (two records) share one store: each has its own frontier, and
 * marking one leaves the other's as it was. */
static void test_frontiers_per_log(void **state)
{
    struct fx *f = *state;
    struct diag d = {{0}};
    struct db *db = NULL;
    struct intake a = {.epoch = 11}, b = {.epoch = 22};
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    assert_int_equal(intake_mark(&a, db, a.epoch, 100), DB_OK);
    assert_int_equal(intake_mark(&b, db, b.epoch, 200), DB_OK);
    assert_int_equal(intake_mark(&a, db, a.epoch, 150), DB_OK);
    uint64_t e, o;
    assert_int_equal(intake_frontier(db, 11, &e, &o, &d), 0);
    assert_true(e == 11 && o == 150);
    assert_int_equal(intake_frontier(db, 22, &e, &o, &d), 0);
    assert_true(e == 22 && o == 200);
    assert_int_equal(intake_frontier(db, 33, &e, &o, &d), 0);
    assert_true(e == 0 && o == 0);
    assert_int_equal(intake_forget(db, 11), DB_OK);
    assert_int_equal(intake_frontier(db, 11, &e, &o, &d), 0);
    assert_true(e == 0 && o == 0);
    db_finalize(a.mark);
    db_finalize(b.mark);
    store_close(db);
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
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, 0);
    char *log = intake_path(f->db);
    assert_int_equal(access(log, F_OK), 0);
    intake_close(in, false);
    /* released: now it is replayed */
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    assert_int_equal(n, N);
    free(log);
}

/* Sets the store's frontier to (epoch, off). */
static void set_frontier(struct fx *f, uint64_t epoch, uint64_t off)
{
    struct db *db = NULL;
    struct diag d = {{0}};
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    char *sql =
        xasprintf("INSERT OR REPLACE INTO intake_log VALUES (%lld, %llu)",
                  (long long)epoch, (unsigned long long)off);
    assert_int_equal(store_exec(db, sql, &d), 0);
    free(sql);
    store_close(db);
}

/* Flips the bits of one byte of the log at off. */
static void spoil(struct fx *f, uint64_t off)
{
    char *log = intake_path(f->db), b;
    int fd = open(log, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
    b = (char)~b;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
    free(log);
}

/* `fidelity sessions`, its stderr into err: exit 0. */
static void run_sessions(struct fx *f, struct buf *err)
{
    struct buf out = BUF_INIT;
    const char *const argv[] = {"sessions", "--db", f->db, NULL};
    buf_reset(err);
    assert_int_equal(proc_run(argv, NULL, &out, err, 60), 0);
    buf_release(&out);
}

/* Damage in the log is said by offset with what it loses, and never costs
 * more: a damaged record past the frontier loses that exchange only (the
 * ones after it are committed); damage before the frontier (committed
 * records) loses none and does not block the pending ones; a log cut
 * before its frontier is said, not passed over in silence. */
static void test_damage_reported_and_skipped(void **state)
{
    struct fx *f = *state;
    uint64_t ends[N];
    struct buf err = BUF_INIT;
    char want[200];

    /* past the frontier: the second record's payload changed */
    intake_close(write_log(f, ends), false);
    spoil(f, ends[0] + INTAKE_HEAD + 40);
    run_sessions(f, &err);
    snprintf(want, sizeof(want), "is damaged at offset %llu",
             (unsigned long long)ends[0]);
    if (!strstr(buf_str(&err), want) ||
        !strstr(buf_str(&err), "1 exchange there cannot be read"))
        fail_msg("sessions did not say '%s': %s", want, buf_str(&err));
    assert_non_null(strstr(buf_str(&err), "committed 2 exchanges"));
    assert_int_equal(count_rows(f->db, "n=0"), 1);
    assert_int_equal(count_rows(f->db, "n=1"), 0);
    assert_int_equal(count_rows(f->db, "n=2"), 1);

    /* before the frontier: the first record's length changed, the frontier
     * after it; the two pending ones are committed */
    struct intake *in = write_log(f, ends);
    uint64_t epoch = in->epoch;
    intake_close(in, false);
    set_frontier(f, epoch, ends[0]);
    spoil(f, INTAKE_HEAD + 5);
    run_sessions(f, &err);
    snprintf(want, sizeof(want), "is damaged at offset %d, before its frontier",
             INTAKE_HEAD);
    if (!strstr(buf_str(&err), want) || !strstr(buf_str(&err), "none is lost"))
        fail_msg("sessions did not say '%s': %s", want, buf_str(&err));
    assert_null(strstr(buf_str(&err), "intake table"));
    assert_int_equal(count_rows(f->db, "n=0"), 1);
    assert_int_equal(count_rows(f->db, "n=1"), 1);
    assert_int_equal(count_rows(f->db, "n=2"), 2);

    /* a log cut before its frontier */
    in = write_log(f, ends);
    epoch = in->epoch;
    intake_close(in, false);
    set_frontier(f, epoch, ends[N - 1] + 100);
    run_sessions(f, &err);
    if (!strstr(buf_str(&err), "ends 100 bytes before its frontier"))
        fail_msg("sessions did not say the log is cut: %s", buf_str(&err));
    assert_int_equal(count_rows(f->db, "n="), 4);
    buf_release(&err);
}

/* A store record may not write is refused before it listens (exit 4, the
 * path and the fix named), not served while every exchange is lost. Run
 * as an unprivileged user when the test is root (root writes anyway). */
static void test_read_only_store_refused(void **state)
{
    struct fx *f = *state;
    char *ro = xasprintf("%s/ro", f->dir), *db = xasprintf("%s/r.db", ro);
    assert_int_equal(mkdir(ro, 0755), 0);
    struct proc made; /* the store as record leaves it */
    assert_int_equal(rec_start_record(&made, "http://127.0.0.1:9", db, NULL),
                     0);
    assert_int_equal(proc_stop(&made), 0);
    assert_int_equal(chmod(db, 0444), 0);
    /* the folder stays writable (its WAL files, the intake log) */
    assert_int_equal(chmod(ro, 01777), 0);
    assert_int_equal(chmod(f->dir, 0755), 0);
    const char *const av[] = {
        "record", "--listen",   "127.0.0.1:0",        "--db",
        db,       "--upstream", "http://127.0.0.1:9", NULL};
    struct buf out = BUF_INIT, err = BUF_INIT;
    int rc = proc_run_uid(av, geteuid() == 0 ? 65534 : 0, &out, &err, 10);
    if (rc != 4)
        fail_msg("record on a read-only store: exit %d, stdout '%s', "
                 "stderr '%s'",
                 rc, buf_str(&out), buf_str(&err));
    assert_int_equal(out.len, 0); /* never listened */
    assert_non_null(strstr(buf_str(&err), db));
    assert_non_null(strstr(buf_str(&err), "cannot be written"));
    assert_non_null(strstr(buf_str(&err), "Give --db a file"));
    buf_release(&out);
    buf_release(&err);
    free(db);
    free(ro);
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
    assert_int_equal(store_replay(f->db, NULL, &n, NULL, &d), 0);
    printf("%llu exchanges committed from the new log\n",
           (unsigned long long)n);
    assert_int_equal(count_rows(f->db, "/json"), BIG_N);
    free(url);
    free(body);
    free(log);
    upstream_stop(up);
}

/* A full disk, as RLIMIT_FSIZE in record's process (1 MiB a file), with
 * a store already near the limit and a spill file that cannot be created.
 * Small exchanges first: each commit writes whole pages, so the store
 * (its WAL, once checkpoints can no longer grow the file) fills long
 * before the log; from the first commit that fails, the exchanges stay in
 * the log. Then 64 KB ones fill the log: those after it are held, can be
 * neither committed nor spilled, and are lost. Every client is answered;
 * record's counts say how many of each; after the next start the store
 * holds exactly the stored ones plus those that were in the log. */
#define FULL_LIMIT (1u << 20)
#define FULL_SMALL_MAX 4000
#define FULL_BIG 40

static unsigned long long stop_count(const char *line, const char *what)
{
    const char *p = strstr(line, what);
    assert_non_null(p);
    while (p > line && p[-1] == ' ')
        p--;
    while (p > line && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return strtoull(p, NULL, 10);
}

static void full_fetch(const char *url, const char *body, size_t len)
{
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(url, body, len, NULL, 0, &r), 0);
    assert_int_equal(r.status, 200); /* served, whatever the disk */
    rec_resp_release(&r);
}

static bool log_says(const char *path, const char *what)
{
    struct buf b = BUF_INIT;
    bool yes = rec_read_file(path, &b) == 0 && strstr(buf_str(&b), what);
    buf_release(&b);
    return yes;
}

static void test_full_disk_counts(void **state)
{
    struct fx *f = *state;
    struct upstream *up = upstream_start();
    struct diag d = {{0}};
    struct proc rec;
    assert_non_null(up);
    /* the store, grown close to the limit */
    struct db *db = NULL;
    assert_int_equal(store_open(f->db, &db, &d), 0);
    assert_int_equal(xchg_schema(db, &d), 0);
    assert_int_equal(intake_schema(db, &d), 0);
    char *fill = xasprintf("CREATE TABLE filler(b BLOB);"
                           "INSERT INTO filler VALUES (zeroblob(%u));",
                           FULL_LIMIT - (32u << 10));
    assert_int_equal(store_exec(db, fill, &d), 0);
    free(fill);
    store_close(db);
    /* record with the limit (inherited through fork; restored here) */
    char *err = xasprintf("%s/err.log", f->dir);
    /* a spill file that cannot be written once traffic comes: its folder
     * exists when record starts (record checks it before it listens) and
     * is gone after */
    char *spill_dir = xasprintf("%s/gone", f->dir);
    char *spill = xasprintf("%s/spill.jsonl", spill_dir);
    assert_int_equal(mkdir(spill_dir, 0700), 0);
    const char *const av[] = {
        "record", "--listen", "127.0.0.1:0", "--upstream", upstream_url(up),
        "--db",   f->db,      "--spill",     spill,        NULL};
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = FULL_LIMIT;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int started = rec_start(&rec, av, err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    if (started) {
        upstream_stop(up);
        fail_msg("record did not start");
    }
    assert_int_equal(rmdir(spill_dir), 0);
    free(spill_dir);
    char *url = xasprintf("http://127.0.0.1:%d/json", rec.port);
    struct buf body = BUF_INIT;
    int n = 0;
    bool stuck = false;
    /* small ones until a commit fails with the exchange in the log */
    while (n < FULL_SMALL_MAX && !stuck) {
        buf_reset(&body);
        buf_printf(&body,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"%d\"}]}",
                   n);
        full_fetch(url, body.data, body.len);
        n++;
        if (n % 25 == 0)
            stuck = log_says(err, "stays in the intake log");
    }
    assert_true(stuck);
    /* then 64 KB ones, past what the log can take */
    for (int i = 0; i < FULL_BIG; i++, n++) {
        buf_reset(&body);
        buf_printf(&body, "{\"messages\":[{\"role\":\"user\",\"content\":\"%d ",
                   n);
        for (int k = 0; k < 4096; k++)
            buf_adds(&body, "0123456789abcdef");
        buf_adds(&body, "\"}]}");
        full_fetch(url, body.data, body.len);
    }
    buf_release(&body);
    free(url);
    assert_int_equal(proc_stop(&rec), 4); /* exchanges not stored */
    upstream_stop(up);
    struct buf log = BUF_INIT;
    assert_int_equal(rec_read_file(err, &log), 0);
    const char *line = strstr(buf_str(&log), "stopped; ");
    assert_non_null(line);
    print_message("%d exchanges sent; %s", n, line);
    unsigned long long total = stop_count(line, "exchanges,");
    unsigned long long stored = stop_count(line, "stored,");
    unsigned long long spilled = stop_count(line, "spilled");
    unsigned long long lost = stop_count(line, "lost");
    unsigned long long in_log = stop_count(line, "in the intake log");
    assert_int_equal(total, n);
    assert_int_equal(spilled, 0);
    assert_true(stored > 0 && lost > 0 && in_log > 0); /* each kind seen */
    assert_int_equal(stored + lost + in_log, n);
    /* the message says how to avoid it */
    assert_non_null(strstr(buf_str(&log), "give --spill a path on another "
                                          "disk than the store"));
    buf_release(&log);
    /* the store holds the stored ones; the log is kept for the rest */
    assert_int_equal(count_rows(f->db, "/json"), (int)stored);
    char *lp = intake_path(f->db);
    assert_int_equal(access(lp, F_OK), 0);
    free(lp);
    /* the next start commits exactly those in the log */
    struct buf out = BUF_INIT, e2 = BUF_INIT;
    const char *const sv[] = {"sessions", "--db", f->db, NULL};
    assert_int_equal(proc_run(sv, NULL, &out, &e2, 60), 0);
    char *said = xasprintf("committed %llu exchanges", in_log);
    if (!strstr(buf_str(&e2), said))
        fail_msg("sessions did not say '%s': %s", said, buf_str(&e2));
    free(said);
    assert_int_equal(count_rows(f->db, "/json"), (int)(stored + in_log));
    buf_release(&out);
    buf_release(&e2);
    free(err);
    free(spill);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_disk_counts, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(
            test_records_read_back_and_torn_end_ignored, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_replay_commits_each_once, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_replay_keeps_what_it_cannot_commit,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_damaged_frontier_keeps_the_log,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_replay_starts_at_the_frontier,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_damage_reported_and_skipped,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_read_only_store_refused, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_old_frontier_table_migrates,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_frontiers_per_log, fx_setup,
                                        fx_teardown),
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
