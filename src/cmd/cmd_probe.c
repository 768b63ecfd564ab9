/*
 * cmd_probe: `fidelity probe`, multi-turn context-fidelity tests of a live
 * OpenAI-compatible endpoint. Parses options, fingerprints the endpoint(s),
 * prints the plan, runs the cases through src/probe/pool.c, stores them and
 * prints the report. The only file of probe that prints or chooses an exit
 * code. See docs/PROBE.md.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/probe_live.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "probe/probe.h"
#include "probe/vary.h"
#include "report/report.h"
#include "store/store.h"

const char CMD_PROBE_HELP[] =
    "usage: fidelity probe --endpoint URL [options]\n"
    "\n"
    "Sends seeded multi-turn conversations to an OpenAI-compatible endpoint,\n"
    "scores the replies deterministically, and reports where recall breaks\n"
    "and why: truncated-by-server, dropped-before-the-model (a window of\n"
    "the oldest, middle or newest messages, a summary, clipping, the\n"
    "reasoning field, or unknown), output-clipped, server-error or missed.\n"
    "Cases are sized by probe's own count (text pieces tokenized alone,\n"
    "template framing from short requests, checked against the bytes), so\n"
    "a path that rewrites requests cannot hide what it dropped.\n"
    "\n"
    "connection:\n"
    "  --endpoint URL        base URL (http://host:port or .../v1)\n"
    "  --baseline URL        send the same cases here too; McNemar overall\n"
    "                        and per kind (Holm-corrected)\n"
    "  --model NAME          default: the first model /v1/models lists\n"
    "  --api-key KEY         default: $OPENAI_API_KEY (never printed/stored)\n"
    "  --header 'N: v'       extra request header (repeatable)\n"
    "  --extra-body JSON     object merged into every chat request\n"
    "  --timeout SEC         per request (default 300)\n"
    "  --ready-timeout SEC   wait for the first answer of each endpoint\n"
    "                        (GET /v1/models) before any long request\n"
    "                        (default 30); given, a refused connection is\n"
    "                        tried again until then (a server starting)\n"
    "  --retries N           on 429, 5xx and connection errors (default 3)\n"
    "  -j, --jobs N          concurrent requests (default 4)\n"
    "grid:\n"
    "  --profile P           quick (default, ~60 requests), standard, full\n"
    "  --kinds LIST          needle,multi-needle,canary,first-message,\n"
    "                        reasoning,tool,variables (default all)\n"
    "  --lengths LIST        tokens, e.g. 1k,4k,16k (default: powers of two\n"
    "                        up to max_model_len or --max-context)\n"
    "  --depths LIST         percent, e.g. 0,50,100\n"
    "  --max-context N       longest default length\n"
    "  --temperature LIST    e.g. 0,0.6 (default 0); short for\n"
    "                        --vary temperature=LIST\n"
    "  --vary KEY=V1,V2,...  vary a request field (dotted path for nested\n"
    "                        JSON; values JSON or strings; repeatable);\n"
    "                        the grid is the product\n"
    "  --repeats N           per cell (default 1 at temperature 0, else 3)\n"
    "  --seed N              default 1\n"
    "  --max-tokens N        reply budget (default 256; --live: 4096)\n"
    "live sessions:\n"
    "  --live                play sessions with the model's own replies\n"
    "                        carried forward; report where recall breaks\n"
    "                        per cell of the --vary x --send-reasoning grid;\n"
    "                        the run is stored for 'fidelity report'\n"
    "                        (--baseline and --junit do not apply)\n"
    "  --turns N             user turns a session (default 12, 4-64)\n"
    "  --send-reasoning LIST keep,drop,keep-with-tools (default keep)\n"
    "  --seeds N             sessions a cell (default 3)\n"
    "  --turn-bytes N        code or text pasted a work turn (default 600)\n"
    "output:\n"
    "  --dry-run             print the plan and the first case; send nothing\n"
    "  --json FILE           machine-readable report ('-' = stdout)\n"
    "  --junit FILE          JUnit XML, one testcase per case\n"
    "  --report FILE         self-contained HTML page (see 'fidelity help "
    "report');\n"
    "                        with --live, the live sessions' section\n"
    "  --quiet, -q           print only the verdict line (and errors);\n"
    "                        not with --live\n"
    "  --fail-under PCT      exit 1 when the pass rate is below PCT\n"
    "                        (default 90; 0: the rate decides "
    "nothing)\n" CLI_STORE_HELP
    "  --fresh               redo cases already in the store (results are\n"
    "                        reused only when a canary request, sent twice\n"
    "                        at temperature 0, gets the same answer)\n"
    "\n"
    "exit status: 0 passed; 1 a check failed: the pass rate is below\n"
    "--fail-under, or the endpoint is significantly worse than --baseline\n"
    "(McNemar over all paired cases, p < 0.05; the summary line says which\n"
    "rule decided), or no finished case got a usable answer (nothing is\n"
    "judged on nothing); 2 usage or config error; 3 endpoint unreachable\n"
    "or not OpenAI-compatible; 4 store or I/O failure; 130 interrupted\n"
    "(Ctrl-C; what finished is stored, the same command goes on).\n"
    "\n"
    "examples:\n"
    "  fidelity probe --endpoint http://127.0.0.1:8000\n"
    "  fidelity probe --endpoint http://gpu1:8000 --baseline http://gpu2:8000 "
    "\\\n"
    "      --kinds needle,canary --lengths 4k,32k,128k --depths 0,50,100\n"
    "  fidelity probe --endpoint https://api.example.com/v1 --model m \\\n"
    "      --extra-body '{\"chat_template_kwargs\": {\"thinking\": true}}' "
    "\\\n"
    "      --temperature 0,0.6 --json probe.json --fail-under 90\n"
    "  fidelity probe --endpoint http://127.0.0.1:8000 --live --turns 12 \\\n"
    "      --vary reasoning_effort=high,max --vary temperature=0.2,0.6 \\\n"
    "      --send-reasoning keep,drop\n";

static volatile sig_atomic_t stop_flag;

static void on_sigint(int sig)
{
    (void)sig;
    stop_flag = 1;
    signal(SIGINT, cli_sigint_exit); /* a second Ctrl-C ends the process */
}

enum {
    OPT_ENDPOINT = 256,
    OPT_BASELINE,
    OPT_MODEL,
    OPT_API_KEY,
    OPT_HEADER,
    OPT_EXTRA,
    OPT_TIMEOUT,
    OPT_RETRIES,
    OPT_PROFILE,
    OPT_KINDS,
    OPT_LENGTHS,
    OPT_DEPTHS,
    OPT_MAXCTX,
    OPT_TEMP,
    OPT_REPEATS,
    OPT_SEED,
    OPT_MAXTOK,
    OPT_DRY,
    OPT_JSON,
    OPT_JUNIT,
    OPT_FAILUNDER,
    OPT_DB,
    OPT_FRESH,
    OPT_READY,
    OPT_NOSTORE,
    OPT_REPORT,
    OPT_VARY,
    OPT_LIVE,
    OPT_TURNS,
    OPT_SENDR,
    OPT_SEEDS,
    OPT_TURNBYTES
};

struct opts {
    const char *endpoint, *baseline, *model, *api_key, *extra, *json;
    const char *junit, *db, *report;
    int argc;
    char **argv;
    const char *headers[48];
    size_t n_headers;
    long timeout_ms, ready_ms, retries, jobs, repeats, max_tokens, max_context;
    unsigned long long seed;
    double fail_under;
    bool dry, fresh, no_store, live, max_tokens_given, quiet;
    long turns, seeds, turn_bytes;
    unsigned sendr_mask;
    struct probe_vary vary;
    struct probe_grid_opts g;
    unsigned lengths[32];
    int depths[101];
    double temps[16];
};

static int parse_lengths(const char *s, struct opts *o)
{
    char *dup = xstrdup(s), *save = NULL;
    int r = 0;
    o->g.n_lengths = 0;
    for (char *t = strtok_r(dup, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(t);
        long mul = 1, v;
        if (n && (t[n - 1] == 'k' || t[n - 1] == 'K')) {
            mul = 1024;
            t[n - 1] = '\0';
        }
        if (cli_parse_long(t, 1, 16L << 20, &v) || o->g.n_lengths >= 32) {
            r = -EINVAL;
            break;
        }
        o->lengths[o->g.n_lengths++] = (unsigned)(v * mul);
    }
    free(dup);
    o->g.lengths = o->lengths;
    return r || !o->g.n_lengths ? -EINVAL : 0;
}

static int parse_depths(const char *s, struct opts *o)
{
    char *dup = xstrdup(s), *save = NULL;
    int r = 0;
    o->g.n_depths = 0;
    for (char *t = strtok_r(dup, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        long v;
        size_t n = strlen(t);
        if (n && t[n - 1] == '%')
            t[n - 1] = '\0';
        if (cli_parse_long(t, 0, 100, &v) || o->g.n_depths >= 101) {
            r = -EINVAL;
            break;
        }
        o->depths[o->g.n_depths++] = (int)v;
    }
    free(dup);
    o->g.depths = o->depths;
    return r || !o->g.n_depths ? -EINVAL : 0;
}

static int parse_temps(const char *s, struct opts *o)
{
    char *dup = xstrdup(s), *save = NULL;
    int r = 0;
    o->g.n_temps = 0;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (o->g.n_temps >= 16 ||
            cli_parse_double(t, 0, 2, &o->temps[o->g.n_temps++])) {
            r = -EINVAL;
            break;
        }
    free(dup);
    o->g.temps = o->temps;
    return r || !o->g.n_temps ? -EINVAL : 0;
}

static int parse_kinds(const char *s, struct opts *o, const char **bad)
{
    static char badbuf[64];
    char *dup = xstrdup(s), *save = NULL;
    int r = 0;
    o->g.kinds = 0;
    for (char *t = strtok_r(dup, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "all")) {
            o->g.kinds = (1u << PROBE_NKINDS) - 1;
            continue;
        }
        int k = probe_kind_parse(t);
        if (k < 0) {
            snprintf(badbuf, sizeof(badbuf), "%s", t);
            *bad = badbuf;
            r = -EINVAL;
            break;
        }
        o->g.kinds |= 1u << k;
    }
    free(dup);
    return r || !o->g.kinds ? -EINVAL : 0;
}

/* --vary KEY=LIST, or --temperature LIST as --vary temperature=LIST (key
 * set). Prints the usage error and returns non-zero. */
static int add_vary(struct opts *o, const char *key, const char *arg)
{
    struct diag d;
    char *full = key ? xasprintf("%s=%s", key, arg) : xstrdup(arg);
    int r = probe_vary_add(&o->vary, full, &d);
    free(full);
    if (r == -EEXIST && (key || probe_vary_has(&o->vary, "temperature")))
        cli_usage_error("probe", "give --temperature LIST or --vary "
                                 "temperature=LIST, not both");
    else if (r)
        cli_usage_error("probe", "invalid --vary: %s", d.msg);
    return r;
}

static int parse_sendr(const char *s, struct opts *o)
{
    char *dup = xstrdup(s), *save = NULL;
    int r = 0;
    o->sendr_mask = 0;
    for (char *t = strtok_r(dup, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        int v = probe_sendr_parse(t);
        if (v < 0) {
            r = -EINVAL;
            break;
        }
        o->sendr_mask |= 1u << v;
    }
    free(dup);
    return r || !o->sendr_mask ? -EINVAL : 0;
}

/* Every file the run will write, checked before the first request. */
static int check_paths(const struct opts *o)
{
    int rc = cli_check_output("probe", "--json", o->json);
    if (!rc)
        rc = cli_check_output("probe", "--junit", o->junit);
    if (!rc)
        rc = cli_check_output("probe", "--report", o->report);
    if (!rc && !o->no_store && !o->dry)
        rc = cli_check_store("probe", o->db ? o->db : cli_default_db());
    return rc;
}

#define BAD(what, hint)                                                        \
    cli_usage_error("probe", "invalid value '%s' for %s: %s", optarg, what,    \
                    hint)

static int parse_opts(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"baseline", required_argument, NULL, OPT_BASELINE},
        {"model", required_argument, NULL, OPT_MODEL},
        {"api-key", required_argument, NULL, OPT_API_KEY},
        {"header", required_argument, NULL, OPT_HEADER},
        {"extra-body", required_argument, NULL, OPT_EXTRA},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"jobs", required_argument, NULL, 'j'},
        {"profile", required_argument, NULL, OPT_PROFILE},
        {"kinds", required_argument, NULL, OPT_KINDS},
        {"lengths", required_argument, NULL, OPT_LENGTHS},
        {"depths", required_argument, NULL, OPT_DEPTHS},
        {"max-context", required_argument, NULL, OPT_MAXCTX},
        {"temperature", required_argument, NULL, OPT_TEMP},
        {"repeats", required_argument, NULL, OPT_REPEATS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"max-tokens", required_argument, NULL, OPT_MAXTOK},
        {"dry-run", no_argument, NULL, OPT_DRY},
        {"json", required_argument, NULL, OPT_JSON},
        {"junit", required_argument, NULL, OPT_JUNIT},
        {"fail-under", required_argument, NULL, OPT_FAILUNDER},
        {"db", required_argument, NULL, OPT_DB},
        {"fresh", no_argument, NULL, OPT_FRESH},
        {"ready-timeout", required_argument, NULL, OPT_READY},
        {"no-store", no_argument, NULL, OPT_NOSTORE},
        {"report", required_argument, NULL, OPT_REPORT},
        {"vary", required_argument, NULL, OPT_VARY},
        {"live", no_argument, NULL, OPT_LIVE},
        {"turns", required_argument, NULL, OPT_TURNS},
        {"send-reasoning", required_argument, NULL, OPT_SENDR},
        {"seeds", required_argument, NULL, OPT_SEEDS},
        {"turn-bytes", required_argument, NULL, OPT_TURNBYTES},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0},
    };
    const char *bad = NULL;
    long v;
    double dv;
    int c;

    o->timeout_ms = 300000;
    o->fail_under = 90;
    o->ready_ms = CLI_READY_DEFAULT;
    o->retries = 3;
    o->jobs = 4;
    o->max_tokens = 256;
    o->seed = 1;
    o->api_key = getenv("OPENAI_API_KEY");
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":j:q", lo, NULL)) != -1) {
        switch (c) {
        case 'q':
            o->quiet = true;
            break;
        case OPT_ENDPOINT:
            o->endpoint = optarg;
            break;
        case OPT_BASELINE:
            o->baseline = optarg;
            break;
        case OPT_MODEL:
            o->model = optarg;
            break;
        case OPT_API_KEY:
            o->api_key = optarg;
            break;
        case OPT_HEADER:
            if (!strchr(optarg, ':') || optarg[0] == ':')
                return cli_usage_error("probe",
                                       "invalid --header: expected 'Name: "
                                       "value'");
            if (o->n_headers >= 40)
                return cli_usage_error("probe", "too many --header options "
                                                "(at most 40)");
            o->headers[o->n_headers++] = optarg;
            break;
        case OPT_EXTRA:
            o->extra = optarg;
            break;
        case OPT_TIMEOUT:
            if (cli_parse_double(optarg, 0.1, 86400, &dv))
                return BAD("--timeout", "seconds between 0.1 and 86400");
            o->timeout_ms = lround(dv * 1000);
            break;
        case OPT_READY:
            if (cli_parse_ready_timeout(optarg, &o->ready_ms))
                return BAD("--ready-timeout", "seconds between 0.1 and 86400");
            break;
        case OPT_RETRIES:
            if (cli_parse_long(optarg, 0, 10, &o->retries))
                return BAD("--retries", "a whole number 0-10");
            break;
        case 'j':
            if (cli_parse_long(optarg, 1, 256, &o->jobs))
                return BAD("--jobs", "a whole number 1-256");
            break;
        case OPT_PROFILE:
            if ((v = probe_profile_parse(optarg)) < 0)
                return BAD("--profile", "one of quick, standard, full");
            o->g.profile = (enum probe_profile)v;
            break;
        case OPT_KINDS:
            if (parse_kinds(optarg, o, &bad))
                return BAD("--kinds",
                           "a comma list of needle, multi-needle, canary, "
                           "first-message, reasoning, tool, variables");
            break;
        case OPT_LENGTHS:
            if (parse_lengths(optarg, o))
                return BAD("--lengths", "a comma list of token counts such "
                                        "as 1k,4096,32k");
            break;
        case OPT_DEPTHS:
            if (parse_depths(optarg, o))
                return BAD("--depths", "a comma list of percentages 0-100");
            break;
        case OPT_MAXCTX:
            if (cli_parse_long(optarg, 1024, 16L << 20, &o->max_context))
                return BAD("--max-context", "a token count of at least 1024");
            break;
        case OPT_TEMP:
            if (parse_temps(optarg, o))
                return BAD("--temperature", "a comma list of numbers 0-2");
            if (add_vary(o, "temperature", optarg))
                return EXIT_USAGE;
            break;
        case OPT_VARY:
            if (add_vary(o, NULL, optarg))
                return EXIT_USAGE;
            break;
        case OPT_LIVE:
            o->live = true;
            break;
        case OPT_TURNS:
            if (cli_parse_long(optarg, 4, PROBE_LIVE_MAX_TURNS, &o->turns))
                return BAD("--turns", "a whole number 4-64");
            break;
        case OPT_SEEDS:
            if (cli_parse_long(optarg, 1, 1000, &o->seeds))
                return BAD("--seeds", "a whole number 1-1000");
            break;
        case OPT_TURNBYTES:
            if (cli_parse_long(optarg, 0, 16L << 20, &o->turn_bytes))
                return BAD("--turn-bytes", "a byte count 0-16777216");
            break;
        case OPT_SENDR:
            if (parse_sendr(optarg, o))
                return BAD("--send-reasoning",
                           "a comma list of keep, drop, keep-with-tools");
            break;
        case OPT_REPEATS:
            if (cli_parse_long(optarg, 1, 1000, &o->repeats))
                return BAD("--repeats", "a whole number 1-1000");
            break;
        case OPT_SEED:
            if (cli_parse_long(optarg, 0, 0x7fffffffL, &v))
                return BAD("--seed", "a whole number 0-2147483647");
            o->seed = (unsigned long long)v;
            break;
        case OPT_MAXTOK:
            if (cli_parse_long(optarg, 1, 1 << 20, &o->max_tokens))
                return BAD("--max-tokens", "a whole number of at least 1");
            o->max_tokens_given = true;
            break;
        case OPT_DRY:
            o->dry = true;
            break;
        case OPT_JSON:
            o->json = optarg;
            break;
        case OPT_JUNIT:
            o->junit = optarg;
            break;
        case OPT_FAILUNDER:
            if (cli_parse_double(optarg, 0, 100, &o->fail_under))
                return BAD("--fail-under", "a percentage 0-100");
            break;
        case OPT_DB:
            o->db = optarg;
            break;
        case OPT_FRESH:
            o->fresh = true;
            break;
        case OPT_NOSTORE:
            o->no_store = true;
            break;
        case OPT_REPORT:
            o->report = optarg;
            break;
        default:
            return cli_bad_option("probe", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("probe", "unexpected argument '%s'",
                               argv[optind]);
    if (!o->live && (o->turns || o->seeds || o->sendr_mask || o->turn_bytes))
        return cli_usage_error("probe", "--turns, --seeds, --send-reasoning "
                                        "and --turn-bytes need --live");
    if (o->live && (o->baseline || o->junit || o->quiet))
        return cli_usage_error("probe", "--baseline, --junit and --quiet are "
                                        "not available with --live");
    if (o->live && !o->max_tokens_given)
        o->max_tokens = 4096;
    if (!o->endpoint)
        return cli_usage_error("probe", "--endpoint URL is required");
    if (cli_check_base_url("probe", "--endpoint", o->endpoint) ||
        (o->baseline && cli_check_base_url("probe", "--baseline", o->baseline)))
        return EXIT_USAGE;
    if (strncmp(o->endpoint, "http://", 7) &&
        strncmp(o->endpoint, "https://", 8))
        return cli_usage_error("probe",
                               "invalid --endpoint '%s': expected an http:// "
                               "or https:// URL",
                               o->endpoint);
    if (o->baseline && strncmp(o->baseline, "http://", 7) &&
        strncmp(o->baseline, "https://", 8))
        return cli_usage_error("probe",
                               "invalid --baseline '%s': expected an http:// "
                               "or https:// URL",
                               o->baseline);
    return check_paths(o);
}

struct prog {
    bool tty;
    double t0; /* clock_now_s() at the start */
};

static void progress(void *ud, size_t done, size_t passed, size_t total)
{
    struct prog *p = ud;
    if (!p->tty)
        return;
    double el = clock_now_s() - p->t0,
           eta = done ? el / (double)done * (double)(total - done) : 0;
    fprintf(stderr, "\r%zu/%zu cases  pass %.0f%%  eta %ld:%02ld   ", done,
            total, done ? 100.0 * (double)passed / (double)done : 0.0,
            (long)eta / 60, (long)eta % 60);
    fflush(stderr);
}

/* Fingerprints e and finds out how to count its tokens. 0, or an exit
 * code after printing why. */
static int connect_ep(struct probe_endpoint *e, struct http_client *c, bool dry,
                      const char *what)
{
    struct diag d;
    int r = probe_endpoint_fingerprint(e, c, &d);
    if (r)
        return cli_error("probe", EXIT_UNREACHABLE, "%s: %s", what, d.msg);
    json_t *hello =
        json_pack("[{s:s, s:s}]", "role", "user", "content", "Hello there.");
    unsigned n;
    r = probe_tokenize(e, c, hello, NULL, 0, &n, &d);
    json_decref(hello);
    if (!r) {
        e->has_tokenize = true;
        r = probe_own_calibrate(e, c, &d);
        if (r && r != -ENOTSUP)
            return cli_error("probe", EXIT_UNREACHABLE, "%s: %s", what, d.msg);
        if (r)
            fprintf(stderr,
                    "fidelity probe: note: %s; the %s's cases are counted "
                    "whole through /tokenize, which a path that rewrites "
                    "requests rewrites too\n",
                    d.msg, what);
        if (probe_size_prepare(e, c, &d))
            return cli_error("probe", EXIT_UNREACHABLE, "%s: %s", what, d.msg);
        return 0;
    }
    if (r != -ENOTSUP)
        return cli_error("probe", EXIT_UNREACHABLE, "%s: %s", what, d.msg);
    fprintf(stderr,
            "fidelity probe: note: %s; sizing the %s's cases by calibration "
            "from usage.prompt_tokens (at most 5 requests)\n",
            d.msg, what);
    if (dry)
        return 0;
    r = probe_calibrate(e, c, &d);
    if (r)
        return cli_error("probe", EXIT_UNREACHABLE, "%s: %s", what, d.msg);
    if (e->cal_clip)
        fprintf(stderr,
                "fidelity probe: note: the %s's longer calibration samples "
                "came back short (%u tokens, about %u bytes of the message "
                "kept): the path clips long messages, or the server keeps "
                "no more; sizing by the samples under it\n",
                what, e->cal_clip_tokens, e->cal_clip);
    return 0;
}

static void print_plan(FILE *out, const struct opts *o,
                       const struct probe_cases *cs,
                       const struct probe_endpoint *ep,
                       const struct probe_endpoint *base)
{
    size_t per[PROBE_NKINDS] = {0}, n = cs->n;
    unsigned long long tokens = 0;
    unsigned L[32];
    size_t nl = 0;
    for (size_t i = 0; i < cs->n_cells; i++) {
        const struct probe_spec *s = &cs->cell[i].spec;
        per[s->kind] += cs->cell[i].count;
        tokens += (unsigned long long)s->target * cs->cell[i].count;
        size_t j = 0;
        while (j < nl && L[j] != s->length)
            j++;
        if (j == nl && nl < 32)
            L[nl++] = s->length;
    }
    unsigned ends = base ? 2 : 1;
    fprintf(out,
            "plan: %zu case%s x %u endpoint%s = %zu chat request%s, "
            "%llu prompt tokens in all\n  kinds:",
            n, plural_s(n), ends, plural_s(ends), n * ends, plural_s(n * ends),
            tokens * ends);
    for (int k = 0; k < PROBE_NKINDS; k++)
        if (per[k])
            fprintf(out, " %s %zu", probe_kind_name(k), per[k]);
    fprintf(out, "\n  lengths:");
    for (size_t j = 0; j < nl; j++)
        fprintf(out, " %u", L[j]);
    fprintf(out,
            "\n  model %s at %s (max_model_len %u), sizing by %s; "
            "max_tokens %ld, -j %ld, seed %llu\n",
            ep->model ? ep->model : "?", ep->url, ep->max_model_len,
            ep->has_tokenize ? "/tokenize" : "calibration", o->max_tokens,
            o->jobs, o->seed);
    if (base)
        fprintf(out, "  baseline %s at %s\n", base->model ? base->model : "?",
                base->url);
    fflush(out);
}

/* Sends the canary (canary.c) to e; 0 or an exit code after printing
 * why. */
static int canary(FILE *out, struct db *db, struct probe_endpoint *e,
                  struct http_client *c, const struct probe_cases *cs,
                  const char *what)
{
    struct diag d;
    unsigned longest = 0;
    for (size_t i = 0; i < cs->n_cells; i++)
        longest = cs->cell[i].spec.target > longest ? cs->cell[i].spec.target
                                                    : longest;
    /* the first canary's length for this server stays, so that the
     * canaries of runs with other grids can be compared */
    long pinned = db ? probe_store_canary_length(db, e->info_fp, &d) : 0;
    if (pinned < 0)
        return cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    if (pinned > 0)
        longest = (unsigned)pinned;
    if (probe_canary_run(e, c, longest, &d))
        return cli_error("probe", EXIT_UNREACHABLE, "%s: canary: %s", what,
                         d.msg);
    if (!e->canary_deterministic)
        fprintf(out,
                "note: the %s answered the canary (a fixed %u-token request "
                "at temperature 0) two ways: it is nondeterministic, and is "
                "fingerprinted by the canary's prompt token count alone\n",
                what, e->canary_length);
    return 0;
}

/* Says when the store holds results for e's URL, model and info from a
 * server that answered the canary otherwise, then records e's canary. */
static int canary_compare(FILE *out, struct db *db, struct probe_endpoint *e,
                          bool fresh, const char *what)
{
    struct probe_endpoint old;
    struct diag d;
    long n = 0;
    memset(&old, 0, sizeof(old));
    int r = probe_store_other_canary(db, e, &old, &n, &d);
    long mine = probe_store_results(db, e->fp, &d);
    if (r < 0 || mine < 0)
        return cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    if (r == 1 && !fresh && !mine) {
        fprintf(out,
                "note: stored results for the %s %s were for a different "
                "server (%ld results): the canary (a fixed %u-token request "
                "at temperature 0) gave %ld prompt tokens and \"%.60s\"%s, "
                "it now gives %ld and \"%.60s\"%s; they are not reused, the "
                "cases run again\n",
                what, e->url, n, e->canary_length, old.canary_prompt_tokens,
                old.canary_answer,
                old.canary_deterministic ? "" : " (nondeterministic)",
                e->canary_prompt_tokens, e->canary_answer,
                e->canary_deterministic ? "" : " (nondeterministic)");
        fflush(out);
    }
    if (probe_store_canary(db, e, &d))
        return cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    return 0;
}

static int dry_run(FILE *out, struct probe_endpoint *ep, struct http_client *c,
                   const struct probe_spec *s, unsigned max_tokens)
{
    struct probe_case pc;
    struct diag d;
    unsigned tok = 0;
    memset(&pc, 0, sizeof(pc));
    if (!ep->has_tokenize || probe_size_case(ep, c, s, &pc, &tok, NULL, &d))
        probe_case_build(&pc, s, probe_filler_for(s));
    fprintf(out,
            "\nfirst case: %s, length %u, depth %d, variant %s (%s "
            "tokens: %u; expected answer: %s%s)\n",
            probe_kind_name(s->kind), s->length, s->depth,
            probe_variant_name(s->kind, s->variant),
            tok ? "sized" : "estimated", tok ? tok : s->target, pc.expect,
            pc.control ? ", must NOT appear" : "");
    json_t *body = probe_chat_body(ep, &pc, max_tokens);
    json_dumpf(body, out, JSON_INDENT(2));
    fputc('\n', out);
    json_decref(body);
    probe_case_release(&pc);
    return EXIT_PASS;
}

static json_t *config_json(const struct opts *o, const struct probe_cases *cs)
{
    size_t n = cs->n;
    static const char *const prof[] = {"quick", "standard", "full"};
    json_t *c =
        json_pack("{s:s, s:I, s:i, s:i, s:i, s:i, s:b}", "profile",
                  prof[o->g.profile], "seed", (json_int_t)o->seed, "max_tokens",
                  (int)o->max_tokens, "jobs", (int)o->jobs, "timeout_ms",
                  (int)o->timeout_ms, "cases", (int)n, "fresh", o->fresh);
    json_t *k = json_array(), *t = json_array();
    for (int i = 0; i < PROBE_NKINDS; i++)
        for (size_t j = 0; j < cs->n_cells; j++)
            if ((int)cs->cell[j].spec.kind == i) {
                json_array_append_new(k, json_string(probe_kind_name(i)));
                break;
            }
    for (size_t i = 0; i < (o->g.temps ? o->g.n_temps : 1); i++)
        json_array_append_new(t, json_real(o->g.temps ? o->g.temps[i] : 0));
    json_t *L = json_array(), *D = json_array();
    for (size_t j = 0; j < cs->n_cells; j++) {
        const struct probe_spec *s = &cs->cell[j].spec;
        json_t *l = json_integer(s->length), *d = json_integer(s->depth);
        size_t i;
        json_t *x;
        bool hl = false, hd = false;
        json_array_foreach(L, i, x) hl |= json_equal(x, l);
        json_array_foreach(D, i, x) hd |= json_equal(x, d);
        if (!hl)
            json_array_append(L, l);
        if (!hd && s->depth >= 0)
            json_array_append(D, d);
        json_decref(l);
        json_decref(d);
    }
    json_object_set_new(c, "lengths", L);
    json_object_set_new(c, "depths", D);
    json_object_set_new(c, "kinds", k);
    json_object_set_new(c, "temperatures", t);
    json_object_set_new(c, "extra_body", json_boolean(o->extra != NULL));
    return c;
}

/* What probe_run keeps of the report: the whole document but the cases,
 * of which only the first failed ones per side stay, as many as the HTML
 * report shows (fidelity report draws the same page from it). The
 * document's parts are shared, not copied. */
static json_t *stored_summary(const json_t *j)
{
    json_t *sum = json_copy((json_t *)j);
    static const char *const sides[] = {"results", "baseline_results"};
    for (int s = 0; s < 2; s++) {
        json_t *side = json_object_get(j, sides[s]);
        json_t *cases = json_object_get(side, "case_results"), *keep;
        size_t i;
        json_t *c;
        if (!cases)
            continue;
        keep = json_array();
        json_array_foreach(cases, i, c)
        {
            const char *oc = json_string_value(json_object_get(c, "outcome"));
            if (json_is_true(json_object_get(c, "passed")) ||
                (oc && !strcmp(oc, "not-run")))
                continue;
            if (json_array_size(keep) >= REPORT_PROBE_EXAMPLES)
                break;
            json_array_append(keep, c);
        }
        json_t *side2 = json_copy(side);
        json_object_set_new(side2, "case_results", keep);
        json_object_set_new(sum, sides[s], side2);
    }
    return sum;
}

/* Every case one by one for --json and --junit: its spec from the grid,
 * its result from what the run kept (every case that did not pass, in
 * full, classified) or else from the run's spill file. */
struct case_src {
    const struct probe_cases *cs;
    const struct probe_kept *kept;
    int fd;
};

static void src_spec(void *ud, size_t i, struct probe_spec *s)
{
    const struct case_src *c = ud;
    probe_cases_at(c->cs, i, s);
}

static int src_result(void *ud, size_t i, int side, struct probe_result *r)
{
    const struct case_src *c = ud;
    const struct probe_kept *k = c->kept;
    size_t lo = 0, hi = k->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (k->idx[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct probe_result *kr = lo < k->n && k->idx[lo] == i
                                        ? (side ? &k->bres[lo] : &k->res[lo])
                                        : NULL;
    if (kr && probe_weight(kr) == 1) {
        *r = *kr;
        return 0;
    }
    return probe_spill_read(c->fd, i, side, r);
}

/* --json FILE (or "-"): the document with every case, streamed. */
struct json_out_args {
    const struct probe_report_in *in;
    json_t *j;
};

static int json_out_write(FILE *f, void *ud)
{
    struct json_out_args *a = ud;
    return probe_report_json_write(a->in, a->j, f);
}

static int json_out(const struct probe_report_in *in, json_t *j,
                    const char *path, struct diag *d)
{
    struct json_out_args a = {in, j};
    return cli_write_out(path, json_out_write, &a, d);
}

static int finish(const struct opts *o, FILE *out, struct probe_run *run,
                  struct probe_report_in *in, struct db *db)
{
    struct diag d;
    int code = EXIT_PASS;
    probe_report_text(in, out);
    json_t *j = probe_report_json(in);
    /* the JSON convention of every command (docs/schema/): the verdict
     * is the exit code's, INCONCLUSIVE when the run did not finish */
    struct probe_verdict pv;
    size_t finished = 0, total = in->cases ? in->cases : in->n;
    probe_verdict(in, o->fail_under, &pv);
    for (size_t i = 0; i < in->n; i++)
        finished += in->res[i].done ? probe_weight(&in->res[i]) : 0;
    json_object_set_new(j, "schema", json_string("fidelity.probe/1"));
    json_object_set_new(
        j, "verdict",
        json_string(run->interrupted || finished < total ? "INCONCLUSIVE"
                    : pv.worse || pv.below || pv.sizing  ? "FAIL"
                                                         : "PASS"));
    if (o->json && json_out(in, j, o->json, &d))
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    if (o->junit && probe_report_junit(in, o->junit, &d))
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    if (o->report &&
        cmd_report_hook("probe", o->report, o->argc, o->argv, j, NULL, NULL))
        code = EXIT_INTERNAL;
    json_t *sum = stored_summary(j);
    if (db && probe_store_run(db, in->ep->fp, in->base ? in->base->fp : NULL,
                              sum, NULL, &d))
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    json_decref(sum);
    json_decref(j);
    if (run->store_err)
        code = cli_error("probe", EXIT_INTERNAL, "%s", run->store_diag.msg);
    if (code)
        return code;
    double rate = 100 * probe_pass_rate(in->res, in->n);
    size_t done = 0, unreach = 0;
    for (size_t i = 0; i < in->n; i++)
        if (in->res[i].done) {
            done += probe_weight(&in->res[i]);
            if (in->res[i].outcome == PROBE_ERROR &&
                !strncmp(in->res[i].error, "cannot reach", 12))
                unreach += probe_weight(&in->res[i]);
        }
    fprintf(out,
            "\n%zu of %zu case%s finished (%zu from the store, %zu chat "
            "request%s sent), pass rate %.1f%%\n",
            done, total, plural_s(total), run->cached, run->sent,
            plural_s(run->sent), rate);
    if (done && unreach == done)
        return cli_error("probe", EXIT_UNREACHABLE,
                         "the endpoint stopped answering: %s",
                         in->res[0].error);
    /* nothing is judged on nothing: a pass rate over cases none of which
     * got a usable answer (every one HTTP 500, or unreadable) is the
     * endpoint's fault, never a verdict */
    size_t answered = 0, first_err = in->n;
    for (size_t i = 0; i < in->n; i++)
        if (in->res[i].done) {
            if (in->res[i].outcome != PROBE_ERROR)
                answered += probe_weight(&in->res[i]);
            if (in->res[i].outcome == PROBE_ERROR && first_err == in->n)
                first_err = i;
        }
    if (done && !answered && !run->interrupted)
        return cli_error("probe", EXIT_FAIL,
                         "no case could be judged: none of the %zu finished "
                         "case%s got a usable answer (the first: %s); the "
                         "endpoint's fault, not a pass rate",
                         done, plural_s(done),
                         first_err < in->n ? in->res[first_err].error : "?");
    if (run->interrupted) {
        fprintf(stderr,
                "fidelity probe: interrupted: %zu of %zu case%s "
                "finished and stored; run the same command again "
                "to finish\n",
                done, total, plural_s(total));
        return EXIT_INTERRUPTED;
    }
    struct probe_verdict v;
    probe_verdict(in, o->fail_under, &v);
    fprintf(o->quiet ? (o->json && !strcmp(o->json, "-") ? stderr : stdout)
                     : out,
            "%s\n", v.line);
    if (v.worse || v.below || v.sizing) {
        if (out != stderr) /* the report's last line says it in full */
            fprintf(stderr, "fidelity probe: a check failed:%s%s%s\n",
                    v.worse ? " significantly worse than the baseline;" : "",
                    v.below ? " pass rate below --fail-under;" : "",
                    v.sizing ? " sizing under 50% of target;" : "");
        return EXIT_FAIL;
    }
    return EXIT_PASS;
}

/* Classifies the cases that lost context across the run (lost.c) and
 * stores what changed. A store error here was already met by the run. */
static void restore_lost(struct db *db, const struct probe_endpoint *e,
                         const struct probe_spec *specs,
                         struct probe_result *res, size_t n)
{
    struct diag d;
    probe_lost_classify(specs, res, n, e->max_model_len);
    for (size_t i = 0; db && i < n; i++)
        if (res[i].done && !res[i].cached && res[i].lost)
            probe_store_put(db, e->fp, &specs[i], &res[i], &d);
}

static int run_live(const struct opts *o, struct probe_endpoint *ep,
                    const char *extra_key)
{
    struct probe_live_cmd lc = {
        .json = o->json,
        .db = o->db,
        .report = o->report,
        .argc = o->argc,
        .argv = o->argv,
        .no_store = o->no_store,
        .fresh = o->fresh,
        .dry = o->dry,
        .jobs = (unsigned)o->jobs,
        .max_tokens = (unsigned)o->max_tokens,
        .turns = o->turns ? (unsigned)o->turns : 12,
        .seeds = o->seeds ? (unsigned)o->seeds : 3,
        .sendr_mask = o->sendr_mask,
        .turn_bytes = o->turn_bytes ? (size_t)o->turn_bytes : 600,
        .seed = o->seed,
        .fail_under = o->fail_under,
        .vary = &o->vary,
        .stop = &stop_flag,
        .on_sigint = on_sigint,
    };
    return cmd_probe_live(&lc, ep, extra_key);
}

/* Scripted cases take --vary temperature=LIST as --temperature LIST (the
 * grid's repeats and keys); 0, or a usage error printed. */
static int temps_from_vary(struct opts *o)
{
    json_t *tv = probe_vary_take(&o->vary, "temperature"), *x;
    size_t i;
    int r = 0;
    if (!tv)
        return 0;
    o->g.n_temps = 0;
    json_array_foreach(tv, i, x)
    {
        double v = json_number_value(x);
        if (!json_is_number(x) || v < 0 || v > 2 || o->g.n_temps >= 16) {
            r = cli_usage_error("probe", "invalid --vary temperature: "
                                         "expected at most 16 numbers 0-2");
            break;
        }
        o->temps[o->g.n_temps++] = v;
    }
    o->g.temps = o->temps;
    json_decref(tv);
    return r;
}

static int run_probe(struct opts *o, struct probe_endpoint *ep,
                     struct probe_endpoint *base, char *extra_key)
{
    FILE *out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
    FILE *devnull = o->quiet ? fopen("/dev/null", "w") : NULL;
    if (devnull) /* --quiet: the verdict line alone, from finish() */
        out = devnull;
    struct http_client *c = http_client_new();
    struct probe_cases cs = {0};
    FILE *spill = NULL;
    struct diag d;
    struct db *db = NULL;
    struct probe_vary_cells vc = {0};
    int code =
        cli_ready("probe", "endpoint", ep->url, ep->headers, o->ready_ms);
    if (!code && base)
        code = cli_ready("probe", "baseline", base->url, base->headers,
                         o->ready_ms);
    if (!code)
        code = connect_ep(ep, c, o->dry, "endpoint");
    if (!code && base)
        code = connect_ep(base, c, o->dry, "baseline");
    if (code)
        goto out;
    if (o->live) {
        code = run_live(o, ep, extra_key);
        goto out;
    }
    o->g.seed = o->seed;
    o->g.max_tokens = (unsigned)o->max_tokens;
    o->g.repeats = (unsigned)o->repeats;
    o->g.model_len = ep->max_model_len;
    o->g.max_context = o->max_context      ? (unsigned)o->max_context
                       : ep->max_model_len ? ep->max_model_len
                                           : 131072;
    if (o->vary.n) /* each case once per --vary cell */
        probe_vary_cells_build(&o->vary, &vc);
    if (probe_cases_build(&o->g, &vc, &cs, &d)) {
        code = cli_usage_error("probe", "%s", d.msg);
        goto out;
    }
    print_plan(out, o, &cs, ep, base);
    if (o->dry) {
        struct probe_spec first;
        probe_cases_at(&cs, 0, &first);
        code = dry_run(out, ep, c, &first, (unsigned)o->max_tokens);
        goto out;
    }
    const char *path = o->db ? o->db : cli_default_db();
    /* SQLite's page cache (2 MB by default) would fill as the store
     * grows: the run's one lookup and one write per case, at keys spread
     * by a hash, gain nothing from it, and memory stays flat with the
     * number of cases without it */
    if (!o->no_store &&
        (store_open(path, &db, &d) || probe_store_init(db, &d) ||
         (db_backend(db) == DB_SQLITE &&
          store_exec(db, "PRAGMA cache_size=-256;", &d)))) {
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    code = canary(out, db, ep, c, &cs, "endpoint");
    if (!code && base)
        code = canary(out, db, base, c, &cs, "baseline");
    if (code)
        goto out;
    if (db && (probe_store_endpoint(db, ep, &d) ||
               (base && probe_store_endpoint(db, base, &d)))) {
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    code = db ? canary_compare(out, db, ep, o->fresh, "endpoint") : 0;
    if (!code && db && base)
        code = canary_compare(out, db, base, o->fresh, "baseline");
    if (code)
        goto out;
    struct prog pg = {.tty = cli_is_tty(2), .t0 = clock_now_s()};
    /* --json and --junit list every case: each result goes to a file as
     * it comes, read back one at a time when they are written */
    if ((o->json || o->junit) && !(spill = tmpfile())) {
        code = cli_error("probe", EXIT_INTERNAL,
                         "cannot make a temporary file: %s", strerror(errno));
        goto out;
    }
    struct probe_run run = {.ep = ep,
                            .base = base,
                            .cases = &cs,
                            .spill_fd = spill ? fileno(spill) : -1,
                            .jobs = (unsigned)o->jobs,
                            .max_tokens = (unsigned)o->max_tokens,
                            .extra_key = extra_key,
                            .fresh = o->fresh,
                            .tol = ep->has_tokenize ? 0.02 : 0.08,
                            .db = db,
                            .stop = &stop_flag,
                            .progress = progress,
                            .ud = &pg};
    signal(SIGINT, on_sigint);
    probe_run(&run);
    signal(SIGINT, cli_sigint_exit);
    struct probe_kept *kp = &run.kept;
    restore_lost(db, ep, kp->specs, kp->res, kp->n);
    if (base)
        restore_lost(db, base, kp->specs, kp->bres, kp->n);
    if (pg.tty)
        fputc('\n', stderr);
    json_t *cfg = config_json(o, &cs);
    struct probe_report_in in = {.ep = ep,
                                 .base = base,
                                 .specs = kp->specs,
                                 .res = kp->res,
                                 .bres = kp->bres,
                                 .n = kp->n,
                                 .cases = cs.n,
                                 .size_lo = {kp->size_lo[0], kp->size_lo[1]},
                                 .size_hi = {kp->size_hi[0], kp->size_hi[1]},
                                 .config = cfg,
                                 .interrupted = run.interrupted,
                                 .fail_under = o->fail_under};
    struct case_src src = {&cs, kp, run.spill_fd};
    if (spill) {
        in.spec_at = src_spec;
        in.result_at = src_result;
        in.ud = &src;
    }
    /* the document holds the cases the store keeps (and --report draws):
     * not one object per case; --json writes every case into it as it
     * goes (json_out) */
    in.max_cases = REPORT_PROBE_EXAMPLES;
    code = finish(o, out, &run, &in, db);
    json_decref(cfg);
    probe_kept_release(&run.kept);
out:
    if (devnull)
        fclose(devnull);
    if (spill)
        fclose(spill);
    store_close(db);
    probe_cases_release(&cs);
    probe_vary_cells_release(&vc);
    http_client_free(c);
    return code;
}

int cmd_probe(int argc, char **argv)
{
    struct opts o;
    memset(&o, 0, sizeof(o));
    /* Request bodies of long cases are megabytes: keep them on the heap
     * for reuse instead of a fresh mmap (and its page faults) each time. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    probe_vary_init(&o.vary);
    int code = parse_opts(argc, argv, &o);
    if (!code && !o.live)
        code = temps_from_vary(&o);
    if (code) {
        probe_vary_release(&o.vary);
        return code;
    }
    o.argc = argc;
    o.argv = argv;
    json_t *extra = NULL;
    char *extra_key = NULL, *auth = NULL;
    if (o.extra) {
        json_error_t je;
        extra = json_loads(o.extra, 0, &je);
        if (!json_is_object(extra)) {
            json_decref(extra);
            probe_vary_release(&o.vary);
            return cli_usage_error("probe",
                                   "invalid --extra-body: expected a JSON "
                                   "object (%s)",
                                   extra ? "got another JSON value" : je.text);
        }
        extra_key = json_dumps(extra, JSON_COMPACT | JSON_SORT_KEYS);
    }
    const char *hdrs[50];
    size_t nh = 0;
    if (o.api_key && *o.api_key) {
        auth = xasprintf("Authorization: Bearer %s", o.api_key);
        hdrs[nh++] = auth;
    }
    for (size_t i = 0; i < o.n_headers; i++)
        hdrs[nh++] = o.headers[i];
    hdrs[nh] = NULL;

    struct probe_endpoint ep, base;
    probe_endpoint_init(&ep, o.endpoint);
    if (o.baseline)
        probe_endpoint_init(&base, o.baseline);
    struct probe_endpoint *eps[2] = {&ep, o.baseline ? &base : NULL};
    for (int i = 0; i < 2; i++) {
        if (!eps[i])
            continue;
        eps[i]->headers = hdrs;
        eps[i]->extra_body = extra;
        eps[i]->timeout_ms = o.timeout_ms;
        eps[i]->retries = (unsigned)o.retries;
        if (o.model)
            eps[i]->model = xstrdup(o.model);
    }
    code = run_probe(&o, &ep, o.baseline ? &base : NULL, extra_key);
    probe_endpoint_release(&ep);
    if (o.baseline)
        probe_endpoint_release(&base);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    free(extra_key);
    json_decref(extra);
    probe_vary_release(&o.vary);
    return code;
}
