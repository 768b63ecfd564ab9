/*
 * Tests for store/xchg: exchanges survive the round trip through SQLite
 * field by field, chat requests are rebuilt exactly from content-addressed
 * messages, a 100-turn session grows linearly (the storage figure), and the
 * spill file reads back what was appended, skipping a torn last line.
 */
#include <errno.h>
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
#include "core/hash.h"
#include "core/rng.h"
#include "core/xalloc.h"
#include "store/store.h"
#include "store/xchg.h"
#include "util/tmpdb.h"
#include "wire/jscan.h"

static void fill(struct xchg *x, const char *session, json_t *body)
{
    xchg_init(x);
    x->session = xstrdup(session);
    x->kind = xstrdup("main");
    x->started = 1790000000.25;
    x->method = xstrdup("POST");
    x->path = xstrdup("/v1/chat/completions?a=1");
    x->req_headers = json_pack("{s:s, s:s}", "Content-Type", "application/json",
                               "Authorization", "[redacted]");
    x->req_body = body;
    x->status = 200;
    x->resp_headers = json_pack("{s:s}", "Content-Type", "text/event-stream");
    x->resp_raw = xstrdup("data: {}\n\ndata: [DONE]\n\n");
    x->resp_raw_len = strlen(x->resp_raw);
    x->streamed = true;
    x->reply = json_pack("{s:s, s:n, s:b, s:i}", "content", "hi",
                         "reasoning_content", "done", 1, "chunks", 1);
    x->up_ttfb_ms = 1.5;
    x->up_total_ms = 9.0;
    x->down_ttfb_ms = 1.75;
    x->down_total_ms = 9.5;
    x->end = XCHG_COMPLETE;
}

struct collect {
    int n;
    struct xchg got[8];
};

static int collect_fn(const struct xchg *x, void *ud)
{
    struct collect *c = ud;
    struct xchg *g = &c->got[c->n++];
    json_t *j = xchg_to_json(x);
    struct diag d = {{0}};
    xchg_init(g);
    assert_int_equal(xchg_from_json(j, g, &d), 0);
    g->id = x->id;
    json_decref(j);
    return c->n == 8;
}

static void collect_release(struct collect *c)
{
    for (int i = 0; i < c->n; i++)
        xchg_release(&c->got[i]);
}

static void test_roundtrip_chat(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg x;
    struct collect c = {0};

    tmpdb_open(&t, "xchg");
    json_t *body =
        json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:s}], s:b, s:[{s:s}], s:f}",
                  "model", "m", "messages", "role", "system", "content",
                  "be brief", "role", "user", "content", "hello \xc3\xa9",
                  "stream", 1, "tools", "type", "function", "temperature", 0.6);
    fill(&x, "s1", body);
    assert_int_equal(xchg_put(t.db, &x, &d), 0);
    assert_true(x.id > 0);
    assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 1);
    struct xchg *g = &c.got[0];
    assert_int_equal(g->id, x.id);
    assert_string_equal(g->session, "s1");
    assert_string_equal(g->kind, "main");
    assert_string_equal(g->method, "POST");
    assert_string_equal(g->path, "/v1/chat/completions?a=1");
    assert_true(json_equal(g->req_body, x.req_body));
    assert_true(json_equal(g->req_headers, x.req_headers));
    assert_true(json_equal(g->resp_headers, x.resp_headers));
    assert_true(json_equal(g->reply, x.reply));
    assert_int_equal(g->resp_raw_len, x.resp_raw_len);
    assert_memory_equal(g->resp_raw, x.resp_raw, x.resp_raw_len);
    assert_null(g->req_raw);
    assert_int_equal(g->status, 200);
    assert_true(g->streamed);
    assert_false(g->req_malformed);
    assert_true(g->started == 1790000000.25);
    assert_true(g->down_total_ms == 9.5 && g->up_ttfb_ms == 1.5);
    assert_int_equal(g->end, XCHG_COMPLETE);
    collect_release(&c);
    xchg_release(&x);
    tmpdb_close(&t);
}

/* The zip code and stored length of resp_raw for row id. */
static void resp_coding(struct db *db, int64_t id, int *zip, int64_t *len)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db,
                                "SELECT resp_raw_zip, length(resp_raw)"
                                " FROM xchg WHERE id=?",
                                &st),
                     DB_OK);
    db_bind_int64(st, 1, id);
    assert_int_equal(db_step(st), DB_ROW);
    *zip = db_column_int(st, 0);
    *len = db_column_int64(st, 1);
    db_finalize(st);
}

struct seen {
    int64_t ids[4];
    int n;
    struct xchg_bad bad[4];
    int nbad;
};

static int seen_fn(const struct xchg *x, void *ud)
{
    struct seen *s = ud;
    s->ids[s->n++] = x->id;
    /* what is read is consistent: a length has its bytes */
    assert_true(x->resp_raw || x->resp_raw_len == 0);
    return 0;
}

static void seen_bad(const struct xchg_bad *b, void *ud)
{
    struct seen *s = ud;
    s->bad[s->nbad++] = *b;
}

/* A streamed response is stored coded event against event (ldelta), and
 * a long one deflated after that; both read back byte for byte, as does
 * a stream without blank lines (nothing to share: stored as it is or
 * deflated). */
static void test_stream_coding(void **state)
{
    (void)state;
    static const int events[] = {12, 2000, 0};
    static const int want_zip[] = {2, 3, 1};
    struct tmpdb t;
    struct diag d = {{0}};
    tmpdb_open(&t, "xchg");
    for (int k = 0; k < 3; k++) {
        struct xchg x;
        struct collect c = {0};
        struct buf b = BUF_INIT;
        fill(&x, "s-stream", NULL);
        for (int i = 0; i < events[k]; i++)
            buf_printf(&b,
                       "data: {\"id\":\"chatcmpl-1\",\"object\":"
                       "\"chat.completion.chunk\",\"created\":1796009216,"
                       "\"choices\":[{\"index\":0,\"delta\":{\"content\":"
                       "\"w%d\"},\"finish_reason\":null}]}\n\n",
                       i * 7919 % 1000);
        if (!events[k]) /* one long event: no record to code against */
            for (int i = 0; i < 300; i++)
                buf_printf(&b, "x%d ", i);
        buf_adds(&b, "data: [DONE]\n\n");
        free(x.resp_raw);
        x.resp_raw_len = b.len;
        x.resp_raw = buf_detach(&b, NULL);
        assert_int_equal(xchg_put(t.db, &x, &d), 0);
        int zip;
        int64_t len;
        resp_coding(t.db, x.id, &zip, &len);
        printf("stream of %d events: %zu bytes stored as %lld (zip %d)\n",
               events[k], x.resp_raw_len, (long long)len, zip);
        assert_int_equal(zip, want_zip[k]);
        assert_true((size_t)len * 2 < x.resp_raw_len);
        assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
        struct xchg *g = &c.got[c.n - 1];
        assert_int_equal(g->id, x.id);
        assert_int_equal(g->resp_raw_len, x.resp_raw_len);
        assert_memory_equal(g->resp_raw, x.resp_raw, x.resp_raw_len);
        collect_release(&c);
        xchg_release(&x);
    }
    /* a coding cut short on disk is never read as other bytes (nor as no
     * body): each row is reported with its column and left out */
    assert_int_equal(store_exec(t.db,
                                "UPDATE xchg SET resp_raw = substr(resp_raw, "
                                "1, length(resp_raw) - 3)",
                                &d),
                     0);
    struct seen s = {0};
    assert_int_equal(xchg_each_checked(t.db, NULL, seen_fn, seen_bad, &s, &d),
                     0);
    assert_int_equal(s.n, 0);
    assert_int_equal(s.nbad, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(s.bad[i].column, "resp_raw");
    tmpdb_close(&t);
}

static void test_raw_bodies_and_session_filter(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg x;
    struct collect c = {0};
    static const char bad[] = "{\"messages\": [ oops";
    static const char bin[] = "a\0b\xff\xfe";

    tmpdb_open(&t, "xchg");
    /* malformed JSON: stored raw, flagged */
    fill(&x, "s1", NULL);
    x.req_raw = xstrdup(bad);
    x.req_raw_len = strlen(bad);
    x.req_malformed = true;
    free(x.resp_raw);
    x.resp_raw = xmalloc(sizeof(bin));
    memcpy(x.resp_raw, bin, sizeof(bin));
    x.resp_raw_len = sizeof(bin);
    x.end = XCHG_UPSTREAM_RESET;
    assert_int_equal(xchg_put(t.db, &x, &d), 0);
    xchg_release(&x);
    /* valid JSON that is not a chat request, in another session */
    fill(&x, "s2", NULL);
    x.req_raw = xstrdup("{\"prompt\": \"2+2=\", \"max_tokens\": 3}");
    x.req_raw_len = strlen(x.req_raw);
    assert_int_equal(xchg_put(t.db, &x, &d), 0);
    xchg_release(&x);

    assert_int_equal(xchg_each(t.db, "s1", collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 1);
    assert_true(c.got[0].req_malformed);
    assert_null(c.got[0].req_body);
    assert_int_equal(c.got[0].req_raw_len, strlen(bad));
    assert_memory_equal(c.got[0].req_raw, bad, strlen(bad));
    assert_int_equal(c.got[0].resp_raw_len, sizeof(bin));
    assert_memory_equal(c.got[0].resp_raw, bin, sizeof(bin));
    assert_int_equal(c.got[0].end, XCHG_UPSTREAM_RESET);
    collect_release(&c);
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, "s2", collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(
        json_integer_value(json_object_get(c.got[0].req_body, "max_tokens")),
        3);
    collect_release(&c);
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, "nope", collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 0);
    tmpdb_close(&t);
}

/* ---- a 100-turn session ---- */

static const char *const WORDS[] = {
    "the",    "file",  "function", "returns", "error", "value", "we",
    "should", "check", "test",     "build",   "index", "loop",  "because",
    "python", "board", "player",   "move",    "state", "write", "read",
    "cache",  "line",  "a",        "is",      "to",    "and",   "in"};

static char *prose(struct rng *r, size_t bytes)
{
    struct buf b = BUF_INIT;
    while (b.len < bytes) {
        buf_adds(&b, WORDS[rng_below(r, sizeof(WORDS) / sizeof(WORDS[0]))]);
        buf_addch(&b, rng_below(r, 12) ? ' ' : '\n');
        if (!rng_below(r, 40))
            buf_printf(&b, "%llu ", (unsigned long long)rng_below(r, 100000));
    }
    return buf_detach(&b, NULL);
}

static json_t *text_msg(const char *role, char *text)
{
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", text);
    free(text);
    return m;
}

/* Appends turn i's user message (and tool round trip every 4th turn). */
static void add_turn(json_t *msgs, struct rng *r, int i)
{
    json_array_append_new(msgs, text_msg("user", prose(r, 200)));
    if (i % 4 == 3) {
        char id[32];
        snprintf(id, sizeof(id), "call_%d", i);
        char *args = prose(r, 300);
        json_array_append_new(
            msgs, json_pack("{s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}]}", "role",
                            "assistant", "content", "", "tool_calls", "id", id,
                            "type", "function", "function", "name", "write",
                            "arguments", args));
        free(args);
        json_t *tool = text_msg("tool", prose(r, 400));
        json_object_set_new(tool, "tool_call_id", json_string(id));
        json_array_append_new(msgs, tool);
    }
}

static void test_storage_growth_100_turns(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct rng r;
    struct xchg_cache *cache = xchg_cache_new();
    json_t *msgs = json_array();
    json_t *tools = json_array();
    json_t *seen = json_object(); /* distinct messages by canonical JSON */
    int64_t whole = 0, distinct = 0;

    rng_seed(&r, 7);
    tmpdb_open(&t, "xchg");
    for (int k = 0; k < 10; k++) {
        char *desc = prose(&r, 600);
        json_array_append_new(tools, json_pack("{s:s, s:{s:s, s:s}}", "type",
                                               "function", "function", "name",
                                               "t", "description", desc));
        free(desc);
    }
    json_array_append_new(msgs, text_msg("system", prose(&r, 9000)));
    for (int i = 0; i < 100; i++) {
        add_turn(msgs, &r, i);
        json_t *body = json_pack("{s:s, s:i, s:O, s:O, s:b}", "model", "qwen3",
                                 "max_tokens", 32000, "messages", msgs, "tools",
                                 tools, "stream", 1);
        /* the second turn of each ten also sends a title request */
        struct xchg x;
        fill(&x, "ses_1", json_deep_copy(body));
        int rc = i % 2 ? xchg_put_cached(t.db, cache, &x, &d)
                       : xchg_put(t.db, &x, &d);
        assert_int_equal(rc, 0);
        xchg_release(&x);
        if (i % 10 == 1) {
            fill(&x, "ses_1",
                 json_pack("{s:s, s:[{s:s, s:s}]}", "model", "qwen3",
                           "messages", "role", "system", "content",
                           "You are a title generator"));
            assert_int_equal(xchg_put_cached(t.db, cache, &x, &d), 0);
            xchg_release(&x);
        }
        char *s = json_dumps(body, JSON_COMPACT);
        whole += (int64_t)strlen(s);
        free(s);
        json_decref(body);
        /* the reply as the next request will carry it */
        json_array_append_new(msgs, text_msg("assistant", prose(&r, 1200)));
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char *s = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
        if (!json_object_get(seen, s)) {
            json_object_set_new(seen, s, json_true());
            distinct += (int64_t)strlen(s);
        }
        free(s);
    }
    int64_t mb, rb;
    assert_int_equal(xchg_storage_bytes(t.db, &mb, &rb, &d), 0);
    double ratio = (double)(mb + rb) / (double)distinct;
    printf("storage, 100-turn session: distinct messages %lld B; stored "
           "%lld B (messages %lld compressed + requests %lld) = %.3fx; "
           "each request whole %lld B = %.1fx\n",
           (long long)distinct, (long long)(mb + rb), (long long)mb,
           (long long)rb, ratio, (long long)whole,
           (double)whole / (double)distinct);
    assert_true(ratio <= 1.2);
    assert_true(whole > 20 * (mb + rb));
    json_decref(seen);
    json_decref(tools);
    json_decref(msgs);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

struct check_session {
    json_t *expect; /* array of bodies, in order */
    size_t n;
};

static int check_fn(const struct xchg *x, void *ud)
{
    struct check_session *c = ud;
    assert_true(c->n < json_array_size(c->expect));
    assert_true(json_equal(x->req_body, json_array_get(c->expect, c->n)));
    c->n++;
    return 0;
}

/* Every stored request is rebuilt exactly, across chains longer than the
 * depth cap, branches (an edited history) and interleaved side requests. */
static void test_rebuild_exact(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct rng r;
    struct xchg_cache *cache = xchg_cache_new();
    struct check_session c = {json_array(), 0};
    json_t *msgs = json_array();

    rng_seed(&r, 11);
    tmpdb_open(&t, "xchg");
    json_array_append_new(msgs, text_msg("system", prose(&r, 300)));
    for (int i = 0; i < 80; i++) {
        add_turn(msgs, &r, i);
        if (i == 40) /* pruning: an old message replaced in place */
            json_array_set_new(msgs, 1, text_msg("user", prose(&r, 20)));
        if (i == 60) /* compaction: history dropped */
            json_array_remove(msgs, 2);
        json_t *body =
            json_pack("{s:o, s:i}", "messages", json_deep_copy(msgs), "n", i);
        json_array_append(c.expect, body);
        struct xchg x;
        fill(&x, i % 3 ? "a" : "b", body);
        assert_int_equal(xchg_put_cached(t.db, cache, &x, &d), 0);
        xchg_release(&x);
        json_array_append_new(msgs, text_msg("assistant", prose(&r, 50)));
    }
    assert_int_equal(xchg_each(t.db, NULL, check_fn, &c, &d), 0);
    assert_int_equal(c.n, 80);
    json_decref(c.expect);
    json_decref(msgs);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

struct check_views {
    json_t *expect; /* array of bodies, in order */
    size_t n;
    size_t until;        /* count distinct arrays over the first until */
    json_t *arrays[256]; /* distinct view arrays seen (a reference each) */
    size_t narrays;
};

static int check_view_fn(const struct xchg *x, void *ud)
{
    struct check_views *c = ud;
    json_t *want = json_array_get(c->expect, c->n++);
    json_t *msgs = json_object_get(want, "messages");
    assert_non_null(x->req_msgs);
    assert_null(json_object_get(x->req_body, "messages"));
    assert_int_equal(x->req_msgs_n, json_array_size(msgs));
    assert_true(json_array_size(x->req_msgs) >= x->req_msgs_n);
    for (size_t i = 0; i < x->req_msgs_n; i++)
        assert_true(json_equal(json_array_get(x->req_msgs, i),
                               json_array_get(msgs, i)));
    json_t *rest = json_copy(want);
    json_object_del(rest, "messages");
    assert_true(json_equal(x->req_body, rest));
    json_decref(rest);
    size_t k = 0;
    while (k < c->narrays && c->arrays[k] != x->req_msgs)
        k++;
    if (c->n <= c->until && k == c->narrays && k < 256)
        c->arrays[c->narrays++] = json_incref(x->req_msgs);
    return 0;
}

/* Stores one request of conversation k (messages msgs) and expects it. */
static void put_conv(struct tmpdb *t, struct xchg_cache *cache,
                     struct check_views *c, int k, json_t *msgs, int n)
{
    struct diag d = {{0}};
    json_t *body =
        json_pack("{s:o, s:i}", "messages", json_deep_copy(msgs), "n", n);
    json_array_append(c->expect, body);
    struct xchg x;
    char sid[16];
    snprintf(sid, sizeof(sid), "c%d", k);
    fill(&x, sid, body);
    assert_int_equal(xchg_put_cached(t->db, cache, &x, &d), 0);
    xchg_release(&x);
}

/* With XCHG_EACH_VIEWS each request's messages are a view of an array the
 * requests of its conversation share, exactly the messages it sent, after
 * the walk too: through an edit in place, a compaction, a request sent
 * twice and one shorter than the last; then more conversations interleaved
 * than the reader keeps arrays for (each view still exact). */
static void test_views_exact(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    struct rng r;
    struct xchg_cache *cache = xchg_cache_new();
    struct check_views c = {.expect = json_array()};
    enum { CONV = 80, TURNS = 8 };
    json_t *msgs[CONV];

    rng_seed(&r, 12);
    tmpdb_open(&t, "views");
    for (int k = 0; k < CONV; k++) {
        msgs[k] = json_array();
        json_array_append_new(msgs[k], text_msg("system", prose(&r, 200)));
    }
    for (int i = 0; i < TURNS; i++)
        for (int k = 0; k < 3; k++) {
            add_turn(msgs[k], &r, i);
            if (k == 0 && i == 4) /* an old message edited in place */
                json_array_set_new(msgs[k], 1, text_msg("user", prose(&r, 20)));
            if (k == 1 && i == 5) /* a compaction */
                while (json_array_size(msgs[k]) > 2)
                    json_array_remove(msgs[k], 1);
            put_conv(&t, cache, &c, k, msgs[k], i);
            if (k == 2 && i == 3) /* sent again */
                put_conv(&t, cache, &c, k, msgs[k], i);
            if (k == 2 && i == 6) { /* a shorter one: a side question */
                json_t *side = json_array();
                for (size_t m = 0; m < 2; m++)
                    json_array_append(side, json_array_get(msgs[k], m));
                put_conv(&t, cache, &c, k, side, -1);
                json_decref(side);
            }
            json_array_append_new(msgs[k],
                                  text_msg("assistant", prose(&r, 40)));
        }
    c.until = json_array_size(c.expect);
    for (int i = 0; i < 3; i++) /* the rest, round robin */
        for (int k = 3; k < CONV; k++) {
            add_turn(msgs[k], &r, i);
            put_conv(&t, cache, &c, k, msgs[k], i);
            json_array_append_new(msgs[k],
                                  text_msg("assistant", prose(&r, 40)));
        }
    size_t sent = json_array_size(c.expect);
    assert_int_equal(xchg_each_flags(t.db, NULL, XCHG_EACH_VIEWS, check_view_fn,
                                     NULL, &c, &d),
                     0);
    assert_int_equal(c.n, sent);
    /* the three conversations: one array each, one more where the first
     * was edited and one more where the second was compacted */
    assert_int_equal(c.narrays, 5);
    for (size_t i = 0; i < c.narrays; i++) /* held after the walk */
        assert_true(json_array_size(c.arrays[i]) >= 2);
    for (size_t i = 0; i < c.narrays; i++)
        json_decref(c.arrays[i]);
    /* the plain walk still gives whole bodies */
    struct check_session p = {c.expect, 0};
    assert_int_equal(xchg_each(t.db, NULL, check_fn, &p, &d), 0);
    assert_int_equal(p.n, sent);
    json_decref(c.expect);
    for (int k = 0; k < CONV; k++)
        json_decref(msgs[k]);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

static int spill_fn(const struct xchg *x, void *ud)
{
    struct collect *c = ud;
    struct xchg *g = &c->got[c->n++];
    json_t *j = xchg_to_json(x);
    xchg_init(g);
    assert_int_equal(xchg_from_json(j, g, NULL), 0);
    g->id = x->id;
    json_decref(j);
    return 0;
}

static void test_spill_roundtrip_and_torn_line(void **state)
{
    (void)state;
    char dir[] = "/tmp/fidelity-spill-XXXXXX";
    char path[128];
    struct diag d = {{0}};
    struct collect c = {0};
    static const char bin[] = "\x00\x01\xff data";
    struct xchg x;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.jsonl", dir);
    assert_int_equal(xchg_spill_each(path, spill_fn, &c, &d), 0);
    assert_int_equal(c.n, 0);
    fill(&x, "s", json_pack("{s:[]}", "messages"));
    free(x.resp_raw);
    x.resp_raw = xmalloc(sizeof(bin));
    memcpy(x.resp_raw, bin, sizeof(bin));
    x.resp_raw_len = sizeof(bin);
    x.end = XCHG_CLIENT_GONE;
    assert_int_equal(xchg_spill_append(path, &x, &d), 0);
    assert_int_equal(xchg_spill_append(path, &x, &d), 0);
    FILE *f = fopen(path, "a");
    fputs("{\"method\":\"POST\",\"pa", f); /* torn by a crash */
    fclose(f);
    assert_int_equal(xchg_spill_each(path, spill_fn, &c, &d), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.got[1].id, -2);
    assert_int_equal(c.got[0].resp_raw_len, sizeof(bin));
    assert_memory_equal(c.got[0].resp_raw, bin, sizeof(bin));
    assert_true(json_equal(c.got[0].req_body, x.req_body));
    assert_true(json_equal(c.got[0].reply, x.reply));
    assert_int_equal(c.got[0].end, XCHG_CLIENT_GONE);
    collect_release(&c);
    /* a bad line that is not the last one is an error naming the line */
    f = fopen(path, "a");
    fputs("\n{}\n", f);
    fclose(f);
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_spill_each(path, spill_fn, &c, &d), -EBADMSG);
    assert_non_null(strstr(d.msg, "line 3"));
    collect_release(&c);
    xchg_release(&x);
    unlink(path);
    rmdir(dir);
}

/* Messages hashed by the bytes they arrived as (xchg.req_src): the same
 * bytes again reuse the hash, other bytes for an equal message still get
 * the canonical hash (content addressing), and every request rebuilds
 * exactly. */
static void test_message_hash_by_bytes(void **state)
{
    (void)state;
    static const char *const srcs[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\","
        "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}]}",
        /* the same two messages as other bytes, then a new one */
        "{\"model\":\"m\",\"messages\":[ {\"content\":\"be brief\","
        "\"role\":\"system\"}, {\"role\":\"user\",\"content\":\"h\\u0069\"},"
        "{\"role\":\"assistant\",\"content\":\"hello\"}]}",
        /* the first request's bytes again, plus the new message */
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\","
        "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":\"hello\"}]}",
    };
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg_cache *cache = xchg_cache_new();
    tmpdb_open(&t, "xchg");
    for (size_t i = 0; i < 3; i++) {
        struct xchg x;
        fill(&x, "ses", json_loads(srcs[i], 0, NULL));
        x.req_src = srcs[i];
        x.req_src_len = strlen(srcs[i]);
        assert_int_equal(xchg_put_cached(t.db, cache, &x, &d), 0);
        xchg_release(&x);
    }
    /* request 2's messages came as new bytes (dumped and hashed); all three
     * of request 3's are bytes seen before (two from request 1, one from
     * request 2) */
    assert_int_equal(xchg_cache_memo_hits(cache), 3);
    struct db_stmt *st;
    assert_int_equal(db_prepare(t.db,
                                "SELECT count(*) FROM xchg_blob"
                                " WHERE kind=0",
                                &st),
                     DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_int(st, 0), 3); /* distinct messages */
    db_finalize(st);
    struct collect c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 3);
    for (int i = 0; i < 3; i++) {
        json_t *want = json_loads(srcs[i], 0, NULL);
        assert_true(json_equal(c.got[i].req_body, want));
        json_decref(want);
    }
    collect_release(&c);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

/* A batch whose middle exchange fails (a trigger refuses its row) stores
 * the other two, the third on top of the first's message list, and leaves
 * the cache usable; a batch of one that fails stores nothing. */
/* The parameter and tools blobs of a request whose bytes around the
 * messages came before take their hashes from the memo (rest hits); the
 * rows are those a full canonical dump gives: the same blob for the same
 * parameters sent as other bytes, another for other parameters, every
 * body rebuilt exactly. */
static void test_params_hash_by_bytes(void **state)
{
    (void)state;
    static const char *const srcs[] = {
        "{\"model\":\"m\",\"temperature\":0.5,\"tools\":[{\"type\":"
        "\"function\"}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"hi\"}]}",
        /* same bytes around other messages: both from the memo */
        "{\"model\":\"m\",\"temperature\":0.5,\"tools\":[{\"type\":"
        "\"function\"}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"hello\"}]}",
        /* the same values as other bytes: dumped, same blobs */
        "{ \"temperature\":0.5, \"model\":\"m\",\"messages\":[{\"role\":"
        "\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
        "\"function\"}]}",
        /* another temperature, no tools: a new parameter blob */
        "{\"model\":\"m\",\"temperature\":0.7,\"messages\":[{\"role\":"
        "\"user\",\"content\":\"hi\"}]}",
        /* the first bytes again: from the memo */
        "{\"model\":\"m\",\"temperature\":0.5,\"tools\":[{\"type\":"
        "\"function\"}],\"messages\":[{\"role\":\"user\",\"content\":"
        "\"hi\"}]}",
    };
    static const size_t hits_after[] = {0, 2, 2, 2, 4};
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg_cache *cache = xchg_cache_new();
    tmpdb_open(&t, "xchg");
    for (size_t i = 0; i < 5; i++) {
        struct xchg x;
        struct jspan doc;
        fill(&x, "ses", NULL);
        assert_int_equal(jscan_doc(srcs[i], strlen(srcs[i]), &doc), 0);
        x.req_body = xchg_req_json(cache, &doc, &x);
        x.req_src = srcs[i];
        x.req_src_len = strlen(srcs[i]);
        assert_int_equal(xchg_put_cached(t.db, cache, &x, &d), 0);
        assert_int_equal(xchg_cache_rest_hits(cache), hits_after[i]);
        xchg_release(&x);
    }
    struct db_stmt *st;
    assert_int_equal(db_prepare(t.db,
                                "SELECT count(DISTINCT req_params),"
                                " count(DISTINCT req_tools),"
                                " (SELECT count(*) FROM xchg_blob"
                                " WHERE kind<>0) FROM xchg",
                                &st),
                     DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_int(st, 0), 2);
    assert_int_equal(db_column_int(st, 1), 1);
    assert_int_equal(db_column_int(st, 2), 3);
    db_finalize(st);
    struct collect c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 5);
    for (int i = 0; i < 5; i++) {
        json_t *want = json_loads(srcs[i], 0, NULL);
        assert_true(json_equal(c.got[i].req_body, want));
        json_decref(want);
    }
    collect_release(&c);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

/* The list columns of every row of db, in id order, as one text. */
static char *list_columns(struct db *db)
{
    struct db_stmt *st;
    struct buf b = BUF_INIT;
    assert_int_equal(db_prepare(db,
                                "SELECT id, req_base, req_prefix,"
                                " req_depth, hex(req_msgs) FROM xchg"
                                " ORDER BY id",
                                &st),
                     DB_OK);
    while (db_step(st) == DB_ROW)
        buf_printf(&b, "%lld %lld %lld %lld %s\n",
                   (long long)db_column_int64(st, 0),
                   (long long)db_column_int64(st, 1),
                   (long long)db_column_int64(st, 2),
                   (long long)db_column_int64(st, 3),
                   (const char *)db_column_text(st, 4));
    db_finalize(st);
    return buf_detach(&b, NULL);
}

/* Three sessions interleaved, stored once through one long-lived cache
 * (which knows each session's latest exchanges from its own inserts) and
 * once through a fresh cache per exchange (which asks SQLite each time):
 * the same bases, prefixes and lists row for row; a write through another
 * cache in between is noticed (the file's data version) and the rows stay
 * the same. */
static void test_recent_bases_without_query(void **state)
{
    (void)state;
    struct tmpdb t[2];
    struct diag d = {{0}};
    struct xchg_cache *cache = xchg_cache_new();
    static const char *const ses[] = {"a", "b", "c"};
    json_t *hist[3];
    for (int k = 0; k < 3; k++)
        hist[k] = json_array();
    tmpdb_open(&t[0], "xchg");
    tmpdb_open(&t[1], "xchg");
    for (int i = 0; i < 60; i++) {
        int k = (i * 7) % 3;
        char text[64];
        snprintf(text, sizeof(text), "turn %d of %s", i, ses[k]);
        json_array_append_new(
            hist[k], json_pack("{s:s, s:s}", "role", "user", "content", text));
        /* every fifth request of a session drops its oldest message (a
         * rewrite), so the base is not always the latest */
        if (i % 5 == 4 && json_array_size(hist[k]) > 2)
            json_array_remove(hist[k], 0);
        for (int db = 0; db < 2; db++) {
            struct xchg x;
            fill(&x, ses[k],
                 json_pack("{s:s, s:O}", "model", "m", "messages", hist[k]));
            /* db 0: the long-lived cache, but every 13th exchange through
             * a fresh one (another writer on the same file) */
            int rc = db == 0 && i % 13 ? xchg_put_cached(t[0].db, cache, &x, &d)
                                       : xchg_put(t[db].db, &x, &d);
            assert_int_equal(rc, 0);
            xchg_release(&x);
        }
    }
    assert_true(xchg_cache_recent_hits(cache) > 30);
    char *a = list_columns(t[0].db), *b = list_columns(t[1].db);
    assert_string_equal(a, b);
    free(a);
    free(b);
    for (int k = 0; k < 3; k++)
        json_decref(hist[k]);
    xchg_cache_free(cache);
    tmpdb_close(&t[0]);
    tmpdb_close(&t[1]);
}

static void test_batch_failure_isolated(void **state)
{
    (void)state;
    static const char *const srcs[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"one\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"bad\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"one\"},{\"role\":\"assistant\",\"content\":"
        "\"two\"}]}",
    };
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg_cache *cache = xchg_cache_new();
    struct xchg xs[3];
    struct xchg *px[3];
    int rcs[3] = {-1, -1, -1};
    tmpdb_open(&t, "xchg");
    assert_int_equal(db_exec(t.db,
                             "CREATE TRIGGER no_bad BEFORE INSERT ON xchg"
                             " WHEN NEW.path = '/bad' BEGIN"
                             " SELECT RAISE(ABORT, 'refused'); END",
                             NULL),
                     DB_OK);
    for (int i = 0; i < 3; i++) {
        fill(&xs[i], "ses", json_loads(srcs[i], 0, NULL));
        xs[i].req_src = srcs[i];
        xs[i].req_src_len = strlen(srcs[i]);
        px[i] = &xs[i];
    }
    free(xs[1].path);
    xs[1].path = xstrdup("/bad");
    assert_int_equal(xchg_put_batch(t.db, cache, px, 3, rcs, &d), 0);
    assert_int_equal(rcs[0], 0);
    assert_true(rcs[1] < 0);
    assert_int_equal(rcs[2], 0);
    assert_true(xs[0].id > 0 && xs[2].id > xs[0].id);
    assert_int_equal(xs[1].id, 0);
    assert_non_null(strstr(d.msg, "refused"));
    /* the same bad exchange alone: refused, nothing stored, and (nothing
     * committed) the call says so, as for a failed transaction */
    rcs[1] = 0;
    int alone = xchg_put_batch(t.db, cache, &px[1], 1, &rcs[1], &d);
    assert_true(rcs[1] < 0);
    assert_int_equal(alone, rcs[1]);
    assert_int_equal(xs[1].id, 0);
    /* the cache still serves: a fourth request on top of the third */
    struct xchg x4;
    fill(&x4, "ses", json_loads(srcs[2], 0, NULL));
    x4.req_src = srcs[2];
    x4.req_src_len = strlen(srcs[2]);
    assert_int_equal(xchg_put_cached(t.db, cache, &x4, &d), 0);
    struct db_stmt *st;
    assert_int_equal(db_prepare(t.db,
                                "SELECT count(*), sum(req_base IS NOT NULL),"
                                " (SELECT count(*) FROM xchg_blob WHERE kind=0)"
                                " FROM xchg",
                                &st),
                     DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    assert_int_equal(db_column_int(st, 0), 3); /* rows */
    assert_int_equal(db_column_int(st, 1), 2); /* on a base */
    /* "bad" was rolled back with its exchange */
    assert_int_equal(db_column_int(st, 2), 2);
    db_finalize(st);
    struct collect c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 3);
    const char *want_src[] = {srcs[0], srcs[2], srcs[2]};
    for (int i = 0; i < 3; i++) {
        json_t *want = json_loads(want_src[i], 0, NULL);
        assert_true(json_equal(c.got[i].req_body, want));
        json_decref(want);
    }
    collect_release(&c);
    for (int i = 0; i < 3; i++)
        xchg_release(&xs[i]);
    xchg_release(&x4);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

/* xchg_each gives each chat request's message and tool hashes: hash64 of
 * the canonical JSON (what audit keys its shared copies by). */
static int check_hashes(const struct xchg *x, void *ud)
{
    int *chats = ud;
    json_t *msgs = json_object_get(x->req_body, "messages");
    if (!json_is_array(msgs)) {
        assert_null(x->req_msg_h);
        return 0;
    }
    ++*chats;
    assert_non_null(x->req_msg_h);
    assert_int_equal(x->req_msg_n, json_array_size(msgs));
    for (size_t i = 0; i < x->req_msg_n; i++) {
        char *s = json_dumps(json_array_get(msgs, i),
                             JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        assert_true(x->req_msg_h[i] == hash64(s, strlen(s), 0));
        free(s);
    }
    json_t *tools = json_object_get(x->req_body, "tools");
    if (tools) {
        char *s = json_dumps(tools, JSON_COMPACT | JSON_SORT_KEYS);
        assert_true(x->req_tools_h == hash64(s, strlen(s), 0));
        free(s);
    } else {
        assert_true(x->req_tools_h == 0);
    }
    return 0;
}

/* xchg_req_json builds the same value as jscan_json (member order
 * included), shares a message with the earlier request that sent the same
 * bytes, says which messages are new, and the store keeps what it keeps
 * without it. */
static void test_req_json_shares_messages(void **state)
{
    (void)state;
    static const char *const srcs[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\","
        "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"temperature\":0.5}",
        /* the first request's messages again, plus a new one, and an
         * earlier "messages" member that the last one replaces */
        "{\"messages\":[1],\"model\":\"m\",\"messages\":[{\"role\":\"system\","
        "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":\"h\\u00e9llo\",\"tool_calls\":"
        "[{\"id\":\"c1\",\"function\":{\"name\":\"t\",\"arguments\":\"{}\"}}]"
        "}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"t\"}}],\"temperature\":0.5}",
        /* not a chat request */
        "{\"prompt\":\"hi\",\"messages\":{\"a\":1}}",
    };
    static const bool want_new[][3] = {
        {true, true, false}, {false, false, true}, {false, false, false}};
    static const size_t want_n[] = {2, 3, 0};
    struct tmpdb t;
    struct diag d = {{0}};
    struct xchg_cache *cache = xchg_cache_new();
    struct xchg xs[3];
    tmpdb_open(&t, "xchg");
    for (size_t i = 0; i < 3; i++) {
        struct jspan doc;
        assert_int_equal(jscan_doc(srcs[i], strlen(srcs[i]), &doc), 0);
        json_t *plain = jscan_json(&doc);
        xchg_init(&xs[i]);
        json_t *v = xchg_req_json(cache, &doc, &xs[i]);
        char *a = json_dumps(v, JSON_COMPACT);
        char *b = json_dumps(plain, JSON_COMPACT);
        assert_string_equal(a, b);
        free(a);
        free(b);
        json_decref(plain);
        assert_int_equal(xs[i].req_msg_n, want_n[i]);
        for (size_t k = 0; k < want_n[i]; k++)
            assert_int_equal(xs[i].req_msg_new[k], want_new[i][k]);
        xchg_release(&xs[i]);
        fill(&xs[i], "ses", v);
        /* the fields fill() cleared, set again */
        json_decref(xchg_req_json(cache, &doc, &xs[i]));
        xs[i].req_src = srcs[i];
        xs[i].req_src_len = strlen(srcs[i]);
    }
    json_t *m0 = json_object_get(xs[0].req_body, "messages");
    json_t *m1 = json_object_get(xs[1].req_body, "messages");
    assert_ptr_equal(json_array_get(m0, 0), json_array_get(m1, 0));
    assert_ptr_equal(json_array_get(m0, 1), json_array_get(m1, 1));
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(xchg_put_cached(t.db, cache, &xs[i], &d), 0);
    /* request 2's first two messages: hash by bytes, not dumped again */
    assert_int_equal(xchg_cache_memo_hits(cache), 2);
    struct collect c;
    memset(&c, 0, sizeof(c));
    assert_int_equal(xchg_each(t.db, NULL, collect_fn, &c, &d), 0);
    assert_int_equal(c.n, 3);
    for (int i = 0; i < 3; i++) {
        json_t *want = json_loads(srcs[i], 0, NULL);
        assert_true(json_equal(c.got[i].req_body, want));
        json_decref(want);
    }
    collect_release(&c);
    int chats = 0;
    assert_int_equal(xchg_each(t.db, NULL, check_hashes, &chats, &d), 0);
    assert_int_equal(chats, 2);
    for (int i = 0; i < 3; i++)
        xchg_release(&xs[i]);
    xchg_cache_free(cache);
    tmpdb_close(&t);
}

/* A message too big to keep (over a quarter of the 8 MiB budget) is built
 * again for each request that carries it; the small ones are shared. */
static void test_req_json_big_message_not_kept(void **state)
{
    (void)state;
    size_t big = (size_t)3 << 20;
    struct buf b = BUF_INIT;
    buf_adds(&b, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (size_t i = 0; i < big; i++)
        buf_addch(&b, 'a' + (char)(i % 26));
    buf_adds(&b, "\"},{\"role\":\"user\",\"content\":\"small\"}]}");
    struct xchg_cache *cache = xchg_cache_new();
    for (int round = 0; round < 2; round++) {
        struct jspan doc;
        struct xchg x;
        xchg_init(&x);
        assert_int_equal(jscan_doc(b.data, b.len, &doc), 0);
        json_t *v = xchg_req_json(cache, &doc, &x);
        json_t *want = json_loadb(b.data, b.len, 0, NULL);
        assert_true(json_equal(v, want));
        json_decref(want);
        assert_int_equal(x.req_msg_n, 2);
        assert_true(x.req_msg_new[0]);           /* never kept */
        assert_true(x.req_msg_new[1] == !round); /* kept after round 0 */
        json_decref(v);
        xchg_release(&x);
    }
    xchg_cache_free(cache);
    buf_release(&b);
}

/* Regression: a stored stream that could not be unpacked was read as a
 * NULL body with its stored length, and the reply was then derived from
 * "" with that length (AddressSanitizer: global-buffer-overflow in the
 * SSE line reader); the walk also failed for the whole store. The row is
 * now reported with its column and skipped, the others read. */
static void test_corrupt_stream_row_skipped(void **state)
{
    (void)state;
    struct tmpdb t;
    struct diag d = {{0}};
    tmpdb_open(&t, "xchg-corrupt");
    struct buf sse = BUF_INIT;
    for (int i = 0; i < 3; i++) {
        struct xchg x;
        fill(&x, i == 1 ? "bad" : "good", NULL);
        json_decref(x.reply);
        x.reply = NULL;
        buf_reset(&sse);
        for (int k = 0; k < 20; k++)
            buf_printf(&sse,
                       "data: {\"choices\":[{\"delta\":{\"content\":"
                       "\"w%d \"}}]}\n\n",
                       k);
        buf_adds(&sse, "data: [DONE]\n\n");
        free(x.resp_raw);
        x.resp_raw = xstrdup(buf_str(&sse));
        x.resp_raw_len = sse.len;
        x.reply_of_raw = true; /* derived from the stream when read */
        x.stream_gap_ms = 3;
        assert_int_equal(xchg_put(t.db, &x, &d), 0);
        xchg_release(&x);
    }
    buf_release(&sse);
    assert_int_equal(store_exec(t.db,
                                "UPDATE xchg SET resp_raw = x'0102030405'"
                                " WHERE id = 2",
                                &d),
                     0);
    struct seen s = {0};
    assert_int_equal(xchg_each_checked(t.db, NULL, seen_fn, seen_bad, &s, &d),
                     0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ids[0], 1);
    assert_int_equal(s.ids[1], 3);
    assert_int_equal(s.nbad, 1);
    assert_int_equal(s.bad[0].id, 2);
    assert_string_equal(s.bad[0].column, "resp_raw");
    /* the plain walk skips it too */
    memset(&s, 0, sizeof(s));
    assert_int_equal(xchg_each(t.db, NULL, seen_fn, &s, &d), 0);
    assert_int_equal(s.n, 2);
    tmpdb_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_chat),
        cmocka_unit_test(test_raw_bodies_and_session_filter),
        cmocka_unit_test(test_storage_growth_100_turns),
        cmocka_unit_test(test_stream_coding),
        cmocka_unit_test(test_params_hash_by_bytes),
        cmocka_unit_test(test_recent_bases_without_query),
        cmocka_unit_test(test_rebuild_exact),
        cmocka_unit_test(test_views_exact),
        cmocka_unit_test(test_spill_roundtrip_and_torn_line),
        cmocka_unit_test(test_message_hash_by_bytes),
        cmocka_unit_test(test_batch_failure_isolated),
        cmocka_unit_test(test_req_json_shares_messages),
        cmocka_unit_test(test_req_json_big_message_not_kept),
        cmocka_unit_test(test_corrupt_stream_row_skipped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
