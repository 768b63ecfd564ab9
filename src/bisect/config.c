/*
 * bisect/config: reads the bisect CONFIG file (format: docs/BISECT.md) into
 * a struct bisect_config. One pass over the lines fills the sections through
 * a table of known keys per section; a second pass checks what only the
 * whole file can tell (a command with no {port}, no toggles). Every message
 * names the file and line and says what to change.
 */
#include "bisect/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/num.h"
#include "core/xalloc.h"

#define CONFIG_MAX_BYTES (1 << 20)
#define CONFIG_MAX_TOGGLES 64

enum section {
    SEC_NONE,
    SEC_SERVER,
    SEC_GOLDEN,
    SEC_MEASURE,
    SEC_TOGGLE,
    SEC_SLURM
};

struct key {
    enum section sec;
    const char *name;
    bool repeat;
};

static const struct key keys[] = {
    {SEC_SERVER, "command", false},
    {SEC_SERVER, "env", true},
    {SEC_SERVER, "workdir", false},
    {SEC_SERVER, "ready_url", false},
    {SEC_SERVER, "ready_timeout", false},
    {SEC_SERVER, "stop_signal", false},
    {SEC_SERVER, "stop_grace", false},
    {SEC_SERVER, "port", false},
    {SEC_SERVER, "launcher", false},
    {SEC_GOLDEN, "url", false},
    {SEC_GOLDEN, "file", false},
    {SEC_MEASURE, "profile", false},
    {SEC_MEASURE, "model", false},
    {SEC_MEASURE, "drift_args", false},
    {SEC_MEASURE, "probe_args", false},
    {SEC_TOGGLE, "args", false},
    {SEC_TOGGLE, "env", true},
    {SEC_TOGGLE, "description", false},
    {SEC_TOGGLE, "path", false},
    {SEC_SLURM, "partition", false},
    {SEC_SLURM, "account", false},
    {SEC_SLURM, "nodes", false},
    {SEC_SLURM, "gpus_per_node", false},
    {SEC_SLURM, "time", false},
    {SEC_SLURM, "sbatch", true},
    {SEC_SLURM, "host", false},
    {SEC_SLURM, "queue_timeout", false},
};

static const char *const sec_names[] = {"",        "server",      "golden",
                                        "measure", "toggle NAME", "slurm"};

struct parser {
    struct bisect_config *c;
    struct diag *d;
    const char *file;
    enum section sec;
    struct bisect_toggle *tog;
    int seen_line[sizeof(keys) / sizeof(keys[0])]; /* this section's */
    int sec_line[SEC_SLURM + 1]; /* where each named section began */
};

void bisect_config_init(struct bisect_config *c)
{
    memset(c, 0, sizeof(*c));
    c->ready_timeout = 600;
    c->stop_signal = SIGTERM;
    c->stop_grace = 30;
    c->slurm.nodes = 1;
    c->slurm.queue_timeout = 3600;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void bisect_config_release(struct bisect_config *c)
{
    free(c->file);
    free(c->command);
    free_strv(c->env, c->n_env);
    free(c->workdir);
    free(c->ready_url);
    free(c->golden_url);
    free(c->golden_file);
    free(c->profile);
    free(c->model);
    free(c->drift_args);
    free(c->probe_args);
    for (size_t i = 0; i < c->n_toggles; i++) {
        struct bisect_toggle *t = &c->toggles[i];
        free(t->name);
        free(t->args);
        free_strv(t->env, t->n_env);
        free(t->description);
    }
    free(c->toggles);
    free(c->slurm.partition);
    free(c->slurm.account);
    free(c->slurm.time);
    free_strv(c->slurm.sbatch, c->slurm.n_sbatch);
    free(c->slurm.host);
    bisect_config_init(c);
}

const char *bisect_path_name(enum bisect_path p)
{
    static const char *const names[] = {"unknown", "prefill", "decode", "both"};
    return names[p];
}

static const struct {
    const char *name;
    int sig;
} sigs[] = {{"TERM", SIGTERM}, {"INT", SIGINT},   {"KILL", SIGKILL},
            {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
            {"USR2", SIGUSR2}};

int bisect_signal_parse(const char *s)
{
    long n;
    if (!num_parse_long(s, 1, 64, &n))
        return (int)n;
    if (!strncmp(s, "SIG", 3))
        s += 3;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (!strcmp(s, sigs[i].name))
            return sigs[i].sig;
    return 0;
}

const char *bisect_signal_name(int sig)
{
    static const char *const full[] = {"SIGTERM", "SIGINT",  "SIGKILL",
                                       "SIGHUP",  "SIGQUIT", "SIGUSR1",
                                       "SIGUSR2"};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (sigs[i].sig == sig)
            return full[i];
    return "signal";
}

char *bisect_expand(const char *tmpl, int port, int slot)
{
    struct buf b = BUF_INIT;
    for (const char *p = tmpl; *p; p++) {
        if (!strncmp(p, "{port}", 6) && port >= 0) {
            buf_printf(&b, "%d", port);
            p += 5;
        } else if (!strncmp(p, "{slot}", 6)) {
            buf_printf(&b, "%d", slot);
            p += 5;
        } else {
            buf_addch(&b, *p);
        }
    }
    return buf_detach(&b, NULL);
}

static int fail(struct parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0)
        return diag_set(p->d, EINVAL, "%s:%d: %s", p->file, line, msg);
    return diag_set(p->d, EINVAL, "%s: %s", p->file, msg);
}

/* Every {...} in v is {port} or {slot}. */
static int check_placeholders(struct parser *p, int line, const char *key,
                              const char *v)
{
    for (const char *s = strchr(v, '{'); s; s = strchr(s + 1, '{')) {
        if (!strncmp(s, "{port}", 6) || !strncmp(s, "{slot}", 6))
            continue;
        const char *e = strchr(s, '}');
        int n = e && e - s < 40 ? (int)(e - s + 1) : 1;
        return fail(p, line,
                    "unknown placeholder '%.*s' in '%s'; the placeholders are "
                    "{port} and {slot}",
                    n, s, key);
    }
    return 0;
}

static int check_env(struct parser *p, int line, const char *v)
{
    const char *eq = strchr(v, '=');
    bool ok = eq && eq > v && !isdigit((unsigned char)v[0]);
    for (const char *s = v; ok && s < eq; s++)
        ok = isalnum((unsigned char)*s) || *s == '_';
    if (!ok)
        return fail(p, line,
                    "env '%s' is not NAME=VALUE; write e.g. "
                    "'env = CUDA_VISIBLE_DEVICES={slot}'",
                    v);
    return 0;
}

static int check_url(struct parser *p, int line, const char *key, const char *v)
{
    if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
        return fail(p, line, "'%s' must start with http:// or https://", key);
    return 0;
}

/* [golden] url or file, not both; a relative file is the config's
 * directory's. */
static int golden_key(struct parser *p, int line, const char *k, const char *v)
{
    struct bisect_config *c = p->c;
    if (c->golden_url || c->golden_file)
        return fail(p, line,
                    "[golden] has both 'url' and 'file'; keep one: a "
                    "running golden, or a saved golden file");
    if (!strcmp(k, "url")) {
        c->golden_url = xstrdup(v);
        return check_url(p, line, k, v);
    }
    if (!*v)
        return fail(p, line,
                    "'file' is empty; give the path of a saved golden "
                    "('fidelity drift --golden URL --save-golden FILE')");
    const char *slash = strrchr(p->file, '/');
    if (*v == '/' || !slash)
        c->golden_file = xstrdup(v);
    else
        c->golden_file =
            xasprintf("%.*s/%s", (int)(slash - p->file), p->file, v);
    return 0;
}

static int add_env(struct parser *p, int line, char ***v, size_t *n,
                   const char *val)
{
    int rc = check_env(p, line, val);
    if (!rc)
        rc = check_placeholders(p, line, "env", val);
    if (rc)
        return rc;
    *v = xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = xstrdup(val);
    return 0;
}

static int set_number(struct parser *p, int line, const char *key,
                      const char *v, double max, double *out)
{
    if (num_parse_double(v, 0, max, out))
        return fail(p, line, "'%s' must be a number of seconds, 0 to %g", key,
                    max);
    return 0;
}

static int server_key(struct parser *p, int line, const char *k, const char *v)
{
    struct bisect_config *c = p->c;
    if (!strcmp(k, "command")) {
        c->command = xstrdup(v);
        c->command_line = line;
        return check_placeholders(p, line, k, v);
    }
    if (!strcmp(k, "env"))
        return add_env(p, line, &c->env, &c->n_env, v);
    if (!strcmp(k, "workdir")) {
        c->workdir = xstrdup(v);
        return 0;
    }
    if (!strcmp(k, "ready_url")) {
        c->ready_url = xstrdup(v);
        int rc = check_url(p, line, k, v);
        return rc ? rc : check_placeholders(p, line, k, v);
    }
    if (!strcmp(k, "ready_timeout"))
        return set_number(p, line, k, v, 86400, &c->ready_timeout);
    if (!strcmp(k, "stop_grace"))
        return set_number(p, line, k, v, 3600, &c->stop_grace);
    if (!strcmp(k, "stop_signal")) {
        c->stop_signal = bisect_signal_parse(v);
        if (!c->stop_signal)
            return fail(p, line,
                        "unknown stop_signal '%s'; use SIGTERM, SIGINT, "
                        "SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2 or a number",
                        v);
        return 0;
    }
    if (!strcmp(k, "launcher")) {
        if (!strcmp(v, "local") || !strcmp(v, "slurm")) {
            c->launcher = *v == 's' ? BISECT_LAUNCH_SLURM : BISECT_LAUNCH_LOCAL;
            return 0;
        }
        return fail(p, line, "unknown launcher '%s'; use local or slurm", v);
    }
    /* port */
    long n;
    if (num_parse_long(v, 1, 65000, &n))
        return fail(p, line,
                    "'port' must be a port number (1-65000), the first slot's "
                    "port; leave it out to use free ports");
    c->first_port = (int)n;
    return 0;
}

static int measure_key(struct parser *p, int line, const char *k, const char *v)
{
    struct bisect_config *c = p->c;
    if (!strcmp(k, "profile")) {
        if (strcmp(v, "quick") && strcmp(v, "test"))
            return fail(p, line, "unknown profile '%s'; use quick or test", v);
        c->profile = xstrdup(v);
    } else if (!strcmp(k, "model")) {
        c->model = xstrdup(v);
    } else if (!strcmp(k, "drift_args")) {
        c->drift_args = xstrdup(v);
    } else {
        c->probe_args = xstrdup(v);
    }
    return 0;
}

static int slurm_count(struct parser *p, int line, const char *k, const char *v,
                       long max, int *out)
{
    long n;
    if (num_parse_long(v, 0, max, &n))
        return fail(p, line, "'%s' must be a whole number, 0 to %ld", k, max);
    *out = (int)n;
    return 0;
}

static int slurm_key(struct parser *p, int line, const char *k, const char *v)
{
    struct bisect_slurm *s = &p->c->slurm;
    if (!strcmp(k, "nodes")) {
        int rc = slurm_count(p, line, k, v, 10000, &s->nodes);
        if (!rc && !s->nodes)
            return fail(p, line, "'nodes' must be 1 or more");
        return rc;
    }
    if (!strcmp(k, "gpus_per_node"))
        return slurm_count(p, line, k, v, 1024, &s->gpus_per_node);
    if (!strcmp(k, "queue_timeout"))
        return set_number(p, line, k, v, 7 * 86400, &s->queue_timeout);
    if (!strcmp(k, "sbatch")) {
        s->sbatch = xrealloc(s->sbatch, (s->n_sbatch + 1) * sizeof(*s->sbatch));
        s->sbatch[s->n_sbatch++] = xstrdup(v);
        return 0;
    }
    char **dst = !strcmp(k, "partition") ? &s->partition
                 : !strcmp(k, "account") ? &s->account
                 : !strcmp(k, "time")    ? &s->time
                                         : &s->host;
    *dst = xstrdup(v);
    return 0;
}

static int toggle_key(struct parser *p, int line, const char *k, const char *v)
{
    struct bisect_toggle *t = p->tog;
    if (!strcmp(k, "args")) {
        t->args = xstrdup(v);
        return check_placeholders(p, line, k, v);
    }
    if (!strcmp(k, "env"))
        return add_env(p, line, &t->env, &t->n_env, v);
    if (!strcmp(k, "description")) {
        t->description = xstrdup(v);
        return 0;
    }
    for (int i = 0; i <= BISECT_PATH_BOTH; i++)
        if (!strcmp(v, bisect_path_name((enum bisect_path)i))) {
            t->path = (enum bisect_path)i;
            return 0;
        }
    return fail(p, line,
                "unknown path '%s' for toggle '%s'; use prefill, decode, both "
                "or unknown",
                v, t->name);
}

static int known_keys(struct parser *p, int line, const char *k)
{
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (keys[i].sec == p->sec)
            buf_printf(&b, "%s%s", b.len ? ", " : "", keys[i].name);
    int rc = fail(p, line, "unknown key '%s' in [%s]; the keys there are %s", k,
                  sec_names[p->sec], buf_str(&b));
    buf_release(&b);
    return rc;
}

static int on_pair(struct parser *p, int line, const char *k, const char *v)
{
    if (p->sec == SEC_NONE)
        return fail(p, line,
                    "'%s' outside a section; start with [server], [golden], "
                    "[measure] or [toggle NAME]",
                    k);
    size_t i = 0;
    while (i < sizeof(keys) / sizeof(keys[0]) &&
           (keys[i].sec != p->sec || strcmp(keys[i].name, k)))
        i++;
    if (i == sizeof(keys) / sizeof(keys[0]))
        return known_keys(p, line, k);
    if (p->seen_line[i] && !keys[i].repeat)
        return fail(p, line,
                    "'%s' set twice in this section (first on line "
                    "%d); keep one",
                    k, p->seen_line[i]);
    p->seen_line[i] = line;
    switch (p->sec) {
    case SEC_SERVER:
        return server_key(p, line, k, v);
    case SEC_GOLDEN:
        return golden_key(p, line, k, v);
    case SEC_MEASURE:
        return measure_key(p, line, k, v);
    case SEC_SLURM:
        return slurm_key(p, line, k, v);
    default:
        return toggle_key(p, line, k, v);
    }
}

static bool is_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_.-", *s))
            return false;
    return true;
}

static int on_toggle(struct parser *p, int line, const char *name)
{
    struct bisect_config *c = p->c;
    if (!is_name(name))
        return fail(p, line,
                    "toggle name '%s' is not a word; use letters, digits, "
                    "'_', '.' and '-'",
                    name);
    for (size_t i = 0; i < c->n_toggles; i++)
        if (!strcmp(c->toggles[i].name, name))
            return fail(p, line,
                        "toggle '%s' defined twice (first on line %d); "
                        "rename or merge one",
                        name, c->toggles[i].line);
    if (c->n_toggles == CONFIG_MAX_TOGGLES)
        return fail(p, line, "more than %d toggles; split the config",
                    CONFIG_MAX_TOGGLES);
    c->toggles = xrealloc(c->toggles, (c->n_toggles + 1) * sizeof(*c->toggles));
    p->tog = &c->toggles[c->n_toggles++];
    memset(p->tog, 0, sizeof(*p->tog));
    p->tog->name = xstrdup(name);
    p->tog->line = line;
    p->sec = SEC_TOGGLE;
    return 0;
}

static int on_section(struct parser *p, int line, char *s)
{
    size_t n = strlen(s);
    if (s[n - 1] != ']')
        return fail(p, line, "section header '%s' has no closing ']'", s);
    s[n - 1] = '\0';
    s++;
    memset(p->seen_line, 0, sizeof(p->seen_line));
    if (!strncmp(s, "toggle", 6) && (s[6] == ' ' || s[6] == '\t')) {
        char *name = s + 6;
        while (*name == ' ' || *name == '\t')
            name++;
        return on_toggle(p, line, name);
    }
    static const struct {
        const char *name;
        enum section sec;
    } secs[] = {{"server", SEC_SERVER},
                {"golden", SEC_GOLDEN},
                {"measure", SEC_MEASURE},
                {"slurm", SEC_SLURM}};
    for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++)
        if (!strcmp(s, secs[i].name)) {
            if (p->sec_line[secs[i].sec])
                return fail(p, line,
                            "[%s] appears twice (first on line %d); keep one",
                            s, p->sec_line[secs[i].sec]);
            p->sec_line[secs[i].sec] = line;
            p->sec = secs[i].sec;
            return 0;
        }
    return fail(p, line,
                "unknown section '[%s]'; the sections are [server], "
                "[golden], [measure], [slurm] and [toggle NAME]",
                s);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int on_line(struct parser *p, int line, char *s)
{
    s = trim(s);
    if (!*s || *s == '#' || *s == ';')
        return 0;
    if (*s == '[')
        return on_section(p, line, s);
    char *eq = strchr(s, '=');
    if (!eq)
        return fail(p, line, "'%s' is not 'key = value' or a [section]", s);
    *eq = '\0';
    char *k = trim(s);
    if (!*k)
        return fail(p, line, "a value with no key; write 'key = value'");
    return on_pair(p, line, k, trim(eq + 1));
}

static int check_whole(struct parser *p)
{
    struct bisect_config *c = p->c;
    if (!c->command)
        return fail(p, 0,
                    "no [server] command; add one with {port} where the "
                    "server's port goes");
    if (!strstr(c->command, "{port}"))
        return fail(p, c->command_line,
                    "command has no '{port}' placeholder; put {port} where "
                    "the server's port goes (e.g. --port {port})");
    if (!c->n_toggles)
        return fail(p, 0,
                    "no [toggle NAME] sections; add the patches to "
                    "bisect");
    for (size_t i = 0; i < c->n_toggles; i++) {
        struct bisect_toggle *t = &c->toggles[i];
        if ((!t->args || !*t->args) && !t->n_env)
            return fail(p, t->line,
                        "toggle '%s' changes nothing; give it 'args' or "
                        "'env'",
                        t->name);
        if (!t->args)
            t->args = xstrdup("");
        if (!t->description)
            t->description = xstrdup("");
    }
    if (!c->ready_url)
        c->ready_url = xstrdup("http://127.0.0.1:{port}/v1/models");
    if (!c->profile)
        c->profile = xstrdup("quick");
    if (!c->drift_args)
        c->drift_args = xstrdup("");
    if (!c->probe_args)
        c->probe_args = xstrdup("");
    return 0;
}

int bisect_config_parse(struct bisect_config *c, const char *file,
                        const char *text, size_t len, struct diag *d)
{
    struct parser p = {.c = c, .d = d, .file = file};
    bisect_config_init(c);
    c->file = xstrdup(file);
    struct buf line = BUF_INIT;
    int rc = 0, no = 0, start = 0;
    for (size_t i = 0; i <= len && !rc; i++) {
        if (i < len && text[i] != '\n') {
            if (text[i] == '\0') {
                rc = fail(&p, no + 1, "a NUL byte; the config is text");
                break;
            }
            buf_addch(&line, text[i]);
            continue;
        }
        no++;
        if (!start)
            start = no;
        if (line.len && line.data[line.len - 1] == '\r')
            line.data[--line.len] = '\0';
        if (i < len && line.len && line.data[line.len - 1] == '\\') {
            line.data[line.len - 1] = ' '; /* continued on the next line */
            continue;
        }
        char empty[1] = "";
        rc = on_line(&p, start, line.data ? line.data : empty);
        buf_reset(&line);
        start = 0;
    }
    buf_release(&line);
    if (!rc)
        rc = check_whole(&p);
    if (rc)
        bisect_config_release(c);
    return rc;
}

int bisect_config_load(struct bisect_config *c, const char *path,
                       struct diag *d)
{
    bisect_config_init(c);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        return diag_set(d, err,
                        "cannot read '%s': %s; give the path of a bisect "
                        "config (docs/BISECT.md)",
                        path, strerror(err));
    }
    struct buf b;
    buf_init(&b, CONFIG_MAX_BYTES);
    char chunk[8192];
    ssize_t n;
    int rc = 0;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0)
        if (buf_add(&b, chunk, (size_t)n)) {
            rc = diag_set(d, EFBIG,
                          "%s: over %d bytes; a config is a short "
                          "text file",
                          path, CONFIG_MAX_BYTES);
            goto out_close;
        }
    if (n < 0) {
        int err = errno;
        rc = diag_set(d, err, "cannot read '%s': %s", path, strerror(err));
        goto out_close;
    }
    rc = bisect_config_parse(c, path, buf_str(&b), b.len, d);
out_close:
    close(fd);
    buf_release(&b);
    return rc;
}
