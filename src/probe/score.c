/*
 * score: deterministic scoring, no LLM judge. A reply passes when it holds
 * the expected value (a number on digit boundaries, or a phrase matched
 * case-insensitively) and none of the distractors; a failure is then
 * explained by what the server reported: an error, a prompt shorter than
 * the case (truncated by the server), a reply cut at max_tokens, or else a
 * plain miss.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "probe/probe_int.h"

/* Phrases models use when they see no earlier turns. Lowercase. */
static const char *const no_context[] = {
    "start of our conversation",
    "beginning of our conversation",
    "very first message",
    "first message of our conversation",
    "don't see any earlier",
    "do not see any earlier",
    "no earlier message",
    "no previous message",
    "don't have any previous",
    "don't have access to previous",
    "do not have access to previous",
    "no prior context",
    "haven't shared",
    "you haven't provided",
    "this is the first time you",
};

static const char *find_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n))
            return hay;
    return NULL;
}

bool probe_has_no_context(const char *reply)
{
    if (!reply)
        return false;
    /* Curly apostrophes become straight ones before matching. */
    size_t n = strlen(reply);
    char *s = malloc(n + 1);
    if (!s)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)reply[i] == 0xe2 && i + 2 < n &&
            (unsigned char)reply[i + 1] == 0x80 &&
            (unsigned char)reply[i + 2] == 0x99) {
            s[k++] = '\'';
            i += 2;
        } else {
            s[k++] = reply[i];
        }
    }
    s[k] = '\0';
    bool hit = false;
    for (size_t i = 0; i < sizeof(no_context) / sizeof(*no_context); i++)
        if (find_ci(s, no_context[i])) {
            hit = true;
            break;
        }
    free(s);
    return hit;
}

/* True when the number `num` occurs in s not adjacent to other digits
 * (so 4812 is not found in 48123); thousands separators are skipped. */
static bool has_number(const char *s, const char *num)
{
    size_t n = strlen(num);
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p) ||
            (p > s && isdigit((unsigned char)p[-1])))
            continue;
        size_t i = 0;
        const char *q = p;
        while (*q && i < n) {
            if (*q == num[i]) {
                i++;
                q++;
            } else if ((*q == ',' || *q == ' ') && i > 0 &&
                       isdigit((unsigned char)q[1])) {
                q++;
            } else {
                break;
            }
        }
        if (i == n && !isdigit((unsigned char)*q))
            return true;
    }
    return false;
}

bool probe_score(const struct probe_case *c, const char *reply)
{
    if (!reply)
        reply = "";
    bool found = c->expect_words ? find_ci(reply, c->expect) != NULL
                                 : has_number(reply, c->expect);
    if (c->control)
        return !found;
    if (!found)
        return false;
    for (size_t i = 0; i < c->n_distract; i++)
        if (has_number(reply, c->distract[i]))
            return false;
    return true;
}

enum probe_outcome probe_classify(bool passed, const struct probe_reply *r,
                                  unsigned expected, double tol)
{
    if (r->err)
        return PROBE_ERROR;
    if (passed)
        return PROBE_PASS;
    if (r->prompt_tokens >= 0 && expected &&
        (double)r->prompt_tokens < (double)expected * (1.0 - tol) - 2)
        return PROBE_TRUNCATED;
    if (!strcmp(r->finish, "length"))
        return PROBE_CLIPPED;
    return PROBE_MISSED;
}
