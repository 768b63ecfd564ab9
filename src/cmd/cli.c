/*
 * cli: error printing, option-value parsing and JSON output shared by every
 * cmd_*.c. Messages follow git: "fidelity probe: cannot open 'x': reason".
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "core/num.h"
#include "core/xalloc.h"
#include "store/store.h"

const struct cmd *cmd_find(const char *name)
{
    for (const struct cmd *c = commands; c->name; c++)
        if (!strcmp(c->name, name))
            return c;
    return NULL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout); /* what was printed comes before the error */
    fprintf(stderr, "fidelity %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nhint: see 'fidelity help %s'\n", cmd);
    return EXIT_USAGE;
}

int cli_error(const char *cmd, int code, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout); /* what was printed comes before the error */
    fprintf(stderr, "fidelity %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int cli_bad_option(const char *cmd, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        return cli_usage_error(cmd, "option '%s' needs a value", arg);
    if (optopt && optopt != '?' && strncmp(arg, "--", 2) != 0)
        return cli_usage_error(cmd, "unknown option '-%c'", optopt);
    return cli_unknown_option(cmd, arg);
}

/* Adds the option at p (just after its "--") to v unless it is there. */
static void add_opt(struct cli_opt **v, size_t *n, const char *p,
                    const char *line_end, bool first_on_line)
{
    size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789-");
    if (len < 2 || p[len - 1] == '-' || len + 3 > sizeof((*v)->name))
        return;
    for (size_t i = 0; i < *n; i++)
        if (!strncmp((*v)[i].name + 2, p, len) && !(*v)[i].name[len + 2])
            return;
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    struct cli_opt *o = &(*v)[(*n)++];
    memset(o, 0, sizeof(*o));
    snprintf(o->name, sizeof(o->name), "--%.*s", (int)len, p);
    const char *q = p + len;
    /* a value: one space or '=' then a word that is not an option */
    if ((*q == ' ' || *q == '=') && q + 1 < line_end &&
        (isalnum((unsigned char)q[1]) || q[1] == '\'')) {
        size_t al = strcspn(q + 1, " ,]\n");
        snprintf(o->arg, sizeof(o->arg), "%.*s", (int)al, q + 1);
        q += 1 + al;
    }
    if (!first_on_line)
        return;
    /* the words after the run of spaces ("(default)" after the value
     * stays out); none when another option follows there */
    const char *d = strstr(q, "  ");
    if (d && d < line_end) {
        d += strspn(d, " ");
        if (strncmp(d, "--", 2))
            snprintf(o->desc, sizeof(o->desc), "%.*s", (int)(line_end - d), d);
    }
}

struct cli_opt *cli_help_opts(const char *cmd, size_t *n)
{
    const struct cmd *c = cmd_find(cmd);
    struct cli_opt *v = NULL;
    bool usage = false;
    *n = 0;
    for (const char *line = c ? c->help : ""; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        size_t ind = strspn(line, " ");
        if (!strncmp(line, "usage:", 6))
            usage = true;
        else if (!ind)
            usage = false;
        if (usage) { /* every "[--x ARG]" and "--x ARG" of the synopsis */
            for (const char *p = line; (p = strstr(p, "--")) && p < end; p += 2)
                if (p[-1] == ' ' || p[-1] == '[' || p[-1] == '|')
                    add_opt(&v, n, p + 2, end, false);
        } else if (ind >= 2 && !strncmp(line + ind, "--", 2)) {
            add_opt(&v, n, line + ind + 2, end, true);
            for (const char *p = line + ind + 2;
                 (p = strstr(p, "--")) && p < end; p += 2)
                if ((p[-1] == ' ' && p[-2] == ' ') ||
                    (p[-1] == ' ' && p[-2] == ','))
                    add_opt(&v, n, p + 2, end, false);
        }
        line = *end ? end + 1 : end;
    }
    return v;
}

/* Levenshtein distance of a and b (each at most 63 bytes looked at). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strnlen(a, 63), lb = strnlen(b, 63), row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int cli_unknown_option(const char *cmd, const char *arg)
{
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg, "="), arg);
    size_t n, best = SIZE_MAX, len = strlen(name);
    struct cli_opt *opts = cli_help_opts(cmd, &n);
    const char *pick = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t dist = edit_distance(name, opts[i].name);
        if (len > 3 && !strncmp(opts[i].name, name, len))
            dist = 1; /* the start of one */
        if (dist < best) {
            best = dist;
            pick = opts[i].name;
        }
    }
    /* a few letters off: at most 2, and at most a third of the name */
    int rc;
    if (pick && best <= 2 && best * 3 <= len)
        rc = cli_usage_error(cmd, "unknown option '%s'; did you mean '%s'?",
                             name, pick);
    else
        rc = cli_usage_error(cmd, "unknown option '%s'", name);
    free(opts);
    return rc;
}

int cli_check_base_url(const char *cmd, const char *opt, const char *url)
{
    static const char *const api[] = {"/v1/chat/completions",
                                      "/chat/completions",
                                      "/v1/completions",
                                      "/completions",
                                      "/v1/models",
                                      "/models",
                                      "/generate",
                                      "/tokenize",
                                      "/detokenize",
                                      "/health",
                                      "/get_server_info"};
    size_t len = strlen(url);
    while (len > 0 && url[len - 1] == '/')
        len--;
    for (size_t i = 0; i < sizeof(api) / sizeof(api[0]); i++) {
        size_t k = strlen(api[i]);
        if (len > k && !strncmp(url + len - k, api[i], k)) {
            size_t base = len - k;
            return cli_usage_error(cmd,
                                   "%s '%s' ends in the API path '%.*s': "
                                   "give the server's base URL instead: %.*s",
                                   opt, url, (int)(len - base), url + base,
                                   (int)base, url);
        }
    }
    return 0;
}

void cli_sigint_exit(int sig)
{
    (void)sig;
    _exit(EXIT_INTERRUPTED);
}

int cli_help(const char *name)
{
    const struct cmd *c = cmd_find(name);
    if (!c)
        return cli_usage_error("help", "'%s' is not a fidelity command", name);
    fputs(c->help, stdout);
    return EXIT_PASS;
}

int cli_parse_listen(const char *s, char **host, int *port, struct diag *d)
{
    const char *colon = strrchr(s, ':');
    long p;
    if (!colon)
        return diag_set(d, EINVAL, "'%s' is not HOST:PORT", s);
    if (cli_parse_long(colon + 1, 0, 65535, &p))
        return diag_set(d, EINVAL, "'%s': port must be 0-65535", s);
    if (colon == s)
        *host = xstrdup("127.0.0.1");
    else if (s[0] == '[' && colon[-1] == ']')
        *host = xstrndup(s + 1, (size_t)(colon - s - 2));
    else
        *host = xstrndup(s, (size_t)(colon - s));
    *port = (int)p;
    return 0;
}

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a =
            &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

int cli_is_loopback(const char *host)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* no AI_PASSIVE: a name that is not an address ('*') must resolve on
     * its own, never become the wildcard address */
    if (!*host || getaddrinfo(host, NULL, &hints, &ai) || !ai)
        return -1;
    int all = 1;
    for (const struct addrinfo *p = ai; p; p = p->ai_next)
        if (!addr_is_loopback(p->ai_addr))
            all = 0;
    freeaddrinfo(ai);
    return all;
}

int cli_check_listen(const char *cmd, const char *listen, const char *host,
                     bool allow_remote, bool *remote)
{
    int lo = cli_is_loopback(host);
    *remote = lo != 1;
    if (allow_remote || lo == 1)
        return 0;
    if (lo < 0)
        return cli_usage_error(cmd,
                               "--listen '%s': '%s' does not resolve to an "
                               "address, so it cannot be shown to be "
                               "loopback. Give a loopback address "
                               "(127.0.0.1, [::1]), or add --allow-remote to "
                               "listen there anyway",
                               listen, host);
    return cli_usage_error(cmd,
                           "--listen '%s' is not a loopback address and %s has "
                           "no authentication: anyone who reaches it uses it. "
                           "Add --allow-remote to listen there anyway",
                           listen,
                           strcmp(cmd, "record") ? "the server" : "the proxy");
}

char *cli_url_host(const char *host)
{
    if (strchr(host, ':'))
        return xasprintf("[%s]", host);
    return xstrdup(host);
}

const char *cli_default_db(void)
{
    const char *p = getenv("FIDELITY_DB");
    return p && *p ? p : STORE_DEFAULT_PATH;
}

int cli_parse_long(const char *s, long min, long max, long *out)
{
    return num_parse_long(s, min, max, out);
}

int cli_parse_double(const char *s, double min, double max, double *out)
{
    return num_parse_double(s, min, max, out);
}

int cli_write_out(const char *path, int (*write)(FILE *f, void *ud), void *ud,
                  struct diag *d)
{
    if (!strcmp(path, "-")) {
        if (write(stdout, ud) || fputc('\n', stdout) == EOF)
            return diag_set(d, EIO, "cannot write JSON to standard output");
        fflush(stdout);
        return 0;
    }
    char *tmp = xasprintf("%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        diag_set(d, e, "cannot write '%s': %s", path, strerror(e));
        free(tmp);
        return -e;
    }
    int bad = write(f, ud) || fputc('\n', f) == EOF;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        int e = errno ? errno : EIO;
        unlink(tmp);
        free(tmp);
        return diag_set(d, e, "cannot write '%s': %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}

static int dump_json(FILE *f, void *ud)
{
    return json_dumpf(
        ud, f, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
}

int cli_json_write(json_t *j, const char *path, struct diag *d)
{
    return cli_write_out(path, dump_json, j, d);
}

/* The folder of path (".", when it names none) into out. */
static void folder_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == path)
        snprintf(out, cap, "/");
    else
        snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

/* The folder that will hold path must exist and take new files. */
static int check_folder(const char *cmd, const char *opt, const char *path)
{
    char dir[PATH_MAX];
    struct stat st;
    folder_of(path, dir, sizeof(dir));
    if (stat(dir, &st))
        return cli_usage_error(cmd,
                               "%s '%s': the folder '%s' does not exist; "
                               "create it first (mkdir -p '%s')",
                               opt, path, dir, dir);
    if (!S_ISDIR(st.st_mode))
        return cli_usage_error(cmd, "%s '%s': '%s' is not a folder", opt, path,
                               dir);
    if (access(dir, W_OK | X_OK))
        return cli_usage_error(cmd,
                               "%s '%s': cannot create files in the folder "
                               "'%s': %s",
                               opt, path, dir, strerror(errno));
    return 0;
}

int cli_check_output(const char *cmd, const char *opt, const char *path)
{
    struct stat st;
    if (!path || !strcmp(path, "-"))
        return 0;
    if (!*path)
        return cli_usage_error(cmd, "%s: the file name is empty", opt);
    if (!stat(path, &st)) {
        if (S_ISDIR(st.st_mode))
            return cli_usage_error(cmd,
                                   "%s '%s' is a folder; give a file name "
                                   "in it",
                                   opt, path);
        if (access(path, W_OK))
            return cli_usage_error(cmd, "%s '%s': cannot write it: %s", opt,
                                   path, strerror(errno));
    }
    return check_folder(cmd, opt, path);
}

int cli_check_outdir(const char *cmd, const char *opt, const char *path)
{
    struct stat st;
    if (!*path)
        return cli_usage_error(cmd, "%s: the folder name is empty", opt);
    if (!stat(path, &st)) {
        if (!S_ISDIR(st.st_mode))
            return cli_usage_error(cmd, "%s '%s' is not a folder", opt, path);
        if (access(path, W_OK | X_OK))
            return cli_usage_error(cmd, "%s '%s': cannot write in it: %s", opt,
                                   path, strerror(errno));
        return 0;
    }
    char trimmed[PATH_MAX];
    snprintf(trimmed, sizeof(trimmed), "%s", path);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--)
        trimmed[n - 1] = '\0';
    return check_folder(cmd, opt, trimmed);
}

int cli_check_input(const char *cmd, const char *opt, const char *path)
{
    struct stat st;
    if (!path)
        return 0;
    if (stat(path, &st))
        return cli_usage_error(cmd, "%s '%s': %s", opt, path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return cli_usage_error(cmd, "%s '%s' is a folder, not a file", opt,
                               path);
    if (access(path, R_OK))
        return cli_usage_error(cmd, "%s '%s': cannot read it: %s", opt, path,
                               strerror(errno));
    return 0;
}

int cli_check_store(const char *cmd, const char *path)
{
    struct stat st;
    struct diag d = {{0}};
    struct db *db;
    if (db_is_url(path)) { /* store_open's message masks the password */
        if (store_open(path, &db, &d))
            return cli_error(cmd, EXIT_INTERNAL, "%s", d.msg);
        store_close(db);
        return 0;
    }
    if (stat(path, &st))
        return cli_check_output(cmd, "--db", path);
    if (S_ISDIR(st.st_mode))
        return cli_usage_error(cmd, "--db '%s' is a folder; give a file name",
                               path);
    if (store_open(path, &db, &d))
        return cli_error(cmd, EXIT_INTERNAL,
                         "%s; give a fidelity store with --db (a new file "
                         "name makes one)",
                         d.msg);
    store_close(db);
    return 0;
}

bool cli_is_tty(int fd)
{
    return isatty(fd) == 1;
}
