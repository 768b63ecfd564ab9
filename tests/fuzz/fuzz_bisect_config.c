/*
 * fuzz_bisect_config: the bisect CONFIG parser on arbitrary bytes.
 * Invariants: a config that parses has a command with {port}, at least one
 * toggle, distinct toggle names, every toggle changing something, and only
 * {port}/{slot} placeholders; a config that fails leaves everything released
 * and a one-line message that starts with the file name; parsing the same
 * bytes twice gives the same answer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bisect/config.h"

static void check_placeholders(const char *s)
{
    for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{'))
        if (strncmp(p, "{port}", 6) && strncmp(p, "{slot}", 6))
            abort();
}

static void check_good(const struct bisect_config *c)
{
    if (!c->command || !strstr(c->command, "{port}") || !c->n_toggles ||
        !c->ready_url || !c->profile)
        abort();
    check_placeholders(c->command);
    check_placeholders(c->ready_url);
    for (size_t i = 0; i < c->n_toggles; i++) {
        const struct bisect_toggle *t = &c->toggles[i];
        if (!*t->args && !t->n_env)
            abort();
        check_placeholders(t->args);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(c->toggles[j].name, t->name))
                abort();
        for (size_t j = 0; j < t->n_env; j++)
            if (!strchr(t->env[j], '='))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bisect_config a, b;
    struct diag da = {0}, db = {0};
    int ra = bisect_config_parse(&a, "fuzz.ini", (const char *)data, size, &da);
    int rb = bisect_config_parse(&b, "fuzz.ini", (const char *)data, size, &db);
    if (ra != rb || strcmp(da.msg, db.msg))
        abort();
    if (ra == 0) {
        check_good(&a);
        if (a.n_toggles != b.n_toggles || strcmp(a.command, b.command))
            abort();
    } else {
        if (strncmp(da.msg, "fuzz.ini", 8) || strchr(da.msg, '\n') ||
            a.command || a.toggles || a.file)
            abort();
    }
    bisect_config_release(&a);
    bisect_config_release(&b);
    return 0;
}
