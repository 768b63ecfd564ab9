/*
 * audit_int: what the rule files of src/audit/ share and nobody else sees:
 * a per-request view computed once per session (kind, model, message
 * hashes, turn, predecessor in the conversation; view.c), the finding
 * builder and rule table (audit.c) and the message and JSON helpers
 * (msg.c). Names carry the audit_ prefix, except the request view's
 * functions, whose prefix is areq_ (areqs_ for the whole session's).
 */
#ifndef AUDIT_AUDIT_INT_H
#define AUDIT_AUDIT_INT_H

#include "audit/audit.h"

/* Message roles, as view.c codes them once per distinct message. */
enum { AROLE_OTHER = 0, AROLE_SYSTEM, AROLE_USER, AROLE_ASSISTANT, AROLE_TOOL };

/* The per-message view of one shared messages array (xchg.req_msgs): the
 * requests whose messages are views of the same array share it, each
 * reading its first nmsg positions; every position is computed once. */
struct alin;

struct areq {
    const struct xchg *x;
    struct alin *lin;  /* the view of msgs' array; NULL when none */
    bool lin_own;      /* this request made lin (areqs_free frees it) */
    const char *kind;  /* x->kind, or classified from the body */
    const char *model; /* "" when absent */
    json_t *msgs;      /* borrowed messages array, NULL when none */
    size_t nmsg;
    /* per message (lin's arrays, borrowed; valid for the first nmsg) */
    const uint64_t *mhash;      /* reasoning fields left out */
    const size_t *mbytes;       /* canonical JSON bytes per message */
    const unsigned char *mrole; /* AROLE_* per message */
    size_t msg_bytes;           /* sum of mbytes */
    size_t tool_bytes;          /* compact JSON bytes of the tools array */
    int users;                  /* user messages in the request */
    bool tools;                 /* a non-empty tools array */
    int turn;                   /* session user turn, 1-based */
    long prev;            /* predecessor in the same conversation, -1 none */
    size_t link_k;        /* prev's messages are this request's first link_k
                           * (0: prev was chosen by the fallback) */
    bool retry;           /* the same messages as prev: sent again */
    int64_t lost_summary; /* set by audit_rule_history: the id of the summary
                           * request whose lost history this request was
                           * given (history.compaction_lost), 0: none */
    size_t new_msgs;      /* messages beyond what prev + reply explain */
    bool interrupted;     /* set by audit_rule_history: the user left this
                           * request's stream and the conversation went on
                           * without its partial reply (history.interrupted
                           * on the next request); audit_rule_stream says no more */
    /* The reply (from x->reply), borrowed; "" / NULL when absent. */
    const char *content;
    const char *reasoning;
    json_t *tool_calls;
    json_t *usage;
    const char *finish;
    long prompt_tokens; /* -1 when not reported */
    long completion_tokens;
};

/* The messages of an exchange: its view (xchg.req_msgs, the first
 * req_msgs_n of an array that later requests may have extended; always so
 * in a set), else req_body's messages array; NULL when neither. */
static inline json_t *xmsgs(const struct xchg *x)
{
    if (x->req_msgs)
        return x->req_msgs;
    json_t *m = json_object_get(x->req_body, "messages");
    return json_is_array(m) ? m : NULL;
}

static inline size_t xmsg_n(const struct xchg *x)
{
    return x->req_msgs ? x->req_msgs_n : json_array_size(xmsgs(x));
}

static inline json_t *xmsg(const struct xchg *x, size_t i)
{
    return i < xmsg_n(x) ? json_array_get(xmsgs(x), i) : NULL;
}

struct actx {
    const struct audit_opts *o;
    struct audit_list *out;
    const struct audit_session *s;
    struct areq *r;
    size_t n;
    void *truncation_memo; /* truncation.c's, while it runs */
};

/* view.c: the per-request view. */

/* Builds the view of session s; free with areqs_free. */
struct areq *areqs_build(const struct audit_session *s);
void areqs_free(struct areq *r, size_t n);

/* The number of leading messages a and b share (equal hashes): O(1) when
 * both are views of one array. */
size_t areq_common(const struct areq *a, const struct areq *b);
/* A hash of r's first k messages (k <= nmsg; reasoning left out), equal
 * for requests whose first k messages are equal. */
uint64_t areq_key(const struct areq *r, size_t k);
/* The canonical JSON bytes of r's first k messages (k <= nmsg). */
size_t areq_bytes(const struct areq *r, size_t k);
/* A kind of the conversation itself: "main" or "subagent". */
bool audit_is_main_kind(const char *kind);

/* history.c: what r did to the history of its predecessor p (p's messages
 * and reply), as the history rule classifies it; summary: the reply of a
 * compaction request between them, or NULL. ev (may be NULL) gets the
 * evidence: "removed" (indices of p and "reply"), "first_divergence",
 * "summary_found", "pruned", ... (docs/AUDIT.md). */
void audit_step_views(const struct areq *p, const struct areq *r,
                      const char *summary, struct audit_step *st, json_t *ev);

/* reasoning.c: how assistant message m sent back the reasoning streamed
 * with its reply: "equal", "dropped", "empty", "inline" or "changed". */
const char *audit_reasoning_state(json_t *m, const char *streamed);

/* audit.c: the rule table's runner and the finding builder. */

/* Appends a finding about r (NULL: the session) taking evidence. */
void audit_finding_add(struct actx *c, enum audit_sev sev, const char *rule,
                       const struct areq *r, json_t *evidence, const char *fmt,
                       ...) __attribute__((format(printf, 6, 7)));

/* msg.c: message and JSON helpers. */

/* Text of a message's content: the string, or the concatenated "text" of
 * content parts; "" otherwise. Fresh string. */
char *audit_msg_text(json_t *msg);
/* Whether x is a title request serving the conversation from belongs to,
 * by structure, whatever its words (docs/AUDIT.md): a single-turn side
 * request (no tools, no tool call in its answer, no assistant message, one
 * or two user messages) whose answer is short (one line of at most
 * AUDIT_TITLE_MAX bytes, or empty: a budget spent on reasoning), sent
 * under a system prompt of its own (another than from's, or none where
 * from has one), and whose user text quotes, inside more text, a message
 * from sent or received (a user turn, an assistant message, or from's
 * reply: the first 64 bytes of its first line, as harnesses cut what they
 * quote; a user text that is only that message quotes nothing): opencode
 * and Kilo send a title generator's prompt and quote the user's messages,
 * Continue no prompt and the last reply. A request under the
 * conversation's own system prompt (the same message sent again, a
 * gateway's compacted turn) is not one; a question that mentions a title,
 * or a system prompt about titles, makes none by itself. False when from
 * is NULL or x itself. */
#define AUDIT_TITLE_MAX 160
bool audit_is_title(const struct xchg *x, const struct xchg *from);
/* True when needle occurs in the first n bytes of s (case-insensitive). */
bool audit_msg_head_has(const char *s, size_t n, const char *needle);
/* Reasoning sent with an assistant message (reasoning_content, else
 * reasoning) or NULL when neither key is present. */
json_t *audit_msg_reasoning(json_t *msg);
/* Numbers compare by value (1 == 1.0); objects and arrays recursively. */
bool audit_json_same(json_t *a, json_t *b);
/* Dotted path lookup ("chat_template_kwargs.enable_thinking"). */
json_t *audit_json_path(json_t *obj, const char *path);

/* set.c: the --profile entry for model (exact key, else first matching
 * glob). */
json_t *audit_profile_for(json_t *profile, const char *model);

/* The rules, one file each, in the order audit.c runs them. */
void audit_rule_history(struct actx *c);
void audit_rule_sampling(struct actx *c);
void audit_rule_reasoning(struct actx *c);
void audit_rule_truncation(struct actx *c);
void audit_rule_first_message(struct actx *c);
void audit_rule_degeneration(struct actx *c);
void audit_rule_stream(struct actx *c);
void audit_rule_cache(struct actx *c);
void audit_rule_malformed(struct actx *c);

#endif
