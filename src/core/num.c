/*
 * num: strict number parsing for options, config keys and request fields.
 */
#include "core/num.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int num_parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

int num_parse_double(const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || isnan(v) || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}
