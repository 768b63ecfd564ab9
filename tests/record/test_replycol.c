/*
 * End-to-end test of the reply column as `fidelity record` writes it for a
 * plain JSON response and a plain SSE stream (store/xchg.h, reply_of_raw):
 * the real binary in front of `fidelity sim` on ephemeral 127.0.0.1 ports.
 * The row keeps the body and an empty reply column (a stream's: its max gap,
 * a number); the store's reader gives the reply that reply_from_body, or
 * reply_from_stream with that gap, gives for the bytes the client received,
 * tool calls included; and the recorder still learns a task prompt from a
 * tool call (the next request carrying it is a subagent's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/proc.h"
#include "util/rec.h"
#include "wire/reply.h"

struct got {
    size_t n;
    json_t *reply[4];
    char *kind[4];
    int64_t id[4];
};

static int got_fn(const struct xchg *x, void *ud)
{
    struct got *g = ud;
    assert_true(g->n < 4);
    g->id[g->n] = x->id;
    g->kind[g->n] = xstrdup(x->kind);
    g->reply[g->n++] = json_incref(x->reply);
    return 0;
}

/* bodies[i] with "stream":true when stream */
static char *with_stream(const char *body, bool stream)
{
    return stream ? xasprintf("{\"stream\":true,%s", body + 1) : xstrdup(body);
}

static void check_derived_and_learnt(bool stream)
{
    struct proc sim, rec;
    char *dir = rec_tmpdir();
    char db[300], url[64];
    const char *const sav[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    assert_int_equal(proc_start(&sim, sav), 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sim.port);
    snprintf(db, sizeof(db), "%s/r.db", dir);
    assert_int_equal(rec_start_record(&rec, url, db, NULL), 0);
    char *u = xasprintf("http://127.0.0.1:%d/v1/chat/completions", rec.port);
    const char *const h[] = {"Content-Type: application/json", NULL};
    static const char *const bodies[] = {
        /* a tool call to the task tool (SIM.md, Tools) */
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{"
        "\"name\":\"task\"}}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"Call the task tool with {\\\"prompt\\\":\\\"List the config "
        "files under src/\\\"}.\"}]}",
        /* the subagent the task started */
        "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{"
        "\"name\":\"read\"}}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"List the config files under src/\"}]}",
        /* an ordinary answer */
        "{\"model\":\"m\",\"temperature\":0,\"messages\":[{\"role\":\"user\","
        "\"content\":\"Let X = 5. What is the value of X?\"}]}",
    };
    struct rec_resp r[3];
    for (int i = 0; i < 3; i++) {
        char *b = with_stream(bodies[i], stream);
        rec_resp_init(&r[i]);
        assert_int_equal(rec_fetch(u, b, strlen(b), h, 0, &r[i]), 0);
        assert_int_equal(r[i].status, 200);
        free(b);
    }
    assert_int_equal(proc_stop(&rec), 0);
    proc_stop(&sim);

    struct db *s = NULL;
    struct diag d = {{0}};
    struct got g = {0};
    assert_int_equal(store_open(db, &s, &d), 0);
    assert_int_equal(xchg_each(s, NULL, got_fn, &g, &d), 0);
    assert_int_equal(g.n, 3);
    for (size_t i = 0; i < 3; i++) {
        /* the column is empty (a stream's holds its max gap): the reply
         * comes from the body */
        struct db_stmt *st = NULL;
        assert_int_equal(db_prepare(s,
                                    "SELECT typeof(reply),"
                                    " length(reply), reply,"
                                    " streamed FROM xchg"
                                    " WHERE id=?",
                                    &st),
                         DB_OK);
        db_bind_int64(st, 1, g.id[i]);
        assert_int_equal(db_step(st), DB_ROW);
        assert_string_equal((const char *)db_column_text(st, 0), "text");
        assert_int_equal(db_column_int(st, 3), stream);
        json_t *want;
        if (stream) {
            const char *gap = (const char *)db_column_text(st, 2);
            char *end;
            double ms = strtod(gap, &end);
            assert_true(gap[0] >= '0' && gap[0] <= '9' && !*end && ms >= 0);
            want = reply_from_stream(r[i].body.data, r[i].body.len, ms);
            assert_true(json_is_true(json_object_get(want, "done")));
            assert_true(json_real_value(
                            json_object_get(g.reply[i], "max_gap_ms")) == ms);
        } else {
            assert_int_equal(db_column_int(st, 1), 0);
            want = reply_from_body(r[i].body.data, r[i].body.len);
        }
        db_finalize(st);
        assert_non_null(want);
        assert_true(json_equal(g.reply[i], want));
        json_decref(want);
    }
    json_t *call = json_array_get(json_object_get(g.reply[0], "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(call, "function"), "name")),
                        "task");
    assert_string_equal(g.kind[1], "subagent");
    assert_string_equal(g.kind[2], "main");
    assert_non_null(
        strstr(json_string_value(json_object_get(g.reply[2], "content")), "5"));
    for (size_t i = 0; i < g.n; i++) {
        json_decref(g.reply[i]);
        free(g.kind[i]);
        rec_resp_release(&r[i]);
    }
    store_close(s);
    free(u);
    rec_rmdir(dir);
}

static void test_json_reply_derived_and_learnt(void **state)
{
    (void)state;
    check_derived_and_learnt(false);
}

static void test_stream_reply_derived_and_learnt(void **state)
{
    (void)state;
    check_derived_and_learnt(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_reply_derived_and_learnt),
        cmocka_unit_test(test_stream_reply_derived_and_learnt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
