/*
 * Golden files of what `fidelity drift` prints, as text and as JSON
 * (--json -, which moves the text to stderr: it must be the same text),
 * against two `fidelity sim` servers on ephemeral 127.0.0.1 ports, both
 * seeded: a healthy golden, and a candidate with one of the README's
 * patches as its fault (splitk-decode: decode-only noise; mhc-bf16:
 * prefill noise growing with length). Small runs (2 sequences of 512 or
 * 1,024 tokens, 16 decode tokens, 50 bootstrap replicates, the 10 worst
 * positions) keep them to a few seconds. The output is compared byte for
 * byte with tests/drift/golden/ after the one normalisation of
 * tests/util/golden.h (ports, the sim's version); FIDELITY_GOLDEN_UPDATE=1
 * (`make golden`) rewrites the files. Both servers are stopped in
 * teardown, also after a failed assertion.
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
#include "util/golden.h"
#include "util/proc.h"

#define GOLDEN "tests/drift/golden/"

static struct proc P[2];
static bool up[2];

static int teardown(void **state)
{
    (void)state;
    for (int i = 1; i >= 0; i--)
        if (up[i]) {
            proc_stop(&P[i]);
            up[i] = false;
        }
    return 0;
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

/*
 * drift from a healthy golden to a candidate with preset, max_context
 * tokens per sequence, exiting rc: NAME.txt holds its text and NAME.json
 * its JSON summary, and the text of the --json - run is NAME.txt too.
 */
static void drift(const char *name, const char *preset, const char *max_context,
                  int rc)
{
    char *g = sim(0, NULL), *c = sim(1, preset);
    char *txt = xasprintf(GOLDEN "%s.txt", name);
    char *json = xasprintf(GOLDEN "%s.json", name);
    const char *av[] = {
        "drift",     "--golden",        g,        "--candidate",
        c,           "--sequences",     "2",      "--max-context",
        max_context, "--seed",          "1",      "--bootstrap",
        "50",        "--decode-tokens", "16",     "--worst",
        "10",        "--no-store",      "--json", "-",
        NULL};
    size_t n = sizeof(av) / sizeof(*av);
    av[n - 3] = NULL; /* the text run: without --json - */
    bool ok = golden_cmd(txt, rc, NULL, av, 120, NULL);
    av[n - 3] = "--json";
    char *err = NULL, *want = golden_read(txt, NULL);
    ok = golden_cmd(json, rc, NULL, av, 120, &err) && ok;
    if (!want || strcmp(want, err)) {
        fprintf(stderr, "drift --json -: the text on stderr is not '%s':\n%s",
                txt, err);
        ok = false;
    }
    free(want);
    free(err);
    free(txt);
    free(json);
    free(g);
    free(c);
    assert_true(ok);
}

/* A split-K decode kernel: the prefills agree, the decode path departs
 * (WARN, decode only). */
static void test_decode_only(void **state)
{
    (void)state;
    drift("splitk-decode", "splitk-decode", "512", 0);
}

/* mHC mixing in bf16: prefill noise that grows with the position, below
 * WARN up to 1,024 positions: growth judged with its size says where it
 * would cross WARN at its slope, within the context (INCONCLUSIVE, exit 0,
 * never a growth FAIL at a level no threshold calls harmful). */
static void test_prefill_growth(void **state)
{
    (void)state;
    drift("mhc-bf16", "mhc-bf16", "1024", 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_decode_only, teardown),
        cmocka_unit_test_teardown(test_prefill_growth, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
