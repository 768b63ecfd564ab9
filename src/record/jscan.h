/*
 * jscan: a zero-copy JSON scanner for the recording proxy's hot path. It
 * validates a document and hands out spans of the values the reply
 * reassembly needs (choices[0].delta.content and the like) without
 * building a tree; strings without escapes are used in place.
 *
 * It is conservative: it accepts only documents jansson's json_loadb (flags
 * 0) accepts with the same values, and says "unsure" (-1) for anything it
 * does not handle exactly that way (a NUL or lone surrogate escape, an
 * exponent, more than 18 integer digits, an escaped object key, nesting
 * deeper than JSCAN_MAX_DEPTH). Callers fall back to jansson then.
 */
#ifndef RECORD_JSCAN_H
#define RECORD_JSCAN_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "core/buf.h"

#define JSCAN_MAX_DEPTH 64

enum jscan_type {
    JS_NONE = 0, /* absent */
    JS_OBJECT,
    JS_ARRAY,
    JS_STRING,
    JS_NUMBER,
    JS_TRUE,
    JS_FALSE,
    JS_NULL
};

/* A value's text: p[0..n) is the whole value (quotes included for a
 * string); esc says a string has backslash escapes. */
struct jspan {
    const char *p;
    size_t n;
    enum jscan_type t;
    bool esc;
};

/* Validates s[0..n) as one JSON value with optional surrounding
 * whitespace. 0 with *v set, or -1 (unsure: invalid or not handled). */
int jscan_doc(const char *s, size_t n, struct jspan *v);
/* For an object span from jscan_doc: out[i] gets the value of the last
 * member named keys[i] (t == JS_NONE when absent). 0, or -1 when obj is
 * not an object or a key has escapes. */
int jscan_members(const struct jspan *obj, const char *const *keys, size_t nk,
                  struct jspan *out);
/* Element i of an array span (t == JS_NONE when out of range). 0 or -1. */
int jscan_index(const struct jspan *arr, size_t i, struct jspan *out);
/* A span of a document jscan_doc accepted as the jansson value json_loadb
 * would have built for it (new reference). */
json_t *jscan_json(const struct jspan *v);
/* Appends a string span's decoded bytes to b. 0, or -ENOBUFS (b's cap). */
int jscan_str(const struct jspan *s, struct buf *b);

#endif
