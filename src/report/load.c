/*
 * load: the stored runs the report draws, read through the stores that
 * own them: probe's probe_run and probe_live_run (src/probe/pstore.c,
 * src/probe/livestore.c) and drift's drift_run (src/drift/dstore.c), each
 * keeping its JSON summary in a `summary` column (store/runs.h). A probe
 * run stored before the summary held the whole document (cells, baseline,
 * comparison) is wrapped as {"results": summary}, which draws everything
 * but the maps. Nothing is written here (drift's store renames an older
 * store's tables); a table that does not exist means "no run".
 */
#include "core/buf.h"
#include "core/xalloc.h"
#include "drift/dstore.h"
#include "probe/live.h"
#include "probe/probe.h"
#include "report/report.h"
#include "report/report_int.h"
#include "store/runs.h"

static char *origin(const char *what, int64_t id, int64_t when)
{
    struct buf b;
    buf_init(&b, 0);
    buf_printf(&b, "%s run %lld, stored ", what, (long long)id);
    html_fmt_time(&b, when);
    return buf_detach(&b, NULL);
}

int report_load_probe(struct db *db, int64_t id, json_t **doc, char **org,
                      struct diag *d)
{
    struct store_run run;
    int r = probe_store_run_get(db, id, &run, d);
    if (r)
        return r;
    json_t *j = run.summary;
    if (!json_object_get(j, "format")) {
        json_t *w =
            json_pack("{s:s, s:o}", "format", "fidelity-probe/1", "results", j);
        j = w;
    }
    *doc = j;
    *org = origin("probe", run.id, run.created);
    return 0;
}

int report_load_live(struct db *db, int64_t id, json_t **doc, char **org,
                     struct diag *d)
{
    struct store_run run;
    int r = probe_live_store_run_get(db, id, &run, d);
    if (r)
        return r;
    *doc = run.summary;
    *org = origin("probe --live", run.id, run.created);
    return 0;
}

int report_load_drift(struct db *db, int64_t id, json_t **doc, char **org,
                      struct diag *d)
{
    struct store_run run;
    int r = drift_store_run_get(db, id, &run, d);
    if (r)
        return r;
    *doc = run.summary;
    *org = origin("drift", run.id, run.created);
    return 0;
}
