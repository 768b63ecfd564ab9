/*
 * bisect/verdict: what one configuration's measurements say, read from the
 * JSON of `fidelity drift` (against the golden) and `fidelity probe` (with
 * the golden as baseline). bisect_verdict_from is the one place that reads
 * drift's figures, so a new drift field changes one function.
 */
#ifndef BISECT_VERDICT_H
#define BISECT_VERDICT_H

#include <jansson.h>
#include <stdbool.h>

#include "bisect/config.h"

struct bisect_verdict {
    bool measured;
    double harm, harm_lo, harm_hi; /* excess KL mean (NAN lo/hi: no interval) */
    double warn_kl, fail_kl;   /* drift's mean-KL thresholds (NAN: not given) */
    double flips_per_1k;       /* decisive top-1 flips per 1,000 tokens */
    const char *drift_verdict; /* PASS, INCONCLUSIVE, WARN, FAIL */
    const char *growth;        /* drift's growth verdict */
    enum bisect_path measured_path; /* from drift's decode attribution */
    bool path_known;
    const char *attribution; /* in words */
    bool identical_logprobs; /* every compared position bit-identical */
    bool decode_identical;   /* the decode path's too */
    bool recall_measured;    /* false: drift alone (a saved golden file) */
    unsigned cases;
    double pass_diff, diff_lo, diff_hi; /* candidate minus golden, 95 % */
    double mcnemar_p;
    bool identical_answers;
    bool recall_worse; /* significantly fewer passes than the golden */
    bool harmful;
    bool inert;
    /* neither harmful nor inert: drift could not decide (INCONCLUSIVE),
     * or its FAIL rests on growth alone with the excess below WARN, or
     * its harm's interval lies wholly below the mean-KL WARN threshold */
    bool undecided;
    const char *why_undecided; /* words, or NULL */
};

/* Fills v from the two documents (either may be NULL: not measured).
 * Harmful: recall significantly below the golden's (McNemar p < 0.05), or
 * drift FAIL with a harm that reaches the mean-KL WARN threshold (the
 * interval's upper end, or the figure without one), not a FAIL on a
 * growth rule alone at a level below WARN. */
void bisect_verdict_from(const json_t *drift, const json_t *probe,
                         struct bisect_verdict *v);

/* The verdict of a configuration's document (bisect.h): its drift and
 * probe, or, where bisect measured against a saved golden file (the
 * document's "recall" is "not measured"), its drift alone: no recall
 * figures, never recall_worse, and inert on bit-identical logprobs alone. */
void bisect_verdict_of(const json_t *doc, struct bisect_verdict *v);

/* Whether the measured path contradicts the claimed one (unknown claims
 * contradict nothing). */
bool bisect_path_mismatch(enum bisect_path claimed,
                          const struct bisect_verdict *v);

#endif
