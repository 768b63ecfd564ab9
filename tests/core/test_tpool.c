/*
 * Tests for core/tpool: every item runs once on some thread, with its
 * thread's state; the done callback sees each item under the mutex; a
 * stop flag set before the run hands out nothing and says items were
 * left; a pool of more threads than items still runs each item once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/tpool.h"

struct counts {
    int ran[100];
    int done[100];
    int threads_made, threads_freed;
    size_t total_done;
};

static void *thread_new(struct tpool *p)
{
    struct counts *c = p->ud;
    tpool_lock(p);
    c->threads_made++;
    tpool_unlock(p);
    return c;
}

static void thread_free(struct tpool *p, void *ts)
{
    struct counts *c = ts;
    tpool_lock(p);
    c->threads_freed++;
    tpool_unlock(p);
}

static void item(struct tpool *p, void *ts, size_t i)
{
    struct counts *c = ts;
    assert_ptr_equal(ts, p->ud);
    tpool_lock(p);
    c->ran[i]++;
    tpool_unlock(p);
}

static void done(struct tpool *p, size_t i)
{
    struct counts *c = p->ud;
    c->done[i]++;
    c->total_done++;
}

static struct tpool pool(struct counts *c, size_t n, unsigned jobs,
                         volatile sig_atomic_t *stop)
{
    return (struct tpool){.n = n,
                          .jobs = jobs,
                          .stop = stop,
                          .thread_new = thread_new,
                          .thread_free = thread_free,
                          .item = item,
                          .done = done,
                          .ud = c};
}

static void test_each_item_once(void **state)
{
    (void)state;
    struct counts c = {0};
    struct tpool p = pool(&c, 100, 8, NULL);
    tpool_run(&p);
    for (size_t i = 0; i < 100; i++) {
        assert_int_equal(c.ran[i], 1);
        assert_int_equal(c.done[i], 1);
    }
    assert_int_equal(c.total_done, 100);
    assert_int_equal(c.threads_made, 8);
    assert_int_equal(c.threads_freed, 8);
    assert_false(p.stopped);
    assert_false(p.left);
}

static void test_more_threads_than_items(void **state)
{
    (void)state;
    struct counts c = {0};
    struct tpool p = pool(&c, 3, 0 /* 4 */, NULL);
    tpool_run(&p);
    assert_int_equal(c.threads_made, 3);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(c.ran[i], 1);
}

static void test_stop_hands_out_nothing(void **state)
{
    (void)state;
    struct counts c = {0};
    volatile sig_atomic_t stop = 1;
    struct tpool p = pool(&c, 10, 2, &stop);
    tpool_run(&p);
    assert_int_equal(c.total_done, 0);
    assert_true(p.stopped);
    assert_true(p.left);
    assert_int_equal(c.threads_freed, c.threads_made);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_item_once),
        cmocka_unit_test(test_more_threads_than_items),
        cmocka_unit_test(test_stop_hands_out_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
