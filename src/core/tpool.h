/*
 * tpool: a fixed pool of threads that hand out the items 0..n-1 one at a
 * time under one mutex, with per-thread state, a stop flag checked before
 * each item and a callback run under the mutex after each one (counts,
 * progress). The caller's thread runs the items itself when no thread can
 * be started. No I/O of its own; what an item does is the caller's.
 */
#ifndef CORE_TPOOL_H
#define CORE_TPOOL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#define TPOOL_MAX_THREADS 256

struct tpool {
    size_t n;      /* items */
    unsigned jobs; /* threads; 0: 4; at most TPOOL_MAX_THREADS and n */
    volatile sig_atomic_t *stop; /* non-zero: hand out no more; may be NULL */
    /* Per thread: its state (may be NULL), made before its first item and
     * freed after its last. Both may be NULL. */
    void *(*thread_new)(struct tpool *p);
    void (*thread_free)(struct tpool *p, void *ts);
    /* Runs item i without the mutex (take it with tpool_lock to touch
     * shared counters). */
    void (*item)(struct tpool *p, void *ts, size_t i);
    /* After item i, under the mutex; may be NULL. */
    void (*done)(struct tpool *p, size_t i);
    void *ud;
    /* Out: the stop flag ended the handing out; left: with items that
     * were never handed out. */
    bool stopped, left;
    /* Private. */
    pthread_mutex_t mu;
    size_t next;
};

/* Runs every item (or until *stop) and returns when all threads ended. */
void tpool_run(struct tpool *p);
void tpool_lock(struct tpool *p);

/* Runs b(ub) on a thread of its own while the calling thread runs a(ua),
 * and returns when both have returned (two waits at once, such as one
 * request to each of two servers). When no thread can be started, b runs
 * after a on the calling thread. */
void tpool_pair(void (*a)(void *), void *ua, void (*b)(void *), void *ub);
void tpool_unlock(struct tpool *p);

#endif
