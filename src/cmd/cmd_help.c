/*
 * cmd_help: `fidelity help [COMMAND]`, the command list and each command's
 * full help with examples. `fidelity help --man [COMMAND]` (not listed, for
 * `make man` and `make install`) prints the same text as a man page,
 * fidelity(1) or fidelity-COMMAND(1), so the pages never disagree with the
 * help: the usage lines become the SYNOPSIS, prose at the left margin is
 * filled, indented lines (option tables, examples) are kept as they are.
 * `fidelity help --completion bash|zsh` (completion.c) prints the shell
 * completion, from the same option tables.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "version.h"

const char CMD_HELP_HELP[] =
    "usage: fidelity help [COMMAND]\n"
    "\n"
    "Without COMMAND, lists the commands. With one, prints its options and\n"
    "examples; 'fidelity COMMAND --help' prints the same. 'man fidelity'\n"
    "and 'man fidelity-COMMAND' show the same text once installed.\n"
    "'fidelity help --completion bash' (or zsh) prints the shell completion\n"
    "that 'make install' installs, from the same option tables.\n";

static const char INTRO[] =
    "fidelity finds out why an LLM deployment forgets: what the harness\n"
    "sent, what the server kept, where recall breaks, and which patch\n"
    "moved the numbers.\n";

static void list(FILE *out)
{
    fprintf(out,
            "usage: fidelity <command> [options]\n"
            "       fidelity --version\n\n%s\ncommands:\n",
            INTRO);
    for (const struct cmd *c = commands; c->name; c++)
        fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fputs("\nSee 'fidelity help COMMAND' for one command's options and "
          "examples.\n",
          out);
}

/* Writes n bytes of s as roff text: backslashes, minus signs and quotes
 * escaped so that options and examples copy back exactly, and a leading
 * control character neutralised. */
static void roff_text(FILE *out, const char *s, size_t n)
{
    if (n && (s[0] == '.' || s[0] == '\''))
        fputs("\\&", out);
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '\\':
            fputs("\\e", out);
            break;
        case '-':
            fputs("\\-", out);
            break;
        case '\'':
            fputs("\\(aq", out);
            break;
        case '`':
            fputs("\\(ga", out);
            break;
        case '"':
            fputs("\\(dq", out);
            break;
        default:
            fputc(s[i], out);
        }
    }
}

static void roff_line(FILE *out, const char *s, size_t n)
{
    roff_text(out, s, n);
    fputc('\n', out);
}

/* A section title: "examples:" -> EXAMPLES, "grid:" -> a subsection. */
static void heading(FILE *out, const char *s, size_t n)
{
    if (n == 8 && !strncmp(s, "options", 7)) {
        fputs(".SH OPTIONS\n", out);
        return;
    }
    if (n == 9 && !strncmp(s, "examples", 8)) {
        fputs(".SH EXAMPLES\n", out);
        return;
    }
    fputs(".SS \"", out);
    roff_text(out, s, n - 1);
    fputs("\"\n", out);
}

static bool is_heading(const char *line, size_t n, bool after_prose,
                       const char *next)
{
    return !after_prose && n > 1 && n < 72 && line[0] != ' ' &&
           line[n - 1] == ':' && memchr(line, ':', n - 1) == NULL &&
           (*next == ' ' || *next == '\n' || *next == '\0');
}

static bool starts_with_ci(const char *s, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && !strncasecmp(s, prefix, k);
}

enum mode { START, PROSE, VERBATIM, GAP };

/* Body of a page: everything after the usage lines. */
static void man_body(FILE *out, const char *s)
{
    enum mode m = START;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        const char *next = nl ? nl + 1 : s + n;
        if (n == 0) {
            if (m == VERBATIM)
                fputs(".fi\n", out);
            if (m != START)
                m = GAP;
        } else if (is_heading(s, n, m == PROSE, next)) {
            if (m == VERBATIM)
                fputs(".fi\n", out);
            heading(out, s, n);
            m = START;
        } else if (m != PROSE && starts_with_ci(s, n, "exit status: ")) {
            if (m == VERBATIM)
                fputs(".fi\n", out);
            fputs(".SH \"EXIT STATUS\"\n", out);
            roff_line(out, s + 13, n - 13);
            m = PROSE;
        } else if (s[0] == ' ') {
            if (m == GAP)
                fputs(".PP\n", out);
            if (m != VERBATIM)
                fputs(".nf\n", out);
            roff_line(out, s, n);
            m = VERBATIM;
        } else {
            if (m == VERBATIM)
                fputs(".fi\n", out);
            if (m == GAP || m == VERBATIM)
                fputs(".PP\n", out);
            roff_line(out, s, n);
            m = PROSE;
        }
        s = next;
    }
    if (m == VERBATIM)
        fputs(".fi\n", out);
}

static void man_head(FILE *out, const char *page, const char *summary)
{
    char up[64];
    size_t i;
    for (i = 0; page[i] && i < sizeof(up) - 1; i++)
        up[i] =
            (char)(page[i] >= 'a' && page[i] <= 'z' ? page[i] - 32 : page[i]);
    up[i] = '\0';
    fprintf(out,
            ".\\\" %s(1), generated by 'fidelity help --man' from the help\n"
            ".\\\" text in src/cmd/; run 'make man' after changing it.\n"
            ".TH \"",
            page);
    roff_text(out, up, i);
    fprintf(out, "\" 1 \"\" \"fidelity %s\" \"fidelity manual\"\n",
            FIDELITY_VERSION);
    fputs(".nh\n.ad l\n.SH NAME\n", out);
    roff_text(out, page, strlen(page));
    fputs(" \\- ", out);
    roff_line(out, summary, strlen(summary));
}

static void see_also(FILE *out, const char *self)
{
    fputs(".SH \"SEE ALSO\"\n", out);
    bool first = true;
    if (strcmp(self, "fidelity")) {
        fputs(".BR fidelity (1)", out);
        first = false;
    }
    for (const struct cmd *c = commands; c->name; c++) {
        if (!strcmp(self + (strncmp(self, "fidelity-", 9) ? 0 : 9), c->name))
            continue;
        fprintf(out, "%s.BR fidelity\\-%s (1)", first ? "" : ",\n", c->name);
        first = false;
    }
    fputs("\n.PP\nThe documents under docs/ in the source tree describe "
          "each command's\nformats and rules in full.\n",
          out);
}

/* fidelity-NAME(1) from the command's help text. */
static void man_command(FILE *out, const struct cmd *c)
{
    char page[64];
    const char *s = c->help;
    snprintf(page, sizeof(page), "fidelity-%s", c->name);
    man_head(out, page, c->summary);
    fputs(".SH SYNOPSIS\n.nf\n", out);
    for (bool first = true; *s && *s != '\n'; first = false) {
        const char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) : strlen(s);
        size_t skip = 0;
        if (first && !strncmp(s, "usage: ", 7))
            skip = 7;
        else if (!first)
            while (skip < 7 && skip < n && s[skip] == ' ')
                skip++;
        roff_line(out, s + skip, n - skip);
        s = nl ? nl + 1 : s + n;
    }
    fputs(".fi\n.SH DESCRIPTION\n", out);
    man_body(out, s);
    see_also(out, page);
}

/* fidelity(1): the command list, the exit codes and the environment. */
static void man_main(FILE *out)
{
    man_head(out, "fidelity", "find out why an LLM deployment forgets");
    fputs(".SH SYNOPSIS\n.nf\nfidelity <command> [options]\n"
          "fidelity \\-\\-version\n.fi\n.SH DESCRIPTION\n",
          out);
    roff_text(out, INTRO, strlen(INTRO));
    fputs(".SH COMMANDS\n", out);
    for (const struct cmd *c = commands; c->name; c++) {
        fprintf(out, ".TP\n.BR fidelity\\-%s (1)\n", c->name);
        roff_line(out, c->summary, strlen(c->summary));
    }
    fputs(".PP\n\\(aqfidelity COMMAND \\-\\-help\\(aq prints a command\\(aqs "
          "options "
          "and examples.\n",
          out);
    fputs(".SH \"EXIT STATUS\"\nThe same for every command:\n"
          ".TP\n0\nran, and what was measured passed\n"
          ".TP\n1\nran, and a threshold or check failed\n"
          ".TP\n2\nbad option, bad configuration, bad input file\n"
          ".TP\n3\nan endpoint could not be reached, or answered but is not "
          "an OpenAI\\-compatible LLM server\n"
          ".TP\n4\nstore or I/O failure on this machine\n"
          ".SH ENVIRONMENT\n.TP\n.B FIDELITY_DB\n"
          "the store of the commands that take \\-\\-db (default "
          "fidelity.db)\n"
          ".TP\n.B OPENAI_API_KEY\n"
          "the bearer token probe sends when \\-\\-api\\-key is not given; "
          "never printed or stored\n",
          out);
    see_also(out, "fidelity");
}

static int man(int argc, char **argv)
{
    if (argc > 3)
        return cli_usage_error("help", "--man takes one command name, got %d",
                               argc - 2);
    if (argc < 3) {
        man_main(stdout);
        return EXIT_PASS;
    }
    const struct cmd *c = cmd_find(argv[2]);
    if (!c)
        return cli_usage_error("help", "'%s' is not a fidelity command",
                               argv[2]);
    man_command(stdout, c);
    return EXIT_PASS;
}

int cmd_help(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--man"))
        return man(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "--completion"))
        return argc == 3 ? cli_completion(argv[2])
                         : cli_usage_error("help", "--completion wants one "
                                                   "shell: bash or zsh");
    if (argc < 2 || argv[1][0] == '-') {
        list(stdout);
        return EXIT_PASS;
    }
    if (argc > 2)
        return cli_usage_error("help", "takes one command name, got %d",
                               argc - 1);
    return cli_help(argv[1]);
}
