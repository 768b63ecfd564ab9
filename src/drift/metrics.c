/*
 * drift metrics: KL lower bound, forced-token deltas, top-1 agreement and
 * top-k overlap of one position. See metrics.h for the contract.
 */
#include "drift/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/hash.h"

void drift_tok_sort(struct drift_tok *t, size_t n)
{
    /* servers list top-k in order: then nothing moves (the insertion sort
     * below would not move anything either) */
    size_t i = 1;
    while (i < n && !(t[i - 1].lp < t[i].lp ||
                      (t[i - 1].lp == t[i].lp && t[i - 1].key > t[i].key)))
        i++;
    for (; i < n; i++) {
        struct drift_tok v = t[i];
        size_t j = i;
        while (j > 0 && (t[j - 1].lp < v.lp ||
                         (t[j - 1].lp == v.lp && t[j - 1].key > v.key))) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = v;
    }
}

uint64_t drift_key_text(const char *text, size_t len)
{
    static const char pfx[] = "token_id:";
    size_t pl = sizeof(pfx) - 1;
    if (len > pl && len < pl + 20 && !memcmp(text, pfx, pl)) {
        uint64_t v = 0;
        size_t i;
        for (i = pl; i < len && text[i] >= '0' && text[i] <= '9'; i++)
            v = v * 10 + (uint64_t)(text[i] - '0');
        if (i == len)
            return v;
    }
    return DRIFT_KEY_TEXT | (hash64(text, len, 0x6472696674ULL) >> 1);
}

static bool bad_lp(double lp)
{
    return isnan(lp) || lp > 1e-6;
}

static double clamp_lp(double lp)
{
    return lp > 0 ? 0 : lp;
}

/* A top-k list by key: an open-addressing hash of the entries' keys (the
 * first entry with a key wins, as a stable sort and a lower-bound search
 * did), for the lookups of the golden's keys. */
#define INDEX_MAX (2 * DRIFT_TOPK_MAX)
#define INDEX_SLOTS 256 /* > 2 * INDEX_MAX: short probe runs */
struct index {
    uint64_t key[INDEX_MAX];
    double lp[INDEX_MAX];
    bool top[INDEX_MAX];
    uint32_t n;
    uint8_t slot[INDEX_SLOTS]; /* entry + 1; 0 empty */
};

static inline unsigned slot_of(uint64_t key)
{
    return (unsigned)((key * 0x9E3779B97F4A7C15ULL) >> 56);
}

static void index_build(struct index *ix, const struct drift_pos *p)
{
    uint32_t n = p->n_known > p->n_top ? p->n_known : p->n_top;
    ix->n = 0;
    memset(ix->slot, 0, sizeof(ix->slot));
    for (uint32_t i = 0; i < n && ix->n < INDEX_MAX; i++) {
        if (i >= p->n_top && i - p->n_top >= DRIFT_TOPK_MAX)
            break;
        if (i < p->n_top && i >= DRIFT_TOPK_MAX)
            continue;
        uint64_t key = p->top[i].key;
        unsigned h = slot_of(key);
        while (ix->slot[h] && ix->key[ix->slot[h] - 1] != key)
            h = (h + 1) & (INDEX_SLOTS - 1);
        if (ix->slot[h])
            continue; /* a later duplicate: never found */
        uint32_t j = ix->n++;
        ix->slot[h] = (uint8_t)(j + 1);
        ix->key[j] = key;
        ix->lp[j] = clamp_lp(p->top[i].lp);
        ix->top[j] = i < p->n_top;
    }
}

/* Index of key in ix, or -1. */
static int index_find(const struct index *ix, uint64_t key)
{
    unsigned h = slot_of(key);
    while (ix->slot[h]) {
        if (ix->key[ix->slot[h] - 1] == key)
            return ix->slot[h] - 1;
        h = (h + 1) & (INDEX_SLOTS - 1);
    }
    return -1;
}

static int validate(const struct drift_pos *p)
{
    if (p->checked)
        return 0; /* the reader checked the same */
    if (bad_lp(p->forced_lp))
        return -EINVAL;
    uint32_t n = p->n_known > p->n_top ? p->n_known : p->n_top;
    for (uint32_t i = 0; i < n; i++)
        if (bad_lp(p->top[i].lp))
            return -EINVAL;
    return 0;
}

/* One term p * (lp - lq) of the KL sum; 0 when p is 0. p = exp(lp) and
 * q = exp(lq), which the caller has already computed. */
static double kl_term(double lp, double lq, double p, double q)
{
    if (p == 0)
        return 0;
    if (lq == lp)
        return 0;
    if (!(q > DRIFT_Q_FLOOR))
        lq = log(DRIFT_Q_FLOOR);
    return p * (lp - lq);
}

/* exp() values kl_bound has computed, for drift_pos_compare to reuse (the
 * same argument gives the same bits). */
struct exps {
    double px, qx;    /* exp(lp(x)), exp(lq(x)) */
    double lp_top[2]; /* golden top-1 and top-2 clamped logprobs ... */
    double p_top[2];  /* ... and their exp, when have_top[i] */
    bool have_top[2];
};

/* exp(lq), reusing exp(lp) when lq is lp (the usual case in a control arm) */
static inline double exp_same(double lq, double lp, double ep)
{
    return lq == lp ? ep : exp(lq);
}

/*
 * The candidate's entry for key, which the golden lists at rank i: its
 * clamped logprob in *lq and whether it is in the candidate's top in *top;
 * false when the candidate does not know key. When the candidate lists the
 * same key at the same rank inside its top, and its top keys are distinct
 * (c->checked), that entry is the one the index would find (the first with
 * the key): the index is built only when that shortcut fails.
 */
static inline bool lookup(const struct drift_pos *c, struct index *cix,
                          bool *built, uint32_t i, uint64_t key, double *lq,
                          bool *top)
{
    if (c->checked && i < c->n_top && i < DRIFT_TOPK_MAX &&
        c->top[i].key == key) {
        *lq = clamp_lp(c->top[i].lp);
        *top = true;
        return true;
    }
    if (!*built) {
        index_build(cix, c);
        *built = true;
    }
    int k = index_find(cix, key);
    if (k < 0)
        return false;
    *lq = cix->lp[k];
    *top = cix->top[k];
    return true;
}

static double kl_bound(const struct drift_pos *g, const struct drift_pos *c,
                       struct index *cix, uint32_t *overlap, struct exps *ex)
{
    bool built = false;
    double kl = 0, sp = 0, sq = 0, lpx = clamp_lp(g->forced_lp);
    double lqx = clamp_lp(c->forced_lp);
    bool x_in_top = false;
    uint32_t n = g->n_top < DRIFT_TOPK_MAX ? g->n_top : DRIFT_TOPK_MAX;
    *overlap = 0;
    ex->have_top[0] = ex->have_top[1] = false;
    for (uint32_t i = 0; i < n; i++) {
        double lp = clamp_lp(g->top[i].lp), lq, lqk = 0;
        bool in_top = false;
        bool known = lookup(c, cix, &built, i, g->top[i].key, &lqk, &in_top);
        if (known && in_top)
            (*overlap)++;
        bool forced = g->top[i].key == g->forced;
        if (forced) {
            x_in_top = true;
            lp = lpx; /* the forced entry is authoritative */
            lq = lqx;
        } else if (known) {
            lq = lqk;
        } else {
            continue; /* unknown on the candidate: merged into the tail */
        }
        double ep = exp(lp), eq = exp_same(lq, lp, ep);
        if (i < 2) {
            ex->lp_top[i] = lp;
            ex->p_top[i] = ep;
            ex->have_top[i] = true;
        }
        if (forced) {
            ex->px = ep;
            ex->qx = eq;
        }
        sp += ep;
        sq += eq;
        kl += kl_term(lp, lq, ep, eq);
    }
    if (!x_in_top) {
        double ep = exp(lpx), eq = exp_same(lqx, lpx, ep);
        ex->px = ep;
        ex->qx = eq;
        sp += ep;
        sq += eq;
        kl += kl_term(lpx, lqx, ep, eq);
    }
    double pt = 1 - sp, qt = 1 - sq;
    if (pt > 0 && pt != qt) {
        if (!(qt > DRIFT_Q_FLOOR))
            qt = DRIFT_Q_FLOOR;
        kl += pt * log(pt / qt);
    }
    return kl > 0 ? kl : 0;
}

/* exp(clamp(lp)) of golden top entry i, from kl_bound when it computed it */
static double p_top(const struct drift_pos *g, const struct exps *ex,
                    uint32_t i)
{
    double lp = clamp_lp(g->top[i].lp);
    return ex->have_top[i] && ex->lp_top[i] == lp ? ex->p_top[i] : exp(lp);
}

int drift_pos_compare(const struct drift_pos *g, const struct drift_pos *c,
                      double flip_margin, struct drift_pm *out)
{
    struct index cix;
    struct exps ex;
    uint32_t ov;

    if (validate(g) || validate(c))
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->lp_g = clamp_lp(g->forced_lp);
    out->lp_c = clamp_lp(c->forced_lp);
    out->dlp = out->lp_c == out->lp_g ? 0 : out->lp_c - out->lp_g;
    out->kl = kl_bound(g, c, &cix, &ov, &ex);
    /* exp(lp_c) and exp(lp_g) are exp(lqx) and exp(lpx) of kl_bound */
    out->dp = out->dlp == 0 ? 0 : ex.qx - ex.px;
    out->has_top = g->n_top > 0 && c->n_top > 0;
    out->top1_agree = true;
    out->overlap = 1;
    if (!out->has_top)
        return 0;
    out->top1_g = g->top[0].key;
    out->top1_c = c->top[0].key;
    out->top1_agree = out->top1_g == out->top1_c;
    double p1 = p_top(g, &ex, 0);
    double p2 = g->n_top > 1 ? p_top(g, &ex, 1) : 0;
    out->margin = p1 - p2;
    out->decisive_flip = !out->top1_agree && out->margin > flip_margin;
    uint32_t kmin = g->n_top < c->n_top ? g->n_top : c->n_top;
    if (kmin > DRIFT_TOPK_MAX)
        kmin = DRIFT_TOPK_MAX;
    out->overlap = (double)(ov < kmin ? ov : kmin) / kmin;
    return 0;
}
