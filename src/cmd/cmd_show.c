/*
 * cmd_show: `fidelity show SESSION`, one recorded session request by
 * request (kind, user turn, messages and how many are new, sizes, tokens,
 * finish reason, status, time to first byte) with the audit's findings
 * under the request they are about; with --messages or --request N, what
 * each request sent (messages, fields, tools), its reply, and in words
 * what changed from its predecessor (audit_session_diffs). The contract
 * is docs/SHOW.md.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "cmd/recorded.h"
#include "core/buf.h"
#include "core/plural.h"
#include "core/utf8.h"
#include "store/store.h"

const char CMD_SHOW_HELP[] =
    "usage: fidelity show SESSION [--messages | --request N] [--full]\n"
    "                     [--db FILE] [--spill FILE] [--json FILE]\n"
    "\n"
    "Prints one recorded session turn by turn: for each exchange its id,\n"
    "kind (main, title, compaction, subagent, other), user turn, number of\n"
    "messages (+ new ones), request bytes, prompt and completion tokens,\n"
    "finish reason, HTTP status the client got (a 502 or 504 'record'\n"
    "answered itself is marked so) and time to first byte, '-' for what is\n"
    "not known, with the audit's findings (default options) under the\n"
    "request they are about.\n"
    "SESSION is an id 'fidelity sessions' lists, or its beginning (also\n"
    "without record's 'p:'), as long as one session starts with it; an\n"
    "ambiguous one lists the sessions it matches.\n"
    "\n"
    "With --messages, each request as the server received it: what changed\n"
    "from its predecessor in the conversation (messages appended, the reply\n"
    "sent back kept or altered and its reasoning kept or dropped, history\n"
    "removed or replaced by a compaction summary, fields changed: the\n"
    "linking 'fidelity audit' uses), every field sent but the messages\n"
    "(temperature, top_p, max_tokens, reasoning_effort,\n"
    "chat_template_kwargs, ...), the tools by name, each message (role,\n"
    "name, tool call ids, content, reasoning), then the reply as the client\n"
    "got it (content, reasoning, tool calls, finish reason, usage). Texts\n"
    "are cut to one line of about 160 bytes; --full prints them whole.\n"
    "Secrets appear as the store holds them: redacted.\n"
    "\n"
    "  --messages    every request's messages, fields, reply and changes\n"
    "  --request N   only exchange N of the session, with its messages\n"
    "  --full        texts whole, not cut to one line\n"
    "  --db FILE     the store (default $FIDELITY_DB or fidelity.db)\n"
    "  --spill FILE  record's spill file (default DB.spill.jsonl if any)\n"
    "  --json FILE   write {\"session\", \"turns\", \"findings\"} as JSON, "
    "each\n"
    "                turn with its \"changes\" (and \"sent\" with --messages\n"
    "                or --request: messages, fields, tools, reply)\n"
    "\n"
    "examples:\n"
    "  fidelity show ses_dcdd8ae0 --db run.db\n"
    "  fidelity show 262f --db run.db --messages | less\n"
    "  fidelity show ses_dcdd8ae0 --db run.db --request 9 --full\n"
    "  fidelity show ses_dcdd8ae0 --db run.db --json - | jq "
    "'.turns[].changes'\n"
    "'fidelity export' writes the same exchanges as HAR, JSONL or\n"
    "OpenAI-style conversations.\n";

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

/* How a text is printed: whole (--full, its lines indented under the
 * first) or cut to one line of FOLD bytes, line breaks written \n. */
#define FOLD 160

struct show_opts {
    bool messages;
    bool full;
    long long request; /* 0: every request */
};

static void text_out(const char *t, size_t len, bool full)
{
    if (full) {
        for (size_t i = 0; i < len; i++) {
            putchar(t[i]);
            if (t[i] == '\n' && i + 1 < len && t[i + 1] != '\n')
                fputs("        ", stdout);
        }
        return;
    }
    size_t i = 0, w = 0;
    while (i < len && w < FOLD) {
        size_t k = utf8_seq_len((const unsigned char *)t + i, len - i);
        if (!k)
            k = 1;
        if (t[i] == '\n' || t[i] == '\t' || t[i] == '\r')
            w += (size_t)printf("\\%c", t[i] == '\n'   ? 'n'
                                        : t[i] == '\t' ? 't'
                                                       : 'r');
        else
            w += fwrite(t + i, 1, k, stdout);
        i += k;
    }
    if (i < len)
        printf(" ... (+%zu bytes)", len - i);
}

static void value_out(json_t *v, bool full)
{
    if (json_is_string(v)) {
        text_out(json_string_value(v), json_string_length(v), full);
        return;
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    text_out(s ? s : "", s ? strlen(s) : 0, full);
    free(s);
}

static void tool_calls_out(json_t *calls, const char *indent, bool full)
{
    size_t i;
    json_t *tc;
    json_array_foreach(calls, i, tc)
    {
        json_t *f = json_object_get(tc, "function");
        const char *id = json_string_value(json_object_get(tc, "id"));
        const char *name = json_string_value(json_object_get(f, "name"));
        printf("%stool call %s %s(", indent, id ? id : "(no id)",
               name ? name : "?");
        value_out(json_object_get(f, "arguments"), full);
        puts(")");
    }
}

static void message_out(size_t i, json_t *m, bool full)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const char *name = json_string_value(json_object_get(m, "name"));
    const char *call = json_string_value(json_object_get(m, "tool_call_id"));
    json_t *content = json_object_get(m, "content");
    json_t *reasoning = json_object_get(m, "reasoning_content");
    if (!reasoning)
        reasoning = json_object_get(m, "reasoning");
    printf("    [%zu] %s", i, role ? role : "?");
    if (name)
        printf(" name=%s", name);
    if (call)
        printf(" tool_call_id=%s", call);
    fputs(": ", stdout);
    if (json_is_null(content) || !content)
        fputs("(no content)", stdout);
    else if (json_is_string(content) && !json_string_length(content))
        fputs("(empty)", stdout);
    else
        value_out(content, full);
    putchar('\n');
    if (reasoning && !json_is_null(reasoning)) {
        fputs("        reasoning: ", stdout);
        value_out(reasoning, full);
        putchar('\n');
    }
    tool_calls_out(json_object_get(m, "tool_calls"), "        ", full);
}

static void reply_out(json_t *reply, bool full)
{
    const char *fin =
        json_string_value(json_object_get(reply, "finish_reason"));
    json_t *usage = json_object_get(reply, "usage"), *v;
    printf("    reply: finish %s", fin ? fin : "-");
    if (json_is_object(usage)) {
        const char *k;
        fputs(", usage", stdout);
        json_object_foreach(usage, k, v)
        {
            printf(" %s=", k);
            value_out(v, false);
        }
    }
    putchar('\n');
    json_t *r = json_object_get(reply, "reasoning_content");
    if (json_is_string(r) && json_string_length(r)) {
        fputs("        reasoning: ", stdout);
        value_out(r, full);
        putchar('\n');
    }
    json_t *c = json_object_get(reply, "content");
    if (json_is_string(c) && json_string_length(c)) {
        fputs("        content: ", stdout);
        value_out(c, full);
        putchar('\n');
    }
    tool_calls_out(json_object_get(reply, "tool_calls"), "        ", full);
}

/* "[3] user, [4] assistant" for at most 8 entries of list, then "...". */
static void list_words(json_t *list, struct buf *b)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        if (i == 8) {
            buf_printf(b, ", ... %zu more", json_array_size(list) - 8);
            break;
        }
        buf_printf(b, "%s[%lld] %s", i ? ", " : "", geti(e, "index"),
                   json_string_value(json_object_get(e, "role")));
    }
}

/* The reply of the predecessor as this request sent it back. */
static void reply_words(json_t *d, struct buf *b)
{
    const char *reply = json_string_value(json_object_get(d, "reply"));
    const char *rs = json_string_value(json_object_get(d, "reasoning"));
    static const char *const rwords[][2] = {
        {"equal", "with its reasoning"},
        {"dropped", "WITHOUT its reasoning (dropped)"},
        {"empty", "with its reasoning emptied"},
        {"inline", "with its reasoning inline in the content"},
        {"changed", "with its reasoning changed"}};
    if (!reply)
        return;
    bool cut = json_is_true(json_object_get(d, "interrupted"));
    if (!strcmp(reply, "dropped")) {
        buf_printf(b, "; its %sreply not sent back",
                   cut ? "partial (interrupted) " : "");
        return;
    }
    buf_printf(b, "; its %sreply sent back at [%lld]%s",
               cut ? "partial (interrupted) " : "", geti(d, "reply_index"),
               strcmp(reply, "altered") ? "" : " ALTERED");
    if (!strcmp(reply, "altered"))
        buf_printf(b, " (%s differs)",
                   json_string_value(json_object_get(d, "reply_field")));
    for (size_t i = 0; rs && i < sizeof(rwords) / sizeof(*rwords); i++)
        if (!strcmp(rs, rwords[i][0]))
            buf_printf(b, " %s", rwords[i][1]);
}

/* What a linked request did to its predecessor's history. */
static void step_words(json_t *d, const char *st, struct buf *b)
{
    json_t *removed = json_object_get(d, "removed");
    size_t nrem = json_array_size(removed);
    /* a rewrite that removed only the reply is said by reply_words */
    if (!strcmp(st, "compaction") || (!strcmp(st, "rewrite") && nrem)) {
        buf_printf(b, "; HISTORY %s: %zu message%s removed (",
                   strcmp(st, "rewrite") ? "COMPACTED" : "REWRITTEN", nrem,
                   plural_s(nrem));
        list_words(removed, b);
        buf_printf(b, "), %lld -> %lld bytes", geti(d, "bytes_before"),
                   geti(d, "bytes_after"));
        if (json_object_get(d, "summary_request"))
            buf_printf(b, ", replaced by the summary of #%lld",
                       geti(d, "summary_request"));
        if (json_object_get(d, "summary_index"))
            buf_printf(b, " at [%lld]", geti(d, "summary_index"));
    } else if (!strcmp(st, "prune")) {
        size_t n = json_array_size(json_object_get(d, "pruned"));
        buf_printf(b, "; %zu tool result%s replaced in place", n, plural_s(n));
    }
    reply_words(d, b);
    json_t *app = json_object_get(d, "appended");
    if (json_array_size(app)) {
        buf_printf(b, "; %zu appended (", json_array_size(app));
        list_words(app, b);
        buf_adds(b, ")");
    }
}

static void field_words(json_t *d, struct buf *b)
{
    size_t i;
    json_t *f, *v;
    json_array_foreach(json_object_get(d, "fields"), i, f)
    {
        char *from = json_dumps(json_object_get(f, "from"), JSON_ENCODE_ANY);
        char *to = json_dumps(json_object_get(f, "to"), JSON_ENCODE_ANY);
        buf_printf(b, "%s%s %s -> %s", b->len ? "; " : "",
                   json_string_value(json_object_get(f, "field")),
                   json_is_null(json_object_get(f, "from")) ? "unset" : from,
                   json_is_null(json_object_get(f, "to")) ? "unset" : to);
        free(from);
        free(to);
    }
    static const char *const keys[] = {"tools_added", "tools_removed"};
    for (int k = 0; k < 2; k++) {
        json_t *l = json_object_get(d, keys[k]);
        if (!json_array_size(l))
            continue;
        buf_printf(b, "%stools %s:", b->len ? "; " : "",
                   k ? "removed" : "added");
        json_array_foreach(l, i, v) buf_printf(b, " %s", json_string_value(v));
    }
}

/* The change of one request in words (docs/SHOW.md). */
static void change_words(json_t *d, const char *kind, struct buf *b)
{
    const char *st = json_string_value(json_object_get(d, "step"));
    buf_reset(b);
    if (!strcmp(st, "none")) {
        buf_adds(b, "not a chat request");
    } else if (!strcmp(st, "first") || !strcmp(st, "side")) {
        size_t n = json_array_size(json_object_get(d, "appended"));
        if (!strcmp(st, "first"))
            buf_printf(b, "starts the conversation: %zu message%s", n,
                       plural_s(n));
        else
            buf_printf(b,
                       "a %s request beside the conversation: %zu "
                       "message%s",
                       kind, n, plural_s(n));
        if (json_object_get(d, "prev"))
            buf_printf(b, "; fields against #%lld, the previous %s request",
                       geti(d, "prev"), kind);
    } else if (!strcmp(st, "retry")) {
        buf_printf(b, "the same messages as #%lld, sent again",
                   geti(d, "prev"));
    } else {
        buf_printf(b, "from #%lld: kept %lld", geti(d, "prev"),
                   geti(d, "kept"));
        step_words(d, st, b);
    }
    struct buf f = BUF_INIT;
    field_words(d, &f);
    if (f.len)
        buf_printf(b, "; fields: %s", f.data);
    buf_release(&f);
}

static void sent_out(const struct xchg *x, json_t *d, const char *kind,
                     bool full)
{
    json_t *sent = audit_request_sent(x), *v;
    struct buf b = BUF_INIT;
    const char *k;
    size_t i;
    change_words(d, kind, &b);
    printf("    changes: %s\n    sent:", b.data);
    json_object_foreach(json_object_get(sent, "params"), k, v)
    {
        printf(" %s=", k);
        value_out(v, full);
    }
    json_t *tools = json_object_get(sent, "tools");
    printf("\n    tools (%zu):", json_array_size(tools));
    json_array_foreach(tools, i, v) printf(" %s", json_string_value(v));
    putchar('\n');
    json_array_foreach(json_object_get(sent, "messages"), i, v)
        message_out(i, v, full);
    reply_out(json_object_get(sent, "reply"), full);
    buf_release(&b);
    json_decref(sent);
}

static void print_findings(const struct audit_list *l, long long request)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].request == request)
            printf("        %-5s %s: %s\n", audit_sev_name(l->v[i].sev),
                   l->v[i].rule, l->v[i].summary);
}

static void print_turn(json_t *t)
{
    const char *fin = json_string_value(json_object_get(t, "finish_reason"));
    const char *by = json_string_value(json_object_get(t, "answered_by"));
    char pt[24], ct[24], st[24], ttfb[32] = "-";
    double ms = json_number_value(json_object_get(t, "ttfb_ms"));
    if (geti(t, "status") > 0 && ms >= 0 && !by)
        snprintf(ttfb, sizeof(ttfb), "%.0f ms", ms);
    printf("#%-5lld %-10s turn %-3lld %3lld msg%s (+%lld) %8lld B  "
           "prompt %6s  compl %5s  %-10s %3s  ttfb %s%s\n",
           geti(t, "request"), json_string_value(json_object_get(t, "kind")),
           geti(t, "turn"), geti(t, "messages"),
           geti(t, "messages") == 1 ? " " : "s", geti(t, "new_messages"),
           geti(t, "request_bytes"), num(t, "prompt_tokens", pt, sizeof(pt)),
           num(t, "completion_tokens", ct, sizeof(ct)), fin ? fin : "-",
           geti(t, "status") > 0 ? num(t, "status", st, sizeof(st)) : "-", ttfb,
           by ? "  (answered by record: no upstream response)" : "");
}

static void print_session(const struct audit_session *s, json_t *turns,
                          json_t *diffs, const struct audit_list *l,
                          const struct show_opts *so)
{
    json_t *sum = audit_session_json(s, l);
    printf("session %s  harness %s  %zu exchange%s\n", s->id,
           json_string_value(json_object_get(sum, "harness")), s->n,
           plural_s(s->n));
    if (s->parent)
        printf("subagent of %s (tool call %s%s)\n", s->parent, s->parent_call,
               s->result_returned ? ", its result went back" : "");
    json_decref(sum);
    print_findings(l, 0);
    for (size_t i = 0; i < s->n; i++) {
        json_t *t = json_array_get(turns, i);
        if (so->request && geti(t, "request") != so->request)
            continue;
        print_turn(t);
        print_findings(l, geti(t, "request"));
        if (so->messages)
            sent_out(s->x[i], json_array_get(diffs, i),
                     json_string_value(json_object_get(t, "kind")), so->full);
    }
}

/* Each turn gets its "changes" (and with messages, "sent"); with a
 * request, only that turn is kept. */
static json_t *turns_json(const struct audit_session *s, json_t *turns,
                          json_t *diffs, const struct show_opts *so)
{
    json_t *out = json_array();
    for (size_t i = 0; i < s->n; i++) {
        json_t *t = json_array_get(turns, i);
        if (so->request && geti(t, "request") != so->request)
            continue;
        json_object_set(t, "changes", json_array_get(diffs, i));
        if (so->messages) {
            json_t *sent = audit_request_sent(s->x[i]);
            json_object_del(sent, "request");
            json_object_set_new(t, "sent", sent);
        }
        json_array_append(out, t);
    }
    return out;
}

static int write_json(const char *id, const struct audit_set *set,
                      json_t *turns, const struct audit_list *l,
                      const char *path)
{
    struct diag d;
    json_t *f = json_array();
    for (size_t i = 0; i < l->n; i++)
        json_array_append_new(f, audit_finding_json(&l->v[i]));
    const struct audit_session *s = &set->s[0];
    json_t *j = json_pack("{s:s, s:i, s:s, s:O, s:o}", "schema",
                          "fidelity.show/1", "version", 1, "session", s->id,
                          "turns", turns, "findings", f);
    (void)id;
    json_object_set_new(j, "parent",
                        s->parent
                            ? json_pack("{s:s, s:s, s:b}", "session", s->parent,
                                        "call", s->parent_call,
                                        "result_returned", s->result_returned)
                            : json_null());
    int rc = cli_json_write(j, path, &d)
                 ? cli_error("show", EXIT_INTERNAL, "%s", d.msg)
                 : EXIT_PASS;
    json_decref(j);
    return rc;
}

/* --request N names an exchange of the session. */
static int check_request(const struct audit_session *s, long long want)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->x[i]->id == want)
            return 0;
    return cli_usage_error("show",
                           "session '%s' has no exchange %lld (its exchanges "
                           "are #%lld to #%lld; see 'fidelity show %s')",
                           s->id, want, s->n ? (long long)s->x[0]->id : 0LL,
                           s->n ? (long long)s->x[s->n - 1]->id : 0LL, s->id);
}

static int show_loaded(const char *id, const struct recorded_args *a,
                       struct audit_set *set, const struct show_opts *so)
{
    struct audit_list l;
    struct audit_opts o;
    const struct audit_session *s = &set->s[0];
    int rc = so->request ? check_request(s, so->request) : 0;
    if (rc)
        return rc;
    audit_list_init(&l);
    audit_opts_init(&o);
    audit_run(set, &o, &l);
    json_t *turns = audit_session_turns(s), *diffs = audit_session_diffs(s);
    if (a->json) {
        json_t *tj = turns_json(s, turns, diffs, so);
        rc = write_json(id, set, tj, &l, a->json);
        json_decref(tj);
    }
    if (!a->json || strcmp(a->json, "-"))
        print_session(s, turns, diffs, &l, so);
    json_decref(turns);
    json_decref(diffs);
    audit_list_release(&l);
    return rc;
}

int cmd_show(int argc, char **argv)
{
    static const struct option longopts[] = {
        RECORDED_LONGOPTS,
        {"messages", no_argument, NULL, 'm'},
        {"request", required_argument, NULL, 'r'},
        {"full", no_argument, NULL, 'F'},
        {NULL, 0, NULL, 0},
    };
    struct recorded_args a;
    struct show_opts so = {false, false, 0};
    struct audit_set set;
    long n;
    int c, rc;
    opterr = 0;
    optind = 1;
    recorded_args_init(&a);
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (c == 'm')
            so.messages = true;
        else if (c == 'F')
            so.full = true;
        else if (c == 'r') {
            if (cli_parse_long(optarg, 1, LONG_MAX, &n))
                return cli_usage_error("show",
                                       "--request '%s' is not an exchange "
                                       "id: give the number after '#' in "
                                       "'fidelity show SESSION'",
                                       optarg);
            so.request = n;
            so.messages = true;
        } else if (!recorded_take_opt(&a, c, optarg))
            return cli_bad_option("show", c, argv);
    }
    if (optind != argc - 1)
        return cli_usage_error("show", "needs one SESSION id (see 'fidelity "
                                       "sessions')");
    if ((rc = cli_check_output("show", "--json", a.json)))
        return rc;
    audit_set_init(&set);
    if (!(rc = recorded_load("show", &a, argv[optind], &set)))
        rc = show_loaded(argv[optind], &a, &set, &so);
    audit_set_release(&set);
    return rc;
}
