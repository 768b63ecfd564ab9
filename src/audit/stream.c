/*
 * stream: rule 7. Stream integrity as the recorder saw it: a stream that
 * ended without "data: [DONE]", no usage chunk although the request set
 * stream_options.include_usage, long pauses between chunks, time to first
 * byte added between the server and the client (down_ttfb - up_ttfb), and
 * a stream whose first byte came only at its end (something buffers it).
 * One finding per cause: a stream the user interrupted is history's
 * (history.interrupted, info), and a stream that ended early is not
 * reported again as missing its usage or its [DONE]. A client that got the
 * final event and then left is complete (set.c).
 */
#include <string.h>

#include "audit/audit_int.h"
#include "core/plural.h"

static void integrity(struct actx *c, const struct areq *r)
{
    const struct xchg *x = r->x;
    json_t *reply = x->reply;
    json_t *so = json_object_get(x->req_body, "stream_options");
    bool done = json_is_true(json_object_get(reply, "done"));
    if (r->interrupted)
        return;
    if (x->end != XCHG_COMPLETE) {
        audit_finding_add(c, AUDIT_ERROR, "stream.incomplete", r,
                          json_pack("{s:s, s:b, s:I}", "end",
                                    xchg_end_name(x->end), "done", done,
                                    "bytes", (json_int_t)x->resp_raw_len),
                          "stream ended early (%s) after %zu bytes",
                          xchg_end_name(x->end), x->resp_raw_len);
        return;
    }
    if (!done)
        audit_finding_add(
            c, AUDIT_ERROR, "stream.no_done", r,
            json_pack("{s:I, s:I}", "bytes", (json_int_t)x->resp_raw_len,
                      "chunks",
                      json_integer_value(json_object_get(reply, "chunks"))),
            "stream closed without data: [DONE] after %zu bytes",
            x->resp_raw_len);
    if (json_is_true(json_object_get(so, "include_usage")) && !r->usage)
        audit_finding_add(
            c, AUDIT_WARN, "stream.no_usage", r,
            json_pack("{s:b}", "include_usage", 1),
            "no usage chunk although stream_options.include_usage "
            "was set");
}

static void timing(struct actx *c, const struct areq *r)
{
    const struct xchg *x = r->x;
    const struct audit_thresholds *th = &c->o->th;
    double gap = json_number_value(json_object_get(x->reply, "max_gap_ms"));
    double added = x->down_ttfb_ms - x->up_ttfb_ms;
    json_int_t chunks = json_integer_value(json_object_get(x->reply, "chunks"));
    if (gap > th->gap_ms)
        audit_finding_add(
            c, AUDIT_WARN, "stream.gap", r,
            json_pack("{s:f, s:f}", "max_gap_ms", gap, "threshold_ms",
                      th->gap_ms),
            "longest pause between chunks %.0f ms (threshold %.0f ms)", gap,
            th->gap_ms);
    if (x->up_ttfb_ms > 0 && added > th->added_ttfb_ms)
        audit_finding_add(
            c, AUDIT_WARN, "stream.added_ttfb", r,
            json_pack("{s:f, s:f, s:f}", "up_ttfb_ms", x->up_ttfb_ms,
                      "down_ttfb_ms", x->down_ttfb_ms, "threshold_ms",
                      th->added_ttfb_ms),
            "first byte reached the client %.0f ms after it left the "
            "server (threshold %.0f ms)",
            added, th->added_ttfb_ms);
    /* A stream of many chunks whose first byte came within the last tenth
     * of its duration was held back by something before the recorder. */
    if (chunks >= 10 && x->up_total_ms > 500 &&
        x->up_ttfb_ms >= 0.9 * x->up_total_ms)
        audit_finding_add(
            c, AUDIT_WARN, "stream.buffered", r,
            json_pack("{s:I, s:f, s:f}", "chunks", chunks, "up_ttfb_ms",
                      x->up_ttfb_ms, "up_total_ms", x->up_total_ms),
            "%lld chunks arrived at once after %.0f ms of a %.0f ms "
            "stream: buffered upstream",
            (long long)chunks, x->up_ttfb_ms, x->up_total_ms);
}

/* Exchanges read from record's spill file have negative ids (xchg.h). */
static void spilled(struct actx *c)
{
    size_t n = 0;
    const struct areq *first = NULL;
    for (size_t i = 0; i < c->n; i++)
        if (c->r[i].x->id < 0) {
            first = first ? first : &c->r[i];
            n++;
        }
    if (n)
        audit_finding_add(c, AUDIT_WARN, "record.spilled", first,
                          json_pack("{s:I, s:I}", "spilled", (json_int_t)n,
                                    "exchanges", (json_int_t)c->n),
                          "%zu of %zu exchange%s came from the spill file: the "
                          "store failed while recording",
                          n, c->n, plural_s(c->n));
}

void audit_rule_stream(struct actx *c)
{
    spilled(c);
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        if (!r->x->streamed || r->x->status < 200 || r->x->status >= 300)
            continue;
        integrity(c, r);
        timing(c, r);
    }
}
