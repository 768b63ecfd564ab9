/*
 * rank: a finished bisect's configurations ranked from their verdicts,
 * and the toggles that hurt only together (adaptive: the pair it ended
 * on; leave-one-out: the toggles each needed; full: the smallest harmful
 * set whose single toggles are harmless). Pure: reads the outcome's
 * documents, prints nothing; cmd_bisect.c prints the ranking.
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
        bisect_verdict_from(json_object_get(w->r->doc, "drift"),
                            json_object_get(w->r->doc, "probe"), &w->v);
        w->claimed = claimed_path(c, w->r->set);
        w->mismatch = bisect_path_mismatch(w->claimed, &w->v);
        w->verdict = !w->v.measured      ? "not measured"
                     : w->v.recall_worse ? "CULPRIT"
                     : w->v.harmful      ? "drifts (recall unchanged)"
                     : w->v.undecided    ? "undecided (more evidence needed)"
                     : w->v.inert        ? "inert"
                                         : "harmless (below thresholds)";
    }
    qsort(rows, out->n_results, sizeof(*rows), row_cmp);
}

static bool harmful_set(const struct bisect_row *rows, size_t n, bisect_set s,
                        bool *known)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].r->set == s && rows[i].v.measured) {
            *known = true;
            return rows[i].v.harmful;
        }
    *known = false;
    return false;
}

/* Toggles that hurt only together. adaptive: the pair it ended on.
 * leave-one-out: the toggles whose removal alone makes the rest harmless,
 * when two or more are (each is needed). full: the smallest harmful set of
 * two or more whose single toggles were each measured harmless. */
static bisect_set interaction(const struct bisect_config *c, enum bisect_mode m,
                              const struct bisect_row *rows, size_t n,
                              const struct bisect_outcome *out)
{
    bisect_set all = c->n_toggles >= 64 ? ~(bisect_set)0
                                        : ((bisect_set)1 << c->n_toggles) - 1;
    bisect_set need = 0, best = 0;
    bool known;
    switch (m) {
    case BISECT_ADAPTIVE:
        return out->adaptive.interaction ? out->adaptive.culprits : 0;
    case BISECT_LEAVE_ONE_OUT:
        for (size_t t = 0; t < c->n_toggles; t++) {
            bool h = harmful_set(rows, n, all & ~((bisect_set)1 << t), &known);
            if (known && !h)
                need |= (bisect_set)1 << t;
        }
        return __builtin_popcountll(need) >= 2 ? need : 0;
    case BISECT_FULL:
        for (size_t i = 0; i < n; i++) {
            bisect_set s = rows[i].r->set;
            bool alone_ok = __builtin_popcountll(s) >= 2 && rows[i].v.harmful;
            for (size_t t = 0; alone_ok && t < c->n_toggles; t++)
                if (s >> t & 1)
                    alone_ok =
                        !harmful_set(rows, n, (bisect_set)1 << t, &known) &&
                        known;
            if (alone_ok &&
                (!best || __builtin_popcountll(s) < __builtin_popcountll(best)))
                best = s;
        }
        return best;
    default:
        return 0;
    }
}

void bisect_rank(const struct bisect_config *c, enum bisect_mode m,
                 const struct bisect_outcome *out, struct bisect_ranking *rk)
{
    size_t n = out->n_results;
    rk->n = n;
    rk->rows = xcalloc(n ? n : 1, sizeof(*rk->rows));
    fill_rows(c, out, rk->rows);
    rk->interaction = interaction(c, m, rk->rows, n, out);
    rk->target = m == BISECT_ADAPTIVE ? out->adaptive.culprits
                 : m == BISECT_FULL   ? rk->interaction
                                      : 0;
    rk->culprit = false;
    for (size_t i = 0; i < n; i++)
        rk->culprit |= rk->rows[i].v.harmful;
}

void bisect_ranking_release(struct bisect_ranking *rk)
{
    free(rk->rows);
    rk->rows = NULL;
    rk->n = 0;
}
