/*
 * sampling: rule 2. Per session, model and request kind, the sampling
 * parameters actually sent (and those left to the server's default), the
 * ones that change between requests, and the differences from what the
 * user expects (--expect KEY=VALUE, or the model's entry in --profile).
 */
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/buf.h"
#include "core/plural.h"
#include "core/xalloc.h"

/* OpenAI, vLLM and sglang field names (OpenAI chat completions reference;
 * vLLM "Extra Parameters"; sglang sampling params). */
static const char *const params[] = {
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "chat_template_kwargs",
    "seed",
};
#define NPARAMS (sizeof(params) / sizeof(*params))

static char *value_str(json_t *v)
{
    if (!v)
        return xstrdup("(absent)");
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY |
                                JSON_REAL_PRECISION(10));
    return s ? s : xstrdup("?");
}

/* Expected objects match when each expected key matches; other values by
 * audit_json_same. */
static bool matches(json_t *expected, json_t *actual)
{
    if (json_is_null(expected))
        return actual == NULL;
    if (json_is_object(expected) && json_is_object(actual)) {
        const char *k;
        json_t *v;
        json_object_foreach(expected, k, v)
        {
            if (!matches(v, json_object_get(actual, k)))
                return false;
        }
        return true;
    }
    return audit_json_same(expected, actual);
}

static void report_sent(struct actx *c, const char *model, const char *kind)
{
    json_t *sent = json_object(), *absent = json_array(),
           *varied = json_object();
    const struct areq *first = NULL;
    size_t n = 0;
    struct buf line = BUF_INIT;
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->r[i].model, model) && !strcmp(c->r[i].kind, kind)) {
            first = first ? first : &c->r[i];
            n++;
        }
    for (size_t p = 0; p < NPARAMS; p++) {
        json_t *vals = json_array();
        bool any = false;
        for (size_t i = 0; i < c->n; i++) {
            if (strcmp(c->r[i].model, model) || strcmp(c->r[i].kind, kind))
                continue;
            json_t *v = json_object_get(c->r[i].x->req_body, params[p]);
            json_t *vv = v ? v : json_null();
            any |= v != NULL;
            if (!json_array_size(vals) ||
                !audit_json_same(
                    json_array_get(vals, json_array_size(vals) - 1), vv))
                json_array_append(vals, vv);
        }
        if (!any) {
            json_array_append_new(absent, json_string(params[p]));
        } else if (json_array_size(vals) == 1) {
            char *s = value_str(json_array_get(vals, 0));
            buf_printf(&line, "%s%s=%s", line.len ? " " : "", params[p], s);
            free(s);
            json_object_set(sent, params[p], json_array_get(vals, 0));
        } else {
            buf_printf(&line, "%s%s=(varies)", line.len ? " " : "", params[p]);
            json_object_set(varied, params[p], vals);
        }
        json_decref(vals);
    }
    size_t nabsent = json_array_size(absent);
    audit_finding_add(
        c, AUDIT_INFO, "sampling.sent", first,
        json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "model", model, "kind",
                  kind, "requests", (json_int_t)n, "sent", sent, "absent",
                  absent, "varied", varied),
        "%s (%s, %zu request%s) sent: %s; %zu parameter%s left to "
        "the server default",
        model, kind, n, plural_s(n), line.len ? line.data : "(none)", nabsent,
        plural_s(nabsent));
    buf_release(&line);
}

static void report_changes(struct actx *c, const char *model, const char *kind)
{
    for (size_t p = 0; p < NPARAMS; p++) {
        json_t *steps = json_array(), *last = NULL;
        const struct areq *at = NULL;
        bool seen = false;
        for (size_t i = 0; i < c->n; i++) {
            const struct areq *r = &c->r[i];
            if (strcmp(r->model, model) || strcmp(r->kind, kind))
                continue;
            json_t *v = json_object_get(r->x->req_body, params[p]);
            if (seen && !audit_json_same(last ? last : json_null(),
                                         v ? v : json_null())) {
                at = at ? at : r;
                json_array_append_new(steps,
                                      json_pack("{s:I, s:O}", "request",
                                                (json_int_t)r->x->id, "value",
                                                v ? v : json_null()));
            } else if (!seen) {
                json_array_append_new(steps,
                                      json_pack("{s:I, s:O}", "request",
                                                (json_int_t)r->x->id, "value",
                                                v ? v : json_null()));
            }
            seen = true;
            last = v;
        }
        if (at)
            audit_finding_add(
                c, AUDIT_WARN, "sampling.changed", at,
                json_pack("{s:s, s:s, s:s, s:O}", "model", model, "kind", kind,
                          "param", params[p], "values", steps),
                "%s changes within the session for %s (%s): %zu "
                "value change%s",
                params[p], model, kind, json_array_size(steps) - 1,
                plural_s(json_array_size(steps) - 1));
        json_decref(steps);
    }
}

static bool in_seen(json_t *seen, json_t *v)
{
    size_t i;
    json_t *x;
    json_array_foreach(seen, i, x)
    {
        if (audit_json_same(x, v ? v : json_null()))
            return true;
    }
    return false;
}

/* --expect overrides the profile's params for the model. */
static json_t *expectations(struct actx *c, const char *model, json_t **src)
{
    json_t *e = json_object();
    json_t *prof = audit_profile_for(c->o->profile, model);
    json_t *pp = json_object_get(prof, "params");
    *src = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(pp, k, v)
    {
        json_object_set(e, k, v);
        json_object_set_new(*src, k, json_string("profile"));
    }
    json_object_foreach(c->o->expect, k, v)
    {
        json_object_set(e, k, v);
        json_object_set_new(*src, k, json_string("--expect"));
    }
    return e;
}

static void check_expect(struct actx *c, const char *model, const char *kind)
{
    json_t *src, *e = expectations(c, model, &src);
    const char *key;
    json_t *want;
    json_object_foreach(e, key, want)
    {
        json_t *seen = json_array();
        const struct areq *first = NULL;
        size_t bad = 0, n = 0;
        for (size_t i = 0; i < c->n; i++) {
            const struct areq *r = &c->r[i];
            if (strcmp(r->model, model) || strcmp(r->kind, kind))
                continue;
            json_t *got = audit_json_path(r->x->req_body, key);
            n++;
            if (matches(want, got))
                continue;
            bad++;
            first = first ? first : r;
            if (!in_seen(seen, got))
                json_array_append(seen, got ? got : json_null());
        }
        if (bad) {
            char *w = value_str(json_is_null(want) ? NULL : want);
            char *g = value_str(json_array_get(seen, 0) &&
                                        !json_is_null(json_array_get(seen, 0))
                                    ? json_array_get(seen, 0)
                                    : NULL);
            audit_finding_add(
                c, AUDIT_WARN, "sampling.expect", first,
                json_pack("{s:s, s:s, s:s, s:O, s:O, s:I, s:I, s:O}", "model",
                          model, "kind", kind, "param", key, "expected", want,
                          "sent", seen, "mismatched", (json_int_t)bad,
                          "requests", (json_int_t)n, "source",
                          json_object_get(src, key)),
                "%s: expected %s, sent %s in %zu of %zu %s request%s of %s%s",
                key, w, g, bad, n, kind, plural_s(n), model,
                json_is_null(json_array_get(seen, 0))
                    ? " (the server's default applies)"
                    : "");
            free(w);
            free(g);
        }
        json_decref(seen);
    }
    json_decref(e);
    json_decref(src);
}

void audit_rule_sampling(struct actx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        bool first = r->msgs != NULL;
        for (size_t j = 0; j < i && first; j++)
            first = !(c->r[j].msgs && !strcmp(c->r[j].model, r->model) &&
                      !strcmp(c->r[j].kind, r->kind));
        if (!first)
            continue;
        report_sent(c, r->model, r->kind);
        report_changes(c, r->model, r->kind);
        if (audit_is_main_kind(r->kind))
            check_expect(c, r->model, r->kind);
    }
}
