/*
 * bisect/local: the local launcher. Each configuration gets a watchdog
 * process W (a child of bisect, in a session of its own, so no signal to
 * bisect's process group reaches it) that starts the server S with
 * /bin/sh -c in S's own process group, its output in the configuration's
 * log. W holds one end of a socket pair whose other end only bisect holds
 * (close-on-exec; W closes every other descriptor, so no other watchdog
 * keeps it open), and first writes S's pid on it. When bisect's end
 * closes, because bisect cancels the launch, exits, or is killed
 * with SIGKILL, W sends the stop signal to S's group, waits the grace
 * period and kills the group. When S exits on its own, W kills what is left
 * of the group and exits with S's status (128 + signal when killed).
 * PR_SET_PDEATHSIG alone would miss the server's own children and fire
 * when the forking thread (not the process) exits, so it is not used.
 * W and S use only async-signal-safe calls between fork and exec. When W
 * itself dies (killed), bisect is told (check, wait_ready: -EOWNERDEAD)
 * and cancel stops S's group itself.
 *
 * Only bisect's own servers are measured: the ready URL's port (when its
 * host is this machine) and {port} must be free before the launch, and
 * once the URL answers, every listener on its port must be a process of
 * W's tree or session (bisect/port.h); otherwise -EADDRINUSE names the
 * port and the process holding it.
 */
#define _GNU_SOURCE
#include "bisect/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bisect/port.h"
#include "core/clock.h"
#include "core/xalloc.h"
#include "http/client.h"

extern char **environ;

struct launch {
    char *name;
    pid_t watchdog;
    pid_t group; /* the server's process group (its pid) */
    int pipe_w;
    char *log_path;
    char *ready_url;
    double ready_timeout;
    int stop_signal;
    double stop_grace;
    bool exited; /* the watchdog has been reaped */
    int status;
};

/* environ with env overriding or adding, in a fresh array (strings
 * borrowed). */
static char **build_envp(char *const *env, size_t n_env)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **e = xcalloc(n + n_env + 1, sizeof(*e));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        for (; j < n_env; j++) {
            size_t nl = strcspn(env[j], "=");
            if (!strncmp(environ[i], env[j], nl) && environ[i][nl] == '=')
                break;
        }
        if (j == n_env)
            e[k++] = environ[i];
    }
    for (size_t j = 0; j < n_env; j++)
        e[k++] = env[j];
    return e;
}

static void close_others(int a, int b)
{
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    if (a > 3)
        close_range(3, (unsigned)a - 1, 0);
    if (b > a + 1)
        close_range((unsigned)a + 1, (unsigned)b - 1, 0);
    close_range((unsigned)b + 1, ~0U, 0);
}

static void reset_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
}

static void write_str(int fd, const char *s)
{
    ssize_t r = write(fd, s, strlen(s));
    (void)r;
}

static __attribute__((noreturn)) void server_main(const struct launch_spec *s,
                                                  char **envp, int log)
{
    reset_signals();
    setpgid(0, 0);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0)
        dup2(in, 0);
    dup2(log, 1);
    dup2(log, 2);
    if (s->workdir && chdir(s->workdir)) {
        write_str(2, "bisect: cannot enter the workdir '");
        write_str(2, s->workdir);
        write_str(2, "'\n");
        _exit(127);
    }
    char *argv[] = {(char *)"sh", (char *)"-c", (char *)s->command, NULL};
    execve("/bin/sh", argv, envp);
    write_str(2, "bisect: cannot run /bin/sh\n");
    _exit(127);
}

static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int launch_pidfd(pid_t p)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, p, 0);
#else
    (void)p;
    return -1;
#endif
}

void launch_wait_fd(int fd, long ms)
{
    if (fd < 0) {
        clock_nap_ms(ms);
        return;
    }
    struct pollfd p = {fd, POLLIN, 0};
    (void)poll(&p, 1, (int)ms);
}

/* Stop signal to the group, the grace, then SIGKILL; reaps S and the
 * orphans of its tree (W is their subreaper). Woken by S's exit (its
 * pidfd); what it leaves in the group is looked at every few ms. */
static void stop_group(pid_t s, int pfd, int sig, double grace)
{
    kill(-s, sig);
    double end = clock_now_s() + grace;
    bool reaped = false;
    long nap = 1;
    while (clock_now_s() < end) {
        pid_t r;
        while ((r = waitpid(-1, NULL, WNOHANG)) > 0)
            reaped |= r == s;
        if (reaped && kill(-s, 0) && errno == ESRCH)
            return;
        long left = (long)((end - clock_now_s()) * 1000) + 1;
        if (!reaped && pfd >= 0) {
            launch_wait_fd(pfd, left);
        } else {
            clock_nap_ms(nap < left ? nap : left);
            nap = nap < 20 ? 2 * nap : 20;
        }
    }
    kill(-s, SIGKILL);
    if (!reaped)
        waitpid(s, NULL, 0);
}

static __attribute__((noreturn)) void
watchdog_main(const struct launch_spec *s, char **envp, int rd, int log)
{
    signal(SIGINT, SIG_IGN); /* Ctrl-C is bisect's to handle */
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    setsid(); /* out of bisect's process group and session */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* S's orphans stay here */
    signal(SIGPIPE, SIG_IGN);
    close_others(rd, log);
    pid_t srv = fork();
    if (srv < 0)
        _exit(127);
    if (srv == 0) {
        close(rd);
        server_main(s, envp, log);
    }
    setpgid(srv, srv);
    close(log);
    int32_t told = (int32_t)srv; /* bisect's to stop if this one dies */
    ssize_t wr = write(rd, &told, sizeof(told));
    (void)wr;
    int pfd = launch_pidfd(srv); /* woken when S exits, not by a clock */
    for (;;) {
        struct pollfd p[2] = {{rd, POLLIN, 0}, {pfd, POLLIN, 0}};
        int n = poll(p, pfd >= 0 ? 2 : 1, pfd >= 0 ? -1 : 100);
        if (n > 0 && p[0].revents) { /* bisect closed its end (or wrote) */
            stop_group(srv, pfd, s->stop_signal, s->stop_grace);
            _exit(0);
        }
        int st;
        pid_t r;
        while ((r = waitpid(-1, &st, WNOHANG)) > 0)
            if (r == srv) {
                kill(-srv, SIGKILL); /* what it left behind */
                _exit(status_code(st));
            }
    }
}

/* The port's listeners, "pid N (comm)" or "uid N" for the first one not
 * of the tree of root (0: any), in who; whether there is one. The owners
 * are looked for in root's and server's descriptors first (server: 0 when
 * none), every process's only for a listener neither holds. */
static bool stranger_on(int port, pid_t root, pid_t server, char *who,
                        size_t len)
{
    struct bisect_listener l[16];
    pid_t mine[2] = {server, root};
    int n = bisect_port_listeners_near(port, mine, root ? 2 : 0, l, 16);
    for (int i = 0; i < n && i < 16; i++) {
        if (root && l[i].pid && bisect_port_in_tree(l[i].pid, root))
            continue;
        if (l[i].pid)
            snprintf(who, len, "pid %d (%s)", (int)l[i].pid, l[i].comm);
        else
            snprintf(who, len, "a process of uid %u", l[i].uid);
        return true;
    }
    return false;
}

/* 0 when port is free (no listener, and 127.0.0.1:port can be bound);
 * else -EADDRINUSE naming the holder. */
static int port_free(const struct launch_spec *s, int port, struct diag *d)
{
    char who[96] = "";
    if (!stranger_on(port, 0, 0, who, sizeof(who)) &&
        bisect_port_bindable(port))
        return 0;
    return diag_set(d, EADDRINUSE,
                    "port %d of '%s' is already in use%s%s before its "
                    "launch; bisect measures only servers it starts: stop "
                    "that process or set another [server] port",
                    port, s->name, *who ? " by " : "", who);
}

static int local_submit(struct launcher *l, const struct launch_spec *s,
                        struct launch **out, struct diag *d)
{
    (void)l;
    bool local = false;
    int uport = bisect_port_of_url(s->ready_url, &local);
    int rc = 0;
    if (s->port > 0)
        rc = port_free(s, s->port, d);
    if (!rc && local && uport > 0 && uport != s->port)
        rc = port_free(s, uport, d);
    if (rc)
        return rc;
    int log = open(s->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) {
        int err = errno;
        return diag_set(d, err, "cannot create the log '%s': %s", s->log_path,
                        strerror(err));
    }
    int p[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p)) {
        int err = errno;
        close(log);
        return diag_set(d, err, "cannot make a socket pair: %s", strerror(err));
    }
    char **envp = build_envp(s->env, s->n_env);
    pid_t w = fork();
    if (w == 0) {
        close(p[1]);
        watchdog_main(s, envp, p[0], log);
    }
    int err = errno;
    free(envp);
    close(p[0]);
    close(log);
    if (w < 0) {
        close(p[1]);
        return diag_set(d, err, "cannot start '%s': %s", s->name,
                        strerror(err));
    }
    struct launch *x = xcalloc(1, sizeof(*x));
    x->name = xstrdup(s->name);
    x->watchdog = w;
    x->pipe_w = p[1];
    x->log_path = xstrdup(s->log_path);
    x->ready_url = xstrdup(s->ready_url);
    x->ready_timeout = s->ready_timeout;
    x->stop_signal = s->stop_signal;
    x->stop_grace = s->stop_grace;
    int32_t srv = 0;
    ssize_t k;
    while ((k = read(x->pipe_w, &srv, sizeof(srv))) < 0 && errno == EINTR)
        ;
    if (k == (ssize_t)sizeof(srv) && srv > 1)
        x->group = (pid_t)srv;
    *out = x;
    return 0;
}

static bool has_exited(struct launch *x)
{
    if (!x->exited && waitpid(x->watchdog, &x->status, WNOHANG) == x->watchdog)
        x->exited = true;
    return x->exited;
}

/* -EOWNERDEAD when the watchdog was killed (it exits with the server's
 * status otherwise), -ECHILD when the server exited, 0 while it runs. */
static int local_check(struct launch *x, struct diag *d)
{
    if (!has_exited(x))
        return 0;
    if (WIFSIGNALED(x->status))
        return diag_set(d, EOWNERDEAD,
                        "the watchdog of '%s' (pid %d) was killed (signal "
                        "%d); its server is stopped and bisect stops too",
                        x->name, (int)x->watchdog, WTERMSIG(x->status));
    return diag_set(d, ECHILD, "the server of '%s' exited (status %d)", x->name,
                    WEXITSTATUS(x->status));
}

static int local_wait_ready(struct launch *x, volatile sig_atomic_t *stop,
                            char *addr, size_t addr_len, struct diag *d)
{
    struct http_client *c = http_client_new();
    double start = clock_now_s();
    bool local = false;
    int port = bisect_port_of_url(x->ready_url, &local);
    int rc;
    long nap = 5; /* ms: every 5 for the first 0.2 s, then growing to 100 */
    for (;;) {
        if (stop && *stop) {
            rc = diag_set(d, EINTR, "interrupted while waiting for ready");
            break;
        }
        if (has_exited(x)) {
            rc = local_check(x, d);
            if (rc == -ECHILD)
                rc = diag_set(d, ECHILD,
                              "the server exited (status %d) before it was "
                              "ready",
                              WEXITSTATUS(x->status));
            break;
        }
        struct http_req rq = {
            .url = x->ready_url, .timeout_ms = 2000, .max_body = 1 << 20};
        struct http_resp rs;
        http_resp_init(&rs);
        bool ok = !http_do(c, &rq, &rs, NULL) && rs.status == 200;
        http_resp_release(&rs);
        char who[96] = "";
        if (ok && local && port > 0 &&
            stranger_on(port, x->watchdog, x->group, who, sizeof(who))) {
            rc = diag_set(d, EADDRINUSE,
                          "port %d answers '%s', but it is held by %s, not "
                          "by the server bisect started for '%s'; bisect "
                          "measures only its own servers",
                          port, x->ready_url, who, x->name);
            break;
        }
        if (ok && !has_exited(x)) {
            launch_base_url(x->ready_url, addr, addr_len);
            rc = 0;
            break;
        }
        if (clock_now_s() - start >= x->ready_timeout) {
            rc = diag_set(d, ETIMEDOUT,
                          "not ready after %g s (no 200 from '%s')",
                          x->ready_timeout, x->ready_url);
            break;
        }
        clock_nap_ms(nap);
        if (clock_now_s() - start > 0.2)
            nap = nap < 100 ? nap + nap / 4 + 1 : 100;
    }
    http_client_free(c);
    return rc;
}

static const char *local_log_path(const struct launch *x)
{
    return x->log_path;
}

/* The watchdog is gone: the stop signal to the server's group, the grace
 * while any of it is left, then SIGKILL. */
static void stop_orphan(struct launch *x)
{
    if (x->group <= 1 || kill(-x->group, x->stop_signal))
        return;
    double end = clock_now_s() + x->stop_grace;
    while (clock_now_s() < end) {
        if (kill(-x->group, 0) && errno == ESRCH)
            return;
        clock_nap_ms(20);
    }
    kill(-x->group, SIGKILL);
}

static int local_cancel(struct launch *x, struct diag *d)
{
    (void)d;
    if (!x)
        return 0;
    close(x->pipe_w); /* the watchdog stops the group */
    if (!x->exited)
        while (waitpid(x->watchdog, &x->status, 0) < 0 && errno == EINTR)
            ;
    if (WIFSIGNALED(x->status))
        stop_orphan(x);
    free(x->name);
    free(x->log_path);
    free(x->ready_url);
    free(x);
    return 0;
}

static void local_free(struct launcher *l)
{
    free(l);
}

static const struct launcher_ops local_ops = {
    .name = "local",
    .submit = local_submit,
    .wait_ready = local_wait_ready,
    .log_path = local_log_path,
    .check = local_check,
    .cancel = local_cancel,
    .free = local_free,
};

struct launcher *launch_local_new(void)
{
    struct launcher *l = xcalloc(1, sizeof(*l));
    l->ops = &local_ops;
    return l;
}

void launch_base_url(const char *url, char *out, size_t len)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t n = (size_t)(h - url) + strcspn(h, "/");
    snprintf(out, len, "%.*s", (int)n, url);
}

int launch_log_tail(const char *path, size_t lines, struct buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char tail[4096];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof(tail) ? end - (off_t)sizeof(tail) : 0;
    ssize_t n = pread(fd, tail, sizeof(tail), from);
    close(fd);
    if (n < 0)
        return -EIO;
    size_t i = (size_t)n;
    if (i && tail[i - 1] == '\n')
        i--;
    size_t seen = 0;
    while (i > 0 && seen < lines) {
        if (tail[i - 1] == '\n')
            seen++;
        if (seen < lines)
            i--;
    }
    return buf_add(out, tail + i, (size_t)n - i);
}
