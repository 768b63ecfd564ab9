/*
 * feedback: the sim's feedback-loop fault (docs/SIM.md, "The feedback
 * loop"), the failure of a reasoning model whose own reasoning is carried
 * forward turn after turn: the reasoning it writes grows with the
 * reasoning already in its context and with reasoning_effort, is longer
 * at low temperature, and once the reasoning in context passes a budget
 * the model attends only to the most recent tokens, so facts from early
 * turns are no longer recalled. Off while feedback_base is 0.
 */
#ifndef SIM_FEEDBACK_H
#define SIM_FEEDBACK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "sim/config.h"
#include "sim/tok.h"

/* Reasoning tokens in a rendered prompt (between think markers). */
size_t feedback_in_context(const struct tok_vec *prompt);
/* The visible window for a request: *window narrowed to feedback_window
 * when the reasoning in prompt passes feedback_budget (0: all visible). */
void feedback_window(const struct sim_config *c, const struct tok_vec *prompt,
                     size_t *window);
/* The reasoning tokens the reply writes: (base + growth x in-context) x
 * effort x 1 / (0.5 + temperature) x (1 +- jitter), at most feedback_max.
 * 0 when the fault is off. */
size_t feedback_length(const struct sim_config *c, json_t *body,
                       double temperature, uint64_t seed, size_t in_context);
/* Replaces out with `tokens` tokens of reasoning text that states no fact
 * and asks nothing. */
void feedback_reasoning(size_t tokens, uint64_t seed, struct buf *out);

#endif
