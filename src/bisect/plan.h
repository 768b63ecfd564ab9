/*
 * bisect/plan: which configurations to launch. A configuration is the set
 * of toggles turned on, a bit mask over the config's toggles (at most 64).
 * The static modes list their sets up front; adaptive mode asks a test
 * callback one set at a time and decides the next from the answers (group
 * testing), so it lives here as a driver over that callback.
 */
#ifndef BISECT_PLAN_H
#define BISECT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"

typedef uint64_t bisect_set;

enum bisect_mode {
    BISECT_ONE_AT_A_TIME,
    BISECT_LEAVE_ONE_OUT,
    BISECT_ADAPTIVE,
    BISECT_FULL,
};

#define BISECT_FULL_MAX 5

/* 0 and *m set, or -EINVAL for an unknown name. */
int bisect_mode_parse(const char *s, enum bisect_mode *m);
const char *bisect_mode_name(enum bisect_mode m);

/* The sets a static mode launches (not the golden, the empty set), in
 * launch order, into a fresh array. adaptive lists its first set only.
 * -EINVAL (d filled) when full mode is asked for more than
 * BISECT_FULL_MAX toggles. */
int bisect_plan_static(enum bisect_mode m, size_t n, bisect_set **sets,
                       size_t *count, struct diag *d);

/* Measures configuration s: 0 and *harmful set, or a negative errno that
 * ends the search (returned by bisect_adaptive). */
typedef int (*bisect_test_fn)(bisect_set s, bool *harmful, void *ud);

struct bisect_adaptive_result {
    bisect_set culprits; /* empty: all on was harmless */
    bool interaction;    /* culprits hurt only together */
    size_t tests;        /* distinct sets measured */
};

/* Group testing over n toggles: all on; then a binary search for a toggle
 * that is needed for the harm given the ones already known harmless; that
 * toggle alone confirms a single culprit (ceil(log2 n) + 2 tests), or a
 * second search over the harmless background finds its partner, confirmed
 * as a pair (at most 2 ceil(log2 n) + 3). Assumes harm does not go away
 * when more toggles are on. A set is measured at most once. */
int bisect_adaptive(size_t n, bisect_test_fn test, void *ud,
                    struct bisect_adaptive_result *out);

/* ceil(log2 n), 0 for n <= 1. */
unsigned bisect_log2_ceil(size_t n);

#endif
