/*
 * modelsrv: the test model's server for a test (see modelsrv.h).
 */
#include "util/modelsrv.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "http/client.h"
#include "util/need.h"
#include "util/sh.h"

/* The switches serve.py reads from the environment (serve.py's --help). */
static const char *const model_env[] = {
    "FIDELITY_MODEL_MIX_BF16",
    "FIDELITY_MODEL_SPLITK",
    "FIDELITY_MODEL_INDEXER_TOPK",
    "FIDELITY_MODEL_ROUTED_SCALING",
    "FIDELITY_MODEL_INERT",
    "FIDELITY_MODEL_CACHE_KV_DTYPE",
    "FIDELITY_MODEL_CACHE_POS_OFFSET",
    "FIDELITY_MODEL_RECOMPUTE_DIFFERS",
};

/* Where serve.py is: $FIDELITY_MODEL_DIR, else tests/model of the
 * repository root (tests run from there). */
static const char *model_dir(void)
{
    const char *d = getenv("FIDELITY_MODEL_DIR");
    return d && *d ? d : "tests/model";
}

const char *modelsrv_python(void)
{
    static char found[256];
    static int state; /* 0 unknown, 1 found, -1 none */
    if (state == 0) {
        const char *env = getenv("FIDELITY_PYTHON");
        const char *cand[] = {env && *env ? env : NULL, "python3",
                              "/usr/bin/python3"};
        state = -1;
        for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++) {
            if (!cand[i])
                continue;
            char *cmd =
                xasprintf("'%s' -c 'import torch' >/dev/null 2>&1", cand[i]);
            int rc = sh_run(cmd, NULL, NULL, 120);
            free(cmd);
            if (rc == 0) {
                snprintf(found, sizeof(found), "%s", cand[i]);
                state = 1;
                break;
            }
        }
    }
    if (state < 0)
        need_missing("PyTorch for python3 (Debian's python3-torch and "
                     "libopenblas0-pthread), which tests/model/serve.py "
                     "runs on");
    return found;
}

/* The last lines of the server's output, for a failure message. */
static void log_tail(const struct modelsrv *m, char *out, size_t n)
{
    FILE *f = fopen(m->log, "r");
    out[0] = '\0';
    if (!f)
        return;
    char buf[4096];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t k = fread(buf, 1, sizeof(buf) - 1, f);
    buf[k] = '\0';
    fclose(f);
    snprintf(out, n, "%s", buf);
}

static int read_port(const char *path)
{
    FILE *f = fopen(path, "r");
    int port = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &port) != 1)
        port = 0;
    fclose(f);
    return port;
}

static bool healthy(const struct modelsrv *m)
{
    struct http_client *c = http_client_new();
    struct http_resp r;
    struct diag d = {""};
    char url[96];
    snprintf(url, sizeof(url), "%s/health", m->url);
    struct http_req req = {.method = "GET", .url = url, .timeout_ms = 5000};
    http_resp_init(&r);
    bool ok = http_do(c, &req, &r, &d) == 0 && r.status == 200;
    http_resp_release(&r);
    http_client_free(c);
    return ok;
}

static void child(const struct modelsrv *m, const char *py,
                  const char *const *args)
{
    const char *av[64];
    int n = 0;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(m->log, O_WRONLY | O_TRUNC);
    int in = open("/dev/null", O_RDONLY);
    if (fd < 0 || in < 0)
        _exit(126);
    dup2(in, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    for (size_t i = 0; i < sizeof(model_env) / sizeof(model_env[0]); i++)
        unsetenv(model_env[i]);
    char *serve = xasprintf("%s/serve.py", model_dir());
    av[n++] = py;
    av[n++] = serve;
    av[n++] = "--host";
    av[n++] = "127.0.0.1";
    av[n++] = "--port";
    av[n++] = "0";
    av[n++] = "--port-file";
    av[n++] = m->portfile;
    for (size_t i = 0; args && args[i] && n < 63; i++)
        av[n++] = args[i];
    av[n] = NULL;
    execvp(py, (char *const *)av);
    fprintf(stderr, "exec '%s': %s\n", py, strerror(errno));
    _exit(127);
}

void modelsrv_start(struct modelsrv *m, const char *const *args)
{
    const char *py = modelsrv_python();
    char tail[4096];

    memset(m, 0, sizeof(*m));
    snprintf(m->log, sizeof(m->log), "/tmp/fidelity-model-XXXXXX");
    int fd = mkstemp(m->log);
    assert_true(fd >= 0);
    close(fd);
    snprintf(m->portfile, sizeof(m->portfile), "%s.port", m->log);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child(m, py, args);
    m->pid = pid;
    /* importing torch and loading the weights take a few seconds on an
     * idle machine; a loaded CI runner gets much longer */
    time_t end = time(NULL) + 120;
    while (time(NULL) < end) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            m->pid = 0;
            log_tail(m, tail, sizeof(tail));
            unlink(m->log);
            fail_msg("tests/model/serve.py exited (status %d) before it "
                     "listened:\n%s",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, tail);
        }
        if (!m->port && (m->port = read_port(m->portfile)) > 0)
            snprintf(m->url, sizeof(m->url), "http://127.0.0.1:%d", m->port);
        if (m->port && healthy(m))
            return;
        usleep(100000);
    }
    log_tail(m, tail, sizeof(tail));
    modelsrv_stop(m);
    fail_msg("tests/model/serve.py did not answer /health within 120 s:\n%s",
             tail);
}

void modelsrv_stop(struct modelsrv *m)
{
    int status;
    if (m->pid > 0) {
        kill(m->pid, SIGTERM);
        for (int i = 0; i < 500; i++) {
            if (waitpid(m->pid, &status, WNOHANG) == m->pid)
                goto done;
            usleep(10000);
        }
        kill(m->pid, SIGKILL);
        waitpid(m->pid, &status, 0);
    }
done:
    if (m->log[0]) {
        unlink(m->log);
        unlink(m->portfile);
    }
    m->pid = 0;
    m->port = 0;
    m->log[0] = '\0';
}
