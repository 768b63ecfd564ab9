/*
 * lp: a struct drift_lp's storage and its filling, entry by entry (lp.h).
 * Both readers of an answer use it: the jansson parsers of dialect.c and
 * the allocation-free reader of fastparse.c, so that either fills lp the
 * same way. Closing a position sorts and deduplicates its entries only
 * when the server's list is not already in order.
 */
#include "drift/lp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void drift_lp_init(struct drift_lp *lp)
{
    memset(lp, 0, sizeof(*lp));
}

void drift_lp_release(struct drift_lp *lp)
{
    free(lp->pos);
    free(lp->valid);
    free(lp->mismatch);
    free(lp->pool);
    free(lp->ids);
    free(lp->off);
    drift_lp_init(lp);
}

void drift_lp_reset(struct drift_lp *lp, uint32_t n)
{
    if (n > lp->alloc_n) {
        lp->alloc_n = n;
        lp->pos = xrealloc(lp->pos, n * sizeof(*lp->pos));
        lp->valid = xrealloc(lp->valid, n);
        lp->mismatch = xrealloc(lp->mismatch, n);
        lp->ids = xrealloc(lp->ids, n * sizeof(*lp->ids));
        lp->off = xrealloc(lp->off, n * sizeof(*lp->off));
    }
    lp->n = n;
    lp->n_returned = 0;
    lp->n_invalid = lp->n_mismatch = 0;
    lp->n_bad = lp->bad_at = 0;
    lp->bad_value = 0;
    lp->bad_top = false;
    lp->pool_len = 0;
    lp->pool_bad = false;
    if (n) {
        memset(lp->pos, 0, n * sizeof(*lp->pos));
        memset(lp->valid, 0, n);
        memset(lp->mismatch, 0, n);
        memset(lp->off, 0, n * sizeof(*lp->off));
    }
}

void drift_lp_pool_grow(struct drift_lp *lp)
{
    lp->pool_alloc = lp->pool_alloc ? lp->pool_alloc * 2 : 1024;
    lp->pool = xrealloc(lp->pool, lp->pool_alloc * sizeof(*lp->pool));
}

size_t drift_lp_pos_close(struct drift_lp *lp, uint32_t i, unsigned top_k)
{
    size_t n = lp->pool_len - lp->off[i];
    if (n == 0) {
        lp->pos[i].n_top = lp->pos[i].n_known = 0;
        return 0;
    }
    struct drift_tok *t = lp->pool + lp->off[i];
    {
        /* the usual list: in order and without a duplicate key, so
         * nothing to sort or drop; one pass says so. The filter here is
         * the key's low 6 bits (no multiply): on random ids it clashes as
         * often as the hash below (about 3 clashes in a list of 21, each a
         * pairwise look), on ids in arithmetic progression less. */
        uint64_t seen = 1ULL << (t[0].key & 63);
        bool dup = false;
        size_t k = 1;
        for (; k < n && !dup; k++) {
            if (t[k - 1].lp < t[k].lp ||
                (t[k - 1].lp == t[k].lp && t[k - 1].key > t[k].key))
                break;
            uint64_t bit = 1ULL << (t[k].key & 63);
            if (seen & bit)
                for (size_t j = 0; j < k && !dup; j++)
                    dup = t[j].key == t[k].key;
            seen |= bit;
        }
        if (k == n && !dup) {
            lp->pos[i].n_top = (uint32_t)(n > top_k ? top_k : n);
            lp->pos[i].n_known = (uint32_t)n;
            return 0;
        }
    }
    drift_tok_sort(t, n);
    /* drop duplicate keys (a server listing the forced token twice) */
    size_t m = 0;
    /* a 64-bit filter of the kept keys: the pairwise look only when the
     * key's bit is already set (a bit clear means no kept key equals it) */
    uint64_t seen = 0;
    for (size_t k = 0; k < n; k++) {
        bool dup = false;
        uint64_t bit = 1ULL << ((t[k].key * 0x9E3779B97F4A7C15ULL) >> 58);
        if (seen & bit)
            for (size_t j = 0; j < m && !dup; j++)
                dup = t[j].key == t[k].key;
        seen |= bit;
        if (!dup) {
            if (m != k)
                t[m] = t[k];
            m++;
        }
    }
    lp->pool_len = lp->off[i] + m;
    size_t dups = n - m;
    if (m > top_k)
        m = top_k;
    lp->pos[i].n_top = (uint32_t)m;
    lp->pos[i].n_known = (uint32_t)(lp->pool_len - lp->off[i]);
    return dups;
}

/* A number no logprob can be: NaN as sanitized (1e9) or above 0, an
 * infinity (+-1e300 as sanitized, or one a reader computed); null and
 * strings (NAN here) are missing values, not bad ones. */
static bool is_bad_value(double v)
{
    return !isnan(v) && (v > 1e-6 || v <= -1e300);
}

static void note_bad(struct drift_lp *lp, uint32_t i, double v, bool top)
{
    if (!lp->n_bad++) {
        lp->bad_at = i;
        lp->bad_value = v;
        lp->bad_top = top;
    }
}

void drift_lp_value_text(double v, char *out, size_t len)
{
    if (isnan(v))
        snprintf(out, len, "null");
    else if (v == 1e9)
        snprintf(out, len, "NaN");
    else if (v >= 1e300 || v <= -1e300)
        snprintf(out, len, "%sInfinity", v < 0 ? "-" : "");
    else
        snprintf(out, len, "%.17g", v);
}

int drift_lp_check(const struct drift_lp *lp, struct diag *d)
{
    if (!lp->n_bad)
        return 0;
    char v[40];
    drift_lp_value_text(lp->bad_value, v, sizeof(v));
    return diag_set(d, EBADMSG,
                    "the server answered %u value%s no logprob can be (NaN, "
                    "an infinity or above 0), first at position %u: %s %s; "
                    "the server's fault: nothing is judged on its answer",
                    lp->n_bad, lp->n_bad == 1 ? "" : "s", lp->bad_at,
                    lp->bad_top ? "top-logprob" : "logprob", v);
}

void drift_lp_finish(struct drift_lp *lp)
{
    lp->n_invalid = 0;
    lp->n_bad = 0;
    for (uint32_t i = 0; i < lp->n; i++) {
        lp->pos[i].top =
            lp->pool && lp->pos[i].n_known ? lp->pool + lp->off[i] : NULL;
        lp->pos[i].checked = false;
        if (!lp->valid[i])
            lp->n_invalid++;
        if (!lp->valid[i])
            continue;
        /* an entry whose logprobs are NaN or above 0 is invalid */
        double f = lp->pos[i].forced_lp;
        if (isnan(f) || f > 1e-6 || f <= -1e300) {
            if (is_bad_value(f))
                note_bad(lp, i, f, false);
            lp->valid[i] = 0;
            lp->n_invalid++;
            continue;
        }
        /* entries are checked only when one added was bad (pool_bad) */
        for (uint32_t k = 0; lp->pool_bad && k < lp->pos[i].n_known; k++) {
            double t = lp->pos[i].top[k].lp;
            if (isnan(t) || t > 1e-6 || t <= -1e300) {
                if (is_bad_value(t))
                    note_bad(lp, i, t, true);
                lp->valid[i] = 0;
                lp->n_invalid++;
                break;
            }
        }
        /* valid, and top[0..n_top) was deduplicated by _pos_close (the
         * only place n_top is set; later entries go after n_known) */
        lp->pos[i].checked = lp->valid[i] != 0;
    }
}

void drift_lp_mark_mismatch(struct drift_lp *lp, uint32_t i)
{
    lp->valid[i] = 0;
    lp->mismatch[i] = 1;
    lp->n_mismatch++;
}
