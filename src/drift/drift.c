/*
 * drift run: corpus rendering with the tokenizer check, dialect detection,
 * the prefill arms (candidate, control, self) and the final verdict.
 * Contract in drift.h.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tpool.h"
#include "core/xalloc.h"
#include "drift/drift.h"

void drift_opts_default(struct drift_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->sequences = 4;
    o->max_context = 4096;
    o->seed = 1;
    o->min_bucket = 64;
    o->control = true;
    o->self = true;
    o->decode_tokens = 32;
    o->decode_seqs = 2;
    o->decode_prompt = 512;
    o->bootstrap = 200;
    o->worst = 50;
    drift_thresholds_default(&o->th);
}

void drift_result_init(struct drift_result *r)
{
    memset(r, 0, sizeof(*r));
    drift_corpus_init(&r->corpus);
    r->dec.attribution = DRIFT_ATTR_UNKNOWN;
}

void drift_result_release(struct drift_result *r)
{
    drift_analysis_release(&r->an);
    drift_corpus_release(&r->corpus);
    free(r->dec.seq_sums);
    r->dec.seq_sums = NULL;
}

/* Renders item i on both servers and checks the ids agree. */
static int render(struct drift_side *g, struct drift_side *c,
                  struct drift_item *it, unsigned max_context, struct diag *d)
{
    uint32_t *gi = NULL, *ci = NULL;
    size_t gn = 0, cn = 0;
    int ret = drift_side_tokenize(g, it->messages, NULL, &gi, &gn, d);
    if (ret)
        return ret;
    ret = drift_side_tokenize(c, it->messages, NULL, &ci, &cn, d);
    if (ret) {
        free(gi);
        return ret;
    }
    long at = drift_ids_first_diff(gi, gn, ci, cn);
    if (at >= 0 && (size_t)at < max_context) {
        diag_set(d, EILSEQ,
                 "golden and candidate tokenize %s differently: first "
                 "difference at position %ld (golden %s%u, candidate %s%u); "
                 "drift needs identical token ids on both sides",
                 it->name, at, (size_t)at < gn ? "token " : "end ",
                 (size_t)at < gn ? gi[at] : 0,
                 (size_t)at < cn ? "token " : "end ",
                 (size_t)at < cn ? ci[at] : 0);
        free(gi);
        free(ci);
        return -EILSEQ;
    }
    free(ci);
    it->ids = gi;
    it->n = gn < max_context ? gn : max_context;
    return 0;
}

static int build_corpus(struct drift_side *g, struct drift_side *c,
                        const struct drift_opts *o, struct drift_result *r,
                        struct diag *d)
{
    int ret;
    if (o->corpus_file || o->from_db) {
        ret = o->from_db
                  ? drift_corpus_from_db(&r->corpus, o->from_db, o->session, d)
                  : drift_corpus_load(&r->corpus, o->corpus_file, d);
        if (ret)
            return ret;
    } else {
        if (o->sequences == 0)
            return diag_set(d, ENODATA, "--sequences is 0: nothing to send");
        drift_corpus_builtin(&r->corpus, o->seed, o->sequences, o->max_context);
    }
    /* a scoring request is the prompt and one completion token: both
     * must fit the server's context (--max-context equal to
     * max_model_len works) */
    unsigned cut = o->max_context;
    if (r->context && cut > r->context - 1)
        cut = (unsigned)(r->context - 1);
    for (size_t i = 0; i < r->corpus.n; i++) {
        struct drift_item *it = &r->corpus.items[i];
        if (o->on_progress)
            o->on_progress(o->ud, "tokenize", i, r->corpus.n);
        if (it->messages) {
            ret = render(g, c, it, cut, d);
            if (ret)
                return ret;
        } else if (it->n > cut) {
            it->n = cut;
        }
    }
    return 0;
}

/* One side's dialect detection, for tpool_pair. */
struct detect_job {
    struct drift_side *s;
    const uint32_t *ids;
    size_t n;
    int ret;
    struct diag d;
};

static void detect_job_run(void *arg)
{
    struct detect_job *j = arg;
    j->ret = drift_side_detect(j->s, j->ids, j->n, &j->d);
}

/* Both sides' dialects, the two servers asked at once (one after the
 * other when they are one server); the golden's failure is the one
 * reported, as when they were asked in turn. */
static int detect(struct drift_side *g, struct drift_side *c,
                  struct drift_result *r, struct diag *d)
{
    const struct drift_item *it = &r->corpus.items[0];
    size_t n = it->n < 16 ? it->n : 16;
    struct detect_job j[2] = {{g, it->ids, n, 0, {{0}}},
                              {c, it->ids, n, 0, {{0}}}};
    if (drift_sides_share_server(g, c)) {
        detect_job_run(&j[0]);
        if (!j[0].ret && g->dialect != DRIFT_DIALECT_NONE)
            detect_job_run(&j[1]);
    } else {
        tpool_pair(detect_job_run, &j[0], detect_job_run, &j[1]);
    }
    *d = j[0].d;
    if (j[0].ret)
        return j[0].ret;
    if (g->dialect == DRIFT_DIALECT_NONE) {
        char why[sizeof(d->msg)];
        snprintf(why, sizeof(why), "%s", d->msg);
        return diag_set(d, ENOTSUP,
                        "the golden server gives no prompt logprobs, which "
                        "drift needs from the reference (%.400s)",
                        why);
    }
    *d = j[1].d;
    if (j[1].ret)
        return j[1].ret;
    r->prefill = c->dialect != DRIFT_DIALECT_NONE;
    if (!r->prefill)
        snprintf(r->fallback_why, sizeof(r->fallback_why),
                 "the candidate gives no prompt logprobs (like llama.cpp "
                 "server or Ollama); falling back to the decode-path "
                 "comparison: its generated tokens' logprobs against the "
                 "golden's prefill scoring");
    return 0;
}

/* Up to cap distinct token ids from the golden's top lists, rank by rank
 * (every top-1 first, then every top-2, ...): the list sent as sglang's
 * token_ids_logprob, so the candidate reports its probability of tokens
 * the golden ranks high even where they fall out of its own top-k. */
static size_t golden_top_ids(const struct drift_lp *g, uint32_t *out,
                             size_t cap)
{
    size_t n = 0;
    for (uint32_t k = 0; k < DRIFT_TOPK_MAX && n < cap; k++)
        for (uint32_t t = 1; t < g->n && n < cap; t++) {
            if (!g->valid[t] || k >= g->pos[t].n_top)
                continue;
            uint64_t key = g->pos[t].top[k].key;
            bool seen = key > UINT32_MAX;
            for (size_t j = 0; j < n && !seen; j++)
                seen = out[j] == key;
            if (!seen)
                out[n++] = (uint32_t)key;
        }
    return n;
}

struct fetch_ctx {
    struct drift_side *g, *c;
    const struct drift_opts *o;
    const struct drift_corpus *corpus;
};

/* drift_pipe's fetch: pass k of item i from its server; the candidate's
 * sglang token_ids_logprob list from the golden's parsed answer. */
static int fetch_pass(void *ud, size_t i, int pass,
                      const struct drift_lp *golden, char **text, size_t *len,
                      struct diag *d)
{
    struct fetch_ctx *x = ud;
    const struct drift_item *it = &x->corpus->items[i];
    struct drift_side *s = pass < 2 ? x->g : x->c;
    uint32_t *extra = NULL;
    if (pass == 2 && x->o->token_ids && s->dialect == DRIFT_DIALECT_SGLANG) {
        extra = xmalloc(x->o->token_ids * sizeof(*extra));
        s->n_extra_ids = golden_top_ids(golden, extra, x->o->token_ids);
        s->extra_ids = extra;
    }
    int ret = drift_side_fetch_prompt(s, it->ids, it->n, text, len, d);
    s->extra_ids = NULL;
    s->n_extra_ids = 0;
    free(extra);
    return ret;
}

static unsigned online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (unsigned)n;
}

static int score_all(struct drift_side *g, struct drift_side *c,
                     const struct drift_opts *o, struct drift_result *r,
                     struct diag *d)
{
    struct fetch_ctx x = {g, c, o, &r->corpus};
    struct drift_pipe p = {
        .corpus = &r->corpus,
        .side = {g, g, c, c},
        .has_control = r->has_control,
        .has_self = r->has_self,
        .one_server = drift_sides_share_server(g, c),
        .needs_golden = o->token_ids > 0 && c->dialect == DRIFT_DIALECT_SGLANG,
        .threads = o->jobs ? o->jobs : online_cpus(),
        .fetch = fetch_pass,
        .ud = &x,
    };
    return drift_pipe_run(&p, &r->an, o, &r->positions, d);
}

/* Bucket verdicts and growth: what the decode path's prompts follow. */
static void prefill_verdicts(const struct drift_opts *o, struct drift_result *r)
{
    struct drift_analysis *a = &r->an;
    for (size_t b = 0; b < a->n_buckets; b++) {
        struct drift_bsum c, t, s;
        drift_bucket_summary(&a->acc[DRIFT_ARM_CAND][b], &c);
        drift_bucket_summary(&a->acc[DRIFT_ARM_CTRL][b], &t);
        drift_bucket_summary(&a->acc[DRIFT_ARM_SELF][b], &s);
        drift_bucket_excess(&c, &t, &s, r->has_self, &r->excess[b]);
        r->bucket_verdict[b] =
            drift_bucket_judge(&r->excess[b], &o->th, &r->bucket_undecided[b]);
    }
    drift_growth_compute(a, r->has_self, o->bootstrap, o->seed, r->context,
                         &r->growth);
}

/* The worst of the buckets, growth and the decode path's PP and DG (over
 * every point and at each). */
static void verdicts(const struct drift_opts *o, struct drift_result *r)
{
    enum drift_verdict v = DRIFT_NA;
    for (size_t b = 0; b < r->an.n_buckets; b++)
        v = drift_verdict_worse(v, r->bucket_verdict[b]);
    v = drift_verdict_worse(v, r->growth.verdict);
    if (r->dec.ran)
        for (int k = 0; k < DRIFT_DPATHS; k++) {
            if (k == DRIFT_DP_DP)
                continue;
            v = drift_verdict_worse(v, r->dec.verdict[k]);
            for (unsigned i = 0; i < r->dec.n_points; i++)
                v = drift_verdict_worse(v, r->dec.point[i].verdict[k]);
        }
    r->verdict = v == DRIFT_NA ? DRIFT_PASS : v;
    drift_attribute(o, r);
    drift_harm_compute(r, NULL, o->bootstrap, o->seed, &r->harm);
}

/* The longest request (prompt and completion tokens) the servers take:
 * the least context length they report, else --max-context. */
static void context_of(const struct drift_side *g, const struct drift_side *c,
                       const struct drift_opts *o, struct drift_result *r)
{
    const char *fg = NULL, *fc = NULL;
    long lg = drift_side_context_len(g, &fg),
         lc = drift_side_context_len(c, &fc);
    r->context = o->max_context;
    snprintf(r->context_source, sizeof(r->context_source), "--max-context");
    if (lc > 0 && (lg <= 0 || lc <= lg)) {
        r->context = (uint64_t)lc;
        snprintf(r->context_source, sizeof(r->context_source), "%s", fc);
    } else if (lg > 0) {
        r->context = (uint64_t)lg;
        snprintf(r->context_source, sizeof(r->context_source),
                 "the golden's %s", fg);
    }
}

/* Nothing is judged on nothing: when the candidate arm compared no
 * position (every answer's logprob NaN, null, a string or positive, or
 * short, or for other tokens), the run is the servers' fault and an error
 * (-EBADMSG), never a verdict over zero positions. */
/* An example of what the candidate answered for the first sequence, once
 * nothing could be compared: its first position (past 0 for a prompt)
 * without a usable logprob, "position 1: logprob null", read again (one
 * request: prompt logprobs, or with decode a short generation whose
 * positions are the generated tokens). */
static void example_unusable(struct drift_side *c, const struct drift_result *r,
                             bool decode, char *out, size_t len)
{
    struct drift_lp lp;
    struct diag d = {{0}};
    snprintf(out, len,
             "no example: the first sequence could not be read "
             "again");
    if (!r->corpus.n)
        return;
    drift_lp_init(&lp);
    const struct drift_item *it = &r->corpus.items[0];
    size_t n = decode && it->n > 256 ? 256 : it->n;
    int ret = decode ? drift_side_generate(c, it->ids, n, 4, &lp, &d)
                     : drift_side_score(c, it->ids, n, &lp, &d);
    if (!ret) {
        for (uint32_t i = decode ? 0 : 1; i < lp.n; i++) {
            char v[40];
            const char *what = decode ? "generated token" : "position";
            if (i >= lp.n_returned) {
                snprintf(out, len, "%s %u: missing", what, i);
                break;
            }
            if (lp.mismatch[i]) {
                snprintf(out, len, "%s %u: for another token", what, i);
                break;
            }
            if (!lp.valid[i]) {
                drift_lp_value_text(lp.pos[i].forced_lp, v, sizeof(v));
                snprintf(out, len, "%s %u: logprob %s", what, i, v);
                break;
            }
        }
    } else {
        snprintf(out, len, "%s", d.msg);
    }
    drift_lp_release(&lp);
}

static int some_compared(struct drift_side *c, const struct drift_result *r,
                         struct diag *d)
{
    uint64_t n = 0;
    const uint64_t *sk = r->an.skipped[DRIFT_ARM_CAND];
    for (size_t b = 0; b < r->an.n_buckets; b++)
        n += r->an.acc[DRIFT_ARM_CAND][b].n;
    if (n)
        return 0;
    char ex[256];
    example_unusable(c, r, false, ex, sizeof(ex));
    return diag_set(
        d, EBADMSG,
        "no position could be compared: of the answers' positions, "
        "%llu had no usable logprob (NaN, null, not a number, or "
        "above 0), %llu were missing and %llu were for another token "
        "(the candidate's first sequence, %s); check that both servers "
        "return prompt logprobs as numbers",
        (unsigned long long)sk[DRIFT_SKIP_INVALID],
        (unsigned long long)sk[DRIFT_SKIP_SHORT],
        (unsigned long long)sk[DRIFT_SKIP_TOKEN], ex);
}

int drift_run(struct drift_side *g, struct drift_side *c,
              const struct drift_opts *o, struct drift_result *r,
              struct diag *d)
{
    int ret;

    ret = drift_side_fingerprint(g, d);
    if (!ret)
        ret = drift_side_fingerprint(c, d);
    if (!ret)
        context_of(g, c, o, r);
    if (!ret)
        ret = build_corpus(g, c, o, r, d);
    if (!ret)
        ret = detect(g, c, r, d);
    if (ret)
        return ret;
    uint32_t max_pos = 1;
    for (size_t i = 0; i < r->corpus.n; i++)
        if (r->corpus.items[i].n > max_pos)
            max_pos = (uint32_t)r->corpus.items[i].n;
    drift_analysis_init(&r->an, o->min_bucket, max_pos - 1, o->boundaries,
                        o->n_boundaries, o->worst, &o->th);
    r->has_control = o->control && r->prefill;
    r->has_self = o->self && r->prefill;
    r->sequences = (unsigned)r->corpus.n;
    if (r->prefill) {
        ret = score_all(g, c, o, r, d);
        if (!ret)
            ret = some_compared(c, r, d);
        if (ret)
            return ret;
        prefill_verdicts(o, r);
    }
    if (o->decode_tokens > 0 || !r->prefill) {
        ret = drift_decode_run(g, c, o, r, d);
        if (ret)
            return ret;
    }
    if (!r->prefill && r->dec.sum[DRIFT_DP_DG].n == 0) {
        char ex[256];
        example_unusable(c, r, true, ex, sizeof(ex));
        return diag_set(d, EBADMSG,
                        "no position could be compared: the candidate "
                        "gives no prompt logprobs, and none of its %u "
                        "generated tokens came with a usable logprob "
                        "(NaN, null, not a number, or above 0; the first "
                        "sequence's %s); check that it returns logprobs as "
                        "numbers",
                        r->dec.generated, ex);
    }
    if (o->determinism > 0) {
        const struct drift_item *it = &r->corpus.items[0];
        size_t n = it->n < o->decode_prompt ? it->n : o->decode_prompt;
        unsigned mn = o->decode_tokens ? o->decode_tokens : 16;
        if (r->context > mn + 1 && n + mn > r->context)
            n = (size_t)(r->context - mn); /* generation fits the context */
        r->det.ran = true;
        ret = drift_determinism_run(g, it->ids, n, o->determinism, mn,
                                    &r->det.side[0], d);
        if (!ret)
            ret = drift_determinism_run(c, it->ids, n, o->determinism, mn,
                                        &r->det.side[1], d);
        if (ret)
            return ret;
    }
    verdicts(o, r);
    return 0;
}
