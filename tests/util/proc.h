/*
 * proc: what end-to-end tests need to run fidelity for real: start a server
 * subcommand on an ephemeral 127.0.0.1 port and stop it (also when the test
 * process dies), and run a CLI command to completion capturing its output.
 */
#ifndef TESTS_UTIL_PROC_H
#define TESTS_UTIL_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/buf.h"

struct proc {
    pid_t pid;
    int port;
    int out_fd;     /* the server's stdout after its first line */
    char line[256]; /* that first line, without its newline */
};

/* Path of the binary under test: $FIDELITY_BIN, else ./fidelity. */
const char *fidelity_bin(void);
/*
 * Starts `fidelity ARGV...` (argv[0] is the subcommand, NULL-terminated),
 * which must print "... listening on http://HOST:PORT" as its first
 * stdout line within 10 s (HOST may be a bracketed IPv6 address). Returns 0 and
 * fills p, or -1.
 */
int proc_start(struct proc *p, const char *const argv[]);
/* The same, with the server's stderr appended to err_path (NULL: kept). */
int proc_start_err(struct proc *p, const char *const argv[],
                   const char *err_path);
/* The same, with the child's descriptor limit (RLIMIT_NOFILE, soft and
 * hard) set to nofile before exec. */
int proc_start_nofile(struct proc *p, const char *const argv[],
                      const char *err_path, long nofile);
/* SIGTERM, wait up to 5 s, then SIGKILL. Returns the exit status or -1. */
int proc_stop(struct proc *p);
/* Runs `fidelity ARGV...` to completion (at most timeout_s), stdout and
 * stderr into out and err (either may be NULL); returns the exit code, or
 * -1 when it did not exit normally. stdin is /dev/null unless in_file. */
int proc_run(const char *const argv[], const char *in_file, struct buf *out,
             struct buf *err, int timeout_s);
/* proc_run with the child's user and group set to uid first (when
 * uid is not 0; the test runs as root): for what root may always do. The
 * child runs a copy of the binary in a folder of /tmp every user may
 * enter, since the build's folder may be closed to others (a clone in a
 * mktemp -d folder is). -1 when the copy cannot be made. */
int proc_run_uid(const char *const argv[], uid_t uid, struct buf *out,
                 struct buf *err, int timeout_s);
/* "http://127.0.0.1:PORT" in a buffer of the calling thread. */
const char *proc_url(const struct proc *p);

#endif
