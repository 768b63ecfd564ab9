/*
 * hdrs: an exchange's header fields as the recorder saw them, in one flat
 * buffer ("name\0value\0" per field, secrets already redacted by the
 * caller), instead of a jansson object per exchange. Read through
 * hdrs_each, which gives the fields as the JSON object the store keeps
 * has them; hdrs_json writes that object's compact text (what jdump of
 * the object would write; tests/store/test_hdrs.c compares the two).
 */
#ifndef STORE_HDRS_H
#define STORE_HDRS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* Each field in b: its struct hdr_field (copied in, unaligned), then
 * "name\0value\0". Its place in the object is decided as it is added, so
 * that readers only walk. */
struct hdr_field {
    uint32_t nl, vl;
    uint8_t role;   /* 0 left out, 1 a member, 2 joined to an earlier one */
    uint8_t joined; /* a member with later fields joined to it */
    uint8_t pad[2];
};

struct hdrs {
    struct buf b; /* the fields, in arrival order */
    size_t n;     /* fields */
    bool set;     /* there are headers (an empty list is "{}", else NULL) */
};

/* Empties h and marks it set (h zeroed or used before). */
void hdrs_start(struct hdrs *h);
void hdrs_release(struct hdrs *h);
/* Makes room for n more fields of names and values of bytes in all. */
void hdrs_reserve(struct hdrs *h, size_t n, size_t bytes);
/* Appends a field (set must be true); name and value are read up to their
 * first NUL or their length, whichever comes first. */
void hdrs_add(struct hdrs *h, const char *name, size_t nl, const char *value,
              size_t vl);
/* Calls fn for each member of the JSON object the fields make, in its
 * order: a name's first accepted field, later fields of the same name
 * (same bytes) joined to its value with ", " (RFC 9110 5.3); a field whose
 * name or value is not valid UTF-8 is left out, as jansson refuses it.
 * fn returning non-zero stops the walk with that value. */
int hdrs_each(const struct hdrs *h,
              int (*fn)(const char *name, const char *value, size_t vlen,
                        void *ud),
              void *ud);
/* The value (a member's, as hdrs_each gives it) of the first member whose
 * name matches name ignoring ASCII case and whose value is not empty, copied
 * into out (reset first); NULL when there is none. */
const char *hdrs_get_ci(const struct hdrs *h, const char *name,
                        struct buf *out);
/* Appends the object's compact JSON text to out. 0 or -ENOBUFS. */
int hdrs_json(const struct hdrs *h, struct buf *out);

#endif
