/*
 * jscan: a zero-copy JSON scanner for the recorder's hot paths. It
 * validates a document and hands out spans of the values the reply
 * reassembly needs (choices[0].delta.content and the like) and of each
 * message of a request (the store hashes their exact bytes) without
 * building a tree; strings without escapes are used in place. jscan_json
 * builds the jansson tree of a span when one is needed.
 *
 * It is conservative: it accepts only documents jansson's json_loadb (flags
 * 0) accepts with the same values, and says "unsure" (-1) for anything it
 * does not handle exactly that way (a NUL or lone surrogate escape, an
 * exponent, more than 18 integer digits, nesting deeper than
 * JSCAN_MAX_DEPTH). Callers fall back to jansson then.
 */
#ifndef WIRE_JSCAN_H
#define WIRE_JSCAN_H

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
/* What jscan_doc_pick takes out of a document, level by level: levels[0]
 * reads the document itself. An object level (array0 false) puts the
 * value of its last member named keys[i] (up to 4, NULL-ended) in
 * out[out[i]] and reads it with levels[child[i]] (-1: none); an array
 * level (array0) does so for element 0 with out[0] and child[0]. A level
 * applies only to a container of its kind. Before a value is read with a
 * level, out[clear_from..nout) is cleared (those are the spans under it):
 * the last member of a name wins with its own values. */
struct jscan_pick {
    const char *keys[4];
    signed char out[4], child[4];
    bool array0;
    signed char clear_from;
};
/* jscan_doc, filling out[0..nout) (JS_NONE when absent) in the same walk.
 * -1 also when a key of an object a level reads has escapes (as
 * jscan_members). */
int jscan_doc_pick(const char *s, size_t n, const struct jscan_pick *levels,
                   struct jspan *out, size_t nout, struct jspan *v);
/* The value of s[0..n) that jscan_doc accepted before (not checked
 * again). */
void jscan_trusted(const char *s, size_t n, struct jspan *v);
/* For an object span from jscan_doc: out[i] gets the value of the last
 * member named keys[i] (t == JS_NONE when absent). 0, or -1 when obj is
 * not an object or a key has escapes. */
int jscan_members(const struct jspan *obj, const char *const *keys, size_t nk,
                  struct jspan *out);
/* jscan_members for one key and, when its value is an array,
 * jscan_elements on it, in one walk: *arr gets the value of the last member
 * named key (t == JS_NONE when absent); returns how many elements it has
 * (may exceed max; the first max are in out[]), -1 when it is absent or
 * not an array, -2 when obj is not an object or a key has escapes. */
long jscan_member_elements(const struct jspan *obj, const char *key,
                           struct jspan *arr, struct jspan *out, size_t max);
/* Element i of an array span (t == JS_NONE when out of range). 0 or -1. */
int jscan_index(const struct jspan *arr, size_t i, struct jspan *out);
/* The first max elements of an array span into out[]; returns how many the
 * array has (may exceed max), or -1 when arr is not an array. */
long jscan_elements(const struct jspan *arr, struct jspan *out, size_t max);
/* A span of a document jscan_doc accepted as the jansson value json_loadb
 * would have built for it (new reference). */
json_t *jscan_json(const struct jspan *v);
/* Like jscan_json, but the value spanned by at (a span of one of v's
 * values, from jscan_members/jscan_elements) is not read: with (stolen
 * reference) takes its place. */
json_t *jscan_json_with(const struct jspan *v, const struct jspan *at,
                        json_t *with);
/* The same with two values taken by the caller's: at with `with`, at2
 * (another value, not inside at) with `with2` (both stolen). */
json_t *jscan_json_with2(const struct jspan *v, const struct jspan *at,
                         json_t *with, const struct jspan *at2, json_t *with2);
/* Appends to b the text jdump(jscan_json(v), false) would write, copied
 * from the span (whitespace left out), when v is made of objects with
 * distinct keys, arrays, strings and keys without escapes, integers
 * (no fraction or exponent, not -0), true, false and null, nested at most
 * 8 deep with at most 16 members per object. 0, or -1 for any other value
 * (b then as it was; use jansson). */
int jscan_dump_plain(const struct jspan *v, struct buf *b);
/* Appends a string span's decoded bytes to b. 0, or -ENOBUFS (b's cap). */
int jscan_str(const struct jspan *s, struct buf *b);

#endif
