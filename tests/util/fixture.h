/*
 * fixture: the captured test data under tests/fixtures/ (paths relative to
 * the repository root, where the tests run). A fixture that is missing or
 * unreadable fails the calling test with one line naming the file; it never
 * hands back NULL for a test to crash on.
 */
#ifndef TESTS_UTIL_FIXTURE_H
#define TESTS_UTIL_FIXTURE_H

#include <jansson.h>
#include <stdio.h>

#include "core/buf.h"

#define OPENCODE_FIXTURES "tests/fixtures/opencode-1.18.33/"

/* OPENCODE_FIXTURES NAME as a new string; fails the test when the file
 * cannot be read. */
char *fixture_path(const char *name);
/* The parsed JSON file (a new reference). */
json_t *fixture_json(const char *name);
/* Appends the file's bytes to b. */
void fixture_read(const char *name, struct buf *b);
/* The file opened for reading; the caller closes it. */
FILE *fixture_open(const char *name);

#endif
