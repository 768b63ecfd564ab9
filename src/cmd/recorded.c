/*
 * recorded: the options and the loading that `audit`, `sessions` and `show`
 * share (recorded.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cmd/cmd.h"
#include "cmd/recorded.h"
#include "core/plural.h"
#include "store/replay.h"
#include "store/store.h"

void recorded_args_init(struct recorded_args *a)
{
    a->db = cli_default_db();
    a->spill = NULL;
    a->json = NULL;
    a->replayed = false;
}

const char *recorded_db_shown(const struct recorded_args *a)
{
    static const char *of;
    static char *shown;
    if (!shown || of != a->db) {
        free(shown);
        shown = store_shown(a->db);
        of = a->db;
    }
    return shown;
}

bool recorded_take_opt(struct recorded_args *a, int c, const char *optarg_)
{
    if (c == 'd')
        a->db = optarg_;
    else if (c == 'S')
        a->spill = optarg_;
    else if (c == 'j')
        a->json = optarg_;
    else
        return false;
    return true;
}

int recorded_replay(const char *cmd, const char *db, const char *spill)
{
    struct diag d = {{0}}, warn = {{0}};
    uint64_t n = 0;
    int rc = store_replay(db, spill, &n, &warn, &d);
    if (warn.msg[0])
        fprintf(stderr, "fidelity %s: warning: %s\n", cmd, warn.msg);
    if (rc) {
        /* a read-only copy of a store, say: what is committed still reads */
        fprintf(stderr,
                "fidelity %s: warning: %s; reading what the store holds "
                "without it\n",
                cmd, d.msg);
        return 0;
    }
    if (n) {
        char *log = store_local_path(db, "-intake");
        fprintf(stderr,
                "fidelity %s: committed %llu exchange%s that a 'fidelity "
                "record' which did not stop left in '%s'\n",
                cmd, (unsigned long long)n, plural_s(n), log);
        free(log);
    }
    return 0;
}

int recorded_load(const char *cmd, const struct recorded_args *a,
                  const char *session, struct audit_set *set)
{
    struct diag d = {{0}};
    int rc = a->replayed ? 0 : recorded_replay(cmd, a->db, a->spill);
    if (rc)
        return rc;
    rc = audit_load_paths(a->db, a->spill, NULL, set, &d);
    /* rows that could not be decoded were skipped; the rest is read */
    for (size_t i = 0; i < set->nbad; i++)
        fprintf(stderr,
                "fidelity %s: warning: store.corrupt: exchange %lld%s%s%s "
                "in '%s' cannot be read (column '%s': %s); skipped\n",
                cmd, (long long)set->bad[i].id,
                set->bad[i].session[0] ? " of session '" : "",
                set->bad[i].session, set->bad[i].session[0] ? "'" : "",
                recorded_db_shown(a), set->bad[i].column, set->bad[i].why);
    if (rc)
        return cli_error(cmd, rc == -ENOENT ? EXIT_USAGE : EXIT_INTERNAL, "%s",
                         d.msg);
    if (session && (rc = audit_set_pick(set, session, &d)))
        return cli_error(cmd, EXIT_USAGE,
                         rc == -ENOENT
                             ? "%s in '%s'; see 'fidelity sessions --db %s'"
                             : "%s; give more of the id (see 'fidelity "
                               "sessions --db %s%.0s')",
                         d.msg, recorded_db_shown(a), recorded_db_shown(a));
    return 0;
}
