/*
 * drift_bench: analysis throughput of `fidelity drift` with top-20
 * logprobs, parsing included. Builds one golden and one candidate answer
 * of SEQ positions in a server dialect (vLLM prompt_logprobs or sglang),
 * then parses both (sanitize, jansson, dialect parser) and folds every
 * position into a struct drift_analysis, TOTAL / SEQ times. Prints
 * positions per second; run under /usr/bin/time -v for peak memory.
 * With --dump FILE it only writes the golden answer (for the peer run).
 *
 *   drift_bench vllm|sglang TOTAL SEQ [--dump FILE]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/rng.h"
#include "drift/analysis.h"
#include "drift/dialect.h"
#include "drift/drift.h"

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

static int parse(enum drift_dialect dl, char *text, size_t len,
                 const struct drift_req *r, struct drift_lp *lp)
{
    struct diag d;
    drift_json_sanitize(text, len); /* what transport.c does */
    return drift_parse_prompt_text(dl, text, len, r, lp, &d);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: drift_bench vllm|sglang TOTAL SEQ "
                        "[--dump FILE]\n");
        return 2;
    }
    enum drift_dialect dl =
        strcmp(argv[1], "sglang") ? DRIFT_DIALECT_VLLM : DRIFT_DIALECT_SGLANG;
    size_t total = strtoull(argv[2], NULL, 10),
           seq = strtoull(argv[3], NULL, 10);
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
    char *gb = malloc(gl + 1), *cb = malloc(cl + 1);
    struct drift_req r = {.ids = ids,
                          .n = seq,
                          .top_k = 20,
                          .max_new = 1,
                          .prompt_logprobs = true};
    struct drift_lp lg, lc;
    static struct drift_analysis an;
    struct drift_opts o;
    drift_opts_default(&o);
    drift_lp_init(&lg);
    drift_lp_init(&lc);
    drift_analysis_init(&an, 64, (uint32_t)seq, NULL, 0, 50, NULL);
    size_t rounds = (total + seq - 2) / (seq - 1), done = 0;
    double t0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_PROCESS_CPUTIME_ID);
    for (size_t k = 0; k < rounds; k++) {
        memcpy(gb, gt, gl + 1);
        memcpy(cb, ct, cl + 1);
        if (parse(dl, gb, gl, &r, &lg) || parse(dl, cb, cl, &r, &lc))
            return 1;
        uint32_t s = drift_analysis_begin_seq(&an);
        drift_compare_lp(&an, DRIFT_ARM_CAND, s, &lg, &lc, 1, (uint32_t)seq, &o,
                         "candidate");
        done += seq - 1;
    }
    double dt = clk(CLOCK_MONOTONIC) - t0;
    double cpu = clk(CLOCK_PROCESS_CPUTIME_ID) - c0;
    struct drift_acc tot;
    drift_analysis_total(&an, DRIFT_ARM_CAND, &tot);
    /* CPU time is the figure on a shared machine; wall time beside it */
    printf("dialect %s: %zu positions (x2 answers, %zu bytes each): %.3f s "
           "CPU = %.0f positions/s per core (wall %.3f s = %.0f/s) "
           "(mean KL %.3e)\n",
           argv[1], done, gl, cpu, done / cpu, dt, done / dt, tot.kl_sum / tot.n);
    drift_analysis_release(&an);
    drift_lp_release(&lg);
    drift_lp_release(&lc);
    free(gb);
    free(cb);
    free(gt);
    free(ct);
    free(ids);
    return 0;
}
