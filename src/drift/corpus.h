/*
 * drift corpus: the token sequences drift sends to both servers. Built-in
 * seeded multi-turn conversations (facts, questions, filler; rendered to
 * token ids by the servers' own /tokenize with `messages`), or a JSONL file
 * of conversations ({"messages": [...]}) or token-id lists ([1, 2, ...],
 * {"tokens": [...]} or {"input_ids": [...]}). Parsing and generation are
 * pure; rendering through /tokenize lives in run.c.
 */
#ifndef DRIFT_CORPUS_H
#define DRIFT_CORPUS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"

/* One corpus entry: either messages to render, or ids already. */
struct drift_item {
    json_t *messages; /* owned; NULL when ids are given */
    uint32_t *ids;    /* owned */
    size_t n;
    char name[64]; /* "builtin#3", "file.jsonl:12" */
};

struct drift_corpus {
    struct drift_item *items;
    size_t n, alloc;
    /* drift_corpus_from_db: rows of the store that could not be decoded
     * and were left out, one line each ("exchange N: column 'C': why"),
     * or NULL */
    char *skipped;
};

void drift_corpus_init(struct drift_corpus *c);
void drift_corpus_release(struct drift_corpus *c);

/*
 * A seeded multi-turn conversation of about `chars` characters of content:
 * a system message, user turns stating facts ("The access code for the
 * blue door is 4812."), filler paragraphs, questions about earlier facts
 * and assistant answers. The same (seed, idx, chars) gives the same
 * conversation on every machine. Returns a new JSON array of messages.
 */
json_t *drift_corpus_conversation(uint64_t seed, unsigned idx, size_t chars);

/* Appends `count` built-in conversations sized for max_context tokens. */
void drift_corpus_builtin(struct drift_corpus *c, uint64_t seed, unsigned count,
                          unsigned max_context);

/*
 * Parses one JSONL line (not NUL-terminated) into item. Blank lines give
 * -ENODATA (skip them). -EINVAL with d naming `where` (e.g. "x.jsonl:3")
 * and the fix when the line is not JSON or has no messages / token ids,
 * or an id is not a non-negative integer.
 */
int drift_corpus_parse_line(const char *line, size_t len, const char *where,
                            struct drift_item *item, struct diag *d);

/* Reads a JSONL file (path "-" is standard input). -ENOENT / -EIO when it
 * cannot be read, -EINVAL on a bad line (d names file:line), -ENODATA when
 * it has no entries. */
int drift_corpus_load(struct drift_corpus *c, const char *path, struct diag *d);

/* Appends an empty item and returns it (owned by c). */
struct drift_item *drift_corpus_push(struct drift_corpus *c);

/*
 * Sessions recorded by `fidelity record` in the store at path (session NULL:
 * every session): one conversation per session, the messages of its last
 * chat request (kind "main" preferred) plus the recorded reply. -ENODATA when
 * there is none; -EIO when the store cannot be read (d says why).
 */
int drift_corpus_from_db(struct drift_corpus *c, const char *path,
                         const char *session, struct diag *d);

/* First position where a and b differ (also a length difference: the
 * shorter length), or -1 when they are identical. */
long drift_ids_first_diff(const uint32_t *a, size_t na, const uint32_t *b,
                          size_t nb);

#endif
