/*
 * xchg: one recorded HTTP exchange between a harness and a server, as the
 * recording proxy stores it and audit/sessions/show read it back. This header
 * is the contract between src/record/ (writer) and src/audit/ (reader);
 * src/store/xchg.c (the schema, writing) and src/store/xchg_read.c (reading)
 * implement it over the SQLite store; src/store/xchg_int.h is what the two
 * share.
 *
 * Storage grows with the conversation, not its square: chat messages are
 * stored once, content-addressed by hash64 of their canonical JSON
 * (json_dumps with JSON_COMPACT | JSON_SORT_KEYS), zlib-compressed; a request
 * row keeps its other parameters and the ordered list of message hashes. A
 * body that is not a JSON object with a `messages` array is stored raw.
 */
#ifndef STORE_XCHG_H
#define STORE_XCHG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <xxhash.h>

#include "core/diag.h"
#include "store/db.h"
#include "store/hdrs.h"
#include "wire/jscan.h"

enum xchg_end {
    XCHG_COMPLETE = 0,   /* upstream answered and the client got all of it */
    XCHG_UPSTREAM_ERROR, /* could not connect, or upstream protocol error */
    XCHG_UPSTREAM_RESET, /* upstream closed mid-response */
    XCHG_CLIENT_GONE,    /* client disconnected before the end */
    XCHG_TIMEOUT
};

struct xchg {
    int64_t id;     /* row id; 0 before it is stored */
    char *session;  /* session key (header value or prefix hash) */
    char *kind;     /* "main", "title", "compaction", "subagent", "other" */
    double started; /* unix time, seconds */
    char *method;
    char *path;          /* with query string */
    json_t *req_headers; /* object name -> value, secrets already redacted */
    /* Or, with req_headers NULL, the recorder's flat list (owned; the same
     * object's fields, store/hdrs.h): the store writes its text, the spill
     * file its parsed text; readers of the store get req_headers. Likewise
     * resp_hl for resp_headers. */
    struct hdrs req_hl;
    json_t *req_body; /* parsed request body, NULL when not JSON */
    char *req_raw;    /* raw body when it was not a JSON object */
    size_t req_raw_len;
    bool req_malformed; /* body was not valid JSON */
    /* secret values in the body were hidden before it was kept
     * (record/redact.h); the stored body is the redacted one */
    bool req_redacted;
    /* The bytes req_body was read from when wire/jscan.h read them
     * (jscan_doc accepted them; borrowed, not freed by xchg_release; may be
     * NULL): the store reuses a message's hash when the same bytes came
     * before, instead of dumping its canonical JSON again. */
    const char *req_src;
    size_t req_src_len;
    /* Set by xchg_req_json (owned, freed by xchg_release): the XXH3-128 of
     * each of the req_msg_n messages' bytes, and whether each was built
     * for this request (true) or shared with an earlier one. */
    XXH128_hash_t *req_msg_raw;
    bool *req_msg_new;
    size_t req_msg_n;
    /* Also set by xchg_req_json: the XXH3-128 of the body's bytes outside
     * its messages array (all zero: not known), from which the store
     * takes the hashes of the parameter and tools blobs when the same
     * bytes came before. */
    XXH128_hash_t req_rest_raw;
    /* Set by xchg_each for a chat request (owned): the store's hash of
     * each of the req_msg_n messages of req_body (hash64 of its canonical
     * JSON), so a reader can key messages without dumping them. */
    uint64_t *req_msg_h;
    uint64_t req_tools_h; /* likewise for req_body's "tools", else 0 */
    /* A view of the messages, set instead of req_body's "messages" (then
     * absent) by xchg_each_flags with XCHG_EACH_VIEWS, and in audit's
     * copies: the messages are the first req_msgs_n of req_msgs (an owned
     * reference), an array that other exchanges share and that may be
     * longer; read-only. A conversation re-sends its history with every
     * request; through views each message is appended once, so a walk
     * costs what the conversation holds, not its square. NULL: none (the
     * messages, if any, are in req_body). */
    json_t *req_msgs;
    size_t req_msgs_n;
    int status; /* 0 when no response arrived */
    json_t *resp_headers;
    struct hdrs resp_hl;
    char *resp_raw; /* raw response body or SSE stream, as received */
    size_t resp_raw_len;
    bool streamed; /* response was text/event-stream */
    /* Reply reassembled from the JSON body or the SSE deltas:
     * {"content": str, "reasoning_content": str|null, "tool_calls": [...],
     *  "usage": {...}|null, "finish_reason": str|null, "done": bool,
     *  "chunks": n, "max_gap_ms": x} */
    json_t *reply;
    /* Or, with reply NULL, its compact JSON text (owned; what jdump of the
     * object would write): the recorder's stream replies (reply_finish_text in
     * wire/reply.h). The store writes it to the reply column as is; the
     * spill file parses it; readers get reply. */
    char *reply_text;
    size_t reply_text_len;
    /* Set by the writer instead of reply (left NULL) when the reply is
     * reply_from_body(resp_raw, resp_raw_len) (wire/reply.h): a JSON body
     * not streamed, not content-encoded and not cut at the capture cap;
     * or, for such a stream, reply_from_stream(resp_raw, resp_raw_len,
     * stream_gap_ms). The store then writes no reply (the column is empty
     * for a body, the gap alone for a stream) and derives it from the
     * stored bytes when it reads the row; the spill file writes the
     * derived reply. Readers get reply, never this flag. */
    bool reply_of_raw;
    double stream_gap_ms; /* with reply_of_raw on a stream: its max gap */
    /* Timings in milliseconds since the request arrived at the proxy:
     * upstream first byte and end, first byte and end as sent to the
     * client. */
    double up_ttfb_ms, up_total_ms, down_ttfb_ms, down_total_ms;
    enum xchg_end end;
};

void xchg_init(struct xchg *x);
void xchg_release(struct xchg *x);
const char *xchg_end_name(enum xchg_end e);
/* The status record answers a client with itself when no response head
 * came from upstream (record/proxy.c): 504 after a timeout, else 502. */
int xchg_own_status(enum xchg_end e);
/* The status the client got: upstream's, else record's own (above) when
 * the exchange ended without a response head and the client was still
 * there; 0 when it got none. */
int xchg_status_sent(const struct xchg *x);

/* Creates the tables when missing. */
int xchg_schema(struct db *db, struct diag *d);
/* Stores x in one transaction (sets x->id). Header redaction is the
 * caller's job and has happened before this call. */
int xchg_put(struct db *db, struct xchg *x, struct diag *d);
/* A row xchg_each_checked could not decode: the exchange's id, its
 * session when that column was readable (else NULL; valid during the
 * call), the first column that failed its check ("resp_raw", "req_msgs",
 * ...: the xchg table's names; a message, tools or parameter blob is
 * named by the request column that refers to it) and why (a short phrase
 * such as "cannot be unpacked"). Strings are static but session. */
struct xchg_bad {
    int64_t id;
    const char *session;
    const char *column;
    const char *why;
};

/* Calls fn for each exchange in id order (session NULL: all sessions);
 * x is valid only during the call and read-only: the messages and tools of
 * its req_body are shared with the other exchanges of the walk (each
 * distinct message is read and parsed once). fn returning non-zero stops the
 * walk and that value is returned.
 *
 * Every column of every row is untrusted: its type, range and encoding are
 * checked before use, a packed value's length against its bytes before
 * anything is allocated. A row that fails is skipped and passed to bad
 * (may be NULL: skipped silently), and the walk goes on; only an SQLite
 * error (the file itself unreadable) stops it, with d set. */
int xchg_each_checked(struct db *db, const char *session,
                      int (*fn)(const struct xchg *x, void *ud),
                      void (*bad)(const struct xchg_bad *b, void *ud), void *ud,
                      struct diag *d);
/* xchg_each_checked, with flags: XCHG_EACH_VIEWS gives each chat request's
 * messages as a view (xchg.req_msgs, req_msgs_n) instead of an array in
 * req_body. The views of a walk share a few growing arrays (the
 * conversations it is walking); each is valid after the call as long as a
 * reference to it is held. */
#define XCHG_EACH_VIEWS 1u
int xchg_each_flags(struct db *db, const char *session, unsigned flags,
                    int (*fn)(const struct xchg *x, void *ud),
                    void (*bad)(const struct xchg_bad *b, void *ud), void *ud,
                    struct diag *d);
/* xchg_each_checked without a bad callback. */
int xchg_each(struct db *db, const char *session,
              int (*fn)(const struct xchg *x, void *ud), void *ud,
              struct diag *d);
/* Bytes used by distinct messages (compressed) and by request rows, for the
 * storage-growth figure. */
int xchg_storage_bytes(struct db *db, int64_t *message_bytes,
                       int64_t *request_bytes, struct diag *d);

/*
 * Additions (record branch). A writer that stores many exchanges keeps an
 * xchg_cache: the message lists it stored last, so that a request's list is
 * stored as "the first K messages of exchange B, then these hashes" without
 * reading B back. xchg_put() is xchg_put_cached() with no cache.
 */
struct xchg_cache;
struct xchg_cache *xchg_cache_new(void);
void xchg_cache_free(struct xchg_cache *c);
int xchg_put_cached(struct db *db, struct xchg_cache *c, struct xchg *x,
                    struct diag *d);
/* The jansson value of a request body that jscan_doc accepted (doc), equal
 * to jscan_json(doc); when it is an object with a "messages" array, each
 * message whose bytes c has seen in an earlier request is that request's
 * value (shared, read-only), and x->req_msg_* are set so that the store
 * need not scan the body again. c may be NULL (plain jscan_json). New
 * reference. */
json_t *xchg_req_json(struct xchg_cache *c, const struct jspan *doc,
                      struct xchg *x);
/* The same for a body whose "messages" and "tools" members (the last of
 * each name, as jansson keeps) jscan_doc_pick already found: msgs and
 * tools, JS_NONE when absent (tools may be NULL). The body is not walked
 * again to find them; a tools value whose bytes c has seen is that
 * request's value (shared, read-only), as messages are. */
json_t *xchg_req_json_msgs(struct xchg_cache *c, const struct jspan *doc,
                           const struct jspan *msgs, const struct jspan *tools,
                           struct xchg *x);
/* Messages whose hash c took from their bytes (xchg.req_src) rather than
 * from a canonical dump, since c was made. */
size_t xchg_cache_memo_hits(const struct xchg_cache *c);
/* Parameter and tools blobs whose hash c took from the bytes around the
 * messages (xchg.req_rest_raw) rather than from a canonical dump. */
size_t xchg_cache_rest_hits(const struct xchg_cache *c);
/* Chat exchanges whose candidate bases (the session's latest three) c
 * knew from its own inserts rather than from a query. */
size_t xchg_cache_recent_hits(const struct xchg_cache *c);
/* Stores n exchanges in one transaction (group commit); when one of them
 * fails the batch is stored again with a savepoint per exchange, so that
 * only the failing ones are left out: rcs[i] is 0 when xs[i] is stored
 * (xs[i]->id set) or its own error. Returns 0 when the transaction committed,
 * else the error, with every rcs[i] set to it and nothing stored. A cache
 * belongs to one db and holds prepared statements: free it before closing the
 * db. */
/* fn runs inside each transaction xchg_put_batch commits, last, with
 * what it returns (an SQLite result code; not DB_OK fails the batch);
 * NULL: none. */
void xchg_cache_pre_commit(struct xchg_cache *c,
                           int (*fn)(struct db *db, void *ud), void *ud);
int xchg_put_batch(struct db *db, struct xchg_cache *c, struct xchg **xs,
                   size_t n, int *rcs, struct diag *d);

/*
 * The spill file: when the store fails, record appends each exchange as one
 * JSON object per line (xchg_to_json's shape; docs/RECORD.md). Raw bodies
 * that are not valid UTF-8 are base64 under "req_raw_b64" / "resp_raw_b64".
 */
/* A new JSON object describing x (all fields). */
json_t *xchg_to_json(const struct xchg *x);
/* Fills x (initialised by the caller) from j. -EBADMSG when j lacks the
 * required fields (method, path), with d saying which. */
int xchg_from_json(const json_t *j, struct xchg *x, struct diag *d);
/* Appends x as one line to the file at path (created 0600 when missing) with
 * a single write(2). */
int xchg_spill_append(const char *path, const struct xchg *x, struct diag *d);
/* Calls fn for each exchange in the spill file, in file order (ids are the
 * line numbers, negative: -1, -2, ...). A torn last line (a crash mid-write)
 * is skipped; any other bad line is an error naming the line. A missing file
 * is not an error (no calls, 0). */
int xchg_spill_each(const char *path, int (*fn)(const struct xchg *x, void *ud),
                    void *ud, struct diag *d);

/* Bytes of the response side (raw bodies, compressed, and replies), for the
 * documentation of the storage figure. */
int xchg_storage_response_bytes(struct db *db, int64_t *bytes, struct diag *d);

#endif
