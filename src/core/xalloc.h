/*
 * xalloc: allocation that cannot fail. Out of memory aborts with a message;
 * bad input never reaches here as an allocation failure because every buffer
 * that input can grow has its own cap (see buf.h).
 */
#ifndef CORE_XALLOC_H
#define CORE_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh heap string; the caller frees it. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
