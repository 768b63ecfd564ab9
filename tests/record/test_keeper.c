/*
 * record keeps the listing of `fidelity sessions` up to date (the keeper
 * in cmd_record.c): a second after its last commit it has run `sessions`
 * once and the rows beside the store (DB-sessions) name every exchange it
 * stored; a listing reads them, also after record has closed the store
 * (its checkpoint adds no exchange); and a listing taken before the keeper
 * has caught up is computed from the store, never the stale rows.
 */
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

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/proc.h"
#include "util/rec.h"

static void chat(const char *url, const char *session)
{
    char sid[96];
    snprintf(sid, sizeof(sid), "X-Session-Id: %s", session);
    const char *h[] = {"Content-Type: application/json", sid,
                       "User-Agent: keeper-test/1.0", NULL};
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                       "\"content\":\"The code is 4812. Please note it.\"}]}";
    char *u = xasprintf("%s/v1/chat/completions", url);
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(u, body, strlen(body), h, 0, &r), 0);
    assert_int_equal(r.status, 200);
    rec_resp_release(&r);
    free(u);
}

/* The kept file's header names n exchanges ("\txchg N "), within 15 s. */
static bool kept_for(const char *kept, int n)
{
    char want[64];
    snprintf(want, sizeof(want), "\txchg %d ", n);
    for (int i = 0; i < 300; i++) {
        struct buf b = BUF_INIT;
        bool ok = rec_read_file(kept, &b) == 0 && b.len &&
                  rec_contains(b.data, b.len, want);
        buf_release(&b);
        if (ok)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

static void listing(const char *db, struct buf *out)
{
    const char *argv[] = {"sessions", "--db", db, "--json", "-", NULL};
    buf_reset(out);
    assert_int_equal(proc_run(argv, NULL, out, NULL, 60), 0);
}

static void test_record_keeps_the_listing(void **state)
{
    (void)state;
    char *dir = rec_tmpdir();
    char *db = xasprintf("%s/k.db", dir);
    char *kept = xasprintf("%s-sessions", db);
    struct proc sim, rec;
    struct buf a = BUF_INIT, b = BUF_INIT, f = BUF_INIT;
    const char *sa[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&sim, sa), 0);
    char *up = xstrdup(proc_url(&sim));
    assert_int_equal(rec_start_record(&rec, up, db, NULL), 0);
    char *url = xstrdup(proc_url(&rec));
    chat(url, "ses_one");
    chat(url, "ses_two");
    chat(url, "ses_three");
    /* the keeper's rows, for all three */
    assert_true(kept_for(kept, 3));
    listing(db, &a);
    assert_non_null(strstr(a.data, "\"ses_three\""));
    /* the same rows as a listing computed from the store */
    unlink(kept);
    listing(db, &b);
    assert_string_equal(a.data, b.data);

    /* one more: a listing before the keeper's next run is computed, and
     * names it (the kept rows are for 3 exchanges, the store has 4) */
    assert_int_equal(rec_read_file(kept, &f), 0);
    chat(url, "ses_four");
    listing(db, &a);
    assert_non_null(strstr(a.data, "\"ses_four\""));
    assert_true(kept_for(kept, 4));

    /* record stops (and checkpoints): the rows stay valid, and a listing
     * reads them: rows edited under the same header are what it shows */
    assert_int_equal(proc_stop(&rec), 0);
    buf_reset(&f);
    assert_int_equal(rec_read_file(kept, &f), 0);
    char *nl = memchr(f.data, '\n', f.len);
    assert_non_null(nl);
    FILE *w = fopen(kept, "wb");
    assert_non_null(w);
    fwrite(f.data, 1, (size_t)(nl - f.data) + 1, w);
    fputs("[{\"session\":\"ses_from_the_kept_rows\",\"harness\":\"h\","
          "\"models\":[],\"turns\":0,\"requests\":{},\"prompt_tokens\":0,"
          "\"completion_tokens\":0,\"findings\":null}]",
          w);
    assert_int_equal(fclose(w), 0);
    listing(db, &a);
    assert_non_null(strstr(a.data, "ses_from_the_kept_rows"));

    proc_stop(&sim);
    buf_release(&a);
    buf_release(&b);
    buf_release(&f);
    free(url);
    free(up);
    free(kept);
    free(db);
    rec_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_keeps_the_listing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
