/*
 * Tests of `fidelity show` (src/cmd/cmd_show.c) on what a newcomer meets:
 * an exchange whose server reported no usage shows '-' for its tokens (not
 * -1), and an exchange that `record` answered itself because the upstream
 * was down shows the 502 the client got, and says record gave it; a
 * request whose messages hold non-object elements ([{...}, 5], [null]) is
 * read by sessions, show and audit (kept as sent, a finding says what is
 * malformed), never skipped so that its session vanishes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "store/store.h"
#include "util/proc.h"
#include "util/rec.h"
#include "util/upstream.h"
#include "util/xchg_build.h"

static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = rec_tmpdir();
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rec_rmdir(dir);
    return 0;
}

/* The line of the output that starts with "#id ". */
static const char *row(const char *out, long long id, char *line, size_t n)
{
    char tag[32];
    snprintf(tag, sizeof(tag), "\n#%-5lld ", id);
    const char *p = strstr(out, tag);
    assert_non_null(p);
    p++;
    size_t k = strcspn(p, "\n");
    snprintf(line, n, "%.*s", (int)k, p);
    return line;
}

static void test_show_unknown_usage_is_dash(void **state)
{
    (void)state;
    char *db = xasprintf("%s/nousage.db", dir), line[512];
    struct db *s;
    struct diag d;
    struct xchg x;
    assert_int_equal(store_open(db, &s, &d), 0);
    assert_int_equal(xchg_schema(s, &d), 0);
    xb_init(&x, 0, "ses_nousage",
            xb_body("m", json_pack("[o]", xb_msg("user", "Hello there."))));
    x.kind = xstrdup("main");
    xb_reply(&x, "Hi.", NULL, NULL, -1, -1, "stop");
    assert_int_equal(xchg_put(s, &x, &d), 0);
    long long id = (long long)x.id;
    xb_release(&x);
    store_close(s);

    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *argv[] = {"show", "ses_nousage", "--db", db, NULL};
    assert_int_equal(proc_run(argv, NULL, &out, &err, 30), 0);
    print_message("%s", buf_str(&out));
    /* one of each: no "(s)", no "1 exchanges" */
    assert_non_null(strstr(buf_str(&out), "  1 exchange\n"));
    assert_non_null(strstr(buf_str(&out), "(main, 1 request) sent: (none); "));
    assert_null(strstr(buf_str(&out), "(s)"));
    row(buf_str(&out), id, line, sizeof(line));
    assert_non_null(strstr(line, "prompt      -  compl     -  stop"));
    assert_non_null(strstr(line, " 200  ttfb "));
    assert_null(strstr(buf_str(&out), "-1"));
    buf_release(&out);
    buf_release(&err);
    free(db);
}

static void test_show_status_record_answered_itself(void **state)
{
    (void)state;
    char *db = xasprintf("%s/down.db", dir), line[512];
    /* a port nobody listens on: start a server, then stop it */
    struct upstream *u = upstream_start();
    assert_non_null(u);
    char *down = xstrdup(upstream_url(u));
    upstream_stop(u);
    struct proc rec;
    assert_int_equal(rec_start_record(&rec, down, db, NULL), 0);
    char *url = xasprintf("http://127.0.0.1:%d/v1/chat/completions", rec.port);
    const char *h[] = {"Content-Type: application/json",
                       "x-session-affinity: ses_down", NULL};
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
                       "\"content\":\"Hello there.\"}]}";
    struct rec_resp r;
    rec_resp_init(&r);
    assert_int_equal(rec_fetch(url, body, strlen(body), h, 0, &r), 0);
    assert_int_equal(r.status, 502);
    rec_resp_release(&r);
    assert_int_equal(proc_stop(&rec), 0);

    /* the session id record gave it */
    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *ls[] = {"sessions", "--db", db, "--json", "-", NULL};
    assert_int_equal(proc_run(ls, NULL, &out, &err, 30), 0);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    json_t *s0 = json_array_get(json_object_get(j, "sessions"), 0);
    assert_non_null(s0);
    char *ses = xstrdup(json_string_value(json_object_get(s0, "session")));
    json_decref(j);
    buf_reset(&out);
    const char *ls_text[] = {"sessions", "--db", db, NULL};
    assert_int_equal(proc_run(ls_text, NULL, &out, &err, 30), 0);
    assert_non_null(strstr(buf_str(&out), "\n1 session\n"));
    buf_reset(&out);

    const char *sh[] = {"show", ses, "--db", db, NULL};
    assert_int_equal(proc_run(sh, NULL, &out, &err, 30), 0);
    print_message("%s", buf_str(&out));
    row(buf_str(&out), 1, line, sizeof(line));
    assert_non_null(strstr(line, " 502  ttfb -  "));
    assert_non_null(strstr(line, "(answered by record: no upstream response)"));
    assert_non_null(strstr(line, "prompt      -  compl     -"));
    assert_null(strstr(line, "-1"));
    buf_reset(&out);
    const char *shj[] = {"show", ses, "--db", db, "--json", "-", NULL};
    assert_int_equal(proc_run(shj, NULL, &out, &err, 30), 0);
    j = json_loads(buf_str(&out), 0, NULL);
    json_t *t = json_array_get(json_object_get(j, "turns"), 0);
    assert_int_equal(json_integer_value(json_object_get(t, "status")), 502);
    assert_string_equal(json_string_value(json_object_get(t, "answered_by")),
                        "record");
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
    free(ses);
    free(url);
    free(down);
    free(db);
}

/* The findings of rule in audit's JSON output. */
static size_t count_findings(const char *out, const char *rule, json_t **first)
{
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    json_t *fs = json_object_get(j, "findings"), *f;
    size_t i, n = 0;
    json_array_foreach(fs, i, f)
    {
        const char *r = json_string_value(json_object_get(f, "rule"));
        if (r && !strcmp(r, rule)) {
            if (!n++ && first)
                *first = json_incref(f);
        }
    }
    json_decref(j);
    return n;
}

static void test_non_object_messages_are_read(void **state)
{
    (void)state;
    char *db = xasprintf("%s/odd.db", dir);
    struct db *s;
    struct diag d;
    struct xchg x;
    assert_int_equal(store_open(db, &s, &d), 0);
    assert_int_equal(xchg_schema(s, &d), 0);
    xb_init(
        &x, 0, "ses_odd",
        xb_body("m", json_pack("[o, i]", xb_msg("user", "Hello there."), 5)));
    x.kind = xstrdup("main");
    xb_reply(&x, "Hi.", NULL, NULL, 10, 2, "stop");
    assert_int_equal(xchg_put(s, &x, &d), 0);
    xb_release(&x);
    xb_init(&x, 0, "ses_null", xb_body("m", json_pack("[n]")));
    x.kind = xstrdup("main");
    xb_reply(&x, "Hi.", NULL, NULL, 10, 2, "stop");
    assert_int_equal(xchg_put(s, &x, &d), 0);
    xb_release(&x);
    store_close(s);

    struct buf out = BUF_INIT, err = BUF_INIT;
    const char *ls[] = {"sessions", "--db", db, NULL};
    assert_int_equal(proc_run(ls, NULL, &out, &err, 30), 0);
    print_message("%s%s", buf_str(&out), buf_str(&err));
    assert_non_null(strstr(buf_str(&out), "ses_odd"));
    assert_non_null(strstr(buf_str(&out), "ses_null"));
    assert_null(strstr(buf_str(&err), "store.corrupt"));
    buf_reset(&out);
    buf_reset(&err);
    const char *sh[] = {"show", "ses_odd", "--db", db, NULL};
    assert_int_equal(proc_run(sh, NULL, &out, &err, 30), 0);
    assert_non_null(strstr(buf_str(&out), "  1 exchange\n"));
    buf_reset(&out);
    const char *shn[] = {"show", "ses_null", "--db", db, NULL};
    assert_int_equal(proc_run(shn, NULL, &out, &err, 30), 0);
    buf_reset(&out);
    buf_reset(&err);
    const char *au[] = {"audit", "--db", db, "--json", "-", NULL};
    proc_run(au, NULL, &out, &err, 30);
    assert_int_equal(count_findings(buf_str(&out), "store.corrupt", NULL), 0);
    json_t *f = NULL;
    assert_int_equal(
        count_findings(buf_str(&out), "request.malformed_messages", &f), 2);
    const char *sum = json_string_value(json_object_get(f, "summary"));
    print_message("%s\n", sum);
    assert_non_null(strstr(sum, "messages[1] is a number"));
    json_decref(f);
    buf_release(&out);
    buf_release(&err);
    free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_show_unknown_usage_is_dash),
        cmocka_unit_test(test_show_status_record_answered_itself),
        cmocka_unit_test(test_non_object_messages_are_read),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
