/* bisectfx: the shared part of bisect's tests; see bisectfx.h. */
#include "util/bisectfx.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

const char bisectfx_five[] =
    "[toggle unread-flag]\nargs = --seed 0\npath = prefill\n\n"
    "[toggle fp8-gemm]\nargs = --prefill-noise 0.003\npath = prefill\n\n"
    "[toggle mhc-bf16]\nargs = --prefill-noise 0.05 --noise-growth 1\n"
    "path = decode\n\n"
    "[toggle splitk-decode]\nargs = --decode-noise 0.3\npath = both\n\n"
    "[toggle overlap]\nargs = --pair-a --prefill-noise 0.002\n"
    "path = unknown\n";

int bisectfx_launches(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s/count", dir, name);
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

const json_t *bisectfx_row(const json_t *j, const char *name)
{
    const json_t *a = json_object_get(j, "configurations");
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!strcmp(json_string_value(
                        json_object_get(json_array_get(a, i), "name")),
                    name))
            return json_array_get(a, i);
    fail_msg("no configuration '%s'", name);
    return NULL;
}

const char *bisectfx_str(const json_t *r, const char *k)
{
    const char *s = json_string_value(json_object_get(r, k));
    return s ? s : "";
}
