/*
 * tmpl: rendering chat messages to the simulator's token sequence.
 */
#include "sim/tmpl.h"

#include <errno.h>
#include <string.h>

#include "core/buf.h"

static const struct {
    const char *name;
    int32_t tok;
} roles[] = {
    {"system", TOK_SYSTEM},       {"developer", TOK_SYSTEM}, {"user", TOK_USER},
    {"assistant", TOK_ASSISTANT}, {"tool", TOK_TOOL},
};

static int role_token(const char *name)
{
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
        if (!strcmp(roles[i].name, name))
            return roles[i].tok;
    return -1;
}

/* Appends the text of a content field: a string, null, or an array of
 * parts whose `text` members are concatenated (images are skipped). */
static int add_content(json_t *content, size_t i, struct buf *b, struct diag *d)
{
    if (!content || json_is_null(content))
        return 0;
    if (json_is_string(content))
        return buf_add(b, json_string_value(content),
                       json_string_length(content));
    if (!json_is_array(content))
        return diag_set(d, EINVAL,
                        "messages[%zu].content must be a string, null or an "
                        "array of content parts",
                        i);
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part)
    {
        json_t *t = json_object_get(part, "text");
        if (!json_is_object(part))
            return diag_set(d, EINVAL,
                            "messages[%zu].content[%zu] must be an object", i,
                            k);
        if (t && !json_is_string(t))
            return diag_set(d, EINVAL,
                            "messages[%zu].content[%zu].text must be a string",
                            i, k);
        if (t)
            buf_add(b, json_string_value(t), json_string_length(t));
    }
    return 0;
}

static const char *reasoning_of(json_t *m)
{
    json_t *r = json_object_get(m, "reasoning_content");
    if (!json_is_string(r))
        r = json_object_get(m, "reasoning");
    return json_is_string(r) && json_string_length(r) ? json_string_value(r)
                                                      : NULL;
}

static int add_tool_calls(json_t *calls, size_t i, struct tok_vec *out,
                          struct diag *d)
{
    size_t k;
    json_t *call;
    if (!calls || json_is_null(calls))
        return 0;
    if (!json_is_array(calls))
        return diag_set(d, EINVAL, "messages[%zu].tool_calls must be an array",
                        i);
    json_array_foreach(calls, k, call)
    {
        json_t *fn = json_object_get(call, "function");
        json_t *name = json_object_get(fn, "name");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(name))
            return diag_set(d, EINVAL,
                            "messages[%zu].tool_calls[%zu].function.name must "
                            "be a string",
                            i, k);
        json_t *o = json_pack("{s:O,s:o}", "name", name, "arguments",
                              args ? json_incref(args) : json_string(""));
        char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        tok_vec_push(out, TOK_TOOL_CALL);
        tok_encode(text, strlen(text), out);
        free(text);
        json_decref(o);
    }
    return 0;
}

/* Index of the first message kept by keep_last_turns (0 keeps all). */
static size_t first_kept(json_t *messages, long keep)
{
    size_t n = json_array_size(messages), users = 0;
    if (keep <= 0)
        return 0;
    for (size_t i = n; i-- > 0;) {
        json_t *r = json_object_get(json_array_get(messages, i), "role");
        if (json_is_string(r) && !strcmp(json_string_value(r), "user") &&
            ++users == (size_t)keep)
            return i;
    }
    return 0;
}

static int render_one(json_t *m, size_t i, int role, bool keep_reasoning,
                      struct tok_vec *out, struct buf *text, struct diag *d)
{
    int r;
    buf_reset(text);
    if ((r = add_content(json_object_get(m, "content"), i, text, d)))
        return r == -ENOBUFS ? diag_set(d, E2BIG, "message too large") : r;
    tok_vec_push(out, role);
    const char *reasoning = role == TOK_ASSISTANT ? reasoning_of(m) : NULL;
    if (reasoning && keep_reasoning) {
        tok_vec_push(out, TOK_THINK);
        tok_encode(reasoning, strlen(reasoning), out);
        tok_vec_push(out, TOK_THINK_END);
    }
    tok_encode(text->data ? text->data : "", text->len, out);
    if (role == TOK_ASSISTANT &&
        (r = add_tool_calls(json_object_get(m, "tool_calls"), i, out, d)))
        return r;
    tok_vec_push(out, TOK_END);
    tok_vec_push(out, TOK_BYTE0 + '\n');
    return 0;
}

int tmpl_render(json_t *messages, bool has_tools, bool add_generation_prompt,
                const struct sim_config *c, struct tok_vec *out, struct diag *d)
{
    struct buf text = BUF_INIT;
    size_t i, start;
    json_t *m;
    int r = 0;
    bool keep_reasoning =
        c->reasoning_history == RHIST_KEEP ||
        (c->reasoning_history == RHIST_KEEP_WITH_TOOLS && has_tools);

    if (!json_is_array(messages))
        return diag_set(d, EINVAL, "'messages' must be an array");
    if (json_array_size(messages) == 0)
        return diag_set(d, EINVAL, "'messages' must not be empty");
    start = first_kept(messages, c->keep_last_turns);
    tok_vec_push(out, TOK_BOS);
    json_array_foreach(messages, i, m)
    {
        json_t *role = json_object_get(m, "role");
        int tok;
        if (!json_is_object(m))
            r = diag_set(d, EINVAL, "messages[%zu] must be an object", i);
        else if (!json_is_string(role))
            r = diag_set(d, EINVAL, "messages[%zu].role must be a string", i);
        else if ((tok = role_token(json_string_value(role))) < 0)
            r = diag_set(d, EINVAL,
                         "messages[%zu].role '%s' is not one of system, "
                         "developer, user, assistant, tool",
                         i, json_string_value(role));
        else if ((tok == TOK_SYSTEM && c->ignore_system) ||
                 (i < start && tok != TOK_SYSTEM))
            continue;
        else
            r = render_one(m, i, tok, keep_reasoning, out, &text, d);
        if (r)
            break;
    }
    if (!r && add_generation_prompt)
        tok_vec_push(out, TOK_ASSISTANT);
    buf_release(&text);
    return r;
}

size_t tmpl_truncate(struct tok_vec *toks, size_t limit, long overflow)
{
    size_t n = toks->n, cut;
    if (n <= limit || overflow == OVERFLOW_ERROR)
        return 0;
    cut = n - limit;
    switch (overflow) {
    case OVERFLOW_OLDEST:
        memmove(toks->v, toks->v + cut, limit * sizeof(*toks->v));
        break;
    case OVERFLOW_MIDDLE: {
        size_t head = limit / 2;
        memmove(toks->v + head, toks->v + head + cut,
                (limit - head) * sizeof(*toks->v));
        break;
    }
    default: /* newest */
        break;
    }
    toks->n = limit;
    return cut;
}
