/*
 * bisect/plan: the configurations of each mode. Static modes are lists;
 * adaptive is a search that calls back for each measurement and remembers
 * every answer, so no set is launched twice.
 */
#include "bisect/plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static const char *const mode_names[] = {"one-at-a-time", "leave-one-out",
                                         "adaptive", "full"};

int bisect_mode_parse(const char *s, enum bisect_mode *m)
{
    for (int i = 0; i <= BISECT_FULL; i++)
        if (!strcmp(s, mode_names[i])) {
            *m = (enum bisect_mode)i;
            return 0;
        }
    return -EINVAL;
}

const char *bisect_mode_name(enum bisect_mode m)
{
    return mode_names[m];
}

unsigned bisect_log2_ceil(size_t n)
{
    unsigned l = 0;
    while (((size_t)1 << l) < n)
        l++;
    return l;
}

static bisect_set all_of(size_t n)
{
    return n >= 64 ? ~(bisect_set)0 : (((bisect_set)1 << n) - 1);
}

int bisect_plan_static(enum bisect_mode m, size_t n, bisect_set **sets,
                       size_t *count, struct diag *d)
{
    if (m == BISECT_FULL && n > BISECT_FULL_MAX)
        return diag_set(d, EINVAL,
                        "full mode launches 2^n configurations and takes at "
                        "most %d toggles (the config has %zu); use adaptive "
                        "or one-at-a-time",
                        BISECT_FULL_MAX, n);
    size_t k = m == BISECT_FULL            ? ((size_t)1 << n) - 1
               : m == BISECT_ADAPTIVE      ? 1
               : m == BISECT_LEAVE_ONE_OUT ? n + 1
                                           : n;
    bisect_set *s = xcalloc(k ? k : 1, sizeof(*s));
    bisect_set all = all_of(n);
    for (size_t i = 0; i < k; i++) {
        switch (m) {
        case BISECT_ONE_AT_A_TIME:
            s[i] = (bisect_set)1 << i;
            break;
        case BISECT_LEAVE_ONE_OUT: /* all on first: what removals take */
            s[i] = i ? all & ~((bisect_set)1 << (i - 1)) : all;
            break;
        case BISECT_ADAPTIVE:
            s[i] = all;
            break;
        case BISECT_FULL:
            s[i] = (bisect_set)(i + 1);
            break;
        }
    }
    *sets = s;
    *count = k;
    return 0;
}

struct search {
    bisect_test_fn test;
    void *ud;
    bisect_set *known; /* sets measured, and their answers */
    bool *harm;
    size_t n_known, cap;
    size_t tests;
};

/* Whether s's answer follows from one measured: a subset of a harmless
 * set is harmless, a superset of a harmful one harmful (harm does not go
 * away when more toggles are on). */
static bool known_answer(const struct search *s, bisect_set set, bool *harmful)
{
    for (size_t i = 0; i < s->n_known; i++) {
        if (s->known[i] == set || (!s->harm[i] && !(set & ~s->known[i])) ||
            (s->harm[i] && !(s->known[i] & ~set))) {
            *harmful = s->harm[i];
            return true;
        }
    }
    return false;
}

static int measure(struct search *s, bisect_set set, bool *harmful)
{
    if (known_answer(s, set, harmful))
        return 0;
    int rc = s->test(set, harmful, s->ud);
    if (rc)
        return rc;
    s->tests++;
    if (s->n_known == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 32;
        s->known = xrealloc(s->known, s->cap * sizeof(*s->known));
        s->harm = xrealloc(s->harm, s->cap * sizeof(*s->harm));
    }
    s->known[s->n_known] = set;
    s->harm[s->n_known++] = *harmful;
    return 0;
}

/* The lower half of the bits of c (by count). */
static bisect_set lower_half(bisect_set c)
{
    int k = __builtin_popcountll(c) / 2;
    bisect_set a = 0;
    for (int i = 0; i < 64 && k; i++)
        if (c & ((bisect_set)1 << i)) {
            a |= (bisect_set)1 << i;
            k--;
        }
    return a;
}

/* bg | c is harmful and bg is not: finds one toggle x of c such that
 * bg' | x is harmful for a harmless bg' with bg <= bg' <= bg | c. */
static int find_one(struct search *s, bisect_set c, bisect_set *bg,
                    bisect_set *x)
{
    while (__builtin_popcountll(c) > 1) {
        bisect_set a = lower_half(c);
        bool h;
        int rc = measure(s, *bg | a, &h);
        if (rc)
            return rc;
        if (h) {
            c = a;
        } else {
            *bg |= a;
            c &= ~a;
        }
    }
    *x = c;
    return 0;
}

/* The largest part of r known harmless (a subset of a set measured
 * harmless), as the background of the next search; r itself is harmful. */
static bisect_set known_background(const struct search *s, bisect_set r)
{
    bisect_set best = 0;
    for (size_t i = 0; i < s->n_known; i++) {
        bisect_set b = s->known[i] & r;
        if (!s->harm[i] && b != r &&
            __builtin_popcountll(b) > __builtin_popcountll(best))
            best = b;
    }
    return best;
}

/* One culprit of the harmful r: a toggle harmful alone, or one and the
 * partner it needs (a pair; larger when the two are harmless together). */
static int find_group(struct search *s, bisect_set r, bisect_set *group,
                      bool *pair)
{
    bisect_set bg = known_background(s, r), x, y;
    bool h;
    int rc = find_one(s, r & ~bg, &bg, &x);
    if (!rc)
        rc = measure(s, x, &h);
    if (rc)
        return rc;
    *pair = !h && bg;
    if (!*pair) {
        *group = x;
        return 0;
    }
    /* x needs something of the harmless background bg */
    bisect_set bg2 = x;
    rc = find_one(s, bg, &bg2, &y);
    if (!rc)
        rc = measure(s, x | y, &h);
    if (!rc)
        *group = h ? x | y : bg2 | y;
    return rc;
}

int bisect_adaptive(size_t n, bisect_test_fn test, void *ud,
                    struct bisect_adaptive_result *out)
{
    struct search s = {.test = test, .ud = ud};
    memset(out, 0, sizeof(*out));
    bisect_set r = all_of(n);
    bool h = false, pair;
    int rc = n ? measure(&s, r, &h) : 0;
    while (!rc && h && out->n_groups < BISECT_GROUPS_MAX) {
        bisect_set g;
        rc = find_group(&s, r, &g, &pair);
        if (rc)
            break;
        out->groups[out->n_groups++] = g;
        out->culprits |= g;
        out->interaction |= pair;
        r &= ~g;
        h = false;
        if (r)
            rc = measure(&s, r, &h);
    }
    out->rest = r;
    out->rest_harmless = !rc && !h;
    out->tests = s.tests;
    free(s.known);
    free(s.harm);
    return rc;
}

size_t bisect_adaptive_bound(size_t n, size_t d)
{
    return 1 + d * (bisect_log2_ceil(n) + 2);
}
