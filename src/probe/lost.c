/*
 * lost: what became of the context that did not reach the model. A case
 * is lost context when usage.prompt_tokens is under probe's own count
 * (own.c) by more than that count's error, however small the loss: every
 * such case gets the path check before any class is given. Across the
 * cases of a run, a server that truncates keeps the same number of tokens
 * whatever was sent (its context length or a fixed limit), and the path's
 * own count of the request (when it has one) says the request reached it
 * whole: truncated-by-server. Anything else was dropped before the model,
 * and the kind is named from what was lost, never from the failure:
 *
 * - reasoning: the loss is the reasoning fields of the earlier replies;
 * - window: it is a run of whole messages, none replaced: from the oldest
 *   (the first message after the system prompt), the middle, or the
 *   newest (up to the message before the question);
 * - summary: a run of whole messages replaced by a short text (compaction);
 * - clipping: long messages shortened inside: across cases one byte cap
 *   explains the counts, or /tokenize itself counted probe's pieces short
 *   of what their bytes hold (a path that clips the sizing requests too);
 * - unknown: nothing above explains the count, or the count is the
 *   calibrated line's (no /tokenize), too coarse to tell a window from a
 *   summary. By that line a drop is named clipping only when the
 *   calibration's own long samples came back short and a byte cap near
 *   the one they kept explains the count.
 *
 * Where runs of equal tokens could stand at several places, the oldest is
 * taken: the counts say how much was lost, not which of equal turns.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "probe/probe_int.h"

const char *probe_drop_name(int drop)
{
    static const char *const names[PROBE_DROP_COUNT] = {
        [PROBE_DROP_NONE] = "",
        [PROBE_DROP_WINDOW] = "window",
        [PROBE_DROP_SUMMARY] = "summary",
        [PROBE_DROP_CLIP] = "clipping",
        [PROBE_DROP_REASONING] = "reasoning",
        [PROBE_DROP_UNKNOWN] = "unknown",
    };
    return drop >= 0 && drop < PROBE_DROP_COUNT ? names[drop] : "";
}

const char *probe_drop_at_name(int at)
{
    static const char *const names[] = {
        [PROBE_AT_NONE] = "",
        [PROBE_AT_OLDEST] = "oldest",
        [PROBE_AT_MIDDLE] = "middle",
        [PROBE_AT_NEWEST] = "newest",
    };
    return at >= 0 && at <= PROBE_AT_NEWEST ? names[at] : "";
}

/* How far a count may miss: the turns were counted one by one
 * (probe_own_turns), so to the count's own error. */
static double window_tol(const struct probe_shape *sh)
{
    return fmax(3, 2 * sh->err + 0.002 * sh->total);
}

bool probe_is_lost(long reached, const struct probe_shape *sh)
{
    return sh->total && reached >= 0 &&
           (double)reached < (double)sh->total - window_tol(sh);
}

/* Short of the count by more than its error per message, not by the
 * share of the whole that lost context needs (0.2%, 65 tokens at 32k):
 * the loss of one short message. Only a run of messages that explains
 * it exactly makes such a failure lost context. */
static bool is_short(long reached, const struct probe_shape *sh)
{
    return sh->total && reached >= 0 && !sh->estimated &&
           (double)reached < (double)sh->total - fmax(3, 2 * sh->err);
}

bool probe_loss_not_ruled_out(const struct probe_result *r)
{
    return r->done && r->outcome == PROBE_MISSED && r->have_shape &&
           r->shape.total &&
           (r->shape.estimated || is_short(r->prompt_tokens, &r->shape));
}

bool probe_path_check_due(long reached, const struct probe_shape *sh,
                          bool failed)
{
    return probe_is_lost(reached, sh) || (failed && is_short(reached, sh));
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

/* By the calibrated line (no /tokenize): clipping only when the
 * calibration's own samples came back short (clip_seen) and a byte cap
 * within a factor of two of the one they kept explains the count (the
 * line's 3% a message, and the one sample's filler against a case's mix,
 * move either estimate by a third). */
static bool clip_seen_fits(const struct probe_shape *sh, long reached)
{
    if (!sh->clip_seen)
        return false;
    double c = clip_fit(sh, reached);
    if (c >= 0 && c >= 0.5 * sh->clip_seen && c <= 2.0 * sh->clip_seen)
        return true;
    /* a loss within the line's error: the count that cap leaves is
     * nearer than the count sent */
    double cut = clipped_to(sh, sh->clip_seen);
    return cut < sh->total - 3 && reached < sh->total &&
           fabs((double)reached - cut) < (double)sh->total - (double)reached;
}

/* Tokens of messages a..b of sh. */
static double run_tok(const struct probe_shape *sh, unsigned a, unsigned b)
{
    double t = 0;
    for (unsigned j = a; j <= b && j < sh->n; j++)
        t += sh->tok[j];
    return t;
}

/* The first message after the system prompt (turn 0). */
static unsigned first_msg(const struct probe_shape *sh)
{
    unsigned j = 0;
    while (j < sh->n && sh->turn[j] == 0)
        j++;
    return j;
}

/* Records the run a..b as the drop of r. */
static int took(struct probe_result *r, int kind, unsigned a, unsigned b)
{
    const struct probe_shape *sh = &r->shape;
    unsigned turns = 0;
    for (unsigned j = a; j <= b; j++)
        turns += j == 0 || sh->turn[j] != sh->turn[j - 1];
    r->drop_turns = turns;
    r->drop_msgs = b - a + 1;
    r->drop_at = a == first_msg(sh) ? PROBE_AT_OLDEST
                 : b + 2 == sh->n   ? PROBE_AT_NEWEST
                                    : PROBE_AT_MIDDLE;
    return kind;
}

/* How far the count left by dropping `gone` messages holding `run` tokens
 * may miss: the error of the messages kept, not of the whole count (the
 * turns were counted one by one, probe_own_turns), so that a summary of a
 * hundred tokens in place of 30k is not taken for nothing. */
static double kept_tol(const struct probe_shape *sh, unsigned gone, double run)
{
    double base = fmax(0, sh->err - sh->msg_err * sh->n);
    double kept = fmax(0, (double)sh->total - run);
    unsigned n = sh->n > gone ? sh->n - gone : 0;
    return fmax(3, 2 * (base + sh->msg_err * n) + 0.002 * kept);
}

/* A run of whole messages a..b (never the system prompt, never the last
 * message: the question) whose loss leaves the count: exactly (window,
 * within tol) or replaced by a text of at most extra_max tokens (summary).
 * Runs from `from` only; oldest_only: starting at the first message. */
static bool find_run(const struct probe_shape *sh, double loss,
                     double extra_max, bool summary, bool oldest_only,
                     unsigned *ra, unsigned *rb)
{
    unsigned s0 = first_msg(sh);
    if (sh->n < 2 || s0 + 1 >= sh->n)
        return false;
    for (unsigned a = s0; a + 1 < sh->n; a++) {
        double best = -1; /* a window: the closest of the runs from a */
        for (unsigned b = a; b + 1 < sh->n; b++) {
            double run = run_tok(sh, a, b), d = run - loss;
            double tol = kept_tol(sh, b - a + 1, run);
            bool hit = summary ? d > tol && d <= extra_max : fabs(d) <= tol;
            if (hit && (summary || best < 0 || fabs(d) < best)) {
                *ra = a;
                *rb = b;
                best = fabs(d);
                if (summary)
                    return true;
            }
            if (d > (summary ? extra_max : tol))
                break;
        }
        if (best >= 0)
            return true;
        if (oldest_only)
            break;
    }
    return false;
}

/* True when a run of whole messages from the oldest leaves exactly
 * reached. */
static bool window_of(const struct probe_shape *sh, long reached)
{
    unsigned a, b;
    return find_run(sh, (double)sh->total - (double)reached, 0, false, true, &a,
                    &b);
}

/* The runs from the oldest that explain one case's count. */
struct fit {
    bool window, summary;
    unsigned wa, wb, sa, sb;
};

/* The kind of one case's drop from its own count: reasoning, window or
 * summary; UNKNOWN otherwise (clipping is decided across cases by the
 * caller). f gets the runs from the oldest that fit, so that the caller
 * can settle a case both a window and a summary explain. */
static int one_shape(struct probe_result *r, struct fit *f)
{
    const struct probe_shape *sh = &r->shape;
    double reached = (double)r->prompt_tokens;
    double tol = window_tol(sh);
    double loss = (double)sh->total - reached;
    memset(f, 0, sizeof(*f));
    r->drop_turns = r->drop_msgs = 0;
    r->drop_at = PROBE_AT_NONE;
    if (sh->pieces_short)
        return PROBE_DROP_CLIP;
    double reason = 0;
    for (unsigned j = 0; j < sh->n; j++)
        reason += sh->reason[j];
    if (reason > tol && fabs(loss - reason) <= tol)
        return PROBE_DROP_REASONING;
    if (sh->estimated)
        return clip_seen_fits(sh, r->prompt_tokens) ? PROBE_DROP_CLIP
                                                    : PROBE_DROP_UNKNOWN;
    double mean_turn = sh->turns ? turns_upto(sh, sh->turns) / sh->turns : 0;
    double extra_max = fmax(600, 0.5 * mean_turn);
    unsigned a, b;
    /* a summary stands for its run and costs the difference */
    f->window = find_run(sh, loss, extra_max, false, true, &f->wa, &f->wb);
    f->summary = find_run(sh, loss, extra_max, true, true, &f->sa, &f->sb);
    if (f->window)
        return took(r, PROBE_DROP_WINDOW, f->wa, f->wb);
    if (f->summary)
        return took(r, PROBE_DROP_SUMMARY, f->sa, f->sb);
    if (find_run(sh, loss, extra_max, false, false, &a, &b))
        return took(r, PROBE_DROP_WINDOW, a, b);
    return PROBE_DROP_UNKNOWN;
}

/* A case both a window and a summary from the oldest explain (a kept
 * message the size of a summary) takes the kind the other cases of the
 * run show alone: one path does one thing. Window when they show none. */
static void settle(struct probe_result *res, const struct fit *fits, size_t n)
{
    size_t wonly = 0, sonly = 0;
    for (size_t i = 0; i < n; i++) {
        wonly += fits[i].window && !fits[i].summary;
        sonly += fits[i].summary && !fits[i].window;
    }
    if (!sonly || wonly)
        return;
    for (size_t i = 0; i < n; i++)
        if (fits[i].window && fits[i].summary &&
            res[i].outcome == PROBE_DROPPED)
            res[i].drop =
                took(&res[i], PROBE_DROP_SUMMARY, fits[i].sa, fits[i].sb);
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
        windows +=
            r->have_shape && !r->shape.estimated && window_of(&r->shape, v);
        nl++;
    }
    /* every count is exactly some front turns gone: a window that keeps
     * the same number of tokens, not a cap (the calibrated line is too
     * coarse to say a count is exactly that) */
    if (!nl || windows == nl)
        return false;
    double band = fmax(4, 0.003 * (double)hi);
    if (model_len && hi >= 0.98 * model_len)
        return true;
    return nl >= 2 && (double)(hi - lo) <= band && (double)(ohi - olo) > band;
}

/* Clipping, not a run of messages: the kind and its run forgotten. */
static void as_clip(struct probe_result *r)
{
    r->drop = PROBE_DROP_CLIP;
    r->drop_turns = r->drop_msgs = 0;
    r->drop_at = PROBE_AT_NONE;
}

/* Failures short of the count by less than lost context needs but more
 * than its error per message (a first message of 30 tokens at 8k): lost
 * context dropped before the model when a run of whole messages or the
 * reasoning fields explain the count exactly; as they were otherwise. */
static void small_losses(struct probe_result *res, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (!r->done || r->cached || r->lost || !r->have_shape ||
            (r->outcome != PROBE_MISSED && r->outcome != PROBE_CLIPPED &&
             r->outcome != PROBE_TRUNCATED))
            continue;
        /* by the calibrated line, a failure short of it is clipping when
         * the calibration saw the path clip and its cap explains it */
        if (r->shape.estimated && clip_seen_fits(&r->shape, r->prompt_tokens)) {
            r->outcome = PROBE_DROPPED;
            r->lost = true;
            r->drop_ratio = (double)r->prompt_tokens / r->shape.total;
            as_clip(r);
            continue;
        }
        if (!is_short(r->prompt_tokens, &r->shape))
            continue;
        struct fit f;
        int kind = one_shape(r, &f);
        if (kind == PROBE_DROP_WINDOW || kind == PROBE_DROP_SUMMARY ||
            kind == PROBE_DROP_REASONING) {
            r->outcome = PROBE_DROPPED;
            r->drop = kind;
            r->lost = true;
            r->drop_ratio = (double)r->prompt_tokens / r->shape.total;
        } else {
            r->drop = PROBE_DROP_NONE;
            r->drop_turns = r->drop_msgs = 0;
            r->drop_at = PROBE_AT_NONE;
        }
    }
}

void probe_lost_classify(const struct probe_spec *specs,
                         struct probe_result *res, size_t n, unsigned model_len)
{
    (void)specs;
    bool cap = at_one_cap(res, n, model_len);
    struct fit *fits = xcalloc(n ? n : 1, sizeof(*fits));
    double cmin = -1, cmax = -1;
    unsigned nmin = 0, nmax = 0;
    size_t nclip = 0, kinds[PROBE_DROP_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (!r->done || r->cached || !r->lost || r->outcome != PROBE_TRUNCATED)
            continue;
        r->drop_ratio =
            r->shape.total ? (double)r->prompt_tokens / r->shape.total : 0;
        /* the server is blamed only for a request that reached it whole:
         * a path whose own count of it is short dropped the rest */
        bool whole =
            !r->path_tokens ||
            (double)r->path_tokens >= r->shape.total - window_tol(&r->shape);
        if (cap && whole)
            continue;
        r->outcome = PROBE_DROPPED;
        r->drop = one_shape(r, &fits[i]);
        if (r->drop == PROBE_DROP_WINDOW || r->drop == PROBE_DROP_REASONING ||
            r->shape.pieces_short || r->shape.estimated)
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
    settle(res, fits, n);
    free(fits);
    small_losses(res, n);
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (r->outcome != PROBE_DROPPED || r->cached)
            continue;
        if (clip && !r->shape.estimated &&
            (r->drop == PROBE_DROP_SUMMARY || r->drop == PROBE_DROP_UNKNOWN) &&
            clip_fit(&r->shape, r->prompt_tokens) >= 0)
            as_clip(r);
        kinds[r->drop]++;
    }
    /* One path does one thing: when clipping explains two thirds of the
     * dropped cases, a window matched by chance is clipping too (and
     * without a case of clipping, nothing is). */
    size_t ndrop = 0;
    for (int k = 0; k < PROBE_DROP_COUNT; k++)
        ndrop += kinds[k];
    if (!kinds[PROBE_DROP_CLIP] || 3 * kinds[PROBE_DROP_CLIP] < 2 * ndrop)
        return;
    for (size_t i = 0; i < n; i++) {
        struct probe_result *r = &res[i];
        if (r->outcome == PROBE_DROPPED && !r->cached &&
            r->drop == PROBE_DROP_WINDOW && !r->shape.estimated &&
            clip_fit(&r->shape, r->prompt_tokens) >= 0)
            as_clip(r);
    }
}
