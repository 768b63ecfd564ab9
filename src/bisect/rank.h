/*
 * bisect/rank: the ranking of a finished bisect, apart from how it is
 * printed. Each configuration's verdict (bisect/verdict) becomes a row
 * with the path its toggles claim and a verdict in words; the rows are
 * ordered culprits (recall falls) first, then drift alone, harmless and
 * inert, by harm within each. Also the toggles that hurt only together,
 * as each mode can tell them, and the set the headline names.
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

struct bisect_ranking {
    struct bisect_row *rows; /* ranked; n of them */
    size_t n;
    bisect_set interaction; /* toggles that hurt only together; 0: none */
    bisect_set target;      /* the set the headline names (adaptive's answer,
                             * full mode's interaction); 0: by verdict */
    bool culprit;           /* some configuration is harmful */
};

/* Ranks out's results as mode m measured them. Release with
 * bisect_ranking_release; the rows borrow out's results. */
void bisect_rank(const struct bisect_config *c, enum bisect_mode m,
                 const struct bisect_outcome *out, struct bisect_ranking *rk);
void bisect_ranking_release(struct bisect_ranking *rk);

#endif
