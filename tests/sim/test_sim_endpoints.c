/*
 * End-to-end: every endpoint of `fidelity sim` answers with the JSON shape
 * and field names of the server whose dialect it speaks (OpenAI chat and
 * completions, vLLM /tokenize, /detokenize, /version and max_model_len,
 * sglang /generate and /get_server_info, TGI /generate), plus the sim's own
 * /sim/config and /sim/stats. Contract: docs/SIM.md, "Endpoints".
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/need.h"
#include "util/simtest.h"

static json_t *choice0(json_t *r)
{
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    assert_true(json_is_object(c));
    return c;
}

static void assert_usage(json_t *r)
{
    json_t *u = json_object_get(r, "usage");
    assert_true(json_is_object(u));
    json_t *p = json_object_get(u, "prompt_tokens");
    json_t *c = json_object_get(u, "completion_tokens");
    json_t *t = json_object_get(u, "total_tokens");
    assert_true(json_is_integer(p) && json_is_integer(c) && json_is_integer(t));
    assert_true(json_integer_value(p) > 0);
    assert_int_equal(json_integer_value(t),
                     json_integer_value(p) + json_integer_value(c));
}

static void test_health_models_version_server_info(void **state)
{
    struct simt *t = *state;
    struct proc *p =
        simt_start(t, "--model", "sim-7b", "--max-model-len", "32768", NULL);
    long st = 0;
    simt_assert_alive(t, p);

    json_t *m = simt_get(t, p, "/v1/models", &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(m, "object")),
                        "list");
    json_t *d0 = json_array_get(json_object_get(m, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(d0, "id")), "sim-7b");
    assert_string_equal(json_string_value(json_object_get(d0, "object")),
                        "model");
    assert_int_equal(json_integer_value(json_object_get(d0, "max_model_len")),
                     32768);
    json_decref(m);

    json_t *v = simt_get(t, p, "/version", &st);
    assert_int_equal(st, 200);
    const char *ver = json_string_value(json_object_get(v, "version"));
    assert_non_null(ver);
    assert_non_null(strstr(ver, "fidelity-sim"));
    json_decref(v);

    json_t *si = simt_get(t, p, "/get_server_info", &st);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(si, "model_path")),
                        "sim-7b");
    assert_int_equal(json_integer_value(json_object_get(si, "context_length")),
                     32768);
    assert_true(json_is_integer(json_object_get(si, "max_total_num_tokens")));
    json_decref(si);
}

static void test_chat_completion_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r = simt_ok(t, p, "/v1/chat/completions",
                        simt_chat1("Hello there, how are you?"));
    assert_true(json_is_string(json_object_get(r, "id")));
    assert_string_equal(json_string_value(json_object_get(r, "object")),
                        "chat.completion");
    assert_true(json_is_integer(json_object_get(r, "created")));
    assert_true(json_is_string(json_object_get(r, "model")));
    assert_int_equal(json_array_size(json_object_get(r, "choices")), 1);
    json_t *c = choice0(r);
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 0);
    json_t *msg = json_object_get(c, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")),
                        "assistant");
    assert_true(strlen(simt_reply(r)) > 0);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                        "stop");
    /* logprobs not asked for: absent or null, as OpenAI answers. */
    json_t *lp = json_object_get(c, "logprobs");
    assert_true(lp == NULL || json_is_null(lp));
    /* no reasoning unless asked for */
    json_t *rc = json_object_get(msg, "reasoning_content");
    assert_true(rc == NULL || json_is_null(rc));
    assert_usage(r);
    json_decref(r);
}

static void test_chat_max_tokens_gives_length(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *b = simt_chat1("Please write a long story about rivers and "
                           "mountains and the people who live there.");
    json_object_set_new(b, "max_tokens", json_integer(2));
    json_t *r = simt_ok(t, p, "/v1/chat/completions", b);
    json_t *c = choice0(r);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                        "length");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "usage"), "completion_tokens")),
                     2);
    json_decref(r);
}

static void test_completions_text_and_ids(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r = simt_ok(t, p, "/v1/completions",
                        json_pack("{s:s, s:s, s:i, s:f}", "model", "sim",
                                  "prompt", "The river ran past the old mill",
                                  "max_tokens", 5, "temperature", 0.0));
    assert_string_equal(json_string_value(json_object_get(r, "object")),
                        "text_completion");
    assert_true(json_is_string(json_object_get(r, "id")));
    assert_true(json_is_integer(json_object_get(r, "created")));
    json_t *c = choice0(r);
    assert_true(json_is_string(json_object_get(c, "text")));
    assert_int_equal(json_integer_value(json_object_get(c, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(c, "finish_reason")),
                        "length");
    assert_usage(r);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "usage"), "completion_tokens")),
                     5);
    assert_non_null(json_string_value(json_object_get(c, "text")));
    char *text1 = xstrdup(json_string_value(json_object_get(c, "text")));
    json_decref(r);

    /* The same prompt as token ids gives the same greedy text. */
    const char *prompt = "The river ran past the old mill";
    int32_t ids[64];
    size_t n = simref_tokenize(prompt, strlen(prompt), ids, 64);
    r = simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:o, s:i, s:f}", "model", "sim", "prompt",
                          simt_ids(ids, n), "max_tokens", 5, "temperature",
                          0.0));
    assert_int_equal(simt_prompt_tokens(r), n);
    assert_string_equal(json_string_value(json_object_get(choice0(r), "text")),
                        text1);
    free(text1);
    json_decref(r);
}

/* Defaults from docs/SIM.md: max_tokens 16 (completions), max_new_tokens
 * 128 (sglang); completions decode greedily whatever the temperature. */
static void test_generation_defaults(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r = simt_ok(t, p, "/v1/completions",
                        json_pack("{s:s}", "prompt", "Rain fell on quiet"));
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "usage"), "completion_tokens")),
                     16);
    const char *greedy = json_string_value(json_object_get(
        json_array_get(json_object_get(r, "choices"), 0), "text"));
    assert_non_null(greedy);
    json_t *hot =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:f, s:i}", "prompt", "Rain fell on quiet",
                          "temperature", 1.5, "seed", 3));
    assert_string_equal(
        json_string_value(json_object_get(
            json_array_get(json_object_get(hot, "choices"), 0), "text")),
        greedy);
    json_decref(hot);
    json_decref(r);
    r = simt_ok(t, p, "/generate", json_pack("{s:s}", "text", "Rain fell"));
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(r, "meta_info"), "completion_tokens")),
                     128);
    json_decref(r);
}

static void test_completions_echo_logprobs_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    const char *prompt = "Rain fell on quiet hills near town";
    int32_t ids[32];
    size_t n = simref_tokenize(prompt, strlen(prompt), ids, 32);
    json_t *r =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:o, s:b, s:i, s:i, s:f}", "model", "sim",
                          "prompt", simt_ids(ids, n), "echo", 1, "logprobs", 3,
                          "max_tokens", 2, "temperature", 0.0));
    json_t *c = choice0(r);
    const char *text = json_string_value(json_object_get(c, "text"));
    assert_non_null(text);
    /* echo: the text starts with the prompt */
    assert_memory_equal(text, prompt, strlen(prompt));
    json_t *lp = json_object_get(c, "logprobs");
    json_t *toks = json_object_get(lp, "tokens");
    json_t *tlp = json_object_get(lp, "token_logprobs");
    json_t *top = json_object_get(lp, "top_logprobs");
    json_t *off = json_object_get(lp, "text_offset");
    assert_int_equal(json_array_size(toks), n + 2);
    assert_int_equal(json_array_size(tlp), n + 2);
    assert_int_equal(json_array_size(top), n + 2);
    assert_int_equal(json_array_size(off), n + 2);
    /* OpenAI: the first prompt token has no logprob (null). */
    assert_true(json_is_null(json_array_get(tlp, 0)));
    for (size_t i = 1; i < n + 2; i++) {
        json_t *v = json_array_get(tlp, i);
        assert_true(json_is_number(v));
        assert_true(json_number_value(v) <= 0.0);
        json_t *ti = json_array_get(top, i);
        assert_true(json_is_object(ti));
        assert_true(json_object_size(ti) >= 1 && json_object_size(ti) <= 3 + 1);
        assert_true(json_is_string(json_array_get(toks, i)));
        assert_true(json_integer_value(json_array_get(off, i)) >=
                    json_integer_value(json_array_get(off, i - 1)));
    }
    assert_int_equal(json_integer_value(json_array_get(off, 0)), 0);
    json_decref(r);
}

static void test_completions_prompt_logprobs_vllm_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    const char *prompt = "Old boats drift past calm docks";
    int32_t ids[32];
    size_t n = simref_tokenize(prompt, strlen(prompt), ids, 32);
    json_t *r = simt_ok(t, p, "/v1/completions",
                        json_pack("{s:s, s:o, s:i, s:i, s:f}", "model", "sim",
                                  "prompt", simt_ids(ids, n), "prompt_logprobs",
                                  2, "max_tokens", 1, "temperature", 0.0));
    /* vLLM: choices[0].prompt_logprobs is a list with one entry per prompt
     * token: null for the first, then a dict keyed by token id (as a string)
     * of {"logprob", "rank", "decoded_token"}, which includes the actual
     * token. */
    json_t *pl = json_object_get(choice0(r), "prompt_logprobs");
    assert_int_equal(json_array_size(pl), n);
    assert_true(json_is_null(json_array_get(pl, 0)));
    for (size_t i = 1; i < n; i++) {
        json_t *d = json_array_get(pl, i);
        assert_true(json_is_object(d));
        char key[16];
        snprintf(key, sizeof(key), "%d", ids[i]);
        json_t *e = json_object_get(d, key);
        if (!e)
            fail_msg("prompt_logprobs[%zu] has no entry for token %s", i, key);
        assert_true(json_is_number(json_object_get(e, "logprob")));
        assert_true(json_is_integer(json_object_get(e, "rank")));
        assert_true(json_integer_value(json_object_get(e, "rank")) >= 1);
        assert_true(json_is_string(json_object_get(e, "decoded_token")));
    }
    json_decref(r);
}

static void test_generate_sglang_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    const char *prompt = "Kids ran home with warm bread";
    int32_t ids[32];
    size_t n = simref_tokenize(prompt, strlen(prompt), ids, 32);
    json_t *r =
        simt_ok(t, p, "/generate",
                json_pack("{s:o, s:{s:i, s:f}, s:b, s:i, s:i}", "input_ids",
                          simt_ids(ids, n), "sampling_params", "max_new_tokens",
                          3, "temperature", 0.0, "return_logprob", 1,
                          "logprob_start_len", 0, "top_logprobs_num", 2));
    assert_true(json_is_string(json_object_get(r, "text")));
    json_t *mi = json_object_get(r, "meta_info");
    assert_true(json_is_object(mi));
    assert_int_equal(json_integer_value(json_object_get(mi, "prompt_tokens")),
                     n);
    assert_int_equal(
        json_integer_value(json_object_get(mi, "completion_tokens")), 3);
    /* sglang: input_token_logprobs is [[logprob, token_id, text], ...], the
     * first logprob null; input_top_logprobs per position a list of such
     * triples (or null at position 0). */
    json_t *itl = json_object_get(mi, "input_token_logprobs");
    assert_int_equal(json_array_size(itl), n);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(itl, i);
        assert_true(json_is_array(e) && json_array_size(e) >= 2);
        json_t *lp = json_array_get(e, 0);
        assert_true(i == 0 ? (json_is_null(lp) || json_is_number(lp))
                           : json_is_number(lp));
        assert_int_equal(json_integer_value(json_array_get(e, 1)), ids[i]);
    }
    json_t *itop = json_object_get(mi, "input_top_logprobs");
    assert_int_equal(json_array_size(itop), n);
    json_t *top1 = json_array_get(itop, 1);
    assert_int_equal(json_array_size(top1), 2);
    assert_true(json_is_number(json_array_get(json_array_get(top1, 0), 0)));
    assert_true(json_is_integer(json_array_get(json_array_get(top1, 0), 1)));
    json_t *otl = json_object_get(mi, "output_token_logprobs");
    assert_int_equal(json_array_size(otl), 3);
    assert_true(json_is_number(json_array_get(json_array_get(otl, 0), 0)));
    json_decref(r);

    /* text instead of input_ids */
    r = simt_ok(t, p, "/generate",
                json_pack("{s:s, s:{s:i}}", "text", prompt, "sampling_params",
                          "max_new_tokens", 2));
    assert_true(json_is_string(json_object_get(r, "text")));
    assert_true(json_is_object(json_object_get(r, "meta_info")));
    json_decref(r);
}

static void test_generate_tgi_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *r = simt_ok(t, p, "/generate",
                        json_pack("{s:s, s:{s:i}}", "inputs",
                                  "Grey skies over green fields", "parameters",
                                  "max_new_tokens", 4));
    /* TGI answers {"generated_text": ...} */
    assert_true(json_is_string(json_object_get(r, "generated_text")));
    assert_null(json_object_get(r, "meta_info"));
    json_decref(r);
}

static void test_tokenize_detokenize_shape(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--max-model-len", "16384", NULL);
    json_t *r = simt_ok(t, p, "/tokenize",
                        json_pack("{s:s, s:b}", "prompt", "hello world",
                                  "add_special_tokens", 0));
    json_t *toks = json_object_get(r, "tokens");
    assert_true(json_is_array(toks));
    assert_int_equal(json_integer_value(json_object_get(r, "count")),
                     json_array_size(toks));
    assert_int_equal(json_integer_value(json_object_get(r, "max_model_len")),
                     16384);
    json_t *d =
        simt_ok(t, p, "/detokenize", json_pack("{s:O}", "tokens", toks));
    assert_string_equal(json_string_value(json_object_get(d, "prompt")),
                        "hello world");
    json_decref(d);
    json_decref(r);
}

static void test_sim_config_get_set_reset(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, "--forget-after", "4096", NULL);
    long st = 0;
    json_t *c = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(st, 200);
    assert_int_equal(json_integer_value(json_object_get(c, "forget_after")),
                     4096);
    json_decref(c);

    c = simt_ok(
        t, p, "/sim/config",
        json_pack("{s:i, s:f}", "forget_after", 100, "decode_noise", 0.25));
    json_decref(c);
    c = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(json_integer_value(json_object_get(c, "forget_after")),
                     100);
    assert_true(json_number_value(json_object_get(c, "decode_noise")) == 0.25);
    json_decref(c);

    c = simt_ok(t, p, "/sim/config", json_pack("{s:b}", "reset", 1));
    json_decref(c);
    c = simt_get(t, p, "/sim/config", &st);
    assert_int_equal(json_integer_value(json_object_get(c, "forget_after")),
                     4096);
    assert_true(json_number_value(json_object_get(c, "decode_noise")) == 0.0);
    json_decref(c);
}

/* --hide-faults: the info endpoints of a faulty sim read as a healthy
 * one's, while the fault still acts. */
static void test_hide_faults(void **state)
{
    struct simt *t = *state;
    struct proc *h = simt_start(t, "--hide-faults", NULL);
    struct proc *f = simt_start(t, "--hide-faults", "--context-limit", "64",
                                "--overflow", "oldest", NULL);
    long st = 0;
    json_t *ch = simt_get(t, h, "/sim/config", &st);
    json_t *cf = simt_get(t, f, "/sim/config", &st);
    assert_true(json_equal(ch, cf));
    assert_null(json_object_get(cf, "context_limit"));
    assert_true(json_is_true(json_object_get(cf, "hide_faults")));
    json_t *ih = simt_get(t, h, "/get_server_info", &st);
    json_t *inf = simt_get(t, f, "/get_server_info", &st);
    assert_true(json_equal(ih, inf));
    assert_int_equal(
        json_integer_value(json_object_get(inf, "max_total_num_tokens")),
        json_integer_value(json_object_get(inf, "context_length")));
    /* the fault still acts: a long prompt is cut to 64 tokens */
    char *text = simt_filler(300, 1);
    json_t *r = simt_ok(t, f, "/v1/chat/completions", simt_chat1(text));
    assert_int_equal(simt_prompt_tokens(r), 64);
    json_decref(r);
    free(text);
    json_decref(ch);
    json_decref(cf);
    json_decref(ih);
    json_decref(inf);
}

static void test_sim_config_rejects_unknown_key(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long st = 0;
    json_t *c = simt_postj(t, p, "/sim/config",
                           json_pack("{s:i}", "no_such_fault", 1), &st);
    assert_int_equal(st, 400);
    simt_assert_error(c, "no_such_fault");
    json_decref(c);
    simt_assert_alive(t, p);
}

/* Sum of every integer under a key containing "chat" (any depth). */
static long chat_count(json_t *j, bool under)
{
    long s = 0;
    if (json_is_integer(j))
        return under ? (long)json_integer_value(j) : 0;
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) s +=
            chat_count(v, under || strstr(k, "chat") != NULL);
    }
    return s;
}

static void test_sim_stats_counts_requests(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long st = 0;
    json_t *a = simt_get(t, p, "/sim/stats", &st);
    assert_int_equal(st, 200);
    assert_true(json_is_object(a));
    long before = chat_count(a, false);
    json_decref(a);
    for (int i = 0; i < 3; i++)
        free(simt_ask(t, p, simt_chat1("Count me please.")));
    a = simt_get(t, p, "/sim/stats", &st);
    assert_int_equal(chat_count(a, false) - before, 3);
    json_decref(a);
}

static void test_unknown_path_and_wrong_method(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    long st = 0;
    json_t *e = simt_get(t, p, "/v1/no/such/thing", &st);
    assert_int_equal(st, 404);
    simt_assert_error(e, NULL);
    json_decref(e);
    e = simt_get(t, p, "/v1/chat/completions", &st);
    assert_int_equal(st, 405);
    simt_assert_error(e, NULL);
    json_decref(e);
    simt_assert_alive(t, p);
}

/* Sends one raw request and returns the body of the answer. */
static json_t *raw_get(const struct proc *p, const char *request)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, request, strlen(request)),
                     (ssize_t)strlen(request));
    struct buf b = BUF_INIT;
    char tmp[4096];
    ssize_t n;
    while ((n = read(fd, tmp, sizeof(tmp))) > 0)
        buf_add(&b, tmp, (size_t)n);
    close(fd);
    const char *body = strstr(buf_str(&b), "\r\n\r\n");
    assert_non_null(body);
    assert_non_null(strstr(buf_str(&b), " 404 "));
    json_t *j = json_loads(body + 4, 0, NULL);
    buf_release(&b);
    assert_non_null(j);
    return j;
}

/*
 * SIM.md, "Endpoints": 404 for unknown paths in the OpenAI error shape, and
 * (project rule) a message naming the input. Regression: a path with bytes
 * that are not UTF-8 (lead byte F5) once got "message": "" because the
 * sim's UTF-8 check let through what jansson rejects.
 */
static void test_404_for_non_utf8_path_has_a_message(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *j = raw_get(p, "GET /\xf5\x90\x80\x80 HTTP/1.1\r\nHost: x\r\n"
                           "Connection: close\r\n\r\n");
    const char *m = json_string_value(
        json_object_get(json_object_get(j, "error"), "message"));
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", m ? m : "(none)");
    json_decref(j);
    if (strlen(msg) == 0 || !strstr(msg, "GET"))
        fail_msg("404 message '%s' does not name the request", msg);
    simt_assert_alive(t, p);
}

/* An IPv6 listen address is printed in brackets, "http://[::1]:PORT" (it
 * was "http://::1:PORT", which no client parses), and served there. */
static void test_ipv6_listen_printed_bracketed(void **state)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    a.sin6_addr = in6addr_loopback;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool has_v6 = fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof(a));
    if (fd >= 0)
        close(fd);
    (void)state;
    if (!has_v6) {
        need_missing("an IPv6 loopback address (::1)");
    }
    const char *av[] = {"sim", "--listen", "[::1]:0", NULL};
    struct proc p;
    assert_int_equal(proc_start(&p, av), 0);
    char want[64];
    snprintf(want, sizeof(want), "fidelity sim: listening on http://[::1]:%d",
             p.port);
    bool line_ok = !strcmp(p.line, want);
    a.sin6_port = htons((uint16_t)p.port);
    fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool served = false;
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a))) {
        static const char req[] = "GET /health HTTP/1.1\r\nHost: x\r\n"
                                  "Connection: close\r\n\r\n";
        char got[64] = "";
        if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) > 0 &&
            recv(fd, got, sizeof(got) - 1, MSG_WAITALL) > 12)
            served = !strncmp(got, "HTTP/1.1 200", 12);
    }
    if (fd >= 0)
        close(fd);
    proc_stop(&p);
    if (!line_ok)
        fail_msg("first line '%s', want '%s'", p.line, want);
    assert_true(served);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_health_models_version_server_info),
        T(test_chat_completion_shape),
        T(test_chat_max_tokens_gives_length),
        T(test_completions_text_and_ids),
        T(test_generation_defaults),
        T(test_completions_echo_logprobs_shape),
        T(test_completions_prompt_logprobs_vllm_shape),
        T(test_generate_sglang_shape),
        T(test_generate_tgi_shape),
        T(test_tokenize_detokenize_shape),
        T(test_sim_config_get_set_reset),
        T(test_hide_faults),
        T(test_sim_config_rejects_unknown_key),
        T(test_sim_stats_counts_requests),
        T(test_unknown_path_and_wrong_method),
        T(test_404_for_non_utf8_path_has_a_message),
        cmocka_unit_test(test_ipv6_listen_printed_bracketed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
