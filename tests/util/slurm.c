/*
 * slurm: the one-node test cluster (see slurm.h). The settings are the ones
 * Debian 12's Slurm 22.05 needs to run as root without systemd: munged
 * with its own key and socket, AuthInfo pointing at that socket,
 * linuxproc process tracking and no task or accounting plugins, and the
 * node on 127.0.0.1. SlurmdParameters=config_overrides lets the node
 * offer at least four CPUs on a smaller machine, so a golden and two
 * configurations fit at once.
 */
#define _GNU_SOURCE
#include "util/slurm.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bisect/bisect.h"
#include "bisect/port.h"
#include "util/need.h"
#include "util/sh.h"

void slurm_need(void)
{
    static const char *const cmds[] = {"munged", "slurmctld", "slurmd",
                                       "sbatch", "squeue",    "scancel",
                                       "sinfo",  "scontrol"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (!sh_has(cmds[i])) {
            char part[96];
            snprintf(part, sizeof(part),
                     "the '%s' command (Debian slurm-wlm and munge)", cmds[i]);
            need_missing(part);
        }
    }
    if (geteuid() != 0)
        need_missing("root (the test cluster's daemons run as SlurmUser=root)");
}

static long mem_mb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    long kb = 0;
    if (f) {
        if (fscanf(f, "MemTotal: %ld kB", &kb) != 1)
            kb = 0;
        fclose(f);
    }
    long mb = kb / 1024 * 9 / 10;
    return mb > 256 ? mb : 256;
}

static int write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return -1;
    size_t n = strlen(text);
    int rc = write(fd, text, n) == (ssize_t)n ? 0 : -1;
    close(fd);
    return rc;
}

static int write_key(const char *path)
{
    unsigned char key[1024];
    int in = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (in < 0 || read(in, key, sizeof(key)) != (ssize_t)sizeof(key)) {
        if (in >= 0)
            close(in);
        return -1;
    }
    close(in);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0400);
    if (fd < 0)
        return -1;
    int rc = write(fd, key, sizeof(key)) == (ssize_t)sizeof(key) ? 0 : -1;
    close(fd);
    return rc;
}

static int write_conf(struct slurm_cluster *c)
{
    char text[4096];
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->cpus = n < 4 ? 4 : (int)n;
    snprintf(text, sizeof(text),
             "ClusterName=fidelitytest\n"
             "SlurmctldHost=%s(127.0.0.1)\n"
             "SlurmctldPort=%d\nSlurmdPort=%d\n"
             "AuthType=auth/munge\nCredType=cred/munge\n"
             "AuthInfo=socket=%s/munge.sock\n"
             "SlurmUser=root\nSlurmdUser=root\n"
             "StateSaveLocation=%s/state\nSlurmdSpoolDir=%s/spool\n"
             "SlurmctldPidFile=%s/slurmctld.pid\n"
             "SlurmdPidFile=%s/slurmd.pid\n"
             "SlurmctldLogFile=%s/slurmctld.log\n"
             "SlurmdLogFile=%s/slurmd.log\n"
             "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
             "JobAcctGatherType=jobacct_gather/none\n"
             "AccountingStorageType=accounting_storage/none\n"
             "SelectType=select/cons_tres\n"
             "SelectTypeParameters=CR_CPU\n"
             "SlurmdParameters=config_overrides\n"
             "MpiDefault=none\nReturnToService=2\n"
             "SchedulerType=sched/builtin\n"
             "KillWait=2\nMinJobAge=60\nInactiveLimit=0\n"
             "SlurmctldTimeout=30\nSlurmdTimeout=30\n"
             "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=%ld "
             "State=UNKNOWN\n"
             "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE "
             "State=UP\n",
             c->node, bisect_port_pick(), bisect_port_pick(), c->dir, c->dir,
             c->dir, c->dir, c->dir, c->dir, c->dir, c->node, c->cpus,
             mem_mb());
    return write_file(c->conf, text, 0644);
}

/* Starts argv in the foreground, output to log, killed when we die. */
static pid_t start(const char *const argv[], const char *log)
{
    pid_t parent = getpid();
    pid_t p = fork();
    if (p != 0)
        return p;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (in >= 0)
        dup2(in, 0);
    setpgid(0, 0);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

static void stop(pid_t *p)
{
    if (*p <= 0)
        return;
    kill(*p, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(*p, NULL, WNOHANG) == *p) {
            *p = 0;
            return;
        }
        usleep(50000);
    }
    kill(*p, SIGKILL);
    waitpid(*p, NULL, 0);
    *p = 0;
}

int slurm_sh(const char *cmd, struct buf *out, int timeout_s)
{
    return sh_run(cmd, out, NULL, timeout_s);
}

static void tail_into(struct buf *why, const char *dir, const char *name)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "echo '--- %s'; tail -n 8 '%s/%s' 2>&1", name,
             dir, name);
    sh_run(cmd, why, NULL, 5);
}

static int wait_idle(void)
{
    for (int i = 0; i < 300; i++) {
        struct buf out = BUF_INIT;
        int rc = slurm_sh("sinfo -h -o %t", &out, 5);
        bool idle = rc == 0 && !strncmp(buf_str(&out), "idle", 4);
        buf_release(&out);
        if (idle)
            return 0;
        usleep(100000);
    }
    return -1;
}

static int start_daemons(struct slurm_cluster *c)
{
    char key[128], sock[128], pid[128], log[128], seed[128];
    snprintf(key, sizeof(key), "%s/munge.key", c->dir);
    snprintf(sock, sizeof(sock), "%s/munge.sock", c->dir);
    snprintf(pid, sizeof(pid), "%s/munged.pid", c->dir);
    snprintf(log, sizeof(log), "%s/munged.log", c->dir);
    snprintf(seed, sizeof(seed), "%s/munged.seed", c->dir);
    if (write_key(key))
        return -1;
    const char *m[] = {"munged",     "-F", "--key-file",  key,
                       "--socket",   sock, "--pid-file",  pid,
                       "--log-file", log,  "--seed-file", seed,
                       "--force",    NULL};
    c->munged = start(m, log);
    for (int i = 0; i < 100 && access(sock, F_OK); i++)
        usleep(50000);
    char ctl_log[128], d_log[128];
    snprintf(ctl_log, sizeof(ctl_log), "%s/slurmctld.out", c->dir);
    snprintf(d_log, sizeof(d_log), "%s/slurmd.out", c->dir);
    const char *ctl[] = {"slurmctld", "-D", "-i", "-f", c->conf, NULL};
    c->slurmctld = start(ctl, ctl_log);
    const char *d[] = {"slurmd", "-D", "-f", c->conf, NULL};
    c->slurmd = start(d, d_log);
    return c->munged > 0 && c->slurmctld > 0 && c->slurmd > 0 ? 0 : -1;
}

int slurm_cluster_start(struct slurm_cluster *c, struct buf *why)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->dir, sizeof(c->dir), "/tmp/fidelity-slurm-XXXXXX");
    if (!mkdtemp(c->dir)) {
        buf_printf(why, "cannot make a directory: %s", strerror(errno));
        return -1;
    }
    snprintf(c->conf, sizeof(c->conf), "%s/slurm.conf", c->dir);
    gethostname(c->node, sizeof(c->node) - 1);
    c->node[strcspn(c->node, ".")] = '\0';
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/state", c->dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof(sub), "%s/spool", c->dir);
    mkdir(sub, 0700);
    setenv("SLURM_CONF", c->conf, 1);
    if (write_conf(c) || start_daemons(c) || wait_idle()) {
        buf_printf(why, "the test cluster did not start (files in '%s'):\n",
                   c->dir);
        static const char *const logs[] = {"munged.log", "slurmctld.log",
                                           "slurmctld.out", "slurmd.log",
                                           "slurmd.out"};
        for (size_t i = 0; i < sizeof(logs) / sizeof(logs[0]); i++)
            tail_into(why, c->dir, logs[i]);
        slurm_cluster_stop(c);
        return -1;
    }
    return 0;
}

int slurm_jobs_named(const char *prefix)
{
    struct buf out = BUF_INIT;
    int n = 0;
    if (slurm_sh("squeue -h -o %j", &out, 10) == 0) {
        const char *s = buf_str(&out);
        size_t pl = strlen(prefix);
        while (*s) {
            if (!strncmp(s, prefix, pl))
                n++;
            const char *nl = strchr(s, '\n');
            s = nl ? nl + 1 : s + strlen(s);
        }
    } else {
        n = -1;
    }
    buf_release(&out);
    return n;
}

void slurm_cluster_stop(struct slurm_cluster *c)
{
    if (!c->dir[0])
        return;
    if (c->slurmctld > 0) {
        slurm_sh("scancel --full --signal=KILL --user=root 2>/dev/null; "
                 "scancel --user=root 2>/dev/null",
                 NULL, 10);
        for (int i = 0; i < 50; i++) {
            struct buf out = BUF_INIT;
            int rc = slurm_sh("squeue -h -o %i", &out, 5);
            bool empty = rc != 0 || !out.len;
            buf_release(&out);
            if (empty)
                break;
            usleep(100000);
        }
    }
    stop(&c->slurmd);
    stop(&c->slurmctld);
    stop(&c->munged);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
    sh_run(cmd, NULL, NULL, 10);
    unsetenv("SLURM_CONF");
    c->dir[0] = '\0';
}
