/*
 * vary: `probe --vary KEY=V1,V2,...`, request fields varied over a grid.
 * KEY is a dotted path into the request body ("chat_template_kwargs.
 * thinking"); each value is read as JSON when it parses and as a string
 * otherwise (audit's --expect rule, audit_expect_add). The grid is the
 * product of every key's values, in the order the keys were given, the
 * last key varying fastest. Used by cmd_probe.c (parsing), endpoint.c
 * (request bodies), grid.c (store keys) and live.c (session cells).
 */
#ifndef PROBE_VARY_H
#define PROBE_VARY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/diag.h"
#include "probe/probe.h"

#define PROBE_VARY_KEYS 8

struct probe_vary {
    size_t n;
    char *key[PROBE_VARY_KEYS];    /* owned */
    json_t *vals[PROBE_VARY_KEYS]; /* owned arrays, at least one value */
};

/* One grid cell: {dotted key: value} and its canonical label
 * "key=value key=value" (values as compact JSON), both owned. */
struct probe_vary_cells {
    size_t n;
    json_t **cell;
    char **label;
};

void probe_vary_init(struct probe_vary *v);
void probe_vary_release(struct probe_vary *v);
/* Adds "KEY=V1,V2,...". -EINVAL with d on a missing '=', an empty key,
 * path or value, -EEXIST when KEY was given before, -E2BIG past
 * PROBE_VARY_KEYS keys or 64 values. On error v is unaltered. */
int probe_vary_add(struct probe_vary *v, const char *arg, struct diag *d);
/* True when KEY is varied. */
bool probe_vary_has(const struct probe_vary *v, const char *key);
/* Removes KEY and returns its values (new reference), or NULL. */
json_t *probe_vary_take(struct probe_vary *v, const char *key);
/* Builds every cell of the product (one empty cell when nothing is
 * varied). */
void probe_vary_cells_build(const struct probe_vary *v,
                            struct probe_vary_cells *c);
void probe_vary_cells_release(struct probe_vary_cells *c);
/* Sets each dotted key of cell in body, creating the objects on its path
 * (a non-object in the way is replaced). */
void probe_vary_apply(json_t *body, const json_t *cell);
/* Each spec once per cell, the cell varying fastest (*out freed by the
 * caller; the specs borrow the cells). With one empty cell, a copy. */
void probe_vary_expand(const struct probe_spec *s, size_t n,
                       const struct probe_vary_cells *c,
                       struct probe_spec **out, size_t *nout);
/* "key=value key=value" of a cell (caller frees; "" for the empty cell). */
char *probe_vary_label(const json_t *cell);

#endif
