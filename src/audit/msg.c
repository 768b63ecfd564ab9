/*
 * msg: the small message and JSON helpers the audit rules share: a
 * message's text and the reasoning sent with it, JSON compared by value
 * (1 == 1.0) and looked up by a dotted path. No state; nothing here knows
 * about requests or sessions (view.c builds those).
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "audit/audit_int.h"
#include "core/buf.h"
#include "core/xalloc.h"

char *audit_msg_text(json_t *msg)
{
    json_t *c = json_object_get(msg, "content");
    struct buf b = BUF_INIT;
    size_t i;
    json_t *part;
    if (json_is_string(c))
        return xstrdup(json_string_value(c));
    json_array_foreach(c, i, part)
    {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t))
            buf_adds(&b, json_string_value(t));
    }
    if (!b.data)
        return xstrdup("");
    return buf_detach(&b, NULL);
}

bool audit_msg_head_has(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; s[i] && i + k <= n; i++)
        if (!strncasecmp(s + i, needle, k))
            return true;
    return false;
}

/* Whether text (the user text of a title-shaped request) quotes t, a
 * message the session sent or received: the first AUDIT_TITLE_QUOTE
 * bytes of t's first line (harnesses cut what they quote: Kilo's list of
 * the user's messages). */
#define AUDIT_TITLE_QUOTE 64
static bool quotes(const char *text, size_t bytes, const char *t)
{
    size_t k = t ? strlen(t) : 0;
    if (!k)
        return false;
    /* its first line, at most AUDIT_TITLE_QUOTE bytes: what follows may
     * be parts a harness adds and does not quote (Kilo's
     * <environment_details>) */
    const char *nl = memchr(t, '\n', k);
    if (nl && nl > t)
        k = (size_t)(nl - t);
    if (k > AUDIT_TITLE_QUOTE)
        k = AUDIT_TITLE_QUOTE;
    /* inside more text: a request that only repeats the message (a
     * one-shot chat sent again) quotes nothing */
    return bytes > k && memmem(text, bytes, t, k) != NULL;
}

/* The text of x's first system message (fresh; "" when none). */
static char *system_text(const struct xchg *x)
{
    json_t *m;
    for (size_t i = 0; (m = xmsg(x, i)); i++) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "system"))
            return audit_msg_text(m);
    }
    return xstrdup("");
}

bool audit_is_title(const struct xchg *x, const struct xchg *from)
{
    if (!from || from == x)
        return false;
    if (json_array_size(json_object_get(x->req_body, "tools")))
        return false;
    json_t *reply = x->reply;
    if (json_array_size(json_object_get(reply, "tool_calls")))
        return false;
    const char *c = json_string_value(json_object_get(reply, "content"));
    size_t n = c ? strlen(c) : 0;
    while (n && (c[n - 1] == '\n' || c[n - 1] == ' ' || c[n - 1] == '\r'))
        n--;
    if (n > AUDIT_TITLE_MAX || (n && memchr(c, '\n', n)))
        return false;
    /* single-turn: no assistant message, one or two user messages, whose
     * text is kept for the search below */
    struct buf u = BUF_INIT;
    size_t users = 0;
    json_t *m;
    for (size_t i = 0; (m = xmsg(x, i)); i++) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "assistant")) {
            buf_release(&u);
            return false;
        }
        if (!role || strcmp(role, "user"))
            continue;
        users++;
        char *t = audit_msg_text(m);
        buf_adds(&u, t);
        free(t);
    }
    /* its own system prompt, or none under a conversation that has one:
     * the conversation's own (a gateway's compacted request, a retry)
     * makes a turn of the conversation, not a side request */
    char *sx = system_text(x), *sf = system_text(from);
    bool own = strcmp(sx, sf) != 0;
    free(sx);
    free(sf);
    bool yes = false;
    if (own && users >= 1 && users <= 2) {
        const char *text = buf_str(&u);
        size_t bytes = strlen(text);
        /* a user turn or an assistant message from's request sent, or
         * the reply it got */
        for (size_t i = 0; !yes && (m = xmsg(from, i)); i++) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
                continue;
            char *t = audit_msg_text(m);
            yes = quotes(text, bytes, t);
            free(t);
        }
        if (!yes)
            yes = quotes(
                text, bytes,
                json_string_value(json_object_get(from->reply, "content")));
    }
    buf_release(&u);
    return yes;
}

json_t *audit_msg_reasoning(json_t *msg)
{
    json_t *r = json_object_get(msg, "reasoning_content");
    return r ? r : json_object_get(msg, "reasoning");
}

bool audit_json_same(json_t *a, json_t *b)
{
    if (!a || !b)
        return a == b;
    if (json_is_number(a) && json_is_number(b)) {
        double x = json_number_value(a), y = json_number_value(b);
        double d = x > y ? x - y : y - x;
        return d <= 1e-9 * (1 + (x > 0 ? x : -x));
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        json_t *v;
        if (json_object_size(a) != json_object_size(b))
            return false;
        json_object_foreach(a, k, v)
        {
            if (!audit_json_same(v, json_object_get(b, k)))
                return false;
        }
        return true;
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!audit_json_same(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    return json_equal(a, b);
}

json_t *audit_json_path(json_t *obj, const char *path)
{
    char *p = xstrdup(path), *save = NULL;
    json_t *cur = obj;
    for (char *k = strtok_r(p, ".", &save); k && cur;
         k = strtok_r(NULL, ".", &save))
        cur = json_object_get(cur, k);
    free(p);
    return cur;
}
