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
    for (size_t i = 1; i < n; i++) {
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

/* Sorted-by-key copy of a top-k list for binary search. */
#define INDEX_MAX (2 * DRIFT_TOPK_MAX)
struct index {
    uint64_t key[INDEX_MAX];
    double lp[INDEX_MAX];
    bool top[INDEX_MAX];
    uint32_t n;
};

static void index_build(struct index *ix, const struct drift_pos *p)
{
    uint32_t n = p->n_known > p->n_top ? p->n_known : p->n_top;
    ix->n = 0;
    for (uint32_t i = 0; i < n && ix->n < INDEX_MAX; i++) {
        if (i >= p->n_top && i - p->n_top >= DRIFT_TOPK_MAX)
            break;
        if (i < p->n_top && i >= DRIFT_TOPK_MAX)
            continue;
        uint32_t j = ix->n++;
        while (j > 0 && ix->key[j - 1] > p->top[i].key) {
            ix->key[j] = ix->key[j - 1];
            ix->lp[j] = ix->lp[j - 1];
            ix->top[j] = ix->top[j - 1];
            j--;
        }
        ix->key[j] = p->top[i].key;
        ix->lp[j] = clamp_lp(p->top[i].lp);
        ix->top[j] = i < p->n_top;
    }
}

/* Index of key in ix, or -1. */
static int index_find(const struct index *ix, uint64_t key)
{
    uint32_t lo = 0, hi = ix->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (ix->key[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ix->n && ix->key[lo] == key ? (int)lo : -1;
}

static int validate(const struct drift_pos *p)
{
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

static double kl_bound(const struct drift_pos *g, const struct drift_pos *c,
                       const struct index *cix, uint32_t *overlap)
{
    double kl = 0, sp = 0, sq = 0, lpx = clamp_lp(g->forced_lp);
    double lqx = clamp_lp(c->forced_lp);
    bool x_in_top = false;
    uint32_t n = g->n_top < DRIFT_TOPK_MAX ? g->n_top : DRIFT_TOPK_MAX;
    *overlap = 0;
    for (uint32_t i = 0; i < n; i++) {
        double lp = clamp_lp(g->top[i].lp), lq;
        int k = index_find(cix, g->top[i].key);
        if (k >= 0 && cix->top[k])
            (*overlap)++;
        if (g->top[i].key == g->forced) {
            x_in_top = true;
            lp = lpx; /* the forced entry is authoritative */
            lq = lqx;
        } else if (k >= 0) {
            lq = cix->lp[k];
        } else {
            continue; /* unknown on the candidate: merged into the tail */
        }
        double ep = exp(lp), eq = exp(lq);
        sp += ep;
        sq += eq;
        kl += kl_term(lp, lq, ep, eq);
    }
    if (!x_in_top) {
        double ep = exp(lpx), eq = exp(lqx);
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

int drift_pos_compare(const struct drift_pos *g, const struct drift_pos *c,
                      double flip_margin, struct drift_pm *out)
{
    struct index cix;
    uint32_t ov;

    if (validate(g) || validate(c))
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->lp_g = clamp_lp(g->forced_lp);
    out->lp_c = clamp_lp(c->forced_lp);
    out->dlp = out->lp_c == out->lp_g ? 0 : out->lp_c - out->lp_g;
    out->dp = out->dlp == 0 ? 0 : exp(out->lp_c) - exp(out->lp_g);
    index_build(&cix, c);
    out->kl = kl_bound(g, c, &cix, &ov);
    out->has_top = g->n_top > 0 && c->n_top > 0;
    out->top1_agree = true;
    out->overlap = 1;
    if (!out->has_top)
        return 0;
    out->top1_g = g->top[0].key;
    out->top1_c = c->top[0].key;
    out->top1_agree = out->top1_g == out->top1_c;
    double p1 = exp(clamp_lp(g->top[0].lp));
    double p2 = g->n_top > 1 ? exp(clamp_lp(g->top[1].lp)) : 0;
    out->margin = p1 - p2;
    out->decisive_flip = !out->top1_agree && out->margin > flip_margin;
    uint32_t kmin = g->n_top < c->n_top ? g->n_top : c->n_top;
    if (kmin > DRIFT_TOPK_MAX)
        kmin = DRIFT_TOPK_MAX;
    out->overlap = (double)(ov < kmin ? ov : kmin) / kmin;
    return 0;
}
