/*
 * livereport: what live sessions found, per grid cell: the turn at which
 * recall first fails (median and range over the seeds; a session that
 * never fails counts as turns + 1), recall by question turn, the reasoning
 * and prompt growth by turn, McNemar's exact test of each cell against the
 * cell that breaks first (pairs: the same seed and question turn), and the
 * name of that cell. Text and JSON (docs/PROBE.md, "Live sessions").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"
#include "core/xalloc.h"
#include "probe/live.h"
#include "probe/probe_int.h"

static const struct probe_live_result *session(const struct probe_live_run *r,
                                               size_t c, unsigned k)
{
    return &r->res[c * r->plan->seeds + k];
}

void probe_live_cell_summary(const struct probe_live_run *r, size_t c,
                             struct probe_live_cellsum *s)
{
    const struct probe_live_plan *p = r->plan;
    double *v = xcalloc(p->seeds ? p->seeds : 1, sizeof(double));
    memset(s, 0, sizeof(*s));
    for (unsigned k = 0; k < p->seeds; k++) {
        const struct probe_live_result *x = session(r, c, k);
        if (!x->done)
            continue;
        double b = x->break_turn ? x->break_turn : p->turns + 1;
        v[s->sessions++] = b;
        s->broken += x->break_turn != 0;
        for (unsigned t = 0; t < x->n_turns; t++)
            if (x->turn[t].asked >= 0) {
                s->asked++;
                s->passed += x->turn[t].passed;
            }
    }
    s->break_median = stats_quantile_sort(v, s->sessions, 0.5);
    s->break_lo = s->sessions ? v[0] : NAN;
    s->break_hi = s->sessions ? v[s->sessions - 1] : NAN;
    free(v);
}

long probe_live_first_break(const struct probe_live_run *r)
{
    long best = -1;
    struct probe_live_cellsum b = {0}, s;
    for (size_t c = 0; c < r->plan->n_cells; c++) {
        probe_live_cell_summary(r, c, &s);
        if (!s.broken)
            continue;
        double rate = s.asked ? (double)s.passed / (double)s.asked : 0;
        double brate = b.asked ? (double)b.passed / (double)b.asked : 0;
        if (best < 0 || s.break_median < b.break_median ||
            (s.break_median == b.break_median &&
             (s.break_lo < b.break_lo ||
              (s.break_lo == b.break_lo && rate < brate)))) {
            best = (long)c;
            b = s;
        }
    }
    return best;
}

/* McNemar of cell a against cell b over the same seeds and question turns. */
static json_t *pairs(const struct probe_live_run *r, size_t a, size_t b)
{
    unsigned both = 0, only_a = 0, only_b = 0, neither = 0;
    for (unsigned k = 0; k < r->plan->seeds; k++) {
        const struct probe_live_result *x = session(r, a, k),
                                       *y = session(r, b, k);
        if (!x->done || !y->done)
            continue;
        for (unsigned t = 0; t < x->n_turns && t < y->n_turns; t++) {
            if (x->turn[t].asked < 0 || y->turn[t].asked < 0)
                continue;
            bool pa = x->turn[t].passed, pb = y->turn[t].passed;
            both += pa && pb;
            only_a += pa && !pb;
            only_b += !pa && pb;
            neither += !pa && !pb;
        }
    }
    double pv = stats_mcnemar_exact(only_a, only_b);
    return json_pack("{s:i,s:i,s:i,s:i,s:f,s:b}", "both_recall", both,
                     "this_only", only_a, "other_only", only_b, "neither",
                     neither, "p_value", pv, "significant", pv < 0.05);
}

static char *cell_name(const struct probe_live_cell *c)
{
    return xasprintf("%s%ssend-reasoning=%s", c->label, *c->label ? " " : "",
                     probe_sendr_name(c->sendr));
}

static double median_of(double *v, size_t n)
{
    return n ? stats_quantile_sort(v, n, 0.5) : 0;
}

static json_t *by_turn(const struct probe_live_run *r, size_t c)
{
    const struct probe_live_plan *p = r->plan;
    json_t *arr = json_array();
    double *rs = xcalloc(p->seeds, sizeof(double));
    double *pt = xcalloc(p->seeds, sizeof(double));
    for (unsigned t = 0; t < p->turns; t++) {
        size_t n = 0, np = 0, asked = 0, passed = 0;
        for (unsigned k = 0; k < p->seeds; k++) {
            const struct probe_live_result *x = session(r, c, k);
            if (!x->done || t >= x->n_turns)
                continue;
            rs[n++] = (double)x->turn[t].reasoning;
            if (x->turn[t].prompt_tokens >= 0)
                pt[np++] = (double)x->turn[t].prompt_tokens;
            if (x->turn[t].asked >= 0) {
                asked++;
                passed += x->turn[t].passed;
            }
        }
        if (!n)
            break;
        json_t *j = json_pack("{s:i,s:f,s:f}", "turn", (int)t + 1,
                              "reasoning_bytes_median", median_of(rs, n),
                              "prompt_tokens_median", median_of(pt, np));
        if (asked)
            json_object_set_new(j, "recall",
                                json_pack("{s:i,s:i,s:f}", "asked", (int)asked,
                                          "recalled", (int)passed, "rate",
                                          (double)passed / (double)asked));
        json_array_append_new(arr, j);
    }
    free(rs);
    free(pt);
    return arr;
}

json_t *probe_live_report_json(const struct probe_live_run *r)
{
    const struct probe_live_plan *p = r->plan;
    long first = probe_live_first_break(r);
    json_t *cells = json_array(), *sessions = json_array();
    for (size_t c = 0; c < p->n_cells; c++) {
        struct probe_live_cellsum s;
        probe_live_cell_summary(r, c, &s);
        char *name = cell_name(&p->cells[c]);
        json_t *j =
            json_pack("{s:s,s:O,s:s,s:i,s:i,s:i,s:i}", "cell", name, "vary",
                      (json_t *)p->cells[c].vary, "send_reasoning",
                      probe_sendr_name(p->cells[c].sendr), "sessions",
                      (int)p->seeds, "finished", (int)s.sessions, "broken",
                      (int)s.broken, "asked", (int)s.asked);
        free(name);
        json_object_set_new(j, "recalled", json_integer((json_int_t)s.passed));
        json_object_set_new(j, "break_turn",
                            s.sessions
                                ? json_pack("{s:f,s:f,s:f,s:i}", "median",
                                            s.break_median, "low", s.break_lo,
                                            "high", s.break_hi, "never",
                                            (int)(s.sessions - s.broken))
                                : json_null());
        json_object_set_new(j, "by_turn", by_turn(r, c));
        if (first >= 0 && (size_t)first != c)
            json_object_set_new(j, "vs_first", pairs(r, c, (size_t)first));
        json_array_append_new(cells, j);
        for (unsigned k = 0; k < p->seeds; k++) {
            const struct probe_live_result *x = session(r, c, k);
            json_t *sj = x->done ? probe_live_result_json(x)
                                 : json_pack("{s:s}", "outcome", "not-run");
            json_object_set_new(sj, "cell", json_integer((json_int_t)c));
            json_object_set_new(sj, "seed_index", json_integer(k));
            json_object_set_new(sj, "cached", json_boolean(x->cached));
            json_array_append_new(sessions, sj);
        }
    }
    json_t *fb = json_null();
    if (first >= 0) {
        struct probe_live_cellsum s;
        probe_live_cell_summary(r, (size_t)first, &s);
        char *name = cell_name(&p->cells[first]);
        fb = json_pack("{s:s,s:O,s:s,s:f}", "cell", name, "vary",
                       (json_t *)p->cells[first].vary, "send_reasoning",
                       probe_sendr_name(p->cells[first].sendr), "median_turn",
                       s.break_median);
        free(name);
    }
    json_t *cmp = json_array();
    for (size_t a = 0; a < p->n_cells; a++)
        for (size_t b = a + 1; b < p->n_cells; b++) {
            json_t *pj = pairs(r, a, b);
            json_object_set_new(pj, "cell", json_integer((json_int_t)a));
            json_object_set_new(pj, "other", json_integer((json_int_t)b));
            json_array_append_new(cmp, pj);
        }
    json_t *ask = json_array();
    for (size_t i = 0; i < p->n_ask; i++)
        json_array_append_new(ask, json_integer(p->ask[i]));
    return json_pack("{s:s,s:o,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:b}", "format",
                     "fidelity-probe-live/1", "endpoint",
                     probe_endpoint_json(r->ep), "turns", (int)p->turns,
                     "seeds", (int)p->seeds, "question_turns", ask, "cells",
                     cells, "first_break", fb, "comparisons", cmp, "sessions",
                     sessions, "interrupted", r->interrupted);
}

void probe_live_report_text(const struct probe_live_run *r, FILE *out)
{
    const struct probe_live_plan *p = r->plan;
    long first = probe_live_first_break(r);
    fprintf(out, "\nlive sessions: %u turns, %u seed%s a cell, questions at",
            p->turns, p->seeds, p->seeds == 1 ? "" : "s");
    for (size_t i = 0; i < p->n_ask; i++)
        fprintf(out, "%s%u", i ? "," : " ", p->ask[i]);
    fprintf(out, "\n\n  %-52s %7s %11s %8s  recall by question turn\n", "cell",
            "breaks", "range", "recall");
    for (size_t c = 0; c < p->n_cells; c++) {
        struct probe_live_cellsum s;
        probe_live_cell_summary(r, c, &s);
        char *name = cell_name(&p->cells[c]);
        char brk[16] = "-", rng[24] = "-";
        if (s.broken && s.break_median <= p->turns)
            snprintf(brk, sizeof(brk), "%.0f", s.break_median);
        else if (s.sessions)
            snprintf(brk, sizeof(brk), "never");
        if (s.broken)
            snprintf(rng, sizeof(rng), "%.0f-%s", s.break_lo,
                     s.break_hi > p->turns ? "never" : "");
        if (s.broken && s.break_hi <= p->turns)
            snprintf(rng, sizeof(rng), "%.0f-%.0f", s.break_lo, s.break_hi);
        fprintf(out, "  %-52s %7s %11s %7.0f%% ", name, brk, rng,
                s.asked ? 100.0 * (double)s.passed / (double)s.asked : 0.0);
        for (size_t i = 0; i < p->n_ask; i++) {
            unsigned t = p->ask[i], a = 0, ok = 0;
            for (unsigned k = 0; k < p->seeds; k++) {
                const struct probe_live_result *x = session(r, c, k);
                if (x->done && t <= x->n_turns) {
                    a++;
                    ok += x->turn[t - 1].passed;
                }
            }
            fprintf(out, " %u:%u/%u", t, ok, a);
        }
        fputc('\n', out);
        free(name);
    }
    fprintf(out, "\n  reasoning bytes by turn (median over seeds):\n");
    for (size_t c = 0; c < p->n_cells; c++) {
        json_t *bt = by_turn(r, c), *x;
        size_t i;
        char *name = cell_name(&p->cells[c]);
        fprintf(out, "  %-52s", name);
        json_array_foreach(bt, i, x) fprintf(
            out, " %.0f",
            json_number_value(json_object_get(x, "reasoning_bytes_median")));
        fputc('\n', out);
        free(name);
        json_decref(bt);
    }
    if (first < 0) {
        fprintf(out, "\nno cell breaks within %u turns\n", p->turns);
        return;
    }
    struct probe_live_cellsum s;
    probe_live_cell_summary(r, (size_t)first, &s);
    char *name = cell_name(&p->cells[first]);
    fprintf(out, "\nbreaks first: %s, at turn %.0f (median of %zu)\n", name,
            s.break_median, s.sessions);
    free(name);
    for (size_t c = 0; c < p->n_cells; c++) {
        if ((long)c == first)
            continue;
        json_t *pj = pairs(r, c, (size_t)first);
        char *n2 = cell_name(&p->cells[c]);
        fprintf(out, "  vs %-52s McNemar p = %.3g%s\n", n2,
                json_number_value(json_object_get(pj, "p_value")),
                json_is_true(json_object_get(pj, "significant"))
                    ? " (significant)"
                    : "");
        free(n2);
        json_decref(pj);
    }
}
