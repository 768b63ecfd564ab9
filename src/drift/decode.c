/*
 * drift decode path: generate greedily on the candidate, rescore prompt +
 * output by prefill on golden and candidate, and compare three ways over
 * the generated positions: golden prefill vs candidate prefill (PP),
 * candidate prefill vs candidate decode (DP), golden prefill vs candidate
 * decode (DG). PP shows the prefill path; DG the decode path against the
 * reference; DP, the candidate against itself, moves with either. The
 * golden also generates from the same prompt, and its decode is compared
 * with its own prefill: the golden's decode-vs-prefill gap, the yardstick
 * for the candidate's DP below the thresholds. All of it at each prompt
 * length drift_decode_prompts() chose (attr.c, which also attributes).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tpool.h"
#include "core/xalloc.h"
#include "drift/cache_arm.h"
#include "drift/drift.h"
#include "drift/tape.h"

static const char *const dp_names[DRIFT_DPATHS] = {"decode-pp", "decode-dp",
                                                   "decode-dg"};

/* Copies decode entries into prefill layout: position prompt + i. */
static void shift_decode(const struct drift_lp *dec, uint32_t prompt,
                         struct drift_lp *out)
{
    drift_lp_reset(out, prompt + dec->n);
    out->n_returned = prompt + dec->n;
    for (uint32_t i = 0; i < dec->n; i++) {
        out->pos[prompt + i] = dec->pos[i];
        out->valid[prompt + i] = dec->valid[i];
        /* echo answers name tokens by text; the id is known, and the
         * prefill sides name the forced token by id */
        if (dec->pos[i].forced & DRIFT_KEY_TEXT)
            out->pos[prompt + i].forced = dec->ids[i];
    }
}

/* The analyses of one point: the three paths and the golden's own gap. */
enum { AN_GDP = DRIFT_DPATHS, AN_N };

struct seq_lps {
    struct drift_lp dec, gp, cp, dshift, gp2, cp2, gdec, gshift, gown;
};

static void lps_init(struct seq_lps *l)
{
    struct drift_lp *v[] = {&l->dec, &l->gp,   &l->cp,     &l->dshift, &l->gp2,
                            &l->cp2, &l->gdec, &l->gshift, &l->gown};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        drift_lp_init(v[i]);
}

static void lps_release(struct seq_lps *l)
{
    struct drift_lp *v[] = {&l->dec, &l->gp,   &l->cp,     &l->dshift, &l->gp2,
                            &l->cp2, &l->gdec, &l->gshift, &l->gown};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        drift_lp_release(v[i]);
}

/* Decode entries name the generated token by id (or text in echo); the
 * forced keys must match the prefill side's for the deltas. */
static void check_forced(struct drift_lp *dshift, const struct drift_lp *gp,
                         uint32_t from, uint32_t n)
{
    for (uint32_t i = from; i < n && i < gp->n; i++)
        if (dshift->valid[i] && gp->valid[i] &&
            dshift->pos[i].forced != gp->pos[i].forced &&
            !(dshift->pos[i].forced & DRIFT_KEY_TEXT))
            dshift->mismatch[i] = 1, dshift->valid[i] = 0;
}

static uint32_t *concat(const uint32_t *a, uint32_t na, const uint32_t *b,
                        uint32_t nb)
{
    uint32_t *v = xmalloc((na + nb + 1) * sizeof(*v));
    if (na)
        memcpy(v, a, na * sizeof(*v));
    if (nb)
        memcpy(v + na, b, nb * sizeof(*v));
    return v;
}

/* Greedy generation from an empty prefix cache (flush NULL: the server
 * has no flush endpoint and keeps what it has). A real server's decode
 * rounds otherwise over cached K/V than over K/V it computed itself, so a
 * golden warm from earlier runs (bisect's, serving every configuration)
 * would decode otherwise than a fresh candidate with the same numerics.
 * A flush the server refuses for now (sglang answers 400 while requests
 * are in flight) leaves the cache as it is; one it cannot be asked for
 * (unreachable) stops the run. */
static int generate_cold(struct drift_side *s, const char *flush,
                         const uint32_t *ids, uint32_t prompt, unsigned max_new,
                         struct drift_lp *out, struct diag *d)
{
    if (flush) {
        int ret = drift_cache_flush(s, flush, d);
        if (ret && ret != -ENOENT)
            return ret;
    }
    return drift_side_generate(s, ids, prompt, max_new, out, d);
}

/* The golden's own decode-vs-prefill gap from the same prompt: its
 * greedy output's decode entries against its prefill scoring of them
 * (the candidate's golden prefill when the outputs agree). */
static int golden_gap(struct drift_side *g, const char *flush,
                      const struct drift_opts *o, const uint32_t *ids,
                      uint32_t prompt, unsigned max_new, struct seq_lps *l,
                      struct drift_analysis *an, uint32_t seq, struct diag *d)
{
    int ret = generate_cold(g, flush, ids, prompt, max_new, &l->gdec, d);
    if (ret)
        return ret;
    const struct drift_lp *ref = &l->gp;
    bool same = l->gdec.n == l->dec.n &&
                (l->dec.n == 0 ||
                 !memcmp(l->gdec.ids, l->dec.ids, l->dec.n * sizeof(uint32_t)));
    if (!same) {
        uint32_t *full = concat(ids, prompt, l->gdec.ids, l->gdec.n);
        ret = drift_side_score(g, full, prompt + l->gdec.n, &l->gown, d);
        free(full);
        if (ret)
            return ret;
        ref = &l->gown;
    }
    uint32_t n = prompt + l->gdec.n;
    shift_decode(&l->gdec, prompt, &l->gshift);
    check_forced(&l->gshift, ref, prompt, n);
    drift_compare_lp(an, DRIFT_ARM_CAND, seq, ref, &l->gshift, prompt, n, o,
                     "decode-golden");
    return 0;
}

/* Adds item i's DG and baseline sums of this point to the harm sums. */
static void harm_sums(struct drift_result *r, size_t item,
                      const struct drift_analysis *an, const uint32_t *seq)
{
    if (!r->dec.seq_sums || item >= r->dec.n_seq)
        return;
    double *h = r->dec.seq_sums + item * DRIFT_HS_N * 2;
    size_t stride = an[0].n_buckets * DRIFT_ARMS * DRIFT_SEQ_F;
    const double *dg = an[DRIFT_DP_DG].seq_sums + seq[2] * stride +
                       DRIFT_ARM_CAND * DRIFT_SEQ_F;
    const double *pp = an[DRIFT_DP_PP].seq_sums + seq[0] * stride;
    h[DRIFT_HS_DG * 2] += dg[0];
    h[DRIFT_HS_DG * 2 + 1] += dg[1];
    h[DRIFT_HS_CTRL * 2] += pp[DRIFT_ARM_CTRL * DRIFT_SEQ_F];
    h[DRIFT_HS_CTRL * 2 + 1] += pp[DRIFT_ARM_CTRL * DRIFT_SEQ_F + 1];
    h[DRIFT_HS_SELF * 2] += pp[DRIFT_ARM_SELF * DRIFT_SEQ_F];
    h[DRIFT_HS_SELF * 2 + 1] += pp[DRIFT_ARM_SELF * DRIFT_SEQ_F + 1];
    if (r->dec.have_pp) { /* n 0 where the golden's gap was not measured */
        const double *gap = an[AN_GDP].seq_sums + seq[AN_GDP] * stride +
                            DRIFT_ARM_CAND * DRIFT_SEQ_F;
        h[DRIFT_HS_GAP * 2] += gap[0];
        h[DRIFT_HS_GAP * 2 + 1] += gap[1];
    }
}

/* The rescoring of one server: its first pass and, when lp[1], its
 * second, one after the other; ret and at (0, 1) say which failed. */
struct score_lane {
    struct drift_side *s;
    const uint32_t *ids;
    uint32_t n;
    struct drift_lp *lp[2];
    int ret, at;
    struct diag d;
};

static void score_lane_run(void *arg)
{
    struct score_lane *x = arg;
    for (x->at = 0; x->at < 2; x->at++) {
        if (!x->lp[x->at])
            continue;
        x->ret = drift_side_score(x->s, x->ids, x->n, x->lp[x->at], &x->d);
        if (x->ret)
            return;
    }
}

/* The golden's rescoring (ln[0]) and the candidate's (ln[1]) at once,
 * each server getting its requests in the serial order (golden, then
 * candidate, then the second passes), one at a time. The error reported
 * is the one the serial order meets first: golden first pass, candidate
 * first pass, golden second, candidate second. Both servers' being one
 * server keeps that order, one request at a time. */
static int score_both(struct score_lane ln[2], struct diag *d)
{
    int k = -1;
    if (drift_sides_share_server(ln[0].s, ln[1].s)) {
        /* one server: one request at a time, in that order */
        for (int at = 0; at < 2; at++)
            for (int j = 0; j < 2; j++) {
                struct score_lane *x = &ln[j];
                if (!x->lp[at])
                    continue;
                x->ret = drift_side_score(x->s, x->ids, x->n, x->lp[at], d);
                if (x->ret)
                    return x->ret;
            }
        return 0;
    }
    tpool_pair(score_lane_run, &ln[0], score_lane_run, &ln[1]);
    for (int j = 0; j < 2; j++)
        if (ln[j].ret && (k < 0 || 2 * ln[j].at + j < 2 * ln[k].at + k))
            k = j;
    if (k < 0)
        return 0;
    if (d)
        *d = ln[k].d;
    return ln[k].ret;
}

/* The candidate's generation for the decode path's next sequence, sent
 * while the golden generates for this one (golden_gap): the candidate's
 * next request in the serial order, so each server's order is kept. */
struct next_gen {
    struct drift_side *c;
    const char *flush; /* the candidate's flush endpoint, or NULL */
    const uint32_t *ids;
    uint32_t prompt;
    unsigned max_new;
    size_t item; /* the item it is for; SIZE_MAX: none */
    struct drift_lp lp;
    int ret;
    struct diag d;
};

static void next_gen_run(void *arg)
{
    struct next_gen *x = arg;
    x->ret = generate_cold(x->c, x->flush, x->ids, x->prompt, x->max_new,
                           &x->lp, &x->d);
}

/* The golden's gap (golden_gap's arguments) for tpool_pair. */
struct gap_job {
    struct drift_side *g;
    const char *flush; /* the golden's flush endpoint, or NULL */
    const struct drift_opts *o;
    const uint32_t *ids;
    uint32_t prompt;
    unsigned max_new;
    struct seq_lps *l;
    struct drift_analysis *an;
    uint32_t seq;
    int ret;
    struct diag d;
};

static void gap_job_run(void *arg)
{
    struct gap_job *x = arg;
    x->ret = golden_gap(x->g, x->flush, x->o, x->ids, x->prompt, x->max_new,
                        x->l, x->an, x->seq, &x->d);
}

/* Runs item's decode path at prompt_at. nx (may be NULL) holds the
 * candidate's generation for it when it was sent ahead (nx->item), and
 * gets the next one's when next (SIZE_MAX: none) is to follow and the
 * golden has its own generation to wait for. */
static int one_seq(struct drift_side *g, struct drift_side *c,
                   const struct drift_opts *o, struct drift_result *r,
                   size_t item, uint32_t prompt_at, struct drift_analysis *an,
                   struct drift_dpoint *pt, struct next_gen *nx, size_t next,
                   struct diag *d)
{
    const struct drift_item *it = &r->corpus.items[item];
    struct seq_lps l;
    uint32_t prompt = (uint32_t)(it->n < prompt_at ? it->n : prompt_at);
    unsigned max_new = o->decode_tokens ? o->decode_tokens : 32;
    uint32_t *full = NULL;
    int ret;

    lps_init(&l);
    if (nx && nx->item == item) {
        struct drift_lp t = l.dec;
        l.dec = nx->lp;
        nx->lp = t;
        nx->item = SIZE_MAX;
        ret = nx->ret;
        if (ret && d)
            *d = nx->d;
    } else {
        ret = generate_cold(c, r->dec.flush_cand, it->ids, prompt, max_new,
                            &l.dec, d);
    }
    if (ret)
        goto out;
    full = concat(it->ids, prompt, l.dec.ids, l.dec.n);
    uint32_t n = prompt + l.dec.n;
    /* second passes: the noise baseline on these very positions */
    struct score_lane ln[2] = {
        {g, full, n, {&l.gp, r->has_control ? &l.gp2 : NULL}, 0, 0, {{0}}},
        {c,
         full,
         n,
         {r->dec.have_pp ? &l.cp : NULL,
          r->dec.have_pp && r->has_self ? &l.cp2 : NULL},
         0,
         0,
         {{0}}}};
    ret = score_both(ln, d);
    if (ret)
        goto out;
    shift_decode(&l.dec, prompt, &l.dshift);
    check_forced(&l.dshift, &l.gp, prompt, n);
    uint32_t seq[AN_N];
    for (int k = 0; k < AN_N; k++)
        seq[k] = drift_analysis_begin_seq(&an[k]);
    if (r->dec.have_pp) {
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CAND, seq[0], &l.gp, &l.cp,
                         prompt, n, o, dp_names[DRIFT_DP_PP]);
        drift_compare_lp(&an[DRIFT_DP_DP], DRIFT_ARM_CAND, seq[1], &l.cp,
                         &l.dshift, prompt, n, o, dp_names[DRIFT_DP_DP]);
        /* a golden that cannot generate leaves the gap unmeasured (and
         * said so); one that cannot be reached stops the run */
        struct gap_job gj = {
            g,  r->dec.flush_golden, o,           it->ids, prompt, max_new,
            &l, &an[AN_GDP],         seq[AN_GDP], 0,       {{0}}};
        if (nx && next != SIZE_MAX) {
            const struct drift_item *nt = &r->corpus.items[next];
            nx->ids = nt->ids;
            nx->prompt = (uint32_t)(nt->n < prompt_at ? nt->n : prompt_at);
            nx->max_new = max_new;
            nx->flush = r->dec.flush_cand;
            nx->item = next;
            nx->d.msg[0] = '\0';
            tpool_pair(gap_job_run, &gj, next_gen_run, nx);
        } else {
            gap_job_run(&gj);
        }
        struct diag gd = gj.d;
        ret = gj.ret;
        if (ret == -ECONNREFUSED || ret == -ETIMEDOUT) {
            if (d)
                *d = gd;
            goto out;
        }
        if (ret && !pt->gap_why[0])
            snprintf(pt->gap_why, sizeof(pt->gap_why), "%s", gd.msg);
        pt->gap_measured = ret == 0 || pt->gap_measured;
        ret = 0;
    }
    if (r->has_control)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CTRL, seq[0], &l.gp,
                         &l.gp2, prompt, n, o, "decode-control");
    if (r->has_self)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_SELF, seq[0], &l.cp,
                         &l.cp2, prompt, n, o, "decode-self");
    drift_compare_lp(&an[DRIFT_DP_DG], DRIFT_ARM_CAND, seq[2], &l.gp, &l.dshift,
                     prompt, n, o, dp_names[DRIFT_DP_DG]);
    harm_sums(r, item, an, seq);
    pt->generated += l.dec.n;
    pt->seqs++;
out:
    if (ret)
        diag_prefix(d, "decode path at prompt %u, %s", prompt, it->name);
    free(full);
    lps_release(&l);
    return ret;
}

/* The step at which the candidate's output parts from the golden's (j, in
 * prefill layout) still has the golden's context: the candidate's
 * distribution there is compared with the golden's token forced, its
 * logprob read from the candidate's top-k. 1 when it can be (the top-k
 * holds that token), else 0. */
static uint32_t reforce_parting_step(struct drift_lp *dshift,
                                     const struct drift_lp *gp, uint32_t j)
{
    if (j >= dshift->n_returned || j >= gp->n_returned || !dshift->valid[j] ||
        !gp->valid[j])
        return 0;
    struct drift_pos *p = &dshift->pos[j];
    uint64_t want = gp->pos[j].forced;
    for (uint32_t k = 0; k < p->n_known; k++)
        if (p->top[k].key == want) {
            p->forced = want;
            p->forced_lp = p->top[k].lp;
            return 1;
        }
    return 0;
}

/* Item's decode path at prompt_at against a saved golden, whose answers
 * can hold no scoring of a candidate's own output: the golden's greedy
 * output (saved) is the text both sides score, and the candidate's own
 * greedy generation is compared with it where the two have one context:
 * over the steps up to the first token in which they part, that one with
 * the golden's token forced (after it the candidate decodes another
 * text). PP, the control and self arms and the
 * golden's own decode-vs-prefill gap cover the golden's whole output; DG
 * and DP the shared steps. With equal outputs (a deterministic candidate
 * that generates what the golden did) every request and figure is the
 * live run's. */
static int one_seq_saved(struct drift_side *g, struct drift_side *c,
                         const struct drift_opts *o, struct drift_result *r,
                         size_t item, uint32_t prompt_at,
                         struct drift_analysis *an, struct drift_dpoint *pt,
                         struct diag *d)
{
    const struct drift_item *it = &r->corpus.items[item];
    struct seq_lps l;
    uint32_t prompt = (uint32_t)(it->n < prompt_at ? it->n : prompt_at);
    unsigned max_new = o->decode_tokens ? o->decode_tokens : 32;
    uint32_t *full = NULL;

    lps_init(&l);
    int ret = generate_cold(g, r->dec.flush_golden, it->ids, prompt, max_new,
                            &l.gdec, d);
    if (!ret)
        ret = generate_cold(c, r->dec.flush_cand, it->ids, prompt, max_new,
                            &l.dec, d);
    if (ret)
        goto out;
    full = concat(it->ids, prompt, l.gdec.ids, l.gdec.n);
    uint32_t n = prompt + l.gdec.n;
    struct score_lane ln[2] = {
        {g, full, n, {&l.gp, r->has_control ? &l.gp2 : NULL}, 0, 0, {{0}}},
        {c,
         full,
         n,
         {r->dec.have_pp ? &l.cp : NULL,
          r->dec.have_pp && r->has_self ? &l.cp2 : NULL},
         0,
         0,
         {{0}}}};
    ret = score_both(ln, d);
    if (ret)
        goto out;
    uint32_t shared = 0;
    while (shared < l.dec.n && shared < l.gdec.n &&
           l.dec.ids[shared] == l.gdec.ids[shared])
        shared++;
    uint32_t ns = prompt + shared;
    shift_decode(&l.dec, prompt, &l.dshift);
    uint32_t parted = shared < l.dec.n && shared < l.gdec.n
                          ? reforce_parting_step(&l.dshift, &l.gp, ns)
                          : 0;
    ns += parted;
    check_forced(&l.dshift, &l.gp, prompt, ns);
    uint32_t seq[AN_N];
    for (int k = 0; k < AN_N; k++)
        seq[k] = drift_analysis_begin_seq(&an[k]);
    if (r->dec.have_pp) {
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CAND, seq[0], &l.gp, &l.cp,
                         prompt, n, o, dp_names[DRIFT_DP_PP]);
        drift_compare_lp(&an[DRIFT_DP_DP], DRIFT_ARM_CAND, seq[1], &l.cp,
                         &l.dshift, prompt, ns, o, dp_names[DRIFT_DP_DP]);
        /* the golden's gap: its saved decode against its prefill of it */
        shift_decode(&l.gdec, prompt, &l.gshift);
        check_forced(&l.gshift, &l.gp, prompt, n);
        drift_compare_lp(&an[AN_GDP], DRIFT_ARM_CAND, seq[AN_GDP], &l.gp,
                         &l.gshift, prompt, n, o, "decode-golden");
        pt->gap_measured = true;
    }
    if (r->has_control)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CTRL, seq[0], &l.gp,
                         &l.gp2, prompt, n, o, "decode-control");
    if (r->has_self)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_SELF, seq[0], &l.cp,
                         &l.cp2, prompt, n, o, "decode-self");
    drift_compare_lp(&an[DRIFT_DP_DG], DRIFT_ARM_CAND, seq[2], &l.gp, &l.dshift,
                     prompt, ns, o, dp_names[DRIFT_DP_DG]);
    harm_sums(r, item, an, seq);
    pt->generated += l.dec.n;
    pt->seqs++;
    r->dec.golden_steps += l.gdec.n;
    r->dec.shared_steps += shared;
    r->dec.parted_steps += parted;
out:
    if (ret)
        diag_prefix(d, "decode path at prompt %u, %s", prompt, it->name);
    free(full);
    lps_release(&l);
    return ret;
}

/* Summaries, excess and verdicts of paths over accumulated sums: sum[k]
 * is path k's candidate arm, base[0] the control and base[1] the self
 * arm of the decode positions. DP compares two candidate samples, so its
 * baseline is the whole self figure. */
static void judge_paths(const struct drift_result *r,
                        const struct drift_opts *o,
                        const struct drift_acc sums[DRIFT_DPATHS],
                        const struct drift_acc base[2], struct drift_bsum *sum,
                        struct drift_bsum *excess, enum drift_verdict *verdict,
                        struct drift_undecided *und)
{
    struct drift_bsum bc, bs, zero = {0};
    drift_bucket_summary(&base[0], &bc);
    drift_bucket_summary(&base[1], &bs);
    if (!r->has_control)
        bc = zero;
    for (int k = 0; k < DRIFT_DPATHS; k++) {
        drift_bucket_summary(&sums[k], &sum[k]);
        if (k == DRIFT_DP_DP)
            drift_bucket_excess(&sum[k], r->has_self ? &bs : &zero, &bs,
                                r->has_self, &excess[k]);
        else
            drift_bucket_excess(&sum[k], &bc, &bs, r->has_self, &excess[k]);
        verdict[k] = drift_bucket_judge(&excess[k], &o->th, &und[k]);
    }
    if (!r->dec.have_pp) {
        verdict[DRIFT_DP_PP] = DRIFT_NA;
        verdict[DRIFT_DP_DP] = DRIFT_NA;
        und[DRIFT_DP_PP].level = und[DRIFT_DP_DP].level = DRIFT_NA;
    }
}

static double nz(double v)
{
    return isnan(v) ? 0 : v;
}

/* The candidate's decode-vs-prefill gap over its own noise against the
 * golden's over its own. */
static void judge_gap(const struct drift_result *r, struct drift_dpoint *pt,
                      const struct drift_acc *gdp, const struct drift_acc *ctl,
                      const struct drift_acc *self)
{
    struct drift_bsum g, t, s;
    drift_bucket_summary(gdp, &g);
    drift_bucket_summary(ctl, &t);
    drift_bucket_summary(self, &s);
    const struct drift_bsum *dp = &pt->sum[DRIFT_DP_DP];
    if (!pt->gap_measured || dp->n == 0 || g.n == 0) {
        pt->gap_measured = false;
        return;
    }
    double sb = r->has_self ? nz(s.kl_mean) : 0;
    double cb = r->has_control ? nz(t.kl_mean) : 0;
    pt->gap_cand = nz(dp->kl_mean) - sb;
    pt->gap_golden = nz(g.kl_mean) - cb;
    pt->gap_se =
        sqrt(nz(dp->kl_se) * nz(dp->kl_se) + nz(g.kl_se) * nz(g.kl_se) +
             (r->has_self ? nz(s.kl_se) * nz(s.kl_se) : 0) +
             (r->has_control ? nz(t.kl_se) * nz(t.kl_se) : 0));
    pt->gap_differs = pt->gap_cand - pt->gap_golden - 2 * pt->gap_se > 0;
}

/* Whether the prefills differ below the thresholds at this point (see
 * struct drift_dpoint). */
static void pp_below(const struct drift_result *r, struct drift_dpoint *pt,
                     const struct drift_acc *ctl, const struct drift_acc *self)
{
    struct drift_bsum t, s;
    const struct drift_bsum *x = &pt->excess[DRIFT_DP_PP];
    drift_bucket_summary(ctl, &t);
    drift_bucket_summary(self, &s);
    double cb = r->has_control ? nz(t.kl_mean) : 0;
    double base = r->has_self ? 0.5 * cb + 0.5 * nz(s.kl_mean) : cb;
    pt->pp_below =
        r->dec.have_pp && x->n > 0 && nz(x->kl_mean) - 2 * nz(x->kl_se) > base;
}

/* Whether item i takes part in point pt (a point chosen from the
 * buckets needs items longer than it). */
static bool reaches(const struct drift_result *r, const struct drift_dpoint *pt,
                    size_t i)
{
    return !(pt->diverged && r->corpus.items[i].n <= pt->prompt);
}

/* Runs one point over up to decode_seqs items that reach its prompt
 * (a point chosen from the buckets needs items longer than it); merges
 * its sums into agg. */
static int run_point(struct drift_side *g, struct drift_side *c,
                     const struct drift_opts *o, struct drift_result *r,
                     struct drift_dpoint *pt, struct drift_acc agg[AN_N + 2],
                     struct diag *d)
{
    static struct drift_analysis an[AN_N]; /* 4 MiB: not on the stack */
    size_t want = o->decode_seqs ? o->decode_seqs : 1;
    int ret = 0;

    /* one server: nothing sent ahead, every request in turn; a saved
     * golden answers at once */
    struct next_gen nx = {.c = c, .item = SIZE_MAX};
    bool ahead = !drift_sides_share_server(g, c) && !r->dec.saved;
    drift_lp_init(&nx.lp);
    for (int k = 0; k < AN_N; k++)
        drift_analysis_init(&an[k], 1u << 30, 1u << 30, NULL, 0, 0, &o->th);
    for (size_t i = 0; i < r->corpus.n && pt->seqs < want && !ret; i++) {
        if (!reaches(r, pt, i))
            continue;
        if (o->on_progress)
            o->on_progress(o->ud, "decode", pt->seqs, want);
        /* the next sequence, when this one is not the last wanted */
        size_t next = SIZE_MAX;
        for (size_t j = i + 1; ahead && pt->seqs + 1 < want &&
                               next == SIZE_MAX && j < r->corpus.n;
             j++)
            if (reaches(r, pt, j))
                next = j;
        ret = r->dec.saved
                  ? one_seq_saved(g, c, o, r, i, pt->prompt, an, pt, d)
                  : one_seq(g, c, o, r, i, pt->prompt, an, pt, &nx, next, d);
    }
    drift_lp_release(&nx.lp);
    struct drift_acc sums[DRIFT_DPATHS], base[2], gdp;
    for (int k = 0; k < DRIFT_DPATHS; k++)
        drift_analysis_total(&an[k], DRIFT_ARM_CAND, &sums[k]);
    drift_analysis_total(&an[DRIFT_DP_PP], DRIFT_ARM_CTRL, &base[0]);
    drift_analysis_total(&an[DRIFT_DP_PP], DRIFT_ARM_SELF, &base[1]);
    drift_analysis_total(&an[AN_GDP], DRIFT_ARM_CAND, &gdp);
    judge_paths(r, o, sums, base, pt->sum, pt->excess, pt->verdict,
                pt->undecided);
    judge_gap(r, pt, &gdp, &base[0], &base[1]);
    pp_below(r, pt, &base[0], &base[1]);
    for (int k = 0; k < DRIFT_DPATHS; k++)
        drift_acc_merge(&agg[k], &sums[k]);
    drift_acc_merge(&agg[AN_N], &base[0]);
    drift_acc_merge(&agg[AN_N + 1], &base[1]);
    for (int k = 0; k < AN_N; k++)
        drift_analysis_release(&an[k]);
    r->dec.generated += pt->generated;
    if (pt->seqs > r->dec.seqs)
        r->dec.seqs = pt->seqs;
    return ret;
}

int drift_decode_run(struct drift_side *g, struct drift_side *c,
                     const struct drift_opts *o, struct drift_result *r,
                     struct diag *d)
{
    static struct drift_acc agg[AN_N + 2]; /* 30 KiB */
    int ret = 0;

    memset(agg, 0, sizeof(agg));
    r->dec.ran = true;
    r->dec.have_pp = r->prefill;
    r->dec.n_seq = r->corpus.n;
    free(r->dec.seq_sums);
    r->dec.seq_sums = xcalloc(r->dec.n_seq ? r->dec.n_seq : 1,
                              DRIFT_HS_N * 2 * sizeof(double));
    /* a saved golden holds its generations at --decode-prompt only, saved
     * and compared: where a candidate's prefill would fail was not known
     * when it was saved */
    r->dec.saved = drift_tape_is_replay(g->tape);
    r->dec.n_points = drift_decode_prompts(o, r, g->tape != NULL, r->dec.point);
    ret = drift_cache_find_flush(c, &r->dec.flush_cand, d);
    if (!ret && r->dec.have_pp)
        ret = drift_cache_find_flush(g, &r->dec.flush_golden, d);
    if (ret)
        diag_prefix(d, "decode path: flushing the prefix cache");
    for (unsigned k = 0; k < r->dec.n_points && !ret; k++)
        ret = run_point(g, c, o, r, &r->dec.point[k], agg, d);
    judge_paths(r, o, agg, agg + AN_N, r->dec.sum, r->dec.excess,
                r->dec.verdict, r->dec.undecided);
    return ret;
}
