/*
 * probe_live: `fidelity probe --live`. Builds the grid of cells (the
 * --vary product crossed with --send-reasoning), prints the plan, plays
 * the sessions (src/probe/live.c), prints the per-cell report, stores the
 * run's JSON document in probe_live_run (what `fidelity report` draws),
 * writes the HTML page with --report and picks the exit code: 0 finished
 * (and recall at least --fail-under), 1 below it, 3 when the endpoint
 * stopped answering, 4 store or output failure, 130 interrupted. See
 * docs/PROBE.md, "Live sessions".
 */
#include "cmd/probe_live.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "core/plural.h"
#include "core/xalloc.h"
#include "store/store.h"

static void progress(void *ud, size_t done, size_t total)
{
    if (!*(bool *)ud)
        return;
    fprintf(stderr, "\r%zu/%zu sessions   ", done, total);
    fflush(stderr);
}

static void print_plan(FILE *out, const struct probe_live_cmd *o,
                       const struct probe_live_plan *p,
                       const struct probe_endpoint *ep)
{
    size_t n = p->n_cells * p->seeds;
    fprintf(out,
            "plan: %zu live session%s (%zu cell%s x %u seed%s), %u turns "
            "each, questions at",
            n, plural_s(n), p->n_cells, plural_s(p->n_cells), p->seeds,
            plural_s(p->seeds), p->turns);
    for (size_t i = 0; i < p->n_ask; i++)
        fprintf(out, "%s%u", i ? "," : " ", p->ask[i]);
    fprintf(out, "\n  cells:");
    for (size_t c = 0; c < p->n_cells; c++)
        fprintf(out, "\n    %s%ssend-reasoning=%s", p->cells[c].label,
                *p->cells[c].label ? " " : "",
                probe_sendr_name(p->cells[c].sendr));
    fprintf(out,
            "\n  model %s at %s; max_tokens %u, %zu bytes pasted a work "
            "turn, -j %u, seed %llu\n",
            ep->model ? ep->model : "?", ep->url, o->max_tokens, p->turn_bytes,
            o->jobs, (unsigned long long)o->seed);
    fflush(out);
}

static int report(const struct probe_live_cmd *o, FILE *out,
                  struct probe_live_run *run, struct db *db)
{
    struct diag d;
    int code = EXIT_PASS;
    const struct probe_live_plan *p = run->plan;
    size_t total = p->n_cells * p->seeds, done = 0, errs = 0, asked = 0, ok = 0;
    for (size_t i = 0; i < total; i++) {
        const struct probe_live_result *x = &run->res[i];
        if (!x->done)
            continue;
        done++;
        errs += x->error[0] && x->n_turns == 0;
        for (unsigned t = 0; t < x->n_turns; t++)
            if (x->turn[t].asked >= 0) {
                asked++;
                ok += x->turn[t].passed;
            }
    }
    double rate = asked ? 100.0 * (double)ok / (double)asked : 0;
    probe_live_report_text(run, out);
    json_t *j = probe_live_report_json(run);
    /* the JSON convention of every command (docs/schema/) */
    json_object_set_new(j, "schema", json_string("fidelity.probe-live/1"));
    json_object_set_new(
        j, "verdict",
        json_string(run->interrupted || !asked || (done && errs == done)
                        ? "INCONCLUSIVE"
                    : rate < o->fail_under ? "FAIL"
                                           : "PASS"));
    if (o->json && cli_json_write(j, o->json, &d))
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    if (o->report &&
        cmd_report_live_hook("probe", o->report, o->argc, o->argv, j))
        code = EXIT_INTERNAL;
    if (db && probe_live_store_run(db, run->ep->fp, j, NULL, &d))
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
    json_decref(j);
    if (run->store_err)
        code = cli_error("probe", EXIT_INTERNAL, "%s", run->store_diag.msg);
    if (code)
        return code;
    fprintf(out,
            "\n%zu of %zu session%s finished (%zu from the store, %zu chat "
            "request%s sent), recall %.1f%%\n",
            done, total, plural_s(total), run->cached, run->sent,
            plural_s(run->sent), rate);
    if (done && errs == done)
        return cli_error("probe", EXIT_UNREACHABLE,
                         "the endpoint stopped answering: %s",
                         run->res[0].error);
    if (run->interrupted) {
        fprintf(stderr,
                "fidelity probe: interrupted: %zu of %zu session%s "
                "finished and stored; run the same command again to "
                "finish\n",
                done, total, plural_s(total));
        return EXIT_INTERRUPTED;
    }
    if (rate < o->fail_under) {
        fprintf(stderr,
                "fidelity probe: recall %.1f%% is below --fail-under "
                "%.1f%%\n",
                rate, o->fail_under);
        return EXIT_FAIL;
    }
    return EXIT_PASS;
}

int cmd_probe_live(const struct probe_live_cmd *o, struct probe_endpoint *ep,
                   const char *extra_key)
{
    FILE *out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
    struct probe_vary_cells vc;
    struct probe_live_plan plan = {.max_tokens = o->max_tokens,
                                   .turn_bytes = o->turn_bytes,
                                   .seed = o->seed};
    struct diag d;
    struct db *db = NULL;
    int code = EXIT_PASS;

    probe_vary_cells_build(o->vary, &vc);
    probe_live_plan_init(&plan, o->turns, o->seeds, &vc, o->sendr_mask);
    print_plan(out, o, &plan, ep);
    if (o->dry) {
        json_t *b = probe_live_first_request(&plan, ep, 0, 0);
        fprintf(out, "\nfirst session's first request (cell 1, seed 1):\n");
        json_dumpf(b, out, JSON_INDENT(2));
        fputc('\n', out);
        json_decref(b);
        goto out;
    }
    const char *path = o->db ? o->db : cli_default_db();
    if (!o->no_store &&
        (store_open(path, &db, &d) || probe_store_init(db, &d) ||
         probe_live_store_init(db, &d) || probe_store_endpoint(db, ep, &d))) {
        code = cli_error("probe", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    bool tty = cli_is_tty(2);
    struct probe_live_run run = {.plan = &plan,
                                 .ep = ep,
                                 .extra_key = extra_key,
                                 .jobs = o->jobs,
                                 .fresh = o->fresh,
                                 .db = db,
                                 .stop = o->stop,
                                 .progress = progress,
                                 .ud = &tty,
                                 .res =
                                     xcalloc(plan.n_cells * plan.seeds + 1,
                                             sizeof(struct probe_live_result))};
    signal(SIGINT, o->on_sigint);
    probe_live_run(&run);
    signal(SIGINT, cli_sigint_exit);
    if (tty)
        fputc('\n', stderr);
    code = report(o, out, &run, db);
    free(run.res);
out:
    store_close(db);
    probe_live_plan_release(&plan);
    probe_vary_cells_release(&vc);
    return code;
}
