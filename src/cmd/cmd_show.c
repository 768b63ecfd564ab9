/*
 * cmd_show: `fidelity show SESSION`, one recorded session request by
 * request (kind, user turn, messages and how many are new, sizes, tokens,
 * finish reason, status, time to first byte) with the audit's findings
 * under the request they are about.
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
#include "core/plural.h"
#include "store/store.h"

const char CMD_SHOW_HELP[] =
    "usage: fidelity show SESSION [--db FILE] [--spill FILE] [--json FILE]\n"
    "\n"
    "Prints one recorded session turn by turn: for each exchange its id,\n"
    "kind (main, title, compaction, subagent, other), user turn, number of\n"
    "messages (+ new ones), request bytes, prompt and completion tokens,\n"
    "finish reason, HTTP status the client got (a 502 or 504 'record'\n"
    "answered itself is marked so) and time to first byte, '-' for what is\n"
    "not known, with the audit's findings (default options) under the\n"
    "request they are about.\n"
    "'fidelity sessions' lists the session ids.\n"
    "\n"
    "  --db FILE     the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE  record's spill file (default DB.spill.jsonl if any)\n"
    "  --json FILE   write {\"session\", \"turns\", \"findings\"} as JSON\n"
    "\n"
    "examples:\n"
    "  fidelity show ses_4f2a --db run.db\n"
    "  fidelity show ses_4f2a --db run.db --json - | jq '.turns[].kind'\n";

static long long geti(json_t *o, const char *k)
{
    return (long long)json_integer_value(json_object_get(o, k));
}

/* A count of the turn, or "-" when it is not known (negative). */
static const char *num(json_t *t, const char *k, char *out, size_t n)
{
    json_t *v = json_object_get(t, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return "-";
    snprintf(out, n, "%lld", (long long)json_integer_value(v));
    return out;
}

static void print_findings(const struct audit_list *l, long long request)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].request == request)
            printf("        %-5s %s: %s\n", audit_sev_name(l->v[i].sev),
                   l->v[i].rule, l->v[i].summary);
}

static void print_session(const struct audit_session *s, json_t *turns,
                          const struct audit_list *l)
{
    json_t *sum = audit_session_json(s, l);
    size_t i;
    json_t *t;
    printf("session %s  harness %s  %zu exchange%s\n", s->id,
           json_string_value(json_object_get(sum, "harness")), s->n,
           plural_s(s->n));
    if (s->parent)
        printf("subagent of %s (tool call %s%s)\n", s->parent, s->parent_call,
               s->result_returned ? ", its result went back" : "");
    json_decref(sum);
    print_findings(l, 0);
    json_array_foreach(turns, i, t)
    {
        const char *fin =
            json_string_value(json_object_get(t, "finish_reason"));
        const char *by = json_string_value(json_object_get(t, "answered_by"));
        char pt[24], ct[24], st[24], ttfb[32] = "-";
        double ms = json_number_value(json_object_get(t, "ttfb_ms"));
        if (geti(t, "status") > 0 && ms >= 0 && !by)
            snprintf(ttfb, sizeof(ttfb), "%.0f ms", ms);
        printf("#%-5lld %-10s turn %-3lld %3lld msg%s (+%lld) %8lld B  "
               "prompt %6s  compl %5s  %-10s %3s  ttfb %s%s\n",
               geti(t, "request"),
               json_string_value(json_object_get(t, "kind")), geti(t, "turn"),
               geti(t, "messages"), geti(t, "messages") == 1 ? " " : "s",
               geti(t, "new_messages"), geti(t, "request_bytes"),
               num(t, "prompt_tokens", pt, sizeof(pt)),
               num(t, "completion_tokens", ct, sizeof(ct)), fin ? fin : "-",
               geti(t, "status") > 0 ? num(t, "status", st, sizeof(st)) : "-",
               ttfb, by ? "  (answered by record: no upstream response)" : "");
        print_findings(l, geti(t, "request"));
    }
}

int cmd_show(int argc, char **argv)
{
    static const struct option longopts[] = {
        RECORDED_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct recorded_args a;
    const char *id = NULL;
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
            return cli_bad_option("show", c, argv);
    }
    if (optind != argc - 1)
        return cli_usage_error("show", "needs one SESSION id (see 'fidelity "
                                       "sessions')");
    id = argv[optind];
    audit_set_init(&set);
    audit_list_init(&l);
    audit_opts_init(&o);
    if ((rc = recorded_load("show", &a, id, &set)))
        goto out;
    audit_run(&set, &o, &l);
    json_t *turns = audit_session_turns(&set.s[0]);
    if (a.json) {
        json_t *f = json_array();
        for (size_t i = 0; i < l.n; i++)
            json_array_append_new(f, audit_finding_json(&l.v[i]));
        json_t *j = json_pack("{s:i, s:s, s:O, s:o}", "version", 1, "session",
                              id, "turns", turns, "findings", f);
        const struct audit_session *s = &set.s[0];
        json_object_set_new(
            j, "parent",
            s->parent ? json_pack("{s:s, s:s, s:b}", "session", s->parent,
                                  "call", s->parent_call, "result_returned",
                                  s->result_returned)
                      : json_null());
        rc = cli_json_write(j, a.json, &d)
                 ? cli_error("show", EXIT_INTERNAL, "%s", d.msg)
                 : EXIT_PASS;
        json_decref(j);
    }
    if (!a.json || strcmp(a.json, "-"))
        print_session(&set.s[0], turns, &l);
    json_decref(turns);
out:
    audit_list_release(&l);
    audit_set_release(&set);
    return rc;
}
