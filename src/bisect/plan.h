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
 * launch order, into a fresh array: one-at-a-time each toggle alone;
 * leave-one-out all on, then all on without each toggle; full every
 * subset; adaptive lists its first set (all on) only.
 * -EINVAL (d filled) when full mode is asked for more than
 * BISECT_FULL_MAX toggles. */
int bisect_plan_static(enum bisect_mode m, size_t n, bisect_set **sets,
                       size_t *count, struct diag *d);

/* Measures configuration s: 0 and *harmful set, or a negative errno that
 * ends the search (returned by bisect_adaptive). */
typedef int (*bisect_test_fn)(bisect_set s, bool *harmful, void *ud);

#define BISECT_GROUPS_MAX 64

struct bisect_adaptive_result {
    bisect_set culprits; /* every culprit found; empty: all on was harmless */
    /* each culprit found, in the order found: one toggle harmful alone, or
     * two that hurt only together */
    bisect_set groups[BISECT_GROUPS_MAX];
    size_t n_groups;
    bool interaction;   /* some group is a pair */
    bisect_set rest;    /* all on without the culprits */
    bool rest_harmless; /* rest measured (or known) harmless: nothing left */
    size_t tests;       /* distinct sets measured */
};

/* Group testing over n toggles for every culprit, their number unknown:
 * all on; while the remainder (all on without the culprits found so far)
 * is harmful, a binary search over it, against a background of toggles
 * known harmless, for a toggle needed for its harm; that toggle alone
 * confirms a culprit, or (harmless alone) a second search over the
 * harmless background finds its partner, confirmed as a pair; then the
 * remainder without them is measured again. Assumes harm does not go
 * away when more toggles are on: a subset of a set measured harmless is
 * harmless without a launch. A set is measured at most once; at most
 * bisect_adaptive_bound(n, d) measurements for d culprits (a pair counts
 * two). */
int bisect_adaptive(size_t n, bisect_test_fn test, void *ud,
                    struct bisect_adaptive_result *out);

/* The most measurements adaptive makes over n toggles holding d culprits
 * (a pair counted as two): 1 + d (ceil(log2 n) + 2); 1 for d = 0. */
size_t bisect_adaptive_bound(size_t n, size_t d);

/* ceil(log2 n), 0 for n <= 1. */
unsigned bisect_log2_ceil(size_t n);

#endif
