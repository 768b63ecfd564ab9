/*
 * fuzz_ldelta: the stream codec (store/ldelta.h) on arbitrary bytes.
 * Invariants: any input coded with room enough decodes to itself; coded
 * with the store's cap (shorter than the input) it either does not fit or
 * decodes to itself; the input read as a coding (of each length up to
 * 4 KiB that the first bytes name) never reads or writes out of bounds and
 * decodes only to exactly the length asked for.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/ldelta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t cap = 31 * size + 31;
    unsigned char *z = malloc(cap);
    char *out = malloc(size + 1);
    size_t zlen = ldelta_encode(data, size, z, cap);
    if ((size && !zlen) || ldelta_decode(z, zlen, out, size) ||
        memcmp(out, data, size))
        abort();
    if (size > 1) {
        zlen = ldelta_encode(data, size, z, size - 1);
        if (zlen && (zlen >= size || ldelta_decode(z, zlen, out, size) ||
                     memcmp(out, data, size)))
            abort();
    }
    free(out);
    /* the input as a coding: the length asked for from its first bytes */
    size_t want = size >= 2 ? ((size_t)data[0] << 8 | data[1]) % 4096 : 0;
    char *dec = malloc(want + 1);
    if (size >= 2)
        (void)ldelta_decode(data + 2, size - 2, dec, want);
    free(dec);
    free(z);
    return 0;
}
