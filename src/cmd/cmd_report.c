/*
 * cmd_report: `fidelity report`, one self-contained HTML page of what the
 * store holds: the latest (or a given) probe run, drift run and the
 * recorded sessions with audit's findings (default options), and the
 * latest probe --live run. Parses
 * options, loads through src/report/load.c and audit, renders with
 * src/report/ and writes the file. Also the `--report FILE` hook that
 * probe, drift and audit call with their in-memory documents
 * (cmd_report_hook, cmd_report_live_hook). See docs/REPORT.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bisect/inspect.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/num.h"
#include "core/xalloc.h"
#include "report/report.h"
#include "store/store.h"
#include "version.h"

const char CMD_REPORT_HELP[] =
    "usage: fidelity report [--db FILE] [--probe-run ID] [--probe-live-run "
    "ID]\n"
    "                       [--drift-run ID] [--session KEY] [--bisect FILE]\n"
    "                       [-o FILE]\n"
    "\n"
    "Writes one self-contained HTML page (inline CSS and SVG, no script,\n"
    "nothing fetched) with the pictures of what the store holds: probe's\n"
    "length x depth heatmaps, probe --live's break turns with recall and\n"
    "reasoning by turn, drift's metrics against position, audit's prompt\n"
    "tokens per turn with its findings. Attach it to a bug report.\n"
    "\n"
    "options:\n"
    "  --db FILE          store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE       record's spill file (default DB.spill.jsonl)\n"
    "  --probe-run ID     probe run to draw (default: the latest)\n"
    "  --probe-live-run ID\n"
    "                     probe --live run to draw (default: the latest)\n"
    "  --drift-run ID     drift run to draw (default: the latest)\n"
    "  --session KEY      draw only this recorded session\n"
    "  --bisect FILE      add the bisect run in FILE ('fidelity bisect --json\n"
    "                     FILE'; bisect keeps its runs in its --out "
    "directory,\n"
    "                     not in the store); with --probe-run and "
    "--drift-run,\n"
    "                     one page for the runs of one investigation\n"
    "  --no-probe, --no-drift, --no-audit   leave a section out\n"
    "                     (--no-probe: scripted and live probe runs)\n"
    "  -o, --output FILE  where to write (default report.html, '-' stdout)\n"
    "\n"
    "'probe' (--live too), 'drift' and 'audit' also take --report FILE to\n"
    "write the page of the run they just made. SOURCE_DATE_EPOCH, when set,\n"
    "is the time the page shows as generated.\n"
    "\n"
    "exit status: 0 written, 2 usage (no such run or session, nothing to\n"
    "report), 4 store or I/O failure.\n"
    "\n"
    "examples:\n"
    "  fidelity report\n"
    "  fidelity report --db runs.db --probe-run 3 -o probe3.html\n"
    "  fidelity report --session 7f3a --no-probe --no-drift\n"
    "  fidelity report --bisect bisect.json --no-probe --no-audit\n";

enum {
    O_PROBE_RUN = 256,
    O_PROBE_LIVE_RUN,
    O_DRIFT_RUN,
    O_SESSION,
    O_NO_PROBE,
    O_NO_DRIFT,
    O_NO_AUDIT,
    O_BISECT
};

struct args {
    struct recorded_args rec;
    const char *out, *session, *bisect;
    long long probe_id, live_id, drift_id;
    bool no_probe, no_drift, no_audit;
};

static time_t report_now(void)
{
    const char *s = getenv("SOURCE_DATE_EPOCH");
    long v;
    if (s && *s && !num_parse_long(s, 0, 0x7fffffffffffL, &v))
        return (time_t)v;
    return time(NULL);
}

/* What each endpoint of in's documents said about itself, normalised as
 * `fidelity inspect` prints it, into in->servers, and the fields that
 * differ into in->server_diff; both owned by *own (release with
 * json_decref). probe keeps the answers as server_info {"models",
 * "get_server_info", ...}, drift as {"/v1/models", ...}. */
static void add_servers(struct report_in *in, json_t **own)
{
    static const struct {
        const char *role, *doc, *side;
    } eps[] = {{"probe endpoint", "probe", "endpoint"},
               {"probe baseline", "probe", "baseline"},
               {"probe --live endpoint", "live", "endpoint"},
               {"drift golden", "drift", "golden"},
               {"drift candidate", "drift", "candidate"}};
    json_t *servers = json_array(), *fps[8];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
        const json_t *doc = !strcmp(eps[i].doc, "probe")  ? in->probe
                            : !strcmp(eps[i].doc, "live") ? in->live
                                                          : in->drift;
        const json_t *e = json_object_get(doc, eps[i].side);
        if (!json_is_object(e))
            continue;
        const json_t *si = json_object_get(e, "server_info");
        json_t *answers = json_object();
        const char *k;
        json_t *v;
        if (json_is_object(si)) {
            json_object_foreach((json_t *)si, k, v)
            {
                char *key =
                    xasprintf("/%s", strcmp(k, "models") ? k : "v1/models");
                json_object_set(answers, key, v);
                free(key);
            }
        } else if (json_is_object(json_object_get(e, "fingerprint")))
            json_object_update(answers, json_object_get(e, "fingerprint"));
        const char *url = json_string_value(json_object_get(e, "url"));
        fps[n] = inspect_normalise(url, answers);
        json_decref(answers);
        json_array_append_new(servers,
                              json_pack("{s:s, s:O}", "role", eps[i].role,
                                        "fingerprint", fps[n]));
        n++;
    }
    json_t *diff = n > 1 ? inspect_diff(fps, n) : json_array();
    for (size_t i = 0; i < n; i++)
        json_decref(fps[i]);
    *own = json_pack("{s:o, s:o}", "servers", servers, "diff", diff);
    in->servers = n ? servers : NULL;
    in->server_diff = diff;
}

/* Writes in's documents with argv's command line and the time now. */
static int hook_write(const char *cmd, const char *path, int argc, char **argv,
                      struct report_in *in)
{
    struct diag d;
    char *line = report_cmdline(argc, argv);
    in->version = FIDELITY_VERSION;
    in->cmdline = line;
    in->generated = report_now();
    json_t *own = NULL;
    add_servers(in, &own);
    int r = report_write(in, path, &d);
    json_decref(own);
    free(line);
    if (r)
        return cli_error(cmd, EXIT_INTERNAL, "%s", d.msg);
    if (strcmp(path, "-"))
        fprintf(stderr, "fidelity %s: report written to '%s'\n", cmd, path);
    return 0;
}

int cmd_report_hook(const char *cmd, const char *path, int argc, char **argv,
                    const json_t *probe, const json_t *drift,
                    const json_t *audit)
{
    struct report_in in = {.probe = probe, .drift = drift, .audit = audit};
    return hook_write(cmd, path, argc, argv, &in);
}

int cmd_report_live_hook(const char *cmd, const char *path, int argc,
                         char **argv, const json_t *live)
{
    struct report_in in = {.live = live};
    return hook_write(cmd, path, argc, argv, &in);
}

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option lo[] = {
        {"db", required_argument, NULL, 'd'},
        {"spill", required_argument, NULL, 'S'},
        {"probe-run", required_argument, NULL, O_PROBE_RUN},
        {"probe-live-run", required_argument, NULL, O_PROBE_LIVE_RUN},
        {"drift-run", required_argument, NULL, O_DRIFT_RUN},
        {"session", required_argument, NULL, O_SESSION},
        {"no-probe", no_argument, NULL, O_NO_PROBE},
        {"no-drift", no_argument, NULL, O_NO_DRIFT},
        {"no-audit", no_argument, NULL, O_NO_AUDIT},
        {"bisect", required_argument, NULL, O_BISECT},
        {"output", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    long v;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:", lo, NULL)) != -1) {
        if ((c == 'd' || c == 'S') && recorded_take_opt(&a->rec, c, optarg))
            continue;
        switch (c) {
        case O_PROBE_RUN:
        case O_PROBE_LIVE_RUN:
        case O_DRIFT_RUN:
            if (cli_parse_long(optarg, 1, 0x7fffffffL, &v))
                return cli_usage_error("report",
                                       "invalid value '%s' for %s: a run id "
                                       "(a whole number from 1)",
                                       optarg,
                                       c == O_PROBE_RUN   ? "--probe-run"
                                       : c == O_DRIFT_RUN ? "--drift-run"
                                                          : "--probe-live-run");
            *(c == O_PROBE_RUN   ? &a->probe_id
              : c == O_DRIFT_RUN ? &a->drift_id
                                 : &a->live_id) = v;
            break;
        case O_SESSION:
            a->session = optarg;
            break;
        case O_NO_PROBE:
            a->no_probe = true;
            break;
        case O_NO_DRIFT:
            a->no_drift = true;
            break;
        case O_NO_AUDIT:
            a->no_audit = true;
            break;
        case O_BISECT:
            a->bisect = optarg;
            break;
        case 'o':
            a->out = optarg;
            break;
        default:
            return cli_bad_option("report", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("report", "unexpected argument '%s'",
                               argv[optind]);
    return 0;
}

enum run_kind { RUN_PROBE, RUN_LIVE, RUN_DRIFT };

/* Loads one stored run into *doc: 0 (also when there is none and none was
 * asked for), or the exit code after the message. */
static int load_run(struct db *db, const struct args *a, enum run_kind k,
                    json_t **doc, char **origin)
{
    struct diag d;
    long long id = k == RUN_DRIFT  ? a->drift_id
                   : k == RUN_LIVE ? a->live_id
                                   : a->probe_id;
    int r = k == RUN_DRIFT  ? report_load_drift(db, id, doc, origin, &d)
            : k == RUN_LIVE ? report_load_live(db, id, doc, origin, &d)
                            : report_load_probe(db, id, doc, origin, &d);
    if (!r)
        return 0;
    if (r == -ENOENT && !id)
        return 0;
    return cli_error("report", r == -ENOENT ? EXIT_USAGE : EXIT_INTERNAL,
                     "%s in '%s'", d.msg, recorded_db_shown(&a->rec));
}

/* bisect --json's document; 0, or the exit code after the message. */
static int load_bisect(const char *path, json_t **doc, char **origin)
{
    json_error_t e;
    *doc = json_load_file(path, 0, &e);
    if (!*doc)
        return cli_usage_error("report",
                               "cannot read bisect run '%s': %s (give the "
                               "file 'fidelity bisect --json FILE' wrote)",
                               path, e.text);
    const char *schema = json_string_value(json_object_get(*doc, "schema"));
    if (!schema || strcmp(schema, "fidelity.bisect/1")) {
        json_decref(*doc);
        *doc = NULL;
        return cli_usage_error("report",
                               "'%s' is not a bisect run (no \"schema\": "
                               "\"fidelity.bisect/1\"); give the file "
                               "'fidelity bisect --json FILE' wrote",
                               path);
    }
    *origin = xasprintf("bisect run in '%s'", path);
    return 0;
}

static int load_audit(const struct args *a, json_t **doc, char **origin)
{
    struct audit_set set;
    struct audit_list l;
    struct audit_opts o;
    audit_set_init(&set);
    audit_list_init(&l);
    audit_opts_init(&o);
    int rc = recorded_load("report", &a->rec, a->session, &set);
    if (!rc && set.n) {
        audit_run(&set, &o, &l);
        const char **order = xcalloc(set.n + 1, sizeof(*order));
        for (size_t i = 0; i < set.n; i++)
            order[i] = set.s[i].id;
        audit_list_sort(&l, order, set.n);
        free(order);
        *doc = report_audit_doc(&set, &l);
        *origin =
            xasprintf("audit of %zu recorded session%s in '%s' "
                      "(default options)",
                      set.n, set.n == 1 ? "" : "s", recorded_db_shown(&a->rec));
    }
    audit_list_release(&l);
    audit_set_release(&set);
    return rc;
}

int cmd_report(int argc, char **argv)
{
    struct args a = {.out = "report.html"};
    json_t *probe = NULL, *live = NULL, *drift = NULL, *audit = NULL,
           *bisect = NULL;
    char *po = NULL, *lo = NULL, *dO = NULL, *ao = NULL, *bo = NULL,
         *line = NULL;
    struct db *db = NULL;
    struct diag d;
    recorded_args_init(&a.rec);
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    if ((rc = cli_check_output("report", "--output", a.out)))
        return rc;
    /* a bisect run alone needs no store */
    bool nostore = a.bisect && !a.probe_id && !a.live_id && !a.drift_id &&
                   !a.session && !store_exists(a.rec.db);
    if (!nostore && !store_exists(a.rec.db))
        return cli_usage_error("report", "no store '%s'",
                               recorded_db_shown(&a.rec));
    if (nostore)
        a.no_probe = a.no_drift = a.no_audit = true;
    else if (store_open(a.rec.db, &db, &d)) {
        rc = cli_error("report", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    if (!a.no_probe && (rc = load_run(db, &a, RUN_PROBE, &probe, &po)))
        goto out;
    if (!a.no_probe && (rc = load_run(db, &a, RUN_LIVE, &live, &lo)))
        goto out;
    if (!a.no_drift && (rc = load_run(db, &a, RUN_DRIFT, &drift, &dO)))
        goto out;
    store_close(db);
    db = NULL;
    if (!a.no_audit && (rc = load_audit(&a, &audit, &ao)))
        goto out;
    if (a.bisect && (rc = load_bisect(a.bisect, &bisect, &bo)))
        goto out;
    if (!probe && !live && !drift && !audit && !bisect) {
        rc = cli_usage_error("report",
                             "nothing to report: '%s' holds no probe run, "
                             "live probe run, drift run or recorded session",
                             recorded_db_shown(&a.rec));
        goto out;
    }
    line = report_cmdline(argc, argv);
    struct report_in in = {.version = FIDELITY_VERSION,
                           .cmdline = line,
                           .generated = report_now(),
                           .probe = probe,
                           .live = live,
                           .drift = drift,
                           .audit = audit,
                           .bisect = bisect,
                           .probe_origin = po,
                           .live_origin = lo,
                           .drift_origin = dO,
                           .audit_origin = ao,
                           .bisect_origin = bo};
    json_t *own = NULL;
    add_servers(&in, &own);
    int wr = report_write(&in, a.out, &d);
    json_decref(own);
    if (wr) {
        rc = cli_error("report", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    if (strcmp(a.out, "-"))
        printf("%s\n", a.out);
out:
    store_close(db);
    free(line);
    free(po);
    free(lo);
    free(dO);
    free(ao);
    free(bo);
    json_decref(bisect);
    json_decref(probe);
    json_decref(live);
    json_decref(drift);
    json_decref(audit);
    return rc;
}
