/*
 * simtest: fixture, HTTP helpers and the reference tokenizer for the
 * end-to-end tests of `fidelity sim` (see simtest.h).
 */
#include "util/simtest.h"

#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/need.h"

int simt_setup(void **state)
{
    struct simt *t = xcalloc(1, sizeof(*t));
    t->http = http_client_new();
    *state = t;
    return 0;
}

int simt_teardown(void **state)
{
    struct simt *t = *state;
    for (int i = 0; i < t->nprocs; i++)
        proc_stop(&t->procs[i]);
    http_client_free(t->http);
    free(t);
    *state = NULL;
    return 0;
}

/* True when the binary under test has only the placeholder sim. */
static bool sim_is_placeholder(void)
{
    const char *argv[] = {"sim", "--listen", "127.0.0.1:0", NULL};
    struct buf err = BUF_INIT;
    proc_run(argv, NULL, NULL, &err, 3);
    bool ph = strstr(buf_str(&err), "not built yet") != NULL;
    buf_release(&err);
    return ph;
}

struct proc *simt_start(struct simt *t, ...)
{
    const char *argv[48];
    int n = 0;
    va_list ap;

    assert_true(t->nprocs < SIMT_MAX_PROCS);
    argv[n++] = "sim";
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    va_start(ap, t);
    for (const char *a; (a = va_arg(ap, const char *)) && n < 47;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    struct proc *p = &t->procs[t->nprocs];
    if (proc_start(p, argv)) {
        if (sim_is_placeholder())
            need_missing("fidelity sim (this build has its placeholder)");
        print_message("cannot start:");
        for (int i = 0; i < n; i++)
            print_message(" %s", argv[i]);
        print_message("\n");
        fail_msg("fidelity sim did not start");
    }
    t->nprocs++;
    return p;
}

static char *url_of(const struct proc *p, const char *path)
{
    return xasprintf("%s%s", proc_url(p), path);
}

int simt_raw(struct simt *t, const struct proc *p, const char *method,
             const char *path, const char *body, size_t len,
             const char *content_type, struct http_resp *resp)
{
    char ct[128];
    const char *hdrs[2] = {NULL, NULL};
    struct diag d = {""};
    char *url = url_of(p, path);

    if (content_type) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        hdrs[0] = ct;
    }
    struct http_req req = {.method = method,
                           .url = url,
                           .body = body,
                           .body_len = len,
                           .headers = hdrs,
                           .timeout_ms = 60000};
    int ret = http_do(t->http, &req, resp, &d);
    free(url);
    return ret;
}

static json_t *parse_answer(const struct http_resp *r, const char *path)
{
    json_error_t jerr;
    json_t *j = json_loadb(buf_str(&r->body), r->body.len, 0, &jerr);
    if (!j)
        fail_msg("%s answered HTTP %ld with a body that is not JSON (%s): "
                 "'%.200s'",
                 path, r->status, jerr.text, buf_str(&r->body));
    return j;
}

json_t *simt_post(struct simt *t, const struct proc *p, const char *path,
                  const char *text, long *status)
{
    struct http_resp r;
    http_resp_init(&r);
    int ret = simt_raw(t, p, "POST", path, text, strlen(text),
                       "application/json", &r);
    if (ret)
        fail_msg("POST %s failed: %d", path, ret);
    json_t *j = parse_answer(&r, path);
    if (status)
        *status = r.status;
    http_resp_release(&r);
    return j;
}

json_t *simt_postj(struct simt *t, const struct proc *p, const char *path,
                   json_t *body, long *status)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    json_t *j = simt_post(t, p, path, text, status);
    free(text);
    return j;
}

json_t *simt_get(struct simt *t, const struct proc *p, const char *path,
                 long *status)
{
    struct http_resp r;
    http_resp_init(&r);
    int ret = simt_raw(t, p, "GET", path, NULL, 0, NULL, &r);
    if (ret)
        fail_msg("GET %s failed: %d", path, ret);
    json_t *j = parse_answer(&r, path);
    if (status)
        *status = r.status;
    http_resp_release(&r);
    return j;
}

json_t *simt_ok(struct simt *t, const struct proc *p, const char *path,
                json_t *body)
{
    long status = 0;
    json_t *j = simt_postj(t, p, path, body, &status);
    if (status != 200) {
        char *s = json_dumps(j, JSON_COMPACT);
        fail_msg("POST %s: HTTP %ld: %.300s", path, status, s);
    }
    return j;
}

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n))
            return true;
    return n == 0;
}

void simt_assert_error(json_t *ans, const char *needle)
{
    json_t *e = json_object_get(ans, "error");
    assert_true(json_is_object(e));
    const char *msg = json_string_value(json_object_get(e, "message"));
    assert_non_null(msg);
    assert_true(strlen(msg) > 0);
    assert_true(json_is_string(json_object_get(e, "type")));
    if (needle && !contains_nocase(msg, needle))
        fail_msg("error message '%s' does not mention '%s'", msg, needle);
}

void simt_assert_alive(struct simt *t, const struct proc *p)
{
    long status = 0;
    json_t *j = simt_get(t, p, "/health", &status);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    json_decref(j);
}

json_t *simt_msg(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

json_t *simt_chat(json_t *messages)
{
    return json_pack("{s:s, s:o, s:f}", "model", "sim", "messages", messages,
                     "temperature", 0.0);
}

json_t *simt_chat1(const char *user_text)
{
    return simt_chat(json_pack("[o]", simt_msg("user", user_text)));
}

const char *simt_reply(json_t *r)
{
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    json_t *m = json_object_get(c, "message");
    const char *s = json_string_value(json_object_get(m, "content"));
    if (!s) {
        char *d = json_dumps(r, JSON_COMPACT);
        fail_msg("no choices[0].message.content in %.300s", d);
    }
    return s;
}

char *simt_ask(struct simt *t, const struct proc *p, json_t *body)
{
    json_t *r = simt_ok(t, p, "/v1/chat/completions", body);
    char *s = xstrdup(simt_reply(r));
    json_decref(r);
    return s;
}

long simt_prompt_tokens(json_t *r)
{
    json_t *u = json_object_get(json_object_get(r, "usage"), "prompt_tokens");
    assert_true(json_is_integer(u));
    return (long)json_integer_value(u);
}

long simt_count(struct simt *t, const struct proc *p, const char *text)
{
    json_t *r = simt_ok(
        t, p, "/tokenize",
        json_pack("{s:s, s:b}", "prompt", text, "add_special_tokens", 0));
    json_t *c = json_object_get(r, "count");
    assert_true(json_is_integer(c));
    long n = (long)json_integer_value(c);
    json_decref(r);
    return n;
}

long simt_count_messages(struct simt *t, const struct proc *p, json_t *messages)
{
    json_t *r = simt_ok(t, p, "/tokenize",
                        json_pack("{s:s, s:O, s:b}", "model", "sim", "messages",
                                  messages, "add_generation_prompt", 1));
    json_t *c = json_object_get(r, "count");
    assert_true(json_is_integer(c));
    long n = (long)json_integer_value(c);
    json_decref(r);
    return n;
}

json_t *simt_ids(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

void simt_prompt_logprobs(struct simt *t, const struct proc *p,
                          const int32_t *ids, size_t n, double *out)
{
    json_t *r =
        simt_ok(t, p, "/v1/completions",
                json_pack("{s:s, s:o, s:b, s:i, s:i, s:f}", "model", "sim",
                          "prompt", simt_ids(ids, n), "echo", 1, "logprobs", 1,
                          "max_tokens", 1, "temperature", 0.0));
    assert_int_equal(simt_prompt_tokens(r), n);
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    json_t *tl =
        json_object_get(json_object_get(c, "logprobs"), "token_logprobs");
    assert_true(json_is_array(tl));
    assert_true(json_array_size(tl) >= n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(tl, i);
        if (i == 0 && json_is_null(v)) {
            out[i] = 0;
            continue;
        }
        assert_true(json_is_number(v));
        out[i] = json_number_value(v);
    }
    json_decref(r);
}

size_t simt_decode_logprobs(struct simt *t, const struct proc *p, json_t *body,
                            double *out, size_t max)
{
    json_object_set_new(body, "logprobs", json_true());
    json_t *r = simt_ok(t, p, "/v1/chat/completions", body);
    json_t *c = json_array_get(json_object_get(r, "choices"), 0);
    json_t *content =
        json_object_get(json_object_get(c, "logprobs"), "content");
    assert_true(json_is_array(content));
    size_t n = 0;
    for (; n < json_array_size(content) && n < max; n++) {
        json_t *lp = json_object_get(json_array_get(content, n), "logprob");
        assert_true(json_is_number(lp));
        out[n] = json_number_value(lp);
    }
    json_decref(r);
    return n;
}

char *simt_filler(size_t ntok, unsigned salt)
{
    static const char *const words[] = {
        "rain",  "fell", "on",   "quiet", "hills",  "near",  "town",  "and",
        "birds", "sang", "over", "green", "fields", "while", "old",   "boats",
        "drift", "past", "calm", "docks", "under",  "grey",  "skies", "as",
        "kids",  "ran",  "home", "with",  "warm",   "bread", "slow",  "carts"};
    struct buf b = BUF_INIT;
    uint32_t x = 2463534242u ^ salt;
    size_t have = 0;
    while (have < ntok) {
        size_t start = b.len;
        for (int w = 0; w < 8; w++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            const char *word = words[x % (sizeof(words) / sizeof(*words))];
            if (w == 0)
                buf_printf(&b, "%c%s", toupper((unsigned char)word[0]),
                           word + 1);
            else
                buf_printf(&b, " %s", word);
        }
        buf_adds(&b, ". ");
        /* the trailing space joins the next sentence's first word */
        have += simref_tokenize(b.data + start, b.len - start, NULL, 0) - 1;
    }
    return buf_detach(&b, NULL);
}

/* ---- reference tokenizer ---- */

static const char *const specials[] = {
    "<|bos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
    "<|end|>", "<think>",    "</think>", "<|tool_call|>",
};

static int char_index(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'Z')
        return 10 + c - 'A';
    if (c >= 'a' && c <= 'z')
        return 36 + c - 'a';
    return -1;
}

size_t simref_tokenize(const char *s, size_t len, int32_t *out, size_t max)
{
    size_t i = 0, n = 0;
    while (i < len) {
        int32_t id = -1;
        size_t adv = 0;
        for (size_t k = 0; k < sizeof(specials) / sizeof(*specials); k++) {
            size_t sl = strlen(specials[k]);
            if (sl <= len - i && !memcmp(s + i, specials[k], sl)) {
                id = (int32_t)k;
                adv = sl;
                break;
            }
        }
        if (id < 0) {
            size_t sp = s[i] == ' ' && i + 1 < len &&
                        char_index((unsigned char)s[i + 1]) >= 0;
            size_t l = 0;
            long val = 0, pw = 1, off = 0;
            while (l < 4 && i + sp + l < len &&
                   char_index((unsigned char)s[i + sp + l]) >= 0) {
                val += char_index((unsigned char)s[i + sp + l]) * pw;
                pw *= 62;
                l++;
            }
            for (long k = 1, p62 = 62; k < (long)l; k++, p62 *= 62)
                off += p62;
            if (l > 0) {
                id = (int32_t)(272 + (long)sp * SIMREF_N + off + val);
                adv = sp + l;
            } else {
                id = 16 + (unsigned char)s[i];
                adv = 1;
            }
        }
        if (n < max)
            out[n] = id;
        n++;
        i += adv;
    }
    return n;
}

size_t simref_count(const char *s)
{
    return simref_tokenize(s, strlen(s), NULL, 0);
}

static void add_content(struct buf *b, json_t *content)
{
    if (json_is_string(content)) {
        buf_add(b, json_string_value(content), json_string_length(content));
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        json_t *text = json_object_get(part, "text");
        if (json_is_string(text))
            buf_add(b, json_string_value(text), json_string_length(text));
    }
}

char *simref_render(json_t *messages, bool keep_reasoning)
{
    struct buf b = BUF_INIT;
    size_t i;
    json_t *m;

    buf_adds(&b, "<|bos|>");
    json_array_foreach(messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        assert_non_null(role);
        buf_printf(&b, "<|%s|>", role);
        json_t *r = json_object_get(m, "reasoning_content");
        if (!r)
            r = json_object_get(m, "reasoning");
        if (keep_reasoning && !strcmp(role, "assistant") && json_is_string(r) &&
            json_string_length(r) > 0)
            buf_printf(&b, "<think>%s</think>", json_string_value(r));
        add_content(&b, json_object_get(m, "content"));
        buf_adds(&b, "<|end|>\n");
    }
    buf_adds(&b, "<|assistant|>");
    return buf_detach(&b, NULL);
}
