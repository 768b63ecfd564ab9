/*
 * proc: spawning fidelity for end-to-end tests.
 */
#include "util/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"

const char *fidelity_bin(void)
{
    const char *b = getenv("FIDELITY_BIN");
    return b && *b ? b : "./fidelity";
}

/* proc_run_uid's user for the child (0: the test's own) */
static uid_t run_uid;

static void exec_child(const char *const argv[], int out_fd, int err_fd,
                       const char *in_file, const char *err_path, long nofile)
{
    const char *av[64];
    int n = 0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (run_uid &&
        (setgroups(0, NULL) || setgid((gid_t)run_uid) || setuid(run_uid)))
        _exit(126);
    if (nofile > 0) {
        struct rlimit rl = {(rlim_t)nofile, (rlim_t)nofile};
        if (setrlimit(RLIMIT_NOFILE, &rl))
            _exit(126);
    }
    av[n++] = fidelity_bin();
    for (int i = 0; argv[i] && n < 63; i++)
        av[n++] = argv[i];
    av[n] = NULL;
    int in = open(in_file ? in_file : "/dev/null", O_RDONLY);
    if (in >= 0)
        dup2(in, 0);
    if (out_fd >= 0)
        dup2(out_fd, 1);
    if (err_path)
        err_fd = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (err_fd >= 0)
        dup2(err_fd, 2);
    execv(av[0], (char *const *)av);
    fprintf(stderr, "exec '%s': %s\n", av[0], strerror(errno));
    _exit(127);
}

int proc_start(struct proc *p, const char *const argv[])
{
    return proc_start_err(p, argv, NULL);
}

int proc_start_err(struct proc *p, const char *const argv[],
                   const char *err_path)
{
    return proc_start_nofile(p, argv, err_path, 0);
}

int proc_start_nofile(struct proc *p, const char *const argv[],
                      const char *err_path, long nofile)
{
    int fds[2];
    char line[512];
    size_t len = 0;

    memset(p, 0, sizeof(*p));
    p->out_fd = -1;
    if (pipe(fds))
        return -1;
    p->pid = fork();
    if (p->pid < 0)
        return -1;
    if (p->pid == 0) {
        close(fds[0]);
        exec_child(argv, fds[1], -1, NULL, err_path, nofile);
    }
    close(fds[1]);
    p->out_fd = fds[0];
    for (;;) {
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        if (poll(&pfd, 1, 10000) <= 0)
            break;
        ssize_t n = read(p->out_fd, line + len, 1);
        if (n <= 0)
            break;
        if (line[len] == '\n' || len + 2 >= sizeof(line)) {
            line[len] = '\0';
            snprintf(p->line, sizeof(p->line), "%s", line);
            const char *u = strstr(line, "http://");
            /* the first URL on the line is the server's own; record's
             * line names its upstream after it */
            const char *h = u && u[7] == '[' ? strchr(u, ']') : u;
            const char *colon = h ? strchr(h + (h == u ? 7 : 0), ':') : NULL;
            if (colon)
                p->port = atoi(colon + 1);
            return p->port > 0 ? 0 : (proc_stop(p), -1);
        }
        len++;
    }
    proc_stop(p);
    return -1;
}

int proc_stop(struct proc *p)
{
    int status = -1;
    if (p->pid <= 0)
        return -1;
    kill(p->pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
        if (waitpid(p->pid, &status, WNOHANG) == p->pid)
            goto done;
        usleep(10000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &status, 0);
done:
    if (p->out_fd >= 0)
        close(p->out_fd);
    p->out_fd = -1;
    p->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const char *proc_url(const struct proc *p)
{
    /* per thread: test_64_simultaneous_connections calls this from 64
     * threads at once, and one thread's snprintf into a shared buffer
     * could be read half-written by another ("127.0.0.1:439") */
    static _Thread_local char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", p->port);
    return url;
}

static void drain(int fd, struct buf *b)
{
    char tmp[65536];
    ssize_t n = read(fd, tmp, sizeof(tmp));
    if (n > 0 && b)
        buf_add(b, tmp, (size_t)n);
}

int proc_run(const char *const argv[], const char *in_file, struct buf *out,
             struct buf *err, int timeout_s)
{
    int o[2], e[2], status = 0;
    if (pipe(o) || pipe(e))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(o[0]);
        close(e[0]);
        exec_child(argv, o[1], e[1], in_file, NULL, 0);
    }
    close(o[1]);
    close(e[1]);
    time_t end = time(NULL) + timeout_s;
    int open_fds = 2;
    struct pollfd pfd[2] = {{.fd = o[0], .events = POLLIN},
                            {.fd = e[0], .events = POLLIN}};
    while (open_fds > 0 && time(NULL) < end) {
        if (poll(pfd, 2, 1000) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP)))
                continue;
            char tmp[65536];
            ssize_t n = read(pfd[i].fd, tmp, sizeof(tmp));
            if (n <= 0) {
                pfd[i].fd = -1;
                open_fds--;
            } else if (i == 0 ? out != NULL : err != NULL) {
                buf_add(i == 0 ? out : err, tmp, (size_t)n);
            }
        }
    }
    if (open_fds > 0)
        kill(pid, SIGKILL);
    drain(o[0], NULL);
    close(o[0]);
    close(e[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Copies the binary into a fresh folder of /tmp that every user may enter
 * (the build's own folder may sit under one only its owner enters, as a
 * clone in a mktemp -d folder does); the copy's path, or NULL. */
static char *shared_copy(const char *bin, char *dir, size_t dir_len)
{
    snprintf(dir, dir_len, "/tmp/fidelity-uid-XXXXXX");
    if (!mkdtemp(dir) || chmod(dir, 0755))
        return NULL;
    char *path = xasprintf("%s/fidelity", dir);
    int in = open(bin, O_RDONLY | O_CLOEXEC);
    int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
    char chunk[65536];
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, chunk, sizeof(chunk))) > 0)
        if (write(out, chunk, (size_t)n) != n) {
            n = -1;
            break;
        }
    bool ok = in >= 0 && out >= 0 && n == 0;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    if (!ok || chmod(path, 0755)) {
        unlink(path);
        rmdir(dir);
        free(path);
        return NULL;
    }
    return path;
}

int proc_run_uid(const char *const argv[], uid_t uid, struct buf *out,
                 struct buf *err, int timeout_s)
{
    char dir[64], *copy = NULL, *was = NULL;
    if (uid) {
        was = xstrdup(fidelity_bin());
        copy = shared_copy(was, dir, sizeof(dir));
        if (!copy) {
            free(was);
            return -1;
        }
        setenv("FIDELITY_BIN", copy, 1);
    }
    run_uid = uid;
    int rc = proc_run(argv, NULL, out, err, timeout_s);
    run_uid = 0;
    if (copy) {
        setenv("FIDELITY_BIN", was, 1);
        unlink(copy);
        rmdir(dir);
        free(copy);
        free(was);
    }
    return rc;
}
