/*
 * cmd_drift: `fidelity drift`, teacher-forced comparison of a candidate
 * server with a golden reference. Parses options into two struct
 * drift_side and a struct drift_opts, calls drift_run() (src/drift/),
 * prints the report, writes --json / --jsonl, saves the run in the store
 * and maps the outcome to an exit code.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/buf.h"
#include "core/hash.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "drift/cache_arm.h"
#include "drift/drift.h"
#include "drift/dstore.h"
#include "drift/render.h"
#include "drift/tape.h"
#include "store/store.h"

const char CMD_DRIFT_HELP[] =
    "usage: fidelity drift --golden URL --candidate URL [options]\n"
    "\n"
    "Sends the same token ids to a golden (reference) server and a\n"
    "candidate, reads both servers' next-token log-probabilities at every\n"
    "position (teacher forcing) and reports where they diverge: KL (a lower\n"
    "bound over the golden's top-k), forced-token deltas, top-1 agreement\n"
    "and decisive flips, by position bucket, with growth, a control arm\n"
    "(golden against itself), the decode path and determinism. The\n"
    "difference is attributed (prefill only, decode only, both paths flat\n"
    "or growing) and one figure ranks candidates: harm, the excess KL\n"
    "mean over both paths' positions.\n"
    "\n"
    "servers (api-key, header, extra-body, model and dialect also exist\n"
    "per side as --golden-X / --candidate-X):\n"
    "  --golden URL, --candidate URL   base URLs (http:// or https://)\n"
    "  --api-key KEY         Bearer token (--golden-api-key, ...)\n"
    "  --header 'N: V'       extra header, repeatable\n"
    "  --extra-body JSON     object merged into every request\n"
    "  --model NAME          model field of requests\n"
    "  --dialect D           auto (default), vllm, echo, sglang, tgi\n"
    "  --timeout SECONDS     per request (default 600)\n"
    "  --ready-timeout SEC   wait for the first answer of each server\n"
    "                        (GET /v1/models) before any long request\n"
    "                        (default 30); given, a refused connection is\n"
    "                        tried again until then (a server starting)\n"
    "saved golden (docs/DRIFT.md, \"Saved goldens\"):\n"
    "  --save-golden FILE    with --golden only: ask the golden everything a\n"
    "                        comparison asks and keep its answers in FILE\n"
    "  --golden-file FILE    with --candidate: compare against FILE's answers\n"
    "                        (no golden server needed); options that shape\n"
    "                        the requests come from the file; the decode\n"
    "                        path scores the golden's saved output\n"
    "corpus:\n"
    "  --corpus FILE         JSONL: {\"messages\": [...]} or token-id lists\n"
    "  --sequences N         built-in conversations (default 4)\n"
    "  --max-context N       tokens per sequence (default 4096)\n"
    "  --seed N              built-in corpus and bootstrap seed (default 1)\n"
    "  --from-db             sessions recorded by 'fidelity record' in the\n"
    "                        store (--db): one conversation per session\n"
    "  --session KEY         with --from-db: only that session\n"
    "analysis:\n"
    "  --top-k K             top logprobs per position, 1-64 (default 20)\n"
    "  --boundaries LIST     extra bucket edges, e.g. 2048,8192\n"
    "  --min-bucket N        first power-of-two edge (default 64)\n"
    "  --no-control          skip golden pass 2 (control arm)\n"
    "  --no-self             skip candidate pass 2 (its own noise)\n"
    "  --decode-tokens N     decode-path tokens per sequence (default 32; 0\n"
    "                        skips the decode path)\n"
    "  --decode-seqs N       sequences for the decode path (default 2)\n"
    "  --decode-prompt N     a prompt length for it (default 512); it also\n"
    "                        runs inside the first failing prefill bucket\n"
    "  --determinism N       N identical requests alone, then at once\n"
    "  --token-ids-logprob N sglang candidates: also ask for the golden's\n"
    "                        N highest-ranked token ids (token_ids_logprob)\n"
    "  --bootstrap N         growth bootstrap replicates (default 200)\n"
    "  --jobs N              threads parsing and comparing answers (default:\n"
    "                        the CPUs); each server gets one request at a\n"
    "                        time, in order (golden and candidate at once),\n"
    "                        and results are the same for any N\n"
    "  --worst N             worst positions listed (default 50)\n"
    "cache arm (the same final request cold and warm, on the candidate):\n"
    "  --cache-arm N         exactly N conversations (default: 4 to 16, one\n"
    "                        after another until the comparison decides)\n"
    "  --no-cache-arm        skip it\n"
    "  --cache-evict         also after traffic that evicts it, sized from\n"
    "                        the server's reported cache capacity\n"
    "thresholds (WARN,FAIL on the excess over the noise baseline):\n"
    "  --kl-mean W,F (1e-4,1e-3)    --kl-p999 W,F (1e-3,1e-2)\n"
    "  --top1 W,F (0.995,0.975)     --dp-rms W,F (0.003,0.012)\n"
    "  --growth W,F (0.585,1)       slope of ln(excess KL) on ln(position)\n"
    "                               past the first quarter of the positions\n"
    "                               (excess x1.5 / x2 per doubling)\n"
    "  --growth-floor X (1e-5)      excess below it counts as it, for growth\n"
    "  --flip-margin X (0.2)\n"
    "output:\n"
    "  --quiet, -q           print only the verdict (and errors)\n"
    "  --json FILE           summary (schema in docs/DRIFT.md); - = stdout\n"
    "  --jsonl FILE          one record per compared position\n"
    "  --report FILE         self-contained HTML page (see 'fidelity help "
    "report')\n" CLI_STORE_HELP "\n"
    "exit status: 0 PASS, WARN or INCONCLUSIVE (the evidence could not\n"
    "decide; the report says how much more would), 1 FAIL (also:\n"
    "tokenizers differ, a server answered wrongly), 2 usage or bad\n"
    "corpus, 3 unreachable, 4 store or I/O error, 130 interrupted.\n"
    "\n"
    "examples:\n"
    "  fidelity drift --golden http://ref:8000 --candidate http://new:8000\n"
    "  fidelity drift --golden http://a:30000 --candidate http://b:30000 \\\n"
    "      --max-context 16384 --boundaries 2048,8192 --json drift.json\n"
    "  fidelity drift --golden URL --candidate URL --corpus convs.jsonl \\\n"
    "      --determinism 8 --jsonl positions.jsonl\n";

enum {
    O_GOLDEN = 256,
    O_CAND,
    O_API_KEY,
    O_G_API_KEY,
    O_C_API_KEY,
    O_HEADER,
    O_G_HEADER,
    O_C_HEADER,
    O_EXTRA,
    O_G_EXTRA,
    O_C_EXTRA,
    O_MODEL,
    O_G_MODEL,
    O_C_MODEL,
    O_DIALECT,
    O_G_DIALECT,
    O_C_DIALECT,
    O_TIMEOUT,
    O_CORPUS,
    O_SEQS,
    O_MAXCTX,
    O_SEED,
    O_FROMDB,
    O_SESSION,
    O_TOPK,
    O_BOUND,
    O_MINB,
    O_NOCTRL,
    O_NOSELF,
    O_DTOK,
    O_DSEQ,
    O_DPROMPT,
    O_DET,
    O_BOOT,
    O_JOBS,
    O_WORST,
    O_TIDS,
    O_KLM,
    O_KLP,
    O_TOP1,
    O_DPR,
    O_GROW,
    O_GFLOOR,
    O_FLIP,
    O_JSON,
    O_JSONL,
    O_DB,
    O_NOSTORE,
    O_READY,
    O_REPORT,
    O_CACHE_ARM,
    O_NO_CACHE_ARM,
    O_CACHE_EVICT,
    O_SAVE_GOLDEN,
    O_GOLDEN_FILE,
    O_QUIET = 'q'
};

static const struct option longopts[] = {
    {"golden", required_argument, NULL, O_GOLDEN},
    {"candidate", required_argument, NULL, O_CAND},
    {"api-key", required_argument, NULL, O_API_KEY},
    {"golden-api-key", required_argument, NULL, O_G_API_KEY},
    {"candidate-api-key", required_argument, NULL, O_C_API_KEY},
    {"header", required_argument, NULL, O_HEADER},
    {"golden-header", required_argument, NULL, O_G_HEADER},
    {"candidate-header", required_argument, NULL, O_C_HEADER},
    {"extra-body", required_argument, NULL, O_EXTRA},
    {"golden-extra-body", required_argument, NULL, O_G_EXTRA},
    {"candidate-extra-body", required_argument, NULL, O_C_EXTRA},
    {"model", required_argument, NULL, O_MODEL},
    {"golden-model", required_argument, NULL, O_G_MODEL},
    {"candidate-model", required_argument, NULL, O_C_MODEL},
    {"dialect", required_argument, NULL, O_DIALECT},
    {"golden-dialect", required_argument, NULL, O_G_DIALECT},
    {"candidate-dialect", required_argument, NULL, O_C_DIALECT},
    {"timeout", required_argument, NULL, O_TIMEOUT},
    {"corpus", required_argument, NULL, O_CORPUS},
    {"sequences", required_argument, NULL, O_SEQS},
    {"max-context", required_argument, NULL, O_MAXCTX},
    {"seed", required_argument, NULL, O_SEED},
    {"from-db", no_argument, NULL, O_FROMDB},
    {"session", required_argument, NULL, O_SESSION},
    {"top-k", required_argument, NULL, O_TOPK},
    {"boundaries", required_argument, NULL, O_BOUND},
    {"min-bucket", required_argument, NULL, O_MINB},
    {"no-control", no_argument, NULL, O_NOCTRL},
    {"no-self", no_argument, NULL, O_NOSELF},
    {"decode-tokens", required_argument, NULL, O_DTOK},
    {"decode-seqs", required_argument, NULL, O_DSEQ},
    {"decode-prompt", required_argument, NULL, O_DPROMPT},
    {"determinism", required_argument, NULL, O_DET},
    {"bootstrap", required_argument, NULL, O_BOOT},
    {"jobs", required_argument, NULL, O_JOBS},
    {"worst", required_argument, NULL, O_WORST},
    {"token-ids-logprob", required_argument, NULL, O_TIDS},
    {"kl-mean", required_argument, NULL, O_KLM},
    {"kl-p999", required_argument, NULL, O_KLP},
    {"top1", required_argument, NULL, O_TOP1},
    {"dp-rms", required_argument, NULL, O_DPR},
    {"growth", required_argument, NULL, O_GROW},
    {"growth-floor", required_argument, NULL, O_GFLOOR},
    {"flip-margin", required_argument, NULL, O_FLIP},
    {"json", required_argument, NULL, O_JSON},
    {"jsonl", required_argument, NULL, O_JSONL},
    {"db", required_argument, NULL, O_DB},
    {"no-store", no_argument, NULL, O_NOSTORE},
    {"ready-timeout", required_argument, NULL, O_READY},
    {"report", required_argument, NULL, O_REPORT},
    {"cache-arm", required_argument, NULL, O_CACHE_ARM},
    {"no-cache-arm", no_argument, NULL, O_NO_CACHE_ARM},
    {"cache-evict", no_argument, NULL, O_CACHE_EVICT},
    {"save-golden", required_argument, NULL, O_SAVE_GOLDEN},
    {"golden-file", required_argument, NULL, O_GOLDEN_FILE},
    {"quiet", no_argument, NULL, O_QUIET},
    {NULL, 0, NULL, 0},
};

struct ctx {
    struct drift_side g, c;
    struct drift_opts o;
    struct drift_cache_opts cache; /* the cache arm (cache_arm.h) */
    bool cache_n_given;
    struct drift_cache_result cres;
    const char *json_path, *jsonl_path, *db_path, *report_path;
    int argc;
    char **argv;
    bool no_store, from_db, quiet;
    long ready_ms;
    FILE *jsonl;
    struct buf line;
    bool tty;
    int jsonl_err;
    /* a saved golden: recorded into save_path, or read from golden_file */
    const char *save_path, *golden_file;
    struct drift_tape *tape;
    uint64_t given; /* bit (code - O_GOLDEN) of each option given */
};

static void on_rec(void *ud, const struct drift_rec *r)
{
    struct ctx *x = ud;
    if (!x->jsonl)
        return;
    buf_reset(&x->line);
    drift_report_rec(r, &x->line);
    buf_addch(&x->line, '\n');
    if (fwrite(x->line.data, 1, x->line.len, x->jsonl) != x->line.len)
        x->jsonl_err = errno ? errno : EIO;
}

static void on_progress(void *ud, const char *what, size_t done, size_t total)
{
    struct ctx *x = ud;
    if (x->tty)
        fprintf(stderr, "\rdrift: %s %zu/%zu   ", what, done + 1, total);
}

static int set_pair(const char *s, double lo, double hi, double out[2])
{
    char tmp[128];
    snprintf(tmp, sizeof(tmp), "%s", s);
    char *comma = strchr(tmp, ',');
    if (!comma)
        return -EINVAL;
    *comma = '\0';
    if (cli_parse_double(tmp, lo, hi, &out[0]) ||
        cli_parse_double(comma + 1, lo, hi, &out[1]))
        return -EINVAL;
    return 0;
}

static int set_extra(struct drift_side *s, const char *v, struct diag *d)
{
    json_error_t e;
    json_t *j = json_loads(v, 0, &e);
    if (!json_is_object(j)) {
        json_decref(j);
        return diag_set(d, EINVAL,
                        "--extra-body '%s' is not a JSON object (%s)", v,
                        j ? "not an object" : e.text);
    }
    json_decref(s->extra_body);
    s->extra_body = j;
    return 0;
}

static int set_boundaries(struct drift_opts *o, const char *v)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", v);
    o->n_boundaries = 0;
    for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
        long x;
        if (cli_parse_long(t, 2, 1L << 30, &x) ||
            o->n_boundaries >= DRIFT_BOUNDARIES_MAX)
            return -EINVAL;
        o->boundaries[o->n_boundaries++] = (uint32_t)x;
    }
    return o->n_boundaries ? 0 : -EINVAL;
}

#define BAD(fmt, ...) cli_usage_error("drift", fmt, __VA_ARGS__)

/* Options that set something on one side or both. */
static int side_opt(struct ctx *x, int c, const char *v)
{
    struct drift_side *both[2] = {&x->g, &x->c};
    struct diag d = {{0}};
    int base = c, lo = 0, hi = 2;
    enum drift_dialect dl;
    long n;

    if (c == O_G_API_KEY || c == O_G_HEADER || c == O_G_EXTRA ||
        c == O_G_MODEL || c == O_G_DIALECT)
        base = c - 1, hi = 1;
    else if (c == O_C_API_KEY || c == O_C_HEADER || c == O_C_EXTRA ||
             c == O_C_MODEL || c == O_C_DIALECT)
        base = c - 2, lo = 1;
    for (int i = lo; i < hi; i++) {
        struct drift_side *s = both[i];
        switch (base) {
        case O_API_KEY:
            free(s->api_key);
            s->api_key = xstrdup(v);
            break;
        case O_HEADER:
            if (drift_side_add_header(s, v, &d))
                return BAD("%s", d.msg);
            break;
        case O_EXTRA:
            if (set_extra(s, v, &d))
                return BAD("%s", d.msg);
            break;
        case O_MODEL:
            free(s->model);
            s->model = xstrdup(v);
            break;
        case O_DIALECT:
            if (drift_dialect_parse(v, &dl))
                return BAD("dialect '%s' is not one of auto, vllm, echo, "
                           "sglang, tgi",
                           v);
            s->dialect = dl;
            break;
        case O_TIMEOUT:
            if (cli_parse_long(v, 1, 86400, &n))
                return BAD("--timeout '%s' must be 1-86400 seconds", v);
            s->timeout_ms = n * 1000;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

static const char *opt_name(int c)
{
    for (const struct option *o = longopts; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

static int num_opt(struct ctx *x, int c, const char *v)
{
    struct drift_opts *o = &x->o;
    struct drift_thresholds *th = &o->th;
    long n;
    int bad = 0;
    switch (c) {
#define LONGOPT(code, lo, hi, dst)                                             \
    case code:                                                                 \
        bad = cli_parse_long(v, lo, hi, &n);                                   \
        if (!bad)                                                              \
            dst = (__typeof__(dst))n; /* in [lo, hi], checked */               \
        break;
        LONGOPT(O_SEQS, 0, 100000, o->sequences)
        LONGOPT(O_MAXCTX, 2, 1L << 30, o->max_context)
        LONGOPT(O_MINB, 2, 1L << 30, o->min_bucket)
        LONGOPT(O_DTOK, 0, 512, o->decode_tokens)
        LONGOPT(O_DSEQ, 1, 100000, o->decode_seqs)
        LONGOPT(O_DPROMPT, 1, 1L << 30, o->decode_prompt)
        LONGOPT(O_DET, 2, 64, o->determinism)
        LONGOPT(O_BOOT, 0, 100000, o->bootstrap)
        LONGOPT(O_JOBS, 1, 64, o->jobs)
        LONGOPT(O_WORST, 0, DRIFT_WORST_MAX, o->worst)
        LONGOPT(O_TIDS, 0, 1024, o->token_ids)
#undef LONGOPT
    case O_SEED:
        bad = cli_parse_long(v, 0, LONG_MAX, &n);
        o->seed = (uint64_t)n;
        break;
    case O_TOPK:
        bad = cli_parse_long(v, 1, DRIFT_TOPK_MAX, &n);
        x->g.top_k = x->c.top_k = (unsigned)n;
        break;
    case O_BOUND:
        bad = set_boundaries(o, v);
        break;
    case O_KLM:
        bad = set_pair(v, 0, 1e3, th->kl_mean);
        break;
    case O_KLP:
        bad = set_pair(v, 0, 1e3, th->kl_p999);
        break;
    case O_TOP1:
        bad = set_pair(v, 0, 1, th->top1);
        break;
    case O_DPR:
        bad = set_pair(v, 0, 1, th->dp_rms);
        break;
    case O_GROW:
        bad = set_pair(v, 0, 1e3, th->growth);
        break;
    case O_GFLOOR:
        bad = cli_parse_double(v, 0, 1e3, &th->growth_floor);
        break;
    case O_FLIP:
        bad = cli_parse_double(v, 0, 1, &th->flip_margin);
        break;
    default:
        return -1;
    }
    if (bad)
        return BAD("bad value '%s' for '--%s'", v, opt_name(c));
    return 0;
}

static int cache_opt(struct ctx *x, int c, const char *v)
{
    long n;
    if (c == O_NO_CACHE_ARM)
        x->cache.convs = 0;
    else if (c == O_CACHE_EVICT)
        x->cache.evict = true;
    else if (cli_parse_long(v, 0, 1000, &n))
        return -1;
    else
        x->cache.convs = (unsigned)n, x->cache_n_given = true;
    return 0;
}

static int exit_for(int err)
{
    switch (err) {
    case -ECONNREFUSED:
    case -ETIMEDOUT:
        return EXIT_UNREACHABLE;
    case -EINVAL:
    case -ENODATA:
    case -ENOENT:
    case -ENOTSUP:
    case -EACCES:
        return EXIT_USAGE;
    case -EILSEQ:
    case -EPROTO:
    case -EBADMSG:
        return EXIT_FAIL;
    default:
        return EXIT_INTERNAL;
    }
}

/* ---- saved goldens ---- */

/* The fixed text whose token ids identify a tokenizer. */
#define TOKENIZER_PROBE                                                        \
    "The quick brown fox jumps over the lazy dog: 0123456789, naive cafe, "    \
    "\u00e9t\u00e9, \u65e5\u672c\u8a9e, <|im_start|> {\"key\": [1, 2.5]}"

/* The corpus a run asks about: "built-in", "from-db" or "file:" and the
 * XXH64 of the file's bytes. Fresh; NULL when the file cannot be read. */
static char *corpus_id(const struct ctx *x)
{
    if (x->from_db)
        return xstrdup("from-db");
    if (!x->o.corpus_file)
        return xstrdup("built-in");
    FILE *f = fopen(x->o.corpus_file, "rb");
    if (!f)
        return NULL;
    struct buf b = BUF_INIT;
    char chunk[1 << 15];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_add(&b, chunk, n);
    fclose(f);
    char *id =
        xasprintf("file:%016llx",
                  (unsigned long long)hash64(b.data ? b.data : "", b.len, 0));
    buf_release(&b);
    return id;
}

/* What shapes the requests drift makes of the golden: a saved golden keeps
 * these, and a comparison against it takes them from the file. Each with
 * the options that set it (their bits in ctx.given). */
static const struct shaping {
    const char *key;
    int code, code2;
} shaping[] = {
    {"sequences", O_SEQS, 0},
    {"max-context", O_MAXCTX, 0},
    {"seed", O_SEED, 0},
    {"top-k", O_TOPK, 0},
    {"control", O_NOCTRL, 0},
    {"decode-tokens", O_DTOK, 0},
    {"decode-seqs", O_DSEQ, 0},
    {"decode-prompt", O_DPROMPT, 0},
    {"determinism", O_DET, 0},
    {"token-ids-logprob", O_TIDS, 0},
    {"cache-arm", O_CACHE_ARM, O_NO_CACHE_ARM},
    {"cache-evict", O_CACHE_EVICT, 0},
    {"corpus", O_CORPUS, O_FROMDB},
};

/* The value of one shaping key in this run, as text. Fresh. */
static char *shaping_get(const struct ctx *x, const char *key)
{
    const struct drift_opts *o = &x->o;
    if (!strcmp(key, "sequences"))
        return xasprintf("%u", o->sequences);
    if (!strcmp(key, "max-context"))
        return xasprintf("%u", o->max_context);
    if (!strcmp(key, "seed"))
        return xasprintf("%llu", (unsigned long long)o->seed);
    if (!strcmp(key, "top-k"))
        return xasprintf("%u", x->g.top_k);
    if (!strcmp(key, "control"))
        return xstrdup(o->control ? "yes" : "no");
    if (!strcmp(key, "decode-tokens"))
        return xasprintf("%u", o->decode_tokens);
    if (!strcmp(key, "decode-seqs"))
        return xasprintf("%u", o->decode_seqs);
    if (!strcmp(key, "decode-prompt"))
        return xasprintf("%u", o->decode_prompt);
    if (!strcmp(key, "determinism"))
        return xasprintf("%u", o->determinism);
    if (!strcmp(key, "token-ids-logprob"))
        return xasprintf("%u", o->token_ids);
    if (!strcmp(key, "cache-arm"))
        return !x->cache.convs    ? xstrdup("off")
               : x->cache_n_given ? xasprintf("%u", x->cache.convs)
                                  : xstrdup("auto");
    if (!strcmp(key, "cache-evict"))
        return xstrdup(x->cache.evict ? "yes" : "no");
    if (!strcmp(key, "corpus"))
        return corpus_id(x);
    return NULL;
}

/* Sets one shaping key from the file's text; -1 when it cannot be. */
static int shaping_set(struct ctx *x, const char *key, const char *v)
{
    struct drift_opts *o = &x->o;
    long n;
    if (!strcmp(key, "control"))
        return o->control = !strcmp(v, "yes"), 0;
    if (!strcmp(key, "cache-evict"))
        return x->cache.evict = !strcmp(v, "yes"), 0;
    if (!strcmp(key, "cache-arm")) {
        if (!strcmp(v, "off"))
            x->cache.convs = 0;
        else if (strcmp(v, "auto"))
            return cache_opt(x, O_CACHE_ARM, v);
        return 0;
    }
    if (!strcmp(key, "corpus"))
        return 0; /* the same corpus is checked, never set */
    if (!strcmp(key, "determinism") && !strcmp(v, "0"))
        return o->determinism = 0, 0;
    if (cli_parse_long(v, 0, LONG_MAX, &n))
        return -1;
    for (size_t i = 0; i < sizeof(shaping) / sizeof(*shaping); i++)
        if (!strcmp(shaping[i].key, key))
            return num_opt(x, shaping[i].code, v) ? -1 : 0;
    return -1;
}

static bool was_given(const struct ctx *x, int code)
{
    return code && (x->given >> (code - O_GOLDEN)) & 1;
}

/* --save-golden and --golden-file: what they need and exclude; for a
 * comparison against a file, the file is read and checked here, before
 * any request, and the run takes the golden's URL, model and the shaping
 * options from it (one given on the command line that contradicts the
 * file's is refused, with the file's value). */
static int saved_golden_opts(struct ctx *x)
{
    struct diag d = {{0}};
    if (x->save_path && x->golden_file)
        return BAD("%s", "--save-golden and --golden-file are exclusive: "
                         "save with one run, compare with another");
    if (x->save_path) {
        if (!x->g.url)
            return BAD("%s", "--save-golden needs --golden URL (the server "
                             "whose answers it keeps)");
        if (x->c.url)
            return BAD("%s", "--save-golden runs the golden only: drop "
                             "--candidate, and compare later with "
                             "--golden-file FILE --candidate URL");
        /* the golden answers the candidate's questions too: one code path,
         * and the saving run is a comparison of the golden with itself; its
         * decode path saves the golden's generations and its scoring of
         * them, which a comparison against the file scores on the
         * candidate (decode.c, one_seq_saved) */
        drift_side_release(&x->c);
        drift_side_clone(&x->c, &x->g);
        x->c.label = "candidate";
        x->no_store = true;
        return 0;
    }
    if (x->g.url)
        return BAD("--golden-file '%s' takes the place of --golden: drop "
                   "--golden",
                   x->golden_file);
    if (!x->c.url)
        return BAD("%s", "--golden-file needs --candidate URL");
    x->tape = drift_tape_load(x->golden_file, &d);
    if (!x->tape)
        return cli_error("drift", EXIT_USAGE, "--golden-file: %s", d.msg);
    json_t *h = drift_tape_header(x->tape);
    json_t *gold = json_object_get(h, "golden");
    json_t *opts = json_object_get(h, "options");
    const char *url = json_string_value(json_object_get(gold, "url"));
    const char *model = json_string_value(json_object_get(gold, "model"));
    if (!url || !json_is_object(opts))
        return cli_error("drift", EXIT_USAGE,
                         "--golden-file '%s' names no golden URL or options: "
                         "save the golden again",
                         x->golden_file);
    free(x->g.url);
    x->g.url = xstrdup(url);
    free(x->g.model);
    x->g.model = model ? xstrdup(model) : NULL;
    json_t *eb = json_object_get(gold, "extra_body");
    json_decref(x->g.extra_body);
    x->g.extra_body = json_is_object(eb) ? json_deep_copy(eb) : NULL;
    for (size_t i = 0; i < sizeof(shaping) / sizeof(*shaping); i++) {
        const struct shaping *k = &shaping[i];
        const char *want = json_string_value(json_object_get(opts, k->key));
        if (!want)
            continue;
        char *have = shaping_get(x, k->key);
        bool differs = !have || strcmp(have, want);
        if (differs && (was_given(x, k->code) || was_given(x, k->code2) ||
                        !strcmp(k->key, "corpus"))) {
            int rc = BAD("%s '%s' contradicts the saved golden '%s', made "
                         "with %s '%s': drop the option (the file's value is "
                         "used) or save a new golden",
                         k->key, have ? have : "(unreadable)", x->golden_file,
                         k->key, want);
            free(have);
            return rc;
        }
        free(have);
        if (differs && shaping_set(x, k->key, want))
            return BAD("--golden-file '%s': bad value '%s' for %s: save the "
                       "golden again",
                       x->golden_file, want, k->key);
    }
    x->g.tape = x->tape;
    return 0;
}

/* The header of a saved golden: the golden's masked URL, model and extra
 * body (never its key or headers), its fingerprint, the tokenizer's answer
 * on a fixed text, and the shaping options. */
static json_t *saved_header(struct ctx *x, const uint32_t *ids, size_t n)
{
    json_t *opts = json_object();
    for (size_t i = 0; i < sizeof(shaping) / sizeof(*shaping); i++) {
        char *v = shaping_get(x, shaping[i].key);
        if (v)
            json_object_set_new(opts, shaping[i].key, json_string(v));
        free(v);
    }
    char *url = url_mask(x->g.url);
    json_t *gold = json_pack("{s:s}", "url", url);
    free(url);
    if (x->g.model)
        json_object_set_new(gold, "model", json_string(x->g.model));
    if (x->g.extra_body)
        json_object_set(gold, "extra_body", x->g.extra_body);
    char hx[17];
    snprintf(hx, sizeof(hx), "%016llx",
             (unsigned long long)hash64(ids, n * sizeof(*ids), 0));
    return json_pack("{s:o, s:O, s:{s:s, s:s, s:I}, s:o}", "golden", gold,
                     "fingerprint",
                     x->g.fingerprint ? x->g.fingerprint : json_null(),
                     "tokenizer", "probe", TOKENIZER_PROBE, "ids_xxh64", hx,
                     "ids", (json_int_t)n, "options", opts);
}

/* Both sides' token ids of a fixed text: a saved golden's tokenizer is
 * the candidate's, or the comparison is refused naming both. */
static int tokenizer_check(struct ctx *x, uint32_t **gids, size_t *gn)
{
    struct diag d = {{0}};
    uint32_t *cids = NULL;
    size_t cn = 0;
    int ret = drift_side_tokenize(&x->g, NULL, TOKENIZER_PROBE, gids, gn, &d);
    if (ret)
        return cli_error("drift", exit_for(ret), "%s", d.msg);
    if (!x->golden_file)
        return 0;
    ret = drift_side_tokenize(&x->c, NULL, TOKENIZER_PROBE, &cids, &cn, &d);
    if (ret)
        return cli_error("drift", exit_for(ret), "%s", d.msg);
    long at = drift_ids_first_diff(*gids, *gn, cids, cn);
    free(cids);
    if (at >= 0)
        return cli_error("drift", EXIT_FAIL,
                         "the candidate %s tokenizes differently from the "
                         "saved golden '%s' (recorded from %s): the fixed "
                         "probe text parts at token %ld; drift needs "
                         "identical token ids on both sides",
                         x->c.url, x->golden_file, x->g.url, at);
    return 0;
}

static int parse(struct ctx *x, int argc, char **argv)
{
    struct diag d = {{0}};
    int c, r;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":q", longopts, NULL)) != -1) {
        if (c >= O_GOLDEN && c - O_GOLDEN < 64)
            x->given |= 1ULL << (c - O_GOLDEN);
        switch (c) {
        case O_QUIET:
            x->quiet = true;
            break;
        case O_SAVE_GOLDEN:
            x->save_path = optarg;
            break;
        case O_GOLDEN_FILE:
            x->golden_file = optarg;
            break;
        case O_GOLDEN:
        case O_CAND:
            if (cli_check_base_url("drift",
                                   c == O_GOLDEN ? "--golden" : "--candidate",
                                   optarg))
                return EXIT_USAGE;
            if (drift_side_set_url(c == O_GOLDEN ? &x->g : &x->c, optarg, &d))
                return BAD("%s", d.msg);
            break;
        case O_CORPUS:
            x->o.corpus_file = optarg;
            break;
        case O_FROMDB:
            x->from_db = true;
            break;
        case O_SESSION:
            x->o.session = optarg;
            break;
        case O_NOCTRL:
            x->o.control = false;
            break;
        case O_NOSELF:
            x->o.self = false;
            break;
        case O_JSON:
            x->json_path = optarg;
            break;
        case O_JSONL:
            x->jsonl_path = optarg;
            break;
        case O_REPORT:
            x->report_path = optarg;
            break;
        case O_DB:
            x->db_path = optarg;
            break;
        case O_NOSTORE:
            x->no_store = true;
            break;
        case O_CACHE_ARM:
        case O_NO_CACHE_ARM:
        case O_CACHE_EVICT:
            if (cache_opt(x, c, optarg))
                return BAD("bad value '%s' for '--cache-arm'", optarg);
            break;
        case O_READY:
            if (cli_parse_ready_timeout(optarg, &x->ready_ms))
                return BAD("bad value '%s' for '--ready-timeout'", optarg);
            break;
        case '?':
        case ':':
            return cli_bad_option("drift", c, argv);
        default:
            r = side_opt(x, c, optarg);
            if (r < 0)
                r = num_opt(x, c, optarg);
            if (r)
                return r;
        }
    }
    if (optind < argc)
        return BAD("unexpected argument '%s'", argv[optind]);
    if ((x->save_path || x->golden_file) && (r = saved_golden_opts(x)))
        return r;
    if (!x->g.url || !x->c.url)
        return BAD("%s", "both --golden URL and --candidate URL are needed");
    if (x->from_db && x->o.corpus_file)
        return BAD("%s", "--from-db and --corpus are exclusive");
    if (x->o.session && !x->from_db)
        return BAD("%s", "--session needs --from-db");
    int rc = cli_check_output("drift", "--json", x->json_path);
    if (!rc)
        rc = cli_check_output("drift", "--jsonl", x->jsonl_path);
    if (!rc)
        rc = cli_check_output("drift", "--report", x->report_path);
    if (!rc)
        rc = cli_check_input("drift", "--corpus", x->o.corpus_file);
    if (!rc && !x->no_store)
        rc = cli_check_store("drift",
                             x->db_path ? x->db_path : cli_default_db());
    if (rc)
        return rc;
    if (x->from_db) {
        x->o.from_db = x->db_path ? x->db_path : cli_default_db();
        rc = recorded_replay("drift", x->o.from_db, NULL);
        if (rc)
            return rc;
    }
    return 0;
}

/* The readiness request to one side, with its key and headers. */
static int ready(const struct drift_side *s, long ms)
{
    const char *h[DRIFT_HEADERS_MAX + 2];
    char *auth =
        s->api_key ? xasprintf("Authorization: Bearer %s", s->api_key) : NULL;
    size_t n = 0;
    if (auth)
        h[n++] = auth;
    for (size_t i = 0; i < s->n_headers; i++)
        h[n++] = s->headers[i];
    h[n] = NULL;
    int code = cli_ready("drift", s->label, s->url, h, ms);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    return code;
}

static int save(struct ctx *x, json_t *summary)
{
    struct diag d = {{0}};
    struct db *db;
    int64_t id;
    const char *path = x->db_path ? x->db_path : cli_default_db();
    if (store_open(path, &db, &d))
        return cli_error("drift", EXIT_INTERNAL, "%s", d.msg);
    int r = drift_store_save(db, summary, &id, &d);
    store_close(db);
    if (r)
        return cli_error("drift", EXIT_INTERNAL,
                         "cannot save the run in '%s': %s", path, d.msg);
    return 0;
}

static int finish(struct ctx *x, struct drift_result *r)
{
    struct drift_worst w[DRIFT_WORST_MAX];
    struct drift_worst_text wt[DRIFT_WORST_MAX];
    struct buf out = BUF_INIT;
    struct diag d = {{0}};
    int code = r->verdict == DRIFT_FAIL ? EXIT_FAIL : EXIT_PASS;

    size_t nw = drift_worst_sorted(&r->an, w, x->o.worst);
    /* the labels' text: from the golden, or with a saved golden from the
     * candidate (their tokenizers were checked equal; which positions are
     * worst depends on the candidate, so the file cannot hold them) */
    drift_worst_texts(x->golden_file ? &x->c : &x->g, r, w, nw, wt);
    json_t *summary = drift_report_json(r, &x->g, &x->c, w, wt, nw);
    if (x->golden_file)
        json_object_set_new(summary, "golden_file",
                            json_string(x->golden_file));
    bool json_stdout =
        (x->json_path && !strcmp(x->json_path, "-")) || x->jsonl == stdout;
    if (!x->quiet) { /* --quiet: the verdict alone */
        drift_report_text(r, &x->g, &x->c, w, wt, nw, &out);
        drift_cache_text(&x->cres, &out);
    }
    drift_report_verdict(r, &x->cres, &out);
    json_object_set_new(summary, "cache", drift_cache_json(&x->cres));
    json_t *und = drift_report_undecided_json(r, &x->cres);
    if (json_array_size(und))
        json_object_set_new(summary, "undecided", und);
    else
        json_decref(und);
    fputs(buf_str(&out) + (x->quiet && out.len && out.data[0] == '\n'),
          json_stdout ? stderr : stdout);
    if (x->json_path && cli_json_write(summary, x->json_path, &d))
        code = cli_error("drift", EXIT_INTERNAL, "%s", d.msg);
    if (x->report_path && cmd_report_hook("drift", x->report_path, x->argc,
                                          x->argv, NULL, summary, NULL))
        code = EXIT_INTERNAL;
    if (!x->no_store) {
        int s = save(x, summary);
        if (s)
            code = s;
    }
    json_decref(summary);
    drift_worst_texts_free(wt, nw);
    buf_release(&out);
    return code;
}

/* The cache arm after the other arms, inside the servers' context: until
 * it decides (or exactly --cache-arm N conversations); its verdict joins
 * the overall one and its warm positions join harm. */
/* The golden's own warm vs cold over the candidate's conversations (the
 * same seed and count, no eviction, no cold twice, no records): the
 * baseline of harm's warm positions, per conversation (KL sum,
 * positions). NULL when the golden could not run them all: harm then
 * keeps the cold-vs-cold baseline. */
static double *golden_warm(struct ctx *x, struct drift_result *r,
                           struct diag *d)
{
    struct drift_cache_opts o = x->cache;
    struct drift_opts ro = x->o;
    struct drift_cache_result g;
    struct diag gd = {{0}};
    double *out = NULL;
    (void)d;
    o.convs = o.min_convs = x->cres.convs;
    o.evict = false;
    o.self = false;
    if (x->tape) {
        /* a saved golden answers the same content whatever the day, and
         * for every count a comparison may reach: it keeps the budget */
        o.nonce = hash_mix2(x->o.seed, 0x676f6c64656eULL);
        if (x->save_path)
            o.convs = o.min_convs = x->cache.convs;
    }
    ro.on_rec = NULL;
    ro.on_progress = NULL;
    int ret = drift_cache_run(&x->g, &r->corpus, &o, &ro, &g, &gd);
    if (!ret && g.ran && g.convs == x->cres.convs && g.conv_sums) {
        out = xcalloc(g.convs, 2 * sizeof(double));
        for (unsigned i = 0; i < g.convs; i++) {
            out[i * 2] = g.conv_sums[i * 4];
            out[i * 2 + 1] = g.conv_sums[i * 4 + 1];
        }
    }
    drift_cache_result_release(&g);
    return out;
}

static int cache_arm(struct ctx *x, struct drift_result *r, struct diag *d)
{
    x->cache.seed = x->o.seed;
    x->cache.self = x->o.self;
    x->cache.max_context = x->o.max_context;
    if (r->context && r->context < x->cache.max_context)
        x->cache.max_context = (unsigned)r->context;
    if (x->o.decode_tokens)
        x->cache.gen_tokens = x->o.decode_tokens;
    if (x->cache_n_given)
        x->cache.min_convs = x->cache.convs;
    int ret = drift_cache_run(&x->c, &r->corpus, &x->cache, &x->o, &x->cres, d);
    if (ret)
        return ret;
    r->verdict = drift_verdict_worse(
        r->verdict, drift_verdict_worse(
                        x->cres.verdict,
                        x->cres.evict_ran ? x->cres.evict_verdict : DRIFT_NA));
    struct drift_harm_warm warm;
    drift_cache_harm(&x->cres, &warm);
    double *gsums = NULL;
    if (warm.n)
        gsums = golden_warm(x, r, d);
    warm.golden = gsums;
    if (warm.n)
        drift_harm_compute(r, &warm, x->o.bootstrap, x->o.seed, &r->harm);
    free(gsums);
    return 0;
}

int cmd_drift(int argc, char **argv)
{
    struct ctx x;
    struct drift_result r;
    struct diag d = {{0}};
    uint32_t *probe_ids = NULL;
    size_t probe_n = 0;
    int code;

    memset(&x, 0, sizeof(x));
    drift_side_init(&x.g, "golden");
    drift_side_init(&x.c, "candidate");
    drift_opts_default(&x.o);
    drift_cache_opts_default(&x.cache);
    buf_init(&x.line, 0);
    drift_result_init(&r);
    x.ready_ms = CLI_READY_DEFAULT;
    x.argc = argc;
    x.argv = argv;
    code = parse(&x, argc, argv);
    if (!code && !x.golden_file)
        code = ready(&x.g, x.ready_ms);
    if (!code && strcmp(x.g.url, x.c.url))
        code = ready(&x.c, x.ready_ms);
    if (code)
        goto out;
    if (x.save_path) {
        x.tape = drift_tape_new_record();
        x.g.tape = x.tape;
    }
    if (x.tape && (code = tokenizer_check(&x, &probe_ids, &probe_n)))
        goto out;
    x.tty = cli_is_tty(2);
    x.o.ud = &x;
    x.o.on_progress = on_progress;
    if (x.jsonl_path) {
        x.jsonl = strcmp(x.jsonl_path, "-") ? fopen(x.jsonl_path, "w") : stdout;
        if (!x.jsonl) {
            code = cli_error("drift", EXIT_USAGE, "cannot open '%s': %s",
                             x.jsonl_path, strerror(errno));
            goto out;
        }
        x.o.on_rec = on_rec;
    }
    int ret = drift_run(&x.g, &x.c, &x.o, &r, &d);
    if (x.tty)
        fputs("\r\033[K", stderr);
    /* --from-db: rows the store could not decode were left out */
    for (const char *p = r.corpus.skipped; p && *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(stderr,
                "fidelity drift: warning: store.corrupt: %.*s; left out of "
                "the corpus\n",
                (int)n, p);
        p += n + (p[n] == '\n');
    }
    if (ret) {
        code = cli_error("drift", exit_for(ret), "%s", d.msg);
        goto out;
    }
    ret = cache_arm(&x, &r, &d);
    if (ret) {
        code = cli_error("drift", exit_for(ret), "%s", d.msg);
        goto out;
    }
    code = finish(&x, &r);
    if (x.save_path && (code == EXIT_PASS || code == EXIT_FAIL)) {
        if (code == EXIT_FAIL)
            fprintf(stderr, "fidelity drift: warning: the golden differs "
                            "from itself beyond its noise (FAIL above): a "
                            "comparison against this file inherits that\n");
        code = EXIT_PASS;
        if (drift_tape_commit(x.tape, saved_header(&x, probe_ids, probe_n),
                              x.save_path, &d))
            code = cli_error("drift", EXIT_INTERNAL, "%s", d.msg);
        else
            fprintf(stderr, "drift: saved %zu answers of the golden in '%s'\n",
                    drift_tape_count(x.tape), x.save_path);
    } else if (x.golden_file) {
        fprintf(stderr,
                "drift: the golden answered from '%s' (%zu of %zu saved "
                "answers)\n",
                x.golden_file, drift_tape_used(x.tape),
                drift_tape_count(x.tape));
    }
    if (x.jsonl_err)
        code = cli_error("drift", EXIT_INTERNAL, "cannot write '%s': %s",
                         x.jsonl_path, strerror(x.jsonl_err));
out:
    if (x.jsonl && x.jsonl != stdout && fclose(x.jsonl) && !code)
        code = cli_error("drift", EXIT_INTERNAL, "cannot write '%s'",
                         x.jsonl_path);
    drift_result_release(&r);
    drift_cache_result_release(&x.cres);
    drift_side_release(&x.g);
    drift_side_release(&x.c);
    drift_tape_free(x.tape);
    free(probe_ids);
    buf_release(&x.line);
    return code;
}
