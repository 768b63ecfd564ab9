/*
 * recorded: what `audit`, `sessions` and `show` share: their --db, --spill
 * and --json options and loading what `record` stored into an audit_set,
 * with the one error message each failure gets.
 */
#ifndef CMD_RECORDED_H
#define CMD_RECORDED_H

#include "audit/audit.h"

struct recorded_args {
    const char *db; /* default: $FIDELITY_DB or fidelity.db */
    const char *spill;
    const char *json;
    bool replayed; /* recorded_replay already ran: recorded_load skips it */
};

void recorded_args_init(struct recorded_args *a);
/* a->db as messages and JSON show it: a URL's password masked (url_mask).
 * Kept until the next call for another store (the command's thread). */
const char *recorded_db_shown(const struct recorded_args *a);
/* Takes getopt_long's result c if it is one of the options above
 * ('d' --db, 'S' --spill, 'j' --json): true when taken. */
bool recorded_take_opt(struct recorded_args *a, int c, const char *optarg_);
/* Commits what a record that did not stop left in db's intake log
 * (store_replay in store/replay.h; a line on stderr says how many, or a warning
 * when it cannot, and the store is read without those exchanges): 0. Kept an
 * int for the callers' "return rc if non-zero". recorded_load calls it. */
int recorded_replay(const char *cmd, const char *db, const char *spill);
/* Loads a->db and a->spill (only session when not NULL) into an initialised
 * set. 0, or the exit code after the error was printed: usage for a store
 * that does not exist or a session that is not in it, internal otherwise.
 * A row that cannot be decoded is skipped with a warning on stderr naming
 * it and its column (store.corrupt; set->bad), and is not an error. */
int recorded_load(const char *cmd, const struct recorded_args *a,
                  const char *session, struct audit_set *set);

#define RECORDED_LONGOPTS                                                      \
    {"db", required_argument, NULL, 'd'},                                      \
        {"spill", required_argument, NULL, 'S'},                               \
    {                                                                          \
        "json", required_argument, NULL, 'j'                                   \
    }

#endif
