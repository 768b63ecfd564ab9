/*
 * fuzz_audit: the audit rules over recorded exchanges whose bodies and
 * replies are whatever a harness or server sent (wrong types, missing
 * fields, odd tool calls). Input: a JSON object {"expect": [str],
 * "profile": any, "x": [{"session", "kind", "body", "reply", "status",
 * "streamed", "end", "resp"}]}. Checks that every finding is well formed
 * and points at a session and request of the input, and that the session
 * views have one row per exchange.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            abort();                                                           \
    } while (0)

static void build(json_t *in, struct audit_set *set)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(in, "x"), i, e)
    {
        struct xchg x;
        memset(&x, 0, sizeof(x));
        x.id = (int64_t)i + 1;
        x.session = (char *)json_string_value(json_object_get(e, "session"));
        x.kind = (char *)json_string_value(json_object_get(e, "kind"));
        x.method = (char *)"POST";
        x.path = (char *)"/v1/chat/completions";
        x.req_headers = json_object_get(e, "headers");
        x.req_body = json_object_get(e, "body");
        x.reply = json_object_get(e, "reply");
        x.status = (int)json_integer_value(json_object_get(e, "status"));
        x.streamed = json_is_true(json_object_get(e, "streamed"));
        x.end =
            (enum xchg_end)(json_integer_value(json_object_get(e, "end")) & 3);
        x.resp_raw = (char *)json_string_value(json_object_get(e, "resp"));
        x.resp_raw_len = x.resp_raw ? strlen(x.resp_raw) : 0;
        x.up_ttfb_ms = json_number_value(json_object_get(e, "up_ttfb"));
        x.down_ttfb_ms = json_number_value(json_object_get(e, "down_ttfb"));
        audit_set_add(set, &x);
    }
}

static void check(const struct audit_set *set, const struct audit_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct audit_finding *f = &l->v[i];
        const struct audit_session *s = audit_set_find(set, f->session);
        CHECK(f->sev <= AUDIT_ERROR);
        CHECK(strchr(f->rule, '.'));
        CHECK(json_is_object(f->evidence));
        CHECK(f->summary && *f->summary);
        CHECK(s);
        bool found = f->request == 0;
        for (size_t k = 0; k < s->n && !found; k++)
            found = s->x[k]->id == f->request;
        CHECK(found);
        json_t *j = audit_finding_json(f);
        CHECK(j);
        json_decref(j);
    }
    for (size_t i = 0; i < set->n; i++) {
        json_t *t = audit_session_turns(&set->s[i]);
        json_t *r = audit_session_json(&set->s[i], l);
        CHECK(json_array_size(t) == set->s[i].n);
        CHECK(r);
        json_decref(t);
        json_decref(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *in = json_loadb((const char *)data, size, 0, NULL);
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    size_t i;
    json_t *e;
    if (!in)
        return 0;
    audit_opts_init(&o);
    o.expect = json_object();
    json_array_foreach(json_object_get(in, "expect"), i, e)
    {
        if (json_is_string(e))
            audit_expect_add(o.expect, json_string_value(e), NULL);
    }
    json_t *prof = json_object_get(in, "profile");
    if (prof && !audit_profile_check(prof, NULL))
        o.profile = prof;
    o.policy = (enum audit_policy)(
        json_integer_value(json_object_get(in, "policy")) & 3);
    o.context_length = (long)json_integer_value(json_object_get(in, "ctx"));
    audit_set_init(&set);
    audit_list_init(&l);
    build(in, &set);
    audit_run(&set, &o, &l);
    check(&set, &l);
    const char *order[] = {"a"};
    audit_list_sort(&l, order, 1);
    audit_list_release(&l);
    audit_set_release(&set);
    if (o.profile)
        json_decref(o.profile);
    json_decref(o.expect);
    json_decref(in);
    return 0;
}
