/*
 * diag: the detail a human needs when a library call fails (a JSON parse
 * position, the SQL that failed, the line of a config file). Library layers
 * return -errno and fill a caller's struct diag; only cmd_* prints it.
 * Messages follow git: lowercase, no full stop, subject quoted.
 */
#ifndef CORE_DIAG_H
#define CORE_DIAG_H

struct diag {
    char msg[512];
};

/* Sets the message (NULL d is allowed and ignored). Returns -err so callers
 * can write `return diag_set(d, EINVAL, "...")`. */
int diag_set(struct diag *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes the existing message with more context: "ctx: old". */
void diag_prefix(struct diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
