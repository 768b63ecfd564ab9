/*
 * url: the one masking rule for URLs that are shown (url.h). A string
 * scan, no parsing: s need not be a well-formed URL (a command-line word,
 * a base URL without a scheme), and whatever looks like a userinfo is
 * hidden whole rather than split into user and password, so a token
 * given as the user name, or a password holding '@' or ':', is hidden too.
 */
#include "core/url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

char *url_mask(const char *s)
{
    const char *scheme = strstr(s, "://");
    const char *start = scheme ? scheme + 3 : s;
    const char *end = start + strcspn(start, "/?#");
    const char *at = NULL;
    for (const char *p = start; p < end; p++)
        if (*p == '@')
            at = p;
    if (!at)
        return xstrdup(s);
    return xasprintf("%.*s***%s", (int)(start - s), s, at);
}

void url_mask_in(char *text, size_t size, const char *url)
{
    char *at = strstr(text, url);
    if (!at || !size)
        return;
    char *m = url_mask(url);
    if (strcmp(m, url)) {
        char *out =
            xasprintf("%.*s%s%s", (int)(at - text), text, m, at + strlen(url));
        snprintf(text, size, "%s", out);
        free(out);
    }
    free(m);
}
