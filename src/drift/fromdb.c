/*
 * drift fromdb: sessions recorded by `fidelity record` as a drift corpus.
 * For each session, the last exchange whose request body holds a chat
 * `messages` array (kind "main" preferred over title, compaction and
 * subagent requests; last by the time it started, as the ids of a store
 * that several records write follow the order of their commits, not of
 * the turns) gives one conversation: those
 * messages plus the recorded reply as the final assistant turn. The
 * conversation is then rendered by both servers' /tokenize like any other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

#include "drift/corpus.h"
#include "store/store.h"
#include "store/xchg.h"

struct walk {
    struct drift_corpus *c;
    size_t first;    /* items before this one are not ours */
    bool *is_main;   /* per item of ours: filled from a "main" exchange */
    double *started; /* and when that exchange started (0: unknown) */
    size_t main_alloc;
};

/* Whether an exchange that started at a comes after one that started at
 * b; with either time unknown, the one read later (a larger id) does. */
static bool is_later(double a, double b)
{
    return a <= 0 || b <= 0 || a >= b;
}

static json_t *conversation(const struct xchg *x)
{
    json_t *m = json_deep_copy(json_object_get(x->req_body, "messages"));
    const json_t *content = json_object_get(x->reply, "content");
    if (json_is_string(content) && json_string_length(content) > 0) {
        json_t *a = json_object();
        json_object_set_new(a, "role", json_string("assistant"));
        json_object_set(a, "content", (json_t *)content);
        const json_t *rc = json_object_get(x->reply, "reasoning_content");
        if (json_is_string(rc))
            json_object_set(a, "reasoning_content", (json_t *)rc);
        json_array_append_new(m, a);
    }
    return m;
}

static int each(const struct xchg *x, void *ud)
{
    struct walk *w = ud;
    struct drift_corpus *c = w->c;
    const json_t *msgs = json_object_get(x->req_body, "messages");
    char name[64];
    if (!json_is_array(msgs) || json_array_size(msgs) == 0 || !x->session)
        return 0;
    bool is_main = x->kind && !strcmp(x->kind, "main");
    snprintf(name, sizeof(name), "session %.48s", x->session);
    size_t i;
    for (i = w->first; i < c->n; i++)
        if (!strcmp(c->items[i].name, name))
            break;
    if (i == c->n) {
        struct drift_item *it = drift_corpus_push(c);
        snprintf(it->name, sizeof(it->name), "%s", name);
        if (c->n - w->first > w->main_alloc) {
            w->main_alloc = 2 * (c->n - w->first) + 8;
            w->is_main = xrealloc(w->is_main, w->main_alloc * sizeof(bool));
            w->started = xrealloc(w->started, w->main_alloc * sizeof(double));
        }
        w->is_main[i - w->first] = false;
        w->started[i - w->first] = 0;
    } else if (w->is_main[i - w->first] && !is_main) {
        return 0; /* keep the session's main thread */
    } else if (w->is_main[i - w->first] == is_main &&
               !is_later(x->started, w->started[i - w->first])) {
        return 0; /* a turn before the one kept, committed after it */
    }
    struct drift_item *it = &c->items[i];
    json_decref(it->messages);
    it->messages = conversation(x);
    w->is_main[i - w->first] = is_main;
    w->started[i - w->first] = x->started;
    return 0;
}

/* A row the store could not decode: left out, and named in c->skipped. */
static void skip(const struct xchg_bad *b, void *ud)
{
    struct walk *w = ud;
    char *line = xasprintf("%sexchange %lld: column '%s': %s\n",
                           w->c->skipped ? w->c->skipped : "", (long long)b->id,
                           b->column, b->why);
    free(w->c->skipped);
    w->c->skipped = line;
}

int drift_corpus_from_db(struct drift_corpus *c, const char *path,
                         const char *session, struct diag *d)
{
    struct db *db;
    struct walk w = {c, c->n, NULL, NULL, 0};
    size_t before = c->n;
    int ret = store_open(path, &db, d);
    if (ret)
        return ret;
    ret = xchg_each_checked(db, session, each, skip, &w, d);
    store_close(db);
    free(w.is_main);
    free(w.started);
    if (ret)
        return ret;
    if (c->n == before)
        return diag_set(d, ENODATA,
                        "no recorded chat session%s%s in '%s': record one "
                        "with 'fidelity record' or give --corpus",
                        session ? " " : "", session ? session : "", path);
    return 0;
}
