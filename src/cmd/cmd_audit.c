/*
 * cmd_audit: `fidelity audit`, the findings of src/audit/ over what
 * `fidelity record` stored: loads the store (and spill file), optionally
 * asks the server's /tokenize for exact prompt sizes, runs the rules, and
 * prints findings grouped by session, most severe first, or writes them as
 * JSON (docs/AUDIT.md).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "audit/audit.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "report/report.h"
#include "store/store.h"

const char CMD_AUDIT_HELP[] =
    "usage: fidelity audit [--db FILE] [--spill FILE] [--session ID]\n"
    "                      [--expect KEY=VALUE ...] [--profile FILE]\n"
    "                      [--reasoning-policy drop|keep|keep-with-tools]\n"
    "                      [--context-length N] [--tokenize-url URL]\n"
    "                      [--fail-on error|warn|never] [--json FILE]\n"
    "                      [--report FILE]\n"
    "\n"
    "Reads the exchanges 'fidelity record' stored and reports findings,\n"
    "each with a severity (info, warn, error), the session, the request id,\n"
    "the user turn and the evidence: history rewrites (compaction, pruning,\n"
    "echo errors, orphaned tool calls), sampling parameters sent, reasoning\n"
    "sent back, silent truncation, replies claiming a first message,\n"
    "degenerate replies, stream integrity and prefix-cache reuse.\n"
    "docs/AUDIT.md lists every\n"
    "rule, its thresholds and the JSON schema.\n"
    "\n"
    "  --db FILE            the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE         record's spill file (default DB.spill.jsonl when\n"
    "                       it exists): exchanges stored while the store "
    "failed\n"
    "  --session ID         only this session\n"
    "  --expect KEY=VALUE   a parameter every main request should carry;\n"
    "                       VALUE is JSON (0.6, true, {\"a\":1}) or a string,\n"
    "                       null means 'must not be sent'; KEY may be dotted\n"
    "                       (chat_template_kwargs.enable_thinking); "
    "repeatable\n"
    "  --profile FILE       model profiles: expected params, reasoning "
    "policy,\n"
    "                       context length per model glob (docs/AUDIT.md)\n"
    "  --reasoning-policy P drop, keep, or keep-with-tools (DeepSeek V3.2/V4:\n"
    "                       earlier reasoning dropped unless tools are sent)\n"
    "  --context-length N   the server's context length in tokens (default:\n"
    "                       max_model_len from --tokenize-url, else the\n"
    "                       profile's)\n"
    "  --tokenize-url URL   POST each request's messages to this /tokenize\n"
    "                       (vLLM, fidelity sim) for exact prompt sizes\n"
    "  --fail-on LEVEL      exit 1 when a finding is at LEVEL or above\n"
    "                       (default warn; never: always 0)\n"
    "  --json FILE          write the findings as JSON ('-': stdout)\n"
    "  --report FILE        self-contained HTML page: prompt tokens per turn\n"
    "                       with the findings marked (fidelity help report)\n"
    "prefix-cache reuse (when the server reports cached tokens):\n"
    "  --cache-min-shared N shared tokens for cache.refill (default 2048)\n"
    "  --cache-refill X     ... and share of them prefilled again (0.5)\n"
    "  --cache-unused-turns N  turns the previous reply goes unreused\n"
    "                       before cache.reply_not_reused (default 3)\n"
    "  --cache-drop X       cache.reuse_drop: reuse under X times the\n"
    "                       session median (0.5) ...\n"
    "  --cache-drop-run N   ... for N requests in a row (default 3)\n"
    "  --cache-idle SECONDS the server's idle eviction time: a longer gap\n"
    "                       excuses a miss (default 600)\n"
    "\n"
    "Exit status: 0 no finding at the --fail-on level, 1 findings at it,\n"
    "2 usage, bad input file or an empty store, 3 --tokenize-url unreachable, "
    "4 store error.\n"
    "\n"
    "examples:\n"
    "  fidelity audit --db run.db\n"
    "  fidelity audit --db run.db --expect temperature=0.6 --expect top_k=20\n"
    "  fidelity audit --db run.db --reasoning-policy keep-with-tools \\\n"
    "      --tokenize-url http://127.0.0.1:8000/tokenize --json audit.json\n";

struct audit_args {
    struct recorded_args rec; /* --db, --spill, --json */
    const char *session, *profile, *tokenize_url, *report;
    int argc;
    char **argv;
    int fail_on; /* enum audit_sev, or 3 for never */
    struct audit_opts o;
};

enum { O_CMIN = 1000, O_CREFILL, O_CTURNS, O_CDROP, O_CRUN, O_CIDLE };

/* The prefix-cache thresholds (src/audit/cache.c). */
static int cache_opt(struct audit_thresholds *th, int c, const char *v)
{
    double x;
    long n;
    switch (c) {
    case O_CMIN:
        return cli_parse_double(v, 1, 1e9, &th->cache_min_shared);
    case O_CREFILL:
        return cli_parse_double(v, 0, 1, &th->cache_refill_share);
    case O_CDROP:
        return cli_parse_double(v, 0, 1, &th->cache_drop_share);
    case O_CIDLE:
        if (cli_parse_double(v, 0, 1e9, &x))
            return -1;
        th->cache_idle_s = x;
        return 0;
    case O_CTURNS:
    case O_CRUN:
        if (cli_parse_long(v, 1, 1000, &n))
            return -1;
        *(c == O_CTURNS ? &th->cache_unused_turns : &th->cache_drop_run) = n;
        return 0;
    }
    return -1;
}

static int parse(int argc, char **argv, struct audit_args *a)
{
    static const struct option longopts[] = {
        RECORDED_LONGOPTS,
        {"session", required_argument, NULL, 's'},
        {"expect", required_argument, NULL, 'e'},
        {"profile", required_argument, NULL, 'p'},
        {"reasoning-policy", required_argument, NULL, 'r'},
        {"context-length", required_argument, NULL, 'c'},
        {"tokenize-url", required_argument, NULL, 't'},
        {"fail-on", required_argument, NULL, 'f'},
        {"report", required_argument, NULL, 'R'},
        {"cache-min-shared", required_argument, NULL, O_CMIN},
        {"cache-refill", required_argument, NULL, O_CREFILL},
        {"cache-unused-turns", required_argument, NULL, O_CTURNS},
        {"cache-drop", required_argument, NULL, O_CDROP},
        {"cache-drop-run", required_argument, NULL, O_CRUN},
        {"cache-idle", required_argument, NULL, O_CIDLE},
        {NULL, 0, NULL, 0},
    };
    struct diag d;
    enum audit_sev sev;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (recorded_take_opt(&a->rec, c, optarg))
            continue;
        switch (c) {
        case 's':
            a->session = optarg;
            break;
        case 'p':
            a->profile = optarg;
            break;
        case 't':
            a->tokenize_url = optarg;
            break;
        case 'R':
            a->report = optarg;
            break;
        case 'e':
            if (audit_expect_add(a->o.expect, optarg, &d))
                return cli_usage_error("audit", "--expect %s", d.msg);
            break;
        case 'r':
            if (audit_policy_parse(optarg, &a->o.policy))
                return cli_usage_error("audit",
                                       "--reasoning-policy '%s': use drop, "
                                       "keep or keep-with-tools",
                                       optarg);
            break;
        case 'c':
            if (cli_parse_long(optarg, 1, 1L << 40, &a->o.context_length))
                return cli_usage_error("audit",
                                       "--context-length '%s' is not a "
                                       "positive number of tokens",
                                       optarg);
            break;
        case 'f':
            if (!strcmp(optarg, "never"))
                a->fail_on = 3;
            else if (audit_sev_parse(optarg, &sev) || sev == AUDIT_INFO)
                return cli_usage_error("audit",
                                       "--fail-on '%s': use error, warn or "
                                       "never",
                                       optarg);
            else
                a->fail_on = (int)sev;
            break;
        case O_CMIN:
        case O_CREFILL:
        case O_CTURNS:
        case O_CDROP:
        case O_CRUN:
        case O_CIDLE:
            if (cache_opt(&a->o.th, c, optarg))
                return cli_usage_error("audit",
                                       "bad value '%s' for a --cache-* "
                                       "option (docs/AUDIT.md, thresholds)",
                                       optarg);
            break;
        default:
            return cli_bad_option("audit", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("audit", "unexpected argument '%s'",
                               argv[optind]);
    return 0;
}

static int load_profile(struct audit_args *a)
{
    json_error_t je;
    struct diag d;
    struct stat st;
    FILE *f = fopen(a->profile, "r");
    if (f && !fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) {
        fclose(f);
        f = NULL;
        errno = EISDIR;
    }
    if (!f)
        return cli_usage_error("audit", "cannot read profile '%s': %s",
                               a->profile, strerror(errno));
    json_t *doc = json_loadf(f, 0, &je);
    fclose(f);
    if (!doc)
        return cli_usage_error("audit", "--profile '%s': line %d: %s",
                               a->profile, je.line, je.text);
    int rc = audit_profile_check(doc, &d);
    json_decref(doc);
    if (rc)
        return cli_usage_error("audit", "--profile '%s': %s", a->profile,
                               d.msg);
    a->o.profile = doc;
    return 0;
}

/* Exact prompt sizes from the server: POST {"model","messages"} per
 * request; requests the server refuses keep the ratio estimate. */
static int tokenize_all(struct audit_args *a, const struct audit_set *set)
{
    struct http_client *hc = http_client_new();
    struct diag d;
    size_t total = 0, done = 0, refused = 0;
    bool tty = cli_is_tty(2);
    int rc = 0;
    a->o.tokenized = json_object();
    for (size_t i = 0; i < set->n; i++)
        total += set->s[i].n;
    for (size_t i = 0; i < set->n && !rc; i++)
        for (size_t j = 0; j < set->s[i].n && !rc; j++) {
            const struct xchg *x = set->s[i].x[j];
            json_t *out = NULL;
            long status = 0;
            if (tty)
                fprintf(stderr, "\rtokenize %zu/%zu", ++done, total);
            if (!x->req_msgs)
                continue;
            /* the set's messages are a view: the first req_msgs_n */
            json_t *msgs = json_array();
            for (size_t k = 0; k < x->req_msgs_n; k++)
                json_array_append(msgs, json_array_get(x->req_msgs, k));
            json_t *req =
                json_pack("{s:O, s:o}", "model",
                          json_object_get(x->req_body, "model") ?: json_null(),
                          "messages", msgs);
            int e = http_json(hc, a->tokenize_url, req, NULL, 30000, &status,
                              &out, &d);
            json_decref(req);
            json_t *count = json_object_get(out, "count");
            json_t *mml = json_object_get(out, "max_model_len");
            /* vLLM and sim report the context length with the count */
            if (!a->o.context_length && json_is_integer(mml) &&
                json_integer_value(mml) > 0)
                a->o.context_length = (long)json_integer_value(mml);
            if (e == -ECONNREFUSED || e == -ETIMEDOUT)
                rc = cli_error("audit", EXIT_UNREACHABLE, "--tokenize-url: %s",
                               d.msg);
            else if (status == 200 && json_is_integer(count)) {
                char key[32];
                snprintf(key, sizeof(key), "%lld", (long long)x->id);
                json_object_set(a->o.tokenized, key, count);
            } else {
                refused++;
            }
            json_decref(out);
        }
    if (tty)
        fputc('\n', stderr);
    if (refused && !rc)
        fprintf(stderr,
                "fidelity audit: %s gave no count for %zu request%s; "
                "%s the bytes-per-token estimate\n",
                a->tokenize_url, refused, plural_s(refused),
                plural(refused, "it uses", "those use"));
    http_client_free(hc);
    return rc;
}

static void print_evidence(json_t *ev)
{
    char *s =
        json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
    size_t n = s ? strlen(s) : 0;
    /* one or two lines of 100 columns, cut in the middle of longer ones */
    if (n > 200)
        printf("      evidence: %.*s ... %s\n", 150, s, s + n - 40);
    else
        printf("      evidence: %s\n", s ? s : "{}");
    free(s);
}

static void print_human(const struct audit_set *set, const struct audit_list *l)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct audit_session *s = &set->s[i];
        json_t *row = audit_session_json(s, l);
        int turns = (int)json_integer_value(json_object_get(row, "turns"));
        printf("session %s (%s, %zu exchange%s, %d turn%s)\n",
               *s->id ? s->id : "(none)",
               json_string_value(json_object_get(row, "harness")), s->n,
               plural_s(s->n), turns, plural_s(turns));
        json_decref(row);
        for (size_t k = 0; k < l->n; k++) {
            const struct audit_finding *f = &l->v[k];
            if (strcmp(f->session, s->id))
                continue;
            if (f->request)
                printf("  %-5s %s: request %lld turn %d: %s\n",
                       audit_sev_name(f->sev), f->rule, (long long)f->request,
                       f->turn, f->summary);
            else
                printf("  %-5s %s: %s\n", audit_sev_name(f->sev), f->rule,
                       f->summary);
            print_evidence(f->evidence);
        }
    }
    printf("%zu finding%s: %zu error, %zu warn, %zu info in %zu "
           "session%s\n",
           l->n, plural_s(l->n), audit_list_count(l, AUDIT_ERROR),
           audit_list_count(l, AUDIT_WARN) - audit_list_count(l, AUDIT_ERROR),
           l->n - audit_list_count(l, AUDIT_WARN), set->n, plural_s(set->n));
}

static json_t *thresholds_json(const struct audit_thresholds *t)
{
    return json_pack(
        "{s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:I, s:f, "
        "s:I, s:f, s:f}",
        "token_deficit", t->token_deficit, "token_deficit_min",
        t->token_deficit_min, "token_exact_min", t->token_exact_min,
        "pinned_run", (json_int_t)t->pinned_run, "flat_growth", t->flat_growth,
        "flat_tokens", t->flat_tokens, "gzip_ratio", t->gzip_ratio,
        "ngram_share", t->ngram_share, "degen_min_bytes",
        (json_int_t)t->degen_min_bytes, "reasoning_ratio", t->reasoning_ratio,
        "reasoning_min_bytes", (json_int_t)t->reasoning_min_bytes, "gap_ms",
        t->gap_ms, "added_ttfb_ms", t->added_ttfb_ms);
}

/* The thresholds as the JSON report gives them. */
static json_t *all_thresholds_json(const struct audit_thresholds *t)
{
    json_t *o = thresholds_json(t);
    json_object_update_new(
        o, json_pack(
               "{s:f, s:f, s:I, s:f, s:I, s:f}", "cache_min_shared",
               t->cache_min_shared, "cache_refill_share", t->cache_refill_share,
               "cache_unused_turns", (json_int_t)t->cache_unused_turns,
               "cache_drop_share", t->cache_drop_share, "cache_drop_run",
               (json_int_t)t->cache_drop_run, "cache_idle_s", t->cache_idle_s));
    return o;
}

static json_t *report_json(const struct audit_args *a,
                           const struct audit_set *set,
                           const struct audit_list *l)
{
    json_t *findings = json_array(), *sessions = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(findings, audit_finding_json(&l->v[i]));
    for (size_t i = 0; i < set->n; i++)
        json_array_append_new(sessions, audit_session_json(&set->s[i], l));
    char *db = store_shown(a->rec.db); /* a URL's password masked */
    json_t *j = json_pack(
        "{s:i, s:s, s:s?, s:{s:O, s:s, s:I, s:b}, s:o, s:{s:I, s:I, s:I}, "
        "s:o, s:o}",
        "version", 1, "db", db, "spill", a->rec.spill, "options", "expect",
        a->o.expect, "reasoning_policy", audit_policy_name(a->o.policy),
        "context_length", (json_int_t)a->o.context_length, "tokenize",
        a->tokenize_url != NULL, "thresholds", all_thresholds_json(&a->o.th),
        "counts", "error", (json_int_t)audit_list_count(l, AUDIT_ERROR), "warn",
        (json_int_t)(audit_list_count(l, AUDIT_WARN) -
                     audit_list_count(l, AUDIT_ERROR)),
        "info", (json_int_t)(l->n - audit_list_count(l, AUDIT_WARN)),
        "sessions", sessions, "findings", findings);
    free(db);
    return j;
}

static int run(struct audit_args *a)
{
    struct audit_set set;
    struct audit_list l;
    struct diag d;
    int rc;
    audit_set_init(&set);
    audit_list_init(&l);
    if ((rc = recorded_load("audit", &a->rec, a->session, &set)))
        goto out;
    /* an empty store is no clean run: a record that never bound, or one
     * pointed at another file, leaves exactly this */
    if (!set.n) {
        char *db = store_shown(a->rec.db);
        rc = cli_error("audit", EXIT_USAGE,
                       set.nbad ? "no exchange in '%s' could be read"
                                : "no exchanges in '%s': is record running "
                                  "and pointed at it?",
                       db);
        free(db);
        goto out;
    }
    if (a->tokenize_url && (rc = tokenize_all(a, &set)))
        goto out;
    audit_run(&set, &a->o, &l);
    const char **order = xcalloc(set.n + 1, sizeof(*order));
    for (size_t i = 0; i < set.n; i++)
        order[i] = set.s[i].id;
    audit_list_sort(&l, order, set.n);
    free(order);
    int verdict =
        a->fail_on < 3 && audit_list_count(&l, (enum audit_sev)a->fail_on) > 0
            ? EXIT_FAIL
            : EXIT_PASS;
    if (a->rec.json) {
        json_t *j = report_json(a, &set, &l);
        /* the JSON convention of every command (docs/schema/): the verdict
         * is the exit code's (--fail-on) */
        json_object_set_new(j, "schema", json_string("fidelity.audit/1"));
        json_object_set_new(j, "verdict",
                            json_string(!set.n    ? "INCONCLUSIVE"
                                        : verdict ? "FAIL"
                                                  : "PASS"));
        rc = cli_json_write(j, a->rec.json, &d);
        json_decref(j);
        if (rc) {
            rc = cli_error("audit", EXIT_INTERNAL, "%s", d.msg);
            goto out;
        }
    }
    if (a->report) {
        json_t *doc = report_audit_doc(&set, &l);
        rc = cmd_report_hook("audit", a->report, a->argc, a->argv, NULL, NULL,
                             doc);
        json_decref(doc);
        if (rc)
            goto out;
    }
    if (!a->rec.json || strcmp(a->rec.json, "-"))
        print_human(&set, &l);
    rc = verdict;
out:
    audit_list_release(&l);
    audit_set_release(&set);
    return rc;
}

int cmd_audit(int argc, char **argv)
{
    struct audit_args a = {.fail_on = AUDIT_WARN};
    int rc;
    recorded_args_init(&a.rec);
    audit_opts_init(&a.o);
    a.o.expect = json_object();
    a.argc = argc;
    a.argv = argv;
    rc = parse(argc, argv, &a);
    if (!rc)
        rc = cli_check_output("audit", "--json", a.rec.json);
    if (!rc)
        rc = cli_check_output("audit", "--report", a.report);
    if (!rc && a.profile)
        rc = load_profile(&a);
    if (!rc)
        rc = run(&a);
    json_decref(a.o.expect);
    json_decref(a.o.profile);
    json_decref(a.o.tokenized);
    return rc;
}
