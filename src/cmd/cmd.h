/*
 * cmd: the command table and the helpers every cmd_*.c shares. Only code
 * under src/cmd/ prints errors and chooses exit codes; the subsystems it
 * calls return -errno and fill a struct diag.
 */
#ifndef CMD_CMD_H
#define CMD_CMD_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "core/diag.h"

/* Exit codes, the same for every command, so CI can gate on them. */
enum {
    EXIT_PASS = 0,         /* ran, and what was measured passed */
    EXIT_FAIL = 1,         /* ran, and a threshold or check failed */
    EXIT_USAGE = 2,        /* bad option, bad config, bad input file */
    EXIT_UNREACHABLE = 3,  /* an endpoint could not be reached */
    EXIT_INTERNAL = 4,     /* store or I/O failure on this machine */
    EXIT_INTERRUPTED = 130 /* stopped by Ctrl-C (SIGINT), as a shell says */
};

struct cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `fidelity help` */
    const char *help;    /* full text for `fidelity help NAME`, examples */
};

extern const struct cmd commands[];
const struct cmd *cmd_find(const char *name);

/* Prints "fidelity NAME: MSG" and a hint line to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints "fidelity NAME: MSG" to stderr and returns code. */
int cli_error(const char *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Handles getopt_long's '?' and ':' returns (opterr must be 0 and the
 * optstring must start with ':'): a one-line error naming the option, a
 * hint, and EXIT_USAGE. */
int cli_bad_option(const char *cmd, int c, char **argv);
/* "unknown option 'ARG'" with, when the command's help names an option
 * close to it (a few letters off, or the start of one), "; did you mean
 * '--NAME'?"; then the hint line. Returns EXIT_USAGE. */
int cli_unknown_option(const char *cmd, const char *arg);
/* One long option as the help text of a command documents it. */
struct cli_opt {
    char name[48]; /* "--json" */
    char arg[64];  /* its value's name ("FILE", "error|oldest"); "" for a
                    * flag */
    char desc[96]; /* the table's words for it; "" when it shares a line */
};
/* The long options the help text of cmd documents, in order, each once:
 * those of its usage lines ("[--db FILE]") and of its option tables (a
 * line that starts with spaces and "--", and the options after ", " or
 * two spaces on it: "--golden URL, --candidate URL"); not options named
 * in prose. The one table behind the man pages, did-you-mean and the
 * shell completion. A fresh array (free it); *n its length. */
struct cli_opt *cli_help_opts(const char *cmd, size_t *n);
/* A URL given as a server's base (opt, e.g. "--endpoint") that ends in an
 * API path (/v1/chat/completions, /v1/completions, /v1/models, /generate,
 * /tokenize, ...): EXIT_USAGE after a message giving the base URL to use
 * instead; else 0. */
int cli_check_base_url(const char *cmd, const char *opt, const char *url);
/* SIGINT ends the process with EXIT_INTERRUPTED (main installs it for
 * every command; commands that stop cleanly on their own replace it and
 * put it back). */
void cli_sigint_exit(int sig);

/* Prints the command's help to stdout; returns EXIT_PASS. */
int cli_help(const char *cmd);

/* Parses "HOST:PORT" (HOST may be empty for 127.0.0.1; PORT 0 picks one).
 * host is a fresh string. */
int cli_parse_listen(const char *s, char **host, int *port, struct diag *d);
/* Whether a listen host is a loopback address: 1 when every address it
 * resolves to is (127.0.0.0/8, ::1, or 127.x mapped into IPv6), 0 when
 * one is not (0.0.0.0, ::, a LAN address), -1 when it does not resolve
 * (the bind will say why). */
int cli_is_loopback(const char *host);
/* The rule of every listening command (record, sim): a --listen address
 * must be provably loopback (every address its host resolves to is)
 * unless allow_remote; '*', a name that does not resolve and every form
 * of 0.0.0.0 and :: are not. 0 (with *remote set when the address is not
 * loopback, for the caller's warning), or EXIT_USAGE after a message
 * naming --allow-remote. */
int cli_check_listen(const char *cmd, const char *listen, const char *host,
                     bool allow_remote, bool *remote);
/* host as it is written in a URL: an IPv6 address in brackets (RFC 3986
 * section 3.2.2), anything else as it is. Fresh string. */
char *cli_url_host(const char *host);
/* The store used when no --db is given: $FIDELITY_DB, else
 * STORE_DEFAULT_PATH. */
const char *cli_default_db(void);
/* Parses a whole decimal number in [min, max]. */
int cli_parse_long(const char *s, long min, long max, long *out);
int cli_parse_double(const char *s, double min, double max, double *out);

/* The store options of the commands that save results (probe, drift):
 * the same names and words in each help. */
#define CLI_STORE_HELP                                                         \
    "  --db FILE             store (default $FIDELITY_DB or fidelity.db)\n"    \
    "  --no-store            save no results in the store and reuse none\n"

/* Checks before work: each is called after the options are parsed and
 * before any request is sent or any server is started, so that a path that
 * cannot be used is told at once, by the name the user gave.
 *
 * cli_check_output: an output FILE given as opt (e.g. "--json"), "-" and
 * NULL passing: its folder must exist and be writable, and the file, when
 * it exists, must be a writable file. 0, or EXIT_USAGE after the message.
 * cli_check_outdir: the same for a folder that the command creates (or
 * reuses when it exists).
 * cli_check_input: an input FILE must be a readable file. 0 or EXIT_USAGE.
 * cli_check_store: the store a command will write: an existing file must
 * open as a fidelity store (EXIT_INTERNAL otherwise: "not a database");
 * a new one must be creatable (cli_check_output's rule, EXIT_USAGE). */
int cli_check_output(const char *cmd, const char *opt, const char *path);
int cli_check_outdir(const char *cmd, const char *opt, const char *path);
int cli_check_input(const char *cmd, const char *opt, const char *path);
int cli_check_store(const char *cmd, const char *path);

/* Writes j (pretty, sorted keys) to path, "-" meaning standard output. */
int cli_json_write(json_t *j, const char *path, struct diag *d);
/* The same for any writer: write(f, ud) puts the document (without its
 * final newline) on f, nonzero on failure; path "-" is standard output,
 * any other is written through PATH.tmp and renamed. */
int cli_write_out(const char *path, int (*write)(FILE *f, void *ud), void *ud,
                  struct diag *d);

/* The readiness request (cmd/ready.c): GETs BASE/v1/models with headers
 * and waits at most timeout_ms for any answer, drawing on a terminal what it
 * waits for once the wait passes 2 s. 0 when a JSON answer came (any
 * status: what it says is for the caller's own requests) or an error
 * status with no body (a server without /v1/models); else one line
 * "fidelity CMD: WHAT: ..." says why (unreachable, no answer in time, or an
 * answer that is not JSON, with its status, content type and first bytes)
 * and EXIT_UNREACHABLE is returned. A refused connection (nothing listens
 * yet) is tried again every 0.2 s until timeout_ms has passed; a negative
 * timeout_ms, the default CLI_READY_DEFAULT, waits -timeout_ms for an
 * answer but fails at once on a refused connection (a server that is down
 * is told at once unless --ready-timeout says it may still be starting). */
#define CLI_READY_TIMEOUT_MS 30000L
#define CLI_READY_DEFAULT (-CLI_READY_TIMEOUT_MS)
int cli_ready(const char *cmd, const char *what, const char *base,
              const char *const *headers, long timeout_ms);
/* Parses --ready-timeout SEC (0.1-86400, fractions allowed) into *ms. */
int cli_parse_ready_timeout(const char *s, long *ms);

/* True when fd is a terminal and progress lines should be drawn. */
bool cli_is_tty(int fd);

#endif
