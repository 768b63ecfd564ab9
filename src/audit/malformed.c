/*
 * malformed: request.malformed_messages, the requests whose `messages`
 * array holds elements that are not message objects ([{...}, 5], [null]).
 * record stores them as sent and every reader keeps them as they are (a
 * session never vanishes for it); this rule says which elements are not
 * objects and what they are, once per request, as a warning: the server
 * was sent them too, and what it made of them is up to it.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/buf.h"

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    default:
        return "an object";
    }
}

/* The request's own messages: its first nmsg (a later request of the set
 * may have extended the array its view shares). An element that is not an
 * object has the role code AROLE_OTHER (view.c), as has an object of an
 * unknown role: only those are looked at, so the rule reads each
 * request's role bytes, not its JSON, and stays linear in what audit
 * reads for a session that re-sends its history. */
void audit_rule_malformed(struct actx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        struct areq *q = &c->r[i];
        size_t n = q->msgs ? q->nmsg : 0, bad = 0;
        if (!n || !memchr(q->mrole, AROLE_OTHER, n))
            continue;
        json_t *idx = json_array(), *types = json_array();
        struct buf b = BUF_INIT;
        for (size_t k = 0; k < n; k++) {
            json_t *m = json_array_get(q->msgs, k);
            if (json_is_object(m))
                continue;
            if (bad < 4)
                buf_printf(&b, "%smessages[%zu] is %s", bad ? ", " : "", k,
                           type_name(m));
            json_array_append_new(idx, json_integer((json_int_t)k));
            json_array_append_new(types, json_string(type_name(m)));
            bad++;
        }
        if (bad)
            audit_finding_add(
                c, AUDIT_WARN, "request.malformed_messages", q,
                json_pack("{s:o, s:o, s:I}", "indexes", idx, "types", types,
                          "messages", (json_int_t)n),
                "request %lld: %s%s, not a message object; kept as sent "
                "(the server got it too)",
                (long long)q->x->id, buf_str(&b), bad > 4 ? " and more" : "");
        else {
            json_decref(idx);
            json_decref(types);
        }
        buf_release(&b);
    }
}
