/*
 * clock: the monotonic clock in seconds, for deadlines, intervals and the
 * elapsed time a command prints, and a short sleep for the polling loops
 * that wait on child processes and batch jobs. Wall-clock time (what a
 * stored row is stamped with) stays time(NULL) at its callers.
 */
#ifndef CORE_CLOCK_H
#define CORE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: only differences mean anything. */
double clock_now_s(void);
/* Sleeps about ms milliseconds (ms >= 0); a signal may end it early. */
void clock_nap_ms(long ms);

#endif
