/*
 * msg: the small message and JSON helpers the audit rules share: a
 * message's text and the reasoning sent with it, JSON compared by value
 * (1 == 1.0) and looked up by a dotted path. No state; nothing here knows
 * about requests or sessions (view.c builds those).
 */
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

bool audit_msg_asks_title(const char *t)
{
    static const char *const ask[] = {
        "generate a title",
        "title for the chat",
        "title for this chat",
        "title for the conversation",
        "title for this conversation",
        "title for the thread",
        "title for this thread",
        "title for the session",
    };
    for (size_t a = 0; a < sizeof(ask) / sizeof(*ask); a++)
        if (audit_msg_head_has(t, 400, ask[a]))
            return true;
    return false;
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
