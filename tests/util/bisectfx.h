/*
 * bisectfx: what the tests of `fidelity bisect`
 * (tests/bisect/test_cmd_bisect.c, local launches; test_slurm.c, Slurm jobs)
 * share: the five toggles of the acceptance config, the launch counter their
 * server commands append to, and reading bisect's JSON.
 */
#ifndef TESTS_UTIL_BISECTFX_H
#define TESTS_UTIL_BISECTFX_H

#include <jansson.h>

/* Five toggles against the sim: a no-op, a small prefill noise, the
 * culprit (prefill noise growing with position), a decode noise, and one
 * half of a pair (--pair-a) that hurts only with its other half. */
extern const char bisectfx_five[];

/* Launches of configuration dir/name: the lines its server command
 * appended to dir/name/count ("echo launch >> .../count"). */
int bisectfx_launches(const char *dir, const char *name);

/* The row of configuration name in bisect's JSON (fails the test when
 * there is none). */
const json_t *bisectfx_row(const json_t *j, const char *name);

/* The string r[k], "" when absent. */
const char *bisectfx_str(const json_t *r, const char *k);

#endif
