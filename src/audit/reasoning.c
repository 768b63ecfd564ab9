/*
 * reasoning: rule 3. For every earlier assistant turn a request carries,
 * whether the reasoning streamed with it was sent back: equal, dropped
 * (key absent), empty string, inline (<think> in the content) or changed;
 * split by whether the request offered tools, and checked against the
 * policy the user names (--reasoning-policy, or the model's profile).
 */
#include <stdio.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/hash.h"
#include "core/plural.h"

enum rstate { R_EQUAL, R_DROPPED, R_EMPTY, R_INLINE, R_CHANGED, R_NSTATES };
static const char *const rstate_names[] = {"equal", "dropped", "empty",
                                           "inline", "changed"};

/* Key of a reply or of an assistant message echoing it: its first
 * tool-call id, else its content (without an inline <think> block), hashed;
 * NULL when it has neither. Writes into key[40]. */
static const char *reply_key(json_t *calls, const char *content, char key[40])
{
    json_t *tc = json_array_get(calls, 0);
    const char *id = json_string_value(json_object_get(tc, "id"));
    const char *end = content ? strstr(content, "</think>") : NULL;
    char hex[17];
    if (id) {
        hash_hex(hash64(id, strlen(id), 1), hex);
        snprintf(key, 40, "id:%s", hex);
        return key;
    }
    if (content && !strncmp(content, "<think>", 7) && end)
        content = end + 8; /* inline reasoning before the answer */
    if (!content || !*content)
        return NULL;
    hash_hex(hash64(content, strlen(content), 2), hex);
    snprintf(key, 40, "c:%s", hex);
    return key;
}

/* key -> index of the first request whose reply has that key. */
static json_t *index_replies(struct actx *c)
{
    json_t *idx = json_object();
    char key[40];
    for (size_t j = 0; j < c->n; j++) {
        const char *k = reply_key(c->r[j].tool_calls, c->r[j].content, key);
        if (k && !json_object_get(idx, k))
            json_object_set_new(idx, k, json_integer((json_int_t)j));
    }
    return idx;
}

/* The earlier reply (before request index i) that m echoes. */
static const struct areq *source_of(struct actx *c, json_t *idx, size_t i,
                                    json_t *m)
{
    char key[40];
    const char *k =
        reply_key(json_object_get(m, "tool_calls"),
                  json_string_value(json_object_get(m, "content")), key);
    json_t *j = k ? json_object_get(idx, k) : NULL;
    if (!j || (size_t)json_integer_value(j) >= i)
        return NULL;
    return &c->r[json_integer_value(j)];
}

static int classify(json_t *m, const char *streamed)
{
    json_t *sent = msg_reasoning(m);
    const char *content = json_string_value(json_object_get(m, "content"));
    if (content && strstr(content, "<think>") && strstr(content, streamed))
        return R_INLINE;
    if (!sent || json_is_null(sent))
        return R_DROPPED;
    if (!json_is_string(sent) || !*json_string_value(sent))
        return R_EMPTY;
    return strcmp(json_string_value(sent), streamed) ? R_CHANGED : R_EQUAL;
}

static enum audit_policy policy_for(struct actx *c, const char *model)
{
    enum audit_policy p = c->o->policy;
    json_t *prof = profile_for(c->o->profile, model);
    const char *s =
        json_string_value(json_object_get(prof, "reasoning_policy"));
    if (p == AUDIT_POLICY_NONE && s)
        audit_policy_parse(s, &p);
    return p;
}

static bool violates(enum audit_policy p, bool tools, int st)
{
    bool keep =
        p == AUDIT_POLICY_KEEP || (p == AUDIT_POLICY_KEEP_WITH_TOOLS && tools);
    if (p == AUDIT_POLICY_NONE)
        return false;
    if (keep)
        return st == R_DROPPED || st == R_EMPTY || st == R_CHANGED;
    return st == R_EQUAL || st == R_INLINE || st == R_CHANGED;
}

/* counts[tools][state] over the session, for the summary finding. */
static void one_request(struct actx *c, json_t *idx, size_t i,
                        unsigned counts[2][R_NSTATES])
{
    struct areq *r = &c->r[i];
    enum audit_policy pol = policy_for(c, r->model);
    json_t *turns = json_array();
    size_t bad = 0, m_i;
    json_t *m;
    json_array_foreach(r->msgs, m_i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "assistant"))
            continue;
        const struct areq *src = source_of(c, idx, i, m);
        if (!src || !src->reasoning || !*src->reasoning)
            continue;
        int st = classify(m, src->reasoning);
        counts[r->tools][st]++;
        bool v = violates(pol, r->tools, st);
        bad += v;
        json_array_append_new(
            turns,
            json_pack("{s:I, s:s, s:I, s:I, s:b}", "index", (json_int_t)m_i,
                      "state", rstate_names[st], "from_request",
                      (json_int_t)src->x->id, "reasoning_bytes",
                      (json_int_t)strlen(src->reasoning), "violation", v));
    }
    if (bad) {
        bool keep = pol == AUDIT_POLICY_KEEP ||
                    (pol == AUDIT_POLICY_KEEP_WITH_TOOLS && r->tools);
        finding_add(c, AUDIT_WARN, "reasoning.policy", r,
                    json_pack("{s:s, s:b, s:s, s:o}", "policy",
                              audit_policy_name(pol), "tools", r->tools, "want",
                              keep ? "keep" : "drop", "turns", turns),
                    "policy %s (%s tools) wants earlier reasoning %s; %zu "
                    "assistant %s",
                    audit_policy_name(pol), r->tools ? "with" : "without",
                    keep ? "kept" : "dropped", bad,
                    plural(bad, "turn disagrees", "turns disagree"));
    } else {
        json_decref(turns);
    }
}

void rule_reasoning(struct actx *c)
{
    unsigned counts[2][R_NSTATES] = {{0}};
    unsigned total = 0;
    json_t *idx = index_replies(c);
    for (size_t i = 0; i < c->n; i++)
        if (c->r[i].msgs && is_main_kind(c->r[i].kind))
            one_request(c, idx, i, counts);
    json_decref(idx);
    json_t *ev = json_object();
    for (int t = 0; t < 2; t++) {
        json_t *o = json_object();
        for (int s = 0; s < R_NSTATES; s++) {
            json_object_set_new(o, rstate_names[s], json_integer(counts[t][s]));
            total += counts[t][s];
        }
        json_object_set_new(ev, t ? "with_tools" : "without_tools", o);
    }
    if (!total) {
        json_decref(ev);
        return;
    }
    finding_add(c, AUDIT_INFO, "reasoning.sent", NULL, ev,
                "earlier reasoning sent back: with tools %u equal, %u "
                "dropped, %u empty, %u inline, %u changed; without tools %u "
                "equal, %u dropped, %u empty, %u inline, %u changed",
                counts[1][0], counts[1][1], counts[1][2], counts[1][3],
                counts[1][4], counts[0][0], counts[0][1], counts[0][2],
                counts[0][3], counts[0][4]);
}
