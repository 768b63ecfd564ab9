/*
 * size: makes a case as long as its target in the server's own tokens.
 * With /tokenize the filler budget is found by the secant method on
 * (filler bytes, tokens), which is linear up to a few tokens, so two or
 * three counts land within [0.98 x target, target]; without it, at most
 * three chat requests (max_tokens 1) fit tokens = a + b x bytes from
 * usage.prompt_tokens, and cases are sized by that line.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "probe/probe.h"

#define BYTES_PER_TOKEN 3.5
#define MAX_COUNTS 6

static double aim_of(unsigned target)
{
    return target - fmax(1.0, target * 0.006);
}

static bool in_range(unsigned t, unsigned target)
{
    return t <= target && t >= target * 0.99;
}

size_t probe_filler_for(const struct probe_spec *spec)
{
    double over = 40.0 * probe_turns_for(spec->target) + 40;
    double f = (aim_of(spec->target) - over) * BYTES_PER_TOKEN;
    return f > 0 ? (size_t)f : 0;
}

static size_t clamp_filler(double f)
{
    return f > 0 ? (size_t)f : 0;
}

static int size_calibrated(struct probe_endpoint *e,
                           const struct probe_spec *spec,
                           struct probe_case *pc, unsigned *tokens)
{
    double aim = aim_of(spec->target);
    probe_case_build(pc, spec, 0);
    double chars0 = (double)pc->chars;
    double f = (aim - e->cal_a) / e->cal_b - chars0;
    probe_case_build(pc, spec, clamp_filler(f));
    double t = e->cal_a + e->cal_b * (double)pc->chars;
    *tokens = t > 0 ? (unsigned)lround(t) : 0;
    return 0;
}

int probe_size_case(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_spec *spec, struct probe_case *pc,
                    unsigned *tokens, struct diag *d)
{
    if (!e->has_tokenize)
        return size_calibrated(e, spec, pc, tokens);
    double aim = aim_of(spec->target);
    double f0 = 0, f1;
    unsigned t0, t1;
    size_t best_f = 0;
    unsigned best_t = 0;
    int r;

    probe_case_build(pc, spec, 0);
    r = probe_tokenize(e, c, pc->messages, pc->tools, &t0, d);
    if (r)
        return r;
    best_t = t0;
    if (t0 >= aim) {
        *tokens = t0;
        return 0;
    }
    f1 = (aim - t0) * BYTES_PER_TOKEN;
    for (int i = 1; i < MAX_COUNTS; i++) {
        probe_case_build(pc, spec, clamp_filler(f1));
        r = probe_tokenize(e, c, pc->messages, pc->tools, &t1, d);
        if (r)
            return r;
        if (in_range(t1, spec->target)) {
            *tokens = t1;
            return 0;
        }
        if ((t1 <= spec->target && (best_t > spec->target || t1 > best_t)) ||
            (best_t > spec->target && t1 < best_t)) {
            best_t = t1;
            best_f = clamp_filler(f1);
        }
        double slope = t1 != t0 ? (f1 - f0) / ((double)t1 - t0)
                                : BYTES_PER_TOKEN;
        if (slope <= 0 || slope > 64)
            slope = BYTES_PER_TOKEN;
        double next = f1 + (aim - t1) * slope;
        f0 = f1;
        t0 = t1;
        f1 = next;
    }
    probe_case_build(pc, spec, best_f);
    *tokens = best_t;
    return 0;
}

int probe_count_case(struct probe_endpoint *e, struct http_client *c,
                     const struct probe_case *pc, unsigned *tokens,
                     struct diag *d)
{
    if (e->has_tokenize)
        return probe_tokenize(e, c, pc->messages, pc->tools, tokens, d);
    double t = e->cal_a + e->cal_b * (double)pc->chars;
    *tokens = t > 0 ? (unsigned)lround(t) : 0;
    return 0;
}

int probe_calibrate(struct probe_endpoint *e, struct http_client *c,
                    struct diag *d)
{
    double x[3], y[3];
    size_t n = 0;
    unsigned cap = e->max_model_len ? e->max_model_len : 8192;
    size_t sizes[3] = {1000, 6000, 20000};
    struct probe_case pc;
    memset(&pc, 0, sizeof(pc));

    for (size_t i = 0; i < 3; i++) {
        if (i && sizes[i] / 3 > cap / 2)
            break;
        struct probe_spec s = {.kind = PROBE_NEEDLE, .length = 2048,
                               .target = 2048, .depth = 50,
                               .seed = 0xca11b8a7e + i};
        struct probe_reply rep;
        probe_case_build(&pc, &s, sizes[i]);
        int r = probe_chat(e, c, &pc, 1, &rep, NULL);
        if (r || rep.prompt_tokens <= 0) {
            r = r ? r : -EPROTO;
            diag_set(d, -r,
                     "cannot calibrate token counts: %s",
                     rep.prompt_tokens <= 0 && !rep.error[0]
                         ? "the answer has no usage.prompt_tokens"
                         : rep.error);
            probe_reply_release(&rep);
            probe_case_release(&pc);
            return r;
        }
        x[n] = (double)pc.chars;
        y[n] = (double)rep.prompt_tokens;
        n++;
        probe_reply_release(&rep);
    }
    probe_case_release(&pc);
    if (n < 2)
        return diag_set(d, EPROTO, "cannot calibrate token counts: the "
                                   "context is too small for two samples");
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i] / n;
        my += y[i] / n;
    }
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    e->cal_b = sxx > 0 ? sxy / sxx : 1 / BYTES_PER_TOKEN;
    if (e->cal_b <= 0)
        e->cal_b = 1 / BYTES_PER_TOKEN;
    e->cal_a = my - e->cal_b * mx;
    e->calibrated = true;
    return 0;
}
