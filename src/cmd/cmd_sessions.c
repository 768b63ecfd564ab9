/*
 * cmd_sessions: `fidelity sessions`, one line per recorded session: the
 * harness (User-Agent), models, user turns, requests by kind, tokens and
 * the audit's findings with default options.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/buf.h"
#include "core/plural.h"
#include "store/store.h"

const char CMD_SESSIONS_HELP[] =
    "usage: fidelity sessions [--db FILE] [--spill FILE] [--json FILE]\n"
    "\n"
    "Lists the sessions 'fidelity record' stored: the harness (from the\n"
    "User-Agent), the models, user turns, requests by kind (main, title,\n"
    "compaction, subagent, other), prompt and completion tokens reported by\n"
    "the server, and the number of audit findings (default options; run\n"
    "'fidelity audit' for them).\n"
    "\n"
    "  --db FILE     the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE  record's spill file (default DB.spill.jsonl if any)\n"
    "  --json FILE   write the table as JSON ('-': stdout; docs/AUDIT.md)\n"
    "\n"
    "examples:\n"
    "  fidelity sessions --db run.db\n"
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

static void print_table(json_t *rows)
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
    printf("%-*s %-18s %-16s %5s %-26s %9s %9s %s\n", w, "SESSION", "HARNESS",
           "MODEL", "TURNS", "REQUESTS", "PROMPT", "COMPL", "FINDINGS");
    json_array_foreach(rows, i, r)
    {
        json_t *f = json_object_get(r, "findings");
        kinds_str(json_object_get(r, "requests"), &kinds);
        models_str(json_object_get(r, "models"), &models);
        const char *id = json_string_value(json_object_get(r, "session"));
        printf(
            "%-*s %-18s %-16s %5lld %-26s %9lld %9lld %lld error, %lld "
            "warn\n",
            w, *id ? id : "(none)",
            json_string_value(json_object_get(r, "harness")), models.data,
            (long long)json_integer_value(json_object_get(r, "turns")),
            kinds.data,
            (long long)json_integer_value(json_object_get(r, "prompt_tokens")),
            (long long)json_integer_value(
                json_object_get(r, "completion_tokens")),
            (long long)json_integer_value(json_object_get(f, "error")),
            (long long)json_integer_value(json_object_get(f, "warn")));
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

int cmd_sessions(int argc, char **argv)
{
    static const struct option longopts[] = {
        RECORDED_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
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
        if (!recorded_take_opt(&a, c, optarg))
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
    if ((rc = recorded_load("sessions", &a, NULL, &set)))
        goto out;
    audit_run(&set, &o, &l);
    json_t *rows = json_array();
    for (size_t i = 0; i < set.n; i++)
        json_array_append_new(rows, audit_session_json(&set.s[i], &l));
    if (a.json) {
        json_t *j =
            json_pack("{s:s, s:i, s:s, s:O}", "schema", "fidelity.sessions/1",
                      "version", 1, "db", a.db, "sessions", rows);
        rc = cli_json_write(j, a.json, &d)
                 ? cli_error("sessions", EXIT_INTERNAL, "%s", d.msg)
                 : EXIT_PASS;
        json_decref(j);
    }
    if (!a.json || strcmp(a.json, "-"))
        print_table(rows);
    json_decref(rows);
out:
    audit_list_release(&l);
    audit_set_release(&set);
    return rc;
}
