/*
 * need: what a test does when a real part it drives (a program, an npm
 * tool, a built command) is missing on this machine. Outside CI the test
 * is skipped with one line naming the part and `make deps`; under CI=true,
 * where `make deps` must have installed everything, the same line fails
 * it, so a green CI run cannot hide a missing install. Every test that
 * would skip for a missing part goes through here.
 */
#ifndef TESTS_UTIL_NEED_H
#define TESTS_UTIL_NEED_H

#include <stdbool.h>

/* True when CI is set to "true" (or "1") in the environment. */
bool need_is_ci(void);
/* Ends the calling test: skipped, or failed under CI. part is what is
 * missing, as a person would install it ("the openssl command"). */
#define need_missing(part) need_missing_at((part), __FILE__, __LINE__)
/* Returns when the command name is on PATH; else need_missing. */
#define need_command(name) need_command_at((name), __FILE__, __LINE__)

void need_missing_at(const char *part, const char *file, int line);
void need_command_at(const char *name, const char *file, int line);

#endif
