/*
 * slurm: a one-node Slurm cluster for the tests of bisect's Slurm launcher.
 * munged, slurmctld and slurmd run in the foreground as children of the
 * test, on 127.0.0.1, from a generated slurm.conf in a fresh directory
 * whose SlurmctldPort and SlurmdPort are free ports; no systemd, no file
 * outside that directory. SLURM_CONF is set in the test's environment so
 * the client commands (sbatch, squeue, scancel) and the fidelity binary
 * it starts reach this cluster. Stopped by slurm_cluster_stop, which
 * cancels every job first; the daemons also die with the test process
 * (PR_SET_PDEATHSIG), so a crashed test leaves no controller behind.
 */
#ifndef TESTS_UTIL_SLURM_H
#define TESTS_UTIL_SLURM_H

#include <sys/types.h>

#include "core/buf.h"

struct slurm_cluster {
    char dir[64];   /* the cluster's files: conf, state, spool, logs */
    char conf[128]; /* dir/slurm.conf */
    char node[64];  /* NodeName (hostname -s) */
    int cpus;       /* CPUs of the node */
    pid_t munged, slurmctld, slurmd;
};

/* Skips the test (fails it under CI=true, see need.h) when the Slurm
 * daemons, client commands or munge are missing, or when not root (the
 * daemons run as SlurmUser=root). */
void slurm_need(void);
/* Starts the cluster and waits (at most 30 s) until its node is idle.
 * 0, or -1 with why saying what failed (the daemons' log tails); nothing
 * of it runs then. */
int slurm_cluster_start(struct slurm_cluster *c, struct buf *why);
/* Cancels every job, stops the daemons (SIGTERM, then SIGKILL after 5 s)
 * and removes the directory. A zeroed or stopped cluster is a no-op. */
void slurm_cluster_stop(struct slurm_cluster *c);
/* Runs a shell command line against the cluster (SLURM_CONF set), at most
 * timeout_s; stdout into out. The exit code, or -1. */
int slurm_sh(const char *cmd, struct buf *out, int timeout_s);
/* The number of jobs squeue lists whose name starts with prefix, in any
 * state it still shows (pending, running, completing, suspended). */
int slurm_jobs_named(const char *prefix);

#endif
