/*
 * load: fills an audit_set from the recorder's store (xchg_each) and its
 * spill file (xchg_spill_each), the only part of src/audit/ that touches
 * storage. Exchanges of a session are put in the order they started, so
 * spilled ones fall between the stored ones they were recorded among.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audit/audit.h"
#include "core/xalloc.h"
#include "store/store.h"

struct load_ctx {
    struct audit_set *set;
    const char *session;
    size_t n;
};

static int add_one(const struct xchg *x, void *ud)
{
    struct load_ctx *c = ud;
    if (c->session && (!x->session || strcmp(c->session, x->session)))
        return 0;
    audit_set_add(c->set, x);
    c->n++;
    return 0;
}

static void add_bad(const struct xchg_bad *b, void *ud)
{
    struct load_ctx *c = ud;
    audit_set_add_bad(c->set, b);
}

int audit_set_load(struct db *db, const char *session, struct audit_set *set,
                   size_t *n, struct diag *d)
{
    struct load_ctx c = {set, session, 0};
    int rc = xchg_schema(db, d);
    char *err = NULL;
    /* one snapshot while writers commit: the exchanges as one moment
     * left them (docs/RECORD.md) */
    if (!rc && db_read_begin(db, &err) != DB_OK) {
        rc = diag_set(d, EIO, "cannot read exchanges: %s",
                      err ? err : db_errmsg(db));
        free(err);
    }
    if (!rc) {
        rc = xchg_each_flags(db, session, XCHG_EACH_VIEWS, add_one, add_bad, &c,
                             d);
        db_read_end(db);
    }
    if (n)
        *n = c.n;
    return rc;
}

int audit_set_load_spill(const char *path, const char *session,
                         struct audit_set *set, size_t *n, struct diag *d)
{
    struct load_ctx c = {set, session, 0};
    int rc = xchg_spill_each(path, add_one, &c, d);
    if (n)
        *n = c.n;
    return rc;
}

static int by_start(const void *pa, const void *pb)
{
    const struct xchg *a = *(struct xchg *const *)pa;
    const struct xchg *b = *(struct xchg *const *)pb;
    if (a->started != b->started && a->started > 0 && b->started > 0)
        return a->started < b->started ? -1 : 1;
    /* stored ids count up, spilled ids count down from -1 */
    if ((a->id < 0) != (b->id < 0))
        return a->id < 0 ? 1 : -1;
    if (a->id < 0)
        return a->id > b->id ? -1 : a->id < b->id;
    return a->id < b->id ? -1 : a->id > b->id;
}

void audit_set_order(struct audit_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->s[i].n > 1)
            qsort(set->s[i].x, set->s[i].n, sizeof(*set->s[i].x), by_start);
}

/* Drops every session but the one at index keep. */
static void keep_session(struct audit_set *set, size_t keep)
{
    size_t kept = 0;
    for (size_t i = 0; i < set->n; i++) {
        struct audit_session *s = &set->s[i];
        if (i == keep) {
            set->s[kept++] = *s;
            continue;
        }
        for (size_t j = 0; j < s->n; j++) {
            xchg_release(s->x[j]);
            free(s->x[j]);
        }
        free(s->x);
        free(s->id);
        free(s->parent);
        free(s->parent_call);
    }
    set->n = kept;
}

/* id abbreviates s: its beginning, or its beginning after "p:". */
static bool abbreviates(const char *id, const char *s)
{
    size_t n = strlen(id);
    if (!strncmp(s, id, n))
        return true;
    return !strncmp(s, "p:", 2) && !strncmp(s + 2, id, n);
}

#define PICK_NAMED 8 /* candidates an ambiguous id's message names */

int audit_set_pick(struct audit_set *set, const char *id, struct diag *d)
{
    size_t hit = 0, n = 0;
    char names[400] = "";
    for (size_t i = 0; i < set->n; i++)
        if (!strcmp(set->s[i].id, id)) {
            keep_session(set, i);
            return 0;
        }
    for (size_t i = 0; *id && i < set->n; i++) {
        if (!abbreviates(id, set->s[i].id))
            continue;
        if (n++ < PICK_NAMED) {
            size_t at = strlen(names);
            snprintf(names + at, sizeof(names) - at, "%s%s", at ? ", " : "",
                     set->s[i].id);
        }
        hit = i;
    }
    if (!n)
        return diag_set(d, ENOENT, "no session '%s'", id);
    if (n > 1)
        return diag_set(d, EINVAL,
                        "session '%s' is ambiguous: %zu sessions start with "
                        "it: %s%s",
                        id, n, names, n > PICK_NAMED ? ", ..." : "");
    keep_session(set, hit);
    return 0;
}

int audit_load_paths(const char *db_path, const char *spill,
                     const char *session, struct audit_set *set, struct diag *d)
{
    struct stat st;
    struct db *db = NULL;
    /* record's default spill file sits beside the store */
    char *def = spill ? NULL : store_local_path(db_path, ".spill.jsonl");
    bool have_db = store_exists(db_path);
    bool have_spill = stat(spill ? spill : def, &st) == 0;
    int rc = 0;
    if (!spill)
        spill = def;
    if (!have_db && !have_spill) {
        free(def);
        return diag_set(d, ENOENT,
                        "cannot open '%s': no such file; record traffic "
                        "first with 'fidelity record --db %s', or name the "
                        "store with --db",
                        db_path, db_path);
    }
    /* all of it: a session without a header is known only once the
     * requests are regrouped */
    if (have_db) {
        rc = store_open(db_path, &db, d);
        if (!rc)
            rc = audit_set_load(db, NULL, set, NULL, d);
        store_close(db);
        if (rc) {
            free(def);
            return rc;
        }
    }
    if (have_spill) {
        rc = audit_set_load_spill(spill, NULL, set, NULL, d);
    }
    audit_set_attach_side(set);
    audit_set_order(set);
    audit_set_regroup(set);
    audit_set_link_subagents(set);
    free(def);
    if (!rc && session)
        rc = audit_set_pick(set, session, d);
    return rc;
}
