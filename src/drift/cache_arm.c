/*
 * drift cache arm (contract in cache_arm.h, method in docs/DRIFT.md,
 * "Cache arm"): the conversation with a fresh marker, the flush endpoint
 * found and used, the earlier turns sent through chat, the final request
 * generated cold, warm and after eviction, and the comparison of the
 * generated tokens' distributions while the greedy tokens agree.
 */
#include "drift/cache_arm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/url.h"
#include "core/xalloc.h"

void drift_cache_opts_default(struct drift_cache_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->convs = 16;
    o->min_convs = 4;
    o->max_turns = 4;
    o->self = true;
    o->gen_tokens = 32;
    o->turn_tokens = 16;
    o->max_context = 4096;
    o->seed = 1;
}

void drift_cache_result_release(struct drift_cache_result *r)
{
    free(r->conv_sums);
    r->conv_sums = NULL;
}

void drift_cache_harm(const struct drift_cache_result *r,
                      struct drift_harm_warm *out)
{
    *out = (struct drift_harm_warm){.sums = r->conv_sums,
                                    .n = r->ran ? r->convs : 0,
                                    .has_self = r->has_self,
                                    .flips = (double)r->excess.flips};
}

const char *drift_cache_attribution(const struct drift_cache_result *r)
{
    bool warm = drift_verdict_off(r->verdict);
    bool ev = r->evict_ran && drift_verdict_off(r->evict_verdict);
    if (!r->ran)
        return r->asked ? "could not run" : "not run";
    if (warm && ev)
        return "warm and recomputed paths differ from cold";
    if (warm)
        return "warm path differs from cold";
    if (ev)
        return "recomputed path differs from cold";
    return "none";
}

void drift_cache_hit_text(const struct drift_cache_result *r, struct buf *out)
{
    const struct drift_cache_seen *s = &r->seen;
    if (s->warm < 0)
        buf_adds(out, "cache use unknown (the server reports no cached "
                      "tokens)");
    else if (s->warm == 0)
        buf_adds(out, "not hit: the warm request was served cold");
    else
        buf_printf(out, "hit (%ld of %ld prompt tokens cached)", s->warm,
                   s->prompt);
}

/* ---- requests ---- */

/* The flush endpoints, sglang's first (python/sglang/srt/entrypoints/
 * http_server.py: GET or POST /flush_cache), then vLLM's
 * (POST /reset_prefix_cache, with VLLM_SERVER_DEV_MODE=1). */
static const char *const flush_paths[] = {"/flush_cache",
                                          "/reset_prefix_cache"};

int drift_cache_flush(struct drift_side *s, const char *path, struct diag *d)
{
    long st = 0;
    struct buf b = BUF_INIT;
    int ret = drift_side_send_plain(s, "POST", path, &st, &b, d);
    if (!ret &&
        (st < 200 || st > 299 || strstr(buf_str(&b), "\"success\":false") ||
         strstr(buf_str(&b), "\"success\": false"))) {
        ret = diag_set(d, ENOENT, "%s%s answered HTTP %ld", s->url, path, st);
        url_mask_in(d->msg, sizeof(d->msg), s->url);
    }
    buf_release(&b);
    return ret;
}

int drift_cache_find_flush(struct drift_side *s, const char **path,
                           struct diag *d)
{
    for (size_t i = 0; i < 2; i++) {
        int ret = drift_cache_flush(s, flush_paths[i], d);
        if (!ret) {
            *path = flush_paths[i];
            return 0;
        }
        if (ret != -ENOENT)
            return ret;
    }
    *path = NULL;
    return 0;
}

/* Greedy generation of the final request in the side's generation dialect
 * (drift_side_generate's choice), never with prompt logprobs; *cached from
 * the answer; the requests sent count in r->model_requests. */
static int generate(struct drift_side *s, struct drift_cache_result *r,
                    const uint32_t *ids, size_t n, unsigned max_new,
                    struct drift_lp *lp, long *cached, struct diag *d)
{
    return drift_side_generate_seen(s, ids, n, max_new, lp, cached,
                                    &r->model_requests, d);
}

/* One harness turn: chat with the history, greedy; the reply's text. */
static int chat_turn(struct drift_side *s, struct drift_cache_result *r,
                     json_t *msgs, unsigned max_new, char **reply,
                     struct diag *d)
{
    json_t *body = json_pack("{s:O,s:i,s:f}", "messages", msgs, "max_tokens",
                             (int)max_new, "temperature", 0.0);
    json_t *out = NULL;
    long st;
    r->model_requests++;
    if (s->model)
        json_object_set_new(body, "model", json_string(s->model));
    int ret = drift_side_call(s, "/v1/chat/completions", body, &out, &st, d);
    json_decref(body);
    if (ret)
        return ret;
    const json_t *m = json_object_get(
        json_array_get(json_object_get(out, "choices"), 0), "message");
    const char *text = json_string_value(json_object_get(m, "content"));
    *reply = xstrdup(text ? text : "");
    json_decref(out);
    return 0;
}

/* ---- the conversation ---- */

/* A copy of msgs with a marker no server has seen at the start of the
 * system message (one is added when there is none). */
static json_t *marked(const json_t *msgs, uint64_t nonce)
{
    json_t *m = json_deep_copy(msgs);
    char mark[64];
    snprintf(mark, sizeof(mark), "Reference %016llx. ",
             (unsigned long long)nonce);
    json_t *first = json_array_get(m, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    const char *text = json_string_value(json_object_get(first, "content"));
    if (role && !strcmp(role, "system") && text) {
        char *t = xasprintf("%s%s", mark, text);
        json_object_set_new(first, "content", json_string(t));
        free(t);
    } else {
        json_array_insert_new(
            m, 0, json_pack("{s:s,s:s}", "role", "system", "content", mark));
    }
    return m;
}

static bool is_user(const json_t *msg)
{
    const char *r = json_string_value(json_object_get(msg, "role"));
    return r && !strcmp(r, "user");
}

static size_t users(const json_t *msgs)
{
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(msgs); i++)
        k += is_user(json_array_get(msgs, i));
    return k;
}

/*
 * The history of the final request: messages up to the turns-th user
 * message. With generated, the earlier turns are sent through chat and
 * each reply the server gave replaces the conversation's own assistant
 * turn (as a harness sends them); else they keep the conversation's text
 * and are sent after the cold request (warm() below).
 */
static int history(struct drift_side *s, struct drift_cache_result *r,
                   const json_t *msgs, size_t turns, bool generated,
                   unsigned turn_tokens, json_t **out, struct diag *d)
{
    json_t *h = json_array();
    size_t seen = 0;
    int ret = 0;
    for (size_t i = 0; i < json_array_size(msgs) && !ret; i++) {
        json_t *m = json_array_get(msgs, i);
        bool user = is_user(m);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (user)
            seen++;
        if (seen > turns)
            break;
        if (generated && seen > 0 && !user && role &&
            !strcmp(role, "assistant"))
            continue; /* replaced by the server's own reply */
        json_array_append(h, m);
        if (!generated || !user || seen == turns)
            continue;
        char *reply = NULL;
        ret = chat_turn(s, r, h, turn_tokens, &reply, d);
        if (!ret)
            json_array_append_new(h, json_pack("{s:s,s:s}", "role", "assistant",
                                               "content", reply));
        free(reply);
    }
    if (ret) {
        json_decref(h);
        return ret;
    }
    *out = h;
    return 0;
}

/* The earlier turns of h (up to its last user message), sent through chat
 * with the conversation's own assistant text: the warm-up without flush. */
static int warm_up(struct drift_side *s, struct drift_cache_result *r,
                   const json_t *h, unsigned turn_tokens, struct diag *d)
{
    json_t *part = json_array();
    size_t total = users(h), seen = 0;
    int ret = 0;
    for (size_t i = 0; i < json_array_size(h) && !ret; i++) {
        json_t *m = json_array_get(h, i);
        if (is_user(m) && ++seen == total)
            break;
        json_array_append(part, m);
        if (is_user(m)) {
            char *reply = NULL;
            ret = chat_turn(s, r, part, turn_tokens, &reply, d);
            free(reply);
        }
    }
    json_decref(part);
    return ret;
}

/* ---- eviction ---- */

static long capacity_of(const struct drift_side *s)
{
    const json_t *si = json_object_get(s->fingerprint, "/get_server_info");
    const json_t *v = json_object_get(si, "max_total_num_tokens");
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

/* Sends distinct prompts totalling 1.25 times the capacity, one new token
 * each, so that the least recently used blocks (the final request's) go. */
static int evict(struct drift_side *s, struct drift_cache_result *r,
                 const struct drift_cache_opts *o, long capacity,
                 struct diag *d)
{
    long target = capacity + capacity / 4 + 64, sent = 0;
    size_t len = o->max_context > 64 ? o->max_context - 8 : 56;
    if ((long)len > capacity)
        len = (size_t)capacity;
    for (unsigned i = 0; sent < target; i++) {
        json_t *conv = drift_corpus_conversation(
            hash_mix2(o->nonce, 0x65766963ULL + i), i, len * 9 / 2 + 64);
        json_t *m = marked(conv, hash_mix2(o->nonce, i + 1));
        uint32_t *ids = NULL;
        size_t n = 0;
        struct drift_lp lp;
        long cached;
        int ret = drift_side_tokenize(s, m, NULL, &ids, &n, d);
        json_decref(conv);
        json_decref(m);
        if (ret)
            return ret;
        if (n > len)
            n = len;
        drift_lp_init(&lp);
        ret = generate(s, r, ids, n, 1, &lp, &cached, d);
        drift_lp_release(&lp);
        free(ids);
        if (ret)
            return ret;
        sent += (long)n;
    }
    return 0;
}

/* ---- comparison ---- */

/* Decode entries at positions prompt + i, as the prefill sides are laid
 * out (decode.c does the same). */
static void place(const struct drift_lp *dec, uint32_t prompt,
                  struct drift_lp *out)
{
    drift_lp_reset(out, prompt + dec->n);
    out->n_returned = prompt + dec->n;
    for (uint32_t i = 0; i < dec->n; i++) {
        out->pos[prompt + i] = dec->pos[i];
        out->valid[prompt + i] = dec->valid[i];
        if (dec->pos[i].forced & DRIFT_KEY_TEXT)
            out->pos[prompt + i].forced = dec->ids[i];
    }
}

/* Generated tokens a and b agree on from the start. */
static uint32_t agree(const struct drift_lp *a, const struct drift_lp *b)
{
    uint32_t n = a->n < b->n ? a->n : b->n, i;
    for (i = 0; i < n && a->ids[i] == b->ids[i]; i++)
        ;
    return i;
}

/* Where the greedy tokens first differ both distributions still follow
 * the same context: names ref's token as the one at p (its logprob from
 * p's own list). False when p does not list it. */
static bool force(struct drift_pos *p, const struct drift_pos *ref)
{
    for (uint32_t k = 0; k < p->n_known; k++) {
        if (p->top[k].key == ref->forced) {
            p->forced = ref->forced;
            p->forced_lp = p->top[k].lp;
            p->checked = false;
            return true;
        }
    }
    return false;
}

/* Folds ref vs other (decode entries) into arm of an; returns the
 * positions compared (while the greedy tokens agree). */
static uint32_t fold(struct drift_analysis *an, enum drift_arm arm,
                     uint32_t prompt, const struct drift_lp *ref,
                     const struct drift_lp *other, const struct drift_opts *o,
                     const char *name, bool *unlisted)
{
    struct drift_lp a, b;
    uint32_t m = agree(ref, other);
    drift_lp_init(&a);
    drift_lp_init(&b);
    place(ref, prompt, &a);
    place(other, prompt, &b);
    uint32_t to = prompt + m;
    bool differ = m < ref->n && m < other->n;
    if (differ && force(&b.pos[to], &a.pos[to]))
        to++; /* the first differing token: same context, other pick */
    else if (differ && unlisted)
        *unlisted = true; /* ref's token is not even in other's top-k */
    uint32_t seq = drift_analysis_begin_seq(an);
    drift_compare_lp(an, arm, seq, &a, &b, prompt, to, o, name);
    drift_lp_release(&a);
    drift_lp_release(&b);
    return m;
}

/* The standard error of the warm KL mean over conversations (a cluster
 * estimate: positions of one conversation move together, so their own
 * spread understates the spread between conversations); 0 with fewer
 * than two. */
static double conv_se(const double *sums, unsigned k)
{
    double s = 0, n = 0, acc = 0;
    if (!sums || k < 2)
        return 0;
    for (unsigned i = 0; i < k; i++) {
        s += sums[i * 4];
        n += sums[i * 4 + 1];
    }
    if (!(n > 0))
        return 0;
    double mean = s / n;
    for (unsigned i = 0; i < k; i++) {
        double e = sums[i * 4] - mean * sums[i * 4 + 1];
        acc += e * e;
    }
    return sqrt((double)k / (k - 1) * acc) / n;
}

static enum drift_verdict judge(const struct drift_analysis *an, bool has_self,
                                const struct drift_cache_result *r,
                                const struct drift_thresholds *th,
                                struct drift_bsum *sum, struct drift_bsum *self,
                                struct drift_bsum *excess,
                                struct drift_undecided *u)
{
    struct drift_acc tot, ts;
    struct drift_bsum zero = {0};
    drift_analysis_total(an, DRIFT_ARM_CAND, &tot);
    drift_analysis_total(an, DRIFT_ARM_SELF, &ts);
    drift_bucket_summary(&tot, sum);
    drift_bucket_summary(&ts, self);
    /* warm and cold both carry the candidate's run-to-run noise: the
     * baseline is the whole of cold vs cold */
    drift_bucket_excess(sum, has_self ? self : &zero, has_self ? self : &zero,
                        has_self, excess);
    /* the wider of the positions' and the conversations' error */
    double c = r ? conv_se(r->conv_sums, r->convs) : 0;
    if (c > sum->kl_se) {
        double ss = has_self ? self->kl_se : 0;
        excess->kl_se = sqrt(c * c + 0.5 * ss * ss);
    }
    u->level = DRIFT_NA;
    return sum->n ? drift_bucket_judge(excess, th, u) : DRIFT_NA;
}

/* The totals (KL sum, positions) of arm in an. */
static void arm_total(const struct drift_analysis *an, enum drift_arm arm,
                      double out[2])
{
    struct drift_acc t;
    drift_analysis_total(an, arm, &t);
    out[0] = t.kl_sum;
    out[1] = (double)t.n;
}

/* ---- sizing ---- */

/*
 * The history the final request will have with k user turns, as
 * history() builds it, for counting: with generated, the conversation's
 * assistant messages dropped and an empty reply after each earlier user
 * message (the server's replies, at most turn_tokens each, take their
 * place); without, the conversation's own messages.
 */
static json_t *shape_of(const json_t *msgs, size_t k, bool generated)
{
    json_t *h = json_array();
    size_t seen = 0;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        bool user = is_user(m);
        const char *role = json_string_value(json_object_get(m, "role"));
        seen += user;
        if (seen > k)
            break;
        if (generated && seen > 0 && !user && role &&
            !strcmp(role, "assistant"))
            continue;
        json_array_append(h, m);
        if (generated && user && seen < k)
            json_array_append_new(
                h, json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
    }
    return h;
}

/* Tokens the final request of k user turns needs, its generated tokens
 * counted: the server's own count of the history's shape, plus the
 * earlier replies (turn_tokens each and one for a retokenized boundary)
 * and the generation. */
static int need(struct drift_side *s, const json_t *conv, size_t k, bool gen,
                const struct drift_cache_opts *o, size_t *out, struct diag *d)
{
    json_t *h = shape_of(conv, k, gen);
    uint32_t *ids = NULL;
    size_t n = 0;
    int ret = drift_side_tokenize(s, h, NULL, &ids, &n, d);
    json_decref(h);
    free(ids);
    if (!ret)
        *out = n + (gen ? (k - 1) * (o->turn_tokens + 1) : 0) + o->gen_tokens;
    return ret;
}

/* The most user turns (2 to max_turns) whose final request fits
 * o->max_context; 0 when not even two do. */
static int fit_turns(struct drift_side *s, const json_t *conv, bool gen,
                     const struct drift_cache_opts *o, size_t *turns,
                     struct diag *d)
{
    size_t lo = 2, hi = users(conv), n;
    if (o->max_turns && hi > o->max_turns)
        hi = o->max_turns;
    *turns = 0;
    if (hi < 2)
        return 0;
    int ret = need(s, conv, lo, gen, o, &n, d);
    if (ret || n > o->max_context)
        return ret;
    while (lo < hi) { /* lo fits */
        size_t mid = (lo + hi + 1) / 2;
        if ((ret = need(s, conv, mid, gen, o, &n, d)))
            return ret;
        if (n <= o->max_context)
            lo = mid;
        else
            hi = mid - 1;
    }
    *turns = lo;
    return 0;
}

/* ---- one conversation ---- */

struct conv_lps {
    struct drift_lp cold, cold2, warm, ev;
};

static int one_conv(struct drift_side *s, const json_t *conv,
                    const struct drift_cache_opts *o, size_t turns,
                    struct drift_cache_result *r, struct drift_analysis an[2],
                    const struct drift_opts *ro, struct diag *d)
{
    struct conv_lps l;
    json_t *h = NULL;
    uint32_t *ids = NULL;
    size_t n = 0;
    long cold2_cached = -1;
    int ret;
    bool gen = r->flush != NULL;
    double before[2][2], after[2][2];

    drift_lp_init(&l.cold);
    drift_lp_init(&l.cold2);
    drift_lp_init(&l.warm);
    drift_lp_init(&l.ev);
    if (gen && (ret = drift_cache_flush(s, r->flush, d)))
        goto out;
    ret = history(s, r, conv, turns, gen, o->turn_tokens, &h, d);
    if (!ret)
        ret = drift_side_tokenize(s, h, NULL, &ids, &n, d);
    if (ret)
        goto out;
    /* the sizing bounds it; a reply that retokenized longer is cut */
    if (n + o->gen_tokens > o->max_context && o->max_context > o->gen_tokens)
        n = o->max_context - o->gen_tokens;
    r->seen.prompt = (long)n;
    if (gen) { /* warm first, then cold after a flush */
        ret = generate(s, r, ids, n, o->gen_tokens, &l.warm, &r->seen.warm, d);
        if (!ret)
            ret = drift_cache_flush(s, r->flush, d);
        if (!ret)
            ret = generate(s, r, ids, n, o->gen_tokens, &l.cold, &r->seen.cold,
                           d);
        if (!ret && r->has_self && !(ret = drift_cache_flush(s, r->flush, d)))
            ret = generate(s, r, ids, n, o->gen_tokens, &l.cold2, &cold2_cached,
                           d);
    } else { /* cold first: the content was never seen */
        ret = generate(s, r, ids, n, o->gen_tokens, &l.cold, &r->seen.cold, d);
        if (!ret)
            ret = warm_up(s, r, h, o->turn_tokens, d);
        if (!ret)
            ret = generate(s, r, ids, n, o->gen_tokens, &l.warm, &r->seen.warm,
                           d);
    }
    if (ret)
        goto out;
    uint32_t prompt = (uint32_t)n;
    arm_total(&an[0], DRIFT_ARM_CAND, before[0]);
    arm_total(&an[0], DRIFT_ARM_SELF, before[1]);
    bool unlisted = false;
    uint32_t m = fold(&an[0], DRIFT_ARM_CAND, prompt, &l.cold, &l.warm, ro,
                      "cache-warm", &unlisted);
    r->unlisted_divergences += unlisted;
    r->compared += m;
    if (m < l.cold.n || m < l.warm.n) {
        r->diverged_warm++;
        if (r->diverged_at < 0 || (long)m < r->diverged_at)
            r->diverged_at = m;
    }
    if (r->has_self) {
        uint32_t m2 = fold(&an[0], DRIFT_ARM_SELF, prompt, &l.cold, &l.cold2,
                           ro, "cache-self", NULL);
        if (m2 < l.cold.n || m2 < l.cold2.n)
            r->diverged_cold++;
        fold(&an[1], DRIFT_ARM_SELF, prompt, &l.cold, &l.cold2, ro,
             "cache-self", NULL);
    }
    arm_total(&an[0], DRIFT_ARM_CAND, after[0]);
    arm_total(&an[0], DRIFT_ARM_SELF, after[1]);
    r->conv_sums = xrealloc(r->conv_sums, (r->convs + 1) * 4 * sizeof(double));
    for (int k = 0; k < 4; k++)
        r->conv_sums[r->convs * 4 + (unsigned)k] =
            after[k / 2][k % 2] - before[k / 2][k % 2];
    if (o->evict && r->capacity > 0) {
        ret = evict(s, r, o, r->capacity, d);
        if (!ret)
            ret = generate(s, r, ids, n, o->gen_tokens, &l.ev, &r->seen.evicted,
                           d);
        if (ret)
            goto out;
        r->evict_compared += fold(&an[1], DRIFT_ARM_CAND, prompt, &l.cold,
                                  &l.ev, ro, "cache-evicted", NULL);
        r->evict_ran = true;
    }
    r->convs++;
out:
    if (ret)
        diag_prefix(d, "cache arm");
    json_decref(h);
    free(ids);
    drift_lp_release(&l.cold);
    drift_lp_release(&l.cold2);
    drift_lp_release(&l.warm);
    drift_lp_release(&l.ev);
    return ret;
}

/* A copy of msgs with every message's text cut to about keep (0 to 1) of
 * its length, at a space (its first sentence, the fact, stays first). */
static json_t *shortened(const json_t *msgs, double keep)
{
    json_t *m = json_deep_copy(msgs);
    for (size_t i = 0; keep < 1 && i < json_array_size(m); i++) {
        json_t *x = json_array_get(m, i);
        const char *t = json_string_value(json_object_get(x, "content"));
        if (!t || i == 0)
            continue; /* the system message keeps the marker */
        size_t n = strlen(t), cut = (size_t)((double)n * keep);
        while (cut > 0 && t[cut] != ' ')
            cut--;
        if (cut == 0)
            cut = n < 16 ? n : 16;
        char *c = xasprintf("%.*s", (int)cut, t);
        json_object_set_new(x, "content", json_string(c));
        free(c);
    }
    return m;
}

/* Conversation i, marked, and its turns sized to the context: a corpus
 * conversation with two user turns or more while there are such, else a
 * built-in one (fresh content, not the same one again), shortened until
 * two turns fit. *out NULL when none fits. */
static int conversation(struct drift_side *c, const struct drift_corpus *corpus,
                        const struct drift_cache_opts *o, bool gen, unsigned i,
                        json_t **out, size_t *turns, struct diag *d)
{
    const struct drift_item *it = i < corpus->n ? &corpus->items[i] : NULL;
    size_t chars = (size_t)o->max_context * 9 / 2 + 64;
    int ret = 0;
    *out = NULL;
    json_t *base = it && it->messages && users(it->messages) >= 2
                       ? json_incref(it->messages)
                       : drift_corpus_conversation(o->seed, 1000 + i, chars);
    double keep = 1;
    for (int tries = 0; tries < 10 && !ret && !*out; tries++, keep *= 0.6) {
        json_t *cut = shortened(base, keep);
        json_t *conv = marked(cut, hash_mix2(o->nonce, 0x636f6e76ULL + i));
        json_decref(cut);
        ret = fit_turns(c, conv, gen, o, turns, d);
        if (!ret && *turns >= 2)
            *out = conv;
        else
            json_decref(conv);
    }
    json_decref(base);
    if (!ret && !*out)
        ret = diag_set(d, E2BIG,
                       "cache arm: no conversation of two user turns fits "
                       "the context of %u tokens with %u generated",
                       o->max_context, o->gen_tokens);
    return ret;
}

/* Clear of the thresholds either way: decided WARN or FAIL (the FAIL
 * side too), or PASS with the upper bounds of mean KL and top-1
 * disagreement under WARN. */
static bool decided(const struct drift_bsum *x, enum drift_verdict v,
                    const struct drift_undecided *u,
                    const struct drift_thresholds *th)
{
    if (v == DRIFT_INCONCLUSIVE || v == DRIFT_NA || u->level != DRIFT_NA)
        return false;
    if (v != DRIFT_PASS)
        return true;
    return x->kl_mean + 2 * x->kl_se < th->kl_mean[0] &&
           1 - x->top1 + 2 * x->top1_se < 1 - th->top1[0];
}

/* The warm comparison's verdict from what was gathered. */
static void conclude(struct drift_cache_result *r, struct drift_analysis *an,
                     const struct drift_cache_opts *o,
                     const struct drift_thresholds *th)
{
    struct drift_undecided *u = &r->undecided;
    r->verdict =
        judge(an, r->has_self, r, th, &r->sum, &r->self, &r->excess, u);
    /* a greedy token cold was sure of (its margin past --flip-margin, or
     * one the warm side does not even list) changes on the warm path, and
     * cold against cold never diverges on this server: the cache changes
     * what the model answers, whatever the KL of the positions before it.
     * That is the harm the arm exists to find: FAIL, decided */
    r->decisive_divergences = r->sum.flips + r->unlisted_divergences;
    bool cold_stable = r->has_self && r->diverged_cold == 0;
    if (cold_stable && r->decisive_divergences) {
        r->verdict = DRIFT_FAIL;
        u->level = DRIFT_NA;
    } else if (r->verdict == DRIFT_NA && r->diverged_warm) {
        /* tokens diverge and nothing could be compared: not a PASS */
        r->verdict = DRIFT_INCONCLUSIVE;
    }
    double per = r->convs ? (double)r->sum.n / r->convs : 0;
    r->more_convs = u->level != DRIFT_NA && per > 0 && isfinite(u->more)
                        ? ceil(u->more / per)
                        : 0;
    if (r->verdict == DRIFT_PASS && r->convs < o->min_convs) {
        /* stopped short of the minimum (a refused request): not PASS */
        r->verdict = DRIFT_INCONCLUSIVE;
        r->more_convs = o->min_convs - r->convs;
    }
}

int drift_cache_run(struct drift_side *c, const struct drift_corpus *corpus,
                    const struct drift_cache_opts *opts,
                    const struct drift_opts *ro, struct drift_cache_result *r,
                    struct diag *d)
{
    struct drift_cache_opts o = *opts;
    struct drift_analysis *an;
    uint64_t before = c->requests;
    int ret = 0;

    memset(r, 0, sizeof(*r));
    r->diverged_at = -1;
    r->seen.cold = r->seen.warm = r->seen.evicted = -1;
    r->verdict = r->evict_verdict = DRIFT_NA;
    r->undecided.level = DRIFT_NA;
    r->capacity = capacity_of(c);
    if (!o.convs) {
        snprintf(r->note, sizeof(r->note), "skipped (--no-cache-arm)");
        return 0;
    }
    r->asked = true;
    if (o.min_convs > o.convs)
        o.min_convs = o.convs;
    if (o.turn_tokens > o.gen_tokens && o.gen_tokens)
        o.turn_tokens = o.gen_tokens;
    r->budget = o.convs;
    r->min_convs = o.min_convs;
    ret = drift_cache_find_flush(c, &r->flush, d);
    if (ret == -ECONNREFUSED || ret == -ETIMEDOUT)
        return ret;
    /* with a flush the content need only be new to this run (the same
     * seed gives the same report); without one, to the server's life */
    if (!o.nonce)
        o.nonce = r->flush ? hash_mix2(o.seed, 0x6e6f6e6365ULL)
                           : hash_mix2(hash_mix2(o.seed, (uint64_t)time(NULL)),
                                       (uint64_t)getpid());
    r->ran = true;
    r->has_self = o.self && r->flush;
    r->generated_in_history = r->flush != NULL;
    an = xcalloc(2, sizeof(*an));
    for (int k = 0; k < 2; k++)
        drift_analysis_init(&an[k], 1u << 30, 1u << 30, NULL, 0, 0, &ro->th);
    for (unsigned i = 0; i < o.convs && !ret; i++) {
        json_t *conv = NULL;
        size_t turns = 0;
        ret =
            conversation(c, corpus, &o, r->flush != NULL, i, &conv, &turns, d);
        if (!ret) {
            r->turns = (unsigned)turns;
            ret = one_conv(c, conv, &o, turns, r, an, ro, d);
        }
        json_decref(conv);
        if (ret || r->convs < o.min_convs)
            continue;
        struct drift_bsum sum, self, x;
        struct drift_undecided u;
        enum drift_verdict v =
            judge(&an[0], r->has_self, r, &ro->th, &sum, &self, &x, &u);
        /* tokens that diverge warm against cold, never cold against
         * cold: no early PASS on them; a decisive one decides (FAIL, see
         * conclude) */
        bool diverging = r->diverged_warm > 0 && r->diverged_cold == 0;
        bool decisive =
            r->has_self && diverging && sum.flips + r->unlisted_divergences > 0;
        if (decisive ||
            (decided(&x, v, &u, &ro->th) && !(v == DRIFT_PASS && diverging))) {
            r->decided = true;
            break;
        }
    }
    if (ret == -ECONNREFUSED || ret == -ETIMEDOUT) {
        /* unreachable: exit 3 as elsewhere */
    } else if (ret) {
        /* a server that refused the arm's requests (a 400 over the
         * context, no chat, no /tokenize with messages): asked for and
         * not measured, never part of a PASS */
        snprintf(r->failed, sizeof(r->failed), "%s", d->msg);
        ret = 0;
        if (r->convs == 0) {
            snprintf(r->note, sizeof(r->note), "could not run");
            r->ran = false;
            r->verdict = DRIFT_INCONCLUSIVE;
        } else {
            snprintf(r->note, sizeof(r->note),
                     "stopped after %u conversation%s", r->convs,
                     r->convs == 1 ? "" : "s");
        }
    }
    if (!ret && r->ran) {
        conclude(r, &an[0], &o, &ro->th);
        if (r->evict_ran) {
            struct drift_bsum s2;
            struct drift_undecided u2;
            r->evict_verdict = judge(&an[1], r->has_self, NULL, &ro->th,
                                     &r->evict_sum, &s2, &r->evict_excess, &u2);
        }
        if (o.evict && r->capacity <= 0)
            snprintf(r->note, sizeof(r->note),
                     "--cache-evict: the server reports no cache capacity "
                     "(max_total_num_tokens), eviction not measured");
    }
    for (int k = 0; k < 2; k++)
        drift_analysis_release(&an[k]);
    free(an);
    r->requests = (unsigned)(c->requests - before);
    return ret;
}

/* ---- report ---- */

static void line(struct buf *out, const char *name, const struct drift_bsum *s,
                 const struct drift_bsum *e, enum drift_verdict v)
{
    buf_printf(out,
               "  %-22s %6llu positions  KL mean %.3g (excess %.3g)  top-1 "
               "%.2f%%  %s\n",
               name, (unsigned long long)s->n, s->kl_mean, e->kl_mean,
               100 * s->top1, drift_verdict_name(v));
}

void drift_cache_undecided_text(const struct drift_cache_result *r,
                                struct buf *out)
{
    const struct drift_undecided *u = &r->undecided;
    char about[48];
    if (!r->ran) {
        buf_printf(out, "the cache arm was asked for and could not run: %s",
                   r->failed[0] ? r->failed : r->note);
        return;
    }
    drift_about(r->more_convs, about, sizeof(about));
    if (u->level == DRIFT_NA && r->more_convs == 0) {
        buf_printf(out,
                   "greedy tokens diverge warm against cold in %u of %u "
                   "conversations and no position could be compared",
                   r->diverged_warm, r->convs);
        return;
    }
    if (u->level == DRIFT_NA) {
        buf_printf(out,
                   "%s more conversation%s would decide (the arm ran %u of "
                   "the %u it needs before it may pass)",
                   about, r->more_convs == 1 ? "" : "s", r->convs,
                   r->min_convs);
        return;
    }
    buf_printf(out,
               "%s more conversation%s would decide (warm vs cold %s "
               "%.2g ± %.2g against %s %.2g)",
               about, r->more_convs == 1 ? "" : "s", u->metric, u->point, u->se,
               drift_verdict_name(u->level), u->threshold);
}

void drift_cache_text(const struct drift_cache_result *r, struct buf *out)
{
    buf_adds(out, "\nCache arm (the same final request cold and warm)\n");
    if (!r->ran) {
        if (r->asked) {
            buf_adds(out, "  INCONCLUSIVE: ");
            drift_cache_undecided_text(r, out);
            buf_adds(out, "\n");
        } else {
            buf_printf(out, "  %s\n", r->note[0] ? r->note : "not run");
        }
        return;
    }
    buf_printf(out,
               "  %u conversation%s (%s; at least %u, at most %u), %u "
               "turns, %u model requests; flush: %s; history: %s\n",
               r->convs, r->convs == 1 ? "" : "s",
               r->decided ? "decided" : "budget spent", r->min_convs, r->budget,
               r->turns, r->model_requests,
               r->flush ? r->flush : "none (cold request sent first)",
               r->generated_in_history ? "the server's own replies"
                                       : "the conversation's replies");
    buf_adds(out, "  cache: ");
    drift_cache_hit_text(r, out);
    if (r->seen.cold > 0)
        buf_printf(out, "; the cold request had %ld cached tokens",
                   r->seen.cold);
    buf_adds(out, "\n");
    line(out, "warm vs cold", &r->sum, &r->excess, r->verdict);
    if (r->has_self)
        buf_printf(out, "  %-22s %6llu positions  KL mean %.3g\n",
                   "cold vs cold (noise)", (unsigned long long)r->self.n,
                   r->self.kl_mean);
    if (r->diverged_warm) {
        buf_printf(out,
                   "  greedy tokens diverge warm vs cold in %u of %u "
                   "conversation%s (first at generated token %ld; %llu where "
                   "cold's margin is decisive)",
                   r->diverged_warm, r->convs, r->convs == 1 ? "" : "s",
                   r->diverged_at, (unsigned long long)r->decisive_divergences);
        if (r->has_self)
            buf_printf(out, ", cold vs cold in %u%s", r->diverged_cold,
                       r->diverged_cold ? ""
                                        : ": evidence in itself that the "
                                          "warm path computes otherwise");
        buf_adds(out, "; compared up to there\n");
    }
    if (r->verdict == DRIFT_INCONCLUSIVE ||
        (r->undecided.level == DRIFT_FAIL && r->more_convs > 0)) {
        buf_printf(out, "  %s: ",
                   r->verdict == DRIFT_INCONCLUSIVE ? "INCONCLUSIVE"
                                                    : "FAIL undecided");
        drift_cache_undecided_text(r, out);
        buf_adds(out, "\n");
    }
    if (r->evict_ran) {
        line(out, "after eviction vs cold", &r->evict_sum, &r->evict_excess,
             r->evict_verdict);
        buf_printf(out, "  after eviction: %ld cached tokens (capacity %ld)\n",
                   r->seen.evicted, r->capacity);
    }
    if (r->note[0])
        buf_printf(out, "  note: %s\n", r->note);
    if (r->failed[0])
        buf_printf(out, "  failed: %s\n", r->failed);
    buf_printf(out, "  attribution: %s\n", drift_cache_attribution(r));
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *bsum_json(const struct drift_bsum *s)
{
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:I}", "count", (json_int_t)s->n,
                     "kl_mean", num(s->kl_mean), "kl_max", num(s->kl_max),
                     "top1_agreement", num(s->top1), "dp_rms", num(s->dp_rms),
                     "decisive_flips", (json_int_t)s->flips);
}

static json_t *cached_json(long v)
{
    return v >= 0 ? json_integer(v) : json_null();
}

/* What would decide an INCONCLUSIVE (or the FAIL side of a WARN). */
static json_t *undecided_json(const struct drift_cache_result *r)
{
    const struct drift_undecided *u = &r->undecided;
    struct buf t = BUF_INIT;
    drift_cache_undecided_text(r, &t);
    json_t *o =
        json_pack("{s:o,s:s}", "more_conversations",
                  r->more_convs > 0 ? json_integer((json_int_t)r->more_convs)
                                    : json_null(),
                  "text", buf_str(&t));
    if (u->level != DRIFT_NA) {
        json_object_set_new(o, "level",
                            json_string(drift_verdict_name(u->level)));
        json_object_set_new(o, "metric", json_string(u->metric));
        json_object_set_new(o, "point", num(u->point));
        json_object_set_new(o, "se", num(u->se));
        json_object_set_new(o, "threshold", num(u->threshold));
        json_object_set_new(o, "more_positions", num(u->more));
    }
    buf_release(&t);
    return o;
}

json_t *drift_cache_json(const struct drift_cache_result *r)
{
    struct buf hit = BUF_INIT;
    json_t *o = json_pack("{s:b,s:s}", "ran", r->ran, "attribution",
                          drift_cache_attribution(r));
    if (r->note[0])
        json_object_set_new(o, "note", json_string(r->note));
    if (r->failed[0])
        json_object_set_new(o, "failed", json_string(r->failed));
    if (!r->ran) {
        if (r->asked) {
            json_object_set_new(o, "verdict",
                                json_string(drift_verdict_name(r->verdict)));
            json_object_set_new(o, "undecided", undecided_json(r));
        }
        return o;
    }
    drift_cache_hit_text(r, &hit);
    json_object_set_new(o, "conversations", json_integer(r->convs));
    json_object_set_new(o, "min_conversations", json_integer(r->min_convs));
    json_object_set_new(o, "decided", json_boolean(r->decided));
    json_object_set_new(o, "turns", json_integer(r->turns));
    json_object_set_new(o, "requests", json_integer(r->requests));
    json_object_set_new(o, "model_requests", json_integer(r->model_requests));
    json_object_set_new(o, "budget", json_integer(r->budget));
    json_object_set_new(o, "flush",
                        r->flush ? json_string(r->flush) : json_null());
    json_object_set_new(o, "generated_in_history",
                        json_boolean(r->generated_in_history));
    json_object_set_new(o, "hit", json_string(buf_str(&hit)));
    json_object_set_new(o, "cached_tokens",
                        json_pack("{s:I,s:o,s:o,s:o}", "prompt",
                                  (json_int_t)r->seen.prompt, "cold",
                                  cached_json(r->seen.cold), "warm",
                                  cached_json(r->seen.warm), "evicted",
                                  cached_json(r->seen.evicted)));
    json_object_set_new(o, "warm_vs_cold", bsum_json(&r->sum));
    json_object_set_new(o, "excess", bsum_json(&r->excess));
    if (r->has_self)
        json_object_set_new(o, "cold_vs_cold", bsum_json(&r->self));
    json_object_set_new(o, "diverged_at",
                        r->diverged_at >= 0 ? json_integer(r->diverged_at)
                                            : json_null());
    json_object_set_new(
        o, "divergence",
        json_pack("{s:i,s:o,s:I}", "warm", (int)r->diverged_warm, "cold",
                  r->has_self ? json_integer(r->diverged_cold) : json_null(),
                  "decisive", (json_int_t)r->decisive_divergences));
    json_object_set_new(o, "verdict",
                        json_string(drift_verdict_name(r->verdict)));
    if (r->verdict == DRIFT_INCONCLUSIVE ||
        (r->undecided.level == DRIFT_FAIL && r->more_convs > 0))
        json_object_set_new(o, "undecided", undecided_json(r));
    if (r->evict_ran) {
        json_object_set_new(o, "evicted_vs_cold", bsum_json(&r->evict_sum));
        json_object_set_new(o, "evict_verdict",
                            json_string(drift_verdict_name(r->evict_verdict)));
        json_object_set_new(o, "capacity", json_integer(r->capacity));
    }
    buf_release(&hit);
    return o;
}
