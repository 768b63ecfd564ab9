/*
 * sh: runs a shell command line for tests that drive real tools (make,
 * groff, man, npm) rather than the fidelity binary, capturing what it
 * prints. The command runs from the current directory (the repository
 * root under tests/run.sh) with MAKEFLAGS cleared, so a `make` it starts
 * does not try to join the jobserver of the `make test` around it.
 */
#ifndef TESTS_UTIL_SH_H
#define TESTS_UTIL_SH_H

#include <stdbool.h>

#include "core/buf.h"

/* Runs `/bin/sh -c cmd` for at most timeout_s seconds, stdout appended to
 * out and stderr to err (either may be NULL: discarded). Returns the exit
 * code, or -1 when it was killed or did not exit normally. */
int sh_run(const char *cmd, struct buf *out, struct buf *err, int timeout_s);
/* True when `command -v name` finds an executable. */
bool sh_has(const char *name);

#endif
