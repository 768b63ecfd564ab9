/*
 * sim config: the simulator's fault settings (docs/SIM.md, "Faults"), one
 * table that serves the command-line options, POST /sim/config, GET
 * /sim/config and the presets, so the three can never disagree.
 */
#ifndef SIM_CONFIG_H
#define SIM_CONFIG_H

#include <jansson.h>
#include <stdbool.h>

#include "core/diag.h"

enum sim_overflow {
    OVERFLOW_ERROR,
    OVERFLOW_OLDEST,
    OVERFLOW_MIDDLE,
    OVERFLOW_NEWEST
};
enum sim_rhist { RHIST_KEEP, RHIST_DROP, RHIST_KEEP_WITH_TOOLS };
/* which cache flush endpoints the sim answers (docs/SIM.md, "Prefix
 * cache") */
enum sim_flush { FLUSH_BOTH, FLUSH_SGLANG, FLUSH_VLLM, FLUSH_NONE };

struct sim_config {
    char model[128];
    long max_model_len;
    bool byte_tokens;   /* one token per byte (a byte-level tokenizer) */
    long context_limit; /* 0: max_model_len */
    long overflow;      /* enum sim_overflow */
    long keep_last_turns;
    bool ignore_system;
    long reasoning_history; /* enum sim_rhist */
    long forget_after;
    double prefill_noise;
    double decode_noise;
    double noise_growth;
    long noise_from;           /* noise only at positions >= this */
    long noise_saturate;       /* growth stops at this position; 0: never */
    double noise_recall_limit; /* 0: off */
    bool pair_a, pair_b;       /* the pair fault: both on */
    double pair_noise;
    double logit_scale;
    double nondeterminism;
    double batch_variance;
    long batch_window_ms;
    long collapse_after;
    bool ignore_temperature;
    bool no_prompt_logprobs;
    long latency_ms;
    long token_interval_ms;
    double rate_429;
    double rate_500;
    double rate_503;
    long cut_stream_after;
    bool reasoning;
    bool lose_summary; /* answer summary requests "no earlier message" */
    long seed;
    long max_body;
    /* prefix cache (sim/cache.c) */
    long cache_tokens;         /* capacity; 0: no prefix cache */
    long cache_block;          /* tokens per block */
    long flush_endpoints;      /* enum sim_flush */
    bool no_cache_report;      /* answers carry no cached_tokens */
    double warm_noise;         /* noise on positions computed over cached KV */
    double recompute_noise;    /* ... over KV recomputed after eviction */
    bool no_cache_output;      /* generated tokens never cached */
    long cache_collapse_after; /* from this turn on, reuse collapses */
    bool hide_faults; /* /get_server_info and /sim/config show no fault */
    /* The feedback loop (sim/feedback.c): off while feedback_base is 0. */
    long feedback_base;     /* reasoning tokens of a reply, before scaling */
    double feedback_growth; /* extra per token of reasoning in context */
    long feedback_budget;   /* reasoning in context that breaks recall */
    long feedback_window;   /* tokens visible once past the budget */
    long feedback_max;      /* cap on one reply's reasoning tokens */
    double feedback_jitter; /* +- share, per request seed */
};

void sim_config_defaults(struct sim_config *c);
/* The prefill noise scale: prefill_noise, plus pair_noise when pair_a and
 * pair_b are both on. */
double sim_prefill_sigma(const struct sim_config *c);
/* The recall window of an n-token prompt (0: everything visible):
 * forget_after, narrowed when noise_recall_limit is set to the length at
 * which the prefill noise, growing with position, passes that limit. */
size_t sim_recall_window(const struct sim_config *c, size_t n);
/* Sets one field by option name ("context-limit" or "context_limit") from
 * text. value is NULL for a flag. -ENOENT for an unknown name, -EINVAL for
 * a bad value; d says which and what is allowed. */
int sim_config_set(struct sim_config *c, const char *name, const char *value,
                   struct diag *d);
/* True when name is a flag that takes no value. */
bool sim_config_is_flag(const char *name);
/* Whether name is one of the settings sim_config_set knows. */
bool sim_config_has(const char *name);
/* Applies every key of obj; on error c is unaltered. */
int sim_config_apply_json(struct sim_config *c, json_t *obj, struct diag *d);
/* Applies the comma-separated presets; on error c may be partly changed. */
int sim_config_preset(struct sim_config *c, const char *list, struct diag *d);
/* The name of the i-th preset, NULL past the last (for help and tests). */
const char *sim_config_preset_name(size_t i);
json_t *sim_config_to_json(const struct sim_config *c);
/* The tokens the server keeps: context_limit or max_model_len. */
long sim_config_limit(const struct sim_config *c);

#endif
