/*
 * sh: a shell command run to completion with its output in buffers (see
 * sh.h). Output goes through temporary files, so a command that prints
 * more than a pipe holds cannot block on a reader that waits for it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "util/sh.h"

static void slurp(FILE *f, struct buf *b)
{
    char tmp[65536];
    size_t n;
    rewind(f);
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        if (b)
            buf_add(b, tmp, n);
}

int sh_run(const char *cmd, struct buf *out, struct buf *err, int timeout_s)
{
    FILE *o = tmpfile(), *e = tmpfile();
    int status = 0, rc = -1;
    if (!o || !e)
        goto out_close;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        goto out_close;
    if (pid == 0) {
        setpgid(0, 0); /* a timeout kills the command's children too */
        dup2(fileno(o), 1);
        dup2(fileno(e), 2);
        unsetenv("MAKEFLAGS");
        unsetenv("MFLAGS");
        unsetenv("MAKELEVEL");
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    time_t end = time(NULL) + timeout_s;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (time(NULL) >= end) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        usleep(20000);
    }
    slurp(o, out);
    slurp(e, err);
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
out_close:
    if (o)
        fclose(o);
    if (e)
        fclose(e);
    return rc;
}

bool sh_has(const char *name)
{
    char *cmd = xasprintf("command -v '%s' >/dev/null 2>&1", name);
    bool ok = sh_run(cmd, NULL, NULL, 10) == 0;
    free(cmd);
    return ok;
}
