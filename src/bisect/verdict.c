/*
 * bisect/verdict: one configuration's verdict from drift's and probe's JSON
 * (schemas in docs/DRIFT.md and docs/PROBE.md). Harm is the candidate's KL
 * mean over the golden minus the control arm's (golden against itself);
 * the recall change is probe's pass-rate difference with Newcombe's hybrid
 * Wilson interval (Newcombe 1998, method 10) and its exact McNemar p.
 */
#include "bisect/verdict.h"

#include <math.h>
#include <string.h>

#include "core/stats.h"

static double num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(const json_t *o, const char *k, const char *def)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : def;
}

static void attribute(const json_t *d, struct bisect_verdict *v);
static void attribute_cache(const json_t *d, struct bisect_verdict *v);

/* drift's own harm scalar and attribution, when its summary has them:
 * "harm": {"excess_kl_mean", "lo", "hi", "flips_per_1k"} and
 * "attribution": {"kind": prefill, decode, both-flat, both-growing, none,
 * not-run}. They replace the figures derived above. */
static void from_drift_harm(const json_t *d, struct bisect_verdict *v)
{
    const json_t *h = json_object_get(d, "harm");
    if (json_is_number(json_object_get(h, "excess_kl_mean"))) {
        v->harm = num(h, "excess_kl_mean");
        v->harm_lo = num(h, "lo");
        v->harm_hi = num(h, "hi");
        if (json_is_number(json_object_get(h, "flips_per_1k")))
            v->flips_per_1k = num(h, "flips_per_1k");
    }
    const char *k = str(json_object_get(d, "attribution"), "kind", NULL);
    static const struct {
        const char *kind, *words;
        enum bisect_path p;
    } kinds[] = {
        {"prefill", "prefill only", BISECT_PATH_PREFILL},
        {"decode", "decode only", BISECT_PATH_DECODE},
        {"both-flat", "both flat", BISECT_PATH_BOTH},
        {"both-growing", "both growing", BISECT_PATH_BOTH},
        {"none", "none", BISECT_PATH_UNKNOWN},
    };
    for (size_t i = 0; k && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (!strcmp(k, kinds[i].kind)) {
            v->attribution = kinds[i].words;
            v->measured_path = kinds[i].p;
            v->path_known = kinds[i].p != BISECT_PATH_UNKNOWN;
        }
}

static void from_drift(const json_t *d, struct bisect_verdict *v)
{
    const json_t *tot = json_object_get(d, "total");
    const json_t *ctl = json_object_get(d, "control_total");
    double kl = num(tot, "kl_mean"), base = num(ctl, "kl_mean");
    v->harm = isnan(base) ? kl : fmax(0, kl - base);
    v->harm_lo = v->harm_hi = NAN;
    double flips = num(tot, "decisive_flips"), count = num(tot, "count");
    v->flips_per_1k = count > 0 ? 1000 * flips / count : NAN;
    v->drift_verdict = str(d, "verdict", "?");
    const json_t *th =
        json_object_get(json_object_get(d, "thresholds"), "kl_mean");
    v->warn_kl = json_number_value(json_array_get(th, 0));
    v->fail_kl = json_number_value(json_array_get(th, 1));
    if (!(v->warn_kl > 0))
        v->warn_kl = NAN;
    if (!(v->fail_kl > 0))
        v->fail_kl = NAN;
    v->growth = str(json_object_get(d, "growth"), "verdict", "?");
    v->identical_logprobs = num(tot, "kl_max") == 0 &&
                            num(tot, "dp_rms") == 0 &&
                            num(tot, "top1_agreement") == 1;
    attribute(d, v);
    from_drift_harm(d, v);
    attribute_cache(d, v);
}

static bool is_warn_or_fail(const char *s)
{
    return s && (!strcmp(s, "WARN") || !strcmp(s, "FAIL"));
}

/* A drift FAIL that rests on growth alone while no measured excess
 * reached the mean-KL WARN threshold (an older drift's growth rule): no
 * bucket, decode comparison or cache arm is WARN or FAIL, and growth's
 * peak excess is below WARN. It names no culprit. */
static bool growth_alone_below_warn(const json_t *d)
{
    const json_t *g = json_object_get(d, "growth");
    if (!is_warn_or_fail(str(g, "verdict", NULL)))
        return false;
    const json_t *bk = json_object_get(d, "buckets");
    for (size_t i = 0; i < json_array_size(bk); i++)
        if (is_warn_or_fail(str(json_array_get(bk, i), "verdict", NULL)))
            return false;
    const json_t *dec = json_object_get(d, "decode");
    static const char *const paths[] = {"prefill_vs_prefill",
                                        "decode_vs_golden_prefill"};
    for (size_t i = 0; i < 2; i++)
        if (is_warn_or_fail(
                str(json_object_get(dec, paths[i]), "verdict", NULL)))
            return false;
    const json_t *c = json_object_get(d, "cache");
    if (is_warn_or_fail(str(c, "verdict", NULL)) ||
        is_warn_or_fail(str(c, "evict_verdict", NULL)))
        return false;
    const json_t *th =
        json_object_get(json_object_get(d, "thresholds"), "kl_mean");
    double warn = json_number_value(json_array_get(th, 0));
    double peak = num(g, "peak_excess_kl");
    return warn > 0 && !isnan(peak) && peak < warn;
}

/* The candidate's decode steps are the golden's: nothing over the noise
 * against the golden's prefill, or (a real server, whose decode differs
 * from its prefill by rounding) the prefills equal and the candidate's
 * decode-vs-prefill gap the golden's own at every point, as its decode
 * against the golden's prefill. */
static bool decode_identical(const json_t *dec)
{
    if (!dec)
        return true;
    const json_t *dg = json_object_get(dec, "decode_vs_golden_prefill");
    const json_t *dp = json_object_get(dec, "decode_vs_prefill");
    if (num(json_object_get(dg, "excess"), "kl_max") == 0)
        return true;
    if (num(json_object_get(dec, "prefill_vs_prefill"), "kl_max") != 0 ||
        !(num(dg, "kl_mean") == num(dp, "kl_mean")) ||
        !(num(dg, "kl_max") == num(dp, "kl_max")))
        return false;
    const json_t *pts = json_object_get(dec, "points");
    if (!json_array_size(pts))
        return false;
    for (size_t i = 0; i < json_array_size(pts); i++) {
        const json_t *gap = json_object_get(json_array_get(pts, i), "gap");
        if (!(num(gap, "candidate") == num(gap, "golden")))
            return false;
    }
    return true;
}

/* Which path changed: prefill when a position bucket or the growth is
 * WARN or FAIL, decode when drift's decode attribution names the decode
 * path; in the words of drift's attribution (prefill only, decode only,
 * both flat, both growing, none). */
static void attribute(const json_t *d, struct bisect_verdict *v)
{
    const json_t *bk = json_object_get(d, "buckets");
    bool pre = is_warn_or_fail(v->growth);
    for (size_t i = 0; i < json_array_size(bk); i++)
        pre |= is_warn_or_fail(str(json_array_get(bk, i), "verdict", NULL));
    const json_t *dec = json_object_get(d, "decode");
    const char *a = str(dec, "attribution", "not run");
    bool deco = strstr(a, "decode") || strstr(a, "shared");
    v->decode_identical = decode_identical(dec);
    v->path_known = pre || deco;
    v->measured_path = pre && deco ? BISECT_PATH_BOTH
                       : pre       ? BISECT_PATH_PREFILL
                       : deco      ? BISECT_PATH_DECODE
                                   : BISECT_PATH_UNKNOWN;
    v->attribution = pre && deco ? (is_warn_or_fail(v->growth) ? "both growing"
                                                               : "both flat")
                     : pre       ? "prefill only"
                     : deco      ? "decode only"
                                 : "none";
}

/* A warm-path (or recomputed-path) difference from drift's cache arm,
 * when neither prefill nor decode is attributed. */
static void attribute_cache(const json_t *d, struct bisect_verdict *v)
{
    const char *a = str(json_object_get(d, "cache"), "attribution", "not run");
    if (strcmp(v->attribution, "none") || !strstr(a, "differ"))
        return;
    v->attribution = strstr(a, "warm") ? "warm path" : "recomputed path";
}

static void from_probe(const json_t *p, struct bisect_verdict *v)
{
    const json_t *r = json_object_get(p, "results");
    const json_t *b = json_object_get(p, "baseline_results");
    const json_t *o =
        json_object_get(json_object_get(p, "comparison"), "overall");
    double n1 = num(r, "cases"), k1 = num(r, "passed");
    double n2 = num(b, "cases"), k2 = num(b, "passed");
    v->cases = n1 > 0 ? (unsigned)n1 : 0;
    v->mcnemar_p = num(o, "p_value");
    v->pass_diff = v->diff_lo = v->diff_hi = NAN;
    if (n1 > 0 && n2 > 0) {
        double p1 = k1 / n1, p2 = k2 / n2, l1, u1, l2, u2;
        stats_wilson((unsigned)k1, (unsigned)n1, 1.96, &l1, &u1);
        stats_wilson((unsigned)k2, (unsigned)n2, 1.96, &l2, &u2);
        v->pass_diff = p1 - p2;
        v->diff_lo =
            v->pass_diff - sqrt((p1 - l1) * (p1 - l1) + (u2 - p2) * (u2 - p2));
        v->diff_hi =
            v->pass_diff + sqrt((u1 - p1) * (u1 - p1) + (p2 - l2) * (p2 - l2));
    }
    v->recall_worse =
        json_is_true(json_object_get(o, "significant")) && v->pass_diff < 0;
    /* identical answers: each case's reply equals the golden's */
    const json_t *ca = json_object_get(r, "case_results");
    const json_t *cb = json_object_get(b, "case_results");
    v->identical_answers =
        json_array_size(ca) > 0 && json_array_size(ca) == json_array_size(cb);
    for (size_t i = 0; v->identical_answers && i < json_array_size(ca); i++) {
        const char *x = str(json_array_get(ca, i), "reply", NULL);
        const char *y = str(json_array_get(cb, i), "reply", NULL);
        v->identical_answers = x && y && !strcmp(x, y);
    }
}

/* The harm, its interval's upper end where there is one, is below the
 * mean-KL WARN threshold: a FAIL on other figures names no culprit. */
static bool harm_below_warn(const struct bisect_verdict *v)
{
    double top = isnan(v->harm_hi) ? v->harm : v->harm_hi;
    return !isnan(v->warn_kl) && !isnan(top) && top < v->warn_kl;
}

static void verdict(const json_t *drift, const json_t *probe, bool drift_only,
                    struct bisect_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->harm = v->harm_lo = v->harm_hi = v->flips_per_1k = NAN;
    v->warn_kl = v->fail_kl = NAN;
    v->pass_diff = v->diff_lo = v->diff_hi = v->mcnemar_p = NAN;
    v->drift_verdict = v->growth = "?";
    v->attribution = "not measured";
    if (!drift || (!probe && !drift_only))
        return;
    v->measured = true;
    from_drift(drift, v);
    v->recall_measured = !drift_only;
    if (!drift_only)
        from_probe(probe, v);
    bool fail = !strcmp(v->drift_verdict, "FAIL");
    if (fail && growth_alone_below_warn(drift)) {
        fail = false;
        v->undecided = true;
        v->why_undecided = "drift's FAIL rests on growth alone, with the "
                           "measured excess below WARN";
    } else if (fail && harm_below_warn(v)) {
        fail = false;
        v->undecided = true;
        v->why_undecided = "drift FAILs, but its harm stays below the "
                           "mean-KL WARN threshold";
    } else if (!strcmp(v->drift_verdict, "INCONCLUSIVE")) {
        v->undecided = true;
        v->why_undecided = "drift INCONCLUSIVE: the evidence could not decide";
    }
    v->harmful = fail || v->recall_worse;
    if (v->harmful)
        v->undecided = false;
    v->inert = !v->harmful && !v->undecided && v->identical_logprobs &&
               v->decode_identical && (drift_only || v->identical_answers);
}

void bisect_verdict_from(const json_t *drift, const json_t *probe,
                         struct bisect_verdict *v)
{
    verdict(drift, probe, false, v);
}

void bisect_verdict_of(const json_t *doc, struct bisect_verdict *v)
{
    const char *r = str(doc, "recall", "");
    verdict(json_object_get(doc, "drift"), json_object_get(doc, "probe"),
            !strcmp(r, "not measured"), v);
}

bool bisect_path_mismatch(enum bisect_path claimed,
                          const struct bisect_verdict *v)
{
    if (claimed == BISECT_PATH_UNKNOWN || !v->path_known)
        return false;
    return claimed != v->measured_path;
}
