/*
 * audit: audit_run, the rule table and the finding builder. For each
 * session it builds the per-request view (view.c), calls the rules in
 * order, each appending findings through audit_finding_add, then adds one
 * store.corrupt finding per row the loader could not read. The order of
 * the table is the order findings come out in.
 */
#include <stdarg.h>
#include <stdlib.h>

#include "audit/audit_int.h"
#include "core/buf.h"
#include "core/xalloc.h"

void audit_finding_add(struct actx *c, enum audit_sev sev, const char *rule,
                       const struct areq *r, json_t *evidence, const char *fmt,
                       ...)
{
    struct audit_list *l = c->out;
    va_list ap;
    if (l->n == l->alloc) {
        l->alloc = l->alloc ? 2 * l->alloc : 16;
        l->v = xrealloc(l->v, l->alloc * sizeof(*l->v));
    }
    struct audit_finding *f = &l->v[l->n++];
    f->sev = sev;
    f->rule = xstrdup(rule);
    f->session = xstrdup(c->s->id);
    f->request = r ? r->x->id : 0;
    f->turn = r ? r->turn : 0;
    va_start(ap, fmt);
    struct buf b = BUF_INIT;
    buf_vprintf(&b, fmt, ap);
    va_end(ap);
    f->summary = buf_detach(&b, NULL);
    if (!f->summary)
        f->summary = xstrdup("");
    f->evidence = evidence ? evidence : json_object();
}

/* store.corrupt: the rows load.c could not read, one finding each. */
static void corrupt_rows(const struct audit_set *set, struct audit_list *out)
{
    for (size_t i = 0; i < set->nbad; i++) {
        const struct audit_bad *b = &set->bad[i];
        struct audit_session s = {.id = b->session};
        struct actx c = {.out = out, .s = &s};
        audit_finding_add(&c, AUDIT_ERROR, "store.corrupt", NULL,
                          json_pack("{s:I, s:s, s:s}", "exchange",
                                    (json_int_t)b->id, "column", b->column,
                                    "reason", b->why),
                          "exchange %lld cannot be read from the store (column "
                          "'%s': %s); it is left out of the audit",
                          (long long)b->id, b->column, b->why);
        out->v[out->n - 1].request = b->id;
    }
}

void audit_run(const struct audit_set *set, const struct audit_opts *o,
               struct audit_list *out)
{
    static void (*const rules[])(struct actx *) = {
        audit_rule_history,       audit_rule_sampling,
        audit_rule_reasoning,     audit_rule_truncation,
        audit_rule_first_message, audit_rule_degeneration,
        audit_rule_stream,        audit_rule_cache,
        audit_rule_malformed,
    };
    for (size_t i = 0; i < set->n; i++) {
        struct actx c = {.o = o, .out = out, .s = &set->s[i]};
        c.n = set->s[i].n;
        c.r = areqs_build(&set->s[i]);
        for (size_t k = 0; k < sizeof(rules) / sizeof(*rules); k++)
            rules[k](&c);
        areqs_free(c.r, c.n);
    }
    corrupt_rows(set, out);
}
