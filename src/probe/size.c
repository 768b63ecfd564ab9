/*
 * size: makes a case as long as its target in the server's own tokens.
 * With /tokenize the filler budget is found by the secant method on
 * (filler bytes, tokens), which is linear up to a few tokens, so two or
 * three counts land within [0.98 x target, target]; without it, at most
 * three chat requests (max_tokens 1) fit tokens = a + b x units (word
 * pieces and punctuation, see units_of) from usage.prompt_tokens, and cases
 * are sized by that line.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_int.h"

#define BYTES_PER_TOKEN 3.5
#define MAX_COUNTS 6

static double aim_of(unsigned target)
{
    return target - fmax(1.0, target * 0.006);
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

/* Units of one text: word pieces (a run of letters and digits, one per 4
 * bytes begun, taking one space before it along), punctuation bytes, and
 * the other whitespace bytes. */
double probe_text_units(const char *p)
{
    /* 1: letter or digit. A table, not isalnum(): this runs over every
     * byte of a case. */
    static unsigned char al[256];
    static volatile int ready;
    if (!ready) {
        for (int i = 0; i < 256; i++)
            al[i] = (unsigned char)((i >= '0' && i <= '9') ||
                                    (i >= 'a' && i <= 'z') ||
                                    (i >= 'A' && i <= 'Z'));
        ready = 1;
    }
    double u = 0;
    if (!p)
        return 0;
    const unsigned char *q = (const unsigned char *)p;
    while (*q) {
        if (al[*q] || (*q == ' ' && al[q[1]])) {
            size_t run = 0;
            q += *q == ' ';
            while (al[*q]) {
                run++;
                q++;
            }
            u += (double)((run + 3) / 4);
            continue;
        }
        u++;
        q++;
    }
    return u;
}

/* A tokenizer-free size of a case: probe_text_units of every text the template
 * renders plus a few units a message for its framing. Byte counts track
 * tokens badly across prose, code and JSON filler (0.45 to 0.6 tokens a
 * byte on the sim); this tracks them within about 1% there. */
static double units_of(const struct probe_case *pc)
{
    double u = 0;
    size_t i;
    json_t *m;
    json_array_foreach(pc->messages, i, m)
    {
        u += 4;
        u += probe_text_units(json_string_value(json_object_get(m, "content")));
        u += probe_text_units(
            json_string_value(json_object_get(m, "reasoning_content")));
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
        {
            json_t *f = json_object_get(tc, "function");
            u += 12;
            u +=
                probe_text_units(json_string_value(json_object_get(f, "name")));
            u += probe_text_units(
                json_string_value(json_object_get(f, "arguments")));
        }
    }
    return u;
}

/* The count that sizing steers by: probe's own (own.c), else the server's
 * count of the whole request, else the calibrated line. sh (may be NULL)
 * gets the case's shape when probe's own count is used. */
static int count(struct probe_endpoint *e, struct http_client *c,
                 const struct probe_case *pc, unsigned *t,
                 struct probe_shape *sh, struct diag *d)
{
    if (e->own_ready) {
        struct probe_shape tmp;
        struct probe_shape *s = sh ? sh : &tmp;
        int r = probe_own_count(e, c, pc, s, d);
        *t = s->total;
        return r;
    }
    if (sh)
        memset(sh, 0, sizeof(*sh));
    if (!e->has_tokenize && e->calibrated && sh)
        probe_own_estimate(e, pc, sh);
    if (e->has_tokenize)
        return probe_tokenize(e, c, pc->messages, pc->tools, pc->chars, t, d);
    double v = e->cal_a + e->cal_b * units_of(pc);
    *t = v > 0 ? (unsigned)lround(v) : 0;
    return 0;
}

/* Filler bytes that should bring the case's units to `want`: units are
 * linear in the filler up to line boundaries, so one trial build gives the
 * slope (no request). */
static size_t filler_for_units(const struct probe_spec *spec,
                               struct probe_case *pc, double u0, double want)
{
    double f1 = (want - u0) * 2.0;
    if (f1 <= 0)
        return 0;
    probe_case_build(pc, spec, clamp_filler(f1));
    double u1 = units_of(pc);
    if (u1 <= u0)
        return clamp_filler(f1);
    return clamp_filler((want - u0) * f1 / (u1 - u0));
}

int probe_size_case(struct probe_endpoint *e, struct http_client *c,
                    const struct probe_spec *spec, struct probe_case *pc,
                    unsigned *tokens, struct probe_shape *shape, struct diag *d)
{
    struct probe_shape cur, best_sh;
    /* The calibrated line misses by about 1%: aim lower so that a case
     * stays under its target. */
    double aim = e->has_tokenize ? aim_of(spec->target) : spec->target * 0.985;
    double lo = e->has_tokenize ? 0.99 : 0.97;
    double f0 = 0, f1;
    unsigned t0, t1;
    size_t best_f = 0;
    unsigned best_t = 0;
    int r;

    probe_case_build(pc, spec, 0);
    r = count(e, c, pc, &t0, &cur, d);
    if (r)
        return r;
    best_t = t0;
    best_sh = cur;
    if (t0 >= aim) {
        *tokens = t0;
        if (shape)
            *shape = cur;
        return 0;
    }
    /* First guess from units: the filler's tokens per unit were measured
     * once for this endpoint (probe_size_prepare). */
    double u0 = units_of(pc);
    double k = e->tok_per_unit > 0 ? e->tok_per_unit : 1;
    f1 = (double)filler_for_units(spec, pc, u0, u0 + (aim - t0) / k);
    for (int i = 1; i < MAX_COUNTS; i++) {
        probe_case_build(pc, spec, clamp_filler(f1));
        r = count(e, c, pc, &t1, &cur, d);
        if (r)
            return r;
        if (t1 <= spec->target && t1 >= spec->target * lo) {
            *tokens = t1;
            if (shape)
                *shape = cur;
            return 0;
        }
        if ((t1 <= spec->target && (best_t > spec->target || t1 > best_t)) ||
            (best_t > spec->target && t1 < best_t)) {
            best_t = t1;
            best_f = clamp_filler(f1);
            best_sh = cur;
        }
        double slope =
            t1 != t0 ? (f1 - f0) / ((double)t1 - t0) : BYTES_PER_TOKEN;
        if (slope <= 0 || slope > 64)
            slope = BYTES_PER_TOKEN;
        double next = f1 + (aim - t1) * slope;
        f0 = f1;
        t0 = t1;
        f1 = next;
    }
    probe_case_build(pc, spec, best_f);
    *tokens = best_t;
    if (shape)
        *shape = best_sh;
    return 0;
}

int probe_size_prepare(struct probe_endpoint *e, struct http_client *c,
                       struct diag *d)
{
    struct probe_spec s = {.kind = PROBE_NEEDLE,
                           .length = 8192,
                           .target = 8192,
                           .depth = 50,
                           .seed = 0x5eed};
    struct probe_case pc;
    unsigned t0, t1;
    memset(&pc, 0, sizeof(pc));
    e->tok_per_unit = 0;
    if (!e->has_tokenize)
        return 0;
    probe_case_build(&pc, &s, 0);
    double u0 = units_of(&pc);
    int r = count(e, c, &pc, &t0, NULL, d);
    probe_case_build(&pc, &s, 20000);
    double u1 = units_of(&pc);
    if (!r)
        r = count(e, c, &pc, &t1, NULL, d);
    if (!r && u1 > u0 && t1 > t0)
        e->tok_per_unit = (t1 - t0) / (u1 - u0);
    probe_case_release(&pc);
    return r;
}

int probe_count_case(struct probe_endpoint *e, struct http_client *c,
                     const struct probe_case *pc, unsigned *tokens,
                     struct probe_shape *shape, struct diag *d)
{
    return count(e, c, pc, tokens, shape, d);
}

/* A calibration request: one short system message and one user message
 * of `bytes` of filler, a single turn, so that a path that keeps the last
 * turns, drops the oldest or compacts leaves it as it is. */
static void calibration_case(struct probe_case *pc, size_t bytes, uint64_t seed)
{
    struct buf b = BUF_INIT;
    probe_case_release(pc);
    memset(pc, 0, sizeof(*pc));
    for (int src = 0; src < FILLER_NSOURCES; src++)
        probe_filler(&b, (enum probe_filler)src, seed + (uint64_t)src,
                     bytes / FILLER_NSOURCES);
    pc->messages = json_pack("[{s:s, s:s}, {s:s, s:s%}]", "role", "system",
                             "content", "You are a helpful assistant.", "role",
                             "user", "content", b.data ? b.data : "", b.len);
    pc->chars = b.len + 28;
    pc->spec.seed = seed;
    buf_release(&b);
}

/* One calibration sample of `bytes` of filler: *x its units, *y the
 * server's usage.prompt_tokens. */
static int cal_sample(struct probe_endpoint *e, struct http_client *c,
                      struct probe_case *pc, size_t bytes, uint64_t seed,
                      double *x, double *y, struct diag *d)
{
    struct probe_reply rep;
    calibration_case(pc, bytes, seed);
    int r = probe_chat(e, c, pc, 1, &rep, NULL);
    if (r || rep.prompt_tokens <= 0) {
        r = r ? r : -EPROTO;
        diag_set(d, -r, "cannot calibrate token counts: %s",
                 rep.prompt_tokens <= 0 && !rep.error[0]
                     ? "the answer has no usage.prompt_tokens"
                     : rep.error);
        probe_reply_release(&rep);
        return r;
    }
    *x = units_of(pc);
    *y = (double)rep.prompt_tokens;
    probe_reply_release(&rep);
    return 0;
}

/* The first sample (of n, ascending) that came back short: from the one
 * before it, its count grew by under half the tokens per unit that one
 * holds (a path that clips long messages, or a server that truncates,
 * keeps a longer sample no longer); n when none. */
static size_t first_short(const double *x, const double *y, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        double k = y[i - 1] / x[i - 1];
        if (x[i] > x[i - 1] && (y[i] - y[i - 1]) / (x[i] - x[i - 1]) < 0.5 * k)
            return i;
    }
    return n;
}

/* The bytes of the user message of a calibration case pc that, kept
 * alone, leave the case `units` units (bisection on the prefix); at
 * least 1. */
static unsigned kept_prefix(const struct probe_case *pc, double units)
{
    json_t *m = json_array_get(pc->messages, 1);
    const char *text = json_string_value(json_object_get(m, "content"));
    size_t len = text ? strlen(text) : 0, lo = 0, hi = len;
    double rest = units_of(pc) - probe_text_units(text);
    char *p = malloc(len + 1);
    if (!p)
        return 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        memcpy(p, text, mid);
        p[mid] = 0;
        if (rest + probe_text_units(p) < units)
            lo = mid + 1;
        else
            hi = mid;
    }
    free(p);
    return lo ? (unsigned)lo : 1;
}

#define CAL_MAX 5

int probe_calibrate(struct probe_endpoint *e, struct http_client *c,
                    struct diag *d)
{
    double x[CAL_MAX], y[CAL_MAX];
    size_t bytes[CAL_MAX], n = 0;
    uint64_t seeds[CAL_MAX];
    unsigned cap = e->max_model_len ? e->max_model_len : 8192;
    static const size_t sizes[3] = {1000, 6000, 20000};
    /* below the first size, when the longer samples came back short */
    static const size_t smaller[2] = {250, 500};
    struct probe_case pc;
    int r = 0;
    memset(&pc, 0, sizeof(pc));
    e->cal_clip = 0;
    e->cal_clip_tokens = 0;

    for (size_t i = 0; i < 3 && !r; i++) {
        if (i && sizes[i] / 3 > cap / 2)
            break;
        bytes[n] = sizes[i];
        seeds[n] = 0xca11b8a7e + i;
        r = cal_sample(e, c, &pc, sizes[i], seeds[n], &x[n], &y[n], d);
        n += !r;
    }
    size_t ok = r ? n : first_short(x, y, n);
    if (!r && ok < 2 && ok < n) {
        /* the first sample alone stands before the bend: two smaller ones
         * in front of it, and the bend looked for again */
        double x2[CAL_MAX], y2[CAL_MAX];
        size_t b2[CAL_MAX], m = 0;
        uint64_t s2[CAL_MAX];
        for (size_t i = 0; i < 2 && !r; i++) {
            b2[m] = smaller[i];
            s2[m] = 0xca11b8a70 + i;
            r = cal_sample(e, c, &pc, smaller[i], s2[m], &x2[m], &y2[m], d);
            m += !r;
        }
        for (size_t i = 0; i < n && m < CAL_MAX; i++, m++) {
            x2[m] = x[i];
            y2[m] = y[i];
            b2[m] = bytes[i];
            s2[m] = seeds[i];
        }
        n = m;
        memcpy(x, x2, n * sizeof(*x));
        memcpy(y, y2, n * sizeof(*y));
        memcpy(bytes, b2, n * sizeof(*bytes));
        memcpy(seeds, s2, n * sizeof(*seeds));
        ok = r ? n : first_short(x, y, n);
    }
    if (r) {
        probe_case_release(&pc);
        return r;
    }
    if (ok < n && ok < 2) {
        probe_case_release(&pc);
        return diag_set(d, EPROTO,
                        "cannot calibrate token counts: samples of %zu and "
                        "%zu bytes came back at %.0f and %.0f tokens (the "
                        "path clips every message past a few hundred bytes, "
                        "or the server keeps no more)",
                        bytes[0], bytes[n - 1], y[0], y[n - 1]);
    }
    if (n < 2) {
        probe_case_release(&pc);
        return diag_set(d, EPROTO,
                        "cannot calibrate token counts: the "
                        "context is too small for two samples");
    }
    size_t all = n;
    n = ok;
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i] / (double)n;
        my += y[i] / (double)n;
    }
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    e->cal_b = sxx > 0 ? sxy / sxx : 1 / BYTES_PER_TOKEN;
    if (e->cal_b <= 0)
        e->cal_b = 1 / BYTES_PER_TOKEN;
    e->cal_a = my - e->cal_b * mx;
    /* the fit's worst miss on the samples it was fitted to */
    e->cal_err = 0;
    for (size_t i = 0; i < n; i++)
        e->cal_err = fmax(e->cal_err, fabs(e->cal_a + e->cal_b * x[i] - y[i]));
    /* A sample that came back short: the line says how many bytes of its
     * message were kept (the prefix of its text whose units give its
     * count). */
    if (ok < all) {
        calibration_case(&pc, bytes[ok], seeds[ok]);
        e->cal_clip = kept_prefix(&pc, (y[ok] - e->cal_a) / e->cal_b);
        e->cal_clip_tokens = (unsigned)lround(y[ok]);
    }
    probe_case_release(&pc);
    e->calibrated = true;
    return 0;
}

/* Each message's units, as units_of counts them. */
static double msg_units(json_t *m)
{
    double u = 4;
    u += probe_text_units(json_string_value(json_object_get(m, "content")));
    u += probe_text_units(
        json_string_value(json_object_get(m, "reasoning_content")));
    size_t k;
    json_t *tc;
    json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
    {
        json_t *f = json_object_get(tc, "function");
        u += 12;
        u += probe_text_units(json_string_value(json_object_get(f, "name")));
        u += probe_text_units(
            json_string_value(json_object_get(f, "arguments")));
    }
    return u;
}

void probe_own_estimate(const struct probe_endpoint *e,
                        const struct probe_case *pc, struct probe_shape *sh)
{
    size_t i;
    json_t *m;
    unsigned turn = 0;
    double total = e->cal_a;
    memset(sh, 0, sizeof(*sh));
    json_array_foreach(pc->messages, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *ct = json_string_value(json_object_get(m, "content"));
        size_t j = i < PROBE_MAX_MSGS ? i : PROBE_MAX_MSGS - 1;
        double t = e->cal_b * msg_units(m);
        const char *rs =
            json_string_value(json_object_get(m, "reasoning_content"));
        sh->reason[j] += (unsigned)lround(e->cal_b * probe_text_units(rs));
        if (role && !strcmp(role, "user"))
            turn++;
        sh->tok[j] += (unsigned)lround(t);
        sh->bytes[j] += ct ? (unsigned)strlen(ct) : 0;
        sh->turn[j] = (unsigned char)(turn < 255 ? turn : 255);
        sh->n = (unsigned)j + 1;
        total += t;
    }
    sh->turns = turn;
    sh->total = total > 0 ? (unsigned)lround(total) : 0;
    /* the line misses by about 1% on the sim, more elsewhere */
    sh->err = e->cal_err + 0.03 * total;
    sh->estimated = true;
    sh->frame = e->cal_a > 0 ? (unsigned)lround(e->cal_a) : 0;
    sh->clip_seen = e->cal_clip;
}
