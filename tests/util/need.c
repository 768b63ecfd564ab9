/*
 * need: skip, or fail under CI=true, a test whose real part is missing
 * (see need.h). cmocka's _skip and _fail end the test by longjmp, so
 * neither function returns when the part is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/need.h"
#include "util/sh.h"

bool need_is_ci(void)
{
    const char *ci = getenv("CI");
    return ci && (!strcmp(ci, "true") || !strcmp(ci, "1"));
}

void need_missing_at(const char *part, const char *file, int line)
{
    if (need_is_ci()) {
        print_error("missing %s: run 'make deps' (CI=true: a missing part "
                    "fails the test)\n",
                    part);
        _fail(file, line);
    }
    print_message("missing %s: run 'make deps'; test skipped\n", part);
    _skip(file, line);
}

void need_command_at(const char *name, const char *file, int line)
{
    if (sh_has(name))
        return;
    char part[160];
    snprintf(part, sizeof(part), "the '%s' command", name);
    need_missing_at(part, file, line);
}
