/*
 * bisect/slurm: the Slurm launcher. Each configuration is a batch job
 * submitted with sbatch; its script picks a free port on the node, starts
 * the server with the configuration's environment and arguments, and
 * writes "HOST PORT" to DIR/NAME.addr (DIR must be on a file system the
 * nodes share with the submitting host, as must the job's output, the
 * server log). wait_ready follows the job with squeue (pending past the
 * queue timeout: -ETIMEDOUT; ended: -ECHILD) and then polls the ready
 * URL at that address; cancel sends the stop signal with scancel, waits
 * the grace, cancels the job and returns once squeue no longer lists it.
 * Only the Slurm client commands run on this host.
 *
 * Jobs are named "fb-TAG-NAME", TAG a hash of DIR's absolute path, so a
 * later run over the same DIR finds the jobs of an earlier one.
 *
 * Names: the launcher's constructor carries launch.h's prefix (launch_),
 * like the local one; the rest carries bisect_ (slurm_ is libslurm's).
 */
#ifndef BISECT_SLURM_H
#define BISECT_SLURM_H

#include <stdbool.h>

#include "bisect/config.h"
#include "bisect/launch.h"
#include "core/buf.h"
#include "core/diag.h"

/* A Slurm launcher for the run writing into dir (borrowed, must outlive
 * it), jobs pending longer than queue_timeout seconds reported. Freeing
 * it cancels every job it submitted that is still queued. With resume,
 * first cancels the jobs of an earlier run over dir still queued (their
 * count in *cancelled). NULL and d filled when dir cannot be resolved or
 * squeue fails. */
struct launcher *launch_slurm_new(const struct bisect_slurm *cfg,
                                  const char *dir, double queue_timeout,
                                  bool resume, size_t *cancelled,
                                  struct diag *d);

/* The batch script of s (its command and env with {port} kept) for the run
 * writing into dir, appended to out. */
void bisect_slurm_script(const struct bisect_slurm *cfg, const char *dir,
                         const struct launch_spec *s, struct buf *out);

#endif
