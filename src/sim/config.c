/*
 * sim config: one table of fields drives option parsing, JSON in and out,
 * and the presets named after the motivating case's four patches.
 */
#include "sim/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/num.h"
#include "core/xalloc.h"

enum ftype { F_LONG, F_DOUBLE, F_BOOL, F_ENUM, F_STRING };

struct field {
    const char *name; /* JSON key; the option is the same with '-' */
    enum ftype type;
    size_t off;
    double min, max;
    const char *const *names; /* F_ENUM values, NULL-terminated */
};

static const char *const overflow_names[] = {"error", "oldest", "middle",
                                             "newest", NULL};
static const char *const rhist_names[] = {"keep", "drop", "keep-with-tools",
                                          NULL};
static const char *const flush_names[] = {"both", "sglang", "vllm", "none",
                                          NULL};

#define L(n, lo, hi)                                                           \
    {                                                                          \
#n, F_LONG, offsetof(struct sim_config, n), lo, hi, NULL               \
    }
#define D(n, lo, hi)                                                           \
    {                                                                          \
#n, F_DOUBLE, offsetof(struct sim_config, n), lo, hi, NULL             \
    }
#define B(n)                                                                   \
    {                                                                          \
#n, F_BOOL, offsetof(struct sim_config, n), 0, 1, NULL                 \
    }
#define E(n, v)                                                                \
    {                                                                          \
#n, F_ENUM, offsetof(struct sim_config, n), 0, 0, v                    \
    }

static const struct field fields[] = {
    {"model", F_STRING, offsetof(struct sim_config, model), 0, 0, NULL},
    L(max_model_len, 16, 1 << 24),
    B(byte_tokens),
    L(context_limit, 0, 1 << 24),
    E(overflow, overflow_names),
    L(keep_last_turns, 0, 1 << 20),
    B(ignore_system),
    E(reasoning_history, rhist_names),
    L(forget_after, 0, 1 << 24),
    D(prefill_noise, 0, 100),
    D(decode_noise, 0, 100),
    D(noise_growth, 0, 8),
    L(noise_from, 0, 1 << 24),
    L(noise_saturate, 0, 1 << 24),
    D(noise_recall_limit, 0, 100),
    B(pair_a),
    B(pair_b),
    D(pair_noise, 0, 100),
    D(logit_scale, 0.01, 100),
    D(nondeterminism, 0, 100),
    D(batch_variance, 0, 100),
    L(batch_window_ms, 1, 10000),
    L(collapse_after, 0, 1 << 20),
    B(ignore_temperature),
    B(no_prompt_logprobs),
    L(latency_ms, 0, 600000),
    L(token_interval_ms, 0, 60000),
    D(rate_429, 0, 1),
    D(rate_500, 0, 1),
    D(rate_503, 0, 1),
    L(cut_stream_after, 0, 1L << 40),
    B(reasoning),
    B(lose_summary),
    L(seed, 0, 1L << 62),
    L(max_body, 1024, 1L << 34),
    L(cache_tokens, 0, 1L << 26),
    L(cache_block, 1, 4096),
    E(flush_endpoints, flush_names),
    B(no_cache_report),
    D(warm_noise, 0, 100),
    D(recompute_noise, 0, 100),
    B(no_cache_output),
    L(cache_collapse_after, 0, 1 << 20),
    B(hide_faults),
    L(feedback_base, 0, 1 << 20),
    D(feedback_growth, 0, 100),
    L(feedback_budget, 1, 1 << 24),
    L(feedback_window, 1, 1 << 24),
    L(feedback_max, 1, 1 << 24),
    D(feedback_jitter, 0, 0.9),
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

void sim_config_defaults(struct sim_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->model, sizeof(c->model), "fidelity-sim");
    c->max_model_len = 131072;
    c->logit_scale = 1.0;
    c->batch_window_ms = 20;
    c->pair_noise = 0.3;
    c->max_body = 64L << 20;
    c->cache_tokens = 65536;
    c->cache_block = 16;
    c->feedback_growth = 0.1;
    c->feedback_budget = 2500;
    c->feedback_window = 1024;
    c->feedback_max = 1024;
    c->feedback_jitter = 0.1;
}

double sim_prefill_sigma(const struct sim_config *c)
{
    return c->prefill_noise + (c->pair_a && c->pair_b ? c->pair_noise : 0);
}

size_t sim_recall_window(const struct sim_config *c, size_t n)
{
    size_t w = (size_t)c->forget_after;
    double s = sim_prefill_sigma(c), lim = c->noise_recall_limit;
    if (lim <= 0 || s <= 0)
        return w;
    /* the noise at position t is s ((t + 1) / 1024)^growth (model.c) */
    double len = c->noise_growth > 0
                     ? 1024 * pow(lim / s, 1 / c->noise_growth) - 1
                 : s > lim ? 1
                           : (double)n + 1;
    if (len >= (double)n)
        return w;
    size_t nw = len < 1 ? 1 : (size_t)len;
    return w && w < nw ? w : nw;
}

long sim_config_limit(const struct sim_config *c)
{
    return c->context_limit > 0 ? c->context_limit : c->max_model_len;
}

static const struct field *find(const char *name)
{
    char key[64];
    size_t n = strlen(name);
    if (n >= sizeof(key))
        return NULL;
    for (size_t i = 0; i <= n; i++)
        key[i] = name[i] == '-' ? '_' : name[i];
    for (size_t i = 0; i < NFIELDS; i++)
        if (!strcmp(fields[i].name, key))
            return &fields[i];
    return NULL;
}

bool sim_config_has(const char *name)
{
    return find(name) != NULL;
}

bool sim_config_is_flag(const char *name)
{
    const struct field *f = find(name);
    return f && f->type == F_BOOL;
}

static int set_enum(const struct field *f, long *dst, const char *v,
                    struct diag *d)
{
    for (long i = 0; f->names[i]; i++) {
        if (!strcmp(f->names[i], v)) {
            *dst = i;
            return 0;
        }
    }
    char allowed[128] = "";
    for (long i = 0; f->names[i]; i++) {
        strncat(allowed, i ? ", " : "", sizeof(allowed) - strlen(allowed) - 1);
        strncat(allowed, f->names[i], sizeof(allowed) - strlen(allowed) - 1);
    }
    return diag_set(d, EINVAL, "'%s' is not a value of '%s' (one of: %s)", v,
                    f->name, allowed);
}

int sim_config_set(struct sim_config *c, const char *name, const char *value,
                   struct diag *d)
{
    const struct field *f = find(name);
    char *p;
    if (!f)
        return diag_set(d, ENOENT, "unknown fault '%s'", name);
    p = (char *)c + f->off;
    if (f->type == F_BOOL) {
        if (value && strcmp(value, "true") && strcmp(value, "1") &&
            strcmp(value, "false") && strcmp(value, "0"))
            return diag_set(d, EINVAL, "'%s' takes true or false, not '%s'",
                            f->name, value);
        *(bool *)p = !value || !strcmp(value, "true") || !strcmp(value, "1");
        return 0;
    }
    if (!value)
        return diag_set(d, EINVAL, "'%s' needs a value", f->name);
    if (f->type == F_STRING) {
        if (strlen(value) >= sizeof(c->model) || !*value)
            return diag_set(d, EINVAL, "'%s' must be 1-127 characters",
                            f->name);
        snprintf(p, sizeof(c->model), "%s", value);
        return 0;
    }
    if (f->type == F_ENUM)
        return set_enum(f, (long *)p, value, d);
    if (f->type == F_LONG) {
        long v;
        if (num_parse_long(value, (long)f->min, (long)f->max, &v))
            return diag_set(d, EINVAL,
                            "'%s' must be a whole number from %.0f to %.0f, "
                            "not '%s'",
                            f->name, f->min, f->max, value);
        *(long *)p = v;
        return 0;
    }
    double v;
    if (num_parse_double(value, f->min, f->max, &v))
        return diag_set(d, EINVAL,
                        "'%s' must be a number from %g to %g, not '%s'",
                        f->name, f->min, f->max, value);
    *(double *)p = v;
    return 0;
}

static int apply_one(struct sim_config *c, const char *key, json_t *v,
                     struct diag *d)
{
    char text[64];
    const char *s = text;
    if (json_is_string(v))
        s = json_string_value(v);
    else if (json_is_boolean(v))
        s = json_is_true(v) ? "true" : "false";
    else if (json_is_integer(v))
        snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(text, sizeof(text), "%.17g", json_real_value(v));
    else
        return diag_set(d, EINVAL, "'%s' must be a string, number or boolean",
                        key);
    return sim_config_set(c, key, s, d);
}

int sim_config_apply_json(struct sim_config *c, json_t *obj, struct diag *d)
{
    struct sim_config tmp = *c;
    const char *key;
    json_t *v;
    if (!json_is_object(obj))
        return diag_set(d, EINVAL, "the config must be a JSON object");
    json_object_foreach(obj, key, v)
    {
        if (!strcmp(key, "reset"))
            continue;
        if (!strcmp(key, "preset")) {
            if (!json_is_string(v))
                return diag_set(d, EINVAL, "'preset' must be a string");
            int r = sim_config_preset(&tmp, json_string_value(v), d);
            if (r)
                return r;
            continue;
        }
        int r = apply_one(&tmp, key, v, d);
        if (r)
            return r;
    }
    *c = tmp;
    return 0;
}

struct preset {
    const char *name;
    const char *settings; /* "key=value key=value" */
};

static const struct preset presets[] = {
    {"mhc-bf16", "prefill_noise=0.02 noise_growth=1"},
    {"splitk-decode", "decode_noise=0.05"},
    {"sparse-indexer", "forget_after=2048"},
    {"routed-scaling", "logit_scale=1.02"},
};

const char *sim_config_preset_name(size_t i)
{
    return i < sizeof(presets) / sizeof(presets[0]) ? presets[i].name : NULL;
}

static int apply_preset(struct sim_config *c, const struct preset *p,
                        struct diag *d)
{
    char *copy = xstrdup(p->settings), *save = NULL;
    int r = 0;
    for (char *kv = strtok_r(copy, " ", &save); kv && !r;
         kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        *eq = '\0';
        r = sim_config_set(c, kv, eq + 1, d);
    }
    free(copy);
    return r;
}

int sim_config_preset(struct sim_config *c, const char *list, struct diag *d)
{
    char *copy = xstrdup(list), *save = NULL;
    int r = 0;
    for (char *name = strtok_r(copy, ",", &save); name && !r;
         name = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
            if (!strcmp(presets[i].name, name))
                break;
        if (i == sizeof(presets) / sizeof(presets[0]))
            r = diag_set(d, EINVAL,
                         "unknown preset '%s' (one of: mhc-bf16, "
                         "splitk-decode, sparse-indexer, routed-scaling)",
                         name);
        else
            r = apply_preset(c, &presets[i], d);
    }
    free(copy);
    return r;
}

json_t *sim_config_to_json(const struct sim_config *c)
{
    /* a server whose settings its info endpoints do not show */
    if (c->hide_faults)
        return json_pack("{s:s, s:I, s:b}", "model", c->model, "max_model_len",
                         (json_int_t)c->max_model_len, "hide_faults", 1);
    json_t *o = json_object();
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        const char *p = (const char *)c + f->off;
        json_t *v = NULL;
        switch (f->type) {
        case F_LONG:
            v = json_integer(*(const long *)p);
            break;
        case F_DOUBLE:
            v = json_real(*(const double *)p);
            break;
        case F_BOOL:
            v = json_boolean(*(const bool *)p);
            break;
        case F_ENUM:
            v = json_string(f->names[*(const long *)p]);
            break;
        case F_STRING:
            v = json_string(p);
            break;
        }
        json_object_set_new(o, f->name, v);
    }
    return o;
}
