/*
 * fixture: reading tests/fixtures/ with one-line failures (see the header).
 */
#include "util/fixture.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/xalloc.h"

char *fixture_path(const char *name)
{
    char *path = xasprintf("%s%s", OPENCODE_FIXTURES, name);
    if (access(path, R_OK) != 0)
        fail_msg("fixture '%s' missing: %s (it ships with the repository; "
                 "run the tests from the repository root)",
                 path, strerror(errno));
    return path;
}

json_t *fixture_json(const char *name)
{
    char *path = fixture_path(name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("fixture '%s' is not JSON: line %d: %s", path, je.line,
                 je.text);
    free(path);
    return j;
}

void fixture_read(const char *name, struct buf *b)
{
    FILE *f = fixture_open(name);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        buf_add(b, tmp, n);
    fclose(f);
}

FILE *fixture_open(const char *name)
{
    char *path = fixture_path(name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("fixture '%s': %s", path, strerror(errno));
    free(path);
    return f;
}
