/*
 * rtiming: where the time between an exchange's end and its client's last
 * byte goes (waiting for the store, building the row, the SQLite insert
 * and commit, the hand-back to the loop), for finding record's latency
 * tail. Off unless record_opts.timing is set (`fidelity record` sets it
 * when FIDELITY_RECORD_TIMING is in the environment); then proxy.c and
 * writer.c add one sample per exchange and phase to their record's
 * struct rtiming, and report percentiles through its log callback when it
 * stops. Each metric is written by one thread at a time.
 */
#ifndef RECORD_RTIMING_H
#define RECORD_RTIMING_H

enum rt_metric {
    RT_WAIT,   /* queued for storage -> its batch starts */
    RT_BUILD,  /* its batch's parsing and reply reassembly */
    RT_PUT,    /* its batch's SQLite insert and commit */
    RT_BACK,   /* batch stored -> the loop completes it */
    RT_HELD,   /* what the client's end waited for: the append to the
                * intake log, or (held until committed) queued for
                * storage -> the loop completes it */
    RT_TOTAL,  /* request in -> its client answered */
    RT_BATCH,  /* exchanges in its batch (a count, not ms) */
    RT_INLINE, /* 1 when stored on the loop's thread (a count) */
    RT_APPEND, /* the append to the intake log */
    RT_N
};

struct rtiming;

/* Empty histograms, one per metric (about 360 KiB). */
struct rtiming *rtiming_new(void);
void rtiming_free(struct rtiming *t);
void rtiming_add(struct rtiming *t, enum rt_metric m, double v);
/* One line per metric (count, p50, p90, p99, p99.9, max) to log, then the
 * samples are dropped. */
void rtiming_report(struct rtiming *t, void (*log)(void *ud, const char *msg),
                    void *ud);

#endif
