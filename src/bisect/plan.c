/*
 * bisect/plan: the configurations of each mode. Static modes are lists;
 * adaptive is a search that calls back for each measurement and remembers
 * every answer, so no set is launched twice.
 */
#include "bisect/plan.h"

#include <errno.h>
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
    size_t k = m == BISECT_FULL       ? ((size_t)1 << n) - 1
               : m == BISECT_ADAPTIVE ? 1
                                      : n;
    bisect_set *s = xcalloc(k ? k : 1, sizeof(*s));
    bisect_set all = all_of(n);
    for (size_t i = 0; i < k; i++) {
        switch (m) {
        case BISECT_ONE_AT_A_TIME:
            s[i] = (bisect_set)1 << i;
            break;
        case BISECT_LEAVE_ONE_OUT:
            s[i] = all & ~((bisect_set)1 << i);
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
    bisect_set known[160]; /* sets measured, and their answers */
    bool harm[160];
    size_t n_known;
};

static int measure(struct search *s, bisect_set set, bool *harmful)
{
    for (size_t i = 0; i < s->n_known; i++)
        if (s->known[i] == set) {
            *harmful = s->harm[i];
            return 0;
        }
    int rc = s->test(set, harmful, s->ud);
    if (rc)
        return rc;
    if (s->n_known < sizeof(s->known) / sizeof(s->known[0])) {
        s->known[s->n_known] = set;
        s->harm[s->n_known++] = *harmful;
    }
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

int bisect_adaptive(size_t n, bisect_test_fn test, void *ud,
                    struct bisect_adaptive_result *out)
{
    struct search s = {.test = test, .ud = ud};
    memset(out, 0, sizeof(*out));
    bool h;
    int rc = n ? measure(&s, all_of(n), &h) : 0;
    if (rc || !n || !h)
        goto out_done;
    bisect_set bg = 0, x, y;
    rc = find_one(&s, all_of(n), &bg, &x);
    if (!rc)
        rc = measure(&s, x, &h);
    if (rc)
        goto out_done;
    if (h || !bg) {
        out->culprits = x;
        goto out_done;
    }
    /* x needs something of the harmless background bg. */
    bisect_set bg2 = x;
    rc = find_one(&s, bg, &bg2, &y);
    if (!rc)
        rc = measure(&s, x | y, &h);
    if (rc)
        goto out_done;
    out->culprits = h ? x | y : bg2 | y;
    out->interaction = true;
out_done:
    out->tests = s.n_known;
    return rc;
}
