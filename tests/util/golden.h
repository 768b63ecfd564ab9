/*
 * golden: comparing output with a golden file under tests/, and the small
 * text helpers the report tests share. With FIDELITY_GOLDEN_UPDATE=1 the
 * golden file is written instead (then reviewed as a diff); otherwise a
 * mismatch leaves the actual output beside it as FILE.actual and fails
 * naming both.
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

#endif
