/*
 * record_int: what only record's own files share. struct record (one
 * `fidelity record`: its event loop, upstream side, store connection,
 * writer thread and intake log) and struct ex (one exchange, from the
 * request callback until it is stored and its client has the last byte),
 * and the calls between the forwarding loop (proxy.c) and the batch
 * writer with its hand-off, spill and checkpointer (writer.c).
 */
#ifndef RECORD_RECORD_INT_H
#define RECORD_RECORD_INT_H

#include <curl/curl.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "core/buf.h"
#include "core/diag.h"
#include "record/front.h"
#include "record/record.h"
#include "record/rtiming.h"
#include "record/upclient.h"
#include "store/hdrs.h"
#include "store/ingest.h"
#include "store/intake.h"
#include "store/xchg.h"

#define EASY_POOL 64
#define MEMO_SLOTS 64

struct name_memo {
    char name[40];
    uint8_t len; /* name length + 1; 0: empty slot */
    bool secret;
};

struct ex;

struct record {
    struct record_opts o;
    char *upstream;       /* without a trailing slash */
    char *upstream_shown; /* the same, its credentials masked (url_mask) */
    struct event_base *base;
    struct front *front; /* the client side */
    int port;
    CURLM *multi;
    struct event *timer;
    struct event *sig[2];
    struct db *db;
    struct xchg_cache *cache;
    /* builds each row from its exchange (store/ingest.h: classifies,
     * reassembles the reply); store_batch's, which runs on one thread at
     * a time */
    struct ingest *ing;
    struct ex *active;  /* in flight, doubly linked */
    struct ex *storing; /* finished, with the writer thread */
    struct ex *spare;   /* completed, for reuse (ex_get), linked by next */
    size_t nspare;
    size_t nactive, nstoring;
    /* The writer thread: parses requests, classifies and commits finished
     * exchanges in batches (one transaction each); the loop completes the
     * client side of each once it is stored. */
    pthread_t writer;
    bool writer_started;
    /* Hand-offs without a lock: a writer at SCHED_IDLE preempted inside
     * one would hold the loop up until it ran again. q_in: to store,
     * pushed by the loop (a stack, newest first; the writer takes it whole
     * and reverses it); q_n: pushed and not yet in a batch; d_in: stored,
     * pushed back by the writer (likewise). The writer sleeps on the
     * futex w_sleep until q_n reaches w_want (writer_wait). */
    _Atomic(struct ex *) q_in;
    atomic_size_t q_n;
    _Atomic(struct ex *) d_in;
    atomic_uint w_sleep;
    atomic_size_t w_want;
    atomic_bool quit;
    atomic_bool storing_now; /* store_batch is running, on either thread */
    struct event *done_ev;
    int wake[2]; /* writer -> loop: a byte per handed-back batch; a pipe
                  * rather than event_active keeps libevent lock-free */
    int stopping;
    struct record_stats stats;
    CURL *pool[EASY_POOL];
    int npool;
    /* http:// upstreams: our own client (NULL: libcurl forwards) */
    struct upclient *upc;
    char *up_authority; /* host[:port] as in the URL, for Host */
    char *up_prefix;    /* path prefix of the URL, without trailing '/' */
    size_t up_prefix_len;
    /* " HTTP/1.1\r\nHost: <up_authority>\r\n", after the target */
    char *up_host_line;
    size_t up_host_len;
    struct buf wire; /* the request being built (upclient_send swaps it) */
    struct name_memo memo[MEMO_SLOTS]; /* is_secret_memo() */
    /* the checkpointer thread and its own connection (checkpointer_*) */
    struct db *ck_db;
    pthread_t ck_thread;
    bool ck_started, ck_due, ck_quit;
    pthread_mutex_t ck_mu;
    pthread_cond_t ck_cv;
    /* The intake log (intake.h; NULL: every exchange is held until it is
     * committed): exchanges appended to it are answered at once and
     * committed by the writer later. in_pending, in_bytes: how many of
     * those are not handed back yet, and their request and response bytes
     * (the loop's counts). mark_*: the frontier
     * the writer's batch moves (store_batch, on_intake_commit). */
    struct intake *intake;
    size_t in_pending, in_bytes;
    uint64_t mark_epoch, mark_off;
    bool mark_due; /* the batch being stored moves the frontier */
    /* the batch being stored and its results, for on_intake_commit, which
     * refuses to move the frontier past one of the log's exchanges that
     * failed (batch_refused): the batch is then stored one by one */
    struct ex **batch_ex;
    const int *batch_rcs;
    size_t batch_n;
    bool batch_refused;
    atomic_bool in_failed; /* an append failed: the log is not used */
    /* An exchange of the log could be neither stored nor spilled: the
     * frontier stays before it, and the writer leaves the later ones of
     * the log there too (outcome 3), for the next start to commit; the
     * log is neither emptied nor removed. Set by the writer. */
    atomic_bool log_stuck;
    bool idle_ok; /* the writer may leave SCHED_IDLE again (writer_main) */
    /* The store is away: a batch failed because its server could not be
     * reached (db_is_lost), with the intake log in use. Until it answers
     * again, exchanges of the log are handed back at once (outcome 4) and
     * wait in the log, others are spilled; the writer connects again at
     * retry_at (retry_ms after the last try, doubling) and then commits the
     * log from the store's frontier (catch_up). Set and cleared by the
     * writer; the loop reads it (no inline store, no emptying the log). */
    atomic_bool away;
    double away_since, retry_at; /* now_ms() */
    unsigned retry_ms;
    uint64_t away_n; /* exchanges committed or spilled by catch-ups */
    /* exchanges of the log of epoch caught_epoch that end at or before
     * caught_to were committed (or spilled) by a catch-up: the writer
     * hands them back without storing them again */
    uint64_t caught_epoch, caught_to;
    /* the batch whose failure sent the store away would have moved the
     * frontier to lost_off, with lost_n exchanges of the log: when the
     * store's frontier is there once it is back, its commit went through
     * (only its answer was lost) */
    bool lost_due;
    uint64_t lost_off, lost_n;
    /* exchanges handed back as waiting (outcome 4; the loop's count) and,
     * of them, those catch-ups committed or spilled, or that were
     * committed before the store went away (the writer's counts) */
    uint64_t waited;
    _Atomic uint64_t caught_stored, caught_spilled;
    /* stats.stored as other threads may read it (record_stored) */
    _Atomic uint64_t loop_stored;
    /* CPU time spent storing (store_batch, on either thread), in ns: the
     * storing load that decides where a lone exchange is stored; and the
     * loop's window over it (storing_light: since win_start, store_ns was
     * win_stored then; win_heavy: the last window's verdict) */
    _Atomic uint64_t store_ns;
    uint64_t win_start, win_stored;
    bool win_heavy;
    /* where the time goes (rtiming.h; NULL: o.timing is off) */
    struct rtiming *timing;
};

/* Where the events of a stream end (the HTML standard's event stream
 * grammar: a blank line ends an event, which counts when it had a data
 * field), for the gaps between them; the writer parses the stream. */
struct gap_scan {
    size_t len;   /* bytes of the current line so far */
    char head[5]; /* its first bytes */
    bool after_cr, has_data;
};

struct ex {
    struct record *r;
    struct ex *prev, *next;
    struct ex *wnext; /* writer queues */
    bool ct_json;     /* request Content-Type mentions json */
    const char *ct;   /* its Content-Type, during intake */
    /* 0 stored, 1 spilled, 2 lost, 3 left in the intake log for the next
     * start (neither stored nor spilled, past the frontier), 4 waits in
     * the intake log while the store is away (record.away) */
    int outcome;
    struct front_conn *fc;   /* the client's connection; NULL once gone */
    bool head_req, finished; /* a HEAD request; finish_as() ran */
    CURL *easy;
    struct upclient_req *upq; /* the upclient request, while in flight */
    int up_err;               /* how upclient ended it (upclient.h) */
    struct curl_slist *hdrs;
    char *url;
    struct buf body;
    /* a compressed request body decoded (coding: its Content-Encoding,
     * static, NULL when not decoded): stored, redacted, in body's place
     * once the upstream has the bytes as sent */
    struct buf plain;
    const char *coding;
    struct xchg x;
    struct buf resp;
    bool resp_capped;
    struct gap_scan gs; /* event boundaries, for the gaps */
    double last_event_ms, max_gap_ms;
    bool headers_done, reply_started, client_gone;
    int status;
    char *reason; /* reason_in, or allocated when longer */
    char reason_in[32];
    struct hdrs resp_hl;    /* moved to x by fill_response */
    int64_t content_length; /* -1: none */
    int64_t forwarded;
    struct buf held; /* the end of a sized body, sent once stored */
    struct buf rh;   /* response header lines for the client */
    double t0, up_first, down_first;
    char curl_err[CURL_ERROR_SIZE];
    /* appended to the intake log (in_end: the offset after its record,
     * 0 when not) and already answered */
    uint64_t in_epoch, in_end;
    size_t in_size; /* its bytes in r->in_bytes */
    bool answered;
};

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* proxy.c, for the writer's side */

/* A line for r's log callback (none: nothing). */
void record_logf(struct record *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Loop side: a stored (or spilled) exchange is counted and its client
 * answered; now is now_ms() when timing, else 0. */
void proxy_stored_back(struct record *r, struct ex *e, double now);
/* Ends the loop once stopping and nothing is in flight or being stored. */
void proxy_maybe_exit(struct record *r);

/* writer.c, for the loop's side */

/* Opens r's store connection (r->db) and its intake log, committing what
 * a record that did not stop left in the log. */
int writer_open(struct record *r, struct diag *d);
/* Starts the checkpointer and the writer thread, and the loop's event for
 * the exchanges the writer hands back. */
int writer_start(struct record *r, struct diag *d);
/* Appends e to the intake log: true when it is there (then the client may
 * have its end now), false when it must be held until committed. */
bool writer_intake_put(struct record *r, struct ex *e);
/* Queues a finished exchange for the writer thread. */
void writer_enqueue(struct record *r, struct ex *e);
/* Stores a lone exchange on the loop's own thread when that is cheaper
 * than the hand-off (writer.c says when); false: it was not. */
bool writer_store_inline(struct record *r, struct ex *e);
/* r's counts, with the exchanges that waited in the intake log while the
 * store was away counted as what became of them (stored, spilled, or
 * still in the log). */
void writer_stats(const struct record *r, struct record_stats *s);
/* Stores what is queued and completes it, stops the writer and the
 * checkpointer, closes the intake log. */
void writer_free(struct record *r);

#endif
