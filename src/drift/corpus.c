/*
 * drift corpus: built-in conversations and the JSONL reader. Contract in
 * corpus.h.
 */
#include "drift/corpus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/rng.h"
#include "core/xalloc.h"

void drift_corpus_init(struct drift_corpus *c)
{
    memset(c, 0, sizeof(*c));
}

static void item_release(struct drift_item *it)
{
    json_decref(it->messages);
    free(it->ids);
    memset(it, 0, sizeof(*it));
}

void drift_corpus_release(struct drift_corpus *c)
{
    for (size_t i = 0; i < c->n; i++)
        item_release(&c->items[i]);
    free(c->items);
    free(c->skipped);
    drift_corpus_init(c);
}

struct drift_item *drift_corpus_push(struct drift_corpus *c)
{
    if (c->n == c->alloc) {
        c->alloc = c->alloc ? c->alloc * 2 : 8;
        c->items = xrealloc(c->items, c->alloc * sizeof(*c->items));
    }
    struct drift_item *it = &c->items[c->n++];
    memset(it, 0, sizeof(*it));
    return it;
}

static const char *const colors[] = {"blue",  "red",    "green", "amber",
                                     "white", "silver", "black", "violet"};
static const char *const things[] = {"door",   "locker", "vault", "gate",
                                     "server", "drawer", "safe",  "account"};
static const char *const attrs[] = {"access code", "room number", "pin",
                                    "serial",      "budget",      "owner id"};
static const char *const words[] = {
    "the",     "report",  "shows",    "that",    "our",    "team",
    "moved",   "quickly", "through",  "several", "steps",  "before",
    "lunch",   "while",   "weather",  "stayed",  "mild",   "and",
    "nobody",  "noticed", "a",        "small",   "change", "in",
    "plans",   "so",      "we",       "wrote",   "notes",  "about",
    "budgets", "tickets", "meetings", "drafts",  "ideas",  "later"};

#define PICK(r, a) (a[rng_below(r, sizeof(a) / sizeof(a[0]))])

static void filler(struct rng *r, struct buf *b, size_t chars)
{
    size_t start = b->len;
    while (b->len - start < chars) {
        unsigned n = 6 + (unsigned)rng_below(r, 10);
        for (unsigned i = 0; i < n; i++)
            buf_printf(b, "%s%s", i ? " " : (b->len > start ? " " : ""),
                       PICK(r, words));
        buf_adds(b, ".");
    }
}

static json_t *msg(const char *role, const char *content)
{
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_string(content));
    return m;
}

json_t *drift_corpus_conversation(uint64_t seed, unsigned idx, size_t chars)
{
    struct rng r;
    struct buf b = BUF_INIT;
    json_t *a = json_array();
    size_t total = 0;
    unsigned nfacts = 0;
    char facts[16][96];

    rng_seed(&r, seed * 1000003ULL + idx);
    json_array_append_new(
        a, msg("system", "You are a careful assistant. Remember every fact "
                         "the user states and answer questions about them."));
    while (total < chars) {
        buf_reset(&b);
        unsigned v = 1000 + (unsigned)rng_below(&r, 9000);
        const char *at = PICK(&r, attrs);
        char ent[48];
        snprintf(ent, sizeof(ent), "the %s %s", PICK(&r, colors),
                 PICK(&r, things));
        buf_printf(&b, "The %s for %s is %u. ", at, ent, v);
        if (nfacts < 16)
            snprintf(facts[nfacts++], sizeof(facts[0]), "%s for %s", at, ent);
        filler(&r, &b, 200 + rng_below(&r, 600));
        if (nfacts > 1 && rng_below(&r, 2))
            buf_printf(&b, " What is the %s?", facts[rng_below(&r, nfacts)]);
        json_array_append_new(a, msg("user", buf_str(&b)));
        total += b.len;
        buf_reset(&b);
        buf_adds(&b, "Noted. ");
        filler(&r, &b, 80 + rng_below(&r, 300));
        json_array_append_new(a, msg("assistant", buf_str(&b)));
        total += b.len;
    }
    buf_release(&b);
    return a;
}

void drift_corpus_builtin(struct drift_corpus *c, uint64_t seed, unsigned count,
                          unsigned max_context)
{
    /* about 3.5 characters per token in the sim's tokenizer, and real
     * tokenizers are denser: 4.5 per token overshoots, then run.c cuts
     * the rendered ids to max_context */
    size_t chars = (size_t)max_context * 9 / 2 + 64;
    for (unsigned i = 0; i < count; i++) {
        struct drift_item *it = drift_corpus_push(c);
        it->messages = drift_corpus_conversation(seed, i, chars);
        snprintf(it->name, sizeof(it->name), "builtin#%u", i);
    }
}

static int ids_from(const json_t *a, const char *where, struct drift_item *item,
                    struct diag *d)
{
    size_t n = json_array_size(a);
    if (n < 2)
        return diag_set(d, EINVAL,
                        "%s: a token-id list needs at least 2 ids, got %zu",
                        where, n);
    item->ids = xmalloc(n * sizeof(*item->ids));
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > UINT32_MAX) {
            free(item->ids);
            item->ids = NULL;
            return diag_set(d, EINVAL,
                            "%s: token %zu is not a non-negative integer id",
                            where, i);
        }
        item->ids[i] = (uint32_t)json_integer_value(v);
    }
    item->n = n;
    return 0;
}

int drift_corpus_parse_line(const char *line, size_t len, const char *where,
                            struct drift_item *item, struct diag *d)
{
    json_error_t err;
    size_t i = 0;
    int ret = 0;

    memset(item, 0, sizeof(*item));
    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' ||
                       line[i] == '\n'))
        i++;
    if (i == len)
        return -ENODATA;
    json_t *j = json_loadb(line, len, 0, &err);
    if (!j)
        return diag_set(d, EINVAL,
                        "%s: not JSON (%s at column %d); each line must be "
                        "{\"messages\": [...]} or a list of token ids",
                        where, err.text, err.column);
    snprintf(item->name, sizeof(item->name), "%s", where);
    const json_t *m = json_object_get(j, "messages");
    const json_t *t = json_is_array(j) ? j : json_object_get(j, "tokens");
    if (!t)
        t = json_object_get(j, "input_ids");
    if (json_is_array(m) && json_array_size(m) > 0) {
        item->messages = json_incref((json_t *)m);
    } else if (json_is_array(t)) {
        ret = ids_from(t, where, item, d);
    } else {
        ret = diag_set(d, EINVAL,
                       "%s: no non-empty 'messages', 'tokens' or "
                       "'input_ids' array",
                       where);
    }
    json_decref(j);
    return ret;
}

int drift_corpus_load(struct drift_corpus *c, const char *path, struct diag *d)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    char *line = NULL, where[64];
    size_t cap = 0, lineno = 0, before = c->n;
    ssize_t got;
    int ret = 0;

    if (!f) {
        int e = errno;
        return diag_set(d, e, "cannot open corpus '%s': %s", path, strerror(e));
    }
    while ((got = getline(&line, &cap, f)) >= 0) {
        struct drift_item it;
        lineno++;
        snprintf(where, sizeof(where), "%.40s:%zu", path, lineno);
        ret = drift_corpus_parse_line(line, (size_t)got, where, &it, d);
        if (ret == -ENODATA) {
            ret = 0;
            continue;
        }
        if (ret)
            break;
        *drift_corpus_push(c) = it;
    }
    if (!ret && ferror(f))
        ret = diag_set(d, EIO, "cannot read corpus '%s'", path);
    free(line);
    if (f != stdin)
        fclose(f);
    if (!ret && c->n == before)
        ret = diag_set(d, ENODATA,
                       "corpus '%s' is empty: give one conversation or "
                       "token-id list per line",
                       path);
    return ret;
}

long drift_ids_first_diff(const uint32_t *a, size_t na, const uint32_t *b,
                          size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return na == nb ? -1 : (long)n;
}
