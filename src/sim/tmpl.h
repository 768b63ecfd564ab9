/*
 * tmpl: the simulator's chat template (docs/SIM.md, "Chat template"):
 * validates an OpenAI `messages` array and renders it to tokens, applying
 * the message-level faults (keep-last-turns, ignore-system, the reasoning
 * history policy). Token-level truncation is sim_truncate().
 */
#ifndef SIM_TMPL_H
#define SIM_TMPL_H

#include <jansson.h>
#include <stdbool.h>

#include "core/diag.h"
#include "sim/config.h"
#include "sim/tok.h"

/*
 * Renders messages (borrowed) to out. has_tools says whether the request
 * offers tools (for keep-with-tools). add_generation_prompt appends
 * "<|assistant|>". On a malformed message -EINVAL is returned and d names
 * the field, e.g. "messages[2].role must be one of ...".
 */
int tmpl_render(json_t *messages, bool has_tools, bool add_generation_prompt,
                const struct sim_config *c, struct tok_vec *out,
                struct diag *d);

/* Cuts toks to limit tokens as overflow says (oldest / middle / newest).
 * Returns the number of tokens removed. OVERFLOW_ERROR cuts nothing. */
size_t tmpl_truncate(struct tok_vec *toks, size_t limit, long overflow);

#endif
