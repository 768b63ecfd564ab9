/*
 * tpool: the thread pool of tpool.h. Each thread takes the next item
 * index under the pool's mutex until the items run out or the stop flag
 * is seen; starting fewer threads than asked (pthread_create failing)
 * leaves the items to those that started, or to the caller's thread.
 */
#include "core/tpool.h"

void tpool_lock(struct tpool *p)
{
    pthread_mutex_lock(&p->mu);
}

void tpool_unlock(struct tpool *p)
{
    pthread_mutex_unlock(&p->mu);
}

static void *worker(void *arg)
{
    struct tpool *p = arg;
    void *ts = p->thread_new ? p->thread_new(p) : NULL;
    for (;;) {
        tpool_lock(p);
        if (p->stop && *p->stop) {
            p->stopped = true;
            p->left = p->next < p->n;
            tpool_unlock(p);
            break;
        }
        size_t i = p->next++;
        tpool_unlock(p);
        if (i >= p->n)
            break;
        p->item(p, ts, i);
        if (p->done) {
            tpool_lock(p);
            p->done(p, i);
            tpool_unlock(p);
        }
    }
    if (p->thread_free)
        p->thread_free(p, ts);
    return NULL;
}

void tpool_run(struct tpool *p)
{
    unsigned j = p->jobs ? p->jobs : 4;
    pthread_t th[TPOOL_MAX_THREADS];
    if (j > TPOOL_MAX_THREADS)
        j = TPOOL_MAX_THREADS;
    if (j > p->n && p->n)
        j = (unsigned)p->n;
    pthread_mutex_init(&p->mu, NULL);
    p->next = 0;
    p->stopped = p->left = false;
    unsigned started = 0;
    for (; started < j; started++)
        if (pthread_create(&th[started], NULL, worker, p))
            break;
    if (!started)
        worker(p);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p->mu);
}

struct pair_b {
    void (*fn)(void *);
    void *ud;
};

static void *pair_main(void *arg)
{
    struct pair_b *b = arg;
    b->fn(b->ud);
    return NULL;
}

void tpool_pair(void (*a)(void *), void *ua, void (*b)(void *), void *ub)
{
    struct pair_b pb = {b, ub};
    pthread_t th;
    bool apart = !pthread_create(&th, NULL, pair_main, &pb);
    a(ua);
    if (apart)
        pthread_join(th, NULL);
    else
        b(ub);
}
