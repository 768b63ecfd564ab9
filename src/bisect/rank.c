/*
 * rank: a finished bisect's configurations ranked from their verdicts,
 * the culprits each mode can name (rank.h says how), the toggles that
 * hurt only together, and what all on's harm leaves unexplained. Pure:
 * reads the outcome's documents, prints nothing; cmd_bisect.c prints the
 * ranking.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bisect/rank.h"
#include "core/xalloc.h"

/* The toggles of set s claim one path when they agree, else unknown. */
static enum bisect_path claimed_path(const struct bisect_config *c,
                                     bisect_set s)
{
    enum bisect_path p = BISECT_PATH_UNKNOWN;
    for (size_t i = 0; i < c->n_toggles; i++)
        if (s >> i & 1) {
            if (p != BISECT_PATH_UNKNOWN && p != c->toggles[i].path)
                return BISECT_PATH_UNKNOWN;
            p = c->toggles[i].path;
        }
    return p;
}

/* Culprits (recall falls) first, then drift alone, undecided, harmless,
 * inert. */
static int rank_of(const struct bisect_verdict *v)
{
    return v->recall_worse ? 0
           : v->harmful    ? 1
           : v->undecided  ? 2
           : v->inert      ? 4
           : v->measured   ? 3
                           : 5;
}

static int row_cmp(const void *a, const void *b)
{
    const struct bisect_row *x = a, *y = b;
    int rx = rank_of(&x->v), ry = rank_of(&y->v);
    if (rx != ry)
        return rx - ry;
    double hx = isnan(x->v.harm) ? -1 : x->v.harm;
    double hy = isnan(y->v.harm) ? -1 : y->v.harm;
    return hx < hy ? 1 : hx > hy ? -1 : strcmp(x->r->name, y->r->name);
}

static void fill_rows(const struct bisect_config *c,
                      const struct bisect_outcome *out, struct bisect_row *rows)
{
    for (size_t i = 0; i < out->n_results; i++) {
        struct bisect_row *w = &rows[i];
        w->r = &out->results[i];
        bisect_verdict_of(w->r->doc, &w->v);
        w->claimed = claimed_path(c, w->r->set);
        w->mismatch = bisect_path_mismatch(w->claimed, &w->v);
        w->verdict = !w->v.measured      ? "not measured"
                     : w->v.recall_worse ? "CULPRIT"
                     : w->v.harmful && !w->v.recall_measured
                         ? "drifts (recall not measured)"
                     : w->v.harmful   ? "drifts (recall unchanged)"
                     : w->v.undecided ? "undecided (more evidence needed)"
                     : w->v.inert     ? "inert"
                                      : "harmless (below thresholds)";
    }
    qsort(rows, out->n_results, sizeof(*rows), row_cmp);
}

static const struct bisect_row *row_of(const struct bisect_row *rows, size_t n,
                                       bisect_set s)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].r->set == s && rows[i].v.measured)
            return &rows[i];
    return NULL;
}

static bisect_set all_of(const struct bisect_config *c)
{
    return c->n_toggles >= 64 ? ~(bisect_set)0
                              : ((bisect_set)1 << c->n_toggles) - 1;
}

static void add(struct bisect_ranking *rk, bisect_set s,
                const struct bisect_row *row, const struct bisect_row *without,
                double harm, bool recall)
{
    rk->culprits =
        xrealloc(rk->culprits, (rk->n_culprits + 1) * sizeof(*rk->culprits));
    rk->culprits[rk->n_culprits++] = (struct bisect_culprit){
        .set = s,
        .row = row,
        .without = without,
        .together = __builtin_popcountll(s) > 1,
        .recall = recall,
        .harm = harm,
    };
    if (__builtin_popcountll(s) > 1 && !rk->interaction)
        rk->interaction = s;
}

static void add_row(struct bisect_ranking *rk, const struct bisect_row *w)
{
    add(rk, w->r->set, w, NULL, w->v.harm, w->v.recall_worse);
}

/* Each harmful set of one toggle; full mode also each harmful set whose
 * proper subsets were all measured harmless (they hurt only together). */
static void by_rows(struct bisect_ranking *rk, bool together)
{
    for (size_t i = 0; i < rk->n; i++) {
        const struct bisect_row *w = &rk->rows[i];
        bisect_set s = w->r->set;
        if (!w->v.harmful)
            continue;
        bool minimal = __builtin_popcountll(s) == 1;
        if (!minimal && together) {
            minimal = true;
            for (bisect_set sub = (s - 1) & s; minimal && sub;
                 sub = (sub - 1) & s) {
                const struct bisect_row *u = row_of(rk->rows, rk->n, sub);
                minimal = u && !u->v.harmful;
            }
        }
        if (minimal)
            add_row(rk, w);
    }
}

/* leave-one-out: against all on, each toggle whose removal makes it
 * harmless (several such: they hurt only together), restores its recall,
 * or takes away a harm at the mean-KL FAIL level (what would make it
 * FAIL alone; point figures: a decode-only harm's interval over a few
 * decode steps reaches 0 however large it is), with all on's harm above
 * the interval of the configuration without the toggle: a drop inside
 * that interval (0.197 to 0.195 [0.166, 0.228] on the real model, above a
 * FAIL level of 1e-3) is not a measurement of the toggle. */
static void by_removal(const struct bisect_config *c, struct bisect_ranking *rk)
{
    const struct bisect_row *all = rk->all_on;
    if (!all || !all->v.harmful)
        return;
    bisect_set need = 0;
    for (size_t t = 0; t < c->n_toggles; t++) {
        bisect_set s = all_of(c) & ~((bisect_set)1 << t);
        const struct bisect_row *w = row_of(rk->rows, rk->n, s);
        if (!w)
            continue;
        double drop = all->v.harm - w->v.harm;
        bool restores = all->v.recall_worse && !w->v.recall_worse;
        bool takes = !isnan(all->v.fail_kl) && drop >= all->v.fail_kl &&
                     (isnan(w->v.harm_hi) || w->v.harm_hi < all->v.harm);
        if (!w->v.harmful)
            need |= (bisect_set)1 << t;
        else if (restores || takes)
            add(rk, (bisect_set)1 << t, NULL, w, drop, restores);
    }
    if (need)
        add(rk, need,
            __builtin_popcountll(need) == 1 ? row_of(rk->rows, rk->n, need)
                                            : NULL,
            row_of(rk->rows, rk->n, all_of(c) & ~need), all->v.harm,
            all->v.recall_worse);
}

static int culprit_cmp(const void *a, const void *b)
{
    const struct bisect_culprit *x = a, *y = b;
    if (x->recall != y->recall)
        return x->recall ? -1 : 1;
    double hx = isnan(x->harm) ? -1 : x->harm;
    double hy = isnan(y->harm) ? -1 : y->harm;
    return hx < hy ? 1 : hx > hy ? -1 : 0;
}

/* What all on's harm and recall loss leave unexplained by the culprits. */
static void account(const struct bisect_config *c, enum bisect_mode m,
                    const struct bisect_outcome *out, struct bisect_ranking *rk)
{
    bisect_set named = 0;
    bool recall = false;
    rk->explained = 0;
    for (size_t i = 0; i < rk->n_culprits; i++) {
        named |= rk->culprits[i].set;
        recall |= rk->culprits[i].recall;
        if (!isnan(rk->culprits[i].harm))
            rk->explained += rk->culprits[i].harm;
    }
    const struct bisect_row *rest = row_of(rk->rows, rk->n, all_of(c) & ~named);
    rk->rest_harmless = m == BISECT_ADAPTIVE ? out->adaptive.rest_harmless
                        : named == all_of(c) ? true
                                             : rest && !rest->v.harmful;
    const struct bisect_row *all = rk->all_on;
    if (!all || !all->v.harmful)
        return;
    rk->unexplained_recall = all->v.recall_worse && !recall;
    double floor = isnan(all->v.harm_lo) ? all->v.harm / 2 : all->v.harm_lo;
    rk->unexplained_harm =
        !rk->n_culprits || (!rk->rest_harmless && rk->explained < floor);
}

void bisect_rank(const struct bisect_config *c, enum bisect_mode m,
                 const struct bisect_outcome *out, struct bisect_ranking *rk)
{
    size_t n = out->n_results;
    memset(rk, 0, sizeof(*rk));
    rk->n = n;
    rk->rows = xcalloc(n ? n : 1, sizeof(*rk->rows));
    fill_rows(c, out, rk->rows);
    rk->all_on = row_of(rk->rows, n, all_of(c));
    switch (m) {
    case BISECT_ADAPTIVE:
        for (size_t i = 0; i < out->adaptive.n_groups; i++) {
            bisect_set g = out->adaptive.groups[i];
            const struct bisect_row *w = row_of(rk->rows, n, g);
            add(rk, g, w, NULL, w ? w->v.harm : NAN, w && w->v.recall_worse);
        }
        break;
    case BISECT_LEAVE_ONE_OUT:
        by_removal(c, rk);
        break;
    default:
        by_rows(rk, m == BISECT_FULL);
        break;
    }
    if (rk->n_culprits) /* qsort's base may not be NULL, even for 0 */
        qsort(rk->culprits, rk->n_culprits, sizeof(*rk->culprits), culprit_cmp);
    account(c, m, out, rk);
    for (size_t i = 0; i < n; i++)
        rk->culprit |= rk->rows[i].v.harmful;
}

void bisect_ranking_release(struct bisect_ranking *rk)
{
    free(rk->rows);
    free(rk->culprits);
    rk->rows = NULL;
    rk->culprits = NULL;
    rk->n = rk->n_culprits = 0;
}
