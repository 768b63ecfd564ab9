/*
 * audit_test: helpers the audit test files share (header-only, static).
 */
#ifndef TESTS_AUDIT_AUDIT_TEST_H
#define TESTS_AUDIT_AUDIT_TEST_H

#include <string.h>

#include "audit/audit.h"
#include "util/xchg_build.h"

/* Runs every rule over xs[0..n) with o (NULL: defaults) into out. */
static inline void run_audit(struct xchg *xs, size_t n,
                             const struct audit_opts *o, struct audit_list *out)
{
    struct audit_set set;
    struct audit_opts def;
    audit_opts_init(&def);
    audit_set_init(&set);
    for (size_t i = 0; i < n; i++)
        audit_set_add(&set, &xs[i]);
    audit_list_init(out);
    audit_run(&set, o ? o : &def, out);
    audit_set_release(&set);
}

/* The first finding of rule (exact name), or NULL. */
static inline const struct audit_finding *find_rule(const struct audit_list *l,
                                                    const char *rule)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].rule, rule))
            return &l->v[i];
    return NULL;
}

static inline size_t count_prefix(const struct audit_list *l,
                                  const char *prefix)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        k += !strncmp(l->v[i].rule, prefix, strlen(prefix));
    return k;
}

static inline long long ev_int(const struct audit_finding *f, const char *key)
{
    return json_integer_value(json_object_get(f->evidence, key));
}

static inline void free_xs(struct xchg *xs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        xb_release(&xs[i]);
}

#endif
