/*
 * The saved golden's file (src/drift/tape.c) on its own: answers written
 * with drift_tape_put and committed come back from drift_tape_load byte
 * for byte, whatever they hold (numbers of every spelling, integers too
 * large for a varint, leading zeros, the section markers' own bytes, bytes
 * that are not UTF-8, an empty answer), a request asked twice gets its
 * answers in order, the numbers really leave the answers' text (the
 * compressed file is smaller than the same answers as JSON strings), and a
 * version 1 file (answers as JSON strings) is still read.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <xxhash.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/diag.h"
#include "core/xalloc.h"
#include "drift/tape.h"

static char dir[] = "/tmp/fidelity-tape-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    return rc;
}

struct ans {
    const char *body;
    const char *text;
    size_t len;
};

static const char nasty[] = "{\"a\":[-1.2410111858603337,0,-0,007,1e5,"
                            "-2.5E-7,3.,1.e4,99999999999999999999,"
                            "123456789012345678,\"token_id:22109033\","
                            "\"x1.5\",\"2026-12-02\"],\"m\":\"\001\002\003"
                            "\",\"z\":-}\n";
static const char binary[] = "\377\376\001\0021.5\0039\200";

#define LIT(s) s, sizeof(s) - 1
static const struct ans answers[] = {
    {"{\"p\":1}", LIT(nasty)},
    {"{\"p\":2}", LIT(binary)},
    {"{\"p\":3}", LIT("")},
    {"{\"p\":1}", LIT("second answer 2 of the same request 0.5")},
    {NULL, LIT("{\"object\":\"list\",\"data\":[{\"id\":\"m-7b\"}]}")},
};
#define N_ANS (sizeof(answers) / sizeof(*answers))

static void put_all(struct drift_tape *t)
{
    for (size_t i = 0; i < N_ANS; i++)
        drift_tape_put(t, answers[i].body ? "POST" : "GET",
                       answers[i].body ? "/v1/completions" : "/v1/models",
                       answers[i].body, 200 + (long)i, answers[i].text,
                       answers[i].len);
}

static void check_all(struct drift_tape *t)
{
    struct diag d = {0};
    for (size_t i = 0; i < N_ANS; i++) {
        struct buf b = BUF_INIT;
        long st = 0;
        assert_int_equal(
            drift_tape_get(t, answers[i].body ? "POST" : "GET",
                           answers[i].body ? "/v1/completions" : "/v1/models",
                           answers[i].body, &st, &b, &d),
            0);
        assert_int_equal(st, 200 + (long)i);
        assert_int_equal(b.len, answers[i].len);
        assert_memory_equal(b.len ? b.data : "", answers[i].text,
                            answers[i].len);
        buf_release(&b);
    }
    struct buf b = BUF_INIT;
    long st;
    assert_int_equal(
        drift_tape_get(t, "POST", "/v1/completions", "{\"p\":1}", &st, &b, &d),
        -ENOENT);
    assert_non_null(strstr(d.msg, "no more answer"));
    buf_release(&b);
}

static void test_round_trip_byte_for_byte(void **state)
{
    (void)state;
    char *path = xasprintf("%s/rt.fgold", dir);
    struct diag d = {0};
    struct drift_tape *t = drift_tape_new_record();
    put_all(t);
    assert_int_equal(
        drift_tape_commit(t, json_pack("{s:s}", "who", "test"), path, &d), 0);
    drift_tape_free(t);
    t = drift_tape_load(path, &d);
    if (!t)
        fail_msg("%s", d.msg);
    assert_int_equal(drift_tape_count(t), N_ANS);
    assert_int_equal(
        json_integer_value(json_object_get(drift_tape_header(t), "version")),
        DRIFT_TAPE_VERSION);
    check_all(t);
    drift_tape_free(t);
    free(path);
}

/* The answers of a prompt-logprobs request, as a server writes them. */
static char *logprob_answer(unsigned seed)
{
    struct buf b = BUF_INIT;
    buf_adds(&b, "{\"prompt_logprobs\":[null");
    for (unsigned p = 0; p < 200; p++) {
        buf_addch(&b, ',');
        buf_addch(&b, '{');
        for (unsigned k = 0; k < 20; k++) {
            seed = seed * 1103515245u + 12345u;
            buf_printf(&b,
                       "%s\"%u\":{\"logprob\":-%u.%016u,\"rank\":%u,"
                       "\"decoded_token\":\"t%u\"}",
                       k ? "," : "", seed % 150000, k, seed % 10000000u, k + 1,
                       seed % 150000);
        }
        buf_addch(&b, '}');
    }
    buf_adds(&b, "]}");
    return buf_detach(&b, NULL);
}

/* Writes the version 1 layout of the same exchanges: the answers as JSON
 * strings, one line each ("ax" hex where not UTF-8). */
static void write_v1(const char *path, char **ans, size_t n)
{
    struct buf b = BUF_INIT;
    buf_adds(&b, "{\"format\":\"fidelity.golden\",\"version\":1}\n");
    for (size_t i = 0; i < n; i++) {
        char k[17], body[32];
        snprintf(body, sizeof(body), "{\"p\":%zu}", i);
        XXH64_state_t *st = XXH64_createState();
        XXH64_reset(st, 0x601de9);
        XXH64_update(st, "POST", 5);
        XXH64_update(st, "/v1/completions", 16);
        XXH64_update(st, body, strlen(body));
        uint64_t key = XXH64_digest(st);
        XXH64_freeState(st);
        snprintf(k, sizeof(k), "%016llx", (unsigned long long)key);
        json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s}", "k", k, "m", "POST",
                              "p", "/v1/completions", "s", 200, "a", ans[i]);
        char *line = json_dumps(o, JSON_COMPACT);
        buf_adds(&b, line);
        buf_addch(&b, '\n');
        free(line);
        json_decref(o);
    }
    buf_printf(&b, "{\"end\":true,\"exchanges\":%zu,\"xxh64\":\"%016llx\"}\n",
               n, (unsigned long long)XXH64(b.data, b.len, 0));
    gzFile f = gzopen(path, "wb6");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, b.data, (unsigned)b.len), (int)b.len);
    gzclose(f);
    buf_release(&b);
}

static long file_size(const char *path)
{
    struct stat s;
    assert_int_equal(stat(path, &s), 0);
    return (long)s.st_size;
}

/* A version 1 file is read and gives the same answers; the version 2
 * file of the same answers is smaller. */
static void test_version_1_read_and_2_smaller(void **state)
{
    (void)state;
    enum { N = 6 };
    char *ans[N];
    for (unsigned i = 0; i < N; i++)
        ans[i] = logprob_answer(i + 1);
    char *p1 = xasprintf("%s/v1.fgold", dir),
         *p2 = xasprintf("%s/v2.fgold", dir);
    write_v1(p1, ans, N);
    struct diag d = {0};
    struct drift_tape *t = drift_tape_new_record();
    for (size_t i = 0; i < N; i++) {
        char body[32];
        snprintf(body, sizeof(body), "{\"p\":%zu}", i);
        drift_tape_put(t, "POST", "/v1/completions", body, 200, ans[i],
                       strlen(ans[i]));
    }
    assert_int_equal(drift_tape_commit(t, json_object(), p2, &d), 0);
    drift_tape_free(t);
    print_message("%d answers of 200 positions at top-20: version 1 %ld "
                  "bytes, version 2 %ld\n",
                  N, file_size(p1), file_size(p2));
    assert_true(file_size(p2) < file_size(p1));
    for (int v = 1; v <= 2; v++) {
        t = drift_tape_load(v == 1 ? p1 : p2, &d);
        if (!t)
            fail_msg("version %d: %s", v, d.msg);
        for (size_t i = 0; i < N; i++) {
            char body[32];
            struct buf b = BUF_INIT;
            long st;
            snprintf(body, sizeof(body), "{\"p\":%zu}", i);
            assert_int_equal(
                drift_tape_get(t, "POST", "/v1/completions", body, &st, &b, &d),
                0);
            assert_string_equal(buf_str(&b), ans[i]);
            buf_release(&b);
        }
        drift_tape_free(t);
    }
    for (unsigned i = 0; i < N; i++)
        free(ans[i]);
    free(p1);
    free(p2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_byte_for_byte),
        cmocka_unit_test(test_version_1_read_and_2_smaller),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
