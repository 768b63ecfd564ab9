/*
 * answer: the simulator's rule-based chat answers (docs/SIM.md, "The
 * model"). It reads the prompt tokens the model saw, finds the facts,
 * variables and user messages that are visible (inside --forget-after of the
 * end), and writes the reply a real model would give, or the "I don't see
 * any earlier message" reply when what was asked for is not visible.
 */
#ifndef SIM_ANSWER_H
#define SIM_ANSWER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

struct answer_in {
    const int32_t *toks; /* the prompt as the model saw it */
    size_t n;
    size_t window; /* forget-after; 0: everything is visible */
    json_t *tools; /* the request's tools array, or NULL */
    int variant;   /* 0: plain; 1, 2: phrasing variants */
    bool want_reasoning;
    bool summary; /* a summary (compaction) request: answered with the
                   * facts the conversation states (a healthy summary) */
};

struct answer_out {
    struct buf content;
    struct buf reasoning;
    char *tool_name; /* set when the reply is a tool call */
    char *tool_args; /* JSON text of its arguments */
};

void answer_out_init(struct answer_out *r);
void answer_out_release(struct answer_out *r);
void answer_write(const struct answer_in *in, struct answer_out *out);

/* The "not visible" answers, exposed for tests and for docs. */
extern const char ANSWER_NOT_SEEN[];
extern const char ANSWER_FIRST_MESSAGE[];

#endif
