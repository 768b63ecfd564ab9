/*
 * bisect/launch: starting and stopping the servers bisect measures, behind
 * an interface a cluster launcher can implement too: submit a
 * configuration, wait until its ready URL answers (the address to measure),
 * its log, cancel. The local launcher (local.c) runs each configuration on
 * this host in its own process group, watched by a small watchdog process
 * that kills the group when bisect's end of a pipe closes, so no server
 * outlives bisect, even when bisect is killed with SIGKILL.
 *
 * Names here carry the launch_ prefix (types: struct launch, launch_spec,
 * launcher, launcher_ops); each launcher's constructor is launch_*_new.
 *
 * Errors: -errno with d filled. wait_ready returns -ECHILD when the server
 * exited first, -ETIMEDOUT when the timeout passed, -EINTR when *stop was
 * set; its log (log_path) then says why. A launcher that can see who holds
 * a port refuses to measure a stranger: submit returns -EADDRINUSE when
 * the port is taken before the launch, wait_ready when the process that
 * answers is not one it started (d names the port and, where the system
 * says, the process). -EOWNERDEAD from wait_ready or check: the process
 * that watches the server died; cancel still stops the server.
 */
#ifndef BISECT_LAUNCH_H
#define BISECT_LAUNCH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/buf.h"
#include "core/diag.h"

struct launch_spec {
    const char *name;    /* configuration name, for messages */
    const char *command; /* placeholders expanded; run by /bin/sh -c */
    char *const *env;    /* "NAME=VALUE" added to the environment */
    size_t n_env;
    const char *workdir;   /* NULL: the current directory */
    const char *log_path;  /* the server's stdout and stderr */
    const char *ready_url; /* GET answers 200 when the server is ready */
    double ready_timeout;  /* seconds */
    int stop_signal;
    double stop_grace; /* seconds between stop_signal and SIGKILL */
    int port;          /* the {port} given to the command; 0: none */
};

struct launch;
struct launcher;

struct launcher_ops {
    const char *name;
    /* The server's port is picked where it runs: the spec's command, env
     * and ready_url keep their {port} placeholder. */
    bool port_on_node;
    /* Starts s; *out is the running launch. */
    int (*submit)(struct launcher *l, const struct launch_spec *s,
                  struct launch **out, struct diag *d);
    /* Waits until s->ready_url answers 200; addr gets the base URL to
     * measure (scheme, host and port of the ready URL). */
    int (*wait_ready)(struct launch *x, volatile sig_atomic_t *stop, char *addr,
                      size_t addr_len, struct diag *d);
    const char *(*log_path)(const struct launch *x);
    /* 0 while the configuration runs as launched; -EOWNERDEAD when its
     * watchdog died, -ECHILD when the server exited. NULL: not watched. */
    int (*check)(struct launch *x, struct diag *d);
    /* Stops the configuration (signal, grace, then kill) and frees x.
     * Returns once nothing of it runs. */
    int (*cancel)(struct launch *x, struct diag *d);
    void (*free)(struct launcher *l);
};

struct launcher {
    const struct launcher_ops *ops;
};

/* The local launcher: processes on this host. */
struct launcher *launch_local_new(void);

/* The last `lines` lines of the file at path appended to out (at most
 * 4 KiB of them). 0, or -errno when it cannot be read. */
int launch_log_tail(const char *path, size_t lines, struct buf *out);

/* A descriptor that polls readable when child p exits (a pidfd), or -1
 * where the kernel has none (before Linux 5.3). Close it after. */
int launch_pidfd(pid_t p);

/* Waits up to ms milliseconds for fd to become readable (a pidfd: the
 * child exited; a pipe: data or its other end closed), or naps ms when fd
 * is -1. Async-signal-safe: the watchdog uses it between fork and exit. */
void launch_wait_fd(int fd, long ms);

/* The base URL of url: "http://host:port" (no path). */
void launch_base_url(const char *url, char *out, size_t len);

#endif
