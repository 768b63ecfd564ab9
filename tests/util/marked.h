/*
 * marked: finding the processes a test started through a launcher it does
 * not hold the pids of (bisect's servers, their watchdogs, Slurm job
 * steps), by a marker the test put into their environment ("NAME=VALUE",
 * unique to the test). "No process left behind" is checked with these.
 */
#ifndef TESTS_UTIL_MARKED_H
#define TESTS_UTIL_MARKED_H

/* Seconds on the monotonic clock. */
double marked_now(void);
/* How many processes have the environment entry mark (read from
 * /proc/PID/environ; processes that cannot be read are not counted). */
int marked_count(const char *mark);
/* The pids of the processes with mark, at most max, in ascending order
 * (the earliest started first, pids not having wrapped); their count. */
int marked_pids(const char *mark, int *out, int max);
/* The parent of pid (from /proc/PID/stat), or -1. */
int marked_parent(int pid);
/* Waits up to s seconds for no process with mark; the count left. */
int marked_after(const char *mark, double s);

#endif
