/*
 * sse: an incremental parser for text/event-stream bodies (the HTML
 * standard's "Server-sent events" section, 9.2.6 "Interpreting an event
 * stream"). The recording proxy feeds it a copy of each chunk as it is
 * forwarded; it calls back once per dispatched event with the joined data
 * lines. Lines end in CRLF, LF or CR, possibly split across chunks.
 */
#ifndef WIRE_SSE_H
#define WIRE_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

struct sse_parser {
    struct buf line;  /* the current, unfinished line */
    struct buf data;  /* data lines of the current event, joined by \n */
    struct buf event; /* the event field of the current event */
    bool has_data;
    bool after_cr; /* the last byte seen was CR: a following LF is eaten */
    bool failed;   /* a cap was exceeded; further input is ignored */
};

/* Called per event; data is NUL-terminated (data[len] == 0). Non-zero stops
 * the parse and is returned by sse_feed. */
typedef int (*sse_event_fn)(const char *event, const char *data, size_t len,
                            void *ud);

/* max caps one line and one event's data (0: 64 MiB). */
void sse_init(struct sse_parser *p, size_t max);
/* p as sse_init left it, keeping the memory of its buffers for the next
 * stream unless one grew past keep bytes. */
void sse_reset(struct sse_parser *p, size_t keep);
void sse_release(struct sse_parser *p);
/* Feeds n bytes. Returns 0, fn's non-zero value, or -ENOBUFS when a line or
 * an event exceeds the cap (the parser then ignores the rest). */
int sse_feed(struct sse_parser *p, const char *s, size_t n, sse_event_fn fn,
             void *ud);

#endif
