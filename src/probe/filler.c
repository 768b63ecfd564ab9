/*
 * filler: the realistic text that fills a probe conversation up to its
 * target length. Four seeded sources (prose, code, tool output, JSON
 * records) so that a case does not read as one sentence repeated, which
 * models learn to skip. The vocabulary is chosen so that no filler line is
 * a fact statement of the sim's grammar ("The X for Y is Z.", "Let X = N.")
 * and no number exceeds four digits (probe values have six).
 */
#include <errno.h>
#include <string.h>

#include "core/buf.h"
#include "core/rng.h"
#include "probe/probe.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *const subj[] = {
    "Our team",        "The committee",     "A visiting engineer",
    "The night shift", "Her grandmother",   "The museum staff",
    "Two drivers",     "The new intern",    "Several neighbours",
    "The harbour crew", "My cousin",        "The river authority",
    "A small group",   "The choir",         "The caretaker",
};
static const char *const verb[] = {
    "reviewed",  "painted",   "discussed", "postponed", "measured",
    "repaired",  "described", "sorted",    "delivered", "photographed",
    "rebuilt",   "cleaned",   "counted",   "moved",     "catalogued",
};
static const char *const obj[] = {
    "the quarterly budget",   "the old bridge",      "a stack of letters",
    "the garden fence",       "several broken lamps", "the weather report",
    "a long list of complaints", "the library catalogue", "the spare tyres",
    "the festival programme", "the kitchen shelves",  "a crate of apples",
    "the station clock",      "the village map",     "the rowing boats",
};
static const char *const tail[] = {
    "before lunch",          "after the storm had passed",
    "without much enthusiasm", "in the early morning",
    "while the market was closing", "with great care",
    "during the long weekend", "despite the rain",
    "as the light faded",    "for the third time that month",
    "on a quiet afternoon",  "in record time",
};
static const char *const word[] = {
    "item",   "batch", "node",  "entry", "frame", "token", "block",
    "record", "chunk", "event", "user",  "order", "route", "cache",
};
static const char *const act[] = {
    "load", "parse", "merge", "scan", "sum", "check", "flush", "emit",
};
static const char *const lvl[] = {"INFO", "WARN", "DEBUG", "INFO", "ERROR"};
static const char *const state[] = {"shipped", "pending", "returned",
                                    "packed", "lost", "delayed"};
static const char *const colour[] = {"red", "large", "fragile", "blue",
                                     "small", "green", "heavy"};

#define PICK(r, a) ((a)[rng_below((r), N(a))])

static int prose_line(struct buf *b, struct rng *r)
{
    unsigned k = 2 + (unsigned)rng_below(r, 4);
    for (unsigned i = 0; i < k; i++) {
        int e = buf_printf(b, "%s%s %s %s %s.", i ? " " : "", PICK(r, subj),
                           PICK(r, verb), PICK(r, obj), PICK(r, tail));
        if (e)
            return e;
    }
    return buf_addch(b, '\n');
}

static int code_line(struct buf *b, struct rng *r)
{
    const char *w = PICK(r, word), *a = PICK(r, act);
    unsigned n = (unsigned)rng_below(r, 100), lim = (unsigned)rng_below(r, 64);
    if (rng_below(r, 2))
        return buf_printf(b,
                          "def %s_%s_%u(items, limit=%u):\n"
                          "    total = 0\n"
                          "    for %s in items:\n"
                          "        if %s.size > limit:\n"
                          "            total += %s.size * %u\n"
                          "    return total\n\n",
                          a, w, n, lim, w, w, w, 1 + n % 7);
    return buf_printf(b,
                      "static int %s_%s_%u(const struct %s *p, size_t n)\n"
                      "{\n"
                      "    int acc = %u;\n"
                      "    for (size_t i = 0; i < n; i++)\n"
                      "        acc ^= p[i].id << %u;\n"
                      "    return acc;\n"
                      "}\n\n",
                      a, w, n, w, lim, 1 + n % 13);
}

static int tool_line(struct buf *b, struct rng *r)
{
    unsigned h = (unsigned)rng_below(r, 24), m = (unsigned)rng_below(r, 60);
    unsigned s = (unsigned)rng_below(r, 60), id = (unsigned)rng_below(r, 9999);
    switch (rng_below(r, 3)) {
    case 0:
        return buf_printf(b, "2026-03-14T%02u:%02u:%02uZ %-5s worker-%u %s "
                             "%s %u in %u ms\n",
                          h, m, s, PICK(r, lvl), (unsigned)rng_below(r, 16),
                          PICK(r, act), PICK(r, word), id,
                          (unsigned)rng_below(r, 2000));
    case 1:
        return buf_printf(b, "-rw-r--r--  1 build staff %5u Mar 14 %02u:%02u "
                             "%s_%u.dat\n",
                          id, h, m, PICK(r, word), s);
    default:
        return buf_printf(b, "%5u build  %2u.%u  %4u  %s-%s --workers %u\n",
                          id, (unsigned)rng_below(r, 99), h % 10, s * 37,
                          PICK(r, act), PICK(r, word), 1 + m % 8);
    }
}

static int json_line(struct buf *b, struct rng *r)
{
    return buf_printf(b,
                      "{\"id\": %u, \"name\": \"%s-%u\", \"status\": \"%s\", "
                      "\"weight\": %u.%u, \"tags\": [\"%s\", \"%s\"]}\n",
                      (unsigned)rng_below(r, 9999), PICK(r, word),
                      (unsigned)rng_below(r, 100), PICK(r, state),
                      (unsigned)rng_below(r, 90), (unsigned)rng_below(r, 10),
                      PICK(r, colour), PICK(r, colour));
}

int probe_filler(struct buf *b, enum probe_filler src, uint64_t seed,
                 size_t want)
{
    static int (*const line[FILLER_NSOURCES])(struct buf *, struct rng *) = {
        [FILLER_PROSE] = prose_line,
        [FILLER_CODE] = code_line,
        [FILLER_TOOL] = tool_line,
        [FILLER_JSON] = json_line,
    };
    struct rng r;
    size_t end = b->len + want;
    int e = buf_grow(b, want + 512);
    if (e)
        return e;
    rng_seed(&r, seed);
    while (b->len < end) {
        e = line[src](b, &r);
        if (e)
            return e;
    }
    b->len = end;
    b->data[end] = '\0';
    return 0;
}
