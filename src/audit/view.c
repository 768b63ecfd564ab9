/*
 * view: the per-request view every rule reads (struct areq), computed once
 * per session: kind, model, per-message hashes with reasoning left out,
 * the conversation predecessor of each request and its user turn. The
 * rules are run by audit.c; the message and JSON helpers are in msg.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "audit/audit_int.h"
#include "core/hash.h"
#include "core/xalloc.h"

bool audit_is_main_kind(const char *kind)
{
    return !strcmp(kind, "main") || !strcmp(kind, "subagent");
}

/* True when needle occurs in the first n bytes of s (case-insensitive). */
static bool head_has(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; s[i] && i + k <= n; i++)
        if (!strncasecmp(s + i, needle, k))
            return true;
    return false;
}

static char *text_with_role(json_t *msgs, size_t n, const char *role, bool last)
{
    for (size_t k = 0; k < n; k++) {
        json_t *m = json_array_get(msgs, last ? n - 1 - k : k);
        const char *r = json_string_value(json_object_get(m, "role"));
        if (r && !strcmp(r, role))
            return audit_msg_text(m);
    }
    return xstrdup("");
}

/* Kind when the recorder left none, by the rules record uses
 * (docs/RECORD.md): side requests carry no tools; a title hint says
 * "title" early in its system prompt or asks to "generate a title"
 * (kinds_by_structure then decides by structure alone); a
 * compaction request mentions a summary early in its system prompt or
 * hands over the <conversation>. */
static const char *classify(json_t *msgs, size_t n, bool tools)
{
    const char *kind = "main";
    if (!msgs || !n)
        return "other";
    if (tools)
        return kind;
    char *sys = text_with_role(msgs, n, "system", false);
    char *first = text_with_role(msgs, n, "user", false);
    char *last = text_with_role(msgs, n, "user", true);
    if (head_has(sys, 400, "title") || head_has(first, 200, "generate a title"))
        kind = "title";
    else if (head_has(sys, 1000, "summar") ||
             head_has(last, 400, "<conversation>") ||
             head_has(last, SIZE_MAX, "summarize") ||
             head_has(last, SIZE_MAX, "summary of"))
        kind = "compaction";
    free(sys);
    free(first);
    free(last);
    return kind;
}

static uint64_t message_hash(json_t *m, size_t *bytes)
{
    bool strip = json_object_get(m, "reasoning_content") ||
                 json_object_get(m, "reasoning");
    json_t *c = strip ? json_copy(m) : json_incref(m);
    if (strip) {
        json_object_del(c, "reasoning_content");
        json_object_del(c, "reasoning");
    }
    char *s = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = s ? strlen(s) : 0;
    uint64_t h = hash64(s ? s : "", n, 0);
    free(s);
    json_decref(c);
    *bytes = n;
    return h;
}

static long usage_tokens(json_t *usage, const char *key)
{
    json_t *v = json_object_get(usage, key);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

/* Hashes of messages already seen in this build, by address: the set
 * shares equal messages (audit_set_add), so a session's history is hashed
 * once, not once per request that re-sends it. Open addressing. The role
 * is kept too: counting a request's user turns must not look each message
 * up again. */
struct memo {
    json_t **key;
    uint64_t *hash;
    size_t *bytes;
    unsigned char *role;
    size_t n, cap;
    /* the last tool list measured: the set shares equal ones too */
    json_t *tools;
    size_t tool_bytes;
};

static unsigned char role_code(json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    if (!r)
        return AROLE_OTHER;
    if (!strcmp(r, "user"))
        return AROLE_USER;
    if (!strcmp(r, "assistant"))
        return AROLE_ASSISTANT;
    if (!strcmp(r, "tool"))
        return AROLE_TOOL;
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        return AROLE_SYSTEM;
    return AROLE_OTHER;
}

static void memo_grow(struct memo *mm)
{
    struct memo old = *mm;
    mm->cap = old.cap ? 2 * old.cap : 1024;
    mm->n = 0;
    mm->key = xcalloc(mm->cap, sizeof(*mm->key));
    mm->hash = xcalloc(mm->cap, sizeof(*mm->hash));
    mm->bytes = xcalloc(mm->cap, sizeof(*mm->bytes));
    mm->role = xcalloc(mm->cap, sizeof(*mm->role));
    for (size_t i = 0; i < old.cap; i++)
        if (old.key[i]) {
            size_t j =
                hash_mix64((uint64_t)(uintptr_t)old.key[i]) & (mm->cap - 1);
            while (mm->key[j])
                j = (j + 1) & (mm->cap - 1);
            mm->key[j] = old.key[i];
            mm->hash[j] = old.hash[i];
            mm->bytes[j] = old.bytes[i];
            mm->role[j] = old.role[i];
            mm->n++;
        }
    free(old.key);
    free(old.hash);
    free(old.bytes);
    free(old.role);
}

static uint64_t memo_hash(struct memo *mm, json_t *m, size_t *bytes,
                          unsigned char *role)
{
    if (2 * (mm->n + 1) > mm->cap)
        memo_grow(mm);
    size_t j = hash_mix64((uint64_t)(uintptr_t)m) & (mm->cap - 1);
    while (mm->key[j] && mm->key[j] != m)
        j = (j + 1) & (mm->cap - 1);
    if (!mm->key[j]) {
        mm->key[j] = m;
        mm->hash[j] = message_hash(m, &mm->bytes[j]);
        mm->role[j] = role_code(m);
        mm->n++;
    }
    *bytes = mm->bytes[j];
    *role = mm->role[j];
    return mm->hash[j];
}

struct alin {
    json_t *arr;
    size_t n, cap; /* positions computed; the array's size */
    uint64_t *h;
    size_t *bytes;
    unsigned char *role;
    /* chain[k]: the hash of the first k + 1 messages; cum_*[k]: the sum
     * over the first k */
    uint64_t *chain;
    size_t *cum_bytes;
    int *cum_users, *cum_assistants;
};

/* Lineages by array address (open addressing). */
struct lmap {
    json_t **key;
    struct alin **v;
    size_t n, cap;
};

static struct alin **lmap_slot(struct lmap *m, json_t *k)
{
    if (2 * (m->n + 1) > m->cap) {
        struct lmap old = *m;
        m->cap = old.cap ? 2 * old.cap : 64;
        m->key = xcalloc(m->cap, sizeof(*m->key));
        m->v = xcalloc(m->cap, sizeof(*m->v));
        for (size_t i = 0; i < old.cap; i++)
            if (old.key[i]) {
                size_t j =
                    hash_mix64((uint64_t)(uintptr_t)old.key[i]) & (m->cap - 1);
                while (m->key[j])
                    j = (j + 1) & (m->cap - 1);
                m->key[j] = old.key[i];
                m->v[j] = old.v[i];
            }
        free(old.key);
        free(old.v);
    }
    size_t j = hash_mix64((uint64_t)(uintptr_t)k) & (m->cap - 1);
    while (m->key[j] && m->key[j] != k)
        j = (j + 1) & (m->cap - 1);
    if (!m->key[j]) {
        m->key[j] = k;
        m->n++;
    }
    return &m->v[j];
}

static struct alin *alin_new(json_t *arr)
{
    struct alin *l = xcalloc(1, sizeof(*l));
    l->arr = arr;
    l->cap = json_array_size(arr); /* final: the set is loaded */
    l->h = xcalloc(l->cap + 1, sizeof(*l->h));
    l->bytes = xcalloc(l->cap + 1, sizeof(*l->bytes));
    l->role = xcalloc(l->cap + 1, sizeof(*l->role));
    l->chain = xcalloc(l->cap + 1, sizeof(*l->chain));
    l->cum_bytes = xcalloc(l->cap + 1, sizeof(*l->cum_bytes));
    l->cum_users = xcalloc(l->cap + 1, sizeof(*l->cum_users));
    l->cum_assistants = xcalloc(l->cap + 1, sizeof(*l->cum_assistants));
    return l;
}

static void alin_free(struct alin *l)
{
    if (!l)
        return;
    free(l->h);
    free(l->bytes);
    free(l->role);
    free(l->chain);
    free(l->cum_bytes);
    free(l->cum_users);
    free(l->cum_assistants);
    free(l);
}

#define CHAIN_SEED 0x6c696e65616765ULL

/* Computes l's positions up to n. */
static void alin_fill(struct alin *l, size_t n, struct memo *mm)
{
    for (size_t k = l->n; k < n && k < l->cap; k++) {
        json_t *m = json_array_get(l->arr, k);
        l->h[k] = memo_hash(mm, m, &l->bytes[k], &l->role[k]);
        l->chain[k] = hash_mix2(k ? l->chain[k - 1] : CHAIN_SEED, l->h[k]);
        l->cum_bytes[k + 1] = l->cum_bytes[k] + l->bytes[k];
        l->cum_users[k + 1] = l->cum_users[k] + (l->role[k] == AROLE_USER);
        l->cum_assistants[k + 1] =
            l->cum_assistants[k] + (l->role[k] == AROLE_ASSISTANT);
        l->n = k + 1;
    }
}

uint64_t areq_key(const struct areq *r, size_t k)
{
    return r->lin && k && k <= r->nmsg ? r->lin->chain[k - 1] : CHAIN_SEED;
}

size_t areq_bytes(const struct areq *r, size_t k)
{
    return r->lin && k <= r->nmsg ? r->lin->cum_bytes[k] : 0;
}

/* r's view of x: its messages' hashes, bytes and roles are its lineage's
 * (the lineage of x's messages array, made on first sight), each position
 * computed once for all the requests that view it. */
static void view_one(struct areq *r, const struct xchg *x, struct memo *mm,
                     struct lmap *lm)
{
    json_t *body = x->req_body;
    json_t *msgs = xmsgs(x); /* a view: the first xmsg_n */
    json_t *tools = json_object_get(body, "tools");
    json_t *reply = x->reply;
    const char *model = json_string_value(json_object_get(body, "model"));
    r->x = x;
    r->prev = -1;
    r->msgs = msgs;
    r->nmsg = xmsg_n(x);
    r->tools = json_is_array(tools) && json_array_size(tools) > 0;
    if (tools && tools == mm->tools) {
        r->tool_bytes = mm->tool_bytes;
    } else if (tools) {
        char *t = json_dumps(tools, JSON_COMPACT | JSON_ENCODE_ANY);
        r->tool_bytes = t ? strlen(t) : 0;
        free(t);
        mm->tools = tools;
        mm->tool_bytes = r->tool_bytes;
    }
    r->model = model ? model : "";
    r->kind =
        x->kind && *x->kind ? x->kind : classify(r->msgs, r->nmsg, r->tools);
    static const uint64_t none_h[1];
    static const size_t none_b[1];
    static const unsigned char none_r[1];
    r->mhash = none_h;
    r->mbytes = none_b;
    r->mrole = none_r;
    if (msgs) {
        struct alin **slot = lmap_slot(lm, msgs);
        if (!*slot) {
            *slot = alin_new(msgs);
            r->lin_own = true;
        }
        r->lin = *slot;
        if (r->nmsg > r->lin->cap)
            r->nmsg = r->lin->cap;
        alin_fill(r->lin, r->nmsg, mm);
        r->mhash = r->lin->h;
        r->mbytes = r->lin->bytes;
        r->mrole = r->lin->role;
        r->msg_bytes = r->lin->cum_bytes[r->nmsg];
        r->users = r->lin->cum_users[r->nmsg];
    }
    r->content = json_string_value(json_object_get(reply, "content"));
    r->reasoning =
        json_string_value(json_object_get(reply, "reasoning_content"));
    if (!r->reasoning)
        r->reasoning = json_string_value(json_object_get(reply, "reasoning"));
    r->tool_calls = json_object_get(reply, "tool_calls");
    r->usage = json_object_get(reply, "usage");
    if (!json_is_object(r->usage))
        r->usage = NULL;
    r->finish = json_string_value(json_object_get(reply, "finish_reason"));
    r->prompt_tokens = usage_tokens(r->usage, "prompt_tokens");
    r->completion_tokens = usage_tokens(r->usage, "completion_tokens");
}

size_t areq_common(const struct areq *a, const struct areq *b)
{
    if (a->lin && a->lin == b->lin)
        return a->nmsg < b->nmsg ? a->nmsg : b->nmsg;
    size_t k = 0;
    while (k < a->nmsg && k < b->nmsg && a->mhash[k] == b->mhash[k])
        k++;
    return k;
}

/* Requests by (kind, hash of all their messages): the latest of each.
 * Open addressing over uint64 keys; 0 marks an empty slot. */
struct pmap {
    uint64_t *key;
    long *idx;
    size_t n, cap;
};

static void pmap_put(struct pmap *m, uint64_t k, long idx);

static void pmap_grow(struct pmap *m)
{
    struct pmap old = *m;
    m->cap = old.cap ? 2 * old.cap : 256;
    m->n = 0;
    m->key = xcalloc(m->cap, sizeof(*m->key));
    m->idx = xcalloc(m->cap, sizeof(*m->idx));
    for (size_t i = 0; i < old.cap; i++)
        if (old.key[i])
            pmap_put(m, old.key[i], old.idx[i]);
    free(old.key);
    free(old.idx);
}

static void pmap_put(struct pmap *m, uint64_t k, long idx)
{
    if (2 * (m->n + 1) > m->cap)
        pmap_grow(m);
    k = k ? k : 1;
    size_t j = hash_mix64(k) & (m->cap - 1);
    while (m->key[j] && m->key[j] != k)
        j = (j + 1) & (m->cap - 1);
    if (!m->key[j])
        m->n++;
    m->key[j] = k;
    m->idx[j] = idx;
}

static long pmap_get(const struct pmap *m, uint64_t k)
{
    if (!m->cap)
        return -1;
    k = k ? k : 1;
    size_t j = hash_mix64(k) & (m->cap - 1);
    while (m->key[j] && m->key[j] != k)
        j = (j + 1) & (m->cap - 1);
    return m->key[j] ? m->idx[j] : -1;
}

static uint64_t kind_seed(const char *kind)
{
    return hash64(kind, strlen(kind), 7);
}

/* The key of q's kind and first k messages (1 <= k <= nmsg). */
static uint64_t prefix_key(const struct areq *q, size_t k)
{
    return hash_mix2(kind_seed(q->kind), areq_key(q, k));
}

/* How many earlier requests of the kind the fallback looks at when no
 * request forms a prefix: bounded, so a session of thousands of rewritten
 * requests stays linear. */
#define FALLBACK_WINDOW 32

/* The predecessor of r[i] by structure: the latest earlier request of the
 * same kind whose messages are r[i]'s first k messages, for the largest k
 * (k == nmsg: the same request sent again). Its reply may sit between that
 * prefix and r[i]'s new messages; history.c checks it. When none forms a
 * prefix: the request sharing
 * the longest leading run of messages among the last FALLBACK_WINDOW of
 * the kind (latest on ties), else for "main" the latest main request, since
 * compaction may replace even the first message. */
static long find_prev(struct areq *r, size_t i, const struct pmap *m,
                      long last_side)
{
    struct areq *q = &r[i];
    long latest = -1;
    for (size_t j = i; j-- > 0;)
        if (r[j].msgs && !strcmp(r[j].kind, q->kind)) {
            latest = (long)j;
            break;
        }
    for (size_t k = q->nmsg; k >= 1; k--) {
        long j = pmap_get(m, prefix_key(q, k));
        if (j >= 0 && r[j].nmsg == k && !strcmp(r[j].kind, q->kind) &&
            areq_common(&r[j], q) == k) {
            /* the latest request may share more without being a prefix:
             * a tool result pruned in place, an echo changed */
            if (latest != j && k < q->nmsg && areq_common(&r[latest], q) >= k)
                return latest;
            /* a summary request since j replaced the history: what looks
             * like j again (the same summary twice) follows the latest */
            if (latest != j && last_side > j)
                return latest;
            q->link_k = k;
            q->retry = k == q->nmsg;
            return j;
        }
    }
    long best = -1;
    latest = -1;
    size_t best_k = 0, seen = 0;
    for (size_t j = i; j-- > 0 && seen < FALLBACK_WINDOW;) {
        if (strcmp(r[j].kind, q->kind) || !r[j].msgs)
            continue;
        seen++;
        if (latest < 0)
            latest = (long)j;
        size_t k = areq_common(&r[j], q);
        if (k >= 1 && k > best_k) {
            best = (long)j;
            best_k = k;
        }
    }
    if (best < 0 && !strcmp(q->kind, "main"))
        best = latest;
    return best;
}

static bool last_is_user(const struct areq *r)
{
    return r->nmsg && r->mrole[r->nmsg - 1] == AROLE_USER;
}

static uint64_t text_key(const char *t)
{
    uint64_t h = hash64(t, strlen(t), 11);
    return h ? h : 1;
}

/* What a request is by its structure, whatever its words (docs/AUDIT.md):
 *  - a summary request: it asks for a summary (its last user message or
 *    its system prompt) and its reply heads a later main request (among
 *    its first HEAD messages) that does not extend it: the history was
 *    replaced by that reply. With or without tools (Continue's /compact
 *    sends them).
 *  - a title request (audit_is_title): no tools, no assistant message,
 *    one or two user messages, a short answer, and a user text that
 *    carries, inside more text, a message another request of the session
 *    (before or after it: quotes_a_neighbour) sent or got. No word makes
 *    one: a question that mentions a title, or a system prompt about
 *    titles, is not one by itself, and record's "title" is only a hint.
 * Linear: the head messages of main requests are indexed once. */
#define HEAD 4

/* q's reply is among next's first HEAD messages and no user message of q
 * comes before it there: what came before was replaced, not windowed (a
 * window keeps the user turn the reply answered). */
static bool summary_heads(const struct areq *q, const struct areq *next)
{
    for (size_t k = 0; k < next->nmsg && k < HEAD; k++) {
        char *t = audit_msg_text(json_array_get(next->msgs, k));
        bool here = !strcmp(t, q->content);
        free(t);
        if (here)
            return true;
        if (next->mrole[k] != AROLE_USER)
            continue;
        for (size_t m = 0; m < q->nmsg; m++)
            if (q->mhash[m] == next->mhash[k])
                return false;
    }
    return false;
}

/* The request asks for a summary: its last user message, or its system
 * prompt early on, says so (opencode, Continue and Kilo all do). */
struct sys_memo {
    json_t *msg; /* the system message last looked at */
    bool yes;    /* whether it mentions a summary early on */
};

static bool asks_summary(const struct areq *q, struct sys_memo *sm)
{
    bool yes = false;
    for (size_t k = q->nmsg; k-- > 0 && !yes;) {
        if (q->mrole[k] == AROLE_USER) {
            char *t = audit_msg_text(json_array_get(q->msgs, k));
            yes = head_has(t, SIZE_MAX, "summar");
            free(t);
            break;
        }
    }
    if (!yes && q->nmsg && q->mrole[0] == AROLE_SYSTEM) {
        /* a session's requests share one system prompt (the same
         * instance): it is read once, not once per request */
        json_t *m = json_array_get(q->msgs, 0);
        if (m != sm->msg) {
            char *t = audit_msg_text(m);
            sm->msg = m;
            sm->yes = head_has(t, 1000, "summar");
            free(t);
        }
        yes = sm->yes;
    }
    return yes;
}

/* Single-turn and without tools: no assistant message, one or two user
 * messages (audit_is_title checks the answer and the quote). */
static bool title_shaped(const struct areq *q)
{
    return !q->tools && !q->lin->cum_assistants[q->nmsg] && q->users >= 1 &&
           q->users <= 2;
}

/* How many requests on each side of a title-shaped one are searched for
 * the message it quotes, nearest first: a harness sends its title request
 * beside the turn it names (opencode alongside the first turn, before its
 * answer; Continue and Kilo after), and each request re-sends the history
 * before it, so the neighbours carry what it quotes. Bounded, so a session
 * of thousands of one-shot requests stays linear. */
#define TITLE_WINDOW 32

/* Whether r[i] quotes (audit_is_title) a message of another request of
 * the session, earlier or later: the nearest first, earlier before later
 * at each distance. */
static bool quotes_a_neighbour(struct areq *r, size_t n, size_t i)
{
    for (size_t d = 1; d <= TITLE_WINDOW && (d <= i || i + d < n); d++) {
        if (d <= i && audit_is_title(r[i].x, r[i - d].x))
            return true;
        if (i + d < n && audit_is_title(r[i].x, r[i + d].x))
            return true;
    }
    return false;
}

static void kinds_by_structure(struct areq *r, size_t n)
{
    struct pmap heads = {0};
    struct sys_memo sm = {0};
    for (size_t i = 0; i < n; i++) {
        if (!r[i].msgs || strcmp(r[i].kind, "main"))
            continue;
        for (size_t k = 0; k < r[i].nmsg && k < HEAD; k++) {
            if (r[i].mrole[k] != AROLE_ASSISTANT && r[i].mrole[k] != AROLE_USER)
                continue;
            char *t = audit_msg_text(json_array_get(r[i].msgs, k));
            if (*t)
                pmap_put(&heads, text_key(t), (long)i);
            free(t);
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct areq *q = &r[i];
        /* record's "title" is a guess by a word: a hint, never the
         * answer. Whatever it says, the request is a title only by the
         * structure below; else it is a main request. */
        bool hint = q->msgs && !strcmp(q->kind, "title");
        if (hint)
            q->kind = "main";
        if (!q->msgs || strcmp(q->kind, "main"))
            continue;
        if (!hint && q->content && strlen(q->content) >= 16 &&
            asks_summary(q, &sm)) {
            long j = pmap_get(&heads, text_key(q->content));
            if (j > (long)i && areq_common(q, &r[j]) < q->nmsg &&
                summary_heads(q, &r[j])) {
                q->kind = "compaction";
                continue;
            }
        }
        if (title_shaped(q) && quotes_a_neighbour(r, n, i))
            q->kind = "title";
    }
    free(heads.key);
    free(heads.idx);
}

struct areq *areqs_build(const struct audit_session *s)
{
    struct areq *r = xcalloc(s->n + 1, sizeof(*r));
    struct memo mm = {0};
    struct pmap pm = {0};
    struct lmap lm = {0};
    int main_turn = 0;
    long last_summary = -1; /* the latest summary (compaction) request */
    for (size_t i = 0; i < s->n; i++)
        view_one(&r[i], s->x[i], &mm, &lm);
    free(lm.key);
    free(lm.v);
    kinds_by_structure(r, s->n);
    for (size_t i = 0; i < s->n; i++) {
        if (!strcmp(r[i].kind, "compaction"))
            last_summary = (long)i;
        if (!r[i].msgs || !audit_is_main_kind(r[i].kind)) {
            r[i].turn = main_turn ? main_turn : 1;
            continue;
        }
        r[i].prev = find_prev(r, i, &pm, last_summary);
        if (r[i].nmsg)
            pmap_put(&pm, prefix_key(&r[i], r[i].nmsg), (long)i);
        if (r[i].prev < 0)
            r[i].turn = main_turn ? main_turn : 1;
        else if (r[i].retry)
            r[i].turn = r[r[i].prev].turn;
        else
            r[i].turn = r[r[i].prev].turn + (last_is_user(&r[i]) ? 1 : 0);
        if (!strcmp(r[i].kind, "main"))
            main_turn = r[i].turn;
    }
    free(pm.key);
    free(pm.idx);
    free(mm.key);
    free(mm.hash);
    free(mm.bytes);
    free(mm.role);
    return r;
}

void areqs_free(struct areq *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].lin_own)
            alin_free(r[i].lin);
    free(r);
}
