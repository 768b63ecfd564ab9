/*
 * Golden files of what `fidelity inspect` prints, as text and as JSON:
 * one fingerprint of each server self-description in tests/fixtures/inspect/
 * (sglang, vLLM, TGI, llama.cpp, each served from 127.0.0.1 as the server
 * answers it), the differences between the four, and a seeded `fidelity
 * sim` alone and against one started with a fault preset. The output is
 * compared byte for byte with tests/bisect/golden/ after the one
 * normalisation of tests/util/golden.h (ports, the sim's version);
 * FIDELITY_GOLDEN_UPDATE=1 (`make golden`) rewrites the files. Every server
 * is stopped in teardown, also after a failed assertion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/xalloc.h"
#include "util/fakesrv.h"
#include "util/golden.h"
#include "util/proc.h"

#define GOLDEN "tests/bisect/golden/"

/* The endpoints each server answers, with the fixture it answers. */
static const struct fakesrv_route sglang[] = {
    {"/get_server_info", "sglang-get_server_info.json"}, {NULL, NULL}};
static const struct fakesrv_route vllm[] = {
    {"/version", "vllm-version.json"},
    {"/v1/models", "vllm-v1-models.json"},
    {NULL, NULL}};
static const struct fakesrv_route tgi[] = {{"/info", "tgi-info.json"},
                                           {NULL, NULL}};
static const struct fakesrv_route llamacpp[] = {
    {"/props", "llamacpp-props.json"}, {NULL, NULL}};

#define NFAKE 4
static struct fakesrv *fake[NFAKE];
static struct proc P[2];
static bool up[2];

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NFAKE; i++) {
        fakesrv_stop(fake[i]);
        fake[i] = NULL;
    }
    for (int i = 1; i >= 0; i--)
        if (up[i]) {
            proc_stop(&P[i]);
            up[i] = false;
        }
    return 0;
}

/* Starts fake server i answering routes; returns its URL. */
static char *fake_start(int i, const struct fakesrv_route *routes)
{
    int port;
    fake[i] = fakesrv_start(fakesrv_files, (void *)routes, &port);
    assert_non_null(fake[i]);
    return xasprintf("http://127.0.0.1:%d", port);
}

/* Starts sim i, seeded, with preset (NULL: none, the list ends at the
 * seed); returns its URL. */
static char *sim(int i, const char *preset)
{
    const char *av[] = {"sim",    "--listen", "127.0.0.1:0",
                        "--seed", "7",        preset ? "--preset" : NULL,
                        preset,   NULL};
    assert_int_equal(proc_start(&P[i], av), 0);
    up[i] = true;
    return xstrdup(proc_url(&P[i]));
}

/* `inspect URL` (text) of one fixture server into NAME.txt. */
static void one(const char *name, const struct fakesrv_route *routes)
{
    char *u = fake_start(0, routes), *txt = xasprintf(GOLDEN "%s.txt", name);
    const char *av[] = {"inspect", u, NULL};
    bool ok = golden_cmd(txt, 0, NULL, av, 30, NULL);
    free(txt);
    free(u);
    assert_true(ok);
}

static void test_sglang(void **state)
{
    (void)state;
    one("sglang", sglang);
}

static void test_vllm(void **state)
{
    (void)state;
    one("vllm", vllm);
}

static void test_tgi(void **state)
{
    (void)state;
    one("tgi", tgi);
}

static void test_llamacpp(void **state)
{
    (void)state;
    one("llamacpp", llamacpp);
}

/* The four servers at once: the fields that differ (text), and every
 * fingerprint with the differences (JSON). */
static void test_four_servers(void **state)
{
    (void)state;
    char *u[NFAKE] = {fake_start(0, sglang), fake_start(1, vllm),
                      fake_start(2, tgi), fake_start(3, llamacpp)};
    const char *av[] = {"inspect", u[0], u[1], u[2], u[3], NULL};
    const char *aj[] = {"inspect", u[0], u[1], u[2], u[3], "--json", "-", NULL};
    bool ok = golden_cmd(GOLDEN "four-servers.txt", 0, NULL, av, 30, NULL);
    ok = golden_cmd(GOLDEN "four-servers.json", 0, NULL, aj, 30, NULL) && ok;
    for (int i = 0; i < NFAKE; i++)
        free(u[i]);
    assert_true(ok);
}

/* A healthy seeded sim alone (text and JSON), and against one with the
 * mhc-bf16 and splitk-decode presets (text and JSON). */
static void test_sims(void **state)
{
    (void)state;
    char *a = sim(0, NULL), *b = sim(1, "mhc-bf16,splitk-decode");
    const char *av[] = {"inspect", a, NULL};
    const char *aj[] = {"inspect", a, "--json", "-", NULL};
    const char *dv[] = {"inspect", a, b, NULL};
    const char *dj[] = {"inspect", a, b, "--json", "-", NULL};
    bool ok = golden_cmd(GOLDEN "sim.txt", 0, NULL, av, 30, NULL);
    ok = golden_cmd(GOLDEN "sim.json", 0, NULL, aj, 30, NULL) && ok;
    ok = golden_cmd(GOLDEN "sim-presets.txt", 0, NULL, dv, 30, NULL) && ok;
    ok = golden_cmd(GOLDEN "sim-presets.json", 0, NULL, dj, 30, NULL) && ok;
    free(a);
    free(b);
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sglang, teardown),
        cmocka_unit_test_teardown(test_vllm, teardown),
        cmocka_unit_test_teardown(test_tgi, teardown),
        cmocka_unit_test_teardown(test_llamacpp, teardown),
        cmocka_unit_test_teardown(test_four_servers, teardown),
        cmocka_unit_test_teardown(test_sims, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
