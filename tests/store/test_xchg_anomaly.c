/*
 * Anomaly test of the store reader (src/store/xchg.c), in the manner of
 * SQLite's: a store of four exchanges, one of each row kind (a chat request
 * with a JSON body deflated, a streamed chat request with tools and its
 * event stream coded by ldelta, a raw request body, a short response
 * stored as it is), is damaged one column of one row at a time (a
 * truncated blob, foreign bytes, NULL, a length larger than the data, an
 * out-of-range number, a blob of the blob table), and the real commands
 * read it: `audit`, `sessions`, `show` and `drift --from-db` (against one
 * `fidelity sim` on both sides). Each must exit with its documented code
 * and no sanitizer report (run it with the ASan/UBSan binary:
 * FIDELITY_BIN=build-san/fidelity), audit must name the damaged row and
 * column in a store.corrupt finding, and every other row must still be
 * reported. Damage a reader cannot tell from data (NULL in a column that
 * may be NULL) must leave the row readable.
 *
 * The store is created with the xchg tables' own schema minus its NOT NULL
 * constraints, so that a NULL can be put where a damaged file could have
 * one.
 */
#include <jansson.h>
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
#include "util/proc.h"
#include "util/rec.h"

#define NROWS 4
static const char *const SESSION[NROWS + 1] = {"", "s-json", "s-stream",
                                               "s-raw", "s-small"};

struct fx {
    char *dir;
    char pristine[256];
    long long msg_h[NROWS + 1]; /* first message blob of each chat row */
    long long params_h[NROWS + 1], tools_h;
    struct proc sim;
    bool sim_up;
    int drift_rc; /* drift --from-db on the undamaged store */
};

/* The xchg tables as xchg_schema creates them, without NOT NULL. */
static void lax_schema(struct db *db)
{
    struct db *mem = NULL;
    struct diag d = {{0}};
    struct db_stmt *st = NULL;
    assert_int_equal(store_open(":memory:", &mem, &d), 0);
    assert_int_equal(xchg_schema(mem, &d), 0);
    assert_int_equal(db_prepare(mem,
                                "SELECT sql FROM sqlite_master WHERE"
                                " type='table' AND name LIKE 'xchg%'",
                                &st),
                     DB_OK);
    int n = 0;
    while (db_step(st) == DB_ROW) {
        struct buf b = BUF_INIT;
        const char *s = (const char *)db_column_text(st, 0);
        for (const char *p = s; *p;) {
            if (!strncmp(p, " NOT NULL", 9)) {
                p += 9;
                continue;
            }
            buf_add(&b, p++, 1);
        }
        assert_int_equal(db_exec(db, buf_str(&b), NULL), DB_OK);
        buf_release(&b);
        n++;
    }
    assert_int_equal(n, 3); /* exchanges, blobs and the edit count */
    db_finalize(st);
    db_close(mem);
}

static void base_xchg(struct xchg *x, int row, const char *path)
{
    xchg_init(x);
    x->session = xstrdup(SESSION[row]);
    x->kind = xstrdup(row == 3 ? "other" : "main");
    x->started = 1795990000.0 + row;
    x->method = xstrdup("POST");
    x->path = xstrdup(path);
    x->req_headers = json_pack("{s:s, s:s}", "user-agent", "anomaly/1",
                               "content-type", "application/json");
    x->resp_headers =
        json_pack("{s:s}", "content-type",
                  row == 2 ? "text/event-stream" : "application/json");
    x->status = 200;
    x->up_ttfb_ms = 1;
    x->up_total_ms = 5;
    x->down_ttfb_ms = 1.1;
    x->down_total_ms = 5.1;
}

static void set_raw(char **p, size_t *n, const char *s)
{
    *n = strlen(s);
    *p = xstrdup(s);
}

/* A chat body whose system message and parameters (the seed) are the
 * row's own: no blob is shared with another row. */
static json_t *chat_body(int row, const char *who, bool tools)
{
    json_t *b = json_pack("{s:s, s:i, s:[{s:s, s:s}, {s:s, s:s}]}", "model",
                          "fidelity-sim", "seed", row, "messages", "role",
                          "system", "content", who, "role", "user", "content",
                          "Tell me about the blue door; its code is 4812.");
    if (tools) {
        json_object_set_new(b, "stream", json_true());
        json_object_set_new(b, "tools",
                            json_pack("[{s:s, s:{s:s, s:{s:s}}}]", "type",
                                      "function", "function", "name", "read",
                                      "parameters", "type", "object"));
    }
    return b;
}

static void put_rows(struct db *db)
{
    struct diag d = {{0}};
    struct xchg x;
    struct buf b = BUF_INIT;
    /* 1: chat, a JSON body long enough to be deflated, reply derived */
    base_xchg(&x, 1, "/v1/chat/completions");
    x.req_body = chat_body(1, "You answer in JSON.", false);
    buf_adds(&b, "{\"id\":\"c1\",\"object\":\"chat.completion\",\"choices\":[{"
                 "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
                 "\"");
    /* words drawn by a fixed LCG: long enough to be deflated, not so
     * repetitive that audit calls the reply degenerate */
    static const char *const words[] = {
        "door",  "blue", "code", "opens", "the",   "with",  "room",  "key",
        "north", "hall", "lamp", "stair", "green", "seven", "under", "over"};
    uint32_t seed = 12345;
    for (int i = 0; i < 1500; i++) {
        seed = seed * 1103515245u + 12345u;
        buf_printf(&b, "%s%u ", words[seed >> 28], (seed >> 16) % 97);
    }
    buf_adds(&b, "\"},\"finish_reason\":\"stop\"}],\"usage\":{"
                 "\"prompt_tokens\":30,\"completion_tokens\":900,"
                 "\"total_tokens\":930}}");
    set_raw(&x.resp_raw, &x.resp_raw_len, buf_str(&b));
    x.reply_of_raw = true;
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xchg_release(&x);
    buf_reset(&b);
    /* 2: streamed chat with tools, the stream coded by ldelta, the reply
     * derived from it and the stored gap */
    base_xchg(&x, 2, "/v1/chat/completions");
    x.req_body = chat_body(2, "You stream your answers.", true);
    x.streamed = true;
    for (int i = 0; i < 8; i++)
        buf_printf(&b,
                   "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\","
                   "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d "
                   "\"},\"finish_reason\":null}]}\n\n",
                   i);
    buf_adds(&b, "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\","
                 "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
                 "\"stop\"}]}\n\ndata: [DONE]\n\n");
    set_raw(&x.resp_raw, &x.resp_raw_len, buf_str(&b));
    x.reply_of_raw = true;
    x.stream_gap_ms = 12.5;
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xchg_release(&x);
    buf_reset(&b);
    /* 3: a request that is not chat, stored raw and deflated; the reply an
     * object */
    base_xchg(&x, 3, "/v1/completions");
    buf_adds(&b, "{\"model\":\"fidelity-sim\",\"prompt\":\"");
    for (int i = 0; i < 100; i++)
        buf_adds(&b, "complete this sentence please, ");
    buf_adds(&b, "\"}");
    set_raw(&x.req_raw, &x.req_raw_len, buf_str(&b));
    x.req_body = json_loads(buf_str(&b), 0, NULL);
    set_raw(&x.resp_raw, &x.resp_raw_len,
            "{\"choices\":[{\"text\":\"done\",\"index\":0}]}");
    x.reply = json_pack("{s:s, s:b}", "content", "done", "done", 1);
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xchg_release(&x);
    buf_reset(&b);
    /* 4: chat, a short body stored as it is, the reply an object */
    base_xchg(&x, 4, "/v1/chat/completions");
    x.req_body = chat_body(4, "You are brief.", false);
    set_raw(&x.resp_raw, &x.resp_raw_len,
            "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":"
            "\"4812\"},\"finish_reason\":\"stop\"}]}");
    x.reply = json_pack("{s:s, s:s, s:b}", "content", "4812", "finish_reason",
                        "stop", "done", 1);
    assert_int_equal(xchg_put(db, &x, &d), 0);
    xchg_release(&x);
    buf_release(&b);
}

static long long query_int(struct db *db, const char *sql)
{
    struct db_stmt *st = NULL;
    assert_int_equal(db_prepare(db, sql, &st), DB_OK);
    assert_int_equal(db_step(st), DB_ROW);
    long long v = db_column_int64(st, 0);
    db_finalize(st);
    return v;
}

/* The first message hash of row id (req_msgs: 8-byte big-endian). */
static long long first_msg(struct db *db, int id)
{
    struct db_stmt *st = NULL;
    char *sql = xasprintf("SELECT req_msgs FROM xchg WHERE id=%d", id);
    assert_int_equal(db_prepare(db, sql, &st), DB_OK);
    free(sql);
    assert_int_equal(db_step(st), DB_ROW);
    assert_true(db_column_bytes(st, 0) >= 8);
    const unsigned char *p = db_column_blob(st, 0);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    db_finalize(st);
    return (long long)v;
}

static int run(const char *const argv[], struct buf *out, struct buf *err)
{
    buf_reset(out);
    buf_reset(err);
    int rc = proc_run(argv, NULL, out, err, 120);
    if (strstr(buf_str(err), "Sanitizer") ||
        strstr(buf_str(err), "runtime error"))
        fail_msg("sanitizer report from '%s':\n%s", argv[0], buf_str(err));
    return rc;
}

static int drift_run_db(const struct fx *f, const char *db, struct buf *out,
                        struct buf *err)
{
    char *url = xstrdup(proc_url(&f->sim));
    /* the corpus is what is tested: one pass per side, no decode path */
    const char *argv[] = {
        "drift",      "--golden",     url,         "--candidate",
        url,          "--from-db",    "--db",      db,
        "--no-store", "--no-control", "--no-self", "--decode-tokens",
        "0",          "--bootstrap",  "10",        NULL};
    int rc = run(argv, out, err);
    free(url);
    return rc;
}

static int setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    struct db *db = NULL;
    struct diag d = {{0}};
    f->dir = rec_tmpdir();
    snprintf(f->pristine, sizeof(f->pristine), "%s/pristine.db", f->dir);
    *state = f;
    if (store_open(f->pristine, &db, &d))
        return -1;
    lax_schema(db);
    assert_int_equal(xchg_schema(db, &d), 0);
    put_rows(db);
    for (int id = 1; id <= NROWS; id++) {
        if (id == 3)
            continue;
        char *sql = xasprintf("SELECT req_params FROM xchg WHERE id=%d", id);
        f->params_h[id] = query_int(db, sql);
        free(sql);
        f->msg_h[id] = first_msg(db, id);
    }
    f->tools_h = query_int(db, "SELECT req_tools FROM xchg WHERE id=2");
    store_close(db);
    const char *argv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    if (proc_start(&f->sim, argv))
        return -1;
    f->sim_up = true;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->sim_up)
        proc_stop(&f->sim);
    if (getenv("ANOMALY_KEEP")) /* to look at a failure */
        print_message("kept '%s'\n", f->dir);
    else
        rec_rmdir(f->dir);
    free(f);
    return 0;
}

/* What a case damages: a column of an exchange row (%d: the row's id), or
 * a blob of the blob table (%lld: its hash) that row refers to. */
enum target { ROW = 0, MSG_BLOB, PARAMS_BLOB, TOOLS_BLOB };

struct ccase {
    int row;
    enum target t;
    const char *sql;
    const char *column; /* reported in store.corrupt; NULL: still read */
};

#define U(set) "UPDATE xchg SET " set " WHERE id=%d"
#define B(set) "UPDATE xchg_blob SET " set " WHERE h=%lld"
#define TRUNC(c) U(c " = substr(" c ", 1, length(" c ") / 2)")
#define BYTES(c) U(c " = x'c328a0ff00fe41de'")
#define BADTEXT(c) U(c " = CAST(x'41ff4200' AS TEXT)")
#define NUL(c) U(c " = NULL")

static const struct ccase CASES[] = {
    /* every row: the columns all rows have */
    {1, ROW, BYTES("session"), "session"},
    {2, ROW, NUL("session"), "session"},
    {3, ROW, BADTEXT("session"), "session"},
    {4, ROW, BYTES("kind"), "kind"},
    {1, ROW, NUL("kind"), "kind"},
    {2, ROW, U("started = 'yesterday'"), "started"},
    {3, ROW, NUL("started"), "started"},
    {4, ROW, BYTES("started"), "started"},
    {1, ROW, NUL("method"), "method"},
    {2, ROW, BADTEXT("path"), "path"},
    {3, ROW, U("req_headers = '{\"a\":'"), "req_headers"},
    {4, ROW, U("req_headers = '[1,2]'"), "req_headers"},
    {1, ROW, BYTES("req_headers"), "req_headers"},
    {2, ROW, NUL("req_headers"), NULL},
    {3, ROW, U("req_malformed = 7"), "req_malformed"},
    {4, ROW, NUL("req_malformed"), "req_malformed"},
    {1, ROW, BYTES("status"), "status"},
    {2, ROW, U("status = 100000"), "status"},
    {3, ROW, U("resp_headers = 'null'"), "resp_headers"},
    {4, ROW, NUL("resp_headers"), NULL},
    {1, ROW, U("streamed = 2"), "streamed"},
    {2, ROW, BYTES("streamed"), "streamed"},
    {1, ROW, U("up_ttfb_ms = 'fast'"), "up_ttfb_ms"},
    {2, ROW, BYTES("down_total_ms"), "down_total_ms"},
    {3, ROW, NUL("up_total_ms"), NULL},
    {4, ROW, U("ending = 99"), "ending"},
    {1, ROW, U("ending = -1"), "ending"},
    {2, ROW, BYTES("ending"), "ending"},
    {3, ROW, U("req_redacted = 'x'"), "req_redacted"},
    /* the response: deflated (1), ldelta (2), as it is (3, 4) */
    {1, ROW, TRUNC("resp_raw"), "resp_raw"},
    {2, ROW, TRUNC("resp_raw"), "resp_raw"},
    {4, ROW, TRUNC("resp_raw"), "resp_raw"},
    {1, ROW, BYTES("resp_raw"), "resp_raw"},
    {2, ROW, BYTES("resp_raw"), "resp_raw"},
    {3, ROW, BYTES("resp_raw"), "resp_raw"},
    {1, ROW, U("resp_raw_len = resp_raw_len * 3 + 1"), "resp_raw"},
    {2, ROW, U("resp_raw_len = resp_raw_len + 100000"), "resp_raw"},
    {4, ROW, U("resp_raw_len = resp_raw_len + 1"), "resp_raw"},
    {3, ROW, U("resp_raw_len = 1099511627776"), "resp_raw"},
    {1, ROW, U("resp_raw_len = -5"), "resp_raw"},
    {2, ROW, NUL("resp_raw_len"), "resp_raw"},
    {4, ROW, U("resp_raw_zip = 9"), "resp_raw"},
    {2, ROW, U("resp_raw_zip = 1"), "resp_raw"},
    {2, ROW, NUL("resp_raw"), NULL},
    /* the reply: derived from the body (1) or the stream (2), an object
     * (3, 4) */
    {1, ROW, BYTES("reply"), "reply"},
    {2, ROW, U("reply = '12x'"), "reply"},
    {3, ROW, U("reply = '{\"content\":'"), "reply"},
    {4, ROW, U("reply = '[]'"), "reply"},
    {4, ROW, NUL("reply"), NULL},
    /* the raw request body (3) */
    {3, ROW, TRUNC("req_raw"), "req_raw"},
    {3, ROW, BYTES("req_raw"), "req_raw"},
    {3, ROW, U("req_raw_len = req_raw_len * 2000"), "req_raw"},
    {3, ROW, U("req_raw_zip = 'deflate'"), "req_raw"},
    /* a chat request's parts: parameters, tools, message list */
    {1, ROW, U("req_params = 'abc'"), "req_params"},
    {4, ROW, U("req_params = 12345"), "req_params"},
    {2, ROW, U("req_tools = 999"), "req_tools"},
    {2, ROW, BYTES("req_tools"), "req_tools"},
    {1, ROW, U("req_msgs = substr(req_msgs, 1, length(req_msgs) - 3)"),
     "req_msgs"},
    {4, ROW, U("req_msgs = x'00112233445566778899aabbccddeeff'"), "req_msgs"},
    {2, ROW, U("req_prefix = 3"), "req_msgs"},
    {1, ROW, U("req_prefix = 'x'"), "req_msgs"},
    {4, ROW, U("req_prefix = -1"), "req_msgs"},
    {2, ROW, U("req_base = 2, req_prefix = 1"), "req_msgs"},
    {1, ROW, NUL("req_msgs"), NULL},
    /* the blob table */
    {1, MSG_BLOB, B("z = substr(z, 1, length(z) / 2)"), "req_msgs"},
    {2, MSG_BLOB, B("z = x'c328a0ff00fe41de'"), "req_msgs"},
    {4, MSG_BLOB, B("z = NULL"), "req_msgs"},
    {1, MSG_BLOB, B("raw_len = raw_len * 5000 + 3"), "req_msgs"},
    {2, MSG_BLOB, B("raw_len = NULL"), "req_msgs"},
    {4, MSG_BLOB, B("zip = 7"), "req_msgs"},
    /* valid JSON that is not an object is a message as sent (kept, and
     * audit's request.malformed_messages); foreign bytes are damage */
    {1, MSG_BLOB, B("z = '[1', raw_len = 2, zip = 0"), "req_msgs"},
    {2, PARAMS_BLOB, B("z = substr(z, 1, length(z) / 2)"), "req_params"},
    {4, PARAMS_BLOB, B("z = '7', raw_len = 1, zip = 0"), "req_params"},
    {1, PARAMS_BLOB, B("raw_len = 1099511627776"), "req_params"},
    {2, TOOLS_BLOB, B("z = '{}', raw_len = 2, zip = 0"), "req_tools"},
    {2, TOOLS_BLOB, B("z = x'ff', raw_len = 1, zip = 0"), "req_tools"},
};

/* The session names of a `sessions --json` report, as a bit set by row. */
static unsigned sessions_listed(json_t *rep)
{
    unsigned seen = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(rep, "sessions"), i, s)
    {
        const char *name = json_string_value(json_object_get(s, "session"));
        for (int r = 1; r <= NROWS; r++)
            if (name && !strcmp(name, SESSION[r]))
                seen |= 1u << r;
    }
    return seen;
}

static void damage(const struct fx *f, const struct ccase *k, const char *db)
{
    struct buf bytes = BUF_INIT;
    assert_int_equal(rec_read_file(f->pristine, &bytes), 0);
    FILE *o = fopen(db, "wb");
    assert_non_null(o);
    assert_int_equal(fwrite(bytes.data, 1, bytes.len, o), bytes.len);
    fclose(o);
    buf_release(&bytes);
    long long h = k->t == MSG_BLOB      ? f->msg_h[k->row]
                  : k->t == PARAMS_BLOB ? f->params_h[k->row]
                                        : f->tools_h;
    char *sql = k->t == ROW ? xasprintf(k->sql, k->row) : xasprintf(k->sql, h);
    struct db *s = NULL;
    struct diag d = {{0}};
    assert_int_equal(store_open(db, &s, &d), 0);
    char *err = NULL;
    if (db_exec(s, sql, &err) != DB_OK || db_changes(s) != 1)
        fail_msg("'%s': %s", sql, err ? err : "no row changed");
    db_close(s);
    free(sql);
}

/* audit: exit 1 with a store.corrupt finding naming the row and column;
 * none when the damage leaves the row readable (the exit is then 0, or 1
 * for what the rules find in the row as read: a stream gone is a stream
 * without [DONE]). */
static void check_audit(const struct ccase *k, const char *db, struct buf *out,
                        struct buf *err)
{
    const char *argv[] = {"audit", "--db", db, "--json", "-", NULL};
    int rc = run(argv, out, err);
    if (k->column ? rc != 1 : rc != 0 && rc != 1)
        fail_msg("audit exited %d: %s", rc, buf_str(err));
    json_t *rep = json_loads(buf_str(out), 0, NULL);
    assert_non_null(rep);
    size_t i, n = 0;
    json_t *f;
    json_array_foreach(json_object_get(rep, "findings"), i, f)
    {
        if (strcmp(json_string_value(json_object_get(f, "rule")),
                   "store.corrupt"))
            continue;
        n++;
        json_t *ev = json_object_get(f, "evidence");
        assert_int_equal(json_integer_value(json_object_get(f, "request")),
                         k->row);
        assert_int_equal(json_integer_value(json_object_get(ev, "exchange")),
                         k->row);
        if (!k->column ||
            strcmp(json_string_value(json_object_get(ev, "column")), k->column))
            fail_msg("store.corrupt names column '%s', not '%s'",
                     json_string_value(json_object_get(ev, "column")),
                     k->column ? k->column : "(none)");
    }
    assert_int_equal(n, k->column ? 1 : 0);
    json_decref(rep);
}

/* sessions: exit 0, every other session listed, the damaged row named on
 * stderr; show: the other sessions shown, the damaged one's (its only
 * row) a usage error naming the row. */
static void check_sessions_show(const struct ccase *k, const char *db,
                                struct buf *out, struct buf *err)
{
    char *named = xasprintf("store.corrupt: exchange %d ", k->row);
    const char *argv[] = {"sessions", "--db", db, "--json", "-", NULL};
    assert_int_equal(run(argv, out, err), 0);
    json_t *rep = json_loads(buf_str(out), 0, NULL);
    assert_non_null(rep);
    unsigned all = ((1u << (NROWS + 1)) - 1) & ~1u;
    unsigned want = k->column ? all & ~(1u << k->row) : all;
    assert_int_equal(sessions_listed(rep), want);
    json_decref(rep);
    assert_int_equal(strstr(buf_str(err), named) != NULL, k->column != NULL);
    /* the damaged row's session and the next one */
    for (int r = 1; r <= NROWS; r++) {
        if (r != k->row && r != k->row % NROWS + 1)
            continue;
        const char *sv[] = {"show",   SESSION[r], "--db", db,
                            "--json", "-",        NULL};
        int rc = run(sv, out, err);
        if (k->column && r == k->row) {
            /* a damaged session column no longer names the session */
            assert_int_equal(rc, 2);
            if (strcmp(k->column, "session"))
                assert_non_null(strstr(buf_str(err), named));
            continue;
        }
        assert_int_equal(rc, 0);
        rep = json_loads(buf_str(out), 0, NULL);
        assert_int_equal(json_array_size(json_object_get(rep, "turns")), 1);
        json_decref(rep);
    }
    free(named);
}

/* drift --from-db: the same exit as on the undamaged store, the damaged
 * row named on stderr. */
static void check_drift(const struct fx *f, const struct ccase *k,
                        const char *db, struct buf *out, struct buf *err)
{
    char *named = xasprintf("store.corrupt: exchange %d:", k->row);
    int rc = drift_run_db(f, db, out, err);
    if (rc != f->drift_rc)
        fail_msg("drift exited %d, %d undamaged: %s", rc, f->drift_rc,
                 buf_str(err));
    assert_int_equal(strstr(buf_str(err), named) != NULL, k->column != NULL);
    free(named);
}

static void test_undamaged_store_reads_clean(void **state)
{
    struct fx *f = *state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    struct ccase none = {0, ROW, NULL, NULL};
    const char *argv[] = {"audit", "--db", f->pristine, "--json", "-", NULL};
    assert_int_equal(run(argv, &out, &err), 0);
    for (int r = 1; r <= NROWS; r += 2) {
        none.row = r;
        check_sessions_show(&none, f->pristine, &out, &err);
    }
    f->drift_rc = drift_run_db(f, f->pristine, &out, &err);
    if (f->drift_rc != 0)
        fail_msg("drift on the undamaged store exited %d: %s", f->drift_rc,
                 buf_str(&err));
    assert_null(strstr(buf_str(&err), "store.corrupt"));
    buf_release(&out);
    buf_release(&err);
}

static void test_each_column_damaged(void **state)
{
    struct fx *f = *state;
    struct buf out = BUF_INIT, err = BUF_INIT;
    char *db = xasprintf("%s/damaged.db", f->dir);
    for (size_t i = 0; i < sizeof(CASES) / sizeof(*CASES); i++) {
        const struct ccase *k = &CASES[i];
        print_message("case %zu: row %d: %s\n", i, k->row, k->sql);
        damage(f, k, db);
        check_audit(k, db, &out, &err);
        check_sessions_show(k, db, &out, &err);
        /* drift (a second per run) for the first case of each column */
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = !(CASES[j].column && k->column &&
                      !strcmp(CASES[j].column, k->column)) &&
                    !(!CASES[j].column && !k->column);
        if (first)
            check_drift(f, k, db, &out, &err);
        unlink(db);
    }
    free(db);
    buf_release(&out);
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_undamaged_store_reads_clean),
        cmocka_unit_test(test_each_column_damaged),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
