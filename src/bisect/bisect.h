/*
 * bisect: one bisect over a config: the golden once, then each
 * configuration a mode asks for: launch, wait for ready, drift against the
 * golden and probe with the golden as baseline (by running this same
 * fidelity binary), stop. Each finished configuration is written to
 * DIR/NAME.json at once, so --resume measures only what is missing.
 * Prints nothing: progress goes to a callback.
 */
#ifndef BISECT_BISECT_H
#define BISECT_BISECT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>

#include "bisect/config.h"
#include "bisect/launch.h"
#include "bisect/plan.h"
#include "core/diag.h"

enum bisect_phase {
    BISECT_STARTING,
    BISECT_WAITING,
    BISECT_COMPARING,
    BISECT_PROBING,
    BISECT_STOPPING,
    BISECT_DONE,
};
const char *bisect_phase_name(enum bisect_phase p);

struct bisect_progress {
    const char *name;
    /* configuration index (1-based; 0: the golden) of total (0: not known
     * ahead, as in adaptive mode, where each depends on the last answer) */
    size_t index, total;
    enum bisect_phase phase;
    int port; /* its {port} when starting; 0: picked where it runs */
};

struct bisect_opts {
    enum bisect_mode mode;
    int slots;        /* configurations at once (the golden holds its own) */
    bool resume;      /* reuse DIR/NAME.json of finished configurations */
    const char *dir;  /* results and logs */
    const char *self; /* the fidelity binary to run drift and probe with */
    volatile sig_atomic_t *stop;
    struct launcher *launcher; /* NULL: the local one; borrowed */
    void (*on_progress)(void *ud, const struct bisect_progress *p);
    void *ud;
};

struct bisect_result {
    bisect_set set;
    char *name;
    json_t *doc; /* DIR/NAME.json: status, error, log_tail, drift, probe */
};

struct bisect_outcome {
    struct bisect_result *results; /* in launch order; not the golden */
    size_t n_results;
    json_t *golden;  /* the golden's document (fingerprint, log) */
    size_t launches; /* servers started by this run, golden included */
    size_t reused;   /* configurations --resume took from DIR */
    struct bisect_adaptive_result adaptive;
};

/* The name of configuration s: "golden", or its toggles joined by '+'. */
char *bisect_set_name(const struct bisect_config *c, bisect_set s);

/* The server command of configuration s with its placeholders kept. */
char *bisect_set_template(const struct bisect_config *c, bisect_set s);
/* The server command of configuration s at port and slot (expanded, the
 * toggles' args appended), and its environment. */
char *bisect_set_command(const struct bisect_config *c, bisect_set s, int port,
                         int slot);

/* Runs the bisect. 0, or -EINTR (stopped), -ECONNREFUSED (the golden could
 * not be started or reached), -EADDRINUSE (a port held by a process bisect
 * did not start), -EOWNERDEAD (a watchdog died; every server stopped),
 * -errno; d says why. The outcome holds what
 * finished either way; release it with bisect_outcome_release. */
int bisect_run(const struct bisect_config *c, const struct bisect_opts *o,
               struct bisect_outcome *out, struct diag *d);
void bisect_outcome_release(struct bisect_outcome *out);

#endif
