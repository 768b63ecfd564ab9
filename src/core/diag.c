/*
 * diag: human-readable failure detail filled by library layers.
 */
#include "core/diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int diag_set(struct diag *d, int err, const char *fmt, ...)
{
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
        va_end(ap);
    }
    return err > 0 ? -err : err;
}

void diag_prefix(struct diag *d, const char *fmt, ...)
{
    if (!d)
        return;
    char pre[256], old[sizeof(d->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    memcpy(old, d->msg, sizeof(old));
    snprintf(d->msg, sizeof(d->msg), "%s: %s", pre, old);
}
