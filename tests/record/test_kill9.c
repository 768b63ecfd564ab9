/*
 * Nothing is lost: four client threads send up to 1,000 small chat
 * exchanges through `fidelity record`; record is killed with SIGKILL
 * midway. The store must then open cleanly (integrity check) and hold
 * every exchange a client saw complete, because record commits an
 * exchange before the last byte of its response leaves.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "record/record.h"
#include "store/replay.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/rec.h"
#include "util/upstream.h"

#define TOTAL 1000
#define THREADS 4
#define KILL_AT 400

struct load {
    char url[128];
    atomic_int next;      /* next request number to send */
    atomic_int completed; /* responses received in full */
    atomic_bool dead;     /* record was killed */
    unsigned char done[TOTAL];
};

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    buf_add(ud, p, sz * n);
    return sz * n;
}

static void *client(void *arg)
{
    struct load *l = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *h =
        curl_slist_append(NULL, "Content-Type: application/json");
    struct buf body = BUF_INIT;
    curl_easy_setopt(c, CURLOPT_URL, l->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    for (;;) {
        int i = atomic_fetch_add(&l->next, 1);
        if (i >= TOTAL)
            break;
        char req[160];
        snprintf(req, sizeof(req),
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"load request %d\"}]}",
                 i);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req);
        buf_reset(&body);
        long status = 0;
        CURLcode rc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (rc == CURLE_OK && status == 200 && body.len > 0) {
            l->done[i] = 1;
            atomic_fetch_add(&l->completed, 1);
        } else if (atomic_load(&l->dead)) {
            break;
        }
    }
    buf_release(&body);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

struct seen {
    unsigned char got[TOTAL];
    int n;
};

static int seen_fn(const struct xchg *x, void *ud)
{
    struct seen *s = ud;
    json_t *m = json_array_get(json_object_get(x->req_body, "messages"), 0);
    const char *t = json_string_value(json_object_get(m, "content"));
    int i;
    assert_non_null(t);
    assert_int_equal(sscanf(t, "load request %d", &i), 1);
    assert_true(i >= 0 && i < TOTAL);
    s->got[i] = 1;
    s->n++;
    return 0;
}

static void test_kill9_under_load_loses_nothing(void **state)
{
    (void)state;
    struct upstream *up = upstream_start();
    char *dir = rec_tmpdir();
    char *db = xasprintf("%s/k.db", dir);
    struct proc rec;
    struct load *l = xcalloc(1, sizeof(*l));
    pthread_t t[THREADS];

    assert_non_null(up);
    assert_int_equal(rec_start_record(&rec, upstream_url(up), db, NULL), 0);
    snprintf(l->url, sizeof(l->url), "http://127.0.0.1:%d/json", rec.port);
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, client, l);
    for (int i = 0; i < 3000 && atomic_load(&l->completed) < KILL_AT; i++)
        usleep(5000);
    assert_true(atomic_load(&l->completed) >= KILL_AT);
    atomic_store(&l->dead, true);
    kill(rec.pid, SIGKILL);
    int status;
    waitpid(rec.pid, &status, 0);
    rec.pid = 0;
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int completed = atomic_load(&l->completed);
    printf("kill -9 after %d of %d exchanges completed\n", completed, TOTAL);
    assert_true(completed < TOTAL); /* the kill landed mid-load */

    struct db *s = NULL;
    struct diag d = {{0}};
    assert_int_equal(store_open(db, &s, &d), 0);
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(s, "PRAGMA integrity_check", &st), DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    assert_string_equal((const char *)db_column_text(st, 0), "ok");
    db_finalize(st);
    store_close(s);
    /* what the writer had not committed is in the intake log: every
     * command that reads the store commits it first (store_replay) */
    uint64_t replayed = 0;
    assert_int_equal(store_replay(db, NULL, &replayed, NULL, &d), 0);
    printf("%llu exchanges committed from the intake log\n",
           (unsigned long long)replayed);
    assert_int_equal(store_open(db, &s, &d), 0);
    struct seen *seen = xcalloc(1, sizeof(*seen));
    assert_int_equal(xchg_each(s, NULL, seen_fn, seen, &d), 0);
    store_close(s);
    int missing = 0;
    for (int i = 0; i < TOTAL; i++)
        missing += l->done[i] && !seen->got[i];
    printf("store holds %d exchanges; %d seen complete by clients are "
           "missing\n",
           seen->n, missing);
    assert_int_equal(missing, 0);
    assert_true(seen->n >= completed);
    free(seen);
    free(l);
    upstream_stop(up);
    free(db);
    rec_rmdir(dir);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_under_load_loses_nothing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
