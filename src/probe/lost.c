/*
 * lost: what became of the context that did not reach the model. A case
 * is lost context when usage.prompt_tokens is under 90% of probe's own
 * count (own.c) beyond that count's error. Across the cases of a run, a
 * server that truncates keeps the same number of tokens whatever was sent
 * (its context length or a fixed limit): truncated-by-server. Anything
 * else was dropped before the model, and each case's shape says how:
 *
 * - window: the count left equals probe's own count minus its first k
 *   turns (a history window by turns, a gateway dropping the oldest);
 * - summary: it equals the last turns plus a little (the front replaced
 *   by a summary: compaction);
 * - clipping: every long message shortened; across cases one byte cap
 *   explains the counts, or /tokenize itself counted probe's pieces short
 *   of what their bytes hold (a path that clips the sizing requests too).
 */
#include <math.h>
#include <string.h>

#include "probe/probe_int.h"

const char *probe_drop_name(int drop)
{
    static const char *const names[PROBE_DROP_COUNT] = {
        [PROBE_DROP_NONE] = "",
        [PROBE_DROP_WINDOW] = "window",
        [PROBE_DROP_SUMMARY] = "summary",
        [PROBE_DROP_CLIP] = "clipping",
    };
    return drop >= 0 && drop < PROBE_DROP_COUNT ? names[drop] : "";
}

bool probe_is_lost(long reached, const struct probe_shape *sh)
{
    return sh->total && reached >= 0 &&
           (double)reached < 0.9 * sh->total - sh->err;
}

/* Tokens of the turns 1..k of sh. */
static double turns_upto(const struct probe_shape *sh, unsigned k)
{
    double t = 0;
    for (unsigned j = 0; j < sh->n; j++)
        if (sh->turn[j] >= 1 && sh->turn[j] <= k)
            t += sh->tok[j];
    return t;
}

/* The count a path clipping every text to c bytes would leave. */
static double clipped_to(const struct probe_shape *sh, double c)
{
    double msgs = 0, left = 0;
    for (unsigned j = 0; j < sh->n; j++) {
        msgs += sh->tok[j];
        double keep = sh->bytes[j] > c ? c / sh->bytes[j] : 1;
        left += sh->tok[j] * keep;
    }
    return sh->total - msgs + left;
}

/* The byte cap that explains reached (bisection); -1 when none does. */
static double clip_fit(const struct probe_shape *sh, long reached)
{
    double lo = 0, hi = 0;
    for (unsigned j = 0; j < sh->n; j++)
        hi = fmax(hi, sh->bytes[j]);
    if (clipped_to(sh, lo) > reached || clipped_to(sh, hi) < reached)
        return -1;
    for (int i = 0; i < 50; i++) {
        double mid = (lo + hi) / 2;
        if (clipped_to(sh, mid) < reached)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

/* How far a window may miss: the turns were counted one by one
 * (probe_own_turns), so to the count's own error. */
static double window_tol(const struct probe_shape *sh)
{
    return fmax(3, 2 * sh->err + 0.002 * sh->total);
}

/* The number of front turns whose loss leaves exactly reached; 0: none. */
static unsigned window_of(const struct probe_shape *sh, long reached)
{
    double tol = window_tol(sh);
    for (unsigned k = 1; k < sh->turns; k++)
        if (fabs((double)reached - (sh->total - turns_upto(sh, k))) <= tol)
            return k;
    return 0;
}

/* The shape of one case's drop when it is a window or a summary; CLIP
 * otherwise (decided across cases by the caller). */
static int one_shape(struct probe_result *r)
{
    const struct probe_shape *sh = &r->shape;
    double reached = (double)r->prompt_tokens;
    double tol = window_tol(sh);
    if (sh->pieces_short)
        return PROBE_DROP_CLIP;
    unsigned kmax = 0;
    for (unsigned k = 1; k < sh->turns; k++) {
        double left = sh->total - turns_upto(sh, k);
        if (fabs(reached - left) <= tol) {
            r->drop_turns = k;
            return PROBE_DROP_WINDOW;
        }
        if (left <= reached + tol) {
            kmax = k; /* the fewest turns whose loss fits under the count */
            break;
        }
    }
    if (!kmax)
        return PROBE_DROP_CLIP;
    /* a summary stands for turns 1..kmax and costs the difference */
    double rest = sh->total - turns_upto(sh, kmax);
    double extra = reached - rest;
    double mean_turn = sh->turns ? turns_upto(sh, sh->turns) / sh->turns : 0;
    if (extra <= fmax(600, 0.5 * mean_turn)) {
        r->drop_turns = kmax;
        return PROBE_DROP_SUMMARY;
    }
    return PROBE_DROP_CLIP;
}

/* True when the lost cases' counts sit at one cap. */
static bool at_one_cap(const struct probe_result *res, size_t n,
                       unsigned model_len)
{
    long lo = -1, hi = -1;
    unsigned olo = 0, ohi = 0;
    size_t nl = 0, windows = 0;
    for (size_t i = 0; i < n; i++) {
        const struct probe_result *r = &res[i];
        if (!r->done || r->cached || !r->lost)
            continue;
        long v = r->prompt_tokens;
        unsigned o = r->shape.total;
        lo = lo < 0 || v < lo ? v : lo;
        hi = v > hi ? v : hi;
        olo = !nl || o < olo ? o : olo;
        ohi = o > ohi ? o : ohi;
        windows += r->have_shape && window_of(&r->shape, v) > 0;
        nl++;
    }
    /* every count is exactly some front turns gone: a window that keeps
     * the same number of tokens, not a cap */
    if (!nl || windows == nl)
        return false;
    double band = fmax(4, 0.003 * (double)hi);
    if (model_len && hi >= 0.98 * model_len)
        return true;
    return nl >= 2 && (double)(hi - lo) <= band && (double)(ohi - olo) > band;
}

void probe_lost_classify(const struct probe_spec *specs,
                         struct probe_result *res, size_t n, unsigned model_len)
{
    (void)specs;
    bool cap = at_one_cap(res, n, model_len);
    double cmin = -1, cmax = -1;
    unsigned nmin = 0, nmax = 0;
    size_t nclip = 0, nlost = 0, kinds[PROBE_DROP_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (!r->done || r->cached || !r->lost || r->outcome != PROBE_TRUNCATED)
            continue;
        r->drop_ratio =
            r->shape.total ? (double)r->prompt_tokens / r->shape.total : 0;
        if (cap)
            continue;
        r->outcome = PROBE_DROPPED;
        r->drop = one_shape(r);
        nlost++;
        if (r->drop == PROBE_DROP_WINDOW || r->shape.pieces_short)
            continue;
        double c = clip_fit(&r->shape, r->prompt_tokens);
        if (c < 0)
            continue;
        cmin = cmin < 0 || c < cmin ? c : cmin;
        cmax = c > cmax ? c : cmax;
        nmin = !nclip || r->shape.n < nmin ? r->shape.n : nmin;
        nmax = r->shape.n > nmax ? r->shape.n : nmax;
        nclip++;
    }
    /* One byte cap explains the cases that are not windows, and they
     * differ in their number of messages (a summary of the same size in
     * cases of the same structure would fit one cap too): clipping. */
    bool clip = nclip >= 2 && cmax <= 1.3 * cmin && nmax > nmin;
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (r->outcome != PROBE_DROPPED || r->cached)
            continue;
        if (clip && r->drop == PROBE_DROP_SUMMARY) {
            r->drop = PROBE_DROP_CLIP;
            r->drop_turns = 0;
        }
        kinds[r->drop]++;
    }
    /* One path does one thing: when clipping explains two thirds of the
     * cases, a window matched by chance is clipping too. */
    if (3 * kinds[PROBE_DROP_CLIP] < 2 * nlost)
        return;
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (r->outcome == PROBE_DROPPED && !r->cached &&
            r->drop == PROBE_DROP_WINDOW &&
            clip_fit(&r->shape, r->prompt_tokens) >= 0) {
            r->drop = PROBE_DROP_CLIP;
            r->drop_turns = 0;
        }
    }
}
