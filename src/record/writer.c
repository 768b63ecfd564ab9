/*
 * writer: the storing side of `fidelity record`. Finished exchanges are
 * handed from the loop (proxy.c) to the writer thread through lock-free
 * stacks and a futex (or stored on the loop's own thread when that is
 * cheaper: writer_store_inline), parsed and committed in batches, one
 * transaction each, appended to the spill file when the store refuses
 * them, and handed back for their clients' last bytes. With the intake log
 * an exchange is answered once appended and committed later; while the
 * store's server cannot be reached its exchanges wait in the log, and are
 * committed from it once the server is back (the store away). A
 * checkpointer thread keeps the WAL's checkpoints out of the commits.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <event2/event.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/plural.h"
#include "record/record_int.h"
#include "record/rtiming.h"
#include "store/ingest.h"
#include "store/intake.h"
#include "store/replay.h"
#include "store/store.h"
#include "store/xchg.h"

#define BATCH_MAX 256
/* Under sustained load (the last batch held LINGER_FROM or more), the
 * writer waits up to LINGER_NS for LINGER_N exchanges before it takes the
 * queue: a transaction's own cost (about six fcntl locks on the WAL index,
 * the commit, the rewrite of the pages its rows share) is then shared by
 * more exchanges. A lone exchange, or light load, is never held for it. */
#define LINGER_FROM 8
#define LINGER_N 32
#define LINGER_NS 200000L
/* in flight at most, for an exchange to be stored on the loop's thread */
#define INLINE_MAX_ACTIVE 64

static void store_batch(struct record *r, struct ex **batch, size_t n);
static int on_intake_commit(struct db *db, void *ud);

/* Reconnecting to a store that went away: the first try RETRY_FIRST_MS
 * after, each next one twice as late, at most RETRY_MAX_MS apart. A try
 * costs one connection attempt, on the writer's thread. */
#define RETRY_FIRST_MS 50u
#define RETRY_MAX_MS 2000u
/* Exchanges a catch-up commits before the writer takes its queue again
 * (hands back what waits there, keeping the loop's counts low). */
#define CATCH_UP_CHUNK 1024

/* ---- the hand-off ---- */

/* Pushes e onto the stack *top (newest first), any thread. */
static void push(_Atomic(struct ex *) *top, struct ex *first, struct ex *last)
{
    struct ex *head = atomic_load(top);
    do
        last->wnext = head;
    while (!atomic_compare_exchange_weak(top, &head, first));
}

/* Takes the whole stack *top, oldest first. */
static struct ex *take_all(_Atomic(struct ex *) *top)
{
    struct ex *e = atomic_exchange(top, NULL), *fifo = NULL;
    while (e) {
        struct ex *next = e->wnext;
        e->wnext = fifo;
        fifo = e;
        e = next;
    }
    return fifo;
}

/* Hands stored exchanges back to the loop, in one push. */
static void handed_back(struct record *r, struct ex **batch, size_t n)
{
    for (size_t i = 1; i < n; i++)
        batch[i]->wnext = batch[i - 1];
    push(&r->d_in, batch[n - 1], batch[0]);
}

static void futex_wait(atomic_uint *a, unsigned val, const struct timespec *rel)
{
    syscall(SYS_futex, a, FUTEX_WAIT_PRIVATE, val, rel, NULL, 0);
}

/* Loop side: wakes the writer if it waits for at most n exchanges. */
static void wake_writer(struct record *r, size_t n)
{
    if (atomic_load(&r->w_sleep) && n >= atomic_load(&r->w_want)) {
        atomic_store(&r->w_sleep, 0);
        syscall(SYS_futex, &r->w_sleep, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Storing took more CPU than 1/INLINE_LOAD of the last LOAD_WINDOW_NS:
 * leave it to the writer thread, beside the loop. A tenth, not a fifth as
 * before: a saturated SSE run (64 connections, storing about 15 % of the
 * time) counted as light and stored nearly every exchange inline, one
 * transaction each (6 fcntl locks and the WAL frames of the pages it
 * touched, per exchange; 12 system calls per exchange on the loop's thread
 * instead of 6), while the writer would have taken them in batches. At
 * 1,000 requests/s storing is 2-3 % of the time, and an exchange is still
 * stored inline even when wrk's paced connections arrive together (which
 * counting the exchanges in flight instead did not allow). */
#define LOAD_WINDOW_NS 50000000u
#define INLINE_LOAD 10

/* Whether storing has been light lately (the loop's thread). */
static bool storing_light(struct record *r)
{
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (now - r->win_start >= LOAD_WINDOW_NS) {
        uint64_t s = atomic_load_explicit(&r->store_ns, memory_order_relaxed);
        r->win_heavy = (s - r->win_stored) * INLINE_LOAD > now - r->win_start;
        r->win_start = now;
        r->win_stored = s;
    }
    return !r->win_heavy;
}

/* Bytes of request and response above which an exchange is left to the
 * writer thread: storing it would hold up the other exchanges' forwarding
 * (a long session's 40 KB request costs about 0.5M instructions) */
#define INLINE_MAX_BYTES (64u << 10)

/* Stores a lone exchange on the loop's own thread when the writer is idle
 * with nothing queued, the exchange is small (INLINE_MAX_BYTES) and storing
 * has taken less than a fifth of the last 50 ms (storing_light): the writer
 * would take it alone anyway, and the two thread hand-offs (wake the writer,
 * wake the loop) are most of what a lone exchange waits for on a busy machine;
 * they also let exchanges pile up into batches whose last member waits for all
 * the others. Under load the writer thread does the work, in batches, beside
 * the loop. The client still gets its last byte only after the commit.
 *
 * Once stored, the exchange is completed here, directly, not through an
 * activated event (a loop pass later: about 0.4 ms at p99 on a busy
 * machine). That is safe from every caller of finish_as: upclient calls
 * its done callback last, with the request already freed and its
 * connection pooled or closed, and never from inside upclient_send; curl's
 * results are read (check_done) outside its callbacks; front lets a
 * request be answered from inside its request callback and never calls
 * gone from inside a front_* call; and complete() touches only the
 * client's connection (front_*, which defers what follows a response to
 * the loop) and the exchange, which nothing up the stack uses after
 * finish_as. */
bool writer_store_inline(struct record *r, struct ex *e)
{
    bool mine;
    /* while the store is away the writer does the connecting */
    if (atomic_load(&r->away) || r->nactive > INLINE_MAX_ACTIVE ||
        e->body.len + e->x.resp_raw_len > INLINE_MAX_BYTES || !storing_light(r))
        return false;
    bool idle = false;
    mine = atomic_load(&r->q_n) == 0 &&
           atomic_compare_exchange_strong(&r->storing_now, &idle, true);
    if (!mine)
        return false;
    store_batch(r, &e, 1);
    if (r->timing)
        rtiming_add(r->timing, RT_INLINE, 1);
    atomic_store(&r->storing_now, false);
    proxy_stored_back(r, e, r->timing ? now_ms() : 0);
    proxy_maybe_exit(r);
    return true;
}

void writer_enqueue(struct record *r, struct ex *e)
{
    push(&r->q_in, e, e);
    /* the writer waits for the first, or lingers for LINGER_N */
    wake_writer(r, atomic_fetch_add(&r->q_n, 1) + 1);
}

/* Exchanges past these wait for their commit as without the log: the
 * writer has fallen this far behind (memory), or the log is this long and
 * is emptied once they are all committed (on_stored). */
#define INTAKE_MAX_QUEUED 4096
#define INTAKE_MAX_BYTES ((size_t)64 << 20)
#define INTAKE_ROTATE ((uint64_t)64 << 20)

/* Appends e to the intake log: true when it is there (then the client may
 * have its end now), false when it must be held until committed. */
bool writer_intake_put(struct record *r, struct ex *e)
{
    struct intake *in = r->intake;
    size_t bytes = e->body.len + e->x.resp_raw_len;
    if (!in || r->in_failed || r->in_pending >= INTAKE_MAX_QUEUED ||
        r->in_bytes + bytes > INTAKE_MAX_BYTES || in->size >= INTAKE_ROTATE)
        return false;
    const struct xchg *x = &e->x;
    struct intake_rec ir = {
        .started = x->started,
        .up_ttfb_ms = x->up_ttfb_ms,
        .up_total_ms = x->up_total_ms,
        .down_ttfb_ms = x->down_ttfb_ms,
        .down_total_ms = x->down_total_ms,
        .max_gap_ms = e->max_gap_ms,
        .status = x->status,
        .end = (uint8_t)x->end,
        .streamed = x->streamed,
        .resp_capped = e->resp_capped,
        .ct_json = e->ct_json,
        .req_redacted = x->req_redacted,
        .method = x->method,
        .method_len = strlen(x->method),
        .path = x->path,
        .path_len = strlen(x->path),
        .req_hl = x->req_hl.b.data,
        .req_hl_len = x->req_hl.b.len,
        .req_hl_n = x->req_hl.n,
        .req_hl_set = x->req_hl.set,
        .resp_hl = x->resp_hl.b.data,
        .resp_hl_len = x->resp_hl.b.len,
        .resp_hl_n = x->resp_hl.n,
        .resp_hl_set = x->resp_hl.set,
        .body = e->body.data,
        .body_len = e->body.len,
        .resp = x->resp_raw,
        .resp_len = x->resp_raw_len,
    };
    int rc = intake_append(in, &ir, &e->in_end);
    if (rc) {
        record_logf(r,
                    "cannot append to the intake log '%s': %s; exchanges are "
                    "now held until they are committed",
                    in->path, strerror(-rc));
        r->in_failed = true;
        return false;
    }
    e->in_epoch = in->epoch;
    e->in_size = bytes;
    r->in_pending++;
    r->in_bytes += bytes;
    return true;
}

/* ---- the writer thread ---- */

/* Appends an exchange the store refused to the spill file: 1, or when
 * that fails too, 3 if in_log (it stays in the intake log, past the
 * frontier, for the next start), else 2 (lost). */
static int spill(struct record *r, struct ex *e, const char *why, bool in_log)
{
    struct diag sd = {{0}};
    record_logf(r, "cannot store %s %s: %s; spilling to '%s'", e->x.method,
                e->x.path, why, r->o.spill_path);
    if (!xchg_spill_append(r->o.spill_path, &e->x, &sd))
        return 1;
    if (in_log) {
        if (!atomic_exchange(&r->log_stuck, true))
            record_logf(
                r,
                "exchange %s %s: %s; it stays in the intake log '%s', "
                "with the exchanges after it, and the next start commits "
                "them. The store and the spill file failed together (a "
                "full disk holding both?): give --spill a path on another "
                "disk than the store to avoid it",
                e->x.method, e->x.path, sd.msg, r->intake->path);
        return 3;
    }
    record_logf(r,
                "exchange %s %s lost: %s. The store and the spill file failed "
                "together (a full disk holding both?): give --spill a path on "
                "another disk than the store to avoid it",
                e->x.method, e->x.path, sd.msg);
    return 2;
}

/* Releases what the writer's work on e holds (its copy is stored,
 * spilled or left in the log), keeping how it ended and its timing
 * samples for the loop. */
static void writer_done(struct ex *e, bool timing)
{
    enum xchg_end end = e->x.end;
    double queued = e->x.up_total_ms;
    xchg_release(&e->x);
    e->x.end = end;
    e->x.up_total_ms = queued;
    e->x.down_total_ms = timing ? now_ms() : 0;
    buf_release(&e->body);
}

/* record_opts.timing (rtiming.h): samples of a stored batch. Once
 * its row is written the exchange's xchg is released; its timing fields
 * then carry, until the loop completes it, when it was queued (up_total_ms)
 * and stored (down_total_ms), in now_ms() time. */
static void note_batch(struct rtiming *t, struct ex **batch, size_t n,
                       double t0, double t1, double t2)
{
    for (size_t i = 0; i < n; i++) {
        struct xchg *x = &batch[i]->x;
        double queued = batch[i]->t0 + x->down_total_ms;
        rtiming_add(t, RT_WAIT, t0 - queued);
        rtiming_add(t, RT_BUILD, t1 - t0);
        rtiming_add(t, RT_PUT, t2 - t1);
        rtiming_add(t, RT_BATCH, (double)n);
        x->up_total_ms = queued;
    }
}

/* What the transaction storing batch[0..n) (results in rcs) does to the
 * intake log's frontier: it moves past the batch's last exchange of the
 * log (on_intake_commit). */
static void set_mark(struct record *r, struct ex **batch, size_t n,
                     const int *rcs)
{
    r->mark_due = false;
    for (size_t i = 0; i < n; i++)
        if (batch[i]->in_end) { /* the queue keeps the log's order */
            r->mark_epoch = batch[i]->in_epoch;
            r->mark_off = batch[i]->in_end;
            r->mark_due = true;
        }
    r->batch_ex = batch;
    r->batch_rcs = rcs;
    r->batch_n = n;
    r->batch_refused = false;
}

/* ---- the store away ---- */

/* Whether exchanges can wait for the store in the intake log. */
static bool can_wait(struct record *r)
{
    return r->intake && !atomic_load(&r->log_stuck);
}

/* Whether a catch-up committed (or spilled) e already. */
static bool is_caught(const struct record *r, const struct ex *e)
{
    return e->in_end && e->in_epoch == r->caught_epoch &&
           e->in_end <= r->caught_to;
}

/* The batch being stored (set_mark) failed because the store's server
 * could not be reached: the store is away from now on. */
static void go_away(struct record *r, const char *why)
{
    r->lost_due = r->mark_due && r->mark_epoch == r->intake->epoch;
    r->lost_off = r->mark_off;
    r->lost_n = 0;
    for (size_t i = 0; i < r->batch_n; i++)
        r->lost_n += r->batch_ex[i]->in_end != 0;
    r->away_since = now_ms();
    r->retry_ms = RETRY_FIRST_MS;
    r->retry_at = r->away_since + RETRY_FIRST_MS;
    r->away_n = 0;
    atomic_store(&r->away, true);
    /* one line: libpq's messages span several */
    char one[sizeof(((struct diag *)0)->msg)];
    size_t n = 0;
    for (const char *p = why; *p && n + 1 < sizeof(one); p++) {
        bool space = *p == '\n' || *p == '\t' || *p == ' ';
        if (!space)
            one[n++] = *p;
        else if (n && one[n - 1] != ' ')
            one[n++] = ' ';
    }
    while (n && one[n - 1] == ' ')
        n--;
    one[n] = '\0';
    char *shown = store_shown(r->o.db_path);
    record_logf(r,
                "the store '%s' cannot be reached (%s): exchanges wait in the "
                "intake log '%s' and are committed from it once it answers",
                shown, one, r->intake->path);
    free(shown);
}

/* While the store is away: e waits in the log (outcome 4), or, not in
 * it, is spilled. */
static void wait_or_spill(struct record *r, struct ex *e, const char *why)
{
    e->outcome = e->in_end ? 4 : spill(r, e, why, false);
    writer_done(e, r->timing != NULL);
}

/* Connects to the store again and commits up to CATCH_UP_CHUNK exchanges
 * of the log past its frontier (store/replay.h): the store is back once
 * the log is committed to its end. When it cannot be reached, the next
 * try is later. */
static void catch_up(struct record *r)
{
    struct replay_counts k;
    struct replay_pos pos;
    struct diag d = {{0}};
    int rc = replay_catch_up(r->db, r->cache, r->ing, r->intake,
                             r->o.spill_path, CATCH_UP_CHUNK, &k, &pos, &d);
    xchg_cache_pre_commit(r->cache, on_intake_commit, r);
    if (r->lost_due && pos.from >= r->lost_off)
        atomic_fetch_add(&r->caught_stored, r->lost_n);
    if (pos.from >= r->lost_off || !rc || k.stored || k.spilled)
        r->lost_due = false; /* the frontier was read: known either way */
    atomic_fetch_add(&r->caught_stored, k.stored);
    atomic_fetch_add(&r->caught_spilled, k.spilled);
    r->away_n += k.stored + k.spilled;
    if (rc == -ENOTCONN) {
        r->retry_ms =
            r->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : r->retry_ms * 2;
        r->retry_at = now_ms() + r->retry_ms;
        return;
    }
    r->retry_ms = RETRY_FIRST_MS;
    r->retry_at = now_ms();
    if (!rc) {
        r->caught_epoch = r->intake->epoch;
        r->caught_to = pos.to;
        if (pos.more)
            return; /* the rest after a look at the queue */
    }
    char *shown = store_shown(r->o.db_path);
    record_logf(r,
                "the store '%s' answers again after %.1f s: %llu exchange%s "
                "committed from the intake log",
                shown, (now_ms() - r->away_since) / 1e3,
                (unsigned long long)r->away_n, plural_s(r->away_n));
    free(shown);
    if (rc) { /* neither stored nor spilled: the log keeps them */
        record_logf(r,
                    "%s; it and the exchanges after it stay in the intake log "
                    "for the next start",
                    d.msg);
        atomic_store(&r->log_stuck, true);
    }
    atomic_store(&r->away, false);
}

void writer_stats(const struct record *r, struct record_stats *s)
{
    *s = r->stats;
    uint64_t st = atomic_load(&r->caught_stored);
    uint64_t sp = atomic_load(&r->caught_spilled);
    s->stored += st;
    s->spilled += sp;
    /* what has not been committed of what waited is in the log */
    if (r->waited > st + sp)
        s->in_log += r->waited - st - sp;
}

/* Parses, classifies and stores a batch; failures go to the spill file.
 * Once the log is stuck (log_stuck), its exchanges stay there; while the
 * store is away they wait there (outcome 4). */
static void store_batch(struct record *r, struct ex **all, size_t nall)
{
    struct xchg *xs[BATCH_MAX];
    struct ex *batch[BATCH_MAX];
    int rcs[BATCH_MAX];
    struct diag d = {{0}};
    bool timing = r->timing != NULL;
    double t0 = timing ? now_ms() : 0, t1 = 0;
    uint64_t start_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    size_t n = 0;
    for (size_t i = 0; i < nall; i++) {
        if (all[i]->in_end && atomic_load(&r->log_stuck)) {
            all[i]->outcome = 3;
            writer_done(all[i], timing);
        } else if (is_caught(r, all[i]) || atomic_load(&r->away)) {
            wait_or_spill(r, all[i], "the store cannot be reached");
        } else {
            batch[n++] = all[i];
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct xchg *x = &batch[i]->x;
        struct ingest_src src = {
            .body = batch[i]->body.data,
            .body_len = batch[i]->body.len,
            .ct_json = batch[i]->ct_json,
            .resp_capped = batch[i]->resp_capped,
            .max_gap_ms = batch[i]->max_gap_ms,
        };
        ingest_build(r->ing, x, &src);
        xs[i] = x;
    }
    if (timing)
        t1 = now_ms();
    set_mark(r, batch, n, rcs);
    /* when the transaction did not commit, the frontier stayed before
     * the batch: an exchange of the log that cannot be spilled either is
     * still there for the next start. It commits only when every exchange
     * of the log in it was stored (on_intake_commit): else the batch is
     * stored again one by one, so that the frontier never passes an
     * exchange that is neither stored nor spilled. */
    bool rolled_back = n && xchg_put_batch(r->db, r->cache, xs, n, rcs, &d);
    if (timing)
        note_batch(r->timing, batch, n, t0, t1, now_ms());
    bool one_by_one = rolled_back && r->batch_refused;
    if (rolled_back && !one_by_one && can_wait(r) && db_is_lost(r->db))
        go_away(r, d.msg);
    for (size_t i = 0; i < n; i++) {
        struct ex *e = batch[i];
        bool in_log = e->in_end && rolled_back;
        struct diag d1 = {{0}};
        if (atomic_load(&r->away)) {
            wait_or_spill(r, e, d.msg);
            continue;
        }
        if (one_by_one && e->in_end && atomic_load(&r->log_stuck)) {
            e->outcome = 3; /* with the one before it */
            writer_done(e, timing);
            continue;
        }
        if (one_by_one) {
            set_mark(r, &batch[i], 1, &rcs[i]);
            bool back =
                xchg_put_batch(r->db, r->cache, &xs[i], 1, &rcs[i], &d1);
            in_log = e->in_end && back;
            if (back && can_wait(r) && db_is_lost(r->db)) {
                go_away(r, d1.msg);
                wait_or_spill(r, e, d1.msg);
                continue;
            }
        }
        e->outcome =
            rcs[i] ? spill(r, e, one_by_one ? d1.msg : d.msg, in_log) : 0;
        /* free the recorded copy here, off the forwarding loop; the loop
         * needs only how it ended (and the timing samples) */
        writer_done(e, timing);
    }
    atomic_fetch_add_explicit(&r->store_ns,
                              clock_ns(CLOCK_THREAD_CPUTIME_ID) - start_ns,
                              memory_order_relaxed);
}

/* xchg_put_batch's last statement in each transaction: the intake log's
 * frontier moves past the batch's last exchange from the log. */
static int on_intake_commit(struct db *db, void *ud)
{
    struct record *r = ud;
    if (!r->mark_due)
        return DB_OK;
    /* an exchange of the log the store refused: committing would move the
     * frontier past it, and were the spill file to fail too it would be
     * lost; the batch is stored again one by one (store_batch) */
    for (size_t i = 0; i < r->batch_n; i++)
        if (r->batch_rcs[i] && r->batch_ex[i]->in_end) {
            r->batch_refused = true;
            return DB_ABORT;
        }
    return intake_mark(r->intake, db, r->mark_epoch, r->mark_off);
}

/* Writer side: waits until want exchanges are queued, quit, or (ns > 0)
 * ns nanoseconds have passed. w_sleep is set before q_n is read, and the
 * loop adds to q_n before it reads w_sleep (all sequentially consistent),
 * so one of the two sees the other: no wake-up is lost. */
static void writer_wait(struct record *r, size_t want, long ns)
{
    uint64_t end = ns > 0 ? clock_ns(CLOCK_MONOTONIC) + (uint64_t)ns : 0;
    atomic_store(&r->w_want, want);
    for (;;) {
        atomic_store(&r->w_sleep, 1);
        if (atomic_load(&r->q_n) >= want || atomic_load(&r->quit))
            break;
        struct timespec rel, *relp = NULL;
        if (end) {
            uint64_t now = clock_ns(CLOCK_MONOTONIC);
            if (now >= end)
                break;
            rel.tv_sec = (time_t)((end - now) / 1000000000u);
            rel.tv_nsec = (long)((end - now) % 1000000000u);
            relp = &rel;
        }
        futex_wait(&r->w_sleep, 1, relp);
    }
    atomic_store(&r->w_sleep, 0);
}

/* With the intake log, no client waits for the writer, which then runs at
 * SCHED_IDLE while it keeps up: its work yields to the loop, the upstream
 * and the clients on a busy machine (their p99 is the cost of anything
 * running beside them). When WRITER_BEHIND exchanges wait, or once the log
 * is off, it runs as any thread again, until fewer than WRITER_CAUGHT_UP
 * wait. A thread can leave SCHED_IDLE only with CAP_SYS_NICE or an
 * RLIMIT_NICE of 20 (sched(7)); without them the writer runs at
 * SCHED_BATCH instead, whose wake-ups do not preempt the loop. */
#define WRITER_BEHIND 256
#define WRITER_CAUGHT_UP 32

static bool can_leave_idle(void)
{
    struct rlimit rl;
    return geteuid() == 0 ||
           (getrlimit(RLIMIT_NICE, &rl) == 0 && rl.rlim_cur >= 20);
}

static void writer_policy(struct record *r, bool *idle, size_t waiting)
{
    struct sched_param sp = {0};
    /* a catch-up too: the clients' latency comes first */
    bool want = r->idle_ok && !atomic_load(&r->in_failed) &&
                waiting < (*idle ? WRITER_BEHIND : WRITER_CAUGHT_UP);
    if (want != *idle &&
        !pthread_setschedparam(pthread_self(), want ? SCHED_IDLE : SCHED_OTHER,
                               &sp))
        *idle = want;
}

/* Nanoseconds until the store away is tried again (at least 1). */
static long until_retry(struct record *r)
{
    double ms = r->retry_at - now_ms();
    return ms < 1e-6 ? 1 : (long)(ms * 1e6);
}

/* The store away: tries it again when due, or at once when quitting
 * (until a try finds it still unreachable: *gave_up, the exchanges then
 * stay in the log for the next start), the loop's thread kept out
 * (storing_now). */
static void maybe_catch_up(struct record *r, bool *gave_up)
{
    if (!atomic_load(&r->away) || *gave_up)
        return;
    bool quit = atomic_load(&r->quit);
    if (!quit && now_ms() < r->retry_at)
        return;
    for (bool no = false;
         !atomic_compare_exchange_weak(&r->storing_now, &no, true); no = false)
        sched_yield();
    catch_up(r);
    atomic_store(&r->storing_now, false);
    if (quit && atomic_load(&r->away) && r->retry_at > now_ms())
        *gave_up = true;
}

static void *writer_main(void *arg)
{
    struct record *r = arg;
    struct ex *batch[BATCH_MAX];
    size_t last = 0;
    bool idle = false, gave_up = false;
    if (r->intake && !r->idle_ok) {
        struct sched_param sp = {0};
        pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
    }
    struct ex *head = NULL, *tail = NULL; /* taken from q_in, in order */
    for (;;) {
        size_t n = 0;
        bool away = atomic_load(&r->away);
        if (!head)
            writer_wait(r, 1, away ? until_retry(r) : 0);
        if (last >= LINGER_FROM && !away)
            writer_wait(r, LINGER_N, LINGER_NS);
        for (struct ex *e = take_all(&r->q_in); e; e = e->wnext) {
            if (tail)
                tail->wnext = e;
            else
                head = e;
            tail = e;
        }
        while (head && n < BATCH_MAX) {
            batch[n++] = head;
            head = head->wnext;
        }
        if (!head)
            tail = NULL;
        last = n;
        size_t waiting = atomic_fetch_sub(&r->q_n, n);
        if (r->intake)
            writer_policy(r, &idle, waiting);
        maybe_catch_up(r, &gave_up);
        if (!n) {
            if (atomic_load(&r->quit) && (!atomic_load(&r->away) || gave_up))
                break; /* quit with an empty queue */
            continue;
        }
        /* the loop may be storing a lone exchange (store_inline) */
        for (bool no = false;
             !atomic_compare_exchange_weak(&r->storing_now, &no, true);
             no = false)
            sched_yield();
        store_batch(r, batch, n);
        for (size_t i = 0; i < n && r->timing; i++)
            rtiming_add(r->timing, RT_INLINE, 0);
        atomic_store(&r->storing_now, false);
        handed_back(r, batch, n);
        if (write(r->wake[1], "x", 1) < 0) {
            /* full pipe: the loop has wake-ups pending already */
        }
    }
    return NULL;
}

/* Loop side: exchanges the writer has stored (or spilled). */
static void on_stored(evutil_socket_t fd, short what, void *arg)
{
    struct record *r = arg;
    char drain[256];
    (void)what;
    /* a short read emptied the pipe: no second read to learn EAGAIN */
    while (fd >= 0 && read(fd, drain, sizeof(drain)) == (ssize_t)sizeof(drain))
        ;
    struct ex *e = take_all(&r->d_in);
    double now = r->timing ? now_ms() : 0;
    while (e) {
        struct ex *next = e->wnext;
        proxy_stored_back(r, e, now);
        e = next;
    }
    /* a long log is emptied once all it holds is committed (not while the
     * store is away: it holds what waits); exchanges wait for their
     * commit meanwhile (intake_put) */
    if (r->intake && !r->in_failed && !r->in_pending &&
        !atomic_load(&r->log_stuck) && !atomic_load(&r->away) &&
        r->intake->size >= INTAKE_ROTATE) {
        struct diag d = {{0}};
        if (intake_reset(r->intake, &d)) {
            record_logf(r,
                        "%s; exchanges are now held until they are committed",
                        d.msg);
            r->in_failed = true;
        }
    }
    if (fd < 0 && r->timing) /* the last call, from writer_stop */
        rtiming_report(r->timing, r->o.log, r->o.log_ud);
    proxy_maybe_exit(r);
}

static void writer_stop(struct record *r)
{
    if (!r->writer_started)
        return;
    atomic_store(&r->quit, true);
    atomic_store(&r->w_want, 0);
    wake_writer(r, 0);
    pthread_join(r->writer, NULL);
    r->writer_started = false;
    on_stored(-1, 0, r);
}

/* ---- the checkpointer ----
 *
 * In WAL mode a commit appends to the WAL without fsync (synchronous=
 * NORMAL); SQLite's automatic checkpoint then runs inside the commit that
 * crosses 1,000 WAL pages, copying pages into the database and fsyncing
 * it: milliseconds during which every exchange waiting for its commit (and
 * so its client's last byte) waits too. Instead, the writer's commit hook
 * only signals a thread that checkpoints on its own connection (PASSIVE:
 * it never blocks the writer), so commits never wait for a disk flush.
 * Durability is unchanged: what a commit wrote is in the WAL either way. */
#define CKPT_PAGES 1000

static int on_wal_commit(void *arg, int pages)
{
    struct record *r = arg;
    if (pages >= CKPT_PAGES) {
        pthread_mutex_lock(&r->ck_mu);
        r->ck_due = true;
        pthread_cond_signal(&r->ck_cv);
        pthread_mutex_unlock(&r->ck_mu);
    }
    return DB_OK;
}

static void *checkpointer_main(void *arg)
{
    struct record *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->ck_mu);
        while (!r->ck_due && !r->ck_quit)
            pthread_cond_wait(&r->ck_cv, &r->ck_mu);
        bool quit = r->ck_quit;
        r->ck_due = false;
        pthread_mutex_unlock(&r->ck_mu);
        if (quit)
            break;
        db_checkpoint(r->ck_db);
    }
    return NULL;
}

/* Starts the checkpointer; when it cannot (a second connection fails),
 * SQLite's automatic checkpoints stay on. */
static void checkpointer_start(struct record *r)
{
    struct diag d = {{0}};
    if (db_backend(r->db) != DB_SQLITE) /* no write-ahead log to copy */
        return;
    if (store_open(r->o.db_path, &r->ck_db, &d))
        return;
    pthread_mutex_init(&r->ck_mu, NULL);
    pthread_cond_init(&r->ck_cv, NULL);
    if (pthread_create(&r->ck_thread, NULL, checkpointer_main, r)) {
        pthread_mutex_destroy(&r->ck_mu);
        pthread_cond_destroy(&r->ck_cv);
        store_close(r->ck_db);
        r->ck_db = NULL;
        return;
    }
    pthread_setname_np(r->ck_thread, "record-ckpt");
    r->ck_started = true;
    /* replaces the automatic checkpoint, which is itself a WAL hook */
    db_wal_hook(r->db, on_wal_commit, r);
}

static void checkpointer_stop(struct record *r)
{
    if (!r->ck_started)
        return;
    pthread_mutex_lock(&r->ck_mu);
    r->ck_quit = true;
    pthread_cond_signal(&r->ck_cv);
    pthread_mutex_unlock(&r->ck_mu);
    pthread_join(r->ck_thread, NULL);
    store_close(r->ck_db);
    r->ck_db = NULL;
    pthread_mutex_destroy(&r->ck_mu);
    pthread_cond_destroy(&r->ck_cv);
    r->ck_started = false;
}

/* A store that cannot be written is refused before record listens: it
 * would answer every client and lose every exchange. SQLite opens a file
 * it may not write read-only without a word, so a write transaction is
 * begun and rolled back (it takes the write lock, as a commit would, and
 * fails on a read-only file, folder or file system). A store locked by
 * another writer is not refused: record spills while it is. */
static int check_writable(struct record *r, struct diag *d)
{
    int rc = db_is_readonly(r->db) ? DB_READONLY
                                   : db_exec(r->db, "BEGIN IMMEDIATE", NULL);
    if (rc == DB_OK) {
        db_exec(r->db, "ROLLBACK", NULL);
        return 0;
    }
    if (rc == DB_BUSY || rc == DB_LOCKED)
        return 0;
    char *shown = store_shown(r->o.db_path);
    diag_set(d, EROFS,
             "the store '%s' cannot be written (%s): every exchange "
             "would be lost. Give --db a file record may write (check "
             "the permissions of the file and of its folder, and that "
             "its file system is not mounted read-only)",
             shown, rc == DB_READONLY ? "it is read-only" : db_errstr(rc));
    free(shown);
    return -EROFS;
}

static int open_store(struct record *r, struct diag *d)
{
    /* one thread at a time: the writer, or the loop for a lone exchange
     * (store_inline), ordered by the atomic storing_now */
    int rc = store_open_unshared(r->o.db_path, &r->db, d);
    if (rc)
        return rc;
    /* A locked store must not stall the proxy: fail fast and spill. */
    db_busy_timeout(r->db, 200);
    rc = xchg_schema(r->db, d);
    if (rc) {
        char *shown = store_shown(r->o.db_path);
        diag_prefix(d, "'%s'", shown);
        free(shown);
        return rc;
    }
    return check_writable(r, d);
}

/* ---- the intake log ---- */

/* Opens r's intake log and commits what it holds. Without a log (another
 * record holds it, or it cannot be opened) exchanges are held until they
 * are committed, as before the log: a log line says so. -1 with d set when
 * what the log holds cannot be committed. */
static int open_intake(struct record *r, struct diag *d)
{
    struct diag od = {{0}};
    int rc = intake_schema(r->db, d);
    if (rc)
        return rc;
    rc = r->o.intake_path ? intake_open_at(r->o.intake_path, &r->intake, &od)
                          : intake_open(r->o.db_path, &r->intake, &od);
    if (rc) {
        record_logf(r, "%s; exchanges are held until they are committed",
                    rc == 1
                        ? "the intake log is locked by another fidelity record"
                        : od.msg);
        return 0;
    }
    /* what a record that did not stop left in it (store/replay.h) */
    struct replay_counts k;
    rc = replay_log(r->db, r->cache, r->ing, r->intake, r->o.spill_path, &k, d);
    if (k.stored || k.spilled || k.kept || k.torn)
        record_logf(
            r,
            "intake log '%s': %llu exchange%s a record that did not stop "
            "left %s committed (%llu to the spill file, %llu kept in the "
            "log); %llu bytes of an unfinished append ignored",
            r->intake->path, (unsigned long long)k.stored, plural_s(k.stored),
            plural(k.stored, "was", "were"), (unsigned long long)k.spilled,
            (unsigned long long)k.kept, (unsigned long long)k.torn);
    if (intake_damaged(&k.dmg)) {
        char say[1024];
        intake_damage_say(&k.dmg, r->intake->path, say, sizeof(say));
        record_logf(r, "%s", say);
    }
    if (rc) {
        intake_close(r->intake, false);
        r->intake = NULL;
        return -1;
    }
    xchg_cache_pre_commit(r->cache, on_intake_commit, r);
    r->idle_ok = can_leave_idle();
    return 0;
}

/* ---- the writer's life ---- */

int writer_open(struct record *r, struct diag *d)
{
    int rc = open_store(r, d);
    return rc ? rc : open_intake(r, d);
}

int writer_start(struct record *r, struct diag *d)
{
    if (pipe(r->wake))
        return diag_set(d, errno, "cannot create a pipe: %s", strerror(errno));
    evutil_make_socket_nonblocking(r->wake[0]);
    evutil_make_socket_nonblocking(r->wake[1]);
    r->done_ev =
        event_new(r->base, r->wake[0], EV_READ | EV_PERSIST, on_stored, r);
    event_add(r->done_ev, NULL);
    checkpointer_start(r); /* before the writer uses the connection */
    if (pthread_create(&r->writer, NULL, writer_main, r))
        return diag_set(d, EAGAIN, "cannot start the store writer thread");
    r->writer_started = true;
    /* named, so that CPU time per thread can be told apart
     * (/proc/PID/task/TID/comm; bench/record.sh) */
    pthread_setname_np(r->writer, "record-writer");
    return 0;
}

void writer_free(struct record *r)
{
    writer_stop(r); /* stores what is queued, completes it */
    checkpointer_stop(r);
    /* all it held is committed or in the spill file, unless exchanges
     * were left in it for the next start */
    struct record_stats st;
    writer_stats(r, &st);
    intake_close(r->intake, st.in_log == 0 && st.lost == 0);
    r->intake = NULL;
    if (r->done_ev)
        event_free(r->done_ev);
    r->done_ev = NULL;
    if (r->wake[0] >= 0) {
        close(r->wake[0]);
        close(r->wake[1]);
    }
    r->wake[0] = r->wake[1] = -1;
}
