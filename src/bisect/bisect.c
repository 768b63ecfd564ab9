/*
 * bisect: the golden, then the configurations of the mode, on
 * `slots` worker threads (adaptive mode: one, as each set depends on the
 * last answer). Per configuration: launch (launch.h), wait for ready, run
 * `fidelity drift` and `fidelity probe` as child processes writing JSON
 * into DIR, stop, and write DIR/NAME.json (to a temporary name, then
 * renamed, so a killed bisect leaves finished files only).
 *
 * Some failures stop the whole bisect instead of marking one configuration
 * unmeasured, as going on would measure the wrong thing: a port held by a
 * process bisect did not start (-EADDRINUSE), a watchdog that died
 * (-EOWNERDEAD; a monitor thread watches the golden's, each worker its
 * own configuration's). The first such error is kept, `halt` is set, every
 * measurement is interrupted and every server stopped.
 */
#define _GNU_SOURCE
#include "bisect/bisect.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bisect/inspect.h"
#include "bisect/port.h"
#include "bisect/verdict.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/xalloc.h"
#include "drift/tape.h"
#include "http/client.h"

const char *bisect_phase_name(enum bisect_phase p)
{
    static const char *const n[] = {"starting",  "waiting for ready",
                                    "comparing", "probing",
                                    "stopping",  "done"};
    return n[p];
}

char *bisect_set_name(const struct bisect_config *c, bisect_set s)
{
    if (!s)
        return xstrdup("golden");
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < c->n_toggles; i++)
        if (s & ((bisect_set)1 << i))
            buf_printf(&b, "%s%s", b.len ? "+" : "", c->toggles[i].name);
    return buf_detach(&b, NULL);
}

char *bisect_set_template(const struct bisect_config *c, bisect_set s)
{
    struct buf b = BUF_INIT;
    buf_adds(&b, c->command);
    for (size_t i = 0; i < c->n_toggles; i++)
        if ((s & ((bisect_set)1 << i)) && *c->toggles[i].args)
            buf_printf(&b, " %s", c->toggles[i].args);
    return buf_detach(&b, NULL);
}

char *bisect_set_command(const struct bisect_config *c, bisect_set s, int port,
                         int slot)
{
    char *t = bisect_set_template(c, s);
    char *e = bisect_expand(t, port, slot);
    free(t);
    return e;
}

struct ctx {
    const struct bisect_config *c;
    const struct bisect_opts *o;
    struct launcher *l;
    char golden[256];
    json_t *golden_fp; /* the golden's fingerprint (inspect.h) */
    pthread_mutex_t mu;
    size_t launches, next, total, started;
    bisect_set *sets;
    struct bisect_outcome *out;
    int err;
    struct diag d;
    volatile sig_atomic_t halt; /* stop everything: interrupted or fatal */
    int fatal;                  /* the first error that stops the bisect */
    struct diag fatal_d;
    struct launch *golden_lx; /* watched by the monitor thread */
    bool monitor_done;
};

static bool stopping(struct ctx *x)
{
    return x->halt || (x->o->stop && *x->o->stop);
}

/* Errors after which nothing more may be measured. */
static bool is_fatal(int rc)
{
    return rc == -EADDRINUSE || rc == -EOWNERDEAD;
}

static void set_fatal(struct ctx *x, int rc, const struct diag *d)
{
    pthread_mutex_lock(&x->mu);
    if (!x->fatal) {
        x->fatal = rc;
        x->fatal_d = *d;
    }
    x->halt = 1;
    pthread_mutex_unlock(&x->mu);
}

/* 0 while lx runs as launched; else the fatal error is set. */
static int watch(struct ctx *x, struct launch *lx)
{
    struct diag d = {0};
    int rc = lx && x->l->ops->check ? x->l->ops->check(lx, &d) : 0;
    if (is_fatal(rc))
        set_fatal(x, rc, &d);
    return is_fatal(rc) ? rc : 0;
}

/* Until the bisect ends: a signal to bisect halts the workers, and the
 * golden's watchdog dying stops the bisect. */
static void *monitor(void *arg)
{
    struct ctx *x = arg;
    for (;;) {
        pthread_mutex_lock(&x->mu);
        bool done = x->monitor_done;
        pthread_mutex_unlock(&x->mu);
        if (done)
            return NULL;
        if (x->o->stop && *x->o->stop)
            x->halt = 1;
        watch(x, x->golden_lx);
        clock_nap_ms(50);
    }
}

static void progress_at(struct ctx *x, const char *name, size_t idx,
                        enum bisect_phase ph, int port)
{
    if (!x->o->on_progress)
        return;
    size_t total = idx && x->o->mode != BISECT_ADAPTIVE ? x->total : 0;
    struct bisect_progress p = {name, idx, total, ph, port};
    pthread_mutex_lock(&x->mu);
    x->o->on_progress(x->o->ud, &p);
    pthread_mutex_unlock(&x->mu);
}

static void progress(struct ctx *x, const char *name, size_t idx,
                     enum bisect_phase ph)
{
    progress_at(x, name, idx, ph, 0);
}

/* The profile's options for drift (which 0), probe (1), or drift against
 * a saved golden file (2: the file sets the options that shape requests,
 * so only the others are given). */
static const char *profile_args(const struct bisect_config *c, int which)
{
    static const char *const test[] = {
        "--sequences 2 --max-context 1024 --decode-tokens 16 "
        "--decode-seqs 1 --decode-prompt 128 --bootstrap 50 --jobs 1",
        "--kinds needle --lengths 1k,2k,4k,8k,16k --depths 0,25,50,75,100 "
        "--max-tokens 64 -j 2",
        "--bootstrap 50 --jobs 1"};
    static const char *const quick[] = {"--sequences 4 --max-context 4096",
                                        "--profile quick", ""};
    return !strcmp(c->profile, "test") ? test[which] : quick[which];
}

static void add_words(const char ***v, size_t *n, char *s)
{
    char *save = NULL;
    for (char *t = strtok_r(s, " \t", &save); t;
         t = strtok_r(NULL, " \t", &save)) {
        *v = xrealloc(*v, (*n + 2) * sizeof(**v));
        (*v)[(*n)++] = t;
    }
}

/* Runs fidelity with argv (words of `fixed`, then `extra`), output to log;
 * its exit code, or -1. */
static int run_self(struct ctx *x, const char *fixed, const char *extra,
                    const char *log, struct launch *lx)
{
    char *a = xstrdup(fixed), *b = xstrdup(extra);
    const char **v = xcalloc(2, sizeof(*v));
    size_t n = 0;
    v[n++] = x->o->self;
    add_words(&v, &n, a);
    add_words(&v, &n, b);
    v[n] = NULL;
    int rc = -1;
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_t p = fd < 0 ? -1 : fork();
    if (p == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        execv(x->o->self, (char *const *)v);
        _exit(127);
    }
    int st;
    bool sent = false; /* when bisect is stopped, so is the measurement */
    int pfd = p > 0 ? launch_pidfd(p) : -1; /* woken by its exit */
    while (p > 0) {
        pid_t w = waitpid(p, &st, WNOHANG);
        if (w == p) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
        if (!sent && (stopping(x) || watch(x, lx))) {
            kill(p, SIGINT);
            sent = true;
        }
        launch_wait_fd(pfd, 50); /* or a stop, looked at every 50 ms */
    }
    if (pfd >= 0)
        close(pfd);
    if (fd >= 0)
        close(fd);
    free(v);
    free(a);
    free(b);
    return rc;
}

static json_t *load_json(const char *path)
{
    return json_load_file(path, 0, NULL);
}

static char *path_of(struct ctx *x, const char *name, const char *ext)
{
    return xasprintf("%s/%s%s", x->o->dir, name, ext);
}

static void set_error(json_t *doc, const char *log, const char *fmt,
                      const char *detail)
{
    char msg[600];
    snprintf(msg, sizeof(msg), fmt, detail);
    json_object_set_new(doc, "status", json_string("failed"));
    json_object_set_new(doc, "error", json_string(msg));
    struct buf t = BUF_INIT;
    if (log && !launch_log_tail(log, 15, &t))
        json_object_set_new(doc, "log_tail", json_string(buf_str(&t)));
    buf_release(&t);
}

/* Drift then probe of the running candidate at addr; fills doc. */
static void measure_running(struct ctx *x, const char *name, size_t idx,
                            const char *addr, struct launch *lx, json_t *doc)
{
    char *mlog = path_of(x, name, ".measure.log");
    char *dj = path_of(x, name, ".drift.json");
    char *pj = path_of(x, name, ".probe.json");
    /* its own store: with --slots N the probes of N configurations run at
     * once, and one shared file made them wait on each other's locks (a
     * probe failed under load) */
    char *db = path_of(x, name, ".probe.db");
    char fixed[2048];
    const char *file = x->c->golden_file;
    progress(x, name, idx, BISECT_COMPARING);
    snprintf(fixed, sizeof(fixed),
             "drift %s %s --candidate %s --json %s --no-store %s%s%s",
             file ? "--golden-file" : "--golden", file ? file : x->golden, addr,
             dj, profile_args(x->c, file ? 2 : 0),
             x->c->model ? " --model " : "", x->c->model ? x->c->model : "");
    double t0 = clock_now_s();
    int rc = run_self(x, fixed, x->c->drift_args, mlog, lx);
    json_object_set_new(doc, "drift_seconds", json_real(clock_now_s() - t0));
    json_t *drift = rc == 0 || rc == 1 ? load_json(dj) : NULL;
    if (file) { /* no golden to be probe's baseline: drift alone */
        if (drift) {
            json_object_set_new(doc, "status", json_string("ok"));
            json_object_set_new(doc, "drift", drift);
            json_object_set_new(doc, "recall", json_string("not measured"));
        } else {
            set_error(doc, mlog, "%s failed; see the measurement log", "drift");
        }
        goto out;
    }
    progress(x, name, idx, BISECT_PROBING);
    snprintf(fixed, sizeof(fixed),
             "probe --endpoint %s --baseline %s --json %s --db %s --fresh "
             "%s%s%s",
             addr, x->golden, pj, db, profile_args(x->c, 1),
             x->c->model ? " --model " : "", x->c->model ? x->c->model : "");
    t0 = clock_now_s();
    rc = drift ? run_self(x, fixed, x->c->probe_args, mlog, lx) : -1;
    json_object_set_new(doc, "probe_seconds", json_real(clock_now_s() - t0));
    json_t *probe = rc == 0 || rc == 1 ? load_json(pj) : NULL;
    if (drift && probe) {
        json_object_set_new(doc, "status", json_string("ok"));
        json_object_set_new(doc, "drift", drift);
        json_object_set_new(doc, "probe", probe);
    } else {
        json_decref(drift);
        json_decref(probe);
        set_error(doc, mlog, "%s failed; see the measurement log",
                  drift ? "probe" : "drift");
    }
out:
    free(mlog);
    free(dj);
    free(pj);
    free(db);
}

static void spec_env(const struct bisect_config *c, bisect_set s, int port,
                     int slot, char ***env, size_t *n)
{
    *n = 0;
    *env = NULL;
    for (size_t i = 0; i < c->n_env; i++) {
        *env = xrealloc(*env, (*n + 1) * sizeof(**env));
        (*env)[(*n)++] = bisect_expand(c->env[i], port, slot);
    }
    for (size_t t = 0; t < c->n_toggles; t++)
        for (size_t i = 0; (s >> t & 1) && i < c->toggles[t].n_env; i++) {
            *env = xrealloc(*env, (*n + 1) * sizeof(**env));
            (*env)[(*n)++] = bisect_expand(c->toggles[t].env[i], port, slot);
        }
}

/* Launches s on slot; on ready, *lx is running and addr set. Else doc
 * holds the failure. */
static int start_set(struct ctx *x, bisect_set s, int slot, const char *name,
                     size_t idx, struct launch **lx, char *addr, json_t *doc)
{
    const struct bisect_config *c = x->c;
    int port = c->first_port             ? c->first_port + slot
               : x->l->ops->port_on_node ? -1
                                         : bisect_port_pick();
    char *cmd = bisect_set_command(c, s, port, slot);
    char *url = bisect_expand(c->ready_url, port, slot);
    char *log = path_of(x, name, ".server.log");
    char **env;
    size_t n_env;
    spec_env(c, s, port, slot, &env, &n_env);
    struct launch_spec spec = {name,
                               cmd,
                               env,
                               n_env,
                               c->workdir,
                               log,
                               url,
                               c->ready_timeout,
                               c->stop_signal,
                               c->stop_grace,
                               port > 0 ? port : 0};
    json_object_set_new(doc, "command", json_string(cmd));
    json_object_set_new(doc, "log", json_string(log));
    if (port > 0)
        json_object_set_new(doc, "port", json_integer(port));
    struct diag d = {0};
    progress_at(x, name, idx, BISECT_STARTING, port > 0 ? port : 0);
    int rc = x->l->ops->submit(x->l, &spec, lx, &d);
    if (!rc) {
        pthread_mutex_lock(&x->mu);
        x->launches++;
        pthread_mutex_unlock(&x->mu);
        progress(x, name, idx, BISECT_WAITING);
        rc = x->l->ops->wait_ready(*lx, slot ? &x->halt : x->o->stop, addr, 256,
                                   &d);
        if (rc) {
            progress(x, name, idx, BISECT_STOPPING);
            x->l->ops->cancel(*lx, NULL);
            *lx = NULL;
        }
    }
    if (rc)
        set_error(doc, log, "%s", d.msg);
    if (is_fatal(rc))
        set_fatal(x, rc, &d);
    for (size_t i = 0; i < n_env; i++)
        free(env[i]);
    free(env);
    free(cmd);
    free(url);
    free(log);
    return rc;
}

static void write_doc(struct ctx *x, const char *name, json_t *doc)
{
    char *path = path_of(x, name, ".json");
    char *tmp = path_of(x, name, ".json.tmp");
    if (!json_dump_file(doc, tmp, JSON_INDENT(1) | JSON_SORT_KEYS))
        rename(tmp, path);
    free(path);
    free(tmp);
}

static json_t *stored(struct ctx *x, const char *name)
{
    if (!x->o->resume)
        return NULL;
    char *path = path_of(x, name, ".json");
    json_t *doc = load_json(path);
    free(path);
    if (doc && strcmp(json_string_value(json_object_get(doc, "status"))
                          ? json_string_value(json_object_get(doc, "status"))
                          : "",
                      "ok")) {
        json_decref(doc);
        doc = NULL;
    }
    return doc;
}

/* The endpoints drift's fingerprint asks (drift/transport.c): all a saved
 * golden file holds, so all a candidate is compared on against one. */
static const char *const drift_fp_paths[] = {"/v1/models", "/version",
                                             "/get_server_info"};
#define DRIFT_FP_PATHS (sizeof(drift_fp_paths) / sizeof(*drift_fp_paths))

/* The server's fingerprint (inspect.h); against a saved golden file, from
 * the endpoints the file holds. */
static json_t *fingerprint_of(const struct ctx *x, const char *addr)
{
    struct http_client *c = http_client_new();
    json_t *a = NULL, *fp = NULL;
    if (!inspect_fetch(c, addr, 10000, &a, NULL)) {
        if (x->c->golden_file) {
            json_t *only = json_object();
            for (size_t i = 0; i < DRIFT_FP_PATHS; i++) {
                json_t *v = json_object_get(a, drift_fp_paths[i]);
                if (v)
                    json_object_set(only, drift_fp_paths[i], v);
            }
            json_decref(a);
            a = only;
        }
        fp = inspect_normalise(addr, a);
    }
    json_decref(a);
    http_client_free(c);
    return fp;
}

/* What the server reports against the golden, and the note for toggles
 * the server may not read, before anything is measured. */
static void compare_fingerprint(struct ctx *x, bisect_set s, const char *addr,
                                json_t *doc)
{
    json_t *fp = fingerprint_of(x, addr);
    if (!fp || !x->golden_fp) {
        json_decref(fp);
        return;
    }
    json_t *fps[2] = {x->golden_fp, fp};
    json_t *diff = inspect_diff(fps, 2);
    json_object_set_new(doc, "fingerprint", fp);
    json_object_set_new(doc, "fingerprint_diff", diff);
    bool args = false;
    for (size_t i = 0; i < x->c->n_toggles; i++)
        args |= (s >> i & 1) && *x->c->toggles[i].args;
    const char *note = !args ? "not visible in server info"
                       : json_array_size(diff)
                           ? NULL
                           : "possibly not read by the server";
    if (note)
        json_object_set_new(doc, "server_info_note", json_string(note));
}

/* Measures configuration s on slot (or reuses its stored result). */
static json_t *measure_set(struct ctx *x, bisect_set s, int slot, size_t idx)
{
    char *name = bisect_set_name(x->c, s);
    json_t *doc = stored(x, name);
    if (doc) {
        pthread_mutex_lock(&x->mu);
        x->out->reused++;
        pthread_mutex_unlock(&x->mu);
        goto out_done;
    }
    doc = json_object();
    json_object_set_new(doc, "name", json_string(name));
    json_t *tg = json_array();
    for (size_t i = 0; i < x->c->n_toggles; i++)
        if (s >> i & 1)
            json_array_append_new(tg, json_string(x->c->toggles[i].name));
    json_object_set_new(doc, "toggles", tg);
    double t0 = clock_now_s();
    struct launch *lx = NULL;
    char addr[256];
    json_t *tm = json_object();
    if (!start_set(x, s, slot, name, idx, &lx, addr, doc)) {
        double t1 = clock_now_s();
        compare_fingerprint(x, s, addr, doc);
        double t2 = clock_now_s();
        measure_running(x, name, idx, addr, lx, doc);
        watch(x, lx);
        double t3 = clock_now_s();
        progress(x, name, idx, BISECT_STOPPING);
        x->l->ops->cancel(lx, NULL);
        json_object_set_new(tm, "ready", json_real(t1 - t0));
        json_object_set_new(tm, "fingerprint", json_real(t2 - t1));
        json_object_set_new(tm, "measure", json_real(t3 - t2));
        json_object_set_new(tm, "stop", json_real(clock_now_s() - t3));
    }
    json_object_set_new(doc, "timing", tm);
    json_object_set_new(doc, "seconds", json_real(clock_now_s() - t0));
    if (!stopping(x))
        write_doc(x, name, doc);
out_done:
    progress(x, name, idx, BISECT_DONE);
    free(name);
    return doc;
}

static void keep(struct ctx *x, bisect_set s, json_t *doc)
{
    pthread_mutex_lock(&x->mu);
    struct bisect_outcome *o = x->out;
    o->results = xrealloc(o->results, (o->n_results + 1) * sizeof(*o->results));
    o->results[o->n_results++] =
        (struct bisect_result){s, bisect_set_name(x->c, s), doc};
    pthread_mutex_unlock(&x->mu);
}

static void *worker(void *arg)
{
    struct ctx *x = arg;
    pthread_mutex_lock(&x->mu);
    int slot = (int)(++x->started); /* the golden holds slot 0 */
    pthread_mutex_unlock(&x->mu);
    for (;;) {
        pthread_mutex_lock(&x->mu);
        size_t i = x->next++;
        pthread_mutex_unlock(&x->mu);
        if (i >= x->total || stopping(x))
            return NULL;
        keep(x, x->sets[i], measure_set(x, x->sets[i], slot, i + 1));
    }
}

static int adaptive_test(bisect_set s, bool *harmful, void *ud)
{
    struct ctx *x = ud;
    x->total = x->next + 1;
    json_t *doc = measure_set(x, s, 1, ++x->next);
    keep(x, s, doc);
    if (stopping(x))
        return -EINTR;
    struct bisect_verdict v;
    bisect_verdict_of(doc, &v);
    if (!v.measured)
        return diag_set(&x->d, EIO, "configuration '%s' was not measured: %s",
                        json_string_value(json_object_get(doc, "name")),
                        json_string_value(json_object_get(doc, "error")));
    *harmful = v.harmful;
    return 0;
}

/* A saved golden file: read and checked whole before anything is launched
 * (drift reads it again for each configuration); its URL, and its
 * fingerprint for the configurations' server-info comparisons. */
static int golden_from_file(struct ctx *x, json_t *doc, struct diag *d)
{
    struct drift_tape *t = drift_tape_load(x->c->golden_file, d);
    if (!t)
        return -EINVAL;
    json_t *h = drift_tape_header(t);
    const char *url =
        json_string_value(json_object_get(json_object_get(h, "golden"), "url"));
    snprintf(x->golden, sizeof(x->golden), "%s", url ? url : "");
    json_object_set_new(doc, "file", json_string(x->c->golden_file));
    json_object_set_new(doc, "url", json_string(x->golden));
    json_object_set_new(doc, "exchanges",
                        json_integer((json_int_t)drift_tape_count(t)));
    json_t *fp = json_object_get(h, "fingerprint");
    if (json_is_object(fp)) {
        json_t *a = json_object();
        for (size_t i = 0; i < DRIFT_FP_PATHS; i++) {
            json_t *v = json_object_get(fp, drift_fp_paths[i]);
            if (v)
                json_object_set(a, drift_fp_paths[i], v);
        }
        x->golden_fp = inspect_normalise(x->golden, a);
        json_decref(a);
        json_object_set(doc, "fingerprint", x->golden_fp);
    }
    drift_tape_free(t);
    return 0;
}

static int run_golden(struct ctx *x, struct launch **g, struct diag *d)
{
    json_t *doc = json_object();
    x->out->golden = doc;
    if (x->c->golden_file)
        return golden_from_file(x, doc, d);
    if (x->c->golden_url) {
        snprintf(x->golden, sizeof(x->golden), "%s", x->c->golden_url);
        json_object_set_new(doc, "url", json_string(x->golden));
        x->golden_fp = fingerprint_of(x, x->golden);
        return 0;
    }
    json_object_set_new(doc, "name", json_string("golden"));
    if (start_set(x, 0, 0, "golden", 0, g, x->golden, doc)) {
        if (x->fatal) {
            *d = x->fatal_d;
            return x->fatal;
        }
        return diag_set(d, ECONNREFUSED, "the golden did not start: %s",
                        json_string_value(json_object_get(doc, "error")));
    }
    json_object_set_new(doc, "url", json_string(x->golden));
    x->golden_fp = fingerprint_of(x, x->golden);
    if (x->golden_fp)
        json_object_set(doc, "fingerprint", x->golden_fp);
    return 0;
}

int bisect_run(const struct bisect_config *c, const struct bisect_opts *o,
               struct bisect_outcome *out, struct diag *d)
{
    struct ctx x = {.c = c, .o = o, .out = out};
    memset(out, 0, sizeof(*out));
    if (mkdir(o->dir, 0755) && errno != EEXIST)
        return diag_set(d, errno, "cannot create '%s': %s", o->dir,
                        strerror(errno));
    pthread_mutex_init(&x.mu, NULL);
    x.l = o->launcher ? o->launcher : launch_local_new();
    struct launch *g = NULL;
    pthread_t mon;
    bool mon_on = false;
    int rc = run_golden(&x, &g, d);
    if (rc)
        goto out_launcher;
    x.golden_lx = g;
    mon_on = !pthread_create(&mon, NULL, monitor, &x);
    if (o->mode == BISECT_ADAPTIVE) {
        rc = bisect_adaptive(c->n_toggles, adaptive_test, &x, &out->adaptive);
        if (rc && rc != -EINTR)
            diag_set(d, -rc, "%s", x.d.msg);
    } else {
        rc = bisect_plan_static(o->mode, c->n_toggles, &x.sets, &x.total, d);
        int n = o->slots < 1 ? 1 : o->slots;
        pthread_t th[64];
        for (int i = 0; !rc && i < n && i < 64; i++)
            pthread_create(&th[i], NULL, worker, &x);
        for (int i = 0; !rc && i < n && i < 64; i++)
            pthread_join(th[i], NULL);
        free(x.sets);
    }
    if (mon_on) {
        pthread_mutex_lock(&x.mu);
        x.monitor_done = true;
        pthread_mutex_unlock(&x.mu);
        pthread_join(mon, NULL);
    }
    if (x.fatal) { /* what stopped the bisect, not what followed */
        rc = x.fatal;
        *d = x.fatal_d;
    } else if (!rc && o->stop && *o->stop)
        rc = diag_set(d, EINTR, "interrupted");
out_launcher:
    if (g)
        x.l->ops->cancel(g, NULL);
    out->launches = x.launches;
    json_decref(x.golden_fp);
    if (!o->launcher)
        x.l->ops->free(x.l);
    pthread_mutex_destroy(&x.mu);
    return rc;
}

void bisect_outcome_release(struct bisect_outcome *out)
{
    for (size_t i = 0; i < out->n_results; i++) {
        free(out->results[i].name);
        json_decref(out->results[i].doc);
    }
    free(out->results);
    json_decref(out->golden);
    memset(out, 0, sizeof(*out));
}
