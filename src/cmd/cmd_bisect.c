/*
 * cmd_bisect: `fidelity bisect CONFIG`, which launches server
 * configurations with patches (toggles) turned on and off, measures each
 * against the golden with drift and probe, and ranks the toggles. Parses
 * options, loads the config (src/bisect/config.c), runs src/bisect/bisect.c,
 * prints the ranking src/bisect/rank.c makes of its outcome and chooses
 * the exit code. See docs/BISECT.md.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bisect/bisect.h"
#include "bisect/config.h"
#include "bisect/plan.h"
#include "bisect/rank.h"
#include "bisect/slurm.h"
#include "bisect/verdict.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/xalloc.h"

const char CMD_BISECT_HELP[] =
    "usage: fidelity bisect CONFIG [options]\n"
    "\n"
    "Launches the server of CONFIG once with every toggle off (the golden)\n"
    "and once per configuration the mode asks for, measures each against\n"
    "the golden (drift: teacher-forced logprobs; probe: recall, with the\n"
    "golden as baseline), stops it, and ranks the toggles: harm, attribution\n"
    "against the claimed path, recall change, inert toggles. No server is\n"
    "left running, also when bisect is interrupted or killed. With\n"
    "[golden] file = PATH (a saved golden, drift --save-golden) no golden\n"
    "is launched and drift alone measures: recall is not measured.\n"
    "CONFIG format: docs/BISECT.md.\n"
    "\n"
    "options:\n"
    "  --mode M      one-at-a-time (default: each toggle alone), "
    "leave-one-out\n"
    "                (all on, then each removed), adaptive (group testing\n"
    "                for every culprit: 1 + d (ceil(log2 n) + 2) launches\n"
    "                for d culprits), full (all 2^n, n <= 5)\n"
    "  --slots N     configurations at once (default 1; ports and {slot}\n"
    "                1..N, the golden holds slot 0; Slurm: jobs queued)\n"
    "  --out DIR     results and logs (default bisect.out)\n"
    "  --resume      reuse finished configurations in DIR, rerun the rest\n"
    "  --dry-run     print the configurations, their commands and the\n"
    "                launch count (Slurm: the batch scripts); launch "
    "nothing\n"
    "  --launcher L  local (default: processes on this host) or slurm (one\n"
    "                batch job per configuration; the [slurm] section)\n"
    "  --queue-timeout S  Slurm: seconds a job may stay pending before it\n"
    "                is reported and cancelled (default 3600)\n"
    "  --json FILE   the ranking as JSON ('-' = stdout)\n"
    "  --quiet, -q   print only the first line (the culprits, or none)\n"
    "\n"
    "exit status: 0 no culprit, 1 culprit found, 2 usage or config error,\n"
    "3 the golden could not be started or reached, or a port bisect needs\n"
    "is held by a process it did not start, 4 I/O error or a watchdog\n"
    "died, 130 interrupted.\n"
    "\n"
    "examples:\n"
    "  fidelity bisect sglang.ini --dry-run\n"
    "  fidelity bisect sglang.ini --mode adaptive --json bisect.json\n"
    "  fidelity bisect sglang.ini --slots 4 --resume\n";

static volatile sig_atomic_t stop_flag;

static void on_sigint(int sig)
{
    (void)sig;
    stop_flag = 1;
}

struct opts {
    const char *config;
    enum bisect_mode mode;
    long slots;
    const char *out;
    const char *json;
    bool resume, dry_run, quiet;
    const char *launcher; /* NULL: the config's */
    double queue_timeout; /* < 0: the config's */
};

enum {
    OPT_MODE = 256,
    OPT_SLOTS,
    OPT_OUT,
    OPT_RESUME,
    OPT_DRY,
    OPT_JSON,
    OPT_LAUNCHER,
    OPT_QTIMEOUT
};

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"mode", required_argument, NULL, OPT_MODE},
        {"slots", required_argument, NULL, OPT_SLOTS},
        {"out", required_argument, NULL, OPT_OUT},
        {"resume", no_argument, NULL, OPT_RESUME},
        {"dry-run", no_argument, NULL, OPT_DRY},
        {"json", required_argument, NULL, OPT_JSON},
        {"launcher", required_argument, NULL, OPT_LAUNCHER},
        {"queue-timeout", required_argument, NULL, OPT_QTIMEOUT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct opts){.slots = 1, .out = "bisect.out", .queue_timeout = -1};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hq", lo, NULL)) != -1) {
        switch (c) {
        case 'q':
            o->quiet = true;
            break;
        case OPT_MODE:
            if (bisect_mode_parse(optarg, &o->mode))
                return cli_usage_error("bisect",
                                       "unknown mode '%s'; use one-at-a-time, "
                                       "leave-one-out, adaptive or full",
                                       optarg);
            break;
        case OPT_SLOTS:
            if (cli_parse_long(optarg, 1, 64, &o->slots))
                return cli_usage_error(
                    "bisect", "--slots wants 1 to 64, not '%s'", optarg);
            break;
        case OPT_OUT:
            o->out = optarg;
            break;
        case OPT_RESUME:
            o->resume = true;
            break;
        case OPT_DRY:
            o->dry_run = true;
            break;
        case OPT_JSON:
            o->json = optarg;
            break;
        case OPT_LAUNCHER:
            if (strcmp(optarg, "local") && strcmp(optarg, "slurm"))
                return cli_usage_error(
                    "bisect", "unknown launcher '%s'; use local or slurm",
                    optarg);
            o->launcher = optarg;
            break;
        case OPT_QTIMEOUT:
            if (cli_parse_double(optarg, 0, 7 * 86400, &o->queue_timeout))
                return cli_usage_error("bisect",
                                       "--queue-timeout wants seconds, 0 to "
                                       "604800, not '%s'",
                                       optarg);
            break;
        case 'h':
            return cli_help("bisect") - 1;
        default:
            return cli_bad_option("bisect", c, argv);
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("bisect", "give one CONFIG file");
    o->config = argv[optind];
    return 0;
}

/* The batch script of configuration s on slot, as the Slurm launcher
 * would submit it. */
static void print_script(const struct bisect_config *c, const struct opts *o,
                         bisect_set s, int slot)
{
    char *name = bisect_set_name(c, s);
    int port = c->first_port ? c->first_port + slot : -1;
    char *cmd = bisect_set_command(c, s, port, slot);
    char *log = xasprintf("%s/%s.server.log", o->out, name);
    char **env = NULL;
    size_t n_env = 0;
    for (size_t i = 0; i < c->n_env; i++) {
        env = xrealloc(env, (n_env + 1) * sizeof(*env));
        env[n_env++] = bisect_expand(c->env[i], port, slot);
    }
    for (size_t t = 0; t < c->n_toggles; t++)
        for (size_t i = 0; (s >> t & 1) && i < c->toggles[t].n_env; i++) {
            env = xrealloc(env, (n_env + 1) * sizeof(*env));
            env[n_env++] = bisect_expand(c->toggles[t].env[i], port, slot);
        }
    struct launch_spec spec = {.name = name,
                               .command = cmd,
                               .env = env,
                               .n_env = n_env,
                               .workdir = c->workdir,
                               .log_path = log};
    struct buf b = BUF_INIT;
    bisect_slurm_script(&c->slurm, o->out, &spec, &b);
    printf("\n--- %s.sbatch\n%s", name, buf_str(&b));
    buf_release(&b);
    for (size_t i = 0; i < n_env; i++)
        free(env[i]);
    free(env);
    free(log);
    free(cmd);
    free(name);
}

static bool use_slurm(const struct bisect_config *c, const struct opts *o)
{
    return o->launcher ? !strcmp(o->launcher, "slurm")
                       : c->launcher == BISECT_LAUNCH_SLURM;
}

static int dry_run(const struct bisect_config *c, const struct opts *o)
{
    bisect_set *sets;
    size_t n;
    struct diag d = {0};
    if (bisect_plan_static(o->mode, c->n_toggles, &sets, &n, &d))
        return cli_error("bisect", EXIT_USAGE, "%s", d.msg);
    int golden = c->golden_url || c->golden_file ? 0 : 1;
    printf("mode %s, %zu toggles, golden %s%s%s\n", bisect_mode_name(o->mode),
           c->n_toggles, c->golden_file ? "file " : "",
           c->golden_url    ? c->golden_url
           : c->golden_file ? c->golden_file
                            : "launched",
           c->golden_file ? " (drift alone: recall is not measured)" : "");
    if (golden) {
        char *cmd = c->first_port ? bisect_set_command(c, 0, c->first_port, 0)
                                  : bisect_set_template(c, 0);
        printf("  golden: %s\n", cmd);
        free(cmd);
    }
    for (size_t i = 0; i < n; i++) {
        char *name = bisect_set_name(c, sets[i]);
        int slot = (int)(i % (size_t)o->slots) + 1;
        char *cmd =
            c->first_port
                ? bisect_set_command(c, sets[i], c->first_port + slot, slot)
                : bisect_set_template(c, sets[i]);
        printf("  %s: %s\n", name, cmd);
        for (size_t t = 0; t < c->n_toggles; t++)
            for (size_t k = 0; (sets[i] >> t & 1) && k < c->toggles[t].n_env;
                 k++)
                printf("      env %s\n", c->toggles[t].env[k]);
        free(name);
        free(cmd);
    }
    size_t nt = c->n_toggles;
    if (o->mode == BISECT_ADAPTIVE)
        printf("launches: %d golden + 1 (no culprit) to %zu (one culprit), "
               "%zu (two, or a pair), %zu (three); d culprits: at most 1 + "
               "d (ceil(log2 %zu) + 2), each depending on the last answer\n",
               golden, bisect_adaptive_bound(nt, 1),
               bisect_adaptive_bound(nt, 2), bisect_adaptive_bound(nt, 3), nt);
    else
        printf("launches: %d golden + %zu\n", golden, n);
    if (use_slurm(c, o)) {
        printf("batch scripts (Slurm; {port} is picked on the node):\n");
        if (golden)
            print_script(c, o, 0, 0);
        for (size_t i = 0; i < n; i++)
            print_script(c, o, sets[i], (int)(i % (size_t)o->slots) + 1);
    }
    free(sets);
    return EXIT_PASS;
}

static double start_time;

/* On a terminal one line redrawn in place; otherwise a line when each
 * configuration starts, with its port, and one when it is done. */
static void on_progress(void *ud, const struct bisect_progress *p)
{
    bool tty = ud != NULL;
    double el = clock_now_s() - start_time;
    char which[96], eta[32] = "", port[32] = "";
    if (!p->index)
        snprintf(which, sizeof(which), "golden");
    else if (p->total)
        snprintf(which, sizeof(which), "configuration %zu of %zu (%s)",
                 p->index, p->total, p->name);
    else
        snprintf(which, sizeof(which), "configuration %zu (%s)", p->index,
                 p->name);
    if (p->port)
        snprintf(port, sizeof(port), " on port %d", p->port);
    if (p->index > 1 && p->index <= p->total)
        snprintf(eta, sizeof(eta), ", ETA %.0f s",
                 el / (double)(p->index - 1) *
                     (double)(p->total - p->index + 1));
    if (!tty) {
        if (p->phase == BISECT_STARTING || p->phase == BISECT_DONE)
            fprintf(stderr, "bisect: %s%s: %s, %.0f s\n", which, port,
                    bisect_phase_name(p->phase), el);
        return;
    }
    fprintf(stderr, "\r\033[K%s%s: %s, %.0f s%s", which, port,
            bisect_phase_name(p->phase), el, eta);
    if (p->phase == BISECT_DONE || p->phase == BISECT_STARTING)
        fputc('\n', stderr);
}

static void print_culprit(const struct bisect_config *c,
                          const struct bisect_ranking *rk,
                          const struct bisect_culprit *k)
{
    char *name = bisect_set_name(c, k->set);
    printf("%s%s: ", name, k->together ? " (only together)" : "");
    free(name);
    const struct bisect_verdict *v = k->row ? &k->row->v : NULL;
    if (!v && k->without && rk->all_on) { /* leave-one-out */
        const struct bisect_verdict *w = &k->without->v, *a = &rk->all_on->v;
        printf("removing it from all on takes excess KL from %.3g to %.3g "
               "and recall from %+.0f to %+.0f points",
               a->harm, w->harm, 100 * a->pass_diff, 100 * w->pass_diff);
        return;
    }
    if (!v) {
        printf("not measured alone");
        return;
    }
    char ci[64] = "";
    if (!isnan(v->harm_lo))
        snprintf(ci, sizeof(ci), " [%.3g, %.3g]", v->harm_lo, v->harm_hi);
    printf("excess KL %.3g%s (%s), drift %s", v->harm, ci, v->attribution,
           v->drift_verdict);
    if (v->recall_measured)
        printf(", recall %+.0f points (McNemar p %.3g)", 100 * v->pass_diff,
               v->mcnemar_p);
    else
        printf(", recall not measured (a saved golden)");
}

/* The first line names every culprit, recall loss first, then by harm;
 * then what all on's harm leaves unexplained, with its figures. */
static void print_headline(const struct bisect_config *c,
                           const struct bisect_ranking *rk)
{
    for (size_t i = 0; i < rk->n_culprits; i++) {
        printf("%s", i ? "; " : "culprit: ");
        print_culprit(c, rk, &rk->culprits[i]);
    }
    size_t unmeasured = 0;
    for (size_t i = 0; i < rk->n; i++)
        unmeasured += !rk->rows[i].v.measured;
    if (rk->n_culprits)
        printf("\n");
    else if (rk->culprit)
        printf("no culprit named: some configuration is harmful, but no "
               "toggle or group of toggles could be named from what this "
               "mode measures\n");
    else if (unmeasured)
        printf("no verdict: %zu configuration%s could not be measured (see "
               "%s measurement log); no culprit among the others, which "
               "says nothing of %s\n",
               unmeasured, unmeasured == 1 ? "" : "s",
               unmeasured == 1 ? "its" : "their",
               unmeasured == 1 ? "it" : "them");
    else if (c->golden_file)
        printf("no culprit: no configuration's drift failed against the "
               "saved golden (recall not measured)\n");
    else
        printf("no culprit: no configuration's drift failed or recall fell "
               "significantly below the golden's\n");
    const struct bisect_verdict *a = rk->all_on ? &rk->all_on->v : NULL;
    if (rk->unexplained_recall)
        printf("unexplained: all on lost %.0f points of recall (McNemar p "
               "%.3g), and no culprit named lost recall\n",
               -100 * a->pass_diff, a->mcnemar_p);
    if (rk->unexplained_harm) {
        char ci[64] = "";
        if (!isnan(a->harm_lo))
            snprintf(ci, sizeof(ci), " [%.3g, %.3g]", a->harm_lo, a->harm_hi);
        printf("unexplained: all on has excess KL %.3g%s; the culprits "
               "named account for %.3g, and the rest without them was not "
               "measured harmless\n",
               a->harm, ci, rk->explained);
    }
}

/* What the server reports differently from the golden (a few fields). */
static void print_reported(const json_t *diff)
{
    size_t n = json_array_size(diff);
    for (size_t i = 0; i < n && i < 4; i++) {
        const json_t *d = json_array_get(diff, i);
        const json_t *v = json_object_get(d, "values");
        char *a = json_dumps(json_array_get(v, 0),
                             JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
        char *b = json_dumps(json_array_get(v, 1),
                             JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
        printf("%s%s %s -> %s", i ? ", " : "    server reports: ",
               json_string_value(json_object_get(d, "field")), a ? a : "?",
               b ? b : "?");
        free(a);
        free(b);
    }
    if (n > 4)
        printf(" and %zu more", n - 4);
    if (n)
        printf("\n");
}

/* Drift's excess KL by position bucket and its growth verdict. */
static void print_buckets(const struct bisect_row *w)
{
    const json_t *d = json_object_get(w->r->doc, "drift");
    const json_t *bk = json_object_get(d, "buckets");
    printf("    excess KL by position:");
    for (size_t i = 0; i < json_array_size(bk); i++) {
        const json_t *b = json_array_get(bk, i);
        printf(" %lld-%lld %.2g%s",
               (long long)json_integer_value(json_object_get(b, "from")),
               (long long)json_integer_value(json_object_get(b, "to")),
               json_number_value(
                   json_object_get(json_object_get(b, "excess"), "kl_mean")),
               strcmp(json_string_value(json_object_get(b, "verdict")), "PASS")
                   ? "!"
                   : "");
    }
    printf("; growth %s\n", w->v.growth);
}

static void print_row(const struct bisect_row *w)
{
    const struct bisect_verdict *v = &w->v;
    printf("%-24s ", w->r->name);
    if (!v->measured) {
        printf("%s: %s\n", w->verdict,
               json_string_value(json_object_get(w->r->doc, "error")));
        const char *t =
            json_string_value(json_object_get(w->r->doc, "log_tail"));
        if (t)
            printf("    log tail:\n%s\n", t);
        return;
    }
    char recall[64] = "not measured";
    if (v->recall_measured)
        snprintf(recall, sizeof(recall), "%+5.0f [%+.0f,%+.0f] p=%-6.3g",
                 100 * v->pass_diff, 100 * v->diff_lo, 100 * v->diff_hi,
                 v->mcnemar_p);
    printf("%-10.3g %-8.1f %-6s %-13s %-8s %-21s %s\n", v->harm,
           v->flips_per_1k, v->drift_verdict, v->attribution,
           bisect_path_name(w->claimed), recall, w->verdict);
    const char *note =
        json_string_value(json_object_get(w->r->doc, "server_info_note"));
    if (note)
        printf("    server info: %s\n", note);
    print_reported(json_object_get(w->r->doc, "fingerprint_diff"));
    if (w->mismatch)
        printf("    MISMATCH: claims %s, but the measured change is %s\n",
               bisect_path_name(w->claimed), v->attribution);
    if (v->why_undecided)
        printf("    undecided: %s\n", v->why_undecided);
    if (v->inert && !v->recall_measured)
        printf("    inert: bit-identical prompt logprobs (answers not "
               "compared); check that the server reads this flag at all\n");
    else if (v->inert)
        printf("    inert: bit-identical prompt logprobs and identical "
               "answers; check that the server reads this flag at all\n");
    else if (strcmp(v->drift_verdict, "PASS") || strcmp(v->growth, "n/a"))
        print_buckets(w);
}

static json_t *row_json(const struct bisect_row *w)
{
    const struct bisect_verdict *v = &w->v;
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(w->r->name));
    json_object_set(o, "toggles", json_object_get(w->r->doc, "toggles"));
    json_object_set_new(o, "verdict", json_string(w->verdict));
    json_object_set_new(o, "measured", json_boolean(v->measured));
    json_object_set(o, "server_info_note",
                    json_object_get(w->r->doc, "server_info_note"));
    json_object_set(o, "fingerprint_diff",
                    json_object_get(w->r->doc, "fingerprint_diff"));
    if (!v->measured) {
        json_object_set(o, "error", json_object_get(w->r->doc, "error"));
        return o;
    }
    json_object_set_new(o, "harm", json_real(v->harm));
    json_object_set_new(o, "harm_ci",
                        isnan(v->harm_lo)
                            ? json_null()
                            : json_pack("[ff]", v->harm_lo, v->harm_hi));
    json_object_set_new(o, "flips_per_1k", json_real(v->flips_per_1k));
    json_object_set_new(o, "drift_verdict", json_string(v->drift_verdict));
    json_object_set_new(o, "growth", json_string(v->growth));
    json_object_set_new(o, "attribution", json_string(v->attribution));
    json_object_set_new(o, "claimed",
                        json_string(bisect_path_name(w->claimed)));
    json_object_set_new(o, "path_mismatch", json_boolean(w->mismatch));
    json_object_set_new(o, "recall_measured", json_boolean(v->recall_measured));
    if (v->recall_measured) {
        json_object_set_new(o, "pass_diff", json_real(v->pass_diff));
        json_object_set_new(o, "pass_diff_ci",
                            json_pack("[ff]", v->diff_lo, v->diff_hi));
        json_object_set_new(o, "mcnemar_p", json_real(v->mcnemar_p));
    } else {
        json_object_set_new(o, "pass_diff", json_null());
        json_object_set_new(o, "pass_diff_ci", json_null());
        json_object_set_new(o, "mcnemar_p", json_null());
    }
    json_object_set_new(o, "inert", json_boolean(v->inert));
    json_object_set_new(o, "undecided", json_boolean(v->undecided));
    if (v->why_undecided)
        json_object_set_new(o, "why_undecided", json_string(v->why_undecided));
    json_object_set_new(o, "harmful", json_boolean(v->harmful));
    json_object_set_new(o, "recall_worse", json_boolean(v->recall_worse));
    return o;
}

/* The culprits as named in the first line, in its order. */
static json_t *culprits_json(const struct bisect_config *c,
                             const struct bisect_ranking *rk)
{
    json_t *a = json_array();
    for (size_t i = 0; i < rk->n_culprits; i++) {
        const struct bisect_culprit *k = &rk->culprits[i];
        char *name = bisect_set_name(c, k->set);
        json_array_append_new(a, json_pack("{s:s,s:b,s:b,s:f}", "name", name,
                                           "together", k->together,
                                           "recall_worse", k->recall, "harm",
                                           isnan(k->harm) ? 0.0 : k->harm));
        free(name);
    }
    return a;
}

static int report(const struct bisect_config *c, const struct opts *o,
                  const struct bisect_outcome *out)
{
    struct bisect_ranking rk;
    bisect_rank(c, o->mode, out, &rk);
    const struct bisect_row *rows = rk.rows;
    size_t n = rk.n;
    bisect_set inter = rk.interaction;
    print_headline(c, &rk);
    if (!o->quiet) /* --quiet: the first line alone */
        printf("\n%-24s %-10s %-8s %-6s %-13s %-8s %-21s %s\n", "configuration",
               "excess KL", "flips/1k", "drift", "measured", "claimed",
               "recall (points) p", "verdict");
    json_t *j = json_object();
    json_t *ja = json_array();
    for (size_t i = 0; i < n; i++) {
        if (!o->quiet)
            print_row(&rows[i]);
        json_array_append_new(ja, row_json(&rows[i]));
    }
    if (inter) {
        char *names = bisect_set_name(c, inter);
        if (!o->quiet)
            printf("\ninteraction: %s hurt only together\n", names);
        json_object_set_new(j, "interaction", json_string(names));
        free(names);
    }
    if (!o->quiet) {
        printf("\nlaunches: %zu (golden included)", out->launches);
        if (o->resume)
            printf("; %zu configuration%s reused from '%s' (--resume)",
                   out->reused, out->reused == 1 ? "" : "s", o->out);
        printf("\n");
    }
    json_object_set_new(j, "schema", json_string("fidelity.bisect/1"));
    json_object_set_new(j, "mode", json_string(bisect_mode_name(o->mode)));
    json_object_set_new(
        j, "golden",
        c->golden_file ? json_pack("{s:s, s:s}", "file", c->golden_file,
                                   "measured_by", "drift")
                       : json_pack("{s:s, s:s}", "url",
                                   c->golden_url ? c->golden_url : "launched",
                                   "measured_by", "drift and probe"));
    json_object_set_new(j, "launches", json_integer((json_int_t)out->launches));
    json_object_set_new(j, "reused", json_integer((json_int_t)out->reused));
    json_object_set_new(j, "configurations", ja);
    json_object_set_new(j, "culprit", json_boolean(rk.culprit));
    json_object_set_new(j, "culprits", culprits_json(c, &rk));
    json_object_set_new(j, "unexplained_recall",
                        json_boolean(rk.unexplained_recall));
    json_object_set_new(j, "unexplained_harm",
                        json_boolean(rk.unexplained_harm));
    /* nothing is judged on nothing: "no culprit" needs every
     * configuration measured (a drift that stopped on a server's NaN, a
     * candidate that never started, is no evidence of harmlessness) */
    bool all_measured = true;
    for (size_t i = 0; i < n; i++)
        all_measured &= rows[i].v.measured;
    json_object_set_new(j, "all_measured", json_boolean(all_measured));
    json_object_set_new(j, "verdict",
                        json_string(rk.culprit      ? "FAIL"
                                    : !all_measured ? "INCONCLUSIVE"
                                                    : "PASS"));
    int rc = rk.culprit || !all_measured ? EXIT_FAIL : EXIT_PASS;
    struct diag d = {0};
    if (o->json && cli_json_write(j, o->json, &d))
        rc = cli_error("bisect", EXIT_INTERNAL, "%s", d.msg);
    json_decref(j);
    bisect_ranking_release(&rk);
    return rc;
}

int cmd_bisect(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc)
        return rc < 0 ? EXIT_PASS : rc;
    struct bisect_config c;
    struct diag d = {0};
    if (bisect_config_load(&c, o.config, &d))
        return cli_error("bisect", EXIT_USAGE, "%s", d.msg);
    if (o.dry_run) {
        rc = dry_run(&c, &o);
        goto out_config;
    }
    rc = cli_check_output("bisect", "--json", o.json);
    if (!rc)
        rc = cli_check_outdir("bisect", "--out", o.out);
    if (rc)
        goto out_config;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        rc = cli_error("bisect", EXIT_INTERNAL, "cannot find my own binary");
        goto out_config;
    }
    self[n] = '\0';
    struct sigaction sa = {.sa_handler = on_sigint};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    start_time = clock_now_s();
    struct launcher *l = NULL;
    if (use_slurm(&c, &o)) {
        if (mkdir(o.out, 0755) && errno != EEXIST) {
            rc = cli_error("bisect", EXIT_INTERNAL, "cannot create '%s': %s",
                           o.out, strerror(errno));
            goto out_config;
        }
        size_t cancelled = 0;
        double qt =
            o.queue_timeout >= 0 ? o.queue_timeout : c.slurm.queue_timeout;
        l = launch_slurm_new(&c.slurm, o.out, qt, o.resume, &cancelled, &d);
        if (!l) {
            rc = cli_error("bisect", EXIT_UNREACHABLE, "%s", d.msg);
            goto out_config;
        }
        if (cancelled)
            fprintf(stderr,
                    "bisect: cancelled %zu job(s) of the earlier run over "
                    "'%s'\n",
                    cancelled, o.out);
    }
    struct bisect_opts bo = {.mode = o.mode,
                             .launcher = l,
                             .slots = (int)o.slots,
                             .resume = o.resume,
                             .dir = o.out,
                             .self = self,
                             .stop = &stop_flag,
                             .on_progress = on_progress,
                             .ud = cli_is_tty(2) ? (void *)&start_time : NULL};
    struct bisect_outcome out;
    int err = bisect_run(&c, &bo, &out, &d);
    if (err == -EINTR || stop_flag)
        rc = cli_error("bisect", EXIT_INTERRUPTED,
                       "interrupted; every server is stopped, '--resume' "
                       "goes on where this run ended");
    else if (err == -ECONNREFUSED) {
        rc = cli_error("bisect", EXIT_UNREACHABLE, "%s", d.msg);
        const char *t =
            json_string_value(json_object_get(out.golden, "log_tail"));
        if (t)
            fprintf(stderr, "the golden's log ends with:\n%s\n", t);
    } else if (err == -EADDRINUSE) /* a stranger on a port: not measured */
        rc = cli_error("bisect", EXIT_UNREACHABLE, "%s", d.msg);
    else if (err)
        rc = cli_error("bisect", err == -EINVAL ? EXIT_USAGE : EXIT_INTERNAL,
                       "%s", d.msg);
    else
        rc = report(&c, &o, &out);
    bisect_outcome_release(&out);
    if (l)
        l->ops->free(l);
out_config:
    bisect_config_release(&c);
    return rc;
}
