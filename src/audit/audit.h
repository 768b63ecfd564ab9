/*
 * audit: turns recorded exchanges (struct xchg, see store/xchg.h) into
 * findings with evidence: history rewrites, sampling parameters, reasoning
 * sent back, silent truncation, "first message" replies, degeneration and
 * stream integrity. Pure functions over an in-memory set of exchanges
 * grouped by session: no store, no network, no printing. cmd_audit.c,
 * cmd_sessions.c and cmd_show.c fill a set with xchg_each and print.
 *
 * Rules, thresholds and the JSON shapes are documented in docs/AUDIT.md.
 */
#ifndef AUDIT_AUDIT_H
#define AUDIT_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "store/xchg.h"

enum audit_sev { AUDIT_INFO = 0, AUDIT_WARN, AUDIT_ERROR };

const char *audit_sev_name(enum audit_sev s);
/* "info" | "warn" | "error" -> 0, else -EINVAL. */
int audit_sev_parse(const char *s, enum audit_sev *out);

struct audit_finding {
    enum audit_sev sev;
    char *rule; /* "history.compaction", "sampling.expect", ... */
    char *session;
    int64_t request;  /* xchg id the finding is about */
    int turn;         /* user turn of the session (1-based), 0: none */
    char *summary;    /* one line for humans */
    json_t *evidence; /* object: the bytes, tokens and exact fields */
};

struct audit_list {
    struct audit_finding *v;
    size_t n, alloc;
};

void audit_list_init(struct audit_list *l);
void audit_list_release(struct audit_list *l);
/* Orders by session (order of first exchange), severity (most severe
 * first), request id, rule. */
void audit_list_sort(struct audit_list *l, const char *const *session_order,
                     size_t nsessions);
size_t audit_list_count(const struct audit_list *l, enum audit_sev min);
/* {"severity","rule","session","request","turn","summary","evidence"} */
json_t *audit_finding_json(const struct audit_finding *f);

/* One session: its exchanges in id order. The set owns deep copies. */
struct audit_session {
    char *id;
    /* The session whose task-like tool call (task, agent, ...) handed this
     * one its first user message as the call's "prompt", and that call's
     * id; NULL when none (audit_set_link_subagents). */
    char *parent;
    char *parent_call;
    bool result_returned; /* the parent got that call's tool result */
    struct xchg **x;
    size_t n, alloc;
};

/* A row of the store that could not be read (xchg_bad), kept for the
 * store.corrupt finding. */
struct audit_bad {
    int64_t id;
    char *session; /* "" when its session column was unreadable */
    const char *column, *why;
};

struct audit_set {
    struct audit_session *s;
    size_t n, alloc;
    /* hash -> the one copy of a message or tool list (open addressing;
     * a key of 0 marks an empty slot) */
    uint64_t *ikey;
    json_t **ival;
    size_t in, icap;
    /* the messages of the exchange copied last, with the store's hashes:
     * the next request of a conversation re-sends them first, and takes
     * them from here by position instead of looking each one up */
    json_t *last_msgs;
    uint64_t *last_h;
    size_t last_n, last_cap;
    struct audit_bad *bad; /* rows skipped by audit_set_load, in id order */
    size_t nbad, bad_alloc;
};

void audit_set_init(struct audit_set *set);
void audit_set_release(struct audit_set *set);
/* Copies x into the session named x->session ("" when NULL), appending;
 * sessions keep the order of their first exchange. Messages and tool
 * lists equal to ones already in the set are shared (treat bodies as
 * read-only); resp_raw is kept only for non-2xx responses (NULL for the
 * others), resp_raw_len for every response: the bytes it had. */
void audit_set_add(struct audit_set *set, const struct xchg *x);
const struct audit_session *audit_set_find(const struct audit_set *set,
                                           const char *id);
/* Notes a row the store reader skipped (audit_run reports it as
 * store.corrupt). */
void audit_set_add_bad(struct audit_set *set, const struct xchg_bad *b);

/* Adds the exchanges of the store (of one session when session is not
 * NULL); *n gets how many. A row that cannot be decoded is skipped and
 * noted in set->bad; the rest is read. Errors of the store itself (it
 * cannot be opened or queried) are returned with d filled. */
int audit_set_load(struct db *db, const char *session, struct audit_set *set,
                   size_t *n, struct diag *d);
/* The same from a spill file (docs/RECORD.md); a missing file adds none. */
int audit_set_load_spill(const char *path, const char *session,
                         struct audit_set *set, size_t *n, struct diag *d);
/* Puts each session's exchanges in the order they started. */
void audit_set_order(struct audit_set *set);
/* Regroups the sessions record keyed by their first messages ("p:": no
 * session header) by what their requests share (group.c, docs/AUDIT.md):
 * a request joins the session that last carried one of its user turns or
 * assistant replies; side requests that share none join the conversation
 * under way; one-shot requests stay alone. Sessions keep record's key of
 * their first exchange ("#2", "#3"... when several start from one key),
 * and each moved exchange's session is renamed. Header sessions are left
 * as they are. */
void audit_set_regroup(struct audit_set *set);
/* Side requests (title or summary requests by structure) under a session
 * header of their own that names another session exactly ("title-",
 * "summary-" or "compaction-" and its whole id: Kilo sends its title
 * request as "title-ses_X" beside "ses_X") join that session; an id that
 * only contains another's joins nothing. Call audit_set_order afterwards. */
void audit_set_attach_side(struct audit_set *set);
/* Links subagent sessions to their parent (struct audit_session.parent):
 * a session whose first user message equals the "prompt" argument of a
 * task-like tool call (task, Task, agent, spawn_agent, subagent) another
 * session's reply made. result_returned tells whether the parent later
 * sent that call's tool result. */
void audit_set_link_subagents(struct audit_set *set);
/* Opens the store at db_path, loads it and the spill file (NULL: record's
 * default, db_path + ".spill.jsonl", when it exists), orders the sessions,
 * then keeps session alone when not NULL (audit_set_pick: an abbreviated
 * id works). -ENOENT when neither file exists or no session matches,
 * -EINVAL when several do; other errors are the store's; d says which
 * file or session and why. */
int audit_load_paths(const char *db_path, const char *spill,
                     const char *session, struct audit_set *set,
                     struct diag *d);

enum audit_policy {
    AUDIT_POLICY_NONE = 0, /* report what was sent back, check nothing */
    AUDIT_POLICY_DROP,
    AUDIT_POLICY_KEEP,
    AUDIT_POLICY_KEEP_WITH_TOOLS
};
int audit_policy_parse(const char *s, enum audit_policy *out);
const char *audit_policy_name(enum audit_policy p);

/* Thresholds, shown in every finding that uses one (docs/AUDIT.md). */
struct audit_thresholds {
    double token_deficit;     /* prompt tokens below (1 - x) * expected */
    double token_deficit_min; /* ... and at least this many tokens short */
    double token_exact_min;   /* with /tokenize counts: tokens short */
    long pinned_run;        /* this many requests in a row at one prompt size */
    double flat_growth;     /* request bytes grew by this share ... */
    double flat_tokens;     /* ... while prompt tokens moved less */
    double gzip_ratio;      /* raw / zlib-compressed bytes */
    double ngram_share;     /* share of repeated word 4-grams */
    size_t degen_min_bytes; /* texts shorter than this are not judged */
    double reasoning_ratio; /* reasoning bytes / content bytes */
    size_t reasoning_min_bytes;
    double gap_ms;        /* longest pause between SSE chunks */
    double added_ttfb_ms; /* down_ttfb - up_ttfb */
    /* prefix-cache reuse (cache.c) */
    double cache_min_shared;   /* cache.refill: shared tokens at least */
    double cache_refill_share; /* ... and more than this share refilled */
    long cache_unused_turns;   /* cache.reply_not_reused: turns */
    double cache_drop_share;   /* cache.reuse_drop: below this x median */
    long cache_drop_run;       /* ... for this many requests in a row */
    double cache_idle_s;       /* a longer gap excuses a miss */
};
extern const struct audit_thresholds audit_default_thresholds;

struct audit_opts {
    /* --expect KEY=VALUE: key (dotted path into the body) -> JSON value;
     * JSON null means "must not be sent". Borrowed, may be NULL. */
    json_t *expect;
    /* Parsed --profile file (audit_profile_load), borrowed, may be NULL. */
    json_t *profile;
    enum audit_policy policy;
    /* Context length of the server in tokens, 0 when unknown (profile's
     * context_length applies then). */
    long context_length;
    /* Exact prompt token counts from the server's /tokenize, keyed by the
     * decimal xchg id; NULL: use the per-session bytes-per-token ratio. */
    json_t *tokenized;
    struct audit_thresholds th;
};

void audit_opts_init(struct audit_opts *o);

/* Parses "KEY=VALUE" into expect (VALUE as JSON when it parses, else as a
 * string). -EINVAL with d filled on a missing '=' or empty key. */
int audit_expect_add(json_t *expect, const char *arg, struct diag *d);
/*
 * Checks a profile document: {"models": {"GLOB": {"params": {...},
 * "reasoning_policy": "...", "context_length": N}}}. -EINVAL with d naming
 * the offending key. On success takes a reference of doc.
 */
int audit_profile_check(json_t *doc, struct diag *d);

/* Runs every rule over every session of set, appending to out; then a
 * store.corrupt finding (error) for each row in set->bad. */
void audit_run(const struct audit_set *set, const struct audit_opts *o,
               struct audit_list *out);

/* What request `next` did to the history of request `prev` (its messages
 * plus its streamed reply), as the history rule sees it. */
enum audit_step_kind {
    AUDIT_STEP_PREFIX = 0, /* next extends prev + reply */
    AUDIT_STEP_ECHO,       /* only the echoed reply differs */
    AUDIT_STEP_PRUNE,      /* tool results replaced in place */
    AUDIT_STEP_COMPACTION, /* history replaced by a summary */
    AUDIT_STEP_REWRITE     /* messages removed or changed otherwise */
};
struct audit_step {
    enum audit_step_kind kind;
    size_t expected;    /* messages of prev + reply */
    size_t kept;        /* leading messages of next equal to those */
    size_t added;       /* messages of next after the kept prefix */
    size_t removed;     /* expected messages absent from next */
    size_t changed;     /* expected messages present but altered */
    int64_t bytes_lost; /* bytes of removed/changed content */
};
const char *audit_step_name(enum audit_step_kind k);
/* summary: the reply of a compaction request between prev and next, or
 * NULL. */
void audit_history_step(const struct xchg *prev, const struct xchg *next,
                        const char *summary, struct audit_step *out);

/* Per-session table row for `fidelity sessions`: {"session","harness",
 * "models":[...],"turns","requests":{kind:n},"prompt_tokens",
 * "completion_tokens","findings":{"info","warn","error"}}. */
json_t *audit_session_json(const struct audit_session *s,
                           const struct audit_list *findings);
/* The session turn by turn for `fidelity show`: an array of {"request",
 * "kind","turn","model","messages","new_messages","request_bytes",
 * "prompt_tokens","completion_tokens","finish_reason","status","end",
 * "ttfb_ms","reply_bytes","reasoning_bytes","tool_calls"}. */
json_t *audit_session_turns(const struct audit_session *s);
/* The kind of each of s's requests as audit decides it by structure
 * (main, title, compaction, subagent, other), in s->x's order: a fresh
 * array of s->n strings that live as long as s. Record's stored kind is
 * only a hint (docs/AUDIT.md). */
const char **audit_session_kinds(const struct audit_session *s);

/* Each request of the session against its predecessor, as `show
 * --messages` prints it (diff.c, docs/SHOW.md): an array of {"request",
 * "step" ("first", "side", "none", "retry" or audit_step_name's),
 * "prev" (the request it is compared with, absent when none), "kept",
 * "appended" and "removed" ([{"index","role"}]), "pruned", "bytes_before",
 * "bytes_after", "reply" ("kept", "altered" with "reply_field", "dropped";
 * absent when the predecessor had none), "reply_index", "reasoning" (its
 * state, audit_reasoning_state), "summary_request", "summary_index",
 * "fields" ([{"field","from","to"}], null for absent), "tools_added",
 * "tools_removed"}. The predecessor is the history rule's; a side request
 * (title, compaction) is compared with the previous one of its kind. */
json_t *audit_session_diffs(const struct audit_session *s);
/* What exchange x sent and got back: {"request", "messages" (all of them,
 * as sent), "params" (every body field but messages and tools), "tools"
 * (function names), "reply": {"content", "reasoning_content",
 * "tool_calls", "finish_reason", "usage"}}. */
json_t *audit_request_sent(const struct xchg *x);

/* Keeps only the session named id, or else the one whose id starts with
 * it (also after record's "p:"), like an abbreviated git hash. -ENOENT
 * when none matches, -EINVAL when several do, d naming them (the first
 * few); the set is then left as it was. */
int audit_set_pick(struct audit_set *set, const char *id, struct diag *d);

/* Measures used by the degeneration rule, exposed for tests: raw bytes /
 * zlib-compressed bytes, and the share of word 4-grams that repeat an
 * earlier one (0 for fewer than 8 words). */
double audit_gzip_ratio(const char *s, size_t len);
double audit_ngram_share(const char *s, size_t len);
/* True when text claims there is no earlier conversation. */
bool audit_is_first_message_claim(const char *text);

#endif
