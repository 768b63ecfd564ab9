/*
 * xchg_int: what the store's writer (xchg.c) and reader (xchg_read.c) of
 * recorded exchanges share and nobody else sees: the cache a connection
 * keeps (prepared statements, parsed blobs, message lists, the reader's
 * conversations) and the helpers both use. The contract is xchg.h.
 */
#ifndef STORE_XCHG_INT_H
#define STORE_XCHG_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <zlib.h>

#include "core/buf.h"
#include "store/xchg.h"

#define XCHG_MAX_DEPTH 32
/* The longest value a reader decodes (a request is capped at 64 MiB by
 * default, a captured response at 256 MiB): a longer stored length is
 * corrupt. */
#define XCHG_RAW_MAX ((size_t)1 << 30)
#define CACHE_SLOTS 256
#define BASE_CANDIDATES 3
#define RECENT_SLOTS 64

/* The ids SQL_RECENT would return for a session (newest first), kept as
 * this connection inserts them */
struct recent_ent {
    char *session; /* NULL: empty slot */
    int64_t ids[BASE_CANDIDATES];
    int n;
};

/* A message list as stored for one exchange, fully resolved. */
struct list_ent {
    int64_t id; /* 0: empty slot */
    int depth;
    size_t n;
    uint64_t *h;
};

#define STMT_SLOTS 12
/* gap_text's longest: 12 digits, a point, 6 decimals, NUL */
#define GAP_TEXT_MAX 24

struct lineage {
    json_t *arr; /* NULL: free slot */
    uint64_t *h;
    size_t n, cap;
    unsigned used;
    unsigned gen; /* counts the slot's reuses: a view_ent of an older one
                   * no longer holds */
};

struct view_ent {
    int64_t id; /* 0: empty */
    struct lineage *l;
    unsigned gen;
    size_t n;
};

#define VIEW_SLOTS 1024

#define LINEAGES 64

struct xchg_cache {
    struct list_ent e[CACHE_SLOTS];
    /* pick_base's candidates by session (hash64 of the name, direct
     * mapped): filled by its SELECT, then kept up to date by put_all as
     * rows are inserted, so a session's next exchange needs no query;
     * cleared with the list cache when a transaction is rolled back */
    struct recent_ent recent[RECENT_SLOTS];
    unsigned int data_version; /* data_version() after this cache's commit */
    /* prepared statements by SQL text (string literals: compared by
     * address); the cache belongs to one db connection */
    const char *sql[STMT_SLOTS];
    struct db_stmt *st[STMT_SLOTS];
    z_stream zs; /* reused: deflateInit costs more than small inputs */
    bool zs_ready;
    /* xchg_cache_pre_commit's: run inside each batch's transaction */
    int (*pre_commit)(struct db *db, void *ud);
    void *pre_commit_ud;
    /* Blob hashes known to be committed (open addressing, 0 = empty), so a
     * session re-sending its history skips a SELECT per message. Hashes
     * seen inside the open transaction wait in pend until its COMMIT; an
     * exchange rolled back to its savepoint drops its own. */
    uint64_t *known;
    size_t known_cap, known_n;
    uint64_t *pend;
    size_t pend_n, pend_cap;
    /* Reading (xchg_each): blobs parsed so far by hash (open addressing,
     * h 0 = empty), so a message re-sent by N requests is decompressed and
     * parsed once, not N times. */
    struct blob_ent *blobs;
    size_t blobs_cap, blobs_n;
    json_t *blob0; /* the blob whose hash is 0, which marks empty slots */
    /* Reading: the messages of the row read last (borrowed from blobs) and
     * their hashes; the next request of a conversation re-sends them first
     * and takes them from here by position instead of looking each one
     * up. */
    json_t **last_v;
    uint64_t *last_h;
    size_t last_n, last_cap;
    /* Reading with XCHG_EACH_VIEWS: the conversations of the walk, each a
     * growing array of messages with their hashes; a row's messages are a
     * view of the one whose leading messages they are (extended when they
     * go further), and a new one, copying the shared head, only where
     * they part (a compaction, a rewrite, another session). The least
     * recently used goes when all slots are taken. */
    struct lineage lin[LINEAGES];
    unsigned lin_clock;
    struct view_ent *views; /* by row id, direct mapped (VIEW_SLOTS) */
    /* Writing: the canonical hash of messages by the XXH3-128 of the exact
     * bytes they arrived as (open addressing, all-zero key = empty), so a
     * history re-sent unchanged is not dumped and hashed again. Cleared
     * when full. */
    struct memo_ent *memo;
    size_t memo_cap, memo_n, memo_hits, rest_hits, recent_hits;
    /* Parsing (xchg_req_json): message values by the XXH3-128 of their
     * bytes, shared by the requests that carry them, so a re-sent history
     * is hashed, not built and freed again (open addressing, all-zero key
     * = empty; started over when full or past TREES_BYTES of source). */
    struct tree_ent *trees;
    size_t trees_cap, trees_n, trees_bytes;
    struct jspan *spans; /* xchg_req_json's, kept for the next request */
    size_t spans_cap;
    /* insert_row's header texts, bound in place (DB_STATIC) and kept
     * for the next row instead of a malloc and free per column */
    struct buf hdr_text[2];
};

/* How a stored value is coded (the *_zip columns) */
enum zip {
    ZIP_NONE = 0,    /* as it is */
    ZIP_DEFLATE = 1, /* zlib */
    ZIP_LINES = 2,   /* ldelta.h: each event against the one before */
    /* ldelta, then zlib: the coded length as a LEB128 number, then the
     * zlib stream of the coded bytes */
    ZIP_LINES_DEFLATE = 3,
};

/* The statement that reads one row's message list (base, prefix, depth,
 * own hashes); one text, so that xchg_prep caches one statement. */
extern const char XCHG_SQL_LIST_LOAD[];

/* A prepared statement for sql, from c when it has it (sql is compared by
 * address). NULL on error. */
struct db_stmt *xchg_prep(struct xchg_cache *c, struct db *db, const char *sql);
/* Gives st back to c (reset), or finalizes it when c did not keep it. */
void xchg_unprep(struct xchg_cache *c, struct db_stmt *st);
/* Sets d from SQLite's error: "what: message". Returns the error. */
int xchg_sql_fail(struct db *db, struct diag *d, const char *what);
/* Whether the xchg table has the req_redacted column (older stores not). */
bool xchg_has_redacted_column(struct db *db);
/* A stored value decoded (enum zip), NUL-terminated; NULL when corrupt. */
char *xchg_unpack(const void *z, size_t zlen, size_t raw_len, int zip);
/* The blob with hash h, parsed once per cache (borrowed); NULL when
 * missing or corrupt. */
json_t *xchg_blob_get(struct db *db, struct xchg_cache *c, int64_t h);
/* The message list of exchange id, resolved through its bases (cached);
 * NULL when a link is missing or corrupt. guard: links followed so far. */
struct list_ent *xchg_list_load(struct db *db, struct xchg_cache *c, int64_t id,
                                int guard);

static inline uint64_t xchg_get_be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* xchg_json.c: p[0..n) in base64 (RFC 4648, padded), a fresh string; the
 * spill file's and the export's encoding of bytes that are not UTF-8. */
char *xchg_b64_encode(const unsigned char *p, size_t n);

#endif
