/*
 * Tests for drift/dialect: each server family's answer shape parses into
 * the same positions; short answers, NaN, null and missing logprobs are
 * counted, not read as numbers; request bodies carry the dialect's fields.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/rng.h"
#include "drift/analysis.h"
#include "drift/dialect.h"
#include "drift/drift.h"
#include "drift/fastparse.h"
#include "drift/scan.h"

static const uint32_t ids[3] = {0, 300, 301};

static json_t *load(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    assert_non_null(j);
    return j;
}

static const char vllm_ans[] =
    "{\"choices\":[{\"prompt_logprobs\":[null,"
    "{\"300\":{\"logprob\":-0.5,\"rank\":1},\"7\":{\"logprob\":-1.5}},"
    "{\"301\":{\"logprob\":-2.0,\"rank\":2},\"9\":{\"logprob\":-0.2}}]}]}";
static const char sglang_ans[] =
    "{\"meta_info\":{\"input_token_logprobs\":[[null,0,null],[-0.5,300,null],"
    "[-2.0,301,null]],\"input_top_logprobs\":[null,[[-0.5,300,null],[-1.5,7,"
    "null]],[[-0.2,9,null],[-2.0,301,null]]]}}";
static const char echo_ans[] =
    "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:0\",\"token_id:300\","
    "\"token_id:301\"],\"token_logprobs\":[null,-0.5,-2.0],"
    "\"top_logprobs\":[null,{\"token_id:300\":-0.5,\"token_id:7\":-1.5},"
    "{\"token_id:9\":-0.2,\"token_id:301\":-2.0}]}}]}";

static void parse_one(enum drift_dialect dl, const char *text,
                      struct drift_lp *lp)
{
    struct drift_req r = {
        .ids = ids, .n = 3, .top_k = 20, .max_new = 1, .prompt_logprobs = true};
    struct diag d;
    json_t *j = load(text);
    assert_int_equal(drift_parse_prompt(dl, j, &r, lp, &d), 0);
    json_decref(j);
}

static void test_dialects_parse_alike(void **state)
{
    (void)state;
    struct drift_lp a, b, c;
    drift_lp_init(&a);
    drift_lp_init(&b);
    drift_lp_init(&c);
    parse_one(DRIFT_DIALECT_VLLM, vllm_ans, &a);
    parse_one(DRIFT_DIALECT_SGLANG, sglang_ans, &b);
    parse_one(DRIFT_DIALECT_ECHO, echo_ans, &c);
    const struct drift_lp *all[3] = {&a, &b, &c};
    for (int k = 0; k < 3; k++) {
        const struct drift_lp *x = all[k];
        assert_int_equal(x->n_returned, 3);
        assert_false(x->valid[0]);
        assert_true(x->valid[1] && x->valid[2]);
        assert_true(x->pos[1].forced == 300 && x->pos[1].forced_lp == -0.5);
        assert_int_equal(x->pos[2].n_top, 2);
        assert_true(x->pos[2].top[0].key == 9); /* sorted by logprob */
        struct drift_pm m;
        assert_int_equal(drift_pos_compare(&a.pos[2], &x->pos[2], 0.2, &m), 0);
        assert_true(m.kl == 0);
    }
    drift_lp_release(&a);
    drift_lp_release(&b);
    drift_lp_release(&c);
}

/* sglang's token_ids_logprob entries are kept for lookups after the top
 * list, also when the top list had a duplicate that the dedup removed */
static void test_sglang_extra_ids_after_duplicate_top(void **state)
{
    (void)state;
    struct drift_lp lp;
    drift_lp_init(&lp);
    parse_one(DRIFT_DIALECT_SGLANG,
              "{\"meta_info\":{\"input_token_logprobs\":[[null,0,null],"
              "[-0.5,300,null],[-2.0,301,null]],\"input_top_logprobs\":[null,"
              "[[-0.5,300,null]],[[-0.2,9,null],[-0.2,9,null],[-2.0,301,"
              "null]]],\"input_token_ids_logprob\":[null,null,[[-3.0,55,"
              "null]]]}}",
              &lp);
    assert_true(lp.valid[2]);
    assert_int_equal(lp.pos[2].n_top, 2);
    assert_int_equal(lp.pos[2].n_known, 3);
    assert_int_equal(lp.pos[2].top[2].key, 55);
    assert_true(lp.pos[2].top[2].lp == -3.0);
    drift_lp_release(&lp);
}

static void test_short_and_bad_entries_are_counted(void **state)
{
    (void)state;
    struct drift_lp lp;
    struct drift_analysis an;
    struct drift_opts o;
    drift_opts_default(&o);
    drift_lp_init(&lp);
    /* two positions of three, the second with a null logprob */
    parse_one(DRIFT_DIALECT_SGLANG,
              "{\"meta_info\":{\"input_token_logprobs\":[[null,0,null],"
              "[null,300,null]]}}",
              &lp);
    assert_int_equal(lp.n_returned, 2);
    assert_false(lp.valid[1]);
    drift_analysis_init(&an, 64, 2, NULL, 0, 10, NULL);
    uint32_t s = drift_analysis_begin_seq(&an);
    drift_compare_lp(&an, DRIFT_ARM_CAND, s, &lp, &lp, 1, 3, &o, "t");
    assert_int_equal(an.skipped[DRIFT_ARM_CAND][DRIFT_SKIP_INVALID], 1);
    assert_int_equal(an.skipped[DRIFT_ARM_CAND][DRIFT_SKIP_SHORT], 1);
    assert_int_equal(an.acc[DRIFT_ARM_CAND][0].n, 0);
    drift_analysis_release(&an);

    /* a server echoing a different token than was sent */
    parse_one(DRIFT_DIALECT_SGLANG,
              "{\"meta_info\":{\"input_token_logprobs\":[[null,0,null],"
              "[-1.0,999,null],[-1.0,301,null]]}}",
              &lp);
    assert_true(lp.mismatch[1]);
    assert_true(lp.valid[2]);
    drift_lp_release(&lp);
}

static void test_nan_and_infinity_are_sanitized(void **state)
{
    (void)state;
    char text[] = "{\"choices\":[{\"prompt_logprobs\":[null,"
                  "{\"300\":{\"logprob\":NaN}},"
                  "{\"301\":{\"logprob\":-Infinity},\"9\":{\"logprob\":"
                  "-0.1}}]}],\"note\":\"NaN stays in strings\"}";
    assert_int_equal(drift_json_sanitize(text, strlen(text)), 2);
    assert_non_null(strstr(text, "\"NaN stays in strings\""));
    struct drift_lp lp;
    drift_lp_init(&lp);
    parse_one(DRIFT_DIALECT_VLLM, text, &lp);
    /* no logprob can be NaN or an infinity: both invalid and counted as
     * the server's fault, the first named */
    assert_false(lp.valid[1]);
    assert_false(lp.valid[2]);
    assert_true(lp.pos[2].forced_lp < -1e299);
    assert_int_equal(lp.n_bad, 2);
    assert_int_equal(lp.bad_at, 1);
    struct diag d = {{0}};
    assert_int_equal(drift_lp_check(&lp, &d), -EBADMSG);
    assert_non_null(strstr(d.msg, "2 values no logprob can be"));
    assert_non_null(strstr(d.msg, "position 1: logprob NaN"));
    drift_lp_release(&lp);
}

/* The sanitizer's contract a byte at a time: NaN / Infinity / -Infinity
 * outside strings rewritten, strings (with escapes) left alone. */
static size_t ref_sanitize(char *s, size_t len)
{
    size_t n = 0;
    bool in_str = false, esc = false;
    for (size_t i = 0; i < len; i++) {
        if (esc) {
            esc = false;
        } else if (in_str) {
            esc = s[i] == '\\';
            in_str = s[i] != '"';
        } else if (s[i] == '"') {
            in_str = true;
        } else if (len - i >= 3 && !memcmp(s + i, "NaN", 3)) {
            memcpy(s + i, "1e9", 3);
            n++;
        } else if (len - i >= 8 && !memcmp(s + i, "Infinity", 8)) {
            if (i > 0 && s[i - 1] == '-')
                memcpy(s + i - 1, "-1e300   ", 9);
            else
                memcpy(s + i, "1e300   ", 8);
            n++;
        }
    }
    return n;
}

/* The block-wise sanitizer (SSE2 masks, the no-N-or-I shortcut, the string
 * state carried by quote parity) against the byte-at-a-time reference, on
 * random texts of quotes, escapes, N, I and the words themselves. */
static void test_sanitizer_matches_reference(void **state)
{
    (void)state;
    static const char *const piece[] = {
        "\"",
        "\\",
        "\\\"",
        "NaN",
        "Infinity",
        "-Infinity",
        "N",
        "I",
        "null",
        "-0.5",
        ",",
        "[",
        "]",
        "{\"a\":",
        " ",
        "x",
        "\"\"",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    struct rng r;
    struct buf a = BUF_INIT, b = BUF_INIT;
    rng_seed(&r, 77);
    unsigned rewrites = 0;
    for (int i = 0; i < 20000; i++) {
        buf_reset(&a);
        int np = 1 + (int)rng_below(&r, 60);
        bool plain = i % 3 == 0; /* no N or I at all */
        for (int k = 0; k < np; k++) {
            size_t j = rng_below(&r, sizeof(piece) / sizeof(piece[0]));
            if (plain && (strchr(piece[j], 'N') || strchr(piece[j], 'I')))
                continue;
            buf_adds(&a, piece[j]);
        }
        buf_reset(&b);
        buf_add(&b, a.data ? a.data : "", a.len);
        size_t want = ref_sanitize(b.data ? b.data : (char *)"", b.len);
        size_t got = drift_json_sanitize(a.data ? a.data : (char *)"", a.len);
        assert_int_equal(got, want);
        if (a.len)
            assert_memory_equal(a.data, b.data, a.len);
        rewrites += (unsigned)got;
    }
    assert_true(rewrites > 1000);
    buf_release(&a);
    buf_release(&b);
}

/* Random text of lengths 0-600 over an alphabet rich in the bytes the
 * scans look for, for test_scan_paths_agree. */
static size_t scan_text(struct rng *r, char *s, size_t cap)
{
    static const char alpha[] = "\"input_tokNI,[]0123456789_:x";
    size_t n = rng_below(r, cap);
    bool has_ni = rng_below(r, 2);
    for (size_t k = 0; k < n; k++) {
        s[k] = alpha[rng_below(r, sizeof(alpha) - 1)];
        if (!has_ni && (s[k] == 'N' || s[k] == 'I'))
            s[k] = 'x';
    }
    /* plant whole keys, sometimes at the very end */
    for (int k = (int)rng_below(r, 3); k > 0 && n >= 24; k--) {
        static const char key[] = "\"input_token_logprobs\"";
        size_t at = rng_below(r, 2) ? n - (sizeof(key) - 1)
                                    : rng_below(r, n - (sizeof(key) - 1) + 1);
        memcpy(s + at, key, sizeof(key) - 1);
    }
    s[n] = '\0';
    return n;
}

/* The AVX2 scans (when the CPU has them) and the baseline ones give the
 * same answers on the same texts, and both agree with memmem and a plain
 * byte loop. */
static void test_scan_paths_agree(void **state)
{
    (void)state;
    static const char *const needle[] = {"\"input_to", "\"prompt_logprobs\"",
                                         "\"input_token_logprobs\"", "NI,["};
    char s[700];
    struct rng r;
    rng_seed(&r, 4242);
    unsigned found = 0, ni = 0;
    for (int i = 0; i < 30000; i++) {
        size_t n = scan_text(&r, s, 601);
        bool want_ni = memchr(s, 'N', n) || memchr(s, 'I', n);
        size_t from[4];
        for (size_t k = 0; k < 4; k++) {
            from[k] = rng_below(&r, 40);
            if (from[k] > n)
                from[k] = n;
        }
        for (int path = 0; path < 2; path++) {
            drift_scan_force(path);
            assert_int_equal(drift_scan_n_or_i(s, n), want_ni);
            for (size_t k = 0; k < 4; k++) {
                size_t nl = strlen(needle[k]);
                const char *want =
                    memmem(s + from[k], n - from[k], needle[k], nl);
                assert_ptr_equal(
                    drift_scan_find(s + from[k], s + n, needle[k], nl), want);
                found += want != NULL;
            }
        }
        ni += want_ni;
    }
    drift_scan_force(-1);
    assert_true(found > 10000);
    assert_true(ni > 10000 && ni < 20000);
    if (!drift_scan_has_avx2())
        print_message("no AVX2 on this CPU: only the baseline scans ran\n");
}

static void test_wrong_shape_is_an_error(void **state)
{
    (void)state;
    struct drift_req r = {.ids = ids, .n = 3, .top_k = 20};
    struct drift_lp lp;
    struct diag d;
    drift_lp_init(&lp);
    json_t *j = load("{\"choices\":[{\"text\":\"x\"}]}");
    assert_int_equal(drift_parse_prompt(DRIFT_DIALECT_VLLM, j, &r, &lp, &d),
                     -EBADMSG);
    assert_non_null(strstr(d.msg, "prompt_logprobs"));
    assert_int_equal(drift_parse_prompt(DRIFT_DIALECT_TGI, j, &r, &lp, &d),
                     -EBADMSG);
    /* decode answers without token ids say so */
    json_decref(j);
    j = load("{\"choices\":[{\"logprobs\":{\"tokens\":[\"ab\"],"
             "\"token_logprobs\":[-0.1],\"top_logprobs\":[{\"ab\":-0.1}]}}]}");
    assert_int_equal(drift_parse_decode(DRIFT_DIALECT_ECHO, j, &lp, &d),
                     -ENOKEY);
    json_decref(j);
    drift_lp_release(&lp);
}

static void test_request_bodies(void **state)
{
    (void)state;
    struct drift_req r = {
        .ids = ids, .n = 3, .top_k = 5, .max_new = 1, .prompt_logprobs = true};
    json_t *extra = load("{\"priority\":3}");
    r.extra_body = extra;
    json_t *v = drift_request_build(DRIFT_DIALECT_VLLM, &r);
    assert_int_equal(json_integer_value(json_object_get(v, "prompt_logprobs")),
                     5);
    assert_int_equal(json_integer_value(json_object_get(v, "priority")), 3);
    json_decref(v);
    static const uint32_t extra_ids[2] = {7, 9};
    r.extra_ids = extra_ids;
    r.n_extra = 2;
    v = drift_request_build(DRIFT_DIALECT_SGLANG, &r);
    assert_int_equal(json_array_size(json_object_get(v, "token_ids_logprob")),
                     2);
    assert_true(json_is_true(json_object_get(v, "return_logprob")));
    assert_int_equal(
        json_integer_value(json_object_get(v, "logprob_start_len")), 0);
    assert_int_equal(json_array_size(json_object_get(v, "input_ids")), 3);
    json_decref(v);
    r.text = "abc";
    v = drift_request_build(DRIFT_DIALECT_TGI, &r);
    assert_true(json_is_true(json_object_get(json_object_get(v, "parameters"),
                                             "decoder_input_details")));
    assert_string_equal(json_string_value(json_object_get(v, "inputs")), "abc");
    json_decref(v);
    json_decref(extra);
    assert_string_equal(drift_dialect_path(DRIFT_DIALECT_ECHO),
                        "/v1/completions");
}

/* The allocation-free reader converts decimals exactly as strtod does
 * (Clinger's fast path, the extended-precision path, strtod fallback). */
static void test_fast_reader_numbers_match_strtod(void **state)
{
    (void)state;
    enum { N = 4000 };
    static uint32_t nids[N];
    static char num[N][40];
    struct buf b = BUF_INIT;
    struct rng r;
    rng_seed(&r, 5);
    buf_adds(&b, "{\"meta_info\":{\"input_token_logprobs\":[[null,1,null]");
    nids[0] = 1;
    for (int i = 1; i < N; i++) {
        double x = -30 * rng_unit(&r) * rng_unit(&r);
        int prec = 1 + (int)rng_below(&r, 17);
        if (i % 7 == 0)
            snprintf(num[i], sizeof(num[i]), "-%llu.%llue-%d",
                     (unsigned long long)rng_below(&r, 1000),
                     (unsigned long long)rng_next(&r) % 100000000000000ULL,
                     (int)rng_below(&r, 30));
        else
            snprintf(num[i], sizeof(num[i]), "%.*g", prec, x);
        nids[i] = 16 + (uint32_t)i;
        buf_printf(&b, ",[%s,%u,null]", num[i], nids[i]);
    }
    buf_adds(&b, "]}}");
    struct drift_req rq = {.ids = nids, .n = N, .top_k = 20};
    struct drift_lp lp;
    drift_lp_init(&lp);
    assert_int_equal(
        drift_fast_prompt(DRIFT_DIALECT_SGLANG, b.data, b.len, &rq, &lp), 0);
    int checked = 0;
    for (int i = 1; i < N; i++) {
        double want = strtod(num[i], NULL);
        if (!(want <= 1e-6))
            continue;
        assert_true(lp.valid[i]);
        assert_memory_equal(&lp.pos[i].forced_lp, &want, sizeof(double));
        checked++;
    }
    assert_true(checked > N / 2);
    drift_lp_release(&lp);
    buf_release(&b);
}

/* The allocation-free reader's shortcuts (vLLM entries and sglang
 * triples of the usual shape) against jansson, bit for bit, on answers
 * mixing that shape with every variation that must leave it: spaces,
 * escapes and UTF-8 in the token text, leading zeros, exponents, long
 * mantissas, other key orders, missing fields, duplicate ids. */
static void vary_entry(struct buf *b, struct rng *r, uint32_t id, double x)
{
    static const char *const txt[] = {"tok", "a\\\"b", "\xc3\xa9t\xc3\xa9",
                                      " sp", ""};
    switch (rng_below(r, 8)) {
    case 0:
        buf_printf(b, "\"%u\": {\"logprob\": %.17g, \"rank\": 2}", id, x);
        break;
    case 1:
        buf_printf(b,
                   "\"%u\":{\"rank\":3,\"logprob\":%.6e,"
                   "\"decoded_token\":\"x\"}",
                   id, x);
        break;
    case 2:
        buf_printf(b,
                   "\"0%u\":{\"logprob\":%.17g,\"rank\":1,"
                   "\"decoded_token\":\"x\"}",
                   id, x);
        break;
    case 3:
        buf_printf(b, "\"%u\":%.20f", id, x);
        break;
    default:
        buf_printf(b,
                   "\"%u\":{\"logprob\":%.17g,\"rank\":%u,"
                   "\"decoded_token\":\"%s\"}",
                   id, x, 1 + (unsigned)rng_below(r, 30),
                   txt[rng_below(r, sizeof(txt) / sizeof(txt[0]))]);
    }
}

static void test_fast_shapes_match_jansson(void **state)
{
    (void)state;
    enum { N = 300 };
    static uint32_t nids[N];
    struct rng r;
    rng_seed(&r, 21);
    for (int round = 0; round < 40; round++) {
        struct buf b = BUF_INIT;
        bool vllm = round % 2 == 0, dups = round % 3 == 0;
        nids[0] = 5;
        if (vllm)
            buf_adds(&b, "{\"choices\":[{\"prompt_logprobs\":[null");
        else
            buf_adds(&b, "{\"meta_info\":{\"input_token_logprobs\":"
                         "[[null,5,null]");
        struct buf top = BUF_INIT;
        buf_adds(&top, "\"input_top_logprobs\":[null");
        for (int t = 1; t < N; t++) {
            nids[t] = 10 + (uint32_t)rng_below(&r, 2000);
            buf_adds(vllm ? &b : &top, vllm ? ",{" : ",[");
            int k = 1 + (int)rng_below(&r, 6);
            for (int j = 0; j < k; j++) {
                uint32_t id = j == 0 ? nids[t]
                                     : 3000 + 1000 * (uint32_t)j +
                                           (uint32_t)rng_below(&r, 1000);
                double x = -20 * rng_unit(&r) * rng_unit(&r);
                if (dups && j == 2 && rng_below(&r, 4) == 0)
                    id = nids[t]; /* a duplicate id */
                if (vllm) {
                    buf_adds(&b, j ? "," : "");
                    vary_entry(&b, &r, id, x);
                } else if (rng_below(&r, 5) == 0) {
                    buf_printf(&top, "%s[ %.17g , %u, \"t\"]", j ? "," : "", x,
                               id);
                } else {
                    buf_printf(&top, "%s[%.*g,%u,null]", j ? "," : "",
                               1 + (int)rng_below(&r, 19), x, id);
                }
            }
            if (!vllm)
                buf_printf(&b, ",[%.17g,%u,null]", -rng_unit(&r), nids[t]);
            buf_adds(vllm ? &b : &top, vllm ? "}" : "]");
        }
        if (vllm)
            buf_adds(&b, "]}]}");
        else
            buf_printf(&b, "],%s]}}", buf_str(&top));
        buf_release(&top);
        struct drift_req rq = {.ids = nids, .n = N, .top_k = 20};
        struct drift_lp fast, slow;
        struct diag d;
        enum drift_dialect dl =
            vllm ? DRIFT_DIALECT_VLLM : DRIFT_DIALECT_SGLANG;
        drift_lp_init(&fast);
        drift_lp_init(&slow);
        int ret = drift_fast_prompt(dl, b.data, b.len, &rq, &fast);
        /* vLLM objects with a duplicate key are left to jansson (which
         * keeps the last one) */
        if (vllm && dups && ret == -EAGAIN) {
            drift_lp_release(&fast);
            drift_lp_release(&slow);
            buf_release(&b);
            continue;
        }
        assert_int_equal(ret, 0);
        json_t *j = load(b.data);
        assert_int_equal(drift_parse_prompt(dl, j, &rq, &slow, &d), 0);
        json_decref(j);
        assert_int_equal(fast.n_returned, slow.n_returned);
        int valid = 0;
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(fast.valid[i], slow.valid[i]);
            if (!fast.valid[i])
                continue;
            valid++;
            const struct drift_pos *p = &fast.pos[i], *q = &slow.pos[i];
            assert_memory_equal(&p->forced_lp, &q->forced_lp, sizeof(double));
            assert_int_equal(p->n_top, q->n_top);
            assert_int_equal(p->n_known, q->n_known);
            for (uint32_t k = 0; k < p->n_known; k++) {
                assert_true(p->top[k].key == q->top[k].key);
                assert_memory_equal(&p->top[k].lp, &q->top[k].lp,
                                    sizeof(double));
            }
        }
        assert_true(valid > N / 2);
        drift_lp_release(&fast);
        drift_lp_release(&slow);
        buf_release(&b);
    }
}

/* A number as servers print them and near it: D.F with 1-22 fraction
 * digits (runs of zeros), sometimes 0., two or three integer digits, an
 * exponent or no sign. */
static void rand_number(struct buf *b, struct rng *r)
{
    if (rng_below(r, 10))
        buf_adds(b, "-");
    uint64_t shape = rng_below(r, 10);
    if (shape == 0)
        buf_printf(b, "%u", 10 + (unsigned)rng_below(r, 990));
    else if (shape < 3)
        buf_adds(b, "0");
    else
        buf_printf(b, "%u", (unsigned)rng_below(r, 10));
    buf_adds(b, ".");
    int len = 1 + (int)rng_below(r, 22);
    for (int i = 0; i < len; i++)
        buf_printf(b, "%c",
                   rng_below(r, 3) ? '0' + (int)rng_below(r, 10) : '0');
    if (rng_below(r, 10) == 0)
        buf_printf(b, "e-%02u", (unsigned)rng_below(r, 30));
}

/* The reader's number shortcut (D.F, 1-18 fraction digits at once) and
 * the rank shortcut against jansson, bit for bit, in both dialects. */
static void test_fast_numbers_match_jansson(void **state)
{
    (void)state;
    enum { N = 400 };
    static uint32_t nids[N];
    struct rng r;
    rng_seed(&r, 77);
    for (int round = 0; round < 20; round++) {
        struct buf b = BUF_INIT, top = BUF_INIT;
        bool vllm = round % 2 == 0;
        nids[0] = 5;
        if (vllm)
            buf_adds(&b, "{\"choices\":[{\"prompt_logprobs\":[null");
        else
            buf_adds(&b, "{\"meta_info\":{\"input_token_logprobs\":"
                         "[[null,5,null]");
        buf_adds(&top, "\"input_top_logprobs\":[null");
        for (int t = 1; t < N; t++) {
            nids[t] = 10 + (uint32_t)rng_below(&r, 2000);
            buf_adds(vllm ? &b : &top, vllm ? ",{" : ",[");
            int k = 1 + (int)rng_below(&r, 5);
            for (int j = 0; j < k; j++) {
                uint32_t id = j == 0 ? nids[t] : 3000 + 1000 * (uint32_t)j;
                struct buf *o = vllm ? &b : &top;
                if (vllm) {
                    buf_printf(o, "%s\"%u\":{\"logprob\":", j ? "," : "", id);
                    rand_number(o, &r);
                    buf_printf(o, ",\"rank\":%u,\"decoded_token\":\"t\"}",
                               (unsigned)rng_below(&r, 130));
                } else {
                    buf_adds(o, j ? ",[" : "[");
                    rand_number(o, &r);
                    buf_printf(o, ",%u,null]", id);
                }
            }
            if (!vllm) {
                buf_adds(&b, ",[");
                rand_number(&b, &r);
                buf_printf(&b, ",%u,null]", nids[t]);
            }
            buf_adds(vllm ? &b : &top, vllm ? "}" : "]");
        }
        if (vllm)
            buf_adds(&b, "]}]}");
        else
            buf_printf(&b, "],%s]}}", buf_str(&top));
        buf_release(&top);
        struct drift_req rq = {.ids = nids, .n = N, .top_k = 20};
        struct drift_lp fast, slow;
        struct diag d;
        enum drift_dialect dl =
            vllm ? DRIFT_DIALECT_VLLM : DRIFT_DIALECT_SGLANG;
        drift_lp_init(&fast);
        drift_lp_init(&slow);
        assert_int_equal(drift_fast_prompt(dl, b.data, b.len, &rq, &fast), 0);
        json_t *j = load(b.data);
        assert_int_equal(drift_parse_prompt(dl, j, &rq, &slow, &d), 0);
        json_decref(j);
        assert_int_equal(fast.n_returned, slow.n_returned);
        int valid = 0;
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(fast.valid[i], slow.valid[i]);
            const struct drift_pos *p = &fast.pos[i], *q = &slow.pos[i];
            if (i > 0)
                assert_memory_equal(&p->forced_lp, &q->forced_lp,
                                    sizeof(double));
            if (!fast.valid[i])
                continue;
            valid++;
            assert_int_equal(p->n_known, q->n_known);
            for (uint32_t k = 0; k < p->n_known; k++) {
                assert_true(p->top[k].key == q->top[k].key);
                assert_memory_equal(&p->top[k].lp, &q->top[k].lp,
                                    sizeof(double));
            }
        }
        assert_true(valid > N / 3);
        drift_lp_release(&fast);
        drift_lp_release(&slow);
        buf_release(&b);
    }
}

/*
 * The position readers (a vLLM object or an sglang top list of compact
 * entries read in one loop, the list checks done on the way) against
 * jansson, bit for bit, in both dialects:
 * lists of 1-70 entries in order, with ties, out of order (the forced
 * token first), with a duplicate key, with a logprob above 0; token texts
 * of 0-40 bytes, with an escape or UTF-8; 17-digit logprobs and other
 * numbers; ranks of 1-3 digits; top_k below the list's length; positions
 * near the end of the text; a space or other shape in some entry; "-0"
 * (an integer: jansson's +0) and "-0.0" (-0) as logprobs. (sglang
 * keeps a list's first entry of a key; a vLLM answer with a duplicate key
 * goes to jansson, which keeps the last.)
 */
static void test_position_readers_match_jansson(void **state)
{
    (void)state;
    enum { N = 300 };
    static uint32_t nids[N];
    static const char *const txt[] = {
        "",
        "a",
        "tok",
        "0123456789abcde",
        "0123456789abcdef",
        "a longer token text of forty bytes.....",
        "a\\\"b",     /* an escape: the general grammar reads the list
                       * (never in the rounds with duplicate keys: there
                       * the position reader must find each) */
        "\xc3\xa9t"}; /* UTF-8: the same */
    struct rng r;
    rng_seed(&r, 4242);
    for (int round = 0; round < 120; round++) {
        struct buf b = BUF_INIT, top = BUF_INIT;
        bool sg = round >= 60;
        enum drift_dialect dl = sg ? DRIFT_DIALECT_SGLANG : DRIFT_DIALECT_VLLM;
        /* 0-1 clean, 2 a logprob above 0 as a list's first (so only
         * that entry says the answer has one), 3 ties and lists out of
         * order, 4 duplicate keys, 5 other numbers and shapes */
        int kind = round % 6;
        bool dup = false;
        unsigned top_k = 1 + (unsigned)rng_below(&r, 20);
        nids[0] = 5;
        if (sg)
            buf_adds(&b, "{\"meta_info\":{\"input_token_logprobs\":"
                         "[[null,5,null]");
        else
            buf_adds(&b, "{\"choices\":[{\"index\":0,"
                         "\"prompt_logprobs\":[null");
        buf_adds(&top, "\"input_top_logprobs\":[null");
        for (int t = 1; t < N; t++) {
            nids[t] = 10 + (uint32_t)rng_below(&r, 200000);
            int k = 1 + (int)rng_below(&r, t % 17 == 0 ? 70 : 22);
            int forced_at =
                (int)rng_below(&r, (uint64_t)k + 3); /* >= k: absent */
            double x = -0.01 * rng_unit(&r);
            uint32_t prev_id = 0;
            double fx = -rng_unit(&r);
            struct buf *o = sg ? &top : &b;
            buf_adds(o, sg ? ",[" : ",{");
            for (int j = 0; j < k; j++) {
                uint32_t id = j == forced_at
                                  ? nids[t]
                                  : 300000 + 7 * (uint32_t)j +
                                        (uint32_t)rng_below(&r, 5) * 1000;
                if (kind == 4 && j > 0 && j != forced_at &&
                    rng_below(&r, 40) == 0) {
                    id = prev_id; /* the previous entry's key */
                    dup = true;
                }
                prev_id = id;
                double y = x - 3 * rng_unit(&r);
                if (kind == 3 && rng_below(&r, 6) == 0)
                    y = x; /* a tie */
                else if (kind == 3 && rng_below(&r, 10) == 0)
                    y = x + 1; /* out of order */
                if (kind == 2 && j == 0 && rng_below(&r, 50) == 0)
                    y = 0.25; /* above 0: the position is invalid */
                x = y;
                if (j == forced_at)
                    fx = y;
                buf_adds(o, j ? "," : "");
                if (sg) {
                    if (kind == 5 && rng_below(&r, 10) == 0)
                        buf_printf(o, "[ %.17g , %u, \"t\"]", y, id);
                    else if (kind == 5 && rng_below(&r, 4) == 0) {
                        buf_adds(o, "[");
                        rand_number(o, &r);
                        buf_printf(o, ",%u,null]", id);
                    } else if (kind == 5 && rng_below(&r, 20) == 0)
                        buf_printf(o, "[%s,%u,null]",
                                   rng_below(&r, 2) ? "-0" : "-0.0", id);
                    else
                        buf_printf(o, "[%.17g,%u,null]", y, id);
                } else if (kind == 5 && rng_below(&r, 10) == 0) {
                    buf_printf(&b, "\"%u\": {\"logprob\": %.17g, \"rank\": 2}",
                               id, y);
                } else {
                    buf_printf(&b, "\"%u\":{\"logprob\":", id);
                    if (kind == 5 && rng_below(&r, 4) == 0)
                        rand_number(&b, &r);
                    else if (kind == 5 && rng_below(&r, 20) == 0)
                        buf_adds(&b, rng_below(&r, 2) ? "-0" : "-0.0");
                    else
                        buf_printf(&b, "%.17g", y);
                    unsigned rk = (unsigned)rng_below(&r, 4) == 0
                                      ? 100 + (unsigned)rng_below(&r, 900)
                                      : 1 + (unsigned)j;
                    buf_printf(&b, ",\"rank\":%u,\"decoded_token\":\"%s\"}", rk,
                               txt[kind == 4 || rng_below(&r, 30)
                                       ? rng_below(&r, 6)
                                       : 6 + rng_below(&r, 2)]);
                }
            }
            buf_adds(o, sg ? "]" : "}");
            if (sg)
                buf_printf(&b, ",[%.17g,%u,null]", fx, nids[t]);
        }
        if (sg)
            buf_printf(&b, "],%s]}}", buf_str(&top));
        else
            buf_adds(&b, "]}]}");
        buf_release(&top);
        struct drift_req rq = {.ids = nids, .n = N, .top_k = top_k};
        struct drift_lp fast, slow;
        struct diag d;
        drift_lp_init(&fast);
        drift_lp_init(&slow);
        int ret = drift_fast_prompt(dl, b.data, b.len, &rq, &fast);
        if (dup &&
            !sg) { /* duplicate keys: left to jansson (it keeps the last) */
            assert_int_equal(ret, -EAGAIN);
            drift_lp_release(&fast);
            drift_lp_release(&slow);
            buf_release(&b);
            continue;
        }
        assert_int_equal(ret, 0);
        json_t *j = load(b.data);
        assert_int_equal(drift_parse_prompt(dl, j, &rq, &slow, &d), 0);
        json_decref(j);
        assert_int_equal(fast.n_returned, slow.n_returned);
        assert_int_equal(fast.n_invalid, slow.n_invalid);
        int valid = 0;
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(fast.valid[i], slow.valid[i]);
            const struct drift_pos *p = &fast.pos[i], *q = &slow.pos[i];
            if (i > 0)
                assert_memory_equal(&p->forced_lp, &q->forced_lp,
                                    sizeof(double));
            assert_int_equal(p->n_top, q->n_top);
            assert_int_equal(p->n_known, q->n_known);
            for (uint32_t k = 0; k < p->n_known; k++) {
                assert_true(p->top[k].key == q->top[k].key);
                assert_memory_equal(&p->top[k].lp, &q->top[k].lp,
                                    sizeof(double));
            }
            valid += fast.valid[i] != 0;
        }
        assert_true(valid > N / 4);
        drift_lp_release(&fast);
        drift_lp_release(&slow);
        buf_release(&b);
    }
}

/* The reader's key search skips the arrays it read through its shortcuts:
 * a second occurrence of the key inside an object the general grammar
 * read still sends the answer to jansson, and the key's name as a
 * string value changes nothing. */
static void test_key_search_skips_read_arrays(void **state)
{
    (void)state;
    static const uint32_t kids[3] = {5, 7, 9};
    struct drift_req rq = {.ids = kids, .n = 3, .top_k = 20};
    static const struct {
        enum drift_dialect dl;
        const char *text;
        int want;
    } cases[] = {
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"prompt_logprobs\":[null,"
         "{\"7\":{\"logprob\":-0.5,\"rank\":1,\"decoded_token\":"
         "\"prompt_logprobs\"}},{\"9\":{\"logprob\":-1.5,\"rank\":1}}]}]}",
         0},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"prompt_logprobs\":[null,"
         "{\"7\":{\"logprob\":-0.5,\"rank\":1,\"decoded_token\":\"a\"}},"
         "{\"9\":{\"logprob\":-1.5,\"prompt_logprobs\":[]}}]}]}",
         -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"prompt_logprobs\":[null,"
         "{\"7\":{\"logprob\":-0.5,\"rank\":1,\"decoded_token\":\"a\"}},"
         "{\"9\":{\"logprob\":-1.5,\"rank\":1}}]}],\"prompt_logprobs\":1}",
         -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"prompt_logprobs\":[null,"
         "{\"7\": {\"logprob\": -0.5, \"rank\": 1}},"
         "{\"9\":{\"logprob\":-1.5},\"prompt_logprobs\":{}}]}]}",
         -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"prompt_logprobs\":[null,"
         "{\"7\": {\"logprob\": -0.5, \"rank\": 1, \"x\": 2}},"
         "{\"9\":{\"logprob\":-1.5}, \"11\": -2.5}]}]}",
         0},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":[[null,5,null],"
         "[-0.5,7,\"input_top_logprobs\"],[-1.5,9,null]],"
         "\"input_top_logprobs\":[null,[[-0.5,7,null]],[[-1.5,9,null]]]}}",
         0},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":[[null,5,null],"
         "[-0.5,7,{\"input_top_logprobs\":1}],[-1.5,9,null]],"
         "\"input_top_logprobs\":[null,[[-0.5,7,null]],[[-1.5,9,null]]]}}",
         -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":[[null,5,null],"
         "[-0.5,7,null],[-1.5,9,null]],"
         "\"input_top_logprobs\":[null,[[-0.5,7,{\"input_token_ids_"
         "logprob\":[]}]],[[-1.5,9,null]]]}}",
         -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_top_logprobs\":[null,[[-0.5,7,null]],"
         "[[-1.5,9,null]]],\"input_token_logprobs\":[[null,5,null],"
         "[-0.5,7,null],[-1.5,9,null]]},\"input_top_logprobs\":[]}",
         -EAGAIN},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct drift_lp fast, slow;
        struct diag d;
        drift_lp_init(&fast);
        drift_lp_init(&slow);
        int ret = drift_fast_prompt(cases[i].dl, cases[i].text,
                                    strlen(cases[i].text), &rq, &fast);
        print_message("case %zu: %d\n", i, ret);
        assert_int_equal(ret, cases[i].want);
        if (!ret) {
            json_t *j = load(cases[i].text);
            assert_int_equal(drift_parse_prompt(cases[i].dl, j, &rq, &slow, &d),
                             0);
            json_decref(j);
            for (uint32_t t = 1; t < 3; t++) {
                assert_int_equal(fast.valid[t], slow.valid[t]);
                assert_true(fast.pos[t].forced_lp == slow.pos[t].forced_lp);
                assert_int_equal(fast.pos[t].n_known, slow.pos[t].n_known);
            }
        }
        drift_lp_release(&fast);
        drift_lp_release(&slow);
    }
}

/* The reader takes an array only where jansson's reader looks for it
 * (sglang: meta_info of the answer object; vLLM: choices[0]): the same key
 * elsewhere, alone, sends the answer to jansson, which reports what it
 * finds there (found by fuzz_drift_parse: a top-level input_top_logprobs
 * was read as if it were meta_info's). */
static void test_arrays_read_only_where_jansson_looks(void **state)
{
    (void)state;
    static const uint32_t kids[3] = {5, 7, 9};
    struct drift_req rq = {.ids = kids, .n = 3, .top_k = 20};
#define SG_TOK "[[null,5,null],[-0.5,7,null],[-1.5,9,null]]"
#define SG_TOP "[null,[[-0.5,7,null]],[[-1.5,9,null]]]"
#define VL_PL                                                                  \
    "[null,{\"7\":{\"logprob\":-0.5,\"rank\":1,\"decoded_token\":\"a\"}},"     \
    "{\"9\":{\"logprob\":-1.5,\"rank\":1,\"decoded_token\":\"b\"}}]"
    static const struct {
        enum drift_dialect dl;
        const char *text;
        int want;
    } cases[] = {
        /* where they belong: read */
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":" SG_TOK
         ",\"input_top_logprobs\":" SG_TOP "}}",
         0},
        {DRIFT_DIALECT_VLLM,
         "{\"id\":\"x\",\"choices\":[{\"prompt_logprobs\":" VL_PL "},{}]}", 0},
        /* elsewhere: jansson's */
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":" SG_TOK
         "},\"input_top_logprobs\":" SG_TOP "}",
         -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{},\"input_token_logprobs\":" SG_TOK "}", -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"x\":{\"meta_info\":{\"input_token_logprobs\":" SG_TOK "}}}",
         -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta\\u005finfo\":{\"input_token_logprobs\":" SG_TOK "}}",
         -EAGAIN},
        {DRIFT_DIALECT_SGLANG,
         "{\"meta_info\":{\"input_token_logprobs\":" SG_TOK
         ",\"input_top_logprobs\":[null,[[-0.5,7,null]],[[-1.5,9,null]],"
         "[[-2.5,11,null]]]}}",
         -EAGAIN},
        {DRIFT_DIALECT_VLLM, "{\"prompt_logprobs\":" VL_PL "}", -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{},{\"prompt_logprobs\":" VL_PL "}]}", -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "[{\"choices\":[{\"prompt_logprobs\":" VL_PL "}]}]", -EAGAIN},
        {DRIFT_DIALECT_VLLM,
         "{\"choices\":[{\"x\":{\"prompt_logprobs\":" VL_PL "}}]}", -EAGAIN},
    };
#undef SG_TOK
#undef SG_TOP
#undef VL_PL
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct drift_lp fast, slow;
        struct diag d;
        drift_lp_init(&fast);
        drift_lp_init(&slow);
        int ret = drift_fast_prompt(cases[i].dl, cases[i].text,
                                    strlen(cases[i].text), &rq, &fast);
        print_message("case %zu: %d\n", i, ret);
        assert_int_equal(ret, cases[i].want);
        json_t *j = load(cases[i].text);
        int sret = drift_parse_prompt(cases[i].dl, j, &rq, &slow, &d);
        json_decref(j);
        if (!ret) {
            assert_int_equal(sret, 0);
            for (uint32_t t = 1; t < 3; t++) {
                assert_int_equal(fast.valid[t], slow.valid[t]);
                assert_true(fast.pos[t].forced_lp == slow.pos[t].forced_lp);
                assert_int_equal(fast.pos[t].n_known, slow.pos[t].n_known);
            }
        }
        drift_lp_release(&fast);
        drift_lp_release(&slow);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dialects_parse_alike),
        cmocka_unit_test(test_arrays_read_only_where_jansson_looks),
        cmocka_unit_test(test_sglang_extra_ids_after_duplicate_top),
        cmocka_unit_test(test_short_and_bad_entries_are_counted),
        cmocka_unit_test(test_nan_and_infinity_are_sanitized),
        cmocka_unit_test(test_sanitizer_matches_reference),
        cmocka_unit_test(test_scan_paths_agree),
        cmocka_unit_test(test_wrong_shape_is_an_error),
        cmocka_unit_test(test_request_bodies),
        cmocka_unit_test(test_fast_reader_numbers_match_strtod),
        cmocka_unit_test(test_fast_shapes_match_jansson),
        cmocka_unit_test(test_fast_numbers_match_jansson),
        cmocka_unit_test(test_key_search_skips_read_arrays),
        cmocka_unit_test(test_position_readers_match_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
