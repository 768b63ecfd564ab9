/*
 * jfield: reading a field of a command's --json document in a test, one
 * or two keys deep, failing the test with the path when it is missing or
 * of another type (drift's end-to-end and real-model tests).
 */
#ifndef TESTS_UTIL_JFIELD_H
#define TESTS_UTIL_JFIELD_H

#include <jansson.h>

/* j[a][b]; a or b NULL skips that level. NULL when absent. */
const json_t *jfield_get(const json_t *j, const char *a, const char *b);
/* The number at j[a][b]; fails the test when it is not one. */
double jfield_num(const json_t *j, const char *a, const char *b);
/* The string at j[a][b]; fails the test when it is not one. */
const char *jfield_str(const json_t *j, const char *a, const char *b);

#endif
