/*
 * golden: see golden.h.
 */
#include "util/golden.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "util/proc.h"
#include "version.h"

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
                "them; 'make golden' regenerates after a deliberate "
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

/* text with every occurrence of from replaced by to (a new string). */
static char *replace_all(const char *text, const char *from, const char *to)
{
    struct buf b = BUF_INIT;
    size_t k = strlen(from);
    const char *p = text, *q;
    while (k && (q = strstr(p, from))) {
        buf_add(&b, p, (size_t)(q - p));
        buf_adds(&b, to);
        p = q + k;
    }
    buf_adds(&b, p);
    char *s = buf_detach(&b, NULL);
    return s ? s : xstrdup("");
}

char *golden_normalise(const char *text, const char *const *subs)
{
    char *s = xstrdup(text);
    for (size_t i = 0; subs && subs[i] && subs[i + 1]; i += 2) {
        char *t = replace_all(s, subs[i], subs[i + 1]);
        free(s);
        s = t;
    }
    static const char *const names[] = {"fidelity ", "fidelity-sim "};
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        char *from = xasprintf("%s%s", names[i], FIDELITY_VERSION);
        char *to = xasprintf("%sVERSION", names[i]);
        char *t = replace_all(s, from, to);
        free(s);
        free(from);
        free(to);
        s = t;
    }
    static const char host[] = "127.0.0.1:";
    struct buf b = BUF_INIT;
    const char *p = s, *q;
    while ((q = strstr(p, host))) {
        q += sizeof(host) - 1;
        buf_add(&b, p, (size_t)(q - p));
        p = q;
        if (isdigit((unsigned char)*p)) {
            while (isdigit((unsigned char)*p))
                p++;
            buf_adds(&b, "PORT");
        }
    }
    buf_adds(&b, p);
    free(s);
    s = buf_detach(&b, NULL);
    return s ? s : xstrdup("");
}

bool golden_cmd(const char *path, int rc, const char *const *subs,
                const char *const argv[], int timeout_s, char **err_out)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    int got = proc_run(argv, NULL, &out, &err, timeout_s);
    bool ok = true;
    if (got != rc) {
        fprintf(stderr, "golden: 'fidelity %s' for '%s' exited %d, not %d\n",
                argv[0], path, got, rc);
        ok = false;
    }
    if (err_out)
        *err_out = golden_normalise(buf_str(&err), subs);
    else if (err.len) {
        fprintf(stderr, "golden: 'fidelity %s' for '%s' wrote on stderr:\n%s",
                argv[0], path, buf_str(&err));
        ok = false;
    }
    char *norm = golden_normalise(buf_str(&out), subs);
    ok = golden_check(path, norm) && ok;
    free(norm);
    buf_release(&out);
    buf_release(&err);
    return ok;
}
