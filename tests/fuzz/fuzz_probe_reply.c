/*
 * Fuzz harness for what probe reads from a server: the /tokenize answer
 * scanner (probe_scan_count) and the reply scorer (probe_score,
 * probe_has_no_context). Invariants, not only "does not crash": a count
 * from a "tokens" list never exceeds the bytes it came from; a reply that
 * scores as correct holds the expected digits in order and, when it holds
 * a distractor verbatim as a number of its own (no digit right before or
 * after it: "5551112" is another number, not the distractor 555111),
 * never scores.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Whether s holds num as a whole number: no digit on either side. */
static int has_number(const char *s, const char *num)
{
    size_t k = strlen(num);
    for (const char *p = strstr(s, num); p; p = strstr(p + 1, num))
        if ((p == s || !is_digit(p[-1])) && !is_digit(p[k]))
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s);

    unsigned n = 0;
    if (probe_scan_count(s, len, &n) == 0 && !strstr(s, "\"count\"") && n > len)
        abort();

    struct probe_case c;
    memset(&c, 0, sizeof(c));
    strcpy(c.expect, "482913");
    strcpy(c.distract[0], "555111");
    c.n_distract = 1;
    if (probe_score(&c, s)) {
        const char *p = s;
        for (const char *d = c.expect; *d; d++) {
            p = strchr(p, *d);
            if (!p)
                abort();
            p++;
        }
    }
    if (has_number(s, "555111") && probe_score(&c, s))
        abort();
    c.control = true;
    (void)probe_score(&c, s);
    (void)probe_has_no_context(s);
    free(s);
    return 0;
}
