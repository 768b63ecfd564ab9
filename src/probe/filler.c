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
#include "probe/probe_int.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *const subj[] = {
    "Our team",         "The committee",   "A visiting engineer",
    "The night shift",  "Her grandmother", "The museum staff",
    "Two drivers",      "The new intern",  "Several neighbours",
    "The harbour crew", "My cousin",       "The river authority",
    "A small group",    "The choir",       "The caretaker",
};
static const char *const verb[] = {
    "reviewed", "painted",   "discussed", "postponed", "measured",
    "repaired", "described", "sorted",    "delivered", "photographed",
    "rebuilt",  "cleaned",   "counted",   "moved",     "catalogued",
};
static const char *const obj[] = {
    "the quarterly budget",      "the old bridge",        "a stack of letters",
    "the garden fence",          "several broken lamps",  "the weather report",
    "a long list of complaints", "the library catalogue", "the spare tyres",
    "the festival programme",    "the kitchen shelves",   "a crate of apples",
    "the station clock",         "the village map",       "the rowing boats",
};
static const char *const tail[] = {
    "before lunch",
    "after the storm had passed",
    "without much enthusiasm",
    "in the early morning",
    "while the market was closing",
    "with great care",
    "during the long weekend",
    "despite the rain",
    "as the light faded",
    "for the third time that month",
    "on a quiet afternoon",
    "in record time",
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
                                    "packed",  "lost",    "delayed"};
static const char *const colour[] = {"red",   "large", "fragile", "blue",
                                     "small", "green", "heavy"};

#define PICK(r, a) ((a)[rng_below((r), N(a))])

/* Appenders without printf: filler is most of a case's bytes, and
 * vsnprintf per field was most of the time to build one. The buffer has
 * room (probe_filler grows it) so the appends cannot fail. */
static void s_(struct buf *b, const char *s)
{
    buf_adds(b, s);
}

static void u_(struct buf *b, unsigned v, unsigned width, char pad)
{
    char tmp[12];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < 11);
    while ((unsigned)n < width && n < 11)
        tmp[n++] = pad;
    while (n > 0)
        buf_addch(b, tmp[--n]);
}

static void prose_line(struct buf *b, struct rng *r)
{
    unsigned k = 2 + (unsigned)rng_below(r, 4);
    for (unsigned i = 0; i < k; i++) {
        if (i)
            buf_addch(b, ' ');
        s_(b, PICK(r, subj));
        buf_addch(b, ' ');
        s_(b, PICK(r, verb));
        buf_addch(b, ' ');
        s_(b, PICK(r, obj));
        buf_addch(b, ' ');
        s_(b, PICK(r, tail));
        buf_addch(b, '.');
    }
    buf_addch(b, '\n');
}

static void code_line(struct buf *b, struct rng *r)
{
    const char *w = PICK(r, word), *a = PICK(r, act);
    unsigned n = (unsigned)rng_below(r, 100), lim = (unsigned)rng_below(r, 64);
    if (rng_below(r, 2)) {
        s_(b, "def ");
        s_(b, a);
        buf_addch(b, '_');
        s_(b, w);
        buf_addch(b, '_');
        u_(b, n, 1, '0');
        s_(b, "(items, limit=");
        u_(b, lim, 1, '0');
        s_(b, "):\n    total = 0\n    for ");
        s_(b, w);
        s_(b, " in items:\n        if ");
        s_(b, w);
        s_(b, ".size > limit:\n            total += ");
        s_(b, w);
        s_(b, ".size * ");
        u_(b, 1 + n % 7, 1, '0');
        s_(b, "\n    return total\n\n");
        return;
    }
    s_(b, "static int ");
    s_(b, a);
    buf_addch(b, '_');
    s_(b, w);
    buf_addch(b, '_');
    u_(b, n, 1, '0');
    s_(b, "(const struct ");
    s_(b, w);
    s_(b, " *p, size_t n)\n{\n    int acc = ");
    u_(b, lim, 1, '0');
    s_(b, ";\n    for (size_t i = 0; i < n; i++)\n        acc ^= p[i].id << ");
    u_(b, 1 + n % 13, 1, '0');
    s_(b, ";\n    return acc;\n}\n\n");
}

static void tool_line(struct buf *b, struct rng *r)
{
    unsigned h = (unsigned)rng_below(r, 24), m = (unsigned)rng_below(r, 60);
    unsigned s = (unsigned)rng_below(r, 60), id = (unsigned)rng_below(r, 9999);
    switch (rng_below(r, 3)) {
    case 0:
        s_(b, "2026-03-14T");
        u_(b, h, 2, '0');
        buf_addch(b, ':');
        u_(b, m, 2, '0');
        buf_addch(b, ':');
        u_(b, s, 2, '0');
        s_(b, "Z ");
        s_(b, PICK(r, lvl));
        s_(b, " worker-");
        u_(b, (unsigned)rng_below(r, 16), 1, '0');
        buf_addch(b, ' ');
        s_(b, PICK(r, act));
        buf_addch(b, ' ');
        s_(b, PICK(r, word));
        buf_addch(b, ' ');
        u_(b, id, 1, '0');
        s_(b, " in ");
        u_(b, (unsigned)rng_below(r, 2000), 1, '0');
        s_(b, " ms\n");
        return;
    case 1:
        s_(b, "-rw-r--r--  1 build staff ");
        u_(b, id, 5, ' ');
        s_(b, " Mar 14 ");
        u_(b, h, 2, '0');
        buf_addch(b, ':');
        u_(b, m, 2, '0');
        buf_addch(b, ' ');
        s_(b, PICK(r, word));
        buf_addch(b, '_');
        u_(b, s, 1, '0');
        s_(b, ".dat\n");
        return;
    default:
        u_(b, id, 1, '0');
        s_(b, " build  ");
        u_(b, (unsigned)rng_below(r, 99), 1, '0');
        buf_addch(b, '.');
        u_(b, h % 10, 1, '0');
        s_(b, "  ");
        u_(b, s * 37, 1, '0');
        s_(b, "  ");
        s_(b, PICK(r, act));
        buf_addch(b, '-');
        s_(b, PICK(r, word));
        s_(b, " --workers ");
        u_(b, 1 + m % 8, 1, '0');
        buf_addch(b, '\n');
    }
}

static void json_line(struct buf *b, struct rng *r)
{
    s_(b, "{\"id\": ");
    u_(b, (unsigned)rng_below(r, 9999), 1, '0');
    s_(b, ", \"name\": \"");
    s_(b, PICK(r, word));
    buf_addch(b, '-');
    u_(b, (unsigned)rng_below(r, 100), 1, '0');
    s_(b, "\", \"status\": \"");
    s_(b, PICK(r, state));
    s_(b, "\", \"weight\": ");
    u_(b, (unsigned)rng_below(r, 90), 1, '0');
    buf_addch(b, '.');
    u_(b, (unsigned)rng_below(r, 10), 1, '0');
    s_(b, ", \"tags\": [\"");
    s_(b, PICK(r, colour));
    s_(b, "\", \"");
    s_(b, PICK(r, colour));
    s_(b, "\"]}\n");
}

int probe_filler(struct buf *b, enum probe_filler src, uint64_t seed,
                 size_t want)
{
    static void (*const line[FILLER_NSOURCES])(struct buf *, struct rng *) = {
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
        /* Lines are under 512 bytes: keep that much room. */
        if (b->alloc - b->len < 512 && (e = buf_grow(b, 512)))
            return e;
        line[src](b, &r);
    }
    b->len = end;
    b->data[end] = '\0';
    return 0;
}
