/*
 * golden: comparing output with a golden file under tests/, and the small
 * text helpers the report tests share. With FIDELITY_GOLDEN_UPDATE=1 the
 * golden file is written instead (then reviewed as a diff; `make golden`
 * rewrites every one); otherwise a mismatch leaves the actual output beside
 * it as FILE.actual and fails naming both.
 */
#ifndef TESTS_UTIL_GOLDEN_H
#define TESTS_UTIL_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>

/* Compares text with the file at path (relative to the repository root).
 * Returns true when equal (or updated); prints why otherwise. */
bool golden_check(const char *path, const char *text);
/* The <section id="ID">...</section> of html, a fresh string, or NULL. */
char *golden_section(const char *html, const char *id);
/* A whole file, NUL-terminated, fresh; NULL when it cannot be read. */
char *golden_read(const char *path, size_t *len);
/* How many times needle occurs in hay. */
size_t golden_count(const char *hay, const char *needle);

/*
 * The one normalisation of a command's output before it is compared with
 * a golden file: what differs between two runs on the same inputs becomes
 * a placeholder, everything else is kept byte for byte. In order:
 *   - each literal subs[2k] becomes subs[2k + 1] (pairs, NULL-ended; subs
 *     may be NULL): a temporary directory, say, as "DIR";
 *   - "127.0.0.1:N", an ephemeral port, becomes "127.0.0.1:PORT" (Linux
 *     picks them from 32768-60999, so the width of a padded column holding
 *     one does not change);
 *   - "fidelity X" and "fidelity-sim X" where X is FIDELITY_VERSION (what
 *     the sim reports as its version) become "fidelity VERSION" and
 *     "fidelity-sim VERSION".
 * Returns a new string.
 */
char *golden_normalise(const char *text, const char *const *subs);
/*
 * Runs `fidelity ARGV...` (util/proc.h, at most timeout_s seconds) and
 * checks that its exit code is rc and that its stdout, through
 * golden_normalise(subs), equals the golden file at path (golden_check).
 * With err NULL its stderr must be empty; otherwise *err gets its stderr,
 * normalised alike (a new string). Prints why otherwise and returns false.
 */
bool golden_cmd(const char *path, int rc, const char *const *subs,
                const char *const argv[], int timeout_s, char **err);

#endif
