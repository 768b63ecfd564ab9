/*
 * Tests for the reply column of store/xchg when the writer marks an
 * exchange reply_of_raw (a plain JSON response, stored raw): the column is
 * left empty and the reply is derived from the stored body when the row is
 * read. Every reader (xchg_each: audit, sessions, show, drift fromdb) must
 * see the reply it saw when the column held the reply's text: the object
 * reply_from_body gives and the text the recorder used to write
 * (reply_text_from_body, or jdump of the object for the bodies it does not
 * take), for ordinary, tool-call, reasoning, malformed, non-JSON and error
 * bodies. Rows of older databases (a NULL or a JSON reply column) read as
 * they did, and the spill file carries the derived reply.
 *
 * A plain SSE stream is stored the same way: its column holds only the max
 * gap the loop measured (a number, to the nanosecond) and its reply is
 * derived with reply_from_stream: equal to what the reference accumulator
 * (reply_chunk_jansson) gives and to the text the recorder used to write
 * (reply_finish_text), for the crafted streams of tests/util/sse_streams.c
 * and an opencode fixture stream.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/fixture.h"
#include "util/rec.h"
#include "util/sse_streams.h"
#include "util/tmpdb.h"
#include "wire/jdump.h"
#include "wire/reply.h"
#include "wire/sse.h"

/* Bodies of every kind the recorder meets, with the status they came with */
static const struct {
    int status;
    const char *body;
} BODIES[] = {
    /* ordinary chat completion with usage */
    {200, "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{"
          "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
          "\"X is 5.\"},\"finish_reason\":\"stop\"}],\"usage\":{"
          "\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16}}"},
    /* tool call */
    {200, "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":null,"
          "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
          "\"function\":{\"name\":\"task\",\"arguments\":\"{\\\"prompt\\\":"
          "\\\"look\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}"},
    /* reasoning, both field names, escapes and non-ASCII */
    {200, "{\"choices\":[{\"message\":{\"content\":\"a\\nb \\u00e9\","
          "\"reasoning_content\":\"think \\\"hard\\\"\"},"
          "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3}}"},
    {200, "{\"choices\":[{\"message\":{\"content\":\"\",\"reasoning\":\"r\"}"
          ",\"finish_reason\":\"stop\"}]}"},
    /* /v1/completions */
    {200, "{\"choices\":[{\"text\":\"once upon\",\"finish_reason\":null}]}"},
    /* malformed, not JSON, not an object, empty */
    {200, "{\"choices\":[{\"message\":{\"content\":\"cut"},
    {200, "<html>oops</html>"},
    {200, "[1,2]"},
    {200, ""},
    /* non-2xx error bodies */
    {400, "{\"error\":{\"message\":\"context length exceeded\",\"type\":"
          "\"invalid_request_error\",\"code\":400}}"},
    {500, "{\"object\":\"error\",\"message\":\"boom\",\"code\":500}"},
    /* whitespace, duplicate keys, a real and a big integer in usage */
    {200, " { \"choices\" : [ { \"message\" : { \"content\" : \"x\" } } ] ,"
          " \"usage\" : { \"a\" : 1.5e3 , \"b\" : 12345678901234 } ,"
          " \"usage\" : { \"c\" : -0.0 } } "},
};
#define NBODIES (sizeof(BODIES) / sizeof(BODIES[0]))

static void fill(struct xchg *x, int status, const char *body)
{
    xchg_init(x);
    x->session = xstrdup("s");
    x->kind = xstrdup("other");
    x->method = xstrdup("POST");
    x->path = xstrdup("/v1/chat/completions");
    x->status = status;
    x->resp_headers = json_pack("{s:s}", "Content-Type", "application/json");
    x->resp_raw_len = strlen(body);
    x->resp_raw = xmalloc(x->resp_raw_len + 1);
    memcpy(x->resp_raw, body, x->resp_raw_len + 1);
}

/* The reply as the column used to hold it, parsed back: the text the
 * recorder wrote (reply_text_from_body, else jdump of reply_from_body),
 * read with the store's own reading of a JSON column. NULL: no reply. */
static json_t *old_column_reply(const char *body)
{
    size_t len = strlen(body);
    struct buf t = BUF_INIT;
    json_t *r = NULL;
    if (!reply_text_from_body(body, len, &t)) {
        r = json_loadb(t.data, t.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(r);
    } else {
        json_t *o = reply_from_body(body, len);
        char *s = o ? jdump_str(o, false, NULL) : NULL;
        if (s)
            r = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        free(s);
        json_decref(o);
    }
    buf_release(&t);
    return r;
}

static bool same_reply(const json_t *a, const json_t *b)
{
    return (!a && !b) || (a && b && json_equal(a, b));
}

struct got {
    size_t n;
    json_t *reply[32];
    int64_t id[32];
};

static int got_fn(const struct xchg *x, void *ud)
{
    struct got *g = ud;
    assert_true(g->n < 32);
    g->id[g->n] = x->id;
    g->reply[g->n++] = json_incref(x->reply);
    return 0;
}

static void got_release(struct got *g)
{
    for (size_t i = 0; i < g->n; i++)
        json_decref(g->reply[i]);
}

/* typeof(reply) and length(reply) of row id */
static void reply_column(struct db *db, int64_t id, char *type, size_t cap,
                         int64_t *len)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db,
                                "SELECT typeof(reply), length(reply) FROM xchg"
                                " WHERE id=?",
                                &st),
                     DB_OK);
    db_bind_int64(st, 1, id);
    assert_int_equal(db_step(st), DB_ROW);
    snprintf(type, cap, "%s", (const char *)db_column_text(st, 0));
    *len = db_column_int64(st, 1);
    db_finalize(st);
}

/* Rows stored reply_of_raw keep an empty reply column and read back with
 * the reply reply_from_body gives for their body, equal to what the old
 * column text read as; stored in one batch as the recorder does. */
static void test_reply_of_raw_reads_back_equal(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg xs[NBODIES], *xp[NBODIES];
    int rcs[NBODIES];
    struct got g = {0};

    tmpdb_open(&t, "replycol");
    struct xchg_cache *c = xchg_cache_new();
    for (size_t i = 0; i < NBODIES; i++) {
        fill(&xs[i], BODIES[i].status, BODIES[i].body);
        xs[i].reply_of_raw = true;
        xp[i] = &xs[i];
    }
    assert_int_equal(xchg_put_batch(t.db, c, xp, NBODIES, rcs, &d), 0);
    xchg_cache_free(c);
    assert_int_equal(xchg_each(t.db, NULL, got_fn, &g, &d), 0);
    assert_int_equal(g.n, NBODIES);
    size_t with_reply = 0;
    for (size_t i = 0; i < NBODIES; i++) {
        const char *b = BODIES[i].body;
        char type[16];
        int64_t len = -1;
        assert_int_equal(rcs[i], 0);
        reply_column(t.db, xs[i].id, type, sizeof(type), &len);
        assert_string_equal(type, "text");
        assert_int_equal(len, 0);
        json_t *want = reply_from_body(b, strlen(b));
        json_t *old = old_column_reply(b);
        if (!same_reply(g.reply[i], want) || !same_reply(g.reply[i], old))
            fail_msg("body %zu reads back another reply: %s", i, b);
        with_reply += want != NULL;
        json_decref(want);
        json_decref(old);
    }
    /* the malformed, non-JSON, array and empty bodies have none */
    assert_int_equal(with_reply, NBODIES - 4);
    got_release(&g);
    for (size_t i = 0; i < NBODIES; i++)
        xchg_release(&xs[i]);
    tmpdb_close(&t);
}

/* Rows as older builds (and writers that do not set reply_of_raw) store
 * them read as before: a NULL column is no reply even when the body is a
 * chat completion, a JSON column is that reply (not the body's), and a
 * streamed row with a NULL column has none (tests/store/test_streamcol.c:
 * the streams stored reply_of_raw). */
static void test_other_rows_read_as_before(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg x[4];
    struct got g = {0};
    const char *body = BODIES[0].body;

    tmpdb_open(&t, "replycol");
    fill(&x[0], 200, body); /* no reply, not reply_of_raw */
    fill(&x[1], 200, body); /* a stored reply that differs from the body's */
    x[1].reply = json_pack("{s:s}", "content", "kept");
    fill(&x[2], 200, body); /* reply_of_raw with an explicit reply */
    x[2].reply =
        json_pack("{s:s, s:b}", "content", "X is 5.", "resp_truncated", 1);
    x[2].reply_of_raw = true;
    fill(&x[3], 200, "data: {}\n\n"); /* streamed, reply not stored */
    x[3].streamed = true;
    for (int i = 0; i < 4; i++)
        assert_int_equal(xchg_put(t.db, &x[i], &d), 0);
    assert_int_equal(xchg_each(t.db, NULL, got_fn, &g, &d), 0);
    assert_int_equal(g.n, 4);
    assert_null(g.reply[0]);
    assert_true(json_equal(g.reply[1], x[1].reply));
    assert_true(json_equal(g.reply[2], x[2].reply));
    assert_null(g.reply[3]);
    char type[16];
    int64_t len;
    reply_column(t.db, x[0].id, type, sizeof(type), &len);
    assert_string_equal(type, "null");
    reply_column(t.db, x[3].id, type, sizeof(type), &len);
    assert_string_equal(type, "null");
    got_release(&g);
    for (int i = 0; i < 4; i++)
        xchg_release(&x[i]);
    tmpdb_close(&t);
}

/* The spill file holds the derived reply itself: its readers have no
 * store to derive it. */
static void test_spill_carries_derived_reply(void **state)
{
    (void)state;
    for (size_t i = 0; i < NBODIES; i++) {
        struct xchg x, back;
        struct diag d = {{0}};
        fill(&x, BODIES[i].status, BODIES[i].body);
        x.reply_of_raw = true;
        json_t *j = xchg_to_json(&x);
        xchg_init(&back);
        assert_int_equal(xchg_from_json(j, &back, &d), 0);
        json_t *want = reply_from_body(x.resp_raw, x.resp_raw_len);
        assert_true(same_reply(back.reply, want));
        json_decref(want);
        json_decref(j);
        xchg_release(&back);
        xchg_release(&x);
    }
}

/* ---- streams ---- */

static int feed_jansson(const char *event, const char *data, size_t len,
                        void *ud)
{
    (void)event;
    reply_chunk_jansson(ud, data, len, 0);
    return 0;
}

/* The reference reply of a stream with max_gap_ms gap: the jansson
 * accumulator's. With text, also the column text the recorder used to
 * write (reply_finish_text of the fast accumulator), parsed. */
static json_t *stream_want(const char *sse, size_t len, double gap,
                           json_t **text)
{
    struct sse_parser p;
    struct reply_acc a;
    sse_init(&p, 0);
    reply_init(&a);
    sse_feed(&p, sse, len, feed_jansson, &a);
    a.max_gap_ms = gap;
    json_t *r = reply_finish(&a);
    reply_release(&a);
    sse_reset(&p, 0);
    if (text) {
        struct buf t = BUF_INIT;
        reply_init(&a);
        sse_feed(&p, sse, len, reply_sse_event, &a);
        a.max_gap_ms = gap;
        assert_int_equal(reply_finish_text(&a, &t), 0);
        *text = json_loadb(t.data, t.len, 0, NULL);
        assert_non_null(*text);
        buf_release(&t);
        reply_release(&a);
    }
    sse_release(&p);
    return r;
}

/* the gaps a stream is stored with, and the column text each must give */
static const struct {
    double ms;
    const char *col;
} GAPS[] = {
    {0, "0.000000"},
    {12.3456789, "12.345679"},
    {1e-7, "0.000000"},
    {1234.000001, "1234.000001"},
    {0.0005, "0.000500"},
    {999999999999.0, "999999999999.000000"},
    {3.0e15, "0"}, /* out of range */
    {-1, "0"},
};
#define NGAPS (sizeof(GAPS) / sizeof(GAPS[0]))

static void test_stream_reply_of_raw_reads_back_equal(void **state)
{
    (void)state;
    enum { N = SSE_STREAMS_N + 1 };
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg xs[N], *xp[N];
    int rcs[N];
    struct got g = {0};
    struct buf fx = BUF_INIT;
    fixture_read("mock-sse-reply-reasoning-toolcall.txt", &fx);

    tmpdb_open(&t, "streamcol");
    struct xchg_cache *c = xchg_cache_new();
    for (size_t i = 0; i < N; i++) {
        fill(&xs[i], 200, i < SSE_STREAMS_N ? sse_streams[i] : buf_str(&fx));
        xs[i].streamed = true;
        xs[i].reply_of_raw = true;
        xs[i].stream_gap_ms = GAPS[i % NGAPS].ms;
        xp[i] = &xs[i];
    }
    assert_int_equal(xchg_put_batch(t.db, c, xp, N, rcs, &d), 0);
    xchg_cache_free(c);
    assert_int_equal(xchg_each(t.db, NULL, got_fn, &g, &d), 0);
    assert_int_equal(g.n, N);
    for (size_t i = 0; i < N; i++) {
        const char *sse = xs[i].resp_raw;
        size_t len = xs[i].resp_raw_len;
        double gap = strtod(GAPS[i % NGAPS].col, NULL);
        assert_int_equal(rcs[i], 0);
        /* the column is the gap, to the nanosecond */
        struct db_stmt *st = NULL;
        assert_int_equal(db_prepare(t.db,
                                    "SELECT typeof(reply), reply FROM xchg"
                                    " WHERE id=?",
                                    &st),
                         DB_OK);
        db_bind_int64(st, 1, xs[i].id);
        assert_int_equal(db_step(st), DB_ROW);
        assert_string_equal((const char *)db_column_text(st, 0), "text");
        assert_string_equal((const char *)db_column_text(st, 1),
                            GAPS[i % NGAPS].col);
        db_finalize(st);
        /* the reply is the reference's, and the old column's but for the
         * gap's digits below the nanosecond */
        json_t *old;
        json_t *want = stream_want(sse, len, gap, &old);
        if (!same_reply(g.reply[i], want))
            fail_msg("stream %zu reads back another reply", i);
        double old_gap = json_real_value(json_object_get(old, "max_gap_ms"));
        if (GAPS[i % NGAPS].ms >= 0 && GAPS[i % NGAPS].ms < 1e12)
            assert_true(old_gap - gap <= 5e-7 && gap - old_gap <= 5e-7);
        json_object_set_new(old, "max_gap_ms", json_real(gap));
        assert_true(same_reply(g.reply[i], old));
        json_decref(want);
        json_decref(old);
    }
    got_release(&g);
    for (size_t i = 0; i < N; i++)
        xchg_release(&xs[i]);
    buf_release(&fx);
    tmpdb_close(&t);
}

/* The spill file holds a derived stream reply with the gap as measured */
static void test_spill_carries_derived_stream_reply(void **state)
{
    (void)state;
    for (size_t i = 0; i < SSE_STREAMS_N; i++) {
        struct xchg x, back;
        struct diag d = {{0}};
        fill(&x, 200, sse_streams[i]);
        x.streamed = true;
        x.reply_of_raw = true;
        x.stream_gap_ms = 12.3456789;
        json_t *j = xchg_to_json(&x);
        xchg_init(&back);
        assert_int_equal(xchg_from_json(j, &back, &d), 0);
        json_t *want =
            stream_want(x.resp_raw, x.resp_raw_len, 12.3456789, NULL);
        assert_non_null(want);
        assert_true(same_reply(back.reply, want));
        json_decref(want);
        json_decref(j);
        xchg_release(&back);
        xchg_release(&x);
    }
}

/* reply_may_call_tools is false only where reply_from_body has no tool
 * calls */
static void test_may_call_tools(void **state)
{
    (void)state;
    for (size_t i = 0; i < NBODIES; i++) {
        const char *b = BODIES[i].body;
        json_t *r = reply_from_body(b, strlen(b));
        json_t *calls = json_object_get(r, "tool_calls");
        if (json_array_size(calls))
            assert_true(reply_may_call_tools(b, strlen(b)));
        json_decref(r);
    }
    /* a key spelt with an escape is still a maybe */
    static const char esc[] = "{\"choices\":[{\"message\":{\"tool\\u005fcalls\""
                              ":[{\"id\":\"1\",\"type\":\"function\"}]}}]}";
    json_t *r = reply_from_body(esc, strlen(esc));
    assert_int_equal(json_array_size(json_object_get(r, "tool_calls")), 1);
    assert_true(reply_may_call_tools(esc, strlen(esc)));
    json_decref(r);
    assert_false(reply_may_call_tools(BODIES[0].body, strlen(BODIES[0].body)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_of_raw_reads_back_equal),
        cmocka_unit_test(test_other_rows_read_as_before),
        cmocka_unit_test(test_spill_carries_derived_reply),
        cmocka_unit_test(test_may_call_tools),
        cmocka_unit_test(test_stream_reply_of_raw_reads_back_equal),
        cmocka_unit_test(test_spill_carries_derived_stream_reply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
