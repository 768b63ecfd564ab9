/*
 * modelsrv: the small real transformer of tests/model/ served for a test.
 * Starts `python3 tests/model/serve.py` on 127.0.0.1 with an ephemeral
 * port and the switches a test asks for, waits until GET /health answers,
 * and stops it: from the test's teardown (so also when an assertion
 * failed), and by the kernel when the test process dies (the server gets
 * SIGKILL when its parent exits).
 *
 * The server needs a python3 that imports torch (Debian's python3-torch,
 * with libopenblas0-pthread; `make deps` installs both). Without one the
 * test is skipped with a line naming the part and `make deps`; under
 * CI=true it fails instead (util/need.h).
 */
#ifndef TESTS_UTIL_MODELSRV_H
#define TESTS_UTIL_MODELSRV_H

#include <stdbool.h>
#include <sys/types.h>

struct modelsrv {
    pid_t pid; /* 0: not running */
    int port;
    char url[64];      /* http://127.0.0.1:PORT */
    char log[64];      /* the server's output (removed by modelsrv_stop) */
    char portfile[64]; /* where serve.py writes its port */
};

/* The python3 that imports torch: $FIDELITY_PYTHON, else python3 on PATH,
 * else /usr/bin/python3, the first that does (checked once per process).
 * Ends the test (skipped, or failed under CI) when none does. */
const char *modelsrv_python(void);

/* Starts serve.py with the switches in args (NULL-terminated serve.py
 * options, e.g. "--splitk", "64"; NULL for none) and waits up to 120 s for
 * /health. The FIDELITY_MODEL_* environment variables the server reads are
 * cleared, so only args choose its numerics. A server that does not come
 * up fails the test with the end of its output. */
void modelsrv_start(struct modelsrv *m, const char *const *args);

/* SIGTERM, up to 5 s, then SIGKILL; removes its files. Does nothing for a
 * server that is not running, so teardowns may call it always. */
void modelsrv_stop(struct modelsrv *m);

#endif
