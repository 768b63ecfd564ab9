/*
 * classify: session keys and request kinds, from the request alone plus
 * the task prompts seen so far.
 */
#include "store/classify.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "core/buf.h"
#include "core/hash.h"
#include "core/xalloc.h"
#include "wire/jdump.h"

#define TASK_PROMPTS_MAX 4096

/* Tool names harnesses use to hand a prompt to a subagent. */
static const char *const TASK_TOOLS[] = {"task",        "Task",     "agent",
                                         "spawn_agent", "subagent", NULL};

/* Whether hay[0..hn) (no NUL in it) holds needle (lower case ASCII),
 * ignoring case. The candidates are found by memchr on the needle's first
 * byte in either case, not byte by byte. */
static bool contains_ci(const char *hay, size_t hn, const char *needle)
{
    size_t n = strlen(needle);
    if (!n || n > hn)
        return false;
    unsigned char lo = (unsigned char)needle[0];
    unsigned char up = (unsigned char)toupper(lo);
    const char *end = hay + hn - n + 1; /* a match starts before end */
    /* the next lo and up at or after p (end: none), NULL: not looked for */
    const char *nl = NULL, *nu = lo == up ? end : NULL;
    for (const char *p = hay; p < end;) {
        if (!nl || nl < p) {
            const char *f = memchr(p, lo, (size_t)(end - p));
            nl = f ? f : end;
        }
        if (!nu || nu < p) {
            const char *f = memchr(p, up, (size_t)(end - p));
            nu = f ? f : end;
        }
        const char *q = nl < nu ? nl : nu;
        if (q >= end)
            return false;
        if (!strncasecmp(q + 1, needle + 1, n - 1))
            return true;
        p = q + 1;
    }
    return false;
}

/* ---- message text ---- */

/* The text of a message's content: the string, or the concatenated text of
 * its parts. Fresh string. */
static char *msg_text(const json_t *m)
{
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        return xstrdup(json_string_value(c));
    struct buf b = BUF_INIT;
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part)
    {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (t)
            buf_adds(&b, t);
    }
    return buf_detach(&b, NULL);
}

static const char *role_of(const json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    return r ? r : "";
}

static const json_t *first_with_role(const json_t *msgs, const char *role)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!strcmp(role_of(m), role))
            return m;
    }
    return NULL;
}

static uint64_t text_hash(const char *s)
{
    return hash64(s, strlen(s), 0x7461736b);
}

/* ---- subagent prompts ---- */

/* What classify_session_memo and classify_kind_memo remember of a body,
 * by the XXH3-128 of the bytes of the messages it depends on (direct
 * mapped; a session re-sends the same first messages every turn) */
#define MEMO_SLOTS 64

struct memo_ent {
    XXH128_hash_t k; /* all zero: empty */
    char v[20];      /* a session key ("p:" and 16 digits) */
};

struct classify_state {
    uint64_t prompts[TASK_PROMPTS_MAX]; /* ring of task prompt hashes */
    size_t n;
    struct memo_ent sessions[MEMO_SLOTS];
    /* the title/compaction verdict: v[0] 't', 'c' or 'n' (neither) */
    struct memo_ent kinds[MEMO_SLOTS];
};

struct classify_state *classify_new(void)
{
    return xcalloc(1, sizeof(struct classify_state));
}

void classify_free(struct classify_state *c)
{
    free(c);
}

static bool is_task_tool(const char *name)
{
    for (int i = 0; name && TASK_TOOLS[i]; i++)
        if (!strcmp(name, TASK_TOOLS[i]))
            return true;
    return false;
}

static void learn_calls(struct classify_state *c, const json_t *calls)
{
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
    {
        json_t *f = json_object_get(call, "function");
        if (!is_task_tool(json_string_value(json_object_get(f, "name"))))
            continue;
        const char *args = json_string_value(json_object_get(f, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        const char *prompt = json_string_value(json_object_get(a, "prompt"));
        if (prompt) {
            uint64_t h = text_hash(prompt);
            bool seen = false;
            for (size_t k = 0; k < c->n && k < TASK_PROMPTS_MAX; k++)
                seen |= c->prompts[k] == h;
            if (!seen)
                c->prompts[c->n++ % TASK_PROMPTS_MAX] = h;
        }
        json_decref(a);
    }
}

void classify_learn_calls(struct classify_state *c, const json_t *tool_calls)
{
    learn_calls(c, tool_calls);
}

void classify_learn_message(struct classify_state *c, const json_t *msg)
{
    if (!strcmp(role_of(msg), "assistant"))
        learn_calls(c, json_object_get(msg, "tool_calls"));
}

void classify_learn(struct classify_state *c, const json_t *body,
                    const json_t *reply)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(body, "messages"), i, m)
    {
        classify_learn_message(c, m);
    }
    if (reply)
        learn_calls(c, json_object_get(reply, "tool_calls"));
}

static bool is_task_prompt(const struct classify_state *c, const char *text)
{
    uint64_t h = text_hash(text);
    for (size_t k = 0; k < c->n && k < TASK_PROMPTS_MAX; k++)
        if (c->prompts[k] == h)
            return true;
    return false;
}

/* ---- session and kind ---- */

static const char *header_ci(const json_t *headers, const char *name)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)headers, k, v)
    {
        if (!strcasecmp(k, name) && json_is_string(v) && json_string_length(v))
            return json_string_value(v);
    }
    return NULL;
}

/* The index of the first message of msgs with that role, else -1 */
static long first_index(const json_t *msgs, const char *role)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!strcmp(role_of(m), role))
            return (long)i;
    }
    return -1;
}

static long last_index(const json_t *msgs, const char *role)
{
    for (size_t i = json_array_size(msgs); i-- > 0;)
        if (!strcmp(role_of(json_array_get(msgs, i)), role))
            return (long)i;
    return -1;
}

/* The memo key of the messages at idx[0..n) (-1: absent) and a tag, or
 * all zero when raw does not describe msgs. */
static XXH128_hash_t memo_key(const json_t *msgs, const XXH128_hash_t *raw,
                              size_t nraw, const long *idx, size_t n,
                              unsigned tag)
{
    XXH128_hash_t parts[4] = {{0}};
    XXH128_hash_t zero = {0};
    if (!raw || nraw != json_array_size(msgs) || n > 3)
        return zero;
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= 0)
            parts[i] = raw[idx[i]];
    parts[n].low64 = tag;
    parts[n].high64 = (uint64_t)((idx[0] >= 0) | (idx[n - 1] >= 0) << 1);
    XXH128_hash_t k = XXH3_128bits(parts, sizeof(parts));
    if (!k.low64 && !k.high64)
        k.low64 = 1; /* all zero marks an empty slot */
    return k;
}

static struct memo_ent *memo_slot(struct memo_ent *tab, XXH128_hash_t k)
{
    return &tab[k.low64 % MEMO_SLOTS];
}

static bool is_key(XXH128_hash_t k)
{
    return k.low64 || k.high64;
}

static char *session_from_body(const json_t *body);

char *classify_session(const json_t *headers, const json_t *body)
{
    const char *h = header_ci(headers, "x-session-id");
    if (!h)
        h = header_ci(headers, "x-session-affinity");
    if (h)
        return xstrdup(h);
    return session_from_body(body);
}

char *classify_session_hl(const struct hdrs *headers, const json_t *body)
{
    return classify_session_memo(NULL, headers, body, NULL, 0);
}

/* The messages of a request body and where its first system, first user
 * and last user messages are (-1: none), found once for both answers */
struct req_msgs {
    const json_t *msgs; /* NULL: no non-empty messages array */
    long idx[3];
};

static void find_msgs(const json_t *body, struct req_msgs *m)
{
    m->msgs = json_object_get(body, "messages");
    if (!json_is_array(m->msgs) || !json_array_size(m->msgs)) {
        m->msgs = NULL;
        return;
    }
    m->idx[0] = first_index(m->msgs, "system");
    m->idx[1] = first_index(m->msgs, "user");
    m->idx[2] = last_index(m->msgs, "user");
}

static char *session_of(struct classify_state *c, const struct hdrs *headers,
                        const json_t *body, const struct req_msgs *m,
                        const XXH128_hash_t *raw, size_t n)
{
    struct buf b = BUF_INIT;
    const char *h = hdrs_get_ci(headers, "x-session-id", &b);
    if (!h)
        h = hdrs_get_ci(headers, "x-session-affinity", &b);
    if (h)
        return buf_detach(&b, NULL);
    buf_release(&b);
    if (!c || !m->msgs)
        return session_from_body(body);
    XXH128_hash_t k = memo_key(m->msgs, raw, n, m->idx, 2, 's');
    if (!is_key(k))
        return session_from_body(body);
    struct memo_ent *e = memo_slot(c->sessions, k);
    if (XXH128_isEqual(e->k, k))
        return xstrdup(e->v);
    char *s = session_from_body(body);
    if (strlen(s) < sizeof(e->v)) {
        e->k = k;
        strcpy(e->v, s);
    }
    return s;
}

char *classify_session_memo(struct classify_state *c,
                            const struct hdrs *headers, const json_t *body,
                            const XXH128_hash_t *raw, size_t n)
{
    struct req_msgs m;
    find_msgs(body, &m);
    return session_of(c, headers, body, &m, raw, n);
}

static char *session_from_body(const json_t *body)
{
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs))
        return xstrdup("-");
    json_t *key = json_array();
    const json_t *sys = first_with_role(msgs, "system");
    const json_t *user = first_with_role(msgs, "user");
    json_array_append(key, sys ? (json_t *)sys : json_null());
    json_array_append(key, user ? (json_t *)user : json_null());
    size_t len = 0;
    char *s = jdump_str(key, true, &len); /* json_dumps' canonical text */
    json_decref(key);
    if (!s)
        abort(); /* values parsed by jansson always dump */
    /* "p:" and hash_hex's 16 lower-case digits, without printf */
    static const char digits[] = "0123456789abcdef";
    uint64_t k = hash64(s, len, 0);
    free(s);
    char *out = xmalloc(2 + 16 + 1);
    memcpy(out, "p:", 2);
    for (int i = 17; i >= 2; i--, k >>= 4)
        out[i] = digits[k & 15];
    out[18] = '\0';
    return out;
}

static bool has_tools(const json_t *body)
{
    json_t *t = json_object_get(body, "tools");
    json_t *f = json_object_get(body, "functions");
    return json_array_size(t) > 0 || json_array_size(f) > 0;
}

/* First n bytes of m's text (up to a NUL), case-insensitive search for
 * needle; a string content is searched in place. */
static bool text_has(const json_t *m, const char *needle, size_t n)
{
    if (!m)
        return false;
    json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        return contains_ci(json_string_value(c),
                           strnlen(json_string_value(c), n), needle);
    char *t = msg_text(m);
    bool r = contains_ci(t, strnlen(t, n), needle);
    free(t);
    return r;
}

/* 't' title, 'c' compaction or 'n' neither, from the request's first
 * system, first user and last user message: a cheap hint by words, stored
 * with the exchange; audit decides a title by structure (view.c,
 * kinds_by_structure) and every reader shows audit's kind */
static char title_or_compaction(const json_t *sys, const json_t *first_user,
                                const json_t *last_user)
{
    if (text_has(sys, "title", 400) ||
        text_has(first_user, "generate a title", 200))
        return 't';
    if (text_has(sys, "summar", 1000) ||
        text_has(last_user, "<conversation>", 400) ||
        text_has(last_user, "summarize", 100000) ||
        text_has(last_user, "summary of", 100000))
        return 'c';
    return 'n';
}

const char *classify_kind(struct classify_state *c, const json_t *body)
{
    return classify_kind_memo(c, body, NULL, 0);
}

static const char *kind_of(struct classify_state *c, const json_t *body,
                           const struct req_msgs *m, const XXH128_hash_t *raw,
                           size_t n)
{
    const json_t *msgs = m->msgs;
    if (!msgs)
        return "other";
    const long *idx = m->idx;
    const json_t *first_user = json_array_get(msgs, (size_t)idx[1]);
    if (!has_tools(body)) {
        XXH128_hash_t k =
            c ? memo_key(msgs, raw, n, idx, 3, 'k') : (XXH128_hash_t){0};
        struct memo_ent *e = is_key(k) ? memo_slot(c->kinds, k) : NULL;
        char v;
        if (e && XXH128_isEqual(e->k, k)) {
            v = e->v[0];
        } else {
            v = title_or_compaction(json_array_get(msgs, (size_t)idx[0]),
                                    first_user,
                                    json_array_get(msgs, (size_t)idx[2]));
            if (e) {
                e->k = k;
                e->v[0] = v;
            }
        }
        if (v == 't')
            return "title";
        if (v == 'c')
            return "compaction";
    }
    if (first_user && c && c->n) {
        char *t = msg_text(first_user);
        bool sub = is_task_prompt(c, t);
        free(t);
        if (sub)
            return "subagent";
    }
    return "main";
}

const char *classify_kind_memo(struct classify_state *c, const json_t *body,
                               const XXH128_hash_t *raw, size_t n)
{
    struct req_msgs m;
    find_msgs(body, &m);
    return kind_of(c, body, &m, raw, n);
}

const char *classify_request_memo(struct classify_state *c,
                                  const struct hdrs *headers,
                                  const json_t *body, const XXH128_hash_t *raw,
                                  size_t n, char **session)
{
    struct req_msgs m;
    find_msgs(body, &m);
    *session = session_of(c, headers, body, &m, raw, n);
    return kind_of(c, body, &m, raw, n);
}
