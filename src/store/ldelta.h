/*
 * ldelta: a small codec for text made of similar records, such as a
 * server-sent event stream of chat.completion.chunk objects, where each
 * event repeats the one before but for a few bytes in its middle. The
 * store (xchg.c) uses it for the raw stream of a streamed response, in
 * place of deflate, whose fixed cost per call (about 78k instructions at
 * level 1 whatever the input) was the largest part of storing a small
 * stream.
 *
 * Format: the input is cut into records, each ending after a blank line
 * ("\n\n" or "\n\r\n") or at the end of the input. Each record is coded as
 * three LEB128 numbers P, S, M and M bytes: the record is the first P bytes
 * of the previous record, the M bytes, then the last S bytes of the
 * previous record (P + S never exceeds the previous record's length; the
 * first record has none, so P = S = 0). Decoding needs the original length
 * (stored beside the value) and checks every number against it.
 */
#ifndef STORE_LDELTA_H
#define STORE_LDELTA_H

#include <stddef.h>

/* Codes src[0..n) into dst[0..cap). The coded length, or 0 when it would
 * not fit in cap (callers pass cap < n to keep only a smaller result). */
size_t ldelta_encode(const void *src, size_t n, unsigned char *dst, size_t cap);
/* Decodes z[0..zlen) into out[0..raw_len), which must be exactly what it
 * decodes to. 0, or -EINVAL when z is not such a coding of raw_len bytes
 * (out is then partly written). */
int ldelta_decode(const unsigned char *z, size_t zlen, char *out,
                  size_t raw_len);

#endif
