/*
 * bisectfx: what the tests of `fidelity bisect`
 * (tests/bisect/test_cmd_bisect.c, local launches; test_slurm.c, Slurm jobs)
 * share: the five toggles of the acceptance config, the launch counter their
 * server commands append to, and reading bisect's JSON.
 */
#ifndef TESTS_UTIL_BISECTFX_H
#define TESTS_UTIL_BISECTFX_H

#include <jansson.h>
#include <stddef.h>

#include "core/buf.h"

/* A test file's runs: a fresh directory under /tmp and the environment
 * marker every server of its configs carries (util/marked.h). */
struct bisectfx {
    char dir[64];
    char mark[64];
};

/* Makes the directory and the marker: 0, or -1. */
int bisectfx_begin(struct bisectfx *f);
/* Waits for every marked server to be gone (5 s), removes the directory:
 * 0, or -1. */
int bisectfx_end(struct bisectfx *f);

/* A fresh run directory DIR/name with config.ini (its path into cfg): the
 * sim as the server (server_extra its options; every launch appends a line
 * to DIR/name/count), the test profile, then the toggles text (which may
 * open with more [measure] lines). */
void bisectfx_config(const struct bisectfx *f, const char *name,
                     const char *server_extra, const char *toggles, char *cfg,
                     size_t len);

/* Runs bisect on cfg in mode with extra options (words split at spaces,
 * at most 4; NULL: none); output
 * dir DIR/name/out, JSON in DIR/name/out.json (loaded into *j when j).
 * Checks that no marked server is left. The exit code. */
int bisectfx_bisect(const struct bisectfx *f, const char *name, const char *cfg,
                    const char *mode, const char *extra, struct buf *out,
                    struct buf *err, json_t **j);

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

/* The culprits of bisect's JSON by name, in the first line's order,
 * joined by ',' into out. */
void bisectfx_culprits(const json_t *j, char *out, size_t len);

/* Runs one mode over run `name` (adaptive fresh, the others with --resume
 * --slots=2 over the results before) and checks the culprits it names, in
 * order (want: names joined by ','), and the first line's start. */
void bisectfx_mode_names(const struct bisectfx *fx, const char *name,
                         const char *cfg, const char *mode, const char *want);

/* Run `name`: n toggles, n - specials label flags then the specials text
 * (one needle case unless it uses --forget-after); adaptive first, its
 * launches within 1 + 1 + d (ceil(log2 n) + 2), then one-at-a-time and
 * leave-one-out, each naming want (want_one, want_loo where they differ:
 * what each can tell of a pair; NULL: want). */
void bisectfx_every_mode(const struct bisectfx *fx, const char *name, int n,
                         int specials, const char *toggles, int d,
                         const char *want, const char *want_one,
                         const char *want_loo);

/* The string r[k], "" when absent. */
const char *bisectfx_str(const json_t *r, const char *k);

#endif
