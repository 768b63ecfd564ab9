/*
 * golden: see golden.h.
 */
#include "util/golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

char *golden_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, r;
    char *s = xmalloc(cap + 1);
    while ((r = fread(s + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            s = xrealloc(s, cap + 1);
        }
    }
    fclose(f);
    s[n] = '\0';
    if (len)
        *len = n;
    return s;
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    return !fclose(f) && ok;
}

bool golden_check(const char *path, const char *text)
{
    if (getenv("FIDELITY_GOLDEN_UPDATE")) {
        if (!write_file(path, text)) {
            fprintf(stderr, "golden: cannot write '%s'\n", path);
            return false;
        }
        fprintf(stderr, "golden: wrote '%s'\n", path);
        return true;
    }
    char *want = golden_read(path, NULL);
    bool same = want && !strcmp(want, text);
    if (!same) {
        char *act = xasprintf("%s.actual", path);
        write_file(act, text);
        fprintf(stderr,
                "golden: output differs from '%s'%s; it is in '%s' (diff "
                "them; 'make golden-report' regenerates after a deliberate "
                "change)\n",
                path, want ? "" : " (missing)", act);
        free(act);
    }
    free(want);
    return same;
}

char *golden_section(const char *html, const char *id)
{
    char *open = xasprintf("<section id=\"%s\">", id);
    const char *a = strstr(html, open);
    free(open);
    if (!a)
        return NULL;
    const char *b = strstr(a, "</section>");
    if (!b)
        return NULL;
    b += strlen("</section>");
    return xasprintf("%.*s\n", (int)(b - a), a);
}

size_t golden_count(const char *hay, const char *needle)
{
    size_t n = 0, k = strlen(needle);
    for (const char *p = hay; k && (p = strstr(p, needle)); p += k)
        n++;
    return n;
}
