/*
 * firstmsg: rule 5. A reply (content or reasoning) that claims there is no
 * earlier conversation while the conversation had one. When the request
 * carried two or more user turns the server lost them (template, window,
 * truncation); when it carried fewer than the session had, the harness
 * did.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit_int.h"
#include "core/buf.h"

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

void rule_first_message(struct actx *c)
{
    int most = 0; /* user messages of the fullest main request so far */
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        int before = most;
        if (!r->msgs || !is_main_kind(r->kind))
            continue;
        if (r->users > most)
            most = r->users;
        bool in_content =
            r->content && audit_is_first_message_claim(r->content);
        bool in_reason =
            r->reasoning && audit_is_first_message_claim(r->reasoning);
        if (!in_content && !in_reason)
            continue;
        /* the server is blamed only when the request carried the history:
         * at least as many user turns as any earlier request had */
        bool carried = r->users >= 2 && r->users >= before;
        bool after_lost =
            c->lost_summary && c->lost_at >= 0 && (size_t)c->lost_at <= i;
        if (!carried && r->users >= before)
            continue; /* it lacked nothing: truly the first message */
        const char *blame = carried ? "server" : "harness";
        json_t *ev = json_pack("{s:s, s:s, s:i, s:i, s:I, s:s}", "blame", blame,
                               "where", in_content ? "content" : "reasoning",
                               "user_turns_sent", r->users, "user_turns_before",
                               before, "messages_sent", (json_int_t)r->nmsg,
                               "reply", in_content ? r->content : r->reasoning);
        if (after_lost && !carried)
            json_object_set_new(ev, "compaction_lost_request",
                                json_integer(c->lost_summary));
        if (after_lost && !carried)
            finding_add(c, AUDIT_ERROR, "first_message.claim", r, ev,
                        "reply claims no earlier conversation: the history "
                        "was replaced by the summary of request %lld, which "
                        "had lost it (history.compaction_lost); blame the "
                        "harness",
                        (long long)c->lost_summary);
        else
            finding_add(
                c, AUDIT_ERROR, "first_message.claim", r, ev,
                "reply claims no earlier conversation although %s; blame "
                "the %s",
                carried ? "the request carried the history"
                        : "the session had earlier turns the request left out",
                blame);
    }
}
