/*
 * cmd_export: `fidelity export --format har|jsonl|openai`, what `record`
 * stored in the formats other tools read (store/export.h builds each
 * value): HAR 1.2 with one page per session, one JSON object per exchange,
 * or one OpenAI-style conversation per session. The sessions are the ones
 * `sessions` lists (audit's grouping); each exchange's bytes come from a
 * walk of the store and the spill file, written as it is read.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/audit.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "store/export.h"
#include "store/store.h"
#include "wire/jdump.h"

const char CMD_EXPORT_HELP[] =
    "usage: fidelity export --format har|jsonl|openai [--session KEY]\n"
    "                       [-o FILE] [--db FILE] [--spill FILE]\n"
    "\n"
    "Writes what 'fidelity record' stored, to standard output or -o FILE:\n"
    "  har     HTTP Archive 1.2: one page per session, one entry per\n"
    "          exchange with its request (headers, body), response (status,\n"
    "          headers, the body as received: a stream's raw SSE) and\n"
    "          timings; the reassembled reply under \"_reply\". Opens in\n"
    "          browser devtools, Charles and mitmproxy's HAR import.\n"
    "  jsonl   one JSON object per exchange: id, session, kind, started,\n"
    "          method, path, request (headers and the body as stored, its\n"
    "          bytes the store's), response, reply (reassembled), timings\n"
    "  openai  one {\"messages\": [...], \"tools\", \"model\", \"session\"}\n"
    "          per session: its last main request's messages and the reply,\n"
    "          for replaying into other tools ('fidelity drift --corpus')\n"
    "Fields come in a fixed order; secrets are as the store holds them\n"
    "(redacted). docs/SHOW.md describes each format.\n"
    "\n"
    "  --format F     har, jsonl or openai (required)\n"
    "  --session KEY  one session ('fidelity sessions'; a unique beginning\n"
    "                 of its id is enough); default: all of them\n"
    "  -o FILE        write FILE (whole or not at all) instead of stdout\n"
    "  --db FILE      the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE   record's spill file (default DB.spill.jsonl if any)\n"
    "\n"
    "examples:\n"
    "  fidelity export --db run.db --format har -o run.har\n"
    "  fidelity export --db run.db --session ses_dcdd --format jsonl | jq "
    ".kind\n"
    "  fidelity export --db run.db --format openai > convs.jsonl\n";

enum fmt { FMT_HAR, FMT_JSONL, FMT_OPENAI };

/* An exchange of the chosen sessions: its id, session name and the kind
 * audit decides by its structure (record's stored kind is only a hint). */
struct pick {
    int64_t id;
    const char *session;
    const char *kind;
};

struct run {
    FILE *out;
    enum fmt fmt;
    struct pick *p;
    size_t n;
    size_t written;
    struct buf b; /* the text of the value being written */
    int err;      /* errno of a failed write */
};

static int by_id(const void *a, const void *b)
{
    int64_t x = ((const struct pick *)a)->id, y = ((const struct pick *)b)->id;
    return x < y ? -1 : x > y;
}

static void picks(struct run *r, const struct audit_set *set)
{
    size_t n = 0;
    for (size_t i = 0; i < set->n; i++)
        n += set->s[i].n;
    r->p = xcalloc(n + 1, sizeof(*r->p));
    for (size_t i = 0; i < set->n; i++) {
        const char **kinds = audit_session_kinds(&set->s[i]);
        for (size_t j = 0; j < set->s[i].n; j++)
            r->p[r->n++] =
                (struct pick){set->s[i].x[j]->id, set->s[i].id, kinds[j]};
        free(kinds);
    }
    qsort(r->p, r->n, sizeof(*r->p), by_id);
}

/* Writes v compactly, in insertion order (wire/jdump.c: json_dumps's
 * bytes, faster), and sep. */
static void put(struct run *r, json_t *v, const char *sep)
{
    buf_reset(&r->b);
    if (jdump(&r->b, v, false))
        r->err = EINVAL;
    else if (fwrite(r->b.data, 1, r->b.len, r->out) != r->b.len ||
             fputs(sep, r->out) == EOF)
        r->err = errno ? errno : EIO;
    json_decref(v);
}

static int each(const struct xchg *x, void *ud)
{
    struct run *r = ud;
    struct pick key = {x->id, NULL, NULL};
    struct pick *p = bsearch(&key, r->p, r->n, sizeof(*r->p), by_id);
    if (!p)
        return 0;
    if (r->fmt == FMT_HAR) {
        if (r->written && fputs(",\n", r->out) == EOF)
            r->err = errno ? errno : EIO;
        put(r, export_har_entry(x, p->session, p->kind), "");
    } else {
        put(r, export_jsonl(x, p->session, p->kind), "\n");
    }
    r->written++;
    return r->err ? -r->err : 0;
}

/* Walks the store and the spill file in id order through each(). */
static int walk(struct run *r, const struct recorded_args *a, struct diag *d)
{
    struct db *db = NULL;
    int rc = 0;
    if (store_exists(a->db)) {
        rc = store_open(a->db, &db, d);
        if (!rc)
            rc = xchg_each_checked(db, NULL, each, NULL, r, d);
        store_close(db);
    }
    char *def = a->spill ? NULL : store_local_path(a->db, ".spill.jsonl");
    if (!rc)
        rc = xchg_spill_each(a->spill ? a->spill : def, each, r, d);
    free(def);
    return rc;
}

static void har_head(struct run *r, const struct audit_set *set)
{
    json_t *pages = json_array();
    for (size_t i = 0; i < set->n; i++)
        json_array_append_new(
            pages, export_har_page(set->s[i].id,
                                   set->s[i].n ? set->s[i].x[0]->started : 0));
    json_t *c = export_har_creator();
    fputs("{\"log\":{\"version\":\"1.2\",\"creator\":", r->out);
    put(r, c, ",\"pages\":");
    put(r, pages, ",\"entries\":[\n");
}

/* The last request of the session carrying messages, "main" (by audit's
 * reading of its structure) first. */
static const struct xchg *last_conversation(const struct audit_session *s)
{
    json_t *turns = audit_session_turns(s);
    const struct xchg *any = NULL, *main_ = NULL;
    for (size_t j = s->n; j-- > 0 && !main_;) {
        const struct xchg *x = s->x[j];
        const char *kind = json_string_value(
            json_object_get(json_array_get(turns, j), "kind"));
        if (!x->req_msgs && !json_object_get(x->req_body, "messages"))
            continue;
        if (kind && !strcmp(kind, "main"))
            main_ = x;
        else if (!any)
            any = x;
    }
    json_decref(turns);
    return main_ ? main_ : any;
}

static void openai(struct run *r, const struct audit_set *set)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct xchg *x = last_conversation(&set->s[i]);
        if (!x)
            continue;
        json_t *sent = audit_request_sent(x);
        put(r,
            export_openai(x, json_object_get(sent, "messages"), set->s[i].id),
            "\n");
        json_decref(sent);
        r->written++;
    }
}

static int run_export(struct run *r, const struct recorded_args *a,
                      const struct audit_set *set)
{
    struct diag d = {{0}};
    int rc = 0;
    if (r->fmt == FMT_OPENAI) {
        openai(r, set);
        return 0;
    }
    picks(r, set);
    if (r->fmt == FMT_HAR)
        har_head(r, set);
    rc = walk(r, a, &d);
    if (r->fmt == FMT_HAR && fputs("\n]}}\n", r->out) == EOF)
        r->err = errno ? errno : EIO;
    free(r->p);
    if (rc && !r->err)
        return cli_error("export", EXIT_INTERNAL, "%s", d.msg);
    return 0;
}

static int parse_format(const char *s, enum fmt *f)
{
    static const char *const names[] = {"har", "jsonl", "openai"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *f = (enum fmt)i;
            return 0;
        }
    return cli_usage_error("export",
                           "--format '%s' is not a format: give har, jsonl "
                           "or openai",
                           s);
}

/* Opens the output: stdout, or FILE.tmp renamed to FILE by finish(). */
static int open_out(const char *path, struct run *r, char **tmp)
{
    *tmp = NULL;
    r->out = stdout;
    if (!path || !strcmp(path, "-"))
        return 0;
    *tmp = xasprintf("%s.tmp", path);
    if ((r->out = fopen(*tmp, "w")))
        return 0;
    int e = errno;
    cli_error("export", EXIT_USAGE, "cannot write '%s': %s", path, strerror(e));
    free(*tmp);
    *tmp = NULL;
    return EXIT_USAGE;
}

static int finish(const char *path, char *tmp, struct run *r, int rc)
{
    if (tmp && fclose(r->out) && !r->err)
        r->err = errno ? errno : EIO;
    if (!tmp && fflush(stdout) && !r->err)
        r->err = errno ? errno : EIO;
    if (!rc && r->err)
        rc = cli_error("export", EXIT_INTERNAL, "cannot write '%s': %s",
                       path ? path : "(standard output)", strerror(r->err));
    if (tmp && (rc || rename(tmp, path)))
        unlink(tmp);
    free(tmp);
    return rc;
}

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"db", required_argument, NULL, 'd'},
        {"spill", required_argument, NULL, 'S'},
        {"session", required_argument, NULL, 's'},
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    struct recorded_args a;
    struct run r = {.b = BUF_INIT};
    const char *session = NULL, *format = NULL, *path = NULL;
    struct audit_set set;
    char *tmp;
    int c, rc;
    opterr = 0;
    optind = 1;
    recorded_args_init(&a);
    while ((c = getopt_long(argc, argv, ":o:", longopts, NULL)) != -1) {
        if (c == 's')
            session = optarg;
        else if (c == 'f')
            format = optarg;
        else if (c == 'o')
            path = optarg;
        else if (c == 'j' || !recorded_take_opt(&a, c, optarg))
            return cli_bad_option("export", c, argv);
    }
    if (optind < argc)
        return cli_usage_error("export", "unexpected argument '%s'",
                               argv[optind]);
    if (!format)
        return cli_usage_error("export", "needs --format har, jsonl or openai");
    if ((rc = parse_format(format, &r.fmt)))
        return rc;
    if ((rc = cli_check_output("export", "--output", path)))
        return rc;
    if ((rc = open_out(path, &r, &tmp)))
        return rc;
    audit_set_init(&set);
    if (!(rc = recorded_load("export", &a, session, &set)))
        rc = run_export(&r, &a, &set);
    audit_set_release(&set);
    buf_release(&r.b);
    return finish(path, tmp, &r, rc);
}
