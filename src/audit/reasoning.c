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
#include "core/xalloc.h"

enum rstate { R_EQUAL, R_DROPPED, R_EMPTY, R_INLINE, R_CHANGED, R_NSTATES };
static const char *const rstate_names[] = {"equal", "dropped", "empty",
                                           "inline", "changed"};

/* The request whose streamed reply the assistant message at index mi of
 * r[i] echoes, by structure: r[i]'s predecessor when mi is where its reply
 * goes (its message count), else the predecessor's own source for that
 * index when mi lies in the prefix they share; never a reply found by its
 * text. -1 when the structure says nothing (a rewritten request, a message
 * no stream produced). */
static long source_by_structure(struct actx *c, size_t i, size_t mi)
{
    const struct areq *cur = &c->r[i];
    while (cur->prev >= 0 && cur->link_k) {
        const struct areq *p = &c->r[cur->prev];
        if (!cur->retry && mi == p->nmsg)
            return cur->prev;
        if (mi >= p->nmsg)
            return -1;
        cur = p;
    }
    return -1;
}

static void hkey(uint64_t h, char out[17])
{
    hash_hex(h, out);
}

/* The earlier reply (before request index i) that message mi of r[i]
 * echoes: by structure, else (a request that does not extend its
 * predecessor) through echoes: the reply an earlier request carried at its
 * reply position under the same message hash. */
static const struct areq *source_of(struct actx *c, json_t *echoes, size_t i,
                                    size_t mi)
{
    long j = source_by_structure(c, i, mi);
    if (j < 0 && !c->r[i].link_k) {
        char k[17];
        hkey(c->r[i].mhash[mi], k);
        json_t *v = json_object_get(echoes, k);
        j = v ? (long)json_integer_value(v) : -1;
    }
    if (j < 0 || (size_t)j >= i)
        return NULL;
    return &c->r[j];
}

static int classify(json_t *m, const char *streamed)
{
    json_t *sent = audit_msg_reasoning(m);
    const char *content = json_string_value(json_object_get(m, "content"));
    if (content && strstr(content, "<think>") && strstr(content, streamed))
        return R_INLINE;
    if (!sent || json_is_null(sent))
        return R_DROPPED;
    if (!json_is_string(sent) || !*json_string_value(sent))
        return R_EMPTY;
    return strcmp(json_string_value(sent), streamed) ? R_CHANGED : R_EQUAL;
}

const char *audit_reasoning_state(json_t *m, const char *streamed)
{
    return rstate_names[classify(m, streamed)];
}

static enum audit_policy policy_for(struct actx *c, const char *model)
{
    enum audit_policy p = c->o->policy;
    json_t *prof = audit_profile_for(c->o->profile, model);
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

/* True when q carries m itself (the set shares equal messages, so the
 * same bytes are the same pointer). */
static bool in_request(const struct areq *q, json_t *m)
{
    for (size_t k = 0; k < q->nmsg; k++)
        if (q->mrole[k] == AROLE_ASSISTANT && json_array_get(q->msgs, k) == m)
            return true;
    return false;
}

/* counts[tools][state] over the session, for the summary finding. An
 * assistant message is judged where it first appears: one sent again
 * byte for byte at the same place as in the predecessor was judged there
 * (the set shares equal messages, so the pointers are equal). */
static void one_request(struct actx *c, json_t *echoes, size_t i,
                        unsigned counts[2][R_NSTATES])
{
    struct areq *r = &c->r[i];
    const struct areq *p = r->prev >= 0 ? &c->r[r->prev] : NULL;
    enum audit_policy pol = policy_for(c, r->model);
    json_t *turns = json_array();
    size_t bad = 0;
    if (p && r->link_k && !r->retry && r->link_k < r->nmsg &&
        r->mrole[r->link_k] == AROLE_ASSISTANT) {
        char k[17];
        hkey(r->mhash[r->link_k], k);
        if (!json_object_get(echoes, k))
            json_object_set_new(echoes, k, json_integer(r->prev));
    }
    /* views of one array share their leading messages' instances: the
     * ones up to link_k are p's own */
    size_t from = p && p->lin == r->lin ? r->link_k : 0;
    for (size_t m_i = from; m_i < r->nmsg; m_i++) {
        if (r->mrole[m_i] != AROLE_ASSISTANT)
            continue;
        json_t *m = json_array_get(r->msgs, m_i);
        if (p && m_i < p->nmsg && m_i < r->link_k &&
            json_array_get(p->msgs, m_i) == m)
            continue;
        /* a request that rewrote its predecessor (a compaction keeping the
         * recent turns) still carries some of its messages unchanged,
         * elsewhere: they were judged there */
        if (p && !r->link_k && in_request(p, m))
            continue;
        const struct areq *src = NULL;
        /* a rewritten request that kept its predecessor's reply (the tail
         * a compaction keeps): that reply, not one of equal text */
        if (p && !r->link_k && p->content && *p->content) {
            const char *t = json_string_value(json_object_get(m, "content"));
            if (t && !strcmp(t, p->content))
                src = p;
        }
        if (!src)
            src = source_of(c, echoes, i, m_i);
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
        audit_finding_add(
            c, AUDIT_WARN, "reasoning.policy", r,
            json_pack("{s:s, s:b, s:s, s:o}", "policy", audit_policy_name(pol),
                      "tools", r->tools, "want", keep ? "keep" : "drop",
                      "turns", turns),
            "policy %s (%s tools) wants earlier reasoning %s; %zu "
            "assistant %s",
            audit_policy_name(pol), r->tools ? "with" : "without",
            keep ? "kept" : "dropped", bad,
            plural(bad, "turn disagrees", "turns disagree"));
    } else {
        json_decref(turns);
    }
}

static uint64_t all_messages_key(const struct areq *r)
{
    uint64_t h = areq_key(r, r->nmsg);
    return h ? h : 1;
}

static bool used_up_by_reasoning(const struct areq *r)
{
    return r->finish && !strcmp(r->finish, "length") && r->reasoning &&
           *r->reasoning && (!r->content || !*r->content) &&
           !json_array_size(r->tool_calls);
}

/* reasoning.budget: the reply ran out of tokens while still reasoning, so
 * the content is empty (a title request's max_tokens of 16 spent on
 * thinking). Reported once, at the first such request, with how many times
 * the harness sent the same request again afterwards (for side requests:
 * another request of the same kind); info only for a lone
 * main request that nothing followed in its session. */
static void budget(struct actx *c)
{
    uint64_t *key = xcalloc(c->n + 1, sizeof(*key));
    /* a side request (a title) is one cause whatever its words: a harness
     * that asks for a title on every turn with the same budget */
    for (size_t i = 0; i < c->n; i++)
        key[i] = !c->r[i].msgs ? 0
                 : audit_is_main_kind(c->r[i].kind)
                     ? all_messages_key(&c->r[i])
                     : hash64(c->r[i].kind, strlen(c->r[i].kind), 5) | 1;
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        bool seen = false;
        if (!key[i] || !used_up_by_reasoning(r))
            continue;
        for (size_t j = 0; j < i && !seen; j++)
            seen = key[j] == key[i] && used_up_by_reasoning(&c->r[j]);
        if (seen)
            continue;
        size_t retries = 0;
        for (size_t j = i + 1; j < c->n; j++)
            retries += key[j] == key[i];
        json_t *mt = json_object_get(r->x->req_body, "max_tokens");
        if (!mt)
            mt = json_object_get(r->x->req_body, "max_completion_tokens");
        /* the harness needed the text when a side request's answer was
         * lost, when the conversation went on, or when it sent a request
         * of a conversation again; a lone request nobody followed up, and
         * a one-shot question (no history) a stateless client asks again
         * and again, are only noted */
        bool went_on = false, history = false;
        for (size_t j = i + 1; j < c->n && !went_on; j++)
            went_on = key[j] != key[i] && c->r[j].msgs &&
                      audit_is_main_kind(c->r[j].kind);
        for (size_t k = 0; k < r->nmsg && !history; k++)
            history = r->mrole[k] == AROLE_ASSISTANT;
        bool needed = !audit_is_main_kind(r->kind) || went_on ||
                      (retries && (history || r->users > 1));
        audit_finding_add(
            c, needed ? AUDIT_WARN : AUDIT_INFO, "reasoning.budget", r,
            json_pack("{s:s, s:O, s:I, s:I, s:I}", "kind", r->kind,
                      "max_tokens", mt ? mt : json_null(), "reasoning_bytes",
                      (json_int_t)strlen(r->reasoning), "completion_tokens",
                      (json_int_t)r->completion_tokens, "retries",
                      (json_int_t)retries),
            /* a side request's later ones are others of its kind, each
             * worded for its own turn, not this request sent again */
            audit_is_main_kind(r->kind)
                ? "%s reply empty: reasoning (%zu bytes) used all of "
                  "max_tokens %lld; the harness sent it again %zu time%s"
                : "%s reply empty: reasoning (%zu bytes) used all of "
                  "max_tokens %lld; %zu more request%s of this kind followed",
            r->kind, strlen(r->reasoning), (long long)json_integer_value(mt),
            retries, plural_s(retries));
    }
    free(key);
}

void audit_rule_reasoning(struct actx *c)
{
    budget(c);
    unsigned counts[2][R_NSTATES] = {{0}};
    unsigned total = 0;
    json_t *echoes = json_object();
    for (size_t i = 0; i < c->n; i++)
        if (c->r[i].msgs && audit_is_main_kind(c->r[i].kind))
            one_request(c, echoes, i, counts);
    json_decref(echoes);
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
    audit_finding_add(
        c, AUDIT_INFO, "reasoning.sent", NULL, ev,
        "earlier reasoning sent back: with tools %u equal, %u "
        "dropped, %u empty, %u inline, %u changed; without tools %u "
        "equal, %u dropped, %u empty, %u inline, %u changed",
        counts[1][0], counts[1][1], counts[1][2], counts[1][3], counts[1][4],
        counts[0][0], counts[0][1], counts[0][2], counts[0][3], counts[0][4]);
}
