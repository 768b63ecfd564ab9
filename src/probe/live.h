/*
 * live: `probe --live`, sessions played as a harness plays them. Facts
 * are planted in the first user turns, the model's own replies are
 * carried forward (content; reasoning as --send-reasoning says; tool calls
 * answered by scripted tool results with the call's id), seeded work turns
 * (write code, change it, explain it, run a tool) follow, and the planted
 * facts are asked about at chosen turns. One session per grid cell (the
 * --vary product crossed with --send-reasoning) and seed.
 *
 *   live.c       the session plan, playing a session, the worker threads
 *   livestore.c  the probe_live table: finished sessions, for resuming
 *   livereport.c per cell: where recall breaks, recall and reasoning by
 *                turn, McNemar between cells; text and JSON
 *
 * Library code: nothing here prints or exits.
 */
#ifndef PROBE_LIVE_H
#define PROBE_LIVE_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/diag.h"
#include "http/client.h"
#include "probe/probe.h"
#include "probe/vary.h"
#include "store/db.h"

/* How the model's earlier reasoning goes back into the conversation. */
enum probe_sendr {
    PROBE_SR_KEEP,       /* reasoning_content on every assistant message */
    PROBE_SR_DROP,       /* never */
    PROBE_SR_KEEP_TOOLS, /* only on assistant messages that call a tool */
    PROBE_SR_COUNT
};
const char *probe_sendr_name(int sr);
int probe_sendr_parse(const char *s);

#define PROBE_LIVE_MAX_TURNS 64
#define PROBE_LIVE_FACTS 2

struct probe_live_cell {
    const json_t *vary; /* borrowed: the --vary cell */
    const char *label;  /* borrowed: its label */
    int sendr;
};

struct probe_live_plan {
    unsigned turns;                     /* user turns per session, 4..64 */
    unsigned seeds;                     /* sessions per cell */
    unsigned max_tokens;                /* per request */
    size_t turn_bytes;                  /* pasted code or text per work turn */
    uint64_t seed;                      /* run seed */
    unsigned ask[PROBE_LIVE_MAX_TURNS]; /* 1-based turns with a question */
    size_t n_ask;
    struct probe_live_cell *cells; /* owned */
    size_t n_cells;
};

/* Fills the questions' turns (every second turn from the fourth, and the
 * last) and cells = vary x sendr (mask of 1u << enum probe_sendr). */
void probe_live_plan_init(struct probe_live_plan *p, unsigned turns,
                          unsigned seeds, const struct probe_vary_cells *vc,
                          unsigned sendr_mask);
void probe_live_plan_release(struct probe_live_plan *p);

struct probe_live_turn {
    unsigned requests;   /* chat requests this turn (tool rounds) */
    long prompt_tokens;  /* of the turn's last request; -1 unknown */
    size_t reasoning;    /* bytes of reasoning the turn produced */
    size_t content;      /* bytes of content */
    unsigned tool_calls; /* answered this turn */
    int asked;           /* fact asked, or -1 */
    bool passed;         /* the answer held the fact (asked >= 0) */
    bool no_context;
    double gzip_ratio, ngram_share; /* of reasoning and content */
    double reasoning_ratio;         /* reasoning / content bytes */
    char finish[16];
};

struct probe_live_result {
    bool done, cached;
    char key[17];
    unsigned n_turns; /* turns played */
    struct probe_live_turn turn[PROBE_LIVE_MAX_TURNS];
    unsigned break_turn; /* first question turn that failed; 0: none */
    unsigned requests;
    char error[160];
};

/* The conversation's first request of session (cell c, seed index k)
 * (new reference), as the run would send it. */
json_t *probe_live_first_request(const struct probe_live_plan *p,
                                 const struct probe_endpoint *e, size_t c,
                                 unsigned k);
/* The store key of session (c, k). */
void probe_live_key(const struct probe_live_plan *p,
                    const struct probe_endpoint *e, const char *extra_key,
                    size_t c, unsigned k, char out[17]);

struct probe_live_run {
    const struct probe_live_plan *plan;
    struct probe_endpoint *ep;
    const char *extra_key;
    unsigned jobs;
    bool fresh;
    struct db *db; /* NULL: nothing stored */
    volatile sig_atomic_t *stop;
    void (*progress)(void *ud, size_t done, size_t total);
    void *ud;
    struct probe_live_result *res; /* n_cells * seeds, cell-major */
    /* Out. */
    size_t sent, cached;
    bool interrupted;
    int store_err;
    struct diag store_diag;
};

/* Plays every session not already stored. A stop request ends the handing
 * out of sessions and the session in flight at its next turn (it is not
 * stored). Returns 0. */
int probe_live_run(struct probe_live_run *r);

/* ---- livestore.c ---- */
int probe_live_store_init(struct db *db, struct diag *d);
/* 1 and *r filled when key is stored, 0 when not, <0 on error. */
int probe_live_store_get(struct db *db, const char *key,
                         struct probe_live_result *r, struct diag *d);
int probe_live_store_put(struct db *db, const char *endpoint_fp,
                         const char *cell, unsigned seed,
                         const struct probe_live_result *r, struct diag *d);
json_t *probe_live_result_json(const struct probe_live_result *r);
/* Records a finished run's JSON document (probe_live_report_json) in
 * probe_live_run; *id (may be NULL) gets its row id. */
int probe_live_store_run(struct db *db, const char *endpoint_fp,
                         const json_t *doc, long long *id, struct diag *d);
struct store_run;
/* The stored run id (0: the latest) from probe_live_run, as store_run_get
 * (store/runs.h) reads it: -ENOENT when there is none. */
int probe_live_store_run_get(struct db *db, int64_t id, struct store_run *out,
                             struct diag *d);
int probe_live_result_parse(json_t *j, struct probe_live_result *r);

/* ---- livereport.c ---- */

struct probe_live_cellsum {
    size_t sessions, broken;
    double break_median, break_lo, break_hi; /* over seeds; never = turns+1 */
    size_t asked, passed;
};
/* Summarises cell c; index of the cell that breaks first, or -1 when none
 * breaks (probe_live_first_break). */
void probe_live_cell_summary(const struct probe_live_run *r, size_t c,
                             struct probe_live_cellsum *s);
long probe_live_first_break(const struct probe_live_run *r);
json_t *probe_live_report_json(const struct probe_live_run *r);
void probe_live_report_text(const struct probe_live_run *r, FILE *out);

#endif
