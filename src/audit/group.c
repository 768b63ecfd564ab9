/*
 * group: sessions for traffic that carries no session header. record keys
 * such a request by its first system and user message (a "p:" key), which
 * breaks as soon as a harness or gateway edits the front of the history:
 * a window, a dropped turn, a summary in place of the head. Here the "p:"
 * sessions of a set are regrouped by structure first: a request whose
 * messages extend all of a session's latest request (and its reply, when
 * sent back) continues that session; one equal to an earlier request is a
 * retry of it, unless more conversations later grow from that same start
 * than sessions hold it (identical first messages of separate
 * conversations). Only then by what the requests share: a request joins
 * the session that last carried one of its user turns or assistant replies
 * (the replies of a session's requests count, so the summary a compaction
 * request produced ties the request after it to the session). A lone first
 * message is no evidence by itself. System prompts, tool lists and tool
 * results never vote: every session of one harness shares the first two,
 * and the last are edited in place. The rule and its limits are in
 * docs/AUDIT.md.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
 * distinct message is read once. k is the voting key (0: never votes), f
 * the whole message's key (every role) for the structural match. */
struct pmemo {
    json_t **p;
    uint64_t *k, *f;
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

/* The whole message as a key: its role, its text (an inline <think> block
 * left out, as a harness sending a reply back may drop it), the ids of its
 * tool calls and the call a tool result answers. An assistant message's
 * key equals reply_key() of the reply it sends back. */
static uint64_t full_key(json_t *m)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    char tag = !role                        ? 'o'
               : !strcmp(role, "user")      ? 'u'
               : !strcmp(role, "assistant") ? 'a'
               : !strcmp(role, "system")    ? 's'
               : !strcmp(role, "tool")      ? 't'
                                            : 'o';
    char *t = audit_msg_text(m);
    const char *body = t, *end = strstr(t, "</think>");
    if (tag == 'a' && !strncmp(t, "<think>", 7) && end)
        body = end + 8;
    uint64_t k = text_key(tag, body,
                          tag == 'a' ? json_object_get(m, "tool_calls") : NULL);
    const char *call = json_string_value(json_object_get(m, "tool_call_id"));
    if (call)
        k = hash_mix2(k, hash64(call, strlen(call), 4));
    free(t);
    return k;
}

/* The key the reply of x has when sent back as an assistant message; 0
 * when it has neither text nor tool calls. */
static uint64_t reply_key(const struct xchg *x)
{
    const char *content =
        json_string_value(json_object_get(x->reply, "content"));
    json_t *calls = json_object_get(x->reply, "tool_calls");
    if (!(content && *content) && !json_array_size(calls))
        return 0;
    return text_key('a', content ? content : "", calls);
}

static size_t memo_slot(struct pmemo *mm, json_t *m)
{
    if (2 * (mm->n + 1) > mm->cap) {
        struct pmemo old = *mm;
        mm->cap = old.cap ? 2 * old.cap : 1024;
        mm->p = xcalloc(mm->cap, sizeof(*mm->p));
        mm->k = xcalloc(mm->cap, sizeof(*mm->k));
        mm->f = xcalloc(mm->cap, sizeof(*mm->f));
        for (size_t i = 0; i < old.cap; i++)
            if (old.p[i]) {
                size_t j =
                    hash_mix64((uint64_t)(uintptr_t)old.p[i]) & (mm->cap - 1);
                while (mm->p[j])
                    j = (j + 1) & (mm->cap - 1);
                mm->p[j] = old.p[i];
                mm->k[j] = old.k[i];
                mm->f[j] = old.f[i];
            }
        free(old.p);
        free(old.k);
        free(old.f);
    }
    size_t j = hash_mix64((uint64_t)(uintptr_t)m) & (mm->cap - 1);
    while (mm->p[j] && mm->p[j] != m)
        j = (j + 1) & (mm->cap - 1);
    if (!mm->p[j]) {
        mm->p[j] = m;
        mm->k[j] = message_key(m);
        mm->f[j] = full_key(m);
        mm->n++;
    }
    return j;
}

struct group {
    char *from; /* record's key of its first exchange */
    struct xchg **x;
    size_t n, alloc;
    size_t active; /* sequence number of its latest exchange */
    long tip;      /* index of its latest main request, -1 none */
};

/* A request's structure: h[k] is the key of its first k messages (h[0] a
 * seed), reply the key of its reply sent back (0: none). */
struct shape {
    uint64_t *h;
    char *role; /* 'u', 'a', ... per message */
    size_t n;
    uint64_t reply;
    bool side;  /* a title or compaction request: never a tip */
    bool fresh; /* one user message, no history */
};

struct regroup {
    struct group *g;
    size_t n, alloc;
    struct kmap keys;
    struct kmap ends; /* h[n] and h[n] + reply of main requests -> group */
    struct pmemo memo;
    struct shape *sh; /* per request, in the order placed */
    size_t nsh;
    uint64_t *rk; /* the current request's keys */
    size_t rn, rcap;
};

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
    g->tip = -1;
    return (int)rg->n++;
}

static void group_add(struct group *g, struct xchg *x, size_t seq)
{
    if (g->n == g->alloc) {
        g->alloc = g->alloc ? 2 * g->alloc : 16;
        g->x = xrealloc(g->x, g->alloc * sizeof(*g->x));
    }
    g->x[g->n++] = x;
    if (seq > g->active) /* a title placed after the turn it names */
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

/* How far request i extends request t: t's messages and its reply when
 * i sends it back next (n_t + 1), t's messages alone (n_t), or 0 when i
 * does not carry all of t's messages. */
static size_t extends(const struct shape *i, const struct shape *t)
{
    if (t->n > i->n || i->h[t->n] != t->h[t->n])
        return 0;
    if (t->reply && t->n < i->n &&
        i->h[t->n + 1] == hash_mix2(t->h[t->n], t->reply))
        return t->n + 1;
    return t->n;
}

/* Whether request j carries all of request p's messages and more. */
static bool grows(const struct shape *j, const struct shape *p)
{
    return !j->side && j->n > p->n && j->h[p->n] == p->h[p->n];
}

/* The conversations that grow from request i's messages after it: the
 * requests after i that carry them and more, and that no later one of
 * those carries in turn (each conversation's last request; requests sent
 * again count once). At most LOOKAHEAD requests ahead are read:
 * conversations that start alike part within a few turns. Fills leaf[]
 * (at most 64) and returns how many. */
#define LOOKAHEAD 512
static size_t conversations_from(const struct regroup *rg, size_t i,
                                 size_t leaf[64])
{
    size_t f[LOOKAHEAD], nf = 0, nl = 0;
    for (size_t j = i + 1; j < rg->nsh && nf < LOOKAHEAD; j++)
        if (grows(&rg->sh[j], &rg->sh[i]))
            f[nf++] = j;
    for (size_t a = 0; a < nf && nl < 64; a++) {
        const struct shape *ja = &rg->sh[f[a]];
        bool inner = false, dup = false;
        for (size_t b = 0; b < nf && !inner; b++)
            inner = b != a && grows(&rg->sh[f[b]], ja);
        for (size_t q = 0; q < nl && !inner && !dup; q++)
            dup = rg->sh[leaf[q]].n == ja->n &&
                  rg->sh[leaf[q]].h[ja->n] == ja->h[ja->n];
        if (!inner && !dup)
            leaf[nl++] = f[a];
    }
    return nl;
}

/* Request i equals an earlier request: a retry, or the start of another
 * conversation? Another one when more conversations grow from its
 * messages after it than sessions hold them and go on: a session whose
 * latest request is equal to i or carries all of it, and which one of
 * those conversations continues. */
static bool starts_another(const struct regroup *rg, size_t i)
{
    size_t leaf[64], going_on = 0;
    size_t nl = conversations_from(rg, i, leaf);
    const struct shape *me = &rg->sh[i];
    for (size_t g = 0; g < rg->n && going_on < nl; g++) {
        long t = rg->g[g].tip;
        if (t < 0)
            continue;
        const struct shape *tip = &rg->sh[t];
        if (tip->n < me->n || tip->h[me->n] != me->h[me->n])
            continue;
        bool continued = false;
        for (size_t q = 0; q < nl && !continued; q++)
            continued = grows(&rg->sh[leaf[q]], tip) ||
                        (rg->sh[leaf[q]].n == tip->n &&
                         rg->sh[leaf[q]].h[tip->n] == tip->h[tip->n]);
        going_on += continued;
    }
    return nl > going_on;
}

/* The session request i continues by structure: -1 when structure does
 * not decide, -2 for a new session.
 * - A request that carries all of a session's latest request (and its
 *   reply, when sent back) and more continues it; the first such session
 *   when several are still alike.
 * - A request equal to an earlier one is a retry (of the latest such
 *   session), unless it starts another conversation (starts_another):
 *   then it continues a session whose latest request it extends, or
 *   starts a new one.
 * - Else the one session that had an earlier request it extends (a
 *   conversation taken back to an earlier turn). */
static int structural(struct regroup *rg, size_t i)
{
    const struct shape *me = &rg->sh[i];
    int eq = -1, ext = -1;
    size_t ext_k = 0;
    if (!me->n)
        return -1;
    for (size_t g = 0; g < rg->n; g++) {
        if (rg->g[g].tip < 0)
            continue;
        size_t k = extends(me, &rg->sh[rg->g[g].tip]);
        if (k && k == me->n) {
            if (eq < 0 || rg->g[g].active > rg->g[eq].active)
                eq = (int)g;
        } else if (k > ext_k) {
            ext = (int)g;
            ext_k = k;
        }
    }
    if (ext >= 0 && eq < 0)
        return ext;
    if (me->side)
        return -1;
    size_t e = kmap_find(&rg->ends, me->h[me->n]);
    if (eq >= 0 || e != (size_t)-1) {
        if (starts_another(rg, i))
            return ext >= 0 ? ext : -2;
        return eq >= 0 ? eq : rg->ends.group[e];
    }
    for (size_t k = me->n; k-- > 1;) {
        e = kmap_find(&rg->ends, me->h[k]);
        if (e != (size_t)-1)
            return rg->ends.shared[e] ? -1 : rg->ends.group[e];
    }
    return -1;
}

/* The shape of x; under_way is the latest earlier request that is not a
 * side request (the conversation under way, which a title request
 * quotes), or NULL. */
static void shape_of(struct regroup *rg, struct xchg *x,
                     const struct xchg *under_way, struct shape *sh)
{
    size_t n = xmsg_n(x), users = 0, others = 0;
    sh->n = n;
    sh->h = xcalloc(n + 1, sizeof(*sh->h));
    sh->role = xcalloc(n + 1, 1);
    sh->h[0] = 0x5eed5eed;
    for (size_t i = 0; i < n; i++) {
        json_t *m = xmsg(x, i);
        size_t j = memo_slot(&rg->memo, m);
        const char *role = json_string_value(json_object_get(m, "role"));
        sh->role[i] = role && *role ? role[0] : 'o';
        users += sh->role[i] == 'u';
        others += sh->role[i] == 'a' || sh->role[i] == 't';
        sh->h[i + 1] = hash_mix2(sh->h[i], rg->memo.f[j]);
    }
    sh->reply = reply_key(x);
    sh->side = is_side(x, under_way);
    sh->fresh = !sh->side && users <= 1 && !others;
}

/* Single-turn: one or two user messages, no assistant message or tool
 * result (audit_is_title decides the rest). */
static bool title_shaped(const struct shape *sh)
{
    size_t users = 0;
    for (size_t i = 0; i < sh->n; i++) {
        if (sh->role[i] == 'a' || sh->role[i] == 't')
            return false;
        users += sh->role[i] == 'u';
    }
    return users >= 1 && users <= 2;
}

/* How many later requests a title-shaped one that quotes nothing earlier
 * is compared with: opencode sends its title request beside the first
 * turn, before that turn's request. */
#define AHEAD 8

/* Places x (the seq-th request); into group force when force >= 0 (a
 * title request sent before the turn it quotes, placed after it). */
static void place(struct regroup *rg, struct xchg *x, size_t seq,
                  const char *from, int *last_active, int force)
{
    size_t i;
    json_t *m;
    const struct shape *sh = &rg->sh[seq - 1];
    rg->rn = 0;
    for (i = 0; (m = xmsg(x, i)); i++)
        add_key(rg, rg->memo.k[memo_slot(&rg->memo, m)]);
    int g = force >= 0 ? force : structural(rg, seq - 1);
    /* no structure decides: what the request shares with a session, but
     * a lone first message is no evidence (a stateless client, or a new
     * conversation that starts like another) */
    if (g == -1 && !sh->fresh) {
        g = best_group(rg, false);
        if (g < 0)
            g = best_group(rg, true);
    }
    if (g == -1 && sh->side && *last_active >= 0 && force < 0)
        g = *last_active; /* serves the conversation under way */
    if (g < 0)
        g = new_group(rg, from);
    group_add(&rg->g[g], x, seq);
    *last_active = g;
    if (!sh->side) {
        rg->g[g].tip = (long)(seq - 1);
        kmap_put(&rg->ends, sh->h[sh->n], g);
        if (sh->reply)
            kmap_put(&rg->ends, hash_mix2(sh->h[sh->n], sh->reply), g);
    }
    for (size_t k = 0; k < rg->rn; k++)
        kmap_put(&rg->keys, rg->rk[k], g);
    json_t *reply = x->reply;
    const char *content = json_string_value(json_object_get(reply, "content"));
    json_t *calls = json_object_get(reply, "tool_calls");
    if ((content && *content) || json_array_size(calls))
        kmap_put(&rg->keys, text_key('a', content ? content : "", calls), g);
    /* a summary comes back as a user message too (Continue, opencode) */
    if (content && *content)
        kmap_put(&rg->keys, text_key('u', content, NULL), g);
}

/* Places all[i], then the title requests sent before it that quote it
 * (ahead[k] == i) into its group. */
static void place_with(struct regroup *rg, struct xchg **all, const long *ahead,
                       size_t i, int force, int *last_active)
{
    place(rg, all[i], i + 1, all[i]->session ? all[i]->session : "",
          last_active, force);
    int g = *last_active;
    for (size_t k = i > AHEAD ? i - AHEAD : 0; k < i; k++)
        if (ahead[k] == (long)i)
            place_with(rg, all, ahead, k, g, last_active);
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
    rg.sh = xcalloc(n, sizeof(*rg.sh));
    rg.nsh = n;
    long *ahead = xcalloc(n, sizeof(*ahead));
    const struct xchg *under_way = NULL;
    for (size_t i = 0; i < n; i++) {
        shape_of(&rg, all[i], under_way, &rg.sh[i]);
        ahead[i] = -1;
        if (!rg.sh[i].side && title_shaped(&rg.sh[i]))
            for (size_t j = i + 1; j < n && j <= i + AHEAD; j++)
                if (audit_is_title(all[i], all[j])) {
                    ahead[i] = (long)j; /* sent before the turn it names */
                    rg.sh[i].side = true;
                    rg.sh[i].fresh = false;
                    break;
                }
        if (!rg.sh[i].side)
            under_way = all[i];
    }
    int last_active = -1;
    for (size_t i = 0; i < n; i++)
        if (ahead[i] < 0)
            place_with(&rg, all, ahead, i, -1, &last_active);
    free(ahead);
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
        /* in time order: a title request placed after the turn it
         * quotes was sent before it */
        if (gr->n > 1)
            qsort(gr->x, gr->n, sizeof(*gr->x), by_start);
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
    free(rg.ends.key);
    free(rg.ends.group);
    free(rg.ends.shared);
    for (size_t i = 0; i < rg.nsh; i++) {
        free(rg.sh[i].h);
        free(rg.sh[i].role);
    }
    free(rg.sh);
    free(rg.memo.p);
    free(rg.memo.k);
    free(rg.memo.f);
    free(rg.rk);
    free(all);
}

/* ---- subagents ---- */

/* The names harnesses give the tool that starts a subagent, compared
 * without case: opencode's "task", Claude Code's "Task", Continue's
 * "Subagent". */
static const char *const task_tools[] = {"task", "agent", "spawn_agent",
                                         "subagent", NULL};

static bool is_task_tool(const char *name)
{
    for (int i = 0; name && task_tools[i]; i++)
        if (!strcasecmp(name, task_tools[i]))
            return true;
    return false;
}

/* The task call whose prompt the subagent's first message carries: the
 * same text, or the prompt followed by a block the harness appended after
 * a line break (Kilo adds <environment_details>). A prompt shorter than
 * 16 bytes is matched only whole: a short word is no evidence. */
static json_t *call_for_text(json_t *calls, const char *text)
{
    json_t *hit = json_object_get(calls, text), *v;
    const char *prompt;
    if (hit)
        return hit;
    json_object_foreach(calls, prompt, v)
    {
        size_t n = strlen(prompt);
        if (n >= 16 && !strncmp(text, prompt, n) &&
            (text[n] == '\n' || text[n] == '\r'))
            return v;
    }
    return NULL;
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
        json_t *hit = text ? call_for_text(calls, text) : NULL;
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
