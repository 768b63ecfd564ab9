/*
 * set: the containers of audit (sessions of copied exchanges, the finding
 * list) and the parsing of its options (--expect, --profile,
 * --reasoning-policy). See audit.h for the contract.
 */
#define _GNU_SOURCE /* qsort_r */
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/hash.h"
#include "core/xalloc.h"

const struct audit_thresholds audit_default_thresholds = {
    .token_deficit = 0.25,
    .token_deficit_min = 64,
    .token_exact_min = 16,
    .pinned_run = 3,
    .flat_growth = 0.10,
    .flat_tokens = 0.01,
    .gzip_ratio = 6.0,
    .ngram_share = 0.60,
    .degen_min_bytes = 400,
    .reasoning_ratio = 20.0,
    .reasoning_min_bytes = 2000,
    .gap_ms = 5000,
    .added_ttfb_ms = 50,
    .cache_min_shared = 2048,
    .cache_refill_share = 0.5,
    .cache_unused_turns = 3,
    .cache_drop_share = 0.5,
    .cache_drop_run = 3,
    .cache_idle_s = 600,
};

static const char *const sev_names[] = {"info", "warn", "error"};

const char *audit_sev_name(enum audit_sev s)
{
    return sev_names[s];
}

int audit_sev_parse(const char *s, enum audit_sev *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, sev_names[i])) {
            *out = (enum audit_sev)i;
            return 0;
        }
    return -EINVAL;
}

static const char *const policy_names[] = {"none", "drop", "keep",
                                           "keep-with-tools"};

const char *audit_policy_name(enum audit_policy p)
{
    return policy_names[p];
}

int audit_policy_parse(const char *s, enum audit_policy *out)
{
    for (int i = 1; i < 4; i++)
        if (!strcmp(s, policy_names[i])) {
            *out = (enum audit_policy)i;
            return 0;
        }
    return -EINVAL;
}

void audit_opts_init(struct audit_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->th = audit_default_thresholds;
}

void audit_list_init(struct audit_list *l)
{
    memset(l, 0, sizeof(*l));
}

void audit_list_release(struct audit_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].rule);
        free(l->v[i].session);
        free(l->v[i].summary);
        json_decref(l->v[i].evidence);
    }
    free(l->v);
    audit_list_init(l);
}

size_t audit_list_count(const struct audit_list *l, enum audit_sev min)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        k += l->v[i].sev >= min;
    return k;
}

struct sort_ctx {
    const char *const *order;
    size_t n;
};

static size_t session_rank(const struct sort_ctx *c, const char *s)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->order[i], s))
            return i;
    return c->n;
}

static int cmp_finding(const void *pa, const void *pb, void *ctx)
{
    const struct audit_finding *a = pa, *b = pb;
    const struct sort_ctx *c = ctx;
    size_t ra = session_rank(c, a->session), rb = session_rank(c, b->session);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    if (ra == c->n && strcmp(a->session, b->session))
        return strcmp(a->session, b->session);
    if (a->sev != b->sev)
        return a->sev > b->sev ? -1 : 1;
    if (a->request != b->request)
        return a->request < b->request ? -1 : 1;
    return strcmp(a->rule, b->rule);
}

void audit_list_sort(struct audit_list *l, const char *const *session_order,
                     size_t nsessions)
{
    struct sort_ctx c = {session_order, nsessions};
    if (l->n > 1) /* glibc qsort_r: the order travels with the call */
        qsort_r(l->v, l->n, sizeof(*l->v), cmp_finding, &c);
}

json_t *audit_finding_json(const struct audit_finding *f)
{
    return json_pack("{s:s, s:s, s:s, s:I, s:i, s:s, s:O}", "severity",
                     audit_sev_name(f->sev), "rule", f->rule, "session",
                     f->session, "request", (json_int_t)f->request, "turn",
                     f->turn, "summary", f->summary, "evidence", f->evidence);
}

void audit_set_init(struct audit_set *set)
{
    memset(set, 0, sizeof(*set));
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static char *dup_bytes(const char *s, size_t len)
{
    if (!s)
        return NULL;
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

static json_t *copy_json(json_t *j)
{
    return j ? json_deep_copy(j) : NULL;
}

static void intern_grow(struct audit_set *set)
{
    uint64_t *ok = set->ikey;
    json_t **ov = set->ival;
    size_t oc = set->icap;
    set->icap = oc ? 2 * oc : 4096;
    set->ikey = xcalloc(set->icap, sizeof(*set->ikey));
    set->ival = xcalloc(set->icap, sizeof(*set->ival));
    for (size_t i = 0; i < oc; i++)
        if (ok[i]) {
            size_t j = hash_mix64(ok[i]) & (set->icap - 1);
            while (set->ikey[j])
                j = (j + 1) & (set->icap - 1);
            set->ikey[j] = ok[i];
            set->ival[j] = ov[i];
        }
    free(ok);
    free(ov);
}

/* The one instance of v the set keeps: a session re-sends its history with
 * every request, so messages (and tool lists) are shared between the
 * copies, keyed by the hash of their canonical JSON; memory grows with the
 * distinct messages, not with their square. h is that hash when the store
 * gave it (xchg.req_msg_h), else 0: v is dumped to compute it. Returns a
 * new reference. */
static json_t *intern(struct audit_set *set, json_t *v, uint64_t h)
{
    if (!h) {
        char *s =
            json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        if (!s)
            return json_deep_copy(v);
        h = hash64(s, strlen(s), 0);
        free(s);
    }
    h = h ? h : 1;
    if (2 * (set->in + 1) > set->icap)
        intern_grow(set);
    size_t j = hash_mix64(h) & (set->icap - 1);
    while (set->ikey[j] && set->ikey[j] != h)
        j = (j + 1) & (set->icap - 1);
    if (!set->ikey[j]) {
        set->ikey[j] = h;
        set->ival[j] = json_deep_copy(v);
        set->in++;
    }
    return json_incref(set->ival[j]);
}

/* The interned copy of msgs (hs: their store hashes, or NULL). The leading
 * messages equal to the last copied request's (by hash, position for
 * position) are taken from it; the rest are interned. The copy becomes the
 * last one. */
static json_t *copy_msgs(struct audit_set *set, json_t *msgs,
                         const uint64_t *hs)
{
    size_t n = json_array_size(msgs), i = 0;
    json_t *a = json_array();
    if (hs && set->last_msgs)
        for (; i < n && i < set->last_n && hs[i] && hs[i] == set->last_h[i];
             i++)
            json_array_append(a, json_array_get(set->last_msgs, i));
    for (; i < n; i++)
        json_array_append_new(
            a, intern(set, json_array_get(msgs, i), hs ? hs[i] : 0));
    json_decref(set->last_msgs);
    set->last_msgs = NULL;
    if (hs) {
        if (n > set->last_cap) {
            set->last_cap = 2 * n;
            set->last_h =
                xrealloc(set->last_h, set->last_cap * sizeof(*set->last_h));
        }
        if (n) /* last_h is still NULL before the first list */
            memcpy(set->last_h, hs, n * sizeof(*hs));
        set->last_n = n;
        set->last_msgs = json_incref(a);
    }
    return a;
}

/* The copy of x's body without its messages, which go to *view (a new
 * reference) and *view_n: x's own view when it has one, else an interned
 * copy of its messages array. */
static json_t *copy_body(struct audit_set *set, const struct xchg *x,
                         json_t **view, size_t *view_n)
{
    json_t *body = x->req_body;
    json_t *msgs = json_object_get(body, "messages");
    json_t *tools = json_object_get(body, "tools");
    const char *k;
    json_t *v;
    *view = NULL;
    *view_n = 0;
    if (x->req_msgs) {
        *view = json_incref(x->req_msgs);
        *view_n = x->req_msgs_n;
    }
    if (!json_is_object(body))
        return copy_json(body);
    /* the store's message hashes are hash64 of the canonical JSON that
     * intern would dump */
    const uint64_t *hs = x->req_msg_h && x->req_msg_n == json_array_size(msgs)
                             ? x->req_msg_h
                             : NULL;
    if (!x->req_msgs && json_is_array(msgs)) {
        *view = copy_msgs(set, msgs, hs);
        *view_n = json_array_size(msgs);
    }
    json_t *c = json_object();
    json_object_foreach(body, k, v)
    {
        if (v == msgs && json_is_array(msgs)) {
            continue; /* a view: *view, *view_n */
        } else if (v == tools) {
            json_object_set_new(c, k, intern(set, v, x->req_tools_h));
        } else {
            json_object_set_new(c, k, json_deep_copy(v));
        }
    }
    return c;
}

/* The stream reached its end: "data: [DONE]", or the last chunk with a
 * finish_reason and the usage (a server that sends no [DONE]). A client
 * that closes the connection right after it (Python clients often do)
 * received everything: the exchange is complete. */
static bool got_final_event(json_t *reply)
{
    json_t *fin = json_object_get(reply, "finish_reason");
    return json_is_true(json_object_get(reply, "done")) ||
           (json_is_string(fin) &&
            json_is_object(json_object_get(reply, "usage")));
}

static struct xchg *xchg_copy(struct audit_set *set, const struct xchg *x)
{
    struct xchg *c = xmalloc(sizeof(*c));
    bool error = x->status < 200 || x->status >= 300;
    *c = *x;
    c->session = dup_or_null(x->session);
    c->kind = dup_or_null(x->kind);
    c->method = dup_or_null(x->method);
    c->path = dup_or_null(x->path);
    c->req_headers = copy_json(x->req_headers);
    c->req_body = copy_body(set, x, &c->req_msgs, &c->req_msgs_n);
    c->req_msg_raw = NULL; /* owned by x; the copy needs none of them */
    c->req_msg_new = NULL;
    c->req_msg_h = NULL;
    c->req_msg_n = 0;
    c->req_raw = dup_bytes(x->req_raw, x->req_raw_len);
    c->resp_headers = copy_json(x->resp_headers);
    /* the bytes of a 2xx response are not needed, their count is: the
     * stream rules report how much was delivered */
    c->resp_raw = error ? dup_bytes(x->resp_raw, x->resp_raw_len) : NULL;
    c->resp_raw_len = x->resp_raw_len;
    c->reply = copy_json(x->reply);
    if (c->end == XCHG_CLIENT_GONE && got_final_event(c->reply))
        c->end = XCHG_COMPLETE;
    return c;
}

static void xchg_copy_free(struct xchg *c)
{
    xchg_release(c);
    free(c);
}

void audit_set_release(struct audit_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        struct audit_session *s = &set->s[i];
        for (size_t j = 0; j < s->n; j++)
            xchg_copy_free(s->x[j]);
        free(s->x);
        free(s->id);
        free(s->parent);
        free(s->parent_call);
    }
    free(set->s);
    for (size_t i = 0; i < set->icap; i++)
        json_decref(set->ival[i]);
    free(set->ikey);
    free(set->ival);
    json_decref(set->last_msgs);
    free(set->last_h);
    for (size_t i = 0; i < set->nbad; i++)
        free(set->bad[i].session);
    free(set->bad);
    memset(set, 0, sizeof(*set));
}

const struct audit_session *audit_set_find(const struct audit_set *set,
                                           const char *id)
{
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->s[i].id, id))
            return &set->s[i];
    return NULL;
}

void audit_set_add_bad(struct audit_set *set, const struct xchg_bad *b)
{
    if (set->nbad == set->bad_alloc) {
        set->bad_alloc = set->bad_alloc ? 2 * set->bad_alloc : 8;
        set->bad = xrealloc(set->bad, set->bad_alloc * sizeof(*set->bad));
    }
    struct audit_bad *a = &set->bad[set->nbad++];
    a->id = b->id;
    a->session = xstrdup(b->session ? b->session : "");
    a->column = b->column;
    a->why = b->why;
}

void audit_set_add(struct audit_set *set, const struct xchg *x)
{
    const char *id = x->session ? x->session : "";
    struct audit_session *s = (struct audit_session *)audit_set_find(set, id);
    if (!s) {
        if (set->n == set->alloc) {
            set->alloc = set->alloc ? 2 * set->alloc : 8;
            set->s = xrealloc(set->s, set->alloc * sizeof(*set->s));
        }
        s = &set->s[set->n++];
        memset(s, 0, sizeof(*s));
        s->id = xstrdup(id);
    }
    if (s->n == s->alloc) {
        s->alloc = s->alloc ? 2 * s->alloc : 16;
        s->x = xrealloc(s->x, s->alloc * sizeof(*s->x));
    }
    s->x[s->n++] = xchg_copy(set, x);
}

int audit_expect_add(json_t *expect, const char *arg, struct diag *d)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return diag_set(d, EINVAL,
                        "'%s' is not KEY=VALUE (e.g. temperature=0.6)", arg);
    char *key = xstrndup(arg, (size_t)(eq - arg));
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(eq + 1);
    if (!v) {
        free(key);
        return diag_set(d, EINVAL, "'%s': value is not valid UTF-8", arg);
    }
    json_object_set_new(expect, key, v);
    free(key);
    return 0;
}

static int check_model_entry(const char *glob, json_t *m, struct diag *d)
{
    const char *k;
    json_t *v;
    enum audit_policy p;
    if (!json_is_object(m))
        return diag_set(d, EINVAL, "models.\"%s\" must be an object", glob);
    json_object_foreach(m, k, v)
    {
        if (!strcmp(k, "params")) {
            if (!json_is_object(v))
                return diag_set(d, EINVAL,
                                "models.\"%s\".params must be an object", glob);
        } else if (!strcmp(k, "reasoning_policy")) {
            if (!json_is_string(v) ||
                audit_policy_parse(json_string_value(v), &p))
                return diag_set(d, EINVAL,
                                "models.\"%s\".reasoning_policy must be "
                                "drop, keep or keep-with-tools",
                                glob);
        } else if (!strcmp(k, "context_length")) {
            if (!json_is_integer(v) || json_integer_value(v) <= 0)
                return diag_set(d, EINVAL,
                                "models.\"%s\".context_length must be a "
                                "positive integer",
                                glob);
        } else if (strcmp(k, "note")) {
            return diag_set(d, EINVAL,
                            "models.\"%s\": unknown key '%s' (params, "
                            "reasoning_policy, context_length, note)",
                            glob, k);
        }
    }
    return 0;
}

int audit_profile_check(json_t *doc, struct diag *d)
{
    json_t *models = json_object_get(doc, "models");
    const char *k;
    json_t *v;
    if (!json_is_object(doc) || !json_is_object(models))
        return diag_set(d, EINVAL, "top level must be {\"models\": {...}}");
    json_object_foreach(models, k, v)
    {
        int rc = check_model_entry(k, v, d);
        if (rc)
            return rc;
    }
    json_incref(doc);
    return 0;
}

/* The profile entry for model: an exact key first, else the first glob
 * (fnmatch) in key order that matches. */
json_t *audit_profile_for(json_t *profile, const char *model)
{
    json_t *models = json_object_get(profile, "models");
    json_t *m = json_object_get(models, model);
    const char *k;
    json_t *v;
    if (m || !models)
        return m;
    json_object_foreach(models, k, v)
    {
        if (!fnmatch(k, model, 0))
            return v;
    }
    return NULL;
}
