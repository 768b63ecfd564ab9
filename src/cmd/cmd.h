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
    EXIT_PASS = 0,        /* ran, and what was measured passed */
    EXIT_FAIL = 1,        /* ran, and a threshold or check failed */
    EXIT_USAGE = 2,       /* bad option, bad config, bad input file */
    EXIT_UNREACHABLE = 3, /* an endpoint could not be reached */
    EXIT_INTERNAL = 4     /* store or I/O failure on this machine */
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
/* host as it is written in a URL: an IPv6 address in brackets (RFC 3986
 * section 3.2.2), anything else as it is. Fresh string. */
char *cli_url_host(const char *host);
/* Parses a whole decimal number in [min, max]. */
int cli_parse_long(const char *s, long min, long max, long *out);
int cli_parse_double(const char *s, double min, double max, double *out);

/* Writes j (pretty, sorted keys) to path, "-" meaning standard output. */
int cli_json_write(json_t *j, const char *path, struct diag *d);

/* True when fd is a terminal and progress lines should be drawn. */
bool cli_is_tty(int fd);

#endif
