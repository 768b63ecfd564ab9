/*
 * firstmsg: rule 5. A reply (content or reasoning) that claims there is no
 * earlier conversation while the conversation had one. When the request
 * carried two or more user turns, or the summary of a compaction that kept
 * the history, the server lost them (template, window, truncation); when
 * it carried fewer than the session had, the harness did.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/buf.h"
#include "core/hash.h"
#include "core/xalloc.h"

/* Phrases real models use when they see no history (lowercase, straight
 * apostrophes; the text is normalised the same way). */
static const char *const claims[] = {
    "start of our conversation",
    "beginning of our conversation",
    "very first message",
    "first message of our conversation",
    "first message in our conversation",
    "don't see any earlier message",
    "do not see any earlier message",
    "don't see any previous message",
    "no earlier message",
    "no previous message",
    "no previous conversation",
    "no prior conversation",
    "no earlier conversation",
    "haven't discussed anything",
    "don't have any context from",
    "don't have access to previous",
    "we haven't talked",
};

bool audit_is_first_message_claim(const char *text)
{
    struct buf b = BUF_INIT;
    bool hit = false;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        /* U+2019 RIGHT SINGLE QUOTATION MARK as "'" */
        if (p[0] == 0xe2 && p[1] == 0x80 && p[2] == 0x99) {
            buf_addch(&b, '\'');
            p += 2;
            continue;
        }
        buf_addch(&b, (char)tolower(*p));
    }
    for (size_t i = 0; i < sizeof(claims) / sizeof(*claims) && !hit; i++)
        hit = strstr(buf_str(&b), claims[i]) != NULL;
    buf_release(&b);
    return hit;
}

/* A set of message hashes (open addressing, 0 is empty). */
struct hset {
    uint64_t *v;
    size_t n, cap;
};

static bool hset_has(const struct hset *h, uint64_t k)
{
    if (!h->cap)
        return false;
    k = k ? k : 1;
    size_t j = hash_mix64(k) & (h->cap - 1);
    while (h->v[j] && h->v[j] != k)
        j = (j + 1) & (h->cap - 1);
    return h->v[j] == k;
}

static void hset_add(struct hset *h, uint64_t k)
{
    k = k ? k : 1;
    if (2 * (h->n + 1) > h->cap) {
        struct hset old = *h;
        h->cap = old.cap ? 2 * old.cap : 256;
        h->v = xcalloc(h->cap, sizeof(*h->v));
        h->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.v[i])
                hset_add(h, old.v[i]);
        free(old.v);
    }
    size_t j = hash_mix64(k) & (h->cap - 1);
    while (h->v[j] && h->v[j] != k)
        j = (j + 1) & (h->cap - 1);
    if (!h->v[j]) {
        h->v[j] = k;
        h->n++;
    }
}

/* How many of the user turns in seen r does not carry. */
static size_t missing_turns(const struct hset *seen, const struct areq *r)
{
    struct hset mine = {0};
    size_t miss = 0;
    for (size_t k = 0; k < r->nmsg; k++)
        if (r->mrole[k] == AROLE_USER)
            hset_add(&mine, r->mhash[k]);
    for (size_t i = 0; i < seen->cap; i++)
        if (seen->v[i] && !hset_has(&mine, seen->v[i]))
            miss++;
    free(mine.v);
    return miss;
}

/* The truncation finding (truncation.below, .flat, .pinned, .at_limit)
 * the truncation rule, which runs before this one, raised on r; NULL. */
static const char *truncated_by_server(const struct actx *c,
                                       const struct areq *r)
{
    for (size_t i = 0; i < c->out->n; i++) {
        const struct audit_finding *f = &c->out->v[i];
        if (f->request == r->x->id && !strncmp(f->rule, "truncation.", 11) &&
            strcmp(f->rule, "truncation.length_early") &&
            strcmp(f->rule, "truncation.context_error"))
            return f->rule;
    }
    return NULL;
}

/* The compactions the history rule (which runs before this one) found in
 * this session with the summary request they relied on: request id and
 * summary request id, in pairs. */
struct kept {
    int64_t *v; /* request, summary, request, summary, ... */
    size_t n;   /* pairs */
};

static void compactions(const struct actx *c, struct kept *k)
{
    memset(k, 0, sizeof(*k));
    /* the session's findings are the last ones of the list */
    for (size_t i = c->out->n; i-- > 0;) {
        const struct audit_finding *f = &c->out->v[i];
        if (strcmp(f->session, c->s->id))
            break;
        json_int_t sum =
            json_integer_value(json_object_get(f->evidence, "summary_request"));
        if (strcmp(f->rule, "history.compaction") || !sum)
            continue;
        k->v = xrealloc(k->v, 2 * (k->n + 1) * sizeof(*k->v));
        k->v[2 * k->n] = f->request;
        k->v[2 * k->n + 1] = sum;
        k->n++;
    }
}

/* The summary request whose reply replaced the history at r and kept it
 * (no history.compaction_lost on r), or NULL. */
static const struct areq *
kept_summary(const struct actx *c, const struct kept *k, const struct areq *r)
{
    if (r->lost_summary)
        return NULL;
    for (size_t p = 0; p < k->n; p++) {
        if (k->v[2 * p] != r->x->id)
            continue;
        for (size_t j = 0; j < c->n; j++)
            if (c->r[j].x->id == k->v[2 * p + 1] && c->r[j].content &&
                *c->r[j].content)
                return &c->r[j];
    }
    return NULL;
}

/* Whether a message of r holds text (the summary a compaction put there). */
static bool carries_text(const struct areq *r, const char *text)
{
    bool yes = false;
    for (size_t k = 0; k < r->nmsg && !yes; k++) {
        char *t = audit_msg_text(json_array_get(r->msgs, k));
        yes = strstr(t, text) != NULL;
        free(t);
    }
    return yes;
}

void audit_rule_first_message(struct actx *c)
{
    struct hset seen = {0};  /* user turns of the session's main requests */
    struct hset since = {0}; /* those since the latest kept summary */
    int64_t lost = 0;        /* the latest summary that lost the history */
    const struct areq *sum = NULL; /* the latest summary that kept it */
    struct kept kept;
    compactions(c, &kept);
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        if (!r->msgs || !audit_is_main_kind(r->kind))
            continue;
        if (r->lost_summary) {
            lost = r->lost_summary;
            sum = NULL;
        }
        const struct areq *ks = kept_summary(c, &kept, r);
        if (ks) {
            /* the summary stands for the turns it replaced: a request
             * that carries it carries them */
            free(since.v);
            memset(&since, 0, sizeof(since));
            lost = 0;
            sum = ks;
        }
        int before = (int)seen.n;
        bool in_content =
            r->content && audit_is_first_message_claim(r->content);
        bool in_reason =
            r->reasoning && audit_is_first_message_claim(r->reasoning);
        /* the summary of a compaction that kept the history, when r
         * carries it, stands for the user turns before it */
        bool via_summary =
            (in_content || in_reason) && sum && carries_text(r, sum->content);
        size_t miss = in_content || in_reason
                          ? missing_turns(via_summary ? &since : &seen, r)
                          : 0;
        /* only the messages a prefix-linked request added are new */
        for (size_t k = r->prev >= 0 ? r->link_k : 0; k < r->nmsg; k++)
            if (r->mrole[k] == AROLE_USER) {
                hset_add(&seen, r->mhash[k]);
                hset_add(&since, r->mhash[k]);
            }
        if (!in_content && !in_reason)
            continue;
        /* the server is blamed only when the request carried the history:
         * every user turn the session had so far, two or more of them or
         * the summary that stands for them (the facts then sit in
         * assistant text, which the model has to read) */
        bool carried = (r->users >= 2 || via_summary) && !miss;
        bool after_lost = lost != 0;
        /* a request the server cut: whatever the harness sent (a summary
         * that still held the history), the model saw less of it */
        const char *cut = truncated_by_server(c, r);
        if (!carried && !miss)
            continue; /* it lacked nothing: truly the first message */
        const char *blame = carried || cut ? "server" : "harness";
        json_t *ev = json_pack("{s:s, s:s, s:i, s:i, s:I, s:s}", "blame", blame,
                               "where", in_content ? "content" : "reasoning",
                               "user_turns_sent", r->users, "user_turns_before",
                               before, "messages_sent", (json_int_t)r->nmsg,
                               "reply", in_content ? r->content : r->reasoning);
        if (after_lost && !carried)
            json_object_set_new(ev, "compaction_lost_request",
                                json_integer(lost));
        if (cut)
            json_object_set_new(ev, "truncation", json_string(cut));
        if (via_summary && carried)
            json_object_set_new(ev, "summary_request",
                                json_integer(sum->x->id));
        if (cut && !carried)
            audit_finding_add(
                c, AUDIT_ERROR, "first_message.claim", r, ev,
                "reply claims no earlier conversation: the server cut this "
                "request (%s on it); blame the server",
                cut);
        else if (after_lost && !carried)
            audit_finding_add(
                c, AUDIT_ERROR, "first_message.claim", r, ev,
                "reply claims no earlier conversation: the history "
                "was replaced by the summary of request %lld, which "
                "had lost it (history.compaction_lost); blame the "
                "harness",
                (long long)lost);
        else if (via_summary && carried)
            audit_finding_add(
                c, AUDIT_ERROR, "first_message.claim", r, ev,
                "reply claims no earlier conversation although the request "
                "carried the history in the summary of request %lld; blame "
                "the server",
                (long long)sum->x->id);
        else
            audit_finding_add(
                c, AUDIT_ERROR, "first_message.claim", r, ev,
                "reply claims no earlier conversation although %s; blame "
                "the %s",
                carried ? "the request carried the history"
                        : "the session had earlier turns the request left out",
                blame);
    }
    free(seen.v);
    free(since.v);
    free(kept.v);
}
