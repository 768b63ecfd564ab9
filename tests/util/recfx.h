/*
 * recfx: the fixture of record's proxy tests: the scripted upstream
 * (upstream.h) and `fidelity record` in front of it on ephemeral ports,
 * with its store and spill file in a temporary directory.
 */
#ifndef TESTS_UTIL_RECFX_H
#define TESTS_UTIL_RECFX_H

#include "util/proc.h"

struct recfx {
    struct upstream *up;
    char *dir;
    char db[256];
    char spill[256]; /* record's default: DB.spill.jsonl */
    struct proc rec;
    char url[64]; /* record's base URL */
};

/* Starts both; record forwards to `upstream` instead of the scripted one
 * when not NULL, with the extra options (NULL-terminated, may be NULL).
 * NULL when either fails to start. */
struct recfx *recfx_start(const char *const extra[], const char *upstream);
/* Stops what is still running and removes the directory. NULL: nothing. */
void recfx_stop(struct recfx *f);

#endif
