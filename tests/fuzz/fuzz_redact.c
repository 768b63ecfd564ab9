/*
 * fuzz_redact: record's body redaction (src/record/redact.c) on arbitrary
 * bytes. Invariants: only bytes become the marker's ("[redacted]" or '*'),
 * none other changes; nothing hidden means nothing changed; a body that is
 * JSON stays JSON; redacting twice gives what redacting once gave (the
 * marker is itself left as it is, arguments included); the first byte,
 * when odd, adds an extra name ("session_key") and the same holds. Never a
 * read outside the buffer (the sanitizer build checks it).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "record/redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const extra[] = {"session_key"};
    if (size < 1)
        return 0;
    size_t ne = data[0] & 1;
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    char *once = malloc(n ? n : 1), *twice = malloc(n ? n : 1);
    if (n)
        memcpy(once, in, n);
    size_t hidden = redact_body(once, n, extra, ne);
    for (size_t i = 0; i < n; i++)
        if (once[i] != in[i] && !strchr("[redacted]*", once[i]))
            abort();
    if (!hidden && n && memcmp(once, in, n))
        abort();
    json_t *a = json_loadb(in, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (a) {
        json_t *b = json_loadb(once, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!b)
            abort();
        json_decref(b);
    }
    json_decref(a);
    if (n)
        memcpy(twice, once, n);
    redact_body(twice, n, extra, ne);
    if (n && memcmp(once, twice, n))
        abort();
    free(once);
    free(twice);
    return 0;
}
