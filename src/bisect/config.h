/*
 * bisect/config: the bisect CONFIG file, an INI-like text a serving engineer
 * edits by hand and reads in a diff (format in docs/BISECT.md). Sections
 * [server], [golden], [measure] and one [toggle NAME] per patch; lines are
 * `key = value`, `#` starts a comment line. The parser keeps the line of
 * every value so later checks can point at it.
 *
 * Errors: bisect_config_parse and bisect_config_load return -EINVAL (bad
 * content) or -errno (unreadable file) and fill d with
 * "FILE:LINE: what is wrong; what to fix". On error the config is released.
 */
#ifndef BISECT_CONFIG_H
#define BISECT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/diag.h"

/* The path a toggle claims to touch. */
enum bisect_path {
    BISECT_PATH_UNKNOWN = 0,
    BISECT_PATH_PREFILL,
    BISECT_PATH_DECODE,
    BISECT_PATH_BOTH,
};

struct bisect_toggle {
    char *name;
    char *args; /* extra server arguments when on ("" when none) */
    char **env; /* "NAME=VALUE" strings set when on */
    size_t n_env;
    char *description;
    enum bisect_path path;
    int line; /* of its [toggle NAME] header */
};

/* Where configurations run: this host, or Slurm batch jobs (slurm.h). */
enum bisect_launcher { BISECT_LAUNCH_LOCAL = 0, BISECT_LAUNCH_SLURM };

/* [slurm]: the batch job of each configuration under the Slurm launcher. */
struct bisect_slurm {
    char *partition;   /* NULL: the cluster's default */
    char *account;     /* NULL: the user's default */
    char *time;        /* --time, as sbatch reads it; NULL: the partition's */
    int nodes;         /* default 1 */
    int gpus_per_node; /* --gres=gpu:N; 0: none */
    char **sbatch;     /* extra "#SBATCH" options, verbatim */
    size_t n_sbatch;
    char *host; /* the node's address as bisect reaches it, evaluated by
                   the job's shell; default $(hostname) */
    double queue_timeout; /* seconds a job may pend (default 3600) */
};

struct bisect_config {
    char *file; /* as given, for messages */
    /* [server] */
    char *command; /* template with {port} and optionally {slot} */
    int command_line;
    char **env; /* "NAME=VALUE" templates, for every configuration */
    size_t n_env;
    char *workdir;   /* NULL: the current directory */
    char *ready_url; /* template; default http://127.0.0.1:{port}/v1/models */
    double ready_timeout; /* seconds (default 600) */
    int stop_signal;      /* default SIGTERM */
    double stop_grace;    /* seconds before SIGKILL (default 30) */
    int first_port;       /* ports first_port + slot (0: free ones) */
    enum bisect_launcher launcher;
    struct bisect_slurm slurm;
    /* [golden] */
    char *golden_url;  /* NULL: launch the command with every toggle off */
    char *golden_file; /* a saved golden (drift --save-golden): nothing is
                          launched for it and only drift measures; a
                          relative path is the config file's directory's */
    /* [measure] */
    char *profile;    /* quick (default) or test */
    char *model;      /* NULL: what the server lists */
    char *drift_args; /* extra `fidelity drift` options, "" when none */
    char *probe_args; /* extra `fidelity probe` options, "" when none */
    /* toggles, in file order */
    struct bisect_toggle *toggles;
    size_t n_toggles;
};

void bisect_config_init(struct bisect_config *c);
void bisect_config_release(struct bisect_config *c);
/* Parses text (len bytes, need not be NUL-terminated) named file. */
int bisect_config_parse(struct bisect_config *c, const char *file,
                        const char *text, size_t len, struct diag *d);
/* Reads and parses the file at path. */
int bisect_config_load(struct bisect_config *c, const char *path,
                       struct diag *d);

const char *bisect_path_name(enum bisect_path p);
/* Expands {port} and {slot} in tmpl; a fresh string. A negative port
 * keeps {port} (the Slurm launcher picks it on the node). */
char *bisect_expand(const char *tmpl, int port, int slot);
/* The signal named "SIGTERM", "TERM" or "15"; 0 when unknown. */
int bisect_signal_parse(const char *s);
const char *bisect_signal_name(int sig);

#endif
