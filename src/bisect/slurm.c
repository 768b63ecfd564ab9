/*
 * bisect/slurm: the Slurm launcher (see slurm.h). sbatch, squeue and
 * scancel run as child processes in their own process group, so a Ctrl-C
 * at the terminal reaches bisect (which then cancels its jobs) and not a
 * submission in flight whose job id would be lost. Every submitted job is
 * kept in a list until squeue no longer shows it; freeing the launcher
 * cancels what is left there and any job carrying this run's name tag.
 */
#define _GNU_SOURCE
#include "bisect/slurm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/xalloc.h"
#include "http/client.h"

#define MAX_JOBS 256

struct slurm_launcher {
    struct launcher base;
    const struct bisect_slurm *cfg;
    char *dir; /* absolute */
    char tag[16];
    double queue_timeout;
    pthread_mutex_t mu;
    long jobs[MAX_JOBS]; /* submitted, not yet seen gone */
    size_t n_jobs;
};

struct launch {
    struct slurm_launcher *l;
    long id;
    char *name, *log_path, *addr_path, *ready_url;
    double ready_timeout, stop_grace, submitted;
    int stop_signal;
};

/* Runs argv (a Slurm client command) to completion in its own process
 * group; stdout into out, stderr into err (either may be NULL). Its exit
 * code, or -1 when it could not run or was killed. */
static int run_cmd(const char *const argv[], struct buf *out, struct buf *err)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC))
        return -1;
    if (pipe2(pe, O_CLOEXEC)) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    pid_t p = fork();
    if (p == 0) {
        setpgid(0, 0);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execvp(argv[0], (char *const *)argv);
        dprintf(2, "cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    struct pollfd f[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    struct buf *to[2] = {out, err};
    int open_fds = p > 0 ? 2 : 0;
    while (open_fds) {
        if (poll(f, 2, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (f[i].fd < 0 || !f[i].revents)
                continue;
            char b[4096];
            ssize_t n = read(f[i].fd, b, sizeof(b));
            if (n > 0 && to[i] && to[i]->len < 65536)
                buf_add(to[i], b, (size_t)n);
            if (n == 0 || (n < 0 && errno != EINTR)) {
                f[i].fd = -1;
                open_fds--;
            }
        }
    }
    close(po[0]);
    close(pe[0]);
    if (p < 0)
        return -1;
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void chomp(struct buf *b)
{
    while (b->len &&
           (b->data[b->len - 1] == '\n' || b->data[b->len - 1] == ' '))
        b->data[--b->len] = '\0';
}

/* Appends s single-quoted for the shell. */
static void sq(struct buf *b, const char *s)
{
    buf_addch(b, '\'');
    for (; *s; s++)
        if (*s == '\'')
            buf_adds(b, "'\\''");
        else
            buf_addch(b, *s);
    buf_addch(b, '\'');
}

static char *absolute(const char *path)
{
    if (path[0] == '/')
        return xstrdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return xstrdup(path);
    return xasprintf("%s/%s", cwd, path);
}

static void name_tag(const char *abs_dir, char *tag, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *s = abs_dir; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    snprintf(tag, len, "%08x", h);
}

static char *job_name(const char *tag, const char *name)
{
    return xasprintf("fb-%s-%s", tag, name);
}

static void sbatch_lines(const struct bisect_slurm *cfg, struct buf *out)
{
    if (cfg->partition)
        buf_printf(out, "#SBATCH --partition=%s\n", cfg->partition);
    if (cfg->account)
        buf_printf(out, "#SBATCH --account=%s\n", cfg->account);
    buf_printf(out, "#SBATCH --nodes=%d\n", cfg->nodes);
    if (cfg->gpus_per_node)
        buf_printf(out, "#SBATCH --gres=gpu:%d\n", cfg->gpus_per_node);
    if (cfg->time)
        buf_printf(out, "#SBATCH --time=%s\n", cfg->time);
    for (size_t i = 0; i < cfg->n_sbatch; i++)
        buf_printf(out, "#SBATCH %s\n", cfg->sbatch[i]);
}

/* The shell that picks a port no socket of this node uses (listed in
 * /proc/net/tcp{,6} by hex port), into $port. */
static const char pick_port[] =
    "port=\n"
    "for _ in $(seq 100); do\n"
    "    p=$((RANDOM % 30000 + 20000))\n"
    "    grep -qi \":$(printf %04X \"$p\") \" /proc/net/tcp /proc/net/tcp6 "
    "2>/dev/null || { port=$p; break; }\n"
    "done\n"
    "if [ -z \"$port\" ]; then\n"
    "    echo \"fidelity bisect: no free port on $(hostname)\" >&2\n"
    "    exit 1\n"
    "fi\n";

/* The server started in the background, then the port's listener
 * checked to be its own before the address file tells bisect where to
 * look (as the local launcher checks through bisect_port_listeners and
 * bisect_port_in_tree): each listening socket of $port (state 0A in
 * /proc/net/tcp{,6}, its inode) must be a descriptor of a process the
 * script started (a descendant of $$, from /proc/PID/stat, read through
 * cat: mawk stops at a file that vanished, as processes do). A listener
 * held by anything else (a server of another user that took the port
 * between the pick and the bind, while this job's server failed with
 * "Address already in use") stops the job with the reason in its log, so
 * bisect never measures it. The server's status is the job's. */
static const char launch_and_own[] =
    "/bin/sh -c \"$cmd\" &\n"
    "srv=$!\n"
    "trap 'kill -TERM \"$srv\" 2>/dev/null; wait \"$srv\"; exit 143' TERM "
    "INT\n"
    "ph=$(printf %04X \"$port\")\n"
    "while :; do\n"
    "    if ! kill -0 \"$srv\" 2>/dev/null; then wait \"$srv\"; exit $?; fi\n"
    "    ino=$(awk -v p=\":$ph\" 'FNR > 1 && $4 == \"0A\" && "
    "toupper(substr($2, length($2) - 4)) == p { print $10 }' /proc/net/tcp "
    "/proc/net/tcp6 2>/dev/null)\n"
    "    if [ -n \"$ino\" ]; then\n"
    "        mine=$(cat /proc/[0-9]*/stat 2>/dev/null | awk -v r=$$ '{ n = "
    "$1; s = $0; sub(/^.*\\) /, \"\", s); split(s, f, \" \"); p[n] = f[2] } "
    "END { for (x in p) { y = x; k = 0; while (y != r && (y in p) && k++ < "
    "64) y = p[y]; if (y == r && x != r) print x } }')\n"
    "        for i in $ino; do\n"
    "            held=\n"
    "            for q in $mine; do\n"
    "                ls -l \"/proc/$q/fd\" 2>/dev/null | grep -q "
    "\"socket:\\[$i\\]\" && { held=1; break; }\n"
    "            done\n"
    "            if [ -z \"$held\" ]; then\n"
    "                who=$(for f in /proc/[0-9]*/fd; do ls -l \"$f\" "
    "2>/dev/null | grep -q \"socket:\\[$i\\]\" && { q=${f#/proc/}; "
    "q=${q%/fd}; echo \"pid $q ($(cat /proc/$q/comm 2>/dev/null))\"; "
    "break; }; done)\n"
    "                echo \"fidelity bisect: port $port answers, but its "
    "listener is ${who:-a process} this job did not start (socket $i; this "
    "job's processes: $(echo $mine)); bisect measures only its own "
    "servers\" >&2\n"
    "                kill -TERM \"$srv\" 2>/dev/null; wait \"$srv\"\n"
    "                exit 1\n"
    "            fi\n"
    "        done\n"
    "        break\n"
    "    fi\n"
    "    sleep 0.2\n"
    "done\n";

static void script_for(const struct bisect_slurm *cfg, const char *abs_dir,
                       const char *tag, const struct launch_spec *s,
                       struct buf *out)
{
    char *jn = job_name(tag, s->name);
    char *log = absolute(s->log_path);
    buf_adds(out, "#!/bin/bash\n");
    buf_printf(out, "#SBATCH --job-name=%s\n#SBATCH --output=%s\n", jn, log);
    sbatch_lines(cfg, out);
    buf_printf(out,
               "# fidelity bisect: configuration '%s'. Starts its server on "
               "a free port\n# of this node and writes \"HOST PORT\" to "
               "%s/%s.addr.\n",
               s->name, abs_dir, s->name);
    buf_adds(out, "set -u\n");
    buf_adds(out, pick_port);
    buf_printf(out, "host=\"%s\"\n", cfg->host ? cfg->host : "$(hostname)");
    for (size_t i = 0; i < s->n_env; i++) {
        buf_adds(out, "e=");
        sq(out, s->env[i]);
        buf_adds(out, "; export \"${e//\"{port}\"/$port}\"\n");
    }
    buf_adds(out, "cmd=");
    sq(out, s->command);
    buf_adds(out, "\ncmd=${cmd//\"{port}\"/$port}\n");
    if (s->workdir) {
        buf_adds(out, "cd ");
        sq(out, s->workdir);
        buf_adds(out, " || exit 1\n");
    }
    buf_printf(out, "a=%s/%s.addr\n", abs_dir, s->name);
    buf_adds(out, "echo \"fidelity bisect: starting on $host:$port: $cmd\"\n");
    buf_adds(out, launch_and_own);
    buf_adds(out, "echo \"$host $port\" > \"$a.tmp\" && mv \"$a.tmp\" "
                  "\"$a\"\n"
                  "wait \"$srv\"\nexit $?\n");
    free(jn);
    free(log);
}

void bisect_slurm_script(const struct bisect_slurm *cfg, const char *dir,
                         const struct launch_spec *s, struct buf *out)
{
    char *abs_dir = absolute(dir);
    char tag[16];
    name_tag(abs_dir, tag, sizeof(tag));
    script_for(cfg, abs_dir, tag, s, out);
    free(abs_dir);
}

static void track(struct slurm_launcher *l, long id, bool add)
{
    pthread_mutex_lock(&l->mu);
    if (add && l->n_jobs < MAX_JOBS) {
        l->jobs[l->n_jobs++] = id;
    } else if (!add) {
        for (size_t i = 0; i < l->n_jobs; i++)
            if (l->jobs[i] == id) {
                l->jobs[i] = l->jobs[--l->n_jobs];
                break;
            }
    }
    pthread_mutex_unlock(&l->mu);
}

static int write_text(const char *path, const struct buf *b)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    size_t n = fwrite(b->data, 1, b->len, f);
    int rc = fclose(f) || n != b->len ? -EIO : 0;
    return rc;
}

static int slurm_submit(struct launcher *base, const struct launch_spec *s,
                        struct launch **out, struct diag *d)
{
    struct slurm_launcher *l = (struct slurm_launcher *)base;
    struct buf script = BUF_INIT, o = BUF_INIT, e = BUF_INIT;
    char *path = xasprintf("%s/%s.sbatch", l->dir, s->name);
    char *addr = xasprintf("%s/%s.addr", l->dir, s->name);
    unlink(addr);
    unlink(s->log_path);
    script_for(l->cfg, l->dir, l->tag, s, &script);
    int rc = write_text(path, &script);
    if (rc) {
        diag_set(d, -rc, "cannot write the batch script '%s': %s", path,
                 strerror(-rc));
        goto out_free;
    }
    const char *argv[] = {"sbatch", "--parsable", path, NULL};
    int st = run_cmd(argv, &o, &e);
    chomp(&e);
    char *end = NULL;
    long id = st == 0 ? strtol(buf_str(&o), &end, 10) : 0;
    if (st != 0 || id <= 0 || (*end && *end != ';' && *end != '\n')) {
        rc = diag_set(d, st == 127 || st < 0 ? ENOENT : EINVAL,
                      "sbatch refused '%s' (exit %d): %s", s->name, st,
                      e.len ? buf_str(&e) : buf_str(&o));
        goto out_free;
    }
    track(l, id, true);
    struct launch *x = xcalloc(1, sizeof(*x));
    *x = (struct launch){.l = l,
                         .id = id,
                         .name = xstrdup(s->name),
                         .log_path = xstrdup(s->log_path),
                         .addr_path = addr,
                         .ready_url = xstrdup(s->ready_url),
                         .ready_timeout = s->ready_timeout,
                         .stop_grace = s->stop_grace,
                         .submitted = clock_now_s(),
                         .stop_signal = s->stop_signal};
    addr = NULL;
    *out = x;
out_free:
    free(addr);
    free(path);
    buf_release(&script);
    buf_release(&o);
    buf_release(&e);
    return rc;
}

/* The job's state ("PENDING", "RUNNING", ...) and reason into st and why;
 * an empty state when squeue no longer shows it. -1 when squeue failed. */
static int job_state(long id, char *st, size_t st_len, char *why,
                     size_t why_len)
{
    char ids[32];
    snprintf(ids, sizeof(ids), "%ld", id);
    const char *argv[] = {"squeue", "-h", "--states=all", "-j",
                          ids,      "-o", "%T %r",        NULL};
    struct buf o = BUF_INIT, e = BUF_INIT;
    int rc = run_cmd(argv, &o, &e);
    chomp(&o);
    st[0] = why[0] = '\0';
    if (rc == 0) {
        const char *s = buf_str(&o);
        size_t n = strcspn(s, " ");
        snprintf(st, st_len, "%.*s", (int)n, s);
        snprintf(why, why_len, "%s", s[n] ? s + n + 1 : "");
    } else if (strstr(buf_str(&e), "Invalid job id")) {
        rc = 0; /* purged: long gone */
    }
    buf_release(&o);
    buf_release(&e);
    return rc == 0 ? 0 : -1;
}

static bool is_running(const char *st)
{
    return !strcmp(st, "RUNNING") || !strcmp(st, "CONFIGURING");
}

/* The ready URL with its host and {port} replaced by the job's address
 * from the .addr file; false until the file is there. */
static bool job_url(struct launch *x, char *url, size_t len)
{
    FILE *f = fopen(x->addr_path, "r");
    char host[256];
    int port = 0;
    bool ok = f && fscanf(f, "%255s %d", host, &port) == 2 && port > 0;
    if (f)
        fclose(f);
    if (!ok)
        return false;
    const char *u = x->ready_url;
    const char *h = strstr(u, "://");
    h = h ? h + 3 : u;
    const char *path = h + strcspn(h, "/");
    char *rest = bisect_expand(path, port, 0);
    snprintf(url, len, "%.*s%s:%d%s", (int)(h - u), u, host, port, rest);
    free(rest);
    return true;
}

static bool http_ready(struct http_client *c, const char *url)
{
    struct http_req rq = {.url = url, .timeout_ms = 2000, .max_body = 1 << 20};
    struct http_resp rs;
    http_resp_init(&rs);
    bool ok = !http_do(c, &rq, &rs, NULL) && rs.status == 200;
    http_resp_release(&rs);
    return ok;
}

static int wait_loop(struct launch *x, struct http_client *c,
                     volatile sig_atomic_t *stop, char *addr, size_t addr_len,
                     struct diag *d)
{
    double running_since = 0;
    char url[512] = "";
    for (;;) {
        if (stop && *stop)
            return diag_set(d, EINTR, "interrupted while job %ld waited",
                            x->id);
        char st[64], why[256];
        if (job_state(x->id, st, sizeof(st), why, sizeof(why)))
            return diag_set(d, EIO, "squeue cannot tell job %ld's state",
                            x->id);
        double now = clock_now_s();
        if (!strcmp(st, "PENDING")) {
            if (now - x->submitted >= x->l->queue_timeout)
                return diag_set(d, ETIMEDOUT,
                                "job %ld still pending after %g s (reason: "
                                "%s); raise --queue-timeout or check the "
                                "partition",
                                x->id, x->l->queue_timeout, why);
        } else if (is_running(st)) {
            if (!running_since)
                running_since = now;
            if ((url[0] || job_url(x, url, sizeof(url))) &&
                http_ready(c, url)) {
                launch_base_url(url, addr, addr_len);
                return 0;
            }
            if (now - running_since >= x->ready_timeout)
                return diag_set(d, ETIMEDOUT,
                                "job %ld not ready after %g s (no 200 from "
                                "'%s')",
                                x->id, x->ready_timeout,
                                url[0] ? url : "its address file");
        } else {
            return diag_set(d, ECHILD,
                            "job %ld ended (%s) before the server was ready",
                            x->id, st[0] ? st : "no longer queued");
        }
        clock_nap_ms(300);
    }
}

static int slurm_wait_ready(struct launch *x, volatile sig_atomic_t *stop,
                            char *addr, size_t addr_len, struct diag *d)
{
    struct http_client *c = http_client_new();
    int rc = wait_loop(x, c, stop, addr, addr_len, d);
    http_client_free(c);
    return rc;
}

static const char *slurm_log_path(const struct launch *x)
{
    return x->log_path;
}

/* scancel of the job: sig to the batch shell and its steps, or (sig 0)
 * the job cancelled. */
static void scancel(long id, int sig)
{
    char ids[32], s[48];
    snprintf(ids, sizeof(ids), "%ld", id);
    snprintf(s, sizeof(s), "--signal=%d", sig);
    const char *a1[] = {"scancel", "--full", s, ids, NULL};
    const char *a2[] = {"scancel", ids, NULL};
    run_cmd(sig ? a1 : a2, NULL, NULL);
}

/* A state the job no longer leaves: it holds nothing on its node. */
static bool is_final(const char *st)
{
    static const char *const f[] = {
        "BOOT_FAIL", "CANCELLED",     "COMPLETED", "DEADLINE", "FAILED",
        "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT",  "REVOKED"};
    if (!st[0])
        return true; /* no longer listed */
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (!strcmp(st, f[i]))
            return true;
    return false;
}

/* Waits up to secs for the job to end (or, with only_running, to stop
 * running); true when it did. */
static bool wait_gone(long id, double secs, bool only_running)
{
    double end = clock_now_s() + secs;
    for (;;) {
        char st[64], why[256];
        bool q = job_state(id, st, sizeof(st), why, sizeof(why)) == 0;
        if (q && (is_final(st) ||
                  (only_running && !is_running(st) && strcmp(st, "PENDING"))))
            return true;
        if (clock_now_s() >= end)
            return false;
        clock_nap_ms(200);
    }
}

static int slurm_cancel(struct launch *x, struct diag *d)
{
    if (!x)
        return 0;
    int rc = 0;
    char st[64], why[256];
    if (!job_state(x->id, st, sizeof(st), why, sizeof(why)) && is_running(st) &&
        x->stop_grace > 0) {
        scancel(x->id, x->stop_signal);
        wait_gone(x->id, x->stop_grace, true);
    }
    scancel(x->id, 0);
    if (wait_gone(x->id, 120, false))
        track(x->l, x->id, false);
    else
        rc =
            diag_set(d, ETIMEDOUT, "job %ld still queued after scancel", x->id);
    unlink(x->addr_path);
    free(x->name);
    free(x->log_path);
    free(x->addr_path);
    free(x->ready_url);
    free(x);
    return rc;
}

/* Cancels every queued job of ours whose name carries the tag; their
 * count. */
static size_t cancel_tagged(const char *tag)
{
    const char *argv[] = {"squeue", "-h", "--me", "-o", "%i %j", NULL};
    struct buf o = BUF_INIT;
    size_t n = 0;
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "fb-%s-", tag);
    if (run_cmd(argv, &o, NULL) == 0 && o.len) {
        char *save = NULL;
        for (char *line = strtok_r(o.data, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
            long id = strtol(line, NULL, 10);
            const char *nm = strchr(line, ' ');
            if (id > 0 && nm && !strncmp(nm + 1, prefix, strlen(prefix))) {
                scancel(id, 0);
                wait_gone(id, 60, false);
                n++;
            }
        }
    }
    buf_release(&o);
    return n;
}

static void slurm_free(struct launcher *base)
{
    struct slurm_launcher *l = (struct slurm_launcher *)base;
    if (!l)
        return;
    for (size_t i = 0; i < l->n_jobs; i++)
        scancel(l->jobs[i], 0);
    for (size_t i = 0; i < l->n_jobs; i++)
        wait_gone(l->jobs[i], 60, false);
    cancel_tagged(l->tag);
    pthread_mutex_destroy(&l->mu);
    free(l->dir);
    free(l);
}

static const struct launcher_ops slurm_ops = {
    .name = "slurm",
    .port_on_node = true,
    .submit = slurm_submit,
    .wait_ready = slurm_wait_ready,
    .log_path = slurm_log_path,
    .cancel = slurm_cancel,
    .free = slurm_free,
};

struct launcher *launch_slurm_new(const struct bisect_slurm *cfg,
                                  const char *dir, double queue_timeout,
                                  bool resume, size_t *cancelled,
                                  struct diag *d)
{
    char *abs_dir = realpath(dir, NULL);
    if (!abs_dir) {
        diag_set(d, errno, "cannot resolve '%s': %s", dir, strerror(errno));
        return NULL;
    }
    const char *argv[] = {"squeue", "-h", "--me", "-o", "%i", NULL};
    struct buf e = BUF_INIT;
    int st = run_cmd(argv, NULL, &e);
    chomp(&e);
    if (st != 0) {
        diag_set(d, st == 127 || st < 0 ? ENOENT : EIO,
                 "squeue does not answer (exit %d): %s; is SLURM_CONF or "
                 "the controller right?",
                 st, e.len ? buf_str(&e) : "no output");
        buf_release(&e);
        free(abs_dir);
        return NULL;
    }
    buf_release(&e);
    struct slurm_launcher *l = xcalloc(1, sizeof(*l));
    l->base.ops = &slurm_ops;
    l->cfg = cfg;
    l->dir = abs_dir;
    l->queue_timeout = queue_timeout;
    name_tag(abs_dir, l->tag, sizeof(l->tag));
    pthread_mutex_init(&l->mu, NULL);
    size_t n = resume ? cancel_tagged(l->tag) : 0;
    if (cancelled)
        *cancelled = n;
    return &l->base;
}
