/* bisectfx: the shared part of bisect's tests; see bisectfx.h. */
#include "util/bisectfx.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/marked.h"
#include "util/proc.h"

int bisectfx_begin(struct bisectfx *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/fidelity-bisect-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->mark, sizeof(f->mark), "FIDELITY_BISECT_TEST=%d",
             (int)getpid());
    return 0;
}

int bisectfx_end(struct bisectfx *f)
{
    marked_after(f->mark, 5);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    return system(cmd) == 0 ? 0 : -1;
}

void bisectfx_config(const struct bisectfx *f, const char *name,
                     const char *server_extra, const char *toggles, char *cfg,
                     size_t len)
{
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/%s", f->dir, name);
    mkdir(sub, 0755);
    snprintf(cfg, len, "%s/config.ini", sub);
    FILE *o = fopen(cfg, "w");
    assert_non_null(o);
    fprintf(o,
            "[server]\n"
            "command = echo launch >> %s/count; exec '%s' sim "
            "--listen 127.0.0.1:{port} %s\n"
            "env = %s\n"
            "ready_timeout = 20\n"
            "stop_grace = 3\n\n"
            "[measure]\nprofile = test\n\n%s",
            sub, fidelity_bin(), server_extra, f->mark, toggles);
    fclose(o);
}

int bisectfx_bisect(const struct bisectfx *f, const char *name, const char *cfg,
                    const char *mode, const char *extra, struct buf *out,
                    struct buf *err, json_t **j)
{
    char od[128], jp[128];
    snprintf(od, sizeof(od), "%s/%s/out", f->dir, name);
    snprintf(jp, sizeof(jp), "%s/%s/out.json", f->dir, name);
    char words[128];
    snprintf(words, sizeof(words), "%s", extra ? extra : "");
    const char *argv[14] = {"bisect", cfg, "--mode", mode,
                            "--out",  od,  "--json", jp};
    size_t n = 8;
    char *save = NULL;
    for (char *w = strtok_r(words, " ", &save); w && n < 12;
         w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    int rc = proc_run(argv, NULL, out, err, 300);
    if (j)
        *j = json_load_file(jp, 0, NULL);
    assert_int_equal(marked_after(f->mark, 3), 0);
    return rc;
}

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

void bisectfx_culprits(const json_t *j, char *out, size_t len)
{
    const json_t *a = json_object_get(j, "culprits");
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < json_array_size(a) && off < len; i++)
        off += (size_t)snprintf(out + off, len - off, "%s%s", i ? "," : "",
                                bisectfx_str(json_array_get(a, i), "name"));
}

/* ceil(log2 n) */
static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* Runs one mode over run `name` (adaptive fresh, the others with
 * --resume over its results: the same servers' answers) and checks the
 * culprits it names, in order, and that the first line starts with the
 * first of them. */
void bisectfx_mode_names(const struct bisectfx *fx, const char *name,
                         const char *cfg, const char *mode, const char *want)
{
    struct buf out = BUF_INIT, err = BUF_INIT;
    json_t *j;
    bool fresh = !strcmp(mode, "adaptive");
    int rc = bisectfx_bisect(fx, name, cfg, mode,
                             fresh ? "--slots=1" : "--resume --slots=2", &out,
                             &err, &j);
    assert_non_null(j);
    char got[256], head[128];
    bisectfx_culprits(j, got, sizeof(got));
    if (strcmp(got, want))
        fail_msg("%s %s named '%s', not '%s':\n%s", name, mode, got, want,
                 buf_str(&out));
    if (rc != 1)
        fail_msg("%s %s exited %d, not 1:\n%s%s", name, mode, rc, buf_str(&out),
                 buf_str(&err));
    size_t k = strcspn(want, ",");
    snprintf(head, sizeof(head), "culprit: %.*s", (int)k, want);
    assert_true(!strncmp(buf_str(&out), head, strlen(head)));
    json_decref(j);
    buf_release(&out);
    buf_release(&err);
}

/* n toggles: n - specials label flags, then the specials; adaptive first
 * (its launches counted: within 1 + d (ceil(log2 n) + 2), the golden
 * besides), then one-at-a-time and leave-one-out; each names `want`
 * (leave-one-out `want_loo`, one-at-a-time `want_one` where they differ:
 * what each can tell of a pair). */
void bisectfx_every_mode(const struct bisectfx *fx, const char *name, int n,
                         int specials, const char *toggles, int d,
                         const char *want, const char *want_one,
                         const char *want_loo)
{
    char t[2048], cfg[128];
    /* one needle case is enough for toggles that leave recall alone */
    size_t off =
        (size_t)snprintf(t, sizeof(t), "%s",
                         strstr(toggles, "forget-after")
                             ? ""
                             : "probe_args = --lengths 1k --depths 50\n\n");
    for (int i = 0; i < n - specials; i++)
        off += (size_t)snprintf(t + off, sizeof(t) - off,
                                "[toggle flag%d]\nenv = FLAG%d=1\n\n", i, i);
    snprintf(t + off, sizeof(t) - off, "%s", toggles);
    bisectfx_config(fx, name, "", t, cfg, sizeof(cfg));
    bisectfx_mode_names(fx, name, cfg, "adaptive", want);
    int launches = bisectfx_launches(fx->dir, name);
    print_message("%s: adaptive %d launches (golden included), bound %d\n",
                  name, launches, 1 + 1 + d * (log2_ceil(n) + 2));
    assert_true(launches <= 1 + 1 + d * (log2_ceil(n) + 2));
    bisectfx_mode_names(fx, name, cfg, "one-at-a-time",
                        want_one ? want_one : want);
    bisectfx_mode_names(fx, name, cfg, "leave-one-out",
                        want_loo ? want_loo : want);
}
