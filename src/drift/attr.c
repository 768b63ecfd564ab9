/*
 * drift attribution: where the decode path is measured (prompt lengths
 * chosen from where prefill diverged) and what the difference is put down
 * to: prefill only, decode only (also below the thresholds, when the
 * candidate's decode-vs-prefill gap exceeds the golden's own), both paths
 * flat from the start, both paths depending on position (growing, or
 * absent at the start and there later), or none when
 * neither path differs; with the words of what could and could not be
 * attributed. Contract in drift.h; the rules in docs/DRIFT.md.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/plural.h"
#include "drift/drift.h"

const char *drift_attr_name(enum drift_attr a)
{
    static const char *const n[] = {
        [DRIFT_ATTR_NONE] = "none",
        [DRIFT_ATTR_PREFILL] = "prefill only",
        [DRIFT_ATTR_DECODE] = "decode only",
        [DRIFT_ATTR_BOTH_FLAT] = "both paths, flat from the start (weights, "
                                 "scaling, a constant change)",
        [DRIFT_ATTR_BOTH_GROWING] = "both paths, depending on position "
                                    "(attention, positions, selection, cache)",
        [DRIFT_ATTR_UNKNOWN] = "not run",
    };
    return n[a];
}

const char *drift_attr_kind(enum drift_attr a)
{
    static const char *const n[] = {
        [DRIFT_ATTR_NONE] = "none",
        [DRIFT_ATTR_PREFILL] = "prefill",
        [DRIFT_ATTR_DECODE] = "decode",
        [DRIFT_ATTR_BOTH_FLAT] = "both-flat",
        [DRIFT_ATTR_BOTH_GROWING] = "both-growing",
        [DRIFT_ATTR_UNKNOWN] = "not-run",
    };
    return n[a];
}

static double nz(double v)
{
    return isnan(v) ? 0 : v;
}

static bool is_off(enum drift_verdict v)
{
    return v == DRIFT_WARN || v == DRIFT_FAIL;
}

/* The first prefill bucket that is not PASS; with only growth off, the
 * last bucket with positions; -1 when prefill agrees. */
static int first_off(const struct drift_result *r)
{
    const struct drift_analysis *a = &r->an;
    int last = -1;
    for (size_t b = 0; b < a->n_buckets; b++) {
        if (is_off(r->bucket_verdict[b]))
            return (int)b;
        if (a->acc[DRIFT_ARM_CAND][b].n)
            last = (int)b;
    }
    return is_off(r->growth.verdict) ? last : -1;
}

unsigned drift_decode_prompts(const struct drift_opts *o,
                              const struct drift_result *r, bool fixed_only,
                              struct drift_dpoint *out)
{
    uint32_t longest = 1, tokens = o->decode_tokens ? o->decode_tokens : 32;
    unsigned n = 0;
    for (size_t i = 0; i < r->corpus.n; i++)
        if (r->corpus.items[i].n > longest)
            longest = (uint32_t)r->corpus.items[i].n;
    memset(out, 0, DRIFT_DPOINTS_MAX * sizeof(*out));
    int b = r->prefill && !fixed_only ? first_off(r) : -1;
    if (b >= 0) {
        /* the middle of the bucket's positions, leaving room for the
         * generated tokens inside it */
        uint32_t lo = r->an.edges[b], hi = r->an.edges[b + 1];
        if (hi > longest)
            hi = longest;
        uint32_t span = hi > lo ? hi - lo : 0;
        uint32_t p = lo + (span > tokens ? (span - tokens) / 2 : 0);
        if (p >= longest)
            p = longest - 1;
        out[n++] = (struct drift_dpoint){
            .prompt = p ? p : 1, .bucket = b, .diverged = true};
    }
    uint32_t dp = o->decode_prompt < longest ? o->decode_prompt : longest;
    int bd =
        r->prefill ? drift_bucket_of(&r->an, dp < longest ? dp : dp - 1) : -1;
    if (n == 0 || bd != out[0].bucket)
        out[n++] = (struct drift_dpoint){.prompt = dp, .bucket = bd};
    /* generation, then scoring of prompt and output with one completion
     * token: both fit the server's context */
    uint64_t room =
        r->context > (uint64_t)tokens + 1 ? r->context - tokens - 1 : 1;
    for (unsigned i = 0; i < n && r->context; i++)
        if (out[i].prompt > room)
            out[i].prompt = (uint32_t)room;
    return n;
}

/* ---- attribution ---- */

struct facts {
    int fb;          /* first prefill bucket off, -1 */
    bool prefill;    /* prefill differs: a bucket, growth or a point's PP */
    int both;        /* a point where PP and DG are off; -1 */
    int decode;      /* a point where decode differs and PP does not; -1 */
    int agree;       /* a point where nothing differs; -1 */
    int pponly;      /* a point where PP is off and decode is not; -1 */
    bool decode_gap; /* decode's point differs by the gap only */
};

static void gather(const struct drift_result *r, struct facts *f)
{
    const struct drift_decode *dc = &r->dec;
    *f = (struct facts){.fb = first_off(r),
                        .both = -1,
                        .decode = -1,
                        .agree = -1,
                        .pponly = -1};
    f->prefill = f->fb >= 0 || is_off(r->growth.verdict);
    for (unsigned k = 0; k < dc->n_points; k++) {
        const struct drift_dpoint *p = &dc->point[k];
        if (p->seqs == 0)
            continue;
        bool pp =
            dc->have_pp && (is_off(p->verdict[DRIFT_DP_PP]) || p->pp_below);
        bool dg = is_off(p->verdict[DRIFT_DP_DG]);
        /* the gap says decode only when decode is the side that departs
         * from the golden: a prefill-only change opens the gap too */
        bool gap = p->gap_measured && p->gap_differs &&
                   nz(p->excess[DRIFT_DP_DG].kl_mean) >
                       nz(p->excess[DRIFT_DP_PP].kl_mean);
        f->prefill |= pp;
        if (pp && !dg && f->pponly < 0)
            f->pponly = (int)k;
        if (pp && dg && f->both < 0)
            f->both = (int)k;
        else if (!pp && (dg || gap) && f->decode < 0) {
            f->decode = (int)k;
            f->decode_gap = !dg;
        } else if (!pp && !dg && !gap && f->agree < 0)
            f->agree = (int)k;
    }
    /* over every point at once (more steps, a smaller error) a path can
     * be off where no single point is */
    bool pp_all = dc->have_pp && is_off(dc->verdict[DRIFT_DP_PP]);
    bool dg_all = is_off(dc->verdict[DRIFT_DP_DG]);
    f->prefill |= pp_all;
    if (dg_all && f->both < 0 && f->decode < 0 && dc->n_points) {
        if (pp_all)
            f->both = 0;
        else
            f->decode = 0;
    }
}

static void point_words(const struct drift_dpoint *p, struct buf *b)
{
    buf_printf(b,
               "at prompt %u (%u sequence%s, %u step%s) prefill vs prefill %s "
               "(excess KL %.2e), decode vs golden prefill %s (excess KL "
               "%.2e)",
               p->prompt, p->seqs, plural_s(p->seqs), p->generated,
               plural_s(p->generated),
               drift_verdict_name(p->verdict[DRIFT_DP_PP]),
               p->excess[DRIFT_DP_PP].kl_mean,
               drift_verdict_name(p->verdict[DRIFT_DP_DG]),
               p->excess[DRIFT_DP_DG].kl_mean);
    if (p->gap_measured)
        buf_printf(b,
                   ", decode-vs-prefill gap %.2e against the golden's %.2e "
                   "(+/- %.1e)",
                   p->gap_cand, p->gap_golden, 2 * p->gap_se);
}

static void prefill_words(const struct drift_result *r, int fb, struct buf *b)
{
    const struct drift_growth *g = &r->growth;
    if (fb >= 0)
        buf_printf(b,
                   "prefill differs from position %u (bucket [%u,%u) %s, "
                   "excess KL %.2e)",
                   r->an.edges[fb], r->an.edges[fb], r->an.edges[fb + 1],
                   drift_verdict_name(r->bucket_verdict[fb]),
                   r->excess[fb].kl_mean);
    else
        buf_printf(b, "every prefill bucket passes");
    for (unsigned k = 0; fb < 0 && k < r->dec.n_points; k++)
        if (r->dec.point[k].pp_below) {
            buf_printf(b,
                       ", but at prompt %u the prefills differ by more than "
                       "their noise (excess KL %.2e, below the thresholds)",
                       r->dec.point[k].prompt,
                       r->dec.point[k].excess[DRIFT_DP_PP].kl_mean);
            break;
        }
    if (g->shape == DRIFT_SHAPE_GROWING && isnan(g->lo))
        buf_printf(b, ", growing past position %u (slope %+.2f)", g->from,
                   g->slope);
    else if (g->shape == DRIFT_SHAPE_GROWING)
        buf_printf(b,
                   ", growing past position %u (slope %+.2f, interval "
                   "[%+.2f, %+.2f])",
                   g->from, g->slope, g->lo, g->hi);
    else if (g->shape == DRIFT_SHAPE_CONSTANT)
        buf_printf(b, ", flat past position %u (excess KL up to %.2e)", g->from,
                   g->peak);
}

/* The difference is there from the first bucket with positions on (its
 * excess at or above the growth floor), not one that starts later. */
static bool from_start(const struct drift_result *r)
{
    for (size_t b = 0; b < r->an.n_buckets; b++)
        if (r->an.acc[DRIFT_ARM_CAND][b].n)
            return r->excess[b].kl_mean >= r->an.th.growth_floor &&
                   r->excess[b].kl_mean > 0;
    return false;
}

static enum drift_attr decide(const struct drift_result *r,
                              const struct facts *f)
{
    /* a difference that starts at a position (a selection size, a
     * window) depends on position as much as one that grows */
    if (f->both >= 0 || (f->prefill && f->decode >= 0))
        return r->growth.shape != DRIFT_SHAPE_GROWING && from_start(r)
                   ? DRIFT_ATTR_BOTH_FLAT
                   : DRIFT_ATTR_BOTH_GROWING;
    if (f->prefill)
        return DRIFT_ATTR_PREFILL;
    if (f->decode >= 0)
        return DRIFT_ATTR_DECODE;
    return DRIFT_ATTR_NONE;
}

static void attributed_words(const struct drift_result *r,
                             const struct facts *f, struct buf *b)
{
    const struct drift_decode *dc = &r->dec;
    switch (dc->attribution) {
    case DRIFT_ATTR_PREFILL:
        prefill_words(r, f->fb, b);
        if (f->pponly >= 0 || f->agree >= 0) {
            buf_adds(b, "; the decode path decodes like the golden's "
                        "prefill: ");
            point_words(&dc->point[f->pponly >= 0 ? f->pponly : f->agree], b);
        }
        break;
    case DRIFT_ATTR_DECODE:
        buf_adds(b, f->decode_gap
                        ? "the decode path, below the WARN thresholds: its "
                          "decode departs from its own prefill more than the "
                          "golden's does, while the prefills agree: "
                    : dc->have_pp
                        ? "the decode path: its decode departs from the "
                          "golden's prefill while the prefills agree: "
                        : "the decode path as far as it can be measured: its "
                          "decode departs from the golden's prefill (its "
                          "own prefill gives no logprobs): ");
        point_words(&dc->point[f->decode], b);
        break;
    case DRIFT_ATTR_BOTH_FLAT:
    case DRIFT_ATTR_BOTH_GROWING:
        prefill_words(r, f->fb, b);
        /* not growing, yet not flat from the start: say which it is, so
         * that the growth's "constant" and this agree */
        if (dc->attribution == DRIFT_ATTR_BOTH_GROWING &&
            r->growth.shape != DRIFT_SHAPE_GROWING)
            buf_adds(b, ", absent at the start (the first bucket's excess "
                        "is below the growth floor) and there later");
        buf_adds(b, "; the decode path differs too: ");
        const struct drift_dpoint *p =
            &dc->point[f->both >= 0 ? f->both : f->decode];
        point_words(p, b);
        if (p->gap_measured)
            buf_adds(b, p->gap_differs
                            ? "; decode departs from the candidate's own "
                              "prefill as well: each path in its own way"
                            : "; decode agrees with the candidate's own "
                              "prefill: one change common to both paths");
        break;
    default:
        buf_adds(b, "neither path differs: every prefill bucket passes");
        if (f->agree >= 0) {
            buf_adds(b, "; ");
            point_words(&dc->point[f->agree], b);
        }
        break;
    }
}

/* Failing buckets the decode path did not look at, the limits of what was
 * measured. */
static void unattributed_words(const struct drift_result *r,
                               const struct facts *f, struct buf *b)
{
    const struct drift_decode *dc = &r->dec;
    if (!dc->ran) {
        if (f->prefill)
            buf_adds(b, "whether the decode path shares the difference: "
                        "the decode path was not run (--decode-tokens 0)");
        return;
    }
    if (!dc->have_pp)
        buf_adds(b, "prefill against decode: the candidate gives no prompt "
                    "logprobs, so its prefill path cannot be measured and a "
                    "decode difference cannot be told from a prefill one; ");
    for (unsigned k = 0; k < dc->n_points; k++)
        if (dc->point[k].diverged && dc->point[k].seqs == 0)
            buf_printf(b,
                       "no sequence is longer than prompt %u, so the "
                       "decode path was not measured where prefill "
                       "diverged; ",
                       dc->point[k].prompt);
    for (unsigned k = 0; k < dc->n_points; k++)
        if (dc->point[k].gap_why[0])
            buf_printf(b,
                       "the golden's own decode-vs-prefill gap at prompt "
                       "%u could not be measured (%s): a decode "
                       "difference below the thresholds may go unseen; ",
                       dc->point[k].prompt, dc->point[k].gap_why);
    size_t before = b->len;
    for (size_t i = 0; i < r->an.n_buckets; i++) {
        bool seen = false;
        for (unsigned k = 0; k < dc->n_points; k++)
            seen |= dc->point[k].bucket == (int)i && dc->point[k].seqs;
        if (is_off(r->bucket_verdict[i]) && !seen)
            buf_printf(b, "%s[%u,%u) %s", b->len == before ? "" : ", ",
                       r->an.edges[i], r->an.edges[i + 1],
                       drift_verdict_name(r->bucket_verdict[i]));
    }
    if (b->len > before)
        buf_adds(b, ": buckets the decode path was not measured in (their "
                    "cause is inferred from the first); ");
    if (f->fb >= 0 && f->both < 0 && f->decode < 0 && dc->have_pp) {
        for (unsigned k = 0; k < dc->n_points; k++)
            if (dc->point[k].bucket == f->fb && dc->point[k].seqs &&
                !is_off(dc->point[k].verdict[DRIFT_DP_PP]))
                buf_printf(b,
                           "the prefill comparison at prompt %u (%u "
                           "step%s) does not show the bucket's difference "
                           "on its own; ",
                           dc->point[k].prompt, dc->point[k].generated,
                           plural_s(dc->point[k].generated));
    }
    while (b->len >= 2 && !strcmp(b->data + b->len - 2, "; "))
        b->len -= 2, b->data[b->len] = '\0';
}

void drift_attribute(const struct drift_opts *o, struct drift_result *r)
{
    struct drift_decode *dc = &r->dec;
    struct facts f;
    struct buf a = BUF_INIT, u = BUF_INIT;
    (void)o;
    gather(r, &f);
    if (dc->ran) {
        dc->attribution = decide(r, &f);
        attributed_words(r, &f, &a);
    } else {
        dc->attribution = DRIFT_ATTR_UNKNOWN;
        if (f.prefill)
            prefill_words(r, f.fb, &a);
    }
    unattributed_words(r, &f, &u);
    snprintf(dc->attributed, sizeof(dc->attributed), "%s", buf_str(&a));
    snprintf(dc->not_attributed, sizeof(dc->not_attributed), "%s", buf_str(&u));
    buf_release(&a);
    buf_release(&u);
}
