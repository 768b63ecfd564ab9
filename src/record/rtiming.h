/*
 * rtiming: where the time between an exchange's end and its client's last
 * byte goes (waiting for the store, building the row, the SQLite insert
 * and commit, the hand-back to the loop), for finding record's latency
 * tail. Off unless FIDELITY_RECORD_TIMING is set in the environment; then
 * proxy.c adds one sample per exchange and phase, and reports percentiles
 * through its log callback when it stops. Process-wide (one record per
 * process); each metric is written by one thread at a time.
 */
#ifndef RECORD_RTIMING_H
#define RECORD_RTIMING_H

#include <stdbool.h>

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

/* Whether FIDELITY_RECORD_TIMING is set (read once). */
bool rtiming_on(void);
void rtiming_add(enum rt_metric m, double v);
/* One line per metric (count, p50, p90, p99, p99.9, max) to log, then the
 * samples are dropped. */
void rtiming_report(void (*log)(void *ud, const char *msg), void *ud);

#endif
