/*
 * group: sessions for traffic that carries no session header. record keys
 * such a request by its first system and user message (a "p:" key), which
 * breaks as soon as a harness or gateway edits the front of the history:
 * a window, a dropped turn, a summary in place of the head. Here the "p:"
 * sessions of a set are regrouped by what the requests share: a request
 * joins the session that last carried one of its user turns or assistant
 * replies (the replies of a session's requests count, so the summary a
 * compaction request produced ties the request after it to the session).
 * System prompts, tool lists and tool results never tie requests together:
 * every session of one harness shares the first two, and the last are
 * edited in place. The rule and its limits are in docs/AUDIT.md.
 */
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/hash.h"
#include "core/xalloc.h"

/* key -> the group that last carried it; shared once two groups had it */
struct kmap {
    uint64_t *key;
    int *group;
    bool *shared;
    size_t n, cap;
};

static size_t kmap_slot(const struct kmap *m, uint64_t k)
{
    size_t j = hash_mix64(k) & (m->cap - 1);
    while (m->key[j] && m->key[j] != k)
        j = (j + 1) & (m->cap - 1);
    return j;
}

static void kmap_grow(struct kmap *m)
{
    struct kmap old = *m;
    m->cap = old.cap ? 2 * old.cap : 1024;
    m->n = old.n;
    m->key = xcalloc(m->cap, sizeof(*m->key));
    m->group = xcalloc(m->cap, sizeof(*m->group));
    m->shared = xcalloc(m->cap, sizeof(*m->shared));
    for (size_t i = 0; i < old.cap; i++)
        if (old.key[i]) {
            size_t j = kmap_slot(m, old.key[i]);
            m->key[j] = old.key[i];
            m->group[j] = old.group[i];
            m->shared[j] = old.shared[i];
        }
    free(old.key);
    free(old.group);
    free(old.shared);
}

static void kmap_put(struct kmap *m, uint64_t k, int g)
{
    if (2 * (m->n + 1) > m->cap)
        kmap_grow(m);
    size_t j = kmap_slot(m, k);
    if (!m->key[j]) {
        m->key[j] = k;
        m->n++;
    } else if (m->group[j] != g) {
        m->shared[j] = true;
    }
    m->group[j] = g;
}

/* The slot of k, or (size_t)-1 when absent. */
static size_t kmap_find(const struct kmap *m, uint64_t k)
{
    if (!m->cap)
        return (size_t)-1;
    size_t j = kmap_slot(m, k);
    return m->key[j] ? j : (size_t)-1;
}

/* Keys of messages by address: the set shares equal messages, so each
 * distinct message is read once. */
struct pmemo {
    json_t **p;
    uint64_t *k;
    size_t n, cap;
};

static uint64_t text_key(char tag, const char *text, json_t *calls)
{
    uint64_t h = hash64(text, strlen(text), (uint64_t)tag);
    size_t i;
    json_t *tc;
    json_array_foreach(calls, i, tc)
    {
        const char *id = json_string_value(json_object_get(tc, "id"));
        if (id)
            h = hash_mix2(h, hash64(id, strlen(id), 3));
    }
    return h ? h : 1;
}

/* 0 for messages that never tie requests (system, tool, empty). */
static uint64_t message_key(json_t *m)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    char tag;
    if (role && !strcmp(role, "user"))
        tag = 'u';
    else if (role && !strcmp(role, "assistant"))
        tag = 'a';
    else
        return 0;
    char *t = audit_msg_text(m);
    /* an inline <think> block is not part of the reply's text */
    const char *body = t, *end = strstr(t, "</think>");
    if (!strncmp(t, "<think>", 7) && end)
        body = end + 8;
    json_t *calls = tag == 'a' ? json_object_get(m, "tool_calls") : NULL;
    uint64_t k =
        *body || json_array_size(calls) ? text_key(tag, body, calls) : 0;
    free(t);
    return k;
}

static uint64_t memo_key(struct pmemo *mm, json_t *m)
{
    if (2 * (mm->n + 1) > mm->cap) {
        struct pmemo old = *mm;
        mm->cap = old.cap ? 2 * old.cap : 1024;
        mm->p = xcalloc(mm->cap, sizeof(*mm->p));
        mm->k = xcalloc(mm->cap, sizeof(*mm->k));
        for (size_t i = 0; i < old.cap; i++)
            if (old.p[i]) {
                size_t j =
                    hash_mix64((uint64_t)(uintptr_t)old.p[i]) & (mm->cap - 1);
                while (mm->p[j])
                    j = (j + 1) & (mm->cap - 1);
                mm->p[j] = old.p[i];
                mm->k[j] = old.k[i];
            }
        free(old.p);
        free(old.k);
    }
    size_t j = hash_mix64((uint64_t)(uintptr_t)m) & (mm->cap - 1);
    while (mm->p[j] && mm->p[j] != m)
        j = (j + 1) & (mm->cap - 1);
    if (!mm->p[j]) {
        mm->p[j] = m;
        mm->k[j] = message_key(m);
        mm->n++;
    }
    return mm->k[j];
}

struct group {
    char *from; /* record's key of its first exchange */
    struct xchg **x;
    size_t n, alloc;
    size_t active; /* sequence number of its latest exchange */
};

struct regroup {
    struct group *g;
    size_t n, alloc;
    struct kmap keys;
    struct pmemo memo;
    uint64_t *rk; /* the current request's keys */
    size_t rn, rcap;
};

/* ---- subagents ---- */

static const char *const task_tools[] = {"task",        "Task",     "agent",
                                         "spawn_agent", "subagent", NULL};

static bool is_task_tool(const char *name)
{
    for (int i = 0; name && task_tools[i]; i++)
        if (!strcmp(name, task_tools[i]))
            return true;
    return false;
}

static const char *first_user_text(const struct xchg *x, char **owned)
{
    size_t i;
    json_t *m;
    for (i = 0; (m = xmsg(x, i)); i++) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "user"))
            return *owned = audit_msg_text(m);
    }
    return NULL;
}

/* A side request: a summary request (record's kind compaction) or a title
 * request by structure serving the conversation from belongs to
 * (audit_is_title): a user text that only mentions a title, or a system
 * prompt about titles, makes none. */
static bool is_side(const struct xchg *x, const struct xchg *from)
{
    return (x->kind && !strcmp(x->kind, "compaction")) ||
           audit_is_title(x, from);
}

static int new_group(struct regroup *rg, const char *from)
{
    if (rg->n == rg->alloc) {
        rg->alloc = rg->alloc ? 2 * rg->alloc : 16;
        rg->g = xrealloc(rg->g, rg->alloc * sizeof(*rg->g));
    }
    struct group *g = &rg->g[rg->n];
    memset(g, 0, sizeof(*g));
    g->from = xstrdup(from);
    return (int)rg->n++;
}

static void group_add(struct group *g, struct xchg *x, size_t seq)
{
    if (g->n == g->alloc) {
        g->alloc = g->alloc ? 2 * g->alloc : 16;
        g->x = xrealloc(g->x, g->alloc * sizeof(*g->x));
    }
    g->x[g->n++] = x;
    g->active = seq;
}

static void add_key(struct regroup *rg, uint64_t k)
{
    if (!k)
        return;
    if (rg->rn == rg->rcap) {
        rg->rcap = rg->rcap ? 2 * rg->rcap : 64;
        rg->rk = xrealloc(rg->rk, rg->rcap * sizeof(*rg->rk));
    }
    rg->rk[rg->rn++] = k;
}

/* The group that shares the most keys with the current request, counting
 * keys that only one group ever had; when none, keys several groups had.
 * Ties go to the group active most recently. -1 when none shares any. */
static int best_group(struct regroup *rg, bool use_shared)
{
    int best = -1;
    size_t best_votes = 0;
    /* groups voted for: few per request, a short list does */
    int cand[16];
    size_t votes[16], nc = 0;
    for (size_t i = 0; i < rg->rn; i++) {
        size_t j = kmap_find(&rg->keys, rg->rk[i]);
        if (j == (size_t)-1 || rg->keys.shared[j] != use_shared)
            continue;
        int g = rg->keys.group[j];
        size_t c = 0;
        while (c < nc && cand[c] != g)
            c++;
        if (c == nc) {
            if (nc == 16)
                continue;
            cand[nc] = g;
            votes[nc++] = 0;
        }
        votes[c]++;
    }
    for (size_t c = 0; c < nc; c++)
        if (votes[c] > best_votes ||
            (votes[c] == best_votes &&
             rg->g[cand[c]].active > rg->g[best].active)) {
            best = cand[c];
            best_votes = votes[c];
        }
    return best;
}

static void place(struct regroup *rg, struct xchg *x, size_t seq,
                  const char *from, int *last_active)
{
    size_t i, users = 0, assistants = 0;
    json_t *m;
    rg->rn = 0;
    for (i = 0; (m = xmsg(x, i)); i++) {
        const char *role = json_string_value(json_object_get(m, "role"));
        users += role && !strcmp(role, "user");
        assistants += role && !strcmp(role, "assistant");
        add_key(rg, memo_key(&rg->memo, m));
    }
    int g = -1;
    /* a side request serves the conversation under way: a title request
     * carries what its latest exchange sent or got */
    const struct group *la = *last_active >= 0 ? &rg->g[*last_active] : NULL;
    bool side = is_side(x, la && la->n ? la->x[la->n - 1] : NULL);
    /* a one-shot request (one user message, no history) is its own
     * session: a stateless client repeating it is not one conversation */
    bool one_shot = !side && users <= 1 && !assistants;
    if (!one_shot) {
        g = best_group(rg, false);
        if (g < 0)
            g = best_group(rg, true);
    }
    if (g < 0 && side && *last_active >= 0)
        g = *last_active; /* serves the conversation under way */
    if (g < 0)
        g = new_group(rg, from);
    group_add(&rg->g[g], x, seq);
    *last_active = g;
    for (size_t k = 0; k < rg->rn; k++)
        kmap_put(&rg->keys, rg->rk[k], g);
    json_t *reply = x->reply;
    const char *content = json_string_value(json_object_get(reply, "content"));
    json_t *calls = json_object_get(reply, "tool_calls");
    if ((content && *content) || json_array_size(calls))
        kmap_put(&rg->keys, text_key('a', content ? content : "", calls), g);
}

static int by_start(const void *pa, const void *pb)
{
    const struct xchg *a = *(struct xchg *const *)pa;
    const struct xchg *b = *(struct xchg *const *)pb;
    if (a->started != b->started && a->started > 0 && b->started > 0)
        return a->started < b->started ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static bool is_prefix_keyed(const char *id)
{
    return !strncmp(id, "p:", 2);
}

void audit_set_regroup(struct audit_set *set)
{
    struct regroup rg = {0};
    struct xchg **all = NULL;
    size_t n = 0, alloc = 0, kept = 0;
    for (size_t i = 0; i < set->n; i++) {
        struct audit_session *s = &set->s[i];
        if (!is_prefix_keyed(s->id))
            continue;
        for (size_t j = 0; j < s->n; j++) {
            if (n == alloc) {
                alloc = alloc ? 2 * alloc : 64;
                all = xrealloc(all, alloc * sizeof(*all));
            }
            all[n++] = s->x[j];
        }
    }
    if (!n)
        return;
    qsort(all, n, sizeof(*all), by_start);
    int last_active = -1;
    for (size_t i = 0; i < n; i++)
        place(&rg, all[i], i + 1, all[i]->session ? all[i]->session : "",
              &last_active);
    /* the header sessions stay as they were, in their order */
    for (size_t i = 0; i < set->n; i++) {
        struct audit_session *s = &set->s[i];
        if (is_prefix_keyed(s->id)) {
            free(s->x);
            free(s->id);
            continue;
        }
        set->s[kept++] = *s;
    }
    set->n = kept;
    for (size_t g = 0; g < rg.n; g++) {
        struct group *gr = &rg.g[g];
        size_t same = 0;
        for (size_t h = 0; h < g; h++)
            same += !strcmp(rg.g[h].from, gr->from);
        if (set->n == set->alloc) {
            set->alloc = set->alloc ? 2 * set->alloc : 8;
            set->s = xrealloc(set->s, set->alloc * sizeof(*set->s));
        }
        struct audit_session *s = &set->s[set->n++];
        memset(s, 0, sizeof(*s));
        s->id =
            same ? xasprintf("%s#%zu", gr->from, same + 1) : xstrdup(gr->from);
        s->x = gr->x;
        s->n = gr->n;
        s->alloc = gr->alloc;
        for (size_t j = 0; j < gr->n; j++) {
            free(gr->x[j]->session);
            gr->x[j]->session = xstrdup(s->id);
        }
    }
    for (size_t g = 0; g < rg.n; g++)
        free(rg.g[g].from);
    free(rg.g);
    free(rg.keys.key);
    free(rg.keys.group);
    free(rg.keys.shared);
    free(rg.memo.p);
    free(rg.memo.k);
    free(rg.rk);
    free(all);
}

/* Whether session p sent a tool result for call id. */
static bool has_result(const struct audit_session *p, const char *id)
{
    for (size_t j = p->n; j-- > 0;) {
        size_t i;
        json_t *m;
        for (i = 0; (m = xmsg(p->x[j], i)); i++) {
            const char *c =
                json_string_value(json_object_get(m, "tool_call_id"));
            if (c && !strcmp(c, id))
                return true;
        }
    }
    return false;
}

void audit_set_link_subagents(struct audit_set *set)
{
    /* prompt text -> [session index, call id] of the task calls seen */
    json_t *calls = json_object();
    for (size_t s = 0; s < set->n; s++)
        for (size_t j = 0; j < set->s[s].n; j++) {
            size_t i;
            json_t *tc;
            json_array_foreach(
                json_object_get(set->s[s].x[j]->reply, "tool_calls"), i, tc)
            {
                json_t *f = json_object_get(tc, "function");
                const char *id = json_string_value(json_object_get(tc, "id"));
                if (!id || !is_task_tool(
                               json_string_value(json_object_get(f, "name"))))
                    continue;
                json_t *a = json_loads(
                    json_string_value(json_object_get(f, "arguments")) ?: "", 0,
                    NULL);
                const char *prompt =
                    json_string_value(json_object_get(a, "prompt"));
                if (prompt && !json_object_get(calls, prompt))
                    json_object_set_new(calls, prompt,
                                        json_pack("[I, s]", (json_int_t)s, id));
                json_decref(a);
            }
        }
    for (size_t s = 0; s < set->n && json_object_size(calls); s++) {
        struct audit_session *sub = &set->s[s];
        char *text = NULL;
        for (size_t j = 0; j < sub->n && !text; j++)
            first_user_text(sub->x[j], &text);
        json_t *hit = text ? json_object_get(calls, text) : NULL;
        free(text);
        size_t ps = (size_t)json_integer_value(json_array_get(hit, 0));
        if (!hit || ps == s)
            continue;
        const char *id = json_string_value(json_array_get(hit, 1));
        sub->parent = xstrdup(set->s[ps].id);
        sub->parent_call = xstrdup(id);
        sub->result_returned = has_result(&set->s[ps], id);
    }
    json_decref(calls);
}

/* ---- side sessions ---- */

/* Whether every exchange of s is a side request serving session to: a
 * summary request, or a title request carrying what one of to's exchanges
 * sent or got. */
static bool side_only(const struct audit_session *s,
                      const struct audit_session *to)
{
    for (size_t j = 0; j < s->n; j++) {
        bool side = s->x[j]->kind && !strcmp(s->x[j]->kind, "compaction");
        for (size_t k = to->n; !side && k-- > 0;)
            side = audit_is_title(s->x[j], to->x[k]);
        if (!side)
            return false;
    }
    return s->n > 0;
}

/* Moves the exchanges of side session s into to (a session that is not
 * side-only) and frees what is left of s. */
static void attach_to(struct audit_session *s, struct audit_session *to)
{
    for (size_t j = 0; j < s->n; j++) {
        if (to->n == to->alloc) {
            to->alloc = to->alloc ? 2 * to->alloc : 16;
            to->x = xrealloc(to->x, to->alloc * sizeof(*to->x));
        }
        free(s->x[j]->session);
        s->x[j]->session = xstrdup(to->id);
        to->x[to->n++] = s->x[j];
    }
    free(s->x);
    free(s->id);
    free(s->parent);
    free(s->parent_call);
    s->x = NULL;
    s->id = s->parent = s->parent_call = NULL;
    s->n = 0;
}

/* Whether side session id names session to exactly: "title-" (or
 * "summary-", "compaction-") followed by to's whole id, as Kilo sends its
 * title request beside "ses_X" as "title-ses_X". An id that merely
 * contains another ("ses_12" and "ses_1") names nothing. */
static bool names_session(const char *id, const char *to)
{
    static const char *const pre[] = {"title-", "summary-", "compaction-"};
    for (size_t i = 0; i < sizeof(pre) / sizeof(*pre); i++) {
        size_t k = strlen(pre[i]);
        if (!strncmp(id, pre[i], k) && !strcmp(id + k, to))
            return true;
    }
    return false;
}

/* Two passes: every side session is attached while the array is intact
 * (a target is never side-only, so never removed), then the array is
 * compacted. Compacting while scanning read moved and freed slots. */
void audit_set_attach_side(struct audit_set *set)
{
    bool *gone = xcalloc(set->n ? set->n : 1, sizeof(*gone));
    for (size_t i = 0; i < set->n; i++) {
        struct audit_session *s = &set->s[i];
        for (size_t k = 0; k < set->n; k++) {
            struct audit_session *to = &set->s[k];
            if (k == i || gone[k] || !to->id || !*to->id || !s->id ||
                !names_session(s->id, to->id))
                continue;
            /* named exactly, and side requests of that session by
             * structure */
            if (side_only(s, to)) {
                attach_to(s, to);
                gone[i] = true;
            }
            break;
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < set->n; i++)
        if (!gone[i])
            set->s[kept++] = set->s[i];
    set->n = kept;
    free(gone);
}
