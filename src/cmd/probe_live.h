/*
 * probe_live: the `probe --live` half of cmd_probe.c: plan, dry run,
 * sessions, report and exit code. Called by cmd_probe.c once the endpoint
 * is fingerprinted.
 */
#ifndef CMD_PROBE_LIVE_H
#define CMD_PROBE_LIVE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/live.h"

struct probe_live_cmd {
    const char *json, *db;
    const char *report; /* --report FILE, or NULL */
    int argc;           /* for the page's command line */
    char **argv;
    bool no_store, fresh, dry;
    unsigned jobs, max_tokens, turns, seeds, sendr_mask;
    size_t turn_bytes;
    uint64_t seed;
    double fail_under;
    const struct probe_vary *vary;
    volatile sig_atomic_t *stop;
    void (*on_sigint)(int);
};

/* Runs the live sessions against ep; returns the exit code. */
int cmd_probe_live(const struct probe_live_cmd *o, struct probe_endpoint *ep,
                   const char *extra_key);

#endif
