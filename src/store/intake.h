/*
 * intake: record's append-only log of finished exchanges, the file
 * DB-intake beside the store. An exchange is appended (one write(2) on the
 * loop's thread) before the last byte of its response goes to the client;
 * the writer thread commits it to the store later, off the client's path,
 * and in the same transaction moves the log's frontier (its row of the
 * intake_log table: the log's epoch and the offset after the last exchange
 * committed). After a crash
 * the exchanges past the frontier are in the log, in the page cache or on
 * disk, and the next `fidelity` command that opens the store replays them
 * (store_replay in replay.h) before anything reads it.
 *
 * The file: a 16-byte header ("FIDINTK1", then the log's epoch, a random
 * 64-bit number, little-endian), then records: a 16-byte head (magic
 * "INTK", the payload's length, the XXH3-64 of the payload, little-endian)
 * and the payload. A record cut short at the end is an unfinished append
 * (the write that made it never returned, so no client saw its end) and
 * is ignored; a damaged record followed by whole ones is skipped, the
 * ones after it read, and the damage reported by offset (intake_read).
 *
 * One process at a time appends to a log: it holds flock(LOCK_EX) on it
 * while it runs. A reader that cannot take the lock leaves the log alone:
 * its owner is alive and commits it.
 */
#ifndef STORE_INTAKE_H
#define STORE_INTAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/diag.h"
#include "store/db.h"
#include "store/hdrs.h"

#define INTAKE_HEAD 16 /* the file header, and each record's head */

/* An exchange as the loop finished it (what the writer's parsing needs);
 * strings and byte ranges are borrowed. */
struct intake_rec {
    double started; /* unix time, seconds */
    double up_ttfb_ms, up_total_ms, down_ttfb_ms, down_total_ms;
    double max_gap_ms;
    int32_t status;
    uint8_t end;       /* enum xchg_end */
    bool streamed;     /* text/event-stream */
    bool resp_capped;  /* the response was cut at --max-capture */
    bool ct_json;      /* the request's Content-Type says json */
    bool req_redacted; /* secrets in the body were hidden (redact.h) */
    const char *method, *path;
    size_t method_len, path_len;
    /* header lists as store/hdrs.h keeps them: the buffer's bytes and
     * field count (secrets already redacted) */
    const char *req_hl, *resp_hl;
    size_t req_hl_len, resp_hl_len, req_hl_n, resp_hl_n;
    bool req_hl_set, resp_hl_set;
    const char *body, *resp;
    size_t body_len, resp_len;
};

struct intake {
    int fd;
    char *path;
    uint64_t epoch;
    uint64_t size;        /* bytes in the file (header included) */
    struct buf rec;       /* the record being written, reused */
    struct db_stmt *mark; /* intake_mark's, on mark_db */
    struct db *mark_db;
};

/* The log's path for a store: DB-intake (malloc'd). */
char *intake_path(const char *db_path);

/* Opens (creating) and locks db_path's log: 0 with *out set; 1 when
 * another process holds it (*out NULL); -errno with d set. The log is
 * left as it was: replay it (intake_read) before intake_reset. */
int intake_open(const char *db_path, struct intake **out, struct diag *d);
/* intake_open of the log at log_path, wherever it is. */
int intake_open_at(const char *log_path, struct intake **out, struct diag *d);
/* Empties the log and gives it a new epoch (after everything in it is
 * committed). 0 or -errno. */
int intake_reset(struct intake *in, struct diag *d);
/* Appends one record: 0 with *end the offset after it, or -errno (the
 * log is then cut back to where it was, when it can be). */
int intake_append(struct intake *in, const struct intake_rec *r, uint64_t *end);
/* Closes; unlinks the file first when remove (everything committed). */
void intake_close(struct intake *in, bool remove);

/* What reading a log found wrong with it (intake_read). */
struct intake_damage {
    uint64_t torn; /* bytes of an unfinished append at the end, ignored */
    /* damaged records past the frontier, each followed by whole ones (or
     * complete records whose bytes changed at the end): the first one's
     * offset, the bytes and places skipped, and the exchanges lost there
     * as far as their heads tell (at least one a place) */
    uint64_t bad_at, bad_bytes, bad_spans, lost;
    /* damage among the records before the frontier (already committed:
     * nothing lost), at before_at */
    bool before;
    uint64_t before_at;
    /* the log ends this many bytes before its frontier: what was appended
     * after the frontier is gone (how many exchanges cannot be told) */
    uint64_t short_by;
};

/* Calls fn for each whole record of the log at fd past the frontier
 * (epoch, off) (from its start when the epoch differs), with the offset
 * after it; stops when fn returns non-zero. The records' pointers are
 * valid during the call. A damaged record does not end the log: the
 * records after it are found again (the next head whose record is whole)
 * and read, and *dmg says where the damage was and what it lost; bytes at
 * the end that are not a whole record are an unfinished append (torn).
 * Damage before the frontier is passed over when a whole record, or the
 * end, is at the frontier. 0, fn's value, or -errno with d set: -EBADMSG
 * when off is inside the log, the records before it whole, but off not
 * where one starts (a damaged frontier; the log is then not read). */
int intake_read(int fd, uint64_t epoch, uint64_t off,
                int (*fn)(const struct intake_rec *r, uint64_t end, void *ud),
                void *ud, struct intake_damage *dmg, struct diag *d);
/* Whether a head at `at` announces a record that ends exactly at the end
 * of the file (size bytes): one complete when written. */
bool intake_whole_head(int fd, uint64_t size, uint64_t at);
/* Whether dmg reports damage (not counting a torn end). */
bool intake_damaged(const struct intake_damage *dmg);
/* One sentence (or more, joined by "; ") on dmg's damage to the log at
 * path, with offsets and the exchanges lost, into out. */
void intake_damage_say(const struct intake_damage *dmg, const char *path,
                       char *out, size_t size);
/* The log's epoch (0 for an empty or headerless file). */
uint64_t intake_epoch_of(int fd);

/* The frontier table (created by intake_schema): a row per log, named by
 * the log's epoch. */
int intake_schema(struct db *db, struct diag *d);
/* 0 with the frontier of the log of epoch log_epoch in *epoch and *off
 * ((0, 0) when the store has none for it), or -1 with d set (also when the
 * row is not two numbers: a damaged table). */
int intake_frontier(struct db *db, uint64_t log_epoch, uint64_t *epoch,
                    uint64_t *off, struct diag *d);
/* Sets the frontier of the log of epoch to off, inside the caller's
 * transaction, with a statement kept in in (one db and one thread at a
 * time): the db's result code. */
int intake_mark(struct intake *in, struct db *db, uint64_t epoch, uint64_t off);
/* Drops the frontier of a log that was emptied (its epoch is not used
 * again): the db's result code. */
int intake_forget(struct db *db, uint64_t epoch);

#endif
