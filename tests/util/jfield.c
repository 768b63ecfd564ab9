/* jfield: a --json document's fields in tests; see jfield.h. */
#include "util/jfield.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

const json_t *jfield_get(const json_t *j, const char *a, const char *b)
{
    const json_t *v = a ? json_object_get(j, a) : j;
    return b ? json_object_get(v, b) : v;
}

double jfield_num(const json_t *j, const char *a, const char *b)
{
    const json_t *v = jfield_get(j, a, b);
    if (!json_is_number(v))
        fail_msg("'%s.%s' is not a number", a ? a : "", b ? b : "");
    return json_number_value(v);
}

const char *jfield_str(const json_t *j, const char *a, const char *b)
{
    const json_t *v = jfield_get(j, a, b);
    if (!json_is_string(v))
        fail_msg("'%s.%s' is not a string", a ? a : "", b ? b : "");
    return json_string_value(v);
}
