/*
 * coding: HTTP content codings (RFC 9110 section 8.4.1) as they cross the
 * wire: a gzip, x-gzip or deflate body inflated into a capped buffer. The
 * recorder decodes request bodies with it before redacting them
 * (record/redact.c) and the store reads compressed replies through it
 * (store/ingest.c); the bytes forwarded and stored stay as they were sent.
 */
#ifndef WIRE_CODING_H
#define WIRE_CODING_H

#include <stddef.h>

#include "core/buf.h"

/* Appends src, compressed with coding ("gzip", "x-gzip" or "deflate", any
 * case), inflated to out, up to out's cap. zlib and gzip streams are told
 * by their header, concatenated gzip members are read on, and "deflate"
 * is also tried as a raw deflate stream (as some servers send it).
 * Returns 0 when whole, 1 when out's cap cut it short, or -2 when src is
 * not of that coding (out is then left as it was). A stream cut short
 * gives what was decoded up to the cut. */
int coding_inflate(const char *src, size_t len, const char *coding,
                   struct buf *out);

#endif
