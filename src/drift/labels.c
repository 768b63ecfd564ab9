/*
 * drift labels: the text of the worst positions (their forced and top-1
 * tokens, the text before and after each) through the golden's
 * /detokenize, one batched request per sequence rather than five per
 * position: the pieces of a sequence (its text cut at every position a
 * label needs, then each single token) are sent as one list with a
 * separator between them, and the answer is split at the separator's
 * text. The separator is checked first: its ids, detokenized twice in a
 * row, must give its text twice, exactly (a tokenizer that adds a prefix
 * space or a special token mid-stream fails it); when the check or a
 * split fails, that sequence's labels come one request each, as before.
 * Contract in render.h.
 */
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "drift/render.h"

/* Rare in model text, plain ASCII, and its own line. */
static const char SEP[] = "\n@@fidelity-label-split@@\n";

struct sep {
    uint32_t *ids;
    size_t n;
};

/* The separator's ids, checked (see the head of the file); false when
 * this tokenizer cannot carry it. */
static bool sep_find(struct drift_side *g, struct sep *s)
{
    struct diag d;
    memset(s, 0, sizeof(*s));
    if (drift_side_tokenize(g, NULL, SEP, &s->ids, &s->n, &d) || !s->n)
        return false;
    /* a leading special token (BOS) is tried with and without */
    for (int drop = 0; drop < 2 && s->n > (size_t)drop; drop++) {
        size_t n = s->n - (size_t)drop;
        uint32_t *two = xmalloc(2 * n * sizeof(*two));
        memcpy(two, s->ids + drop, n * sizeof(*two));
        memcpy(two + n, s->ids + drop, n * sizeof(*two));
        char *text = NULL;
        bool ok = !drift_side_detokenize(g, two, 2 * n, &text, &d) &&
                  strlen(text) == 2 * strlen(SEP) &&
                  !strncmp(text, SEP, strlen(SEP)) &&
                  !strcmp(text + strlen(SEP), SEP);
        free(text);
        free(two);
        if (ok) {
            memmove(s->ids, s->ids + drop, n * sizeof(*s->ids));
            s->n = n;
            return true;
        }
    }
    free(s->ids);
    s->ids = NULL;
    return false;
}

/* The last max bytes of s, starting on a UTF-8 character; fresh. */
static char *tail_text(const char *s, size_t len, size_t max)
{
    size_t k = len > max ? len - max : 0;
    while (k < len && ((unsigned char)s[k] & 0xc0) == 0x80)
        k++;
    return xstrndup(s + k, len - k);
}

/* Whether token key k of worst position w needs a lookup (see
 * drift_worst_texts in render.h). */
static bool wants(const struct drift_worst *w, int k, const uint64_t *keys)
{
    return !(keys[k] & DRIFT_KEY_TEXT) &&
           !(k > 0 && keys[k] == 0 && w->top1_g == w->top1_c);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* One request each, as the labels were taken before the batch: the
 * fallback. */
static void one_by_one(struct drift_side *g, const struct drift_result *r,
                       const struct drift_worst *w, struct drift_worst_text *t)
{
    struct diag d;
    const uint64_t keys[3] = {w->forced, w->top1_g, w->top1_c};
    char **dst[3] = {&t->token, &t->top1_g, &t->top1_c};
    for (int k = 0; k < 3; k++) {
        uint32_t one = (uint32_t)keys[k];
        if (wants(w, k, keys) && drift_side_detokenize(g, &one, 1, dst[k], &d))
            *dst[k] = NULL;
    }
    if (w->seq >= r->corpus.n)
        return;
    const struct drift_item *it = &r->corpus.items[w->seq];
    char *pre = NULL;
    if (w->pos <= it->n &&
        !drift_side_detokenize(g, it->ids, w->pos, &pre, &d)) {
        t->offset = (long)strlen(pre);
        t->before = tail_text(pre, strlen(pre), DRIFT_CONTEXT_BYTES);
    }
    free(pre);
    size_t from = (size_t)w->pos + 1;
    size_t cnt = it->n > from ? it->n - from : 0;
    if (cnt > DRIFT_CONTEXT_TOKENS)
        cnt = DRIFT_CONTEXT_TOKENS;
    if (cnt && drift_side_detokenize(g, it->ids + from, cnt, &t->after, &d))
        t->after = NULL;
}

/* The pieces of one sequence's batch: its text cut at cuts[0..nc) (the
 * first 0, each piece [cuts[j], cuts[j+1])) and the tokens toks[0..nt). */
struct batch {
    uint32_t *cuts, *toks;
    size_t nc, nt;
    char **piece; /* nc - 1 + nt texts, owned */
    size_t *plen;
};

static void batch_release(struct batch *b)
{
    for (size_t i = 0; b->piece && i < b->nc - 1 + b->nt; i++)
        free(b->piece[i]);
    free(b->piece);
    free(b->plen);
    free(b->cuts);
    free(b->toks);
}

static size_t uniq(uint32_t *v, size_t n)
{
    size_t k = 0;
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_u32);
    for (size_t i = 0; i < n; i++)
        if (!k || v[k - 1] != v[i])
            v[k++] = v[i];
    return k;
}

/* Collects the cuts and tokens the worst positions of sequence seq
 * (those in w[0..n)) need. */
static void batch_plan(const struct drift_item *it, uint32_t seq,
                       const struct drift_worst *w, size_t n, struct batch *b)
{
    memset(b, 0, sizeof(*b));
    b->cuts = xmalloc((3 * n + 1) * sizeof(*b->cuts));
    b->toks = xmalloc((3 * n + 1) * sizeof(*b->toks));
    b->cuts[b->nc++] = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i].seq != seq)
            continue;
        const uint64_t keys[3] = {w[i].forced, w[i].top1_g, w[i].top1_c};
        for (int k = 0; k < 3; k++)
            if (wants(&w[i], k, keys))
                b->toks[b->nt++] = (uint32_t)keys[k];
        size_t p = w[i].pos <= it->n ? w[i].pos : it->n;
        size_t end = p + 1 + DRIFT_CONTEXT_TOKENS;
        b->cuts[b->nc++] = (uint32_t)p;
        b->cuts[b->nc++] = (uint32_t)(p + 1 < it->n ? p + 1 : it->n);
        b->cuts[b->nc++] = (uint32_t)(end < it->n ? end : it->n);
    }
    b->nc = uniq(b->cuts, b->nc);
    b->nt = uniq(b->toks, b->nt);
}

/* Sends the batch and splits the answer; false when it does not split
 * into the pieces sent. */
static bool batch_fetch(struct drift_side *g, const struct drift_item *it,
                        const struct sep *s, struct batch *b)
{
    size_t np = b->nc - 1 + b->nt, n = 0;
    uint32_t *ids = xmalloc((it->n + np * (s->n + 1) + 1) * sizeof(*ids));
    for (size_t j = 0; j < np; j++) {
        if (j) {
            memcpy(ids + n, s->ids, s->n * sizeof(*ids));
            n += s->n;
        }
        if (j < b->nc - 1) {
            size_t len = b->cuts[j + 1] - b->cuts[j];
            memcpy(ids + n, it->ids + b->cuts[j], len * sizeof(*ids));
            n += len;
        } else {
            ids[n++] = b->toks[j - (b->nc - 1)];
        }
    }
    char *text = NULL;
    struct diag d;
    int ret = drift_side_detokenize(g, ids, n, &text, &d);
    free(ids);
    if (ret)
        return false;
    b->piece = xcalloc(np ? np : 1, sizeof(*b->piece));
    b->plen = xcalloc(np ? np : 1, sizeof(*b->plen));
    const char *p = text;
    size_t j = 0;
    for (; j < np; j++) {
        const char *e = j + 1 < np ? strstr(p, SEP) : p + strlen(p);
        if (!e)
            break;
        b->plen[j] = (size_t)(e - p);
        b->piece[j] = xstrndup(p, b->plen[j]);
        p = e + (j + 1 < np ? strlen(SEP) : 0);
    }
    bool ok = j == np && !strstr(p, SEP);
    free(text);
    return ok;
}

/* The text of ids [from, to) from the cut pieces; fresh. */
static char *span(const struct batch *b, size_t from, size_t to, size_t *len)
{
    struct buf out = BUF_INIT;
    for (size_t j = 0; j + 1 < b->nc; j++)
        if (b->cuts[j] >= from && b->cuts[j + 1] <= to)
            buf_add(&out, b->piece[j], b->plen[j]);
    return buf_detach(&out, len); /* NUL-terminated, "" when empty */
}

static char *token_text(const struct batch *b, uint32_t id)
{
    uint32_t *at = bsearch(&id, b->toks, b->nt, sizeof(id), cmp_u32);
    return at ? xstrdup(b->piece[b->nc - 1 + (size_t)(at - b->toks)]) : NULL;
}

/* Sequence seq's labels from its batch. */
static void from_batch(const struct drift_item *it, const struct batch *b,
                       const struct drift_worst *w, struct drift_worst_text *t)
{
    const uint64_t keys[3] = {w->forced, w->top1_g, w->top1_c};
    char **dst[3] = {&t->token, &t->top1_g, &t->top1_c};
    for (int k = 0; k < 3; k++)
        if (wants(w, k, keys))
            *dst[k] = token_text(b, (uint32_t)keys[k]);
    size_t len;
    if (w->pos <= it->n) {
        char *pre = span(b, 0, w->pos, &len);
        t->offset = (long)len;
        t->before = tail_text(pre, len, DRIFT_CONTEXT_BYTES);
        free(pre);
    }
    size_t from = (size_t)w->pos + 1;
    size_t cnt = it->n > from ? it->n - from : 0;
    if (cnt > DRIFT_CONTEXT_TOKENS)
        cnt = DRIFT_CONTEXT_TOKENS;
    if (cnt)
        t->after = span(b, from, from + cnt, &len);
}

void drift_worst_texts(struct drift_side *golden, const struct drift_result *r,
                       const struct drift_worst *w, size_t n,
                       struct drift_worst_text *out)
{
    struct sep s;
    bool batched = n > 0 && sep_find(golden, &s);
    bool *done = xcalloc(n ? n : 1, sizeof(*done));
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].offset = -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        struct batch b;
        bool ok = false;
        uint32_t seq = w[i].seq;
        const struct drift_item *it =
            seq < r->corpus.n ? &r->corpus.items[seq] : NULL;
        if (batched && it) {
            batch_plan(it, seq, w, n, &b);
            ok = batch_fetch(golden, it, &s, &b);
        }
        for (size_t k = i; k < n; k++) {
            if (w[k].seq != seq || done[k])
                continue;
            if (ok)
                from_batch(it, &b, &w[k], &out[k]);
            else
                one_by_one(golden, r, &w[k], &out[k]);
            done[k] = true;
        }
        if (batched && it)
            batch_release(&b);
    }
    free(done);
    if (batched)
        free(s.ids);
}
