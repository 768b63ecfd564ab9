/*
 * drift decode path: generate greedily on the candidate, rescore prompt +
 * output by prefill on golden and candidate, and compare three ways over
 * the generated positions: golden prefill vs candidate prefill (PP),
 * candidate prefill vs candidate decode (DP), golden prefill vs candidate
 * decode (DG). PP shows prefill kernels; DG shows decode kernels (the
 * decode path against the reference); DP, the candidate against itself,
 * moves with either. Attribution: prefill kernels when PP is off and DG
 * is not; decode kernels when DG is off and PP is not; when both are off,
 * "shared" if the candidate's decode agrees with its own prefill (DP
 * passes: a change common to both paths, such as weights or scaling), else
 * both kernels.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "drift/drift.h"

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

static int one_seq(struct drift_side *g, struct drift_side *c,
                   const struct drift_opts *o, struct drift_result *r,
                   const struct drift_item *it, struct drift_analysis an[3],
                   struct diag *d)
{
    struct drift_lp dec, gp, cp, dshift, gp2, cp2;
    uint32_t prompt =
        (uint32_t)(it->n < o->decode_prompt ? it->n : o->decode_prompt);
    unsigned max_new = o->decode_tokens ? o->decode_tokens : 32;
    uint32_t *full = NULL;
    int ret;

    drift_lp_init(&dec);
    drift_lp_init(&gp);
    drift_lp_init(&cp);
    drift_lp_init(&dshift);
    drift_lp_init(&gp2);
    drift_lp_init(&cp2);
    ret = drift_side_generate(c, it->ids, prompt, max_new, &dec, d);
    if (ret)
        goto out;
    full = xmalloc((prompt + dec.n + 1) * sizeof(*full));
    memcpy(full, it->ids, prompt * sizeof(*full));
    memcpy(full + prompt, dec.ids, dec.n * sizeof(*full));
    uint32_t n = prompt + dec.n;
    ret = drift_side_score(g, full, n, &gp, d);
    if (!ret && r->dec.have_pp)
        ret = drift_side_score(c, full, n, &cp, d);
    /* second passes: the noise baseline on these very positions */
    if (!ret && r->has_control)
        ret = drift_side_score(g, full, n, &gp2, d);
    if (!ret && r->has_self)
        ret = drift_side_score(c, full, n, &cp2, d);
    if (ret)
        goto out;
    /* decode entries name the generated token by id (or text in echo);
     * the forced keys must match the prefill side's for the deltas */
    shift_decode(&dec, prompt, &dshift);
    for (uint32_t i = prompt; i < n; i++)
        if (dshift.valid[i] && gp.valid[i] &&
            dshift.pos[i].forced != gp.pos[i].forced &&
            !(dshift.pos[i].forced & DRIFT_KEY_TEXT))
            dshift.mismatch[i] = 1, dshift.valid[i] = 0;
    uint32_t seq[3];
    for (int k = 0; k < 3; k++)
        seq[k] = drift_analysis_begin_seq(&an[k]);
    if (r->dec.have_pp) {
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CAND, seq[0], &gp, &cp,
                         prompt, n, o, dp_names[DRIFT_DP_PP]);
        drift_compare_lp(&an[DRIFT_DP_DP], DRIFT_ARM_CAND, seq[1], &cp, &dshift,
                         prompt, n, o, dp_names[DRIFT_DP_DP]);
    }
    if (r->has_control)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_CTRL, seq[0], &gp, &gp2,
                         prompt, n, o, "decode-control");
    if (r->has_self)
        drift_compare_lp(&an[DRIFT_DP_PP], DRIFT_ARM_SELF, seq[0], &cp, &cp2,
                         prompt, n, o, "decode-self");
    drift_compare_lp(&an[DRIFT_DP_DG], DRIFT_ARM_CAND, seq[2], &gp, &dshift,
                     prompt, n, o, dp_names[DRIFT_DP_DG]);
    r->dec.generated += dec.n;
    r->dec.seqs++;
out:
    if (ret)
        diag_prefix(d, "decode path, %s", it->name);
    free(full);
    drift_lp_release(&dec);
    drift_lp_release(&gp);
    drift_lp_release(&cp);
    drift_lp_release(&dshift);
    drift_lp_release(&gp2);
    drift_lp_release(&cp2);
    return ret;
}

static enum drift_attr attribute(const struct drift_decode *dc)
{
    bool pp = dc->have_pp && dc->verdict[DRIFT_DP_PP] != DRIFT_PASS &&
              dc->verdict[DRIFT_DP_PP] != DRIFT_NA;
    bool dg = dc->verdict[DRIFT_DP_DG] != DRIFT_PASS &&
              dc->verdict[DRIFT_DP_DG] != DRIFT_NA;
    bool dp = dc->have_pp && dc->verdict[DRIFT_DP_DP] != DRIFT_PASS &&
              dc->verdict[DRIFT_DP_DP] != DRIFT_NA;
    if (pp && dg)
        return dp ? DRIFT_ATTR_BOTH : DRIFT_ATTR_SHARED;
    if (pp)
        return DRIFT_ATTR_PREFILL;
    if (dg)
        return DRIFT_ATTR_DECODE;
    return DRIFT_ATTR_NONE;
}

int drift_decode_run(struct drift_side *g, struct drift_side *c,
                     const struct drift_opts *o, struct drift_result *r,
                     struct diag *d)
{
    static struct drift_analysis an[3]; /* 3 MiB: not on the stack */
    size_t nseq = o->decode_seqs ? o->decode_seqs : 1;
    int ret = 0;

    if (nseq > r->corpus.n)
        nseq = r->corpus.n;
    r->dec.ran = true;
    r->dec.have_pp = r->prefill;
    for (int k = 0; k < 3; k++)
        drift_analysis_init(&an[k], 1u << 30, 1u << 30, NULL, 0, 0, &o->th);
    for (size_t i = 0; i < nseq && !ret; i++) {
        if (o->on_progress)
            o->on_progress(o->ud, "decode", i, nseq);
        ret = one_seq(g, c, o, r, &r->corpus.items[i], an, d);
    }
    /* the noise baseline: second prefill passes over the same generated
     * positions (golden run to run, candidate run to run); DP compares
     * two candidate samples, so its baseline is the whole self figure */
    struct drift_acc tc, ts;
    struct drift_bsum bc, bs, zero = {0};
    drift_analysis_total(&an[DRIFT_DP_PP], DRIFT_ARM_CTRL, &tc);
    drift_analysis_total(&an[DRIFT_DP_PP], DRIFT_ARM_SELF, &ts);
    drift_bucket_summary(&tc, &bc);
    drift_bucket_summary(&ts, &bs);
    if (!r->has_control)
        bc = zero;
    for (int k = 0; k < 3; k++) {
        struct drift_acc tot;
        drift_analysis_total(&an[k], DRIFT_ARM_CAND, &tot);
        drift_bucket_summary(&tot, &r->dec.sum[k]);
        if (k == DRIFT_DP_DP)
            drift_bucket_excess(&r->dec.sum[k], r->has_self ? &bs : &zero, &bs,
                                r->has_self, &r->dec.excess[k]);
        else
            drift_bucket_excess(&r->dec.sum[k], &bc, &bs, r->has_self,
                                &r->dec.excess[k]);
        r->dec.verdict[k] = drift_bucket_verdict(&r->dec.excess[k], &o->th);
        drift_analysis_release(&an[k]);
    }
    if (!r->dec.have_pp) {
        r->dec.verdict[DRIFT_DP_PP] = DRIFT_NA;
        r->dec.verdict[DRIFT_DP_DP] = DRIFT_NA;
    }
    r->dec.attribution = attribute(&r->dec);
    return ret;
}
