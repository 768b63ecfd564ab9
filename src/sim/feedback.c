/*
 * feedback: lengths and text of the feedback-loop fault. The effort
 * factors follow OpenAI's reasoning_effort values (minimal, low, medium,
 * high; "xhigh" and "max" as some servers add them).
 */
#include "sim/feedback.h"

#include <math.h>
#include <string.h>

#include "core/hash.h"

size_t feedback_in_context(const struct tok_vec *prompt)
{
    size_t n = 0;
    bool in = false;
    for (size_t i = 0; i < prompt->n; i++) {
        int32_t t = prompt->v[i];
        if (t == TOK_THINK)
            in = true;
        else if (t == TOK_THINK_END)
            in = false;
        else if (in)
            n++;
    }
    return n;
}

void feedback_window(const struct sim_config *c, const struct tok_vec *prompt,
                     size_t *window)
{
    if (c->feedback_base <= 0 ||
        feedback_in_context(prompt) <= (size_t)c->feedback_budget)
        return;
    size_t w = (size_t)c->feedback_window;
    if (!*window || w < *window)
        *window = w;
}

static double effort(json_t *body)
{
    static const struct {
        const char *name;
        double f;
    } table[] = {
        {"none", 0.25}, {"minimal", 0.5}, {"low", 0.5}, {"medium", 1},
        {"high", 2},    {"xhigh", 3},     {"max", 4},
    };
    const char *e =
        json_string_value(json_object_get(body, "reasoning_effort"));
    for (size_t i = 0; e && i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(e, table[i].name))
            return table[i].f;
    return 1;
}

size_t feedback_length(const struct sim_config *c, json_t *body,
                       double temperature, uint64_t seed, size_t in_context)
{
    if (c->feedback_base <= 0)
        return 0;
    double u = 2 * hash_unit(hash_mix2(seed, 0x66656564ULL)) - 1;
    double l =
        ((double)c->feedback_base + c->feedback_growth * (double)in_context) *
        effort(body) / (0.5 + temperature) * (1 + c->feedback_jitter * u);
    if (l > (double)c->feedback_max)
        l = (double)c->feedback_max;
    return l < 1 ? 1 : (size_t)lround(l);
}

void feedback_reasoning(size_t tokens, uint64_t seed, struct buf *out)
{
    /* No "the X for Y is Z", no "Let", no question: the reply's fact
     * scanner must find nothing here. */
    static const char *const steps[] = {
        "Checking each step again to be sure.",
        "Loop bounds hold and types match.",
        "Maybe revisit that branch once more.",
        "Wait, reconsider this edge case carefully.",
        "Tracing values through every call path.",
        "Verifying assumptions one by one here.",
    };
    struct buf text = BUF_INIT;
    struct tok_vec t;
    tok_vec_init(&t);
    for (size_t i = 0; text.len < tokens * 6 + 64; i++) {
        const char *s = steps[hash_mix2(seed, i) % 6];
        if (text.len)
            buf_addch(&text, ' ');
        buf_adds(&text, s);
    }
    tok_encode(text.data, text.len, &t);
    if (t.n > tokens)
        t.n = tokens;
    buf_reset(out);
    tok_decode(t.v, t.n, out);
    tok_vec_release(&t);
    buf_release(&text);
}
