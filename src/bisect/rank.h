/*
 * bisect/rank: the ranking of a finished bisect, apart from how it is
 * printed. Each configuration's verdict (bisect/verdict) becomes a row
 * with the path its toggles claim and a verdict in words; the rows are
 * ordered culprits (recall falls) first, then drift alone, harmless and
 * inert, by harm within each. Then the culprits as each mode can tell
 * them (one-at-a-time: each harmful toggle; leave-one-out: each toggle
 * whose removal makes all on harmless, restores its recall or takes away
 * a harm at the mean-KL FAIL level; adaptive: its groups; full: each harmful
 * toggle and each harmful set whose every part is harmless), the toggles
 * that hurt only together, and what all on's harm leaves unexplained.
 */
#ifndef BISECT_RANK_H
#define BISECT_RANK_H

#include <stdbool.h>
#include <stddef.h>

#include "bisect/bisect.h"
#include "bisect/verdict.h"

struct bisect_row {
    const struct bisect_result *r; /* borrowed from the outcome */
    struct bisect_verdict v;
    enum bisect_path claimed; /* the path the set's toggles claim */
    bool mismatch;            /* measured path contradicts claimed */
    const char *verdict;      /* in words: "CULPRIT", "inert", ... */
};

/* One culprit as the mode found it: a toggle harmful on its own, or
 * toggles that hurt only together. */
struct bisect_culprit {
    bisect_set set;
    const struct bisect_row *row;     /* the set measured; NULL: not alone */
    const struct bisect_row *without; /* leave-one-out: all on without it */
    bool together;                    /* two or more, harmless apart */
    bool recall;                      /* recall falls with it */
    double harm; /* its excess KL (leave-one-out: what removing it takes
                  * away from all on's) */
};

struct bisect_ranking {
    struct bisect_row *rows; /* ranked; n of them */
    size_t n;
    /* every culprit the mode names: recall loss first, then by harm */
    struct bisect_culprit *culprits;
    size_t n_culprits;
    bisect_set interaction; /* toggles that hurt only together; 0: none */
    bool culprit;           /* some configuration is harmful */
    /* all on, where the mode measured it, and what of its harm the
     * culprits leave unexplained: its recall loss when no culprit lost
     * recall; its harm when the culprits' harms do not reach its
     * interval and the rest without them was not measured harmless */
    const struct bisect_row *all_on;
    bool rest_harmless;
    double explained;
    bool unexplained_recall, unexplained_harm;
};

/* Ranks out's results as mode m measured them. Release with
 * bisect_ranking_release; the rows borrow out's results. */
void bisect_rank(const struct bisect_config *c, enum bisect_mode m,
                 const struct bisect_outcome *out, struct bisect_ranking *rk);
void bisect_ranking_release(struct bisect_ranking *rk);

#endif
