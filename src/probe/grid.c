/*
 * grid: which cases a run sends. A profile (quick, standard, full) picks
 * the lengths, depths and variants; options narrow or widen each axis. The
 * order is stable (kind, length, depth, variant, temperature, repeat) so
 * that a seed reproduces a run and a re-run finds its cases in the store.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"
#include "probe/vary.h"

static const char *const kind_names[PROBE_NKINDS] = {
    [PROBE_NEEDLE] = "needle",       [PROBE_MULTI] = "multi-needle",
    [PROBE_CANARY] = "canary",       [PROBE_FIRST] = "first-message",
    [PROBE_REASONING] = "reasoning", [PROBE_TOOL] = "tool",
    [PROBE_VARIABLES] = "variables",
};
static const char *const outcome_names[PROBE_NOUTCOMES] = {
    [PROBE_PASS] = "pass",
    [PROBE_TRUNCATED] = "truncated-by-server",
    [PROBE_CLIPPED] = "output-clipped",
    [PROBE_ERROR] = "server-error",
    [PROBE_MISSED] = "missed",
    [PROBE_DROPPED] = "dropped-before-the-model",
};
static const char *const rv_names[PROBE_RV_COUNT] = {
    [PROBE_RV_FIELD] = "reasoning_content",
    [PROBE_RV_FIELD_TOOLS] = "reasoning_content+tools",
    [PROBE_RV_INLINE] = "inline-think",
    [PROBE_RV_INLINE_TOOLS] = "inline-think+tools",
    [PROBE_RV_OMITTED] = "omitted(control)",
};
static const char *const tv_names[PROBE_TV_COUNT] = {
    [PROBE_TV_ARGS] = "tool-call-arguments",
    [PROBE_TV_RESULT] = "tool-result",
};
static const char *const cv_names[PROBE_CV_COUNT] = {
    [PROBE_CV_USER] = "user",           [PROBE_CV_ASSISTANT] = "assistant",
    [PROBE_CV_REASONING] = "reasoning", [PROBE_CV_TOOL] = "tool-result",
    [PROBE_CV_SYSTEM] = "system",
};

const char *probe_kind_name(enum probe_kind k)
{
    return (unsigned)k < PROBE_NKINDS ? kind_names[k] : "?";
}

int probe_kind_parse(const char *s)
{
    for (int k = 0; k < PROBE_NKINDS; k++)
        if (!strcmp(s, kind_names[k]))
            return k;
    if (!strcmp(s, "multi"))
        return PROBE_MULTI;
    if (!strcmp(s, "first"))
        return PROBE_FIRST;
    return -1;
}

bool probe_kind_has_depth(enum probe_kind k)
{
    return k == PROBE_NEEDLE || k == PROBE_MULTI || k == PROBE_CANARY ||
           k == PROBE_VARIABLES || k == PROBE_TOOL;
}

const char *probe_variant_name(enum probe_kind k, int v)
{
    if (k == PROBE_REASONING && v >= 0 && v < PROBE_RV_COUNT)
        return rv_names[v];
    if (k == PROBE_TOOL && v >= 0 && v < PROBE_TV_COUNT)
        return tv_names[v];
    if (k == PROBE_CANARY && v >= 0 && v < PROBE_CV_COUNT)
        return cv_names[v];
    return "-";
}

const char *probe_outcome_name(enum probe_outcome o)
{
    return (unsigned)o < PROBE_NOUTCOMES ? outcome_names[o] : "?";
}

int probe_outcome_parse(const char *s)
{
    for (int o = 0; o < PROBE_NOUTCOMES; o++)
        if (!strcmp(s, outcome_names[o]))
            return o;
    return -1;
}

int probe_profile_parse(const char *s)
{
    if (!strcmp(s, "quick"))
        return PROBE_QUICK;
    if (!strcmp(s, "standard"))
        return PROBE_STANDARD;
    if (!strcmp(s, "full"))
        return PROBE_FULL;
    return -1;
}

size_t probe_default_lengths(unsigned max_context, unsigned out[32])
{
    size_t n = 0;
    if (max_context < 1024)
        max_context = 1024;
    for (unsigned l = 1024; l <= max_context && n < 31; l *= 2)
        out[n++] = l;
    if (out[n - 1] != max_context)
        out[n++] = max_context;
    return n;
}

struct grid {
    struct probe_cell *v;
    size_t n, alloc;
    const struct probe_grid_opts *o;
};

/* One cell per temperature: the case at repeat 0 and its repeats. */
static void push(struct grid *g, enum probe_kind k, unsigned len, int depth,
                 int variant)
{
    const struct probe_grid_opts *o = g->o;
    static const double zero = 0;
    const double *temps = o->temps ? o->temps : &zero;
    size_t nt = o->temps ? o->n_temps : 1;
    unsigned room = o->max_tokens ? o->max_tokens : 256;

    for (size_t ti = 0; ti < nt; ti++) {
        if (g->n == g->alloc) {
            g->alloc = g->alloc ? g->alloc * 2 : 64;
            g->v = xrealloc(g->v, g->alloc * sizeof(*g->v));
        }
        struct probe_cell *c = &g->v[g->n++];
        struct probe_spec *s = &c->spec;
        memset(c, 0, sizeof(*c));
        c->reps = o->repeats ? o->repeats : temps[ti] > 0 ? 3 : 1;
        s->kind = k;
        s->length = len;
        s->target = len;
        if (o->model_len && len + room > o->model_len)
            s->target = o->model_len > room ? o->model_len - room : len;
        s->depth = depth;
        s->variant = variant;
        s->temperature = temps[ti];
        uint64_t h = hash_mix2(o->seed, (uint64_t)k);
        h = hash_mix2(h, len);
        h = hash_mix2(h, (uint64_t)(depth + 1));
        c->h = hash_mix2(h, (uint64_t)variant);
        s->seed = hash_mix2(c->h, 0);
    }
}

/* The grid's cells in order (*out freed by the caller). */
static int grid_cells(const struct probe_grid_opts *o, struct probe_cell **out,
                      size_t *n, struct diag *d)
{
    static const int dq[] = {0, 50, 100}, ds[] = {0, 25, 50, 75, 100};
    static const int df[] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
    static const int mid[] = {50};
    unsigned lens[32];
    const unsigned *L = o->lengths;
    size_t nl = o->n_lengths;
    const int *D;
    size_t nd;
    struct grid g = {NULL, 0, 0, o};

    if (!L) {
        size_t all = probe_default_lengths(
            o->max_context ? o->max_context : 131072, lens);
        if (o->profile == PROBE_QUICK && all > 3) {
            lens[1] = lens[all / 2];
            lens[2] = lens[all - 1];
            all = 3;
        }
        L = lens;
        nl = all;
    }
    for (size_t i = 0; i < nl; i++)
        if (L[i] < 512)
            return diag_set(d, EINVAL,
                            "length %u is too short: a case needs at least "
                            "512 tokens",
                            L[i]);
    if (o->depths) {
        D = o->depths;
        nd = o->n_depths;
    } else if (o->profile == PROBE_FULL) {
        D = df;
        nd = sizeof(df) / sizeof(df[0]);
    } else if (o->profile == PROBE_STANDARD) {
        D = ds;
        nd = sizeof(ds) / sizeof(ds[0]);
    } else {
        D = dq;
        nd = sizeof(dq) / sizeof(dq[0]);
    }
    unsigned kinds = o->kinds ? o->kinds : (1u << PROBE_NKINDS) - 1;
    int ncv = o->profile == PROBE_QUICK      ? 1
              : o->profile == PROBE_STANDARD ? 2
                                             : 4;
    for (int k = 0; k < PROBE_NKINDS; k++) {
        if (!(kinds & (1u << k)))
            continue;
        for (size_t li = 0; li < nl; li++) {
            unsigned len = L[li];
            switch (k) {
            case PROBE_FIRST:
                push(&g, k, len, -1, 0);
                break;
            case PROBE_REASONING:
                for (size_t di = 0; di < (o->depths ? nd : 1); di++)
                    for (int v = 0; v < PROBE_RV_COUNT; v++)
                        push(&g, k, len, o->depths ? D[di] : mid[0], v);
                break;
            case PROBE_TOOL: {
                const int *TD =
                    o->depths || o->profile != PROBE_QUICK ? D : mid;
                size_t tn = TD == mid ? 1 : nd;
                for (size_t di = 0; di < tn; di++)
                    for (int v = 0; v < PROBE_TV_COUNT; v++)
                        push(&g, k, len, TD[di], v);
                break;
            }
            case PROBE_CANARY:
                for (int v = 0; v < ncv; v++)
                    for (size_t di = 0; di < nd; di++)
                        push(&g, k, len, D[di], v);
                if (o->profile != PROBE_QUICK)
                    push(&g, k, len, -1, PROBE_CV_SYSTEM);
                break;
            default:
                for (size_t di = 0; di < nd; di++)
                    push(&g, k, len, D[di], 0);
            }
        }
    }
    if (!g.n)
        return diag_set(d, EINVAL,
                        "the grid is empty: no kind, length or "
                        "depth selected");
    *out = g.v;
    *n = g.n;
    return 0;
}

int probe_cases_build(const struct probe_grid_opts *o,
                      const struct probe_vary_cells *vc, struct probe_cases *c,
                      struct diag *d)
{
    memset(c, 0, sizeof(*c));
    int rc = grid_cells(o, &c->cell, &c->n_cells, d);
    if (rc)
        return rc;
    c->vary = vc && vc->n ? vc : NULL;
    c->m = c->vary ? vc->n : 1;
    for (size_t i = 0; i < c->n_cells; i++) {
        c->cell[i].first = c->n;
        c->cell[i].count = (size_t)c->cell[i].reps * c->m;
        c->n += c->cell[i].count;
    }
    return 0;
}

size_t probe_cases_at(const struct probe_cases *c, size_t i,
                      struct probe_spec *out)
{
    size_t lo = 0, hi = c->n_cells; /* the last cell with first <= i */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (c->cell[mid].first <= i)
            lo = mid;
        else
            hi = mid;
    }
    const struct probe_cell *cl = &c->cell[lo];
    size_t off = i - cl->first, k = off % c->m;
    *out = cl->spec;
    out->rep = (unsigned)(off / c->m);
    out->seed = hash_mix2(cl->h, out->rep);
    if (c->vary && json_object_size(c->vary->cell[k])) {
        out->vary = c->vary->cell[k];
        out->vary_key = c->vary->label[k];
    }
    return lo * c->m + k;
}

void probe_cases_release(struct probe_cases *c)
{
    free(c->cell);
    memset(c, 0, sizeof(*c));
}

int probe_grid_build(const struct probe_grid_opts *o, struct probe_spec **out,
                     size_t *n, struct diag *d)
{
    struct probe_cases c;
    int rc = probe_cases_build(o, NULL, &c, d);
    if (rc)
        return rc;
    *out = xcalloc(c.n, sizeof(**out));
    for (size_t i = 0; i < c.n; i++)
        probe_cases_at(&c, i, &(*out)[i]);
    *n = c.n;
    probe_cases_release(&c);
    return 0;
}

void probe_spec_key(const struct probe_spec *s, const char *model,
                    unsigned max_tokens, const char *extra_body,
                    const char *endpoint_fp, char out[17])
{
    char *cfg =
        xasprintf("probe-v1|%s|%u|%u|%d|%d|%.4f|%u|%llu|%s|%u|%s|%s",
                  probe_kind_name(s->kind), s->length, s->target, s->depth,
                  s->variant, s->temperature, s->rep,
                  (unsigned long long)s->seed, model ? model : "", max_tokens,
                  extra_body ? extra_body : "", endpoint_fp ? endpoint_fp : "");
    if (s->vary_key && *s->vary_key) { /* varied fields: part of the key */
        char *v = xasprintf("%s|vary|%s", cfg, s->vary_key);
        free(cfg);
        cfg = v;
    }
    hash_hex(hash64(cfg, strlen(cfg), 0x70726f6265ULL), out);
    free(cfg);
}
