/*
 * jdump: compact JSON text of a jansson value, byte for byte what
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY [| JSON_SORT_KEYS]) writes,
 * at a fraction of its cost (jansson writes through a callback per token and
 * decodes every string's UTF-8 again). The store hashes the canonical form
 * (sorted keys) to address messages, so equality with jansson's output is
 * the contract; tests/store/test_jdump.c checks it on generated values.
 */
#ifndef WIRE_JDUMP_H
#define WIRE_JDUMP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

/* Appends v's text to b, keys sorted bytewise when sort. Returns 0, or
 * -ENOBUFS when b's cap is reached (each string is written in place once
 * b has room for six times its length, its escaped worst case), or -EINVAL for
 * a value jansson would not dump either (nested more than 2048 deep, a
 * non-finite real). On error b holds a partial text. */
int jdump(struct buf *b, const json_t *v, bool sort);
/* Appends the JSON string of s[0..n) (valid UTF-8), quoted and escaped
 * as jdump writes strings. 0 or -ENOBUFS. */
int jdump_string(struct buf *b, const char *s, size_t n);
/* Appends the text jdump writes for json_real(v). 0, -ENOBUFS, or -EINVAL
 * for a non-finite v. */
int jdump_real(struct buf *b, double v);
/* A fresh NUL-terminated text (the caller frees it) and its length; NULL
 * on -EINVAL. */
char *jdump_str(const json_t *v, bool sort, size_t *len);

#endif
