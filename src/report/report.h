/*
 * report: one self-contained HTML page with the pictures of what probe,
 * drift and audit found (docs/REPORT.md). The renderer reads the JSON
 * documents those commands write (fidelity-probe/1, fidelity-probe-live/1,
 * fidelity.drift/1 and the audit document built by report_audit_doc),
 * never their structs, so
 * fields they add later only need a line here to be drawn. The page has no
 * script and no external resource: inline CSS and SVG, a
 * Content-Security-Policy that forbids scripts, and every string that came
 * from a model, a user, a harness or a server is escaped.
 *
 * Output is a function of the input only (stable order, fixed number
 * formatting; the time shown is in->generated), so sections can be
 * compared with golden files.
 *
 *   html.c    escaping, number formatting, colour scales, the SVG helpers
 *   page.c    the page: CSS, header (endpoints, fingerprints, command line)
 *   rprobe.c  probe: heatmaps, difference maps, effective lengths, failures
 *   rlive.c   probe --live: break turns, recall and reasoning by turn, McNemar
 *   chart.c   the line charts' frame, series and keys
 *   rdrift.c  drift: metrics against position, verdict table, worst tokens
 *   raudit.c  audit: prompt tokens against turn, findings with evidence
 *   rbisect.c bisect: the ranking, harm and recall bars, culprits
 *   load.c    the latest (or a given) stored run of each, from the store
 *
 * Library code: nothing here prints or exits.
 */
#ifndef REPORT_REPORT_H
#define REPORT_REPORT_H

#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "audit/audit.h"
#include "core/buf.h"
#include "core/diag.h"
#include "store/db.h"

/* Failed probe cases shown per side (the first ones in case order); probe
 * keeps as many in the stored run so both paths draw the same page. */
#define REPORT_PROBE_EXAMPLES 12
/* Heatmap cells with fewer finished cases than this are marked. */
#define REPORT_FEW_CASES 3

struct report_in {
    const char *version; /* fidelity's version */
    const char *cmdline; /* already redacted (report_cmdline) */
    time_t generated;    /* shown as "generated"; the caller picks it */
    /* Borrowed documents; NULL leaves the section out. */
    const json_t *probe;  /* fidelity-probe/1 */
    const json_t *live;   /* fidelity-probe-live/1 */
    const json_t *drift;  /* fidelity.drift/1 */
    const json_t *audit;  /* report_audit_doc() */
    const json_t *bisect; /* fidelity.bisect/1 (`bisect --json`) */
    /* Where the documents came from ("probe run 3 stored 2026-..."), one
     * line each, or NULL. */
    const char *probe_origin, *live_origin, *drift_origin, *audit_origin,
        *bisect_origin;
    /* The servers shown, normalised as `fidelity inspect` prints them
     * ([{"role", "fingerprint"}]), and the fields that differ among them
     * (inspect_diff's [{"field", "values"}]); NULL: no settings table.
     * The caller computes them (cmd/ has bisect/inspect.c). */
    const json_t *servers, *server_diff;
};

/* Appends the whole page to out. -ENOBUFS when out's cap is reached. */
int report_html(const struct report_in *in, struct buf *out);
/* The sections alone (each a <section id="...">), for tests and for
 * report_html. An absent document appends nothing. */
int report_probe_section(const json_t *probe, struct buf *out);
int report_live_section(const json_t *live, struct buf *out);
int report_drift_section(const json_t *drift, struct buf *out);
int report_audit_section(const json_t *audit, struct buf *out);
int report_bisect_section(const json_t *bisect, struct buf *out);
/* Renders in and writes it to path ("-": stdout) through a temporary file
 * renamed into place. -errno with d filled on failure. */
int report_write(const struct report_in *in, const char *path, struct diag *d);

/* "fidelity " and argv (from the command's name) joined with spaces,
 * shell-quoted where needed, with the values of options that carry secrets
 * (--api-key, --header and their golden-/ candidate- forms, anything named
 * *key*, *token*, *secret*, *password*, *auth*) and a URL's user:password@
 * replaced by "***". Fresh string. */
char *report_cmdline(int argc, char **argv);

/* The audit document the renderer reads: {"sessions": [audit_session_json
 * rows], "findings": [audit_finding_json], "turns": [{"session", "requests":
 * audit_session_turns}]}, sessions in set order. */
json_t *report_audit_doc(const struct audit_set *set,
                         const struct audit_list *findings);

/* The stored probe run id (0: the latest) as a fidelity-probe/1 document
 * and a line saying which run it is. -ENOENT when there is none, -EIO on
 * a store error; d says which. */
int report_load_probe(struct db *db, int64_t id, json_t **doc, char **origin,
                      struct diag *d);
/* The same for probe --live's probe_live_run (a fidelity-probe-live/1
 * document). */
int report_load_live(struct db *db, int64_t id, json_t **doc, char **origin,
                     struct diag *d);
/* The same for drift_run. */
int report_load_drift(struct db *db, int64_t id, json_t **doc, char **origin,
                      struct diag *d);

#endif
