/*
 * Tests for bisect/inspect and `fidelity inspect`: answers shaped as
 * sglang, vLLM, TGI and llama.cpp define them (tests/fixtures/inspect/,
 * sources in SOURCES.md there), served from 127.0.0.1, normalise into the
 * expected fingerprint; two sim servers that differ in flags show exactly
 * the differing fields; an unreachable URL is exit 3.
 */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bisect/inspect.h"
#include "http/client.h"
#include "util/fakesrv.h"
#include "util/proc.h"

/* The fingerprint of a fake server answering the routes. */
static json_t *fingerprint(const struct fakesrv_route *routes)
{
    int port;
    struct fakesrv *s = fakesrv_start(fakesrv_files, (void *)routes, &port);
    assert_non_null(s);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    struct http_client *c = http_client_new();
    json_t *a = NULL;
    struct diag d = {0};
    int rc = inspect_fetch(c, url, 5000, &a, &d);
    http_client_free(c);
    fakesrv_stop(s);
    assert_int_equal(rc, 0);
    json_t *fp = inspect_normalise("u", a);
    json_decref(a);
    return fp;
}

static const char *fs(const json_t *fp, const char *k)
{
    const char *s = json_string_value(json_object_get(fp, k));
    return s ? s : "(null)";
}

static long long fi(const json_t *fp, const char *k)
{
    return (long long)json_integer_value(json_object_get(fp, k));
}

static void test_sglang(void **state)
{
    (void)state;
    static const struct fakesrv_route r[] = {
        {"/get_server_info", "sglang-get_server_info.json"}, {NULL, NULL}};
    json_t *fp = fingerprint(r);
    assert_string_equal(fs(fp, "server"), "sglang");
    assert_string_equal(fs(fp, "model"), "deepseek-ai/DeepSeek-V3.2");
    assert_string_equal(fs(fp, "dtype"), "auto");
    assert_string_equal(fs(fp, "kv_cache_dtype"), "fp8_e4m3");
    assert_string_equal(fs(fp, "attention_backend"), "flashmla");
    assert_string_equal(fs(fp, "moe_backend"), "auto");
    assert_int_equal(fi(fp, "chunked_prefill"), 8192);
    assert_int_equal(fi(fp, "context_length"), 163840);
    assert_string_equal(fs(fp, "version"), "0.5.4");
    json_t *flags = json_object_get(fp, "flags");
    assert_true(json_is_false(
        json_object_get(flags, "get_server_info.disable_cuda_graph")));
    /* what changes between starts is left out */
    assert_null(json_object_get(flags, "get_server_info.internal_states.0."
                                       "last_gen_throughput"));
    json_decref(fp);
}

static void test_vllm(void **state)
{
    (void)state;
    static const struct fakesrv_route r[] = {
        {"/version", "vllm-version.json"},
        {"/v1/models", "vllm-v1-models.json"},
        {NULL, NULL}};
    json_t *fp = fingerprint(r);
    assert_string_equal(fs(fp, "server"), "vllm");
    assert_string_equal(fs(fp, "model"), "Qwen/Qwen3-32B");
    assert_int_equal(fi(fp, "context_length"), 40960);
    assert_string_equal(fs(fp, "version"), "0.11.0");
    assert_true(json_is_null(json_object_get(fp, "dtype")));
    json_t *flags = json_object_get(fp, "flags");
    assert_null(json_object_get(flags, "v1/models.data.0.created"));
    assert_string_equal(
        json_string_value(json_object_get(flags, "v1/models.data.0.root")),
        "Qwen/Qwen3-32B");
    json_decref(fp);
}

static void test_tgi(void **state)
{
    (void)state;
    static const struct fakesrv_route r[] = {{"/info", "tgi-info.json"},
                                             {NULL, NULL}};
    json_t *fp = fingerprint(r);
    assert_string_equal(fs(fp, "server"), "tgi");
    assert_string_equal(fs(fp, "model"), "meta-llama/Llama-3.1-8B-Instruct");
    assert_string_equal(fs(fp, "dtype"), "torch.bfloat16");
    assert_int_equal(fi(fp, "context_length"), 8192);
    assert_string_equal(fs(fp, "version"), "2.0.4");
    json_decref(fp);
}

static void test_llamacpp(void **state)
{
    (void)state;
    static const struct fakesrv_route r[] = {{"/props", "llamacpp-props.json"},
                                             {NULL, NULL}};
    json_t *fp = fingerprint(r);
    assert_string_equal(fs(fp, "server"), "llama.cpp");
    assert_string_equal(fs(fp, "model"),
                        "/models/qwen2.5-7b-instruct-q4_k_m.gguf");
    assert_int_equal(fi(fp, "context_length"), 8192);
    assert_string_equal(fs(fp, "version"), "b6500-2f3c4d5e");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(fp, "flags"), "props.total_slots")),
                     4);
    json_decref(fp);
}

static void test_diff_of_fixtures(void **state)
{
    (void)state;
    static const struct fakesrv_route a[] = {{"/info", "tgi-info.json"},
                                             {NULL, NULL}};
    static const struct fakesrv_route b[] = {{"/props", "llamacpp-props.json"},
                                             {NULL, NULL}};
    json_t *fps[2] = {fingerprint(a), fingerprint(b)};
    json_t *d = inspect_diff(fps, 2);
    /* the first differing fields are the normalised ones, in order */
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(d, 0), "field")),
        "server");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(d, 1), "field")),
        "model");
    json_decref(d);
    json_decref(fps[0]);
    json_decref(fps[1]);
}

/* Two sims that differ in two flags: inspect shows exactly those. */
static void test_sim_flags_differ(void **state)
{
    (void)state;
    struct proc a, b;
    const char *av[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    const char *bv[] = {
        "sim",  "--listen",       "127.0.0.1:0", "--decode-noise",
        "0.25", "--forget-after", "2048",        NULL};
    assert_int_equal(proc_start(&a, av), 0);
    assert_int_equal(proc_start(&b, bv), 0);
    char ua[64], ub[64];
    snprintf(ua, sizeof(ua), "%s", proc_url(&a));
    snprintf(ub, sizeof(ub), "%s", proc_url(&b));
    struct buf out = BUF_INIT;
    const char *argv[] = {"inspect", ua, ub, "--json", "-", NULL};
    int rc = proc_run(argv, NULL, &out, NULL, 30);
    const char *argv2[] = {"inspect", ua, ua, NULL};
    struct buf same = BUF_INIT;
    int rc2 = proc_run(argv2, NULL, &same, NULL, 30);
    proc_stop(&a);
    proc_stop(&b);
    assert_int_equal(rc, 0);
    assert_int_equal(rc2, 0);
    char want[256];
    snprintf(want, sizeof(want),
             "[1] %s\n[2] %s\nno difference in what the 2 servers report\n", ua,
             ua);
    assert_string_equal(buf_str(&same), want);
    json_t *j = json_loads(buf_str(&out), 0, NULL);
    assert_non_null(j);
    json_t *d = json_object_get(j, "differences");
    assert_int_equal(json_array_size(d), 2);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(d, 0), "field")),
        "get_server_info.sim_config.decode_noise");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(d, 1), "field")),
        "get_server_info.sim_config.forget_after");
    json_t *v = json_object_get(json_array_get(d, 1), "values");
    assert_int_equal(json_integer_value(json_array_get(v, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(v, 1)), 2048);
    json_decref(j);
    buf_release(&out);
    buf_release(&same);
}

static void test_unreachable_is_exit_3(void **state)
{
    (void)state;
    struct buf err = BUF_INIT;
    const char *argv[] = {"inspect", "http://127.0.0.1:1", NULL};
    assert_int_equal(proc_run(argv, NULL, NULL, &err, 30), 3);
    assert_non_null(strstr(buf_str(&err), "'http://127.0.0.1:1' did not "
                                          "answer"));
    buf_release(&err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sglang),
        cmocka_unit_test(test_vllm),
        cmocka_unit_test(test_tgi),
        cmocka_unit_test(test_llamacpp),
        cmocka_unit_test(test_diff_of_fixtures),
        cmocka_unit_test(test_sim_flags_differ),
        cmocka_unit_test(test_unreachable_is_exit_3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
