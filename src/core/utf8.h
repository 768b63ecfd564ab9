/*
 * utf8: the one UTF-8 validity rule (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF; the rule jansson applies to its
 * strings). utf8_seq_len is inline because the JSON scanners of record
 * and drift call it per character on their hot paths; the whole-text
 * checks live in utf8.c. Cleaning (invalid bytes to U+FFFD) and cutting at
 * a character boundary stay with their callers, whose rules differ.
 */
#ifndef CORE_UTF8_H
#define CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1-4) of the valid UTF-8 sequence at p, which has n >= 1 bytes
 * left; 0 when the bytes there are not one. */
static inline size_t utf8_seq_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0], cp, min;
    size_t k;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, min = 0x10000;
    else
        return 0;
    if (k > n)
        return 0;
    cp = c & (0x7fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

/* Whether s[0..n) is valid UTF-8; NUL bytes are valid (as in a JSON
 * string built with json_stringn). */
bool utf8_valid(const char *s, size_t n);
/* Whether s[0..n) is valid UTF-8 without a NUL byte (a C string's text). */
bool utf8_valid_text(const char *s, size_t n);

#endif
