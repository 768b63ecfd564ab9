/*
 * drift dialects: request bodies and answer parsers for vLLM prompt
 * logprobs, OpenAI echo, sglang /generate and TGI /generate. Contract and
 * field-name sources in dialect.h.
 */
#include "drift/dialect.h"

#include <errno.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "drift/fastparse.h"
#include "drift/lp.h"
#include "drift/scan.h"

static const char *const names[DRIFT_DIALECTS] = {
    [DRIFT_DIALECT_AUTO] = "auto", [DRIFT_DIALECT_VLLM] = "vllm",
    [DRIFT_DIALECT_ECHO] = "echo", [DRIFT_DIALECT_SGLANG] = "sglang",
    [DRIFT_DIALECT_TGI] = "tgi",   [DRIFT_DIALECT_NONE] = "none",
};

const char *drift_dialect_name(enum drift_dialect d)
{
    return d < DRIFT_DIALECTS ? names[d] : "?";
}

int drift_dialect_parse(const char *s, enum drift_dialect *out)
{
    for (int i = 0; i < DRIFT_DIALECT_NONE; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum drift_dialect)i;
            return 0;
        }
    return -EINVAL;
}

/* A JSON number as a double; NAN for null, strings and anything else. */
static double num(const json_t *v)
{
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static bool get_id(const json_t *v, uint64_t *id)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *id = (uint64_t)json_integer_value(v);
    return true;
}

/* Replaces NaN / Infinity / -Infinity at s[i] (outside strings), which is
 * 'N' or 'I'; returns 1 when it did. */
static size_t sanitize_at(char *s, size_t i, size_t len)
{
    if (s[i] == 'N') {
        if (len - i >= 3 && !memcmp(s + i, "NaN", 3)) {
            memcpy(s + i, "1e9", 3); /* positive: read back as invalid */
            return 1;
        }
    } else if (s[i] == 'I' && len - i >= 8 && !memcmp(s + i, "Infinity", 8)) {
        /* a '-' before an outside byte is outside too: the byte before
         * one is outside or a closing quote */
        if (i > 0 && s[i - 1] == '-')
            memcpy(s + i - 1, "-1e300   ", 9);
        else
            memcpy(s + i, "1e300   ", 8);
        return 1;
    }
    return 0;
}

#if defined(__SSE2__)
/* For the 64 bytes at s, bit k set where s[k] is a backslash (*bs), a
 * quote (*q), 'N' or 'I' (*sp). */
static void masks64(const char *s, uint64_t *bs, uint64_t *q, uint64_t *sp)
{
    const __m128i vb = _mm_set1_epi8('\\'), vq = _mm_set1_epi8('"'),
                  vn = _mm_set1_epi8('N'), vi = _mm_set1_epi8('I');
    *bs = *q = *sp = 0;
    for (int k = 0; k < 4; k++) {
        __m128i x =
            _mm_loadu_si128((const __m128i *)(const void *)(s + 16 * k));
        *bs |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vb))
               << (16 * k);
        *q |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, vq))
              << (16 * k);
        *sp |= (uint64_t)(unsigned)_mm_movemask_epi8(
                   _mm_or_si128(_mm_cmpeq_epi8(x, vn), _mm_cmpeq_epi8(x, vi)))
               << (16 * k);
    }
}
#endif

/*
 * Outside strings only 'N' (NaN) and 'I' (Infinity, -Infinity) matter;
 * inside, only '"' and '\\'. Blocks of 64 bytes without a backslash are
 * done with bit masks (the bytes inside strings are the prefix XOR of the
 * quotes); the rest a byte at a time, as before. Replacements write
 * neither quotes nor 'N'/'I', so masks taken before them stay right for
 * quotes, and each 'N'/'I' is checked again in place. Most answers have
 * neither (sglang's arrays hold numbers and null): then there is nothing
 * to rewrite and no need to follow strings (scan.c says so at once).
 */
size_t drift_json_sanitize(char *s, size_t len)
{
    size_t n = 0, i = 0;
    bool in_str = false, esc = false;
    if (!drift_scan_n_or_i(s, len))
        return 0;
#if defined(__SSE2__)
    for (; len - i >= 64; i += 64) {
        uint64_t bs, q, sp;
        masks64(s + i, &bs, &q, &sp);
        if (bs || esc) {
            for (size_t k = i; k < i + 64; k++) {
                if (esc) {
                    esc = false;
                } else if (in_str) {
                    if (s[k] == '\\')
                        esc = true;
                    else if (s[k] == '"')
                        in_str = false;
                } else if (s[k] == '"') {
                    in_str = true;
                } else {
                    n += sanitize_at(s, k, len);
                }
            }
            continue;
        }
        if (!sp) { /* only the string state to carry */
            in_str ^= __builtin_popcountll(q) & 1;
            continue;
        }
        uint64_t inside = q;
        for (int sh = 1; sh < 64; sh <<= 1)
            inside ^= inside << sh;
        if (in_str)
            inside = ~inside;
        in_str = inside >> 63;
        /* a quote's own bit: opening ones read as inside, closing ones as
         * outside; neither is 'N' or 'I', so sp & ~inside is exact */
        for (uint64_t m = sp & ~inside; m; m &= m - 1)
            n += sanitize_at(s, i + (size_t)__builtin_ctzll(m), len);
    }
#endif
    for (; i < len; i++) {
        if (esc) {
            esc = false;
        } else if (in_str) {
            if (s[i] == '\\')
                esc = true;
            else if (s[i] == '"')
                in_str = false;
        } else if (s[i] == '"') {
            in_str = true;
        } else {
            n += sanitize_at(s, i, len);
        }
    }
    return n;
}

const char *drift_dialect_path(enum drift_dialect d)
{
    return d == DRIFT_DIALECT_SGLANG || d == DRIFT_DIALECT_TGI
               ? "/generate"
               : "/v1/completions";
}

static json_t *ids_array(const uint32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *build_completions(enum drift_dialect d,
                                 const struct drift_req *r)
{
    json_t *o = json_object();
    if (r->model)
        json_object_set_new(o, "model", json_string(r->model));
    json_object_set_new(o, "prompt", ids_array(r->ids, r->n));
    json_object_set_new(o, "max_tokens", json_integer(r->max_new));
    json_object_set_new(o, "temperature", json_real(0));
    json_object_set_new(o, "logprobs", json_integer(r->top_k));
    /* vLLM extension: name tokens "token_id:N" so ids survive */
    json_object_set_new(o, "return_tokens_as_token_ids", json_true());
    if (r->prompt_logprobs && d == DRIFT_DIALECT_VLLM)
        json_object_set_new(o, "prompt_logprobs", json_integer(r->top_k));
    if (r->prompt_logprobs && d == DRIFT_DIALECT_ECHO)
        json_object_set_new(o, "echo", json_true());
    return o;
}

static json_t *build_sglang(const struct drift_req *r)
{
    json_t *o = json_object(), *sp = json_object();
    json_object_set_new(o, "input_ids", ids_array(r->ids, r->n));
    json_object_set_new(sp, "max_new_tokens", json_integer(r->max_new));
    json_object_set_new(sp, "temperature", json_real(0));
    json_object_set_new(o, "sampling_params", sp);
    json_object_set_new(o, "return_logprob", json_true());
    json_object_set_new(o, "top_logprobs_num", json_integer(r->top_k));
    if (r->prompt_logprobs)
        json_object_set_new(o, "logprob_start_len", json_integer(0));
    if (r->extra_ids && r->n_extra)
        json_object_set_new(o, "token_ids_logprob",
                            ids_array(r->extra_ids, r->n_extra));
    if (r->model)
        json_object_set_new(o, "model", json_string(r->model));
    return o;
}

static json_t *build_tgi(const struct drift_req *r)
{
    json_t *o = json_object(), *p = json_object();
    json_object_set_new(o, "inputs", json_string(r->text ? r->text : ""));
    json_object_set_new(p, "max_new_tokens", json_integer(r->max_new));
    json_object_set_new(p, "do_sample", json_false());
    json_object_set_new(p, "details", json_true());
    json_object_set_new(p, "top_n_tokens", json_integer(r->top_k));
    if (r->prompt_logprobs)
        json_object_set_new(p, "decoder_input_details", json_true());
    json_object_set_new(o, "parameters", p);
    return o;
}

json_t *drift_request_build(enum drift_dialect d, const struct drift_req *r)
{
    json_t *o;
    switch (d) {
    case DRIFT_DIALECT_SGLANG:
        o = build_sglang(r);
        break;
    case DRIFT_DIALECT_TGI:
        o = build_tgi(r);
        break;
    default:
        o = build_completions(d, r);
        break;
    }
    if (r->extra_body && json_is_object(r->extra_body))
        json_object_update(o, (json_t *)r->extra_body);
    return o;
}

/* ---- vLLM prompt_logprobs ---- */

static const json_t *choice0(const json_t *resp, struct diag *dg)
{
    const json_t *c = json_object_get(resp, "choices");
    if (!json_is_array(c) || json_array_size(c) == 0) {
        diag_set(dg, EBADMSG, "answer has no 'choices' array");
        return NULL;
    }
    return json_array_get(c, 0);
}

/* Adds a vLLM {"ID": {"logprob": x}} (or {"ID": x}) dict to pos i. */
static void vllm_dict(struct drift_lp *lp, uint32_t i, const json_t *dict,
                      uint64_t forced, unsigned top_k)
{
    const char *k;
    json_t *v;
    lp->off[i] = lp->pool_len;
    lp->pos[i].forced = forced;
    lp->pos[i].forced_lp = NAN;
    json_object_foreach((json_t *)dict, k, v)
    {
        char *end;
        unsigned long long id = strtoull(k, &end, 10);
        if (end == k || *end)
            continue;
        double x =
            json_is_object(v) ? num(json_object_get(v, "logprob")) : num(v);
        if ((uint64_t)id == forced)
            lp->pos[i].forced_lp = x;
        drift_lp_pool_add(lp, id, x);
    }
    drift_lp_pos_close(lp, i, top_k);
    lp->valid[i] = (uint8_t)!isnan(lp->pos[i].forced_lp);
}

static int parse_vllm(const json_t *resp, const struct drift_req *r,
                      struct drift_lp *lp, struct diag *dg)
{
    const json_t *c = choice0(resp, dg);
    if (!c)
        return -EBADMSG;
    const json_t *pl = json_object_get(c, "prompt_logprobs");
    if (!json_is_array(pl))
        return diag_set(dg, EBADMSG,
                        "answer has no 'choices[0].prompt_logprobs' array");
    size_t m = json_array_size(pl);
    lp->n_returned = (uint32_t)(m < r->n ? m : r->n);
    for (uint32_t i = 1; i < lp->n_returned; i++) {
        const json_t *e = json_array_get(pl, i);
        if (json_is_object(e))
            vllm_dict(lp, i, e, r->ids[i], r->top_k);
        else
            lp->off[i] = lp->pool_len;
    }
    return 0;
}

/* ---- OpenAI echo ---- */

/* Reads logprobs.{tokens, token_logprobs, top_logprobs}[from..from+n) into
 * entries 0..n of lp; ids (may be NULL) are the expected tokens. */
static int echo_block(const json_t *lpo, size_t from, uint32_t n,
                      const uint32_t *ids, unsigned top_k, struct drift_lp *lp,
                      struct diag *dg)
{
    const json_t *toks = json_object_get(lpo, "tokens");
    const json_t *tlp = json_object_get(lpo, "token_logprobs");
    const json_t *top = json_object_get(lpo, "top_logprobs");
    if (!json_is_array(toks) || !json_is_array(tlp))
        return diag_set(dg, EBADMSG,
                        "answer has no 'logprobs.tokens' and "
                        "'logprobs.token_logprobs' arrays");
    size_t m = json_array_size(tlp);
    size_t avail = m > from ? m - from : 0;
    lp->n_returned = (uint32_t)(avail < n ? avail : n);
    for (uint32_t i = 0; i < lp->n_returned; i++) {
        const json_t *t = json_array_get(toks, from + i);
        const json_t *d =
            json_is_array(top) ? json_array_get(top, from + i) : NULL;
        lp->off[i] = lp->pool_len;
        if (!json_is_string(t))
            continue;
        uint64_t key =
            drift_key_text(json_string_value(t), json_string_length(t));
        if (ids)
            lp->ids[i] = ids[i];
        else if (!(key & DRIFT_KEY_TEXT))
            lp->ids[i] = (uint32_t)key;
        if (ids && !(key & DRIFT_KEY_TEXT) && key != ids[i]) {
            drift_lp_mark_mismatch(lp, i);
            continue;
        }
        lp->pos[i].forced = key;
        lp->pos[i].forced_lp = num(json_array_get(tlp, from + i));
        const char *k;
        json_t *v;
        if (json_is_object(d))
            json_object_foreach((json_t *)d, k, v)
                drift_lp_pool_add(lp, drift_key_text(k, strlen(k)), num(v));
        drift_lp_pos_close(lp, i, top_k);
        lp->valid[i] = (uint8_t)!isnan(lp->pos[i].forced_lp);
    }
    return 0;
}

static int parse_echo(const json_t *resp, const struct drift_req *r,
                      struct drift_lp *lp, struct diag *dg)
{
    const json_t *c = choice0(resp, dg);
    if (!c)
        return -EBADMSG;
    const json_t *lpo = json_object_get(c, "logprobs");
    if (!json_is_object(lpo))
        return diag_set(dg, EBADMSG, "answer has no 'choices[0].logprobs'");
    int ret = echo_block(lpo, 0, lp->n, r->ids, r->top_k, lp, dg);
    if (lp->n)
        lp->valid[0] = 0; /* the first token has no distribution */
    return ret;
}

/* ---- sglang ---- */

/* Adds [[lp, id, text], ...] entries to the pool. */
static void sglang_list(struct drift_lp *lp, const json_t *list)
{
    size_t k;
    const json_t *e;
    json_array_foreach(list, k, e)
    {
        uint64_t id;
        if (json_is_array(e) && get_id(json_array_get(e, 1), &id))
            drift_lp_pool_add(lp, id, num(json_array_get(e, 0)));
    }
}

/* One position from sglang's token list / top list / id-list arrays. */
static void sglang_pos(struct drift_lp *lp, uint32_t i, const json_t *tok,
                       const json_t *top, const json_t *extra,
                       const uint32_t *expect, unsigned top_k)
{
    uint64_t id;
    lp->off[i] = lp->pool_len;
    if (!json_is_array(tok) || !get_id(json_array_get(tok, 1), &id))
        return;
    if (expect && id != expect[i]) {
        drift_lp_mark_mismatch(lp, i);
        return;
    }
    lp->ids[i] = (uint32_t)id;
    lp->pos[i].forced = id;
    lp->pos[i].forced_lp = num(json_array_get(tok, 0));
    if (json_is_array(top))
        sglang_list(lp, top);
    drift_lp_pos_close(lp, i, top_k);
    size_t before = lp->pool_len; /* after the dedup shrank the top */
    if (json_is_array(extra)) {
        sglang_list(lp, extra); /* lookups only, after the top */
        lp->pos[i].n_known += (uint32_t)(lp->pool_len - before);
    }
    lp->valid[i] = (uint8_t)!isnan(lp->pos[i].forced_lp);
}

static const json_t *meta(const json_t *resp, struct diag *dg)
{
    if (json_is_array(resp) && json_array_size(resp) > 0)
        resp = json_array_get(resp, 0);
    const json_t *m = json_object_get(resp, "meta_info");
    if (!json_is_object(m))
        diag_set(dg, EBADMSG, "answer has no 'meta_info' object");
    return json_is_object(m) ? m : NULL;
}

static int parse_sglang(const json_t *resp, const struct drift_req *r,
                        struct drift_lp *lp, struct diag *dg)
{
    const json_t *m = meta(resp, dg);
    if (!m)
        return -EBADMSG;
    const json_t *tl = json_object_get(m, "input_token_logprobs");
    const json_t *top = json_object_get(m, "input_top_logprobs");
    const json_t *ex = json_object_get(m, "input_token_ids_logprobs");
    if (!ex) /* the spelling some sglang versions (and the sim) use */
        ex = json_object_get(m, "input_token_ids_logprob");
    if (!json_is_array(tl))
        return diag_set(dg, EBADMSG,
                        "answer has no 'meta_info.input_token_logprobs'");
    size_t cnt = json_array_size(tl);
    lp->n_returned = (uint32_t)(cnt < r->n ? cnt : r->n);
    for (uint32_t i = 0; i < lp->n_returned; i++)
        sglang_pos(lp, i, json_array_get(tl, i), json_array_get(top, i),
                   json_array_get(ex, i), r->ids, r->top_k);
    if (lp->n)
        lp->valid[0] = 0;
    return 0;
}

/* ---- TGI ---- */

static int parse_tgi(const json_t *resp, const struct drift_req *r,
                     struct drift_lp *lp, struct diag *dg)
{
    if (json_is_array(resp) && json_array_size(resp) > 0)
        resp = json_array_get(resp, 0);
    const json_t *pre =
        json_object_get(json_object_get(resp, "details"), "prefill");
    if (!json_is_array(pre))
        return diag_set(dg, EBADMSG,
                        "answer has no 'details.prefill' array"
                        " (is decoder_input_details honoured?)");
    size_t cnt = json_array_size(pre);
    lp->n_returned = (uint32_t)(cnt < r->n ? cnt : r->n);
    for (uint32_t i = 0; i < lp->n_returned; i++) {
        const json_t *e = json_array_get(pre, i);
        uint64_t id;
        lp->off[i] = lp->pool_len;
        if (!get_id(json_object_get(e, "id"), &id))
            continue;
        if (id != r->ids[i]) {
            drift_lp_mark_mismatch(lp, i);
            continue;
        }
        lp->pos[i].forced = id;
        lp->pos[i].forced_lp = num(json_object_get(e, "logprob"));
        lp->valid[i] = i > 0 && !isnan(lp->pos[i].forced_lp);
    }
    return 0;
}

int drift_parse_prompt(enum drift_dialect d, const json_t *resp,
                       const struct drift_req *r, struct drift_lp *lp,
                       struct diag *dg)
{
    int ret;
    drift_lp_reset(lp, (uint32_t)r->n);
    switch (d) {
    case DRIFT_DIALECT_VLLM:
        ret = parse_vllm(resp, r, lp, dg);
        break;
    case DRIFT_DIALECT_ECHO:
        ret = parse_echo(resp, r, lp, dg);
        break;
    case DRIFT_DIALECT_SGLANG:
        ret = parse_sglang(resp, r, lp, dg);
        break;
    case DRIFT_DIALECT_TGI:
        ret = parse_tgi(resp, r, lp, dg);
        break;
    default:
        return diag_set(dg, EINVAL, "dialect '%s' has no prompt logprobs",
                        drift_dialect_name(d));
    }
    for (uint32_t i = lp->n_returned; i < lp->n; i++)
        lp->off[i] = lp->pool_len;
    drift_lp_finish(lp);
    return ret;
}

/* ---- decode (generated tokens) ---- */

static int decode_completions(const json_t *resp, struct drift_lp *lp,
                              struct diag *dg)
{
    const json_t *c = choice0(resp, dg);
    if (!c)
        return -EBADMSG;
    const json_t *lpo = json_object_get(c, "logprobs");
    const json_t *tlp = json_object_get(lpo, "token_logprobs");
    if (!json_is_array(tlp))
        return diag_set(dg, EBADMSG,
                        "answer has no 'choices[0].logprobs.token_logprobs'");
    drift_lp_reset(lp, (uint32_t)json_array_size(tlp));
    int ret = echo_block(lpo, 0, lp->n, NULL, DRIFT_TOPK_MAX, lp, dg);
    if (ret)
        return ret;
    const json_t *tids = json_object_get(c, "token_ids");
    for (uint32_t i = 0; i < lp->n; i++) {
        if (!(lp->pos[i].forced & DRIFT_KEY_TEXT) && lp->valid[i])
            continue;
        const json_t *v = json_array_get(tids, i);
        uint64_t id;
        if (!get_id(v, &id))
            return diag_set(dg, ENOKEY,
                            "cannot tell the id of generated token %u: the "
                            "server gives neither 'token_id:N' tokens "
                            "(return_tokens_as_token_ids) nor "
                            "'choices[0].token_ids'",
                            i);
        lp->ids[i] = (uint32_t)id;
    }
    return 0;
}

static int decode_sglang(const json_t *resp, struct drift_lp *lp,
                         struct diag *dg)
{
    const json_t *m = meta(resp, dg);
    if (!m)
        return -EBADMSG;
    const json_t *tl = json_object_get(m, "output_token_logprobs");
    const json_t *top = json_object_get(m, "output_top_logprobs");
    if (!json_is_array(tl))
        return diag_set(dg, EBADMSG,
                        "answer has no 'meta_info.output_token_logprobs'");
    drift_lp_reset(lp, (uint32_t)json_array_size(tl));
    lp->n_returned = lp->n;
    for (uint32_t i = 0; i < lp->n; i++) {
        sglang_pos(lp, i, json_array_get(tl, i), json_array_get(top, i), NULL,
                   NULL, DRIFT_TOPK_MAX);
        if (!lp->valid[i] && !json_is_array(json_array_get(tl, i)))
            return diag_set(dg, EBADMSG,
                            "generated token %u has no [logprob, id] pair", i);
    }
    return 0;
}

static int decode_tgi(const json_t *resp, struct drift_lp *lp, struct diag *dg)
{
    if (json_is_array(resp) && json_array_size(resp) > 0)
        resp = json_array_get(resp, 0);
    const json_t *det = json_object_get(resp, "details");
    const json_t *toks = json_object_get(det, "tokens");
    const json_t *top = json_object_get(det, "top_tokens");
    if (!json_is_array(toks))
        return diag_set(dg, EBADMSG, "answer has no 'details.tokens' array");
    drift_lp_reset(lp, (uint32_t)json_array_size(toks));
    lp->n_returned = lp->n;
    for (uint32_t i = 0; i < lp->n; i++) {
        const json_t *e = json_array_get(toks, i), *t = json_array_get(top, i);
        uint64_t id;
        lp->off[i] = lp->pool_len;
        if (!get_id(json_object_get(e, "id"), &id))
            return diag_set(dg, EBADMSG, "generated token %u has no 'id'", i);
        lp->ids[i] = (uint32_t)id;
        lp->pos[i].forced = id;
        lp->pos[i].forced_lp = num(json_object_get(e, "logprob"));
        size_t k;
        const json_t *x;
        json_array_foreach(t, k, x)
        {
            uint64_t xid;
            if (get_id(json_object_get(x, "id"), &xid))
                drift_lp_pool_add(lp, xid, num(json_object_get(x, "logprob")));
        }
        drift_lp_pos_close(lp, i, DRIFT_TOPK_MAX);
        lp->valid[i] = (uint8_t)!isnan(lp->pos[i].forced_lp);
    }
    return 0;
}

int drift_parse_decode(enum drift_dialect d, const json_t *resp,
                       struct drift_lp *lp, struct diag *dg)
{
    int ret;
    switch (d) {
    case DRIFT_DIALECT_SGLANG:
        ret = decode_sglang(resp, lp, dg);
        break;
    case DRIFT_DIALECT_TGI:
        ret = decode_tgi(resp, lp, dg);
        break;
    default:
        ret = decode_completions(resp, lp, dg);
        break;
    }
    if (ret)
        return ret;
    drift_lp_finish(lp);
    return 0;
}

int drift_parse_prompt_lent(enum drift_dialect d, const char *text, size_t len,
                            const struct drift_req *r, struct drift_lp *lp,
                            struct diag *dg)
{
    if (!drift_fast_prompt(d, text, len, r, lp))
        return 0;
    char *copy = xmalloc(len + 1);
    memcpy(copy, text, len + 1);
    int ret = drift_parse_prompt_text(d, copy, len, r, lp, dg);
    free(copy);
    return ret;
}

int drift_parse_prompt_text(enum drift_dialect d, char *text, size_t len,
                            const struct drift_req *r, struct drift_lp *lp,
                            struct diag *dg)
{
    json_error_t e;
    /* accepted: valid JSON, so sanitizing would not have changed it */
    if (!drift_fast_prompt(d, text, len, r, lp))
        return 0;
    if (drift_json_sanitize(text, len) &&
        !drift_fast_prompt(d, text, len, r, lp))
        return 0;
    json_t *j = json_loadb(text, len, 0, &e);
    if (!j)
        return diag_set(dg, EBADMSG, "answer is not JSON (%s at byte %d)",
                        e.text, e.position);
    int ret = drift_parse_prompt(d, j, r, lp, dg);
    json_decref(j);
    return ret;
}
