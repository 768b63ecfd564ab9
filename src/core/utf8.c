/*
 * utf8: whole-text validity checks over utf8_seq_len (utf8.h). Texts are
 * mostly ASCII (header values, message text), so they are checked eight
 * bytes at a time until a byte at or above 0x80 (or, for utf8_valid_text,
 * a NUL) turns up; from there one character at a time until the next
 * word-sized run of plain bytes.
 */
#include "core/utf8.h"

#include <stdint.h>
#include <string.h>

#define HI 0x8080808080808080ull
#define LO 0x0101010101010101ull

static bool check(const char *s, size_t n, bool nul_ok)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            /* any byte >= 0x80, or (when refused) any zero byte */
            uint64_t stop = (w & HI) | (nul_ok ? 0 : (w - LO) & ~w & HI);
            if (!stop) {
                i += 8;
                continue;
            }
        }
        if (u[i] < 0x80) {
            if (!u[i] && !nul_ok)
                return false;
            i++;
            continue;
        }
        size_t k = utf8_seq_len(u + i, n - i);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

bool utf8_valid(const char *s, size_t n)
{
    return check(s, n, true);
}

bool utf8_valid_text(const char *s, size_t n)
{
    return check(s, n, false);
}
