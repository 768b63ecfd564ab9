/*
 * cmd_sessions: `fidelity sessions`, one line per recorded session: the
 * harness (User-Agent), models, user turns, requests by kind, tokens and,
 * with --findings, the audit's findings with default options (a listing
 * alone runs no audit: it costs the read of the sessions).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audit/audit.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/buf.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "store/slist.h"
#include "store/store.h"
#include "version.h"

const char CMD_SESSIONS_HELP[] =
    "usage: fidelity sessions [--db FILE] [--spill FILE] [--json FILE]\n"
    "                         [--findings]\n"
    "\n"
    "Lists the sessions 'fidelity record' stored: the harness (from the\n"
    "User-Agent), the models, user turns, requests by kind (main, title,\n"
    "compaction, subagent, other) and prompt and completion tokens reported\n"
    "by the server. With --findings, also the number of audit findings\n"
    "(default options; run 'fidelity audit' for them): that runs the whole\n"
    "audit, which a listing alone does not. The listing is kept beside\n"
    "the store (DB-sessions) and read back while the store is unchanged.\n"
    "\n"
    "  --db FILE     the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE  record's spill file (default DB.spill.jsonl if any)\n"
    "  --json FILE   write the table as JSON ('-': stdout; docs/AUDIT.md)\n"
    "  --findings    count each session's audit findings (runs the audit)\n"
    "\n"
    "examples:\n"
    "  fidelity sessions --db run.db\n"
    "  fidelity sessions --db run.db --findings\n"
    "  fidelity sessions --db run.db --json - | jq '.sessions[].session'\n";

static void kinds_str(json_t *kinds, struct buf *b)
{
    const char *k;
    json_t *v;
    buf_reset(b);
    json_object_foreach(kinds, k, v)
    {
        buf_printf(b, "%s%s %lld", b->len ? ", " : "", k,
                   (long long)json_integer_value(v));
    }
}

static void models_str(json_t *models, struct buf *b)
{
    size_t i;
    json_t *m;
    buf_reset(b);
    json_array_foreach(models, i, m)
        buf_printf(b, "%s%s", i ? "," : "", json_string_value(m));
    if (!b->len)
        buf_adds(b, "-");
}

static void print_table(json_t *rows, bool findings)
{
    struct buf kinds = BUF_INIT, models = BUF_INIT;
    size_t i;
    json_t *r;
    /* the session column is as wide as its longest id (opencode's and
     * Kilo's are 30 characters), at least 24 */
    int w = 24;
    json_array_foreach(rows, i, r)
    {
        size_t len =
            strlen(json_string_value(json_object_get(r, "session")) ?: "");
        if (len > (size_t)w && len < 200)
            w = (int)len;
    }
    printf("%-*s %-18s %-16s %5s %-26s %9s %9s%s\n", w, "SESSION", "HARNESS",
           "MODEL", "TURNS", "REQUESTS", "PROMPT", "COMPL",
           findings ? " FINDINGS" : "");
    json_array_foreach(rows, i, r)
    {
        json_t *f = json_object_get(r, "findings");
        kinds_str(json_object_get(r, "requests"), &kinds);
        models_str(json_object_get(r, "models"), &models);
        const char *id = json_string_value(json_object_get(r, "session"));
        printf(
            "%-*s %-18s %-16s %5lld %-26s %9lld %9lld", w, *id ? id : "(none)",
            json_string_value(json_object_get(r, "harness")), models.data,
            (long long)json_integer_value(json_object_get(r, "turns")),
            kinds.data,
            (long long)json_integer_value(json_object_get(r, "prompt_tokens")),
            (long long)json_integer_value(
                json_object_get(r, "completion_tokens")));
        if (findings)
            printf(" %lld error, %lld warn",
                   (long long)json_integer_value(json_object_get(f, "error")),
                   (long long)json_integer_value(json_object_get(f, "warn")));
        printf("\n");
        json_t *parent = json_object_get(r, "parent");
        if (json_is_object(parent))
            printf("  subagent of %s (tool call %s)\n",
                   json_string_value(json_object_get(parent, "session")),
                   json_string_value(json_object_get(parent, "call")));
    }
    printf("%zu session%s\n", json_array_size(rows),
           plural_s(json_array_size(rows)));
    buf_release(&kinds);
    buf_release(&models);
}

/*
 * The listing without findings is kept beside the store (DB-sessions,
 * store/slist.h) and read back while the store's files are unchanged: a
 * listing then costs a read of one small file, not a load of every
 * exchange. Not with a spill file (its exchanges are not in the store's
 * mark) and not when a row could not be read (its warning is said each
 * time).
 */
static bool has_spill(const struct recorded_args *a)
{
    struct stat st;
    if (a->spill)
        return stat(a->spill, &st) == 0;
    char *def = store_local_path(a->db, ".spill.jsonl");
    bool have = stat(def, &st) == 0;
    free(def);
    return have;
}

/* The build that computes the rows: its version, and the size and time
 * of its executable (another build may group or count differently). */
static void rows_version(char *out, size_t len)
{
    struct stat st;
    if (stat("/proc/self/exe", &st))
        memset(&st, 0, sizeof(st));
    snprintf(out, len, "%s %lld %lld.%09ld", FIDELITY_VERSION,
             (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
}

/* The store's mark; ok false when nothing is to be kept. */
struct mark {
    bool ok;
    char m[STORE_SLIST_MARK_MAX];
};

static void mark_take(const struct recorded_args *a, struct mark *m)
{
    m->ok = !has_spill(a) && !store_slist_mark(a->db, m->m);
}

/* The rows kept for the store as it is now, or NULL. */
static json_t *kept_rows(struct recorded_args *a)
{
    struct mark m;
    char version[128], *text = NULL;
    json_t *rows = NULL;
    if (has_spill(a))
        return NULL;
    recorded_replay("sessions", a->db, a->spill);
    a->replayed = true; /* once: its warnings are said once */
    mark_take(a, &m);
    rows_version(version, sizeof(version));
    if (m.ok && store_slist_get(a->db, version, m.m, &text) == 1)
        rows = json_loads(text, 0, NULL);
    free(text);
    if (rows && !json_is_array(rows)) {
        json_decref(rows);
        rows = NULL;
    }
    return rows;
}

/* Keeps rows (findings null) when the store's mark before the load (m)
 * is its mark after it (a write in between, or the checkpoint of a WAL
 * left by a writer as the load closed the store, keeps nothing this
 * time); a folder that cannot hold them is left as it is. */
static void keep_rows(const struct recorded_args *a, const struct mark *m,
                      json_t *rows)
{
    struct mark after;
    struct diag d;
    char version[128];
    mark_take(a, &after);
    if (!m->ok || !after.ok || strcmp(m->m, after.m))
        return;
    json_t *copy = json_deep_copy(rows);
    size_t i;
    json_t *r;
    json_array_foreach(copy, i, r)
        json_object_set_new(r, "findings", json_null());
    char *text = json_dumps(copy, JSON_COMPACT);
    rows_version(version, sizeof(version));
    if (text)
        store_slist_put(a->db, version, m->m, text, &d);
    free(text);
    json_decref(copy);
}

int cmd_sessions(int argc, char **argv)
{
    static const struct option longopts[] = {
        RECORDED_LONGOPTS,
        {"findings", no_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    bool findings = false;
    struct recorded_args a;
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    struct diag d;
    int c, rc;
    opterr = 0;
    optind = 1;
    recorded_args_init(&a);
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (c == 'F')
            findings = true;
        else if (!recorded_take_opt(&a, c, optarg))
            return cli_bad_option("sessions", c, argv);
    }
    if (optind < argc)
        return cli_usage_error("sessions", "unexpected argument '%s'",
                               argv[optind]);
    if ((rc = cli_check_output("sessions", "--json", a.json)))
        return rc;
    audit_set_init(&set);
    audit_list_init(&l);
    audit_opts_init(&o);
    json_t *rows = findings ? NULL : kept_rows(&a);
    if (!rows) {
        struct mark m;
        mark_take(&a, &m);
        if ((rc = recorded_load("sessions", &a, NULL, &set)))
            goto out;
        if (findings)
            audit_run(&set, &o, &l);
        rows = json_array();
        for (size_t i = 0; i < set.n; i++) {
            json_t *row = audit_session_json(&set.s[i], findings ? &l : NULL);
            if (!findings) /* not counted: null, never a count of 0 */
                json_object_set_new(row, "findings", json_null());
            json_array_append_new(rows, row);
        }
        if (set.nbad == 0)
            keep_rows(&a, &m, rows);
    }
    if (a.json) {
        json_t *j = json_pack("{s:s, s:i, s:s, s:O}", "schema",
                              "fidelity.sessions/1", "version", 1, "db",
                              recorded_db_shown(&a), "sessions", rows);
        rc = cli_json_write(j, a.json, &d)
                 ? cli_error("sessions", EXIT_INTERNAL, "%s", d.msg)
                 : EXIT_PASS;
        json_decref(j);
    }
    if (!a.json || strcmp(a.json, "-"))
        print_table(rows, findings);
    json_decref(rows);
out:
    audit_list_release(&l);
    audit_set_release(&set);
    return rc;
}
