/*
 * drift_bench: analysis throughput of `fidelity drift` with top-20
 * logprobs, parsing included. Builds one golden and one candidate answer
 * of SEQ positions in a server dialect (vLLM prompt_logprobs or sglang),
 * then runs drift's own pipeline (drift_pipe_run in src/drift/pipe.c, the
 * code of `fidelity drift`'s prefill arms) over TOTAL / (SEQ - 1)
 * sequences whose fetch hands it copies of those answers instead of HTTP
 * answers: every answer is sanitized and parsed, every position compared
 * and folded into a struct drift_analysis, on N threads (default: the
 * online CPUs). Prints positions per wall-clock second and per CPU second;
 * run under /usr/bin/time -v for peak memory. With --dump FILE it only
 * writes the golden answer (for the peer run).
 *
 *   drift_bench vllm|sglang TOTAL SEQ [--dump FILE | --threads N]
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/rng.h"
#include "drift/analysis.h"
#include "drift/dialect.h"
#include "drift/drift.h"
#include "drift/transport.h"

/* The answer's JSON text, written directly (no tree), with every logprob
 * at 17 significant digits as a Python server's repr() may give. */
static char *answer(enum drift_dialect dl, const uint32_t *ids, size_t n,
                    double noise, uint64_t seed)
{
    struct rng r;
    struct buf b = BUF_INIT;
    rng_seed(&r, seed);
    if (dl == DRIFT_DIALECT_SGLANG)
        buf_printf(&b, "{\"text\":\"\",\"meta_info\":{");
    else
        buf_printf(&b, "{\"choices\":[{\"index\":0,\"text\":\"\","
                       "\"prompt_logprobs\":[null");
    struct buf top = BUF_INIT, tok = BUF_INIT;
    buf_adds(&top, "\"input_top_logprobs\":[null");
    buf_printf(&tok, "\"input_token_logprobs\":[[null,%u,null]", ids[0]);
    for (size_t t = 1; t < n; t++) {
        double z = 0, lg[20];
        for (int k = 0; k < 20; k++) {
            lg[k] = 4.0 - 0.3 * k + noise * (rng_unit(&r) - 0.5);
            z += exp(lg[k]);
        }
        if (dl == DRIFT_DIALECT_SGLANG)
            buf_adds(&top, ",[");
        else
            buf_adds(&b, ",{");
        for (int k = 0; k < 20; k++) {
            uint32_t id = (uint32_t)(1000 + (t * 7 + (size_t)k * 13) % 50000);
            if (k == 3)
                id = ids[t];
            double lp = lg[k] - log(z * 1.03);
            if (dl == DRIFT_DIALECT_SGLANG) {
                buf_printf(&top, "%s[%.17g,%u,null]", k ? "," : "", lp, id);
                if (k == 3)
                    buf_printf(&tok, ",[%.17g,%u,null]", lp, id);
            } else {
                buf_printf(&b,
                           "%s\"%u\":{\"logprob\":%.17g,\"rank\":%d,"
                           "\"decoded_token\":\"tok\"}",
                           k ? "," : "", id, lp, k + 1);
            }
        }
        if (dl == DRIFT_DIALECT_SGLANG)
            buf_adds(&top, "]");
        else
            buf_adds(&b, "}");
    }
    if (dl == DRIFT_DIALECT_SGLANG)
        buf_printf(&b, "%s],%s]}}", buf_str(&tok), buf_str(&top));
    else
        buf_adds(&b, "]}]}");
    buf_release(&top);
    buf_release(&tok);
    return buf_detach(&b, NULL);
}

static double clk(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The two answers every sequence gets, as if received. */
struct answers {
    const char *text[2];
    size_t len[2];
};

/* drift_pipe's fetch, where drift run would do the HTTP request: the
 * answer lent (the pipe reads it where it is and copies it only to
 * sanitize it), or with --copy a fresh copy of it (the pipe parses and
 * frees it), as the earlier figures were taken: copying a 5.8 MB answer
 * is transport, not analysis, and the fetches take turns. */
static bool copy_answers;

static int fetch(void *ud, size_t i, int pass, const struct drift_lp *golden,
                 char **text, size_t *len, struct diag *d)
{
    const struct answers *a = ud;
    int k = pass == 0 ? 0 : 1;
    (void)i;
    (void)golden;
    (void)d;
    *len = a->len[k];
    if (!copy_answers) {
        *text = (char *)a->text[k];
        return 0;
    }
    *text = malloc(*len + 1);
    memcpy(*text, a->text[k], *len + 1);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: drift_bench vllm|sglang TOTAL SEQ "
                        "[--dump FILE | --threads N] [--copy]\n");
        return 2;
    }
    enum drift_dialect dl =
        strcmp(argv[1], "sglang") ? DRIFT_DIALECT_VLLM : DRIFT_DIALECT_SGLANG;
    size_t total = strtoull(argv[2], NULL, 10),
           seq = strtoull(argv[3], NULL, 10);
    unsigned threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t *ids = malloc(seq * sizeof(*ids));
    for (size_t i = 0; i < seq; i++)
        ids[i] = (uint32_t)(500 + i % 977);
    char *gt = answer(dl, ids, seq, 0, 1), *ct = answer(dl, ids, seq, 0.05, 2);
    size_t gl = strlen(gt), cl = strlen(ct);
    if (argc > 5 && !strcmp(argv[4], "--dump")) {
        FILE *f = fopen(argv[5], "w");
        fwrite(gt, 1, gl, f);
        fclose(f);
        return 0;
    }
    for (int j = 4; j < argc; j++) {
        if (!strcmp(argv[j], "--threads") && j + 1 < argc)
            threads = (unsigned)strtoul(argv[++j], NULL, 10);
        else if (!strcmp(argv[j], "--copy"))
            copy_answers = true;
    }
    /* a corpus of TOTAL / (SEQ - 1) sequences sharing one id list */
    struct drift_corpus corpus;
    drift_corpus_init(&corpus);
    size_t rounds = (total + seq - 2) / (seq - 1);
    for (size_t k = 0; k < rounds; k++) {
        struct drift_item *it = drift_corpus_push(&corpus);
        it->ids = ids;
        it->n = seq;
    }
    struct drift_side g, c;
    drift_side_init(&g, "golden");
    drift_side_init(&c, "candidate");
    g.dialect = c.dialect = dl;
    g.top_k = c.top_k = 20;
    struct answers an_text = {{gt, ct}, {gl, cl}};
    struct drift_pipe p = {.corpus = &corpus,
                           .side = {&g, &g, &c, &c},
                           .threads = threads,
                           .lent = !copy_answers,
                           .fetch = fetch,
                           .ud = &an_text};
    static struct drift_analysis an;
    struct drift_opts o;
    struct diag d;
    uint64_t done = 0;
    drift_opts_default(&o);
    drift_analysis_init(&an, 64, (uint32_t)seq, NULL, 0, 50, NULL);
    double t0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
    if (drift_pipe_run(&p, &an, &o, &done, &d)) {
        fprintf(stderr, "drift_bench: %s\n", d.msg);
        return 1;
    }
    double dt = clk(CLOCK_MONOTONIC) - t0;
    double cpu = clk(CLOCK_PROCESS_CPUTIME_ID) - c0;
    struct drift_acc tot;
    drift_analysis_total(&an, DRIFT_ARM_CAND, &tot);
    printf("dialect %s, %u threads, answers %s: %llu positions (x2 answers, "
           "%zu bytes each): wall %.3f s = %.0f positions/s; CPU %.3f s = %.0f "
           "positions per CPU second (mean KL %.3e)\n",
           argv[1], threads, copy_answers ? "copied" : "lent",
           (unsigned long long)done, gl, dt, done / dt, cpu,
           done / cpu, tot.kl_sum / tot.n);
    for (size_t k = 0; k < corpus.n; k++)
        corpus.items[k].ids = NULL; /* shared, freed below */
    drift_corpus_release(&corpus);
    drift_side_release(&g);
    drift_side_release(&c);
    drift_analysis_release(&an);
    free(gt);
    free(ct);
    free(ids);
    return 0;
}
