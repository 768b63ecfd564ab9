/*
 * Record's own HTTP/1.1 client (src/record/upclient.c) keeps the requests
 * that have a deadline (--timeout) in one queue, oldest first, with one
 * timer for the oldest, re-armed when it fires. This test has several
 * requests in flight at once against the scripted upstream's /hang (no
 * answer for 3 s, then the close) with --timeout 1: each must end as a
 * timeout (504, stored "timeout"), not as the upstream's close (502),
 * including those behind the first in the queue; a request that
 * completes meanwhile (/json) leaves the queue from its middle without
 * disturbing the others.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/rec.h"
#include "util/recfx.h"
#include "util/upstream.h"

static int fx_setup(void **state)
{
    const char *const extra[] = {"--timeout", "1", NULL};
    return (*state = recfx_start(extra, NULL)) ? 0 : -1;
}

static int fx_teardown(void **state)
{
    recfx_stop(*state);
    return 0;
}

struct call {
    pthread_t t;
    char *url;
    long delay_ms; /* before sending */
    int rc;
    long status;
};

static void *run_call(void *arg)
{
    struct call *c = arg;
    struct timespec d = {c->delay_ms / 1000, (c->delay_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
    struct rec_resp r;
    rec_resp_init(&r);
    c->rc = rec_fetch(c->url, "{}", 2, NULL, 0, &r);
    c->status = r.status;
    rec_resp_release(&r);
    return NULL;
}

static const char *jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Three /hang requests sent 200 ms apart, a /json between them: the three
 * time out (the second and third through the re-armed timer), the /json
 * completes. */
static void test_queued_deadlines_all_fire(void **state)
{
    struct recfx *f = *state;
    struct call calls[4] = {
        {.url = xasprintf("%s/hang", f->url), .delay_ms = 0},
        {.url = xasprintf("%s/json", f->url), .delay_ms = 100},
        {.url = xasprintf("%s/hang", f->url), .delay_ms = 200},
        {.url = xasprintf("%s/hang", f->url), .delay_ms = 400},
    };
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&calls[i].t, NULL, run_call, &calls[i]),
                         0);
    for (int i = 0; i < 4; i++) {
        pthread_join(calls[i].t, NULL);
        assert_int_equal(calls[i].rc, 0);
        free(calls[i].url);
    }
    assert_int_equal(calls[0].status, 504);
    assert_int_equal(calls[1].status, 200);
    assert_int_equal(calls[2].status, 504);
    assert_int_equal(calls[3].status, 504);
    assert_int_equal(proc_stop(&f->rec), 0);
    json_t *all = rec_load(f->db);
    assert_non_null(all);
    assert_int_equal(json_array_size(all), 4);
    int timeouts = 0, complete = 0;
    for (size_t i = 0; i < 4; i++) {
        const char *end = jstr(json_array_get(all, i), "end");
        timeouts += !strcmp(end, "timeout");
        complete += !strcmp(end, "complete");
    }
    assert_int_equal(timeouts, 3);
    assert_int_equal(complete, 1);
    json_decref(all);
}

/* The queue empties and fills again: a timeout, then a pause, then
 * another timeout on a request sent after the timer found nothing left. */
static void test_deadline_after_idle(void **state)
{
    struct recfx *f = *state;
    for (int round = 0; round < 2; round++) {
        struct call c = {.url = xasprintf("%s/hang", f->url)};
        run_call(&c);
        assert_int_equal(c.rc, 0);
        assert_int_equal(c.status, 504);
        free(c.url);
        struct call j = {.url = xasprintf("%s/json", f->url)};
        run_call(&j);
        assert_int_equal(j.status, 200);
        free(j.url);
    }
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_queued_deadlines_all_fire,
                                        fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_deadline_after_idle, fx_setup,
                                        fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
