/*
 * replay: the intake log's crash recovery. What a `fidelity record` that
 * did not stop (kill -9, a crash, a full disk) left in the store's intake
 * log (intake.h) past the frontier is committed to the store, each
 * exchange built as record's writer builds it (ingest.h), and the log is
 * emptied. `record` replays when it opens the store, before it serves;
 * every command that reads a store (audit, sessions, show, drift
 * --from-db) calls store_replay first, so that it reads what the clients
 * saw complete.
 */
#ifndef STORE_REPLAY_H
#define STORE_REPLAY_H

#include <stdint.h>

#include "core/diag.h"
#include "store/db.h"
#include "store/ingest.h"
#include "store/intake.h"
#include "store/xchg.h"

struct replay_counts {
    uint64_t stored;  /* committed to the store */
    uint64_t spilled; /* refused by the store, appended to the spill file */
    uint64_t kept;    /* neither: still in the log for the next try */
    uint64_t torn;    /* bytes of an unfinished append at the end, ignored */
    struct intake_damage dmg; /* what else was wrong with the log */
};

/* Replays the log `in` (opened and locked by the caller) into db (with the
 * exchange and intake tables), through c (db's cache) and g (built on c).
 * Exchanges the store refuses go to spill_path. Once one can be neither
 * stored nor spilled, it and those after it stay in the log (the frontier
 * stays before them: a batch that cannot be stored whole is stored one
 * exchange at a time) and are counted kept. The counts go to *out. On
 * success, 0 and the log emptied (intake_reset); -1 with d set when
 * exchanges were kept (the log is left as it is), the store went away
 * (db_is_lost: nothing is spilled for it, what was not committed is kept)
 * or the log or the store could not be read. c's pre-commit hook is used during
 * the call and cleared after it. */
int replay_log(struct db *db, struct xchg_cache *c, struct ingest *g,
               struct intake *in, const char *spill_path,
               struct replay_counts *out, struct diag *d);

/* Where a catch-up began and ended (replay_catch_up). */
struct replay_pos {
    uint64_t from; /* the store's frontier for the log (0: none yet) */
    uint64_t to;   /* the offset after the last exchange committed or
                    * spilled (the frontier now), or where records start */
    bool more;     /* max was reached with whole records left past to */
};

/* Record's writer catching up once its store is back: commits up to max
 * exchanges (0: all) of the log `in` past the store's frontier for it,
 * as replay_log does, but leaves the log as it is (its owner appends to
 * it meanwhile: a record being appended is an unfinished one, not read).
 * What a transaction that committed before the store went away stored is
 * past the frontier it moved, so it is not stored twice. c's pre-commit
 * hook is cleared after the call. 0 with *pos set; -ENOTCONN with d set
 * when the store went away again (db_is_lost: what was committed stays,
 * nothing was spilled for it, the rest waits in the log); -1 with d set
 * when exchanges could be neither stored nor spilled (they and the ones
 * after them stay in the log) or the log or store could not be read. */
int replay_catch_up(struct db *db, struct xchg_cache *c, struct ingest *g,
                    struct intake *in, const char *spill_path, uint64_t max,
                    struct replay_counts *out, struct replay_pos *pos,
                    struct diag *d);

/* Opens db_path and replays its intake log, if there is one and no live
 * record holds it (that record commits it). spill_path: where exchanges
 * the store refuses go (NULL: DB.spill.jsonl, record's default). *n gets
 * how many exchanges were committed or spilled; warn (may be NULL) gets
 * what was damaged in the log (intake_damage_say), empty when nothing.
 * 0, or -1 with d set. */
int store_replay(const char *db_path, const char *spill_path, uint64_t *n,
                 struct diag *warn, struct diag *d);

#endif
