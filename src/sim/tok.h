/*
 * tok: the simulator's deterministic tokenizer (docs/SIM.md, "Tokenizer").
 * Special tokens, then word pieces (optional leading space + 1-4 ASCII
 * alphanumerics), then single bytes. detokenize(tokenize(s)) == s for every
 * byte string. Pure functions; no global state.
 */
#ifndef SIM_TOK_H
#define SIM_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

enum {
    TOK_BOS = 0,
    TOK_SYSTEM = 1,
    TOK_USER = 2,
    TOK_ASSISTANT = 3,
    TOK_TOOL = 4,
    TOK_END = 5,
    TOK_THINK = 6,
    TOK_THINK_END = 7,
    TOK_TOOL_CALL = 8,
    TOK_NSPECIAL = 16,
    TOK_BYTE0 = 16,
    TOK_WORD0 = 272,
};

#define TOK_WORD_N 15018570 /* 62 + 62^2 + 62^3 + 62^4 */
#define TOK_VOCAB (TOK_WORD0 + 2 * TOK_WORD_N)

struct tok_vec {
    int32_t *v;
    size_t n;
    size_t cap;
};

void tok_vec_init(struct tok_vec *t);
void tok_vec_release(struct tok_vec *t);
void tok_vec_push(struct tok_vec *t, int32_t id);

/* The tokenizer of this process: the word-piece one (docs/SIM.md), or
 * with on one token per byte (id 16 + byte; special tokens stay), as a
 * byte-level model has. The sim sets it from its configuration before
 * each request. */
void tok_set_byte_level(bool on);
/* Appends the tokens of text[0..len) to out. */
void tok_encode(const char *text, size_t len, struct tok_vec *out);
/* Writes the text of one token into out (at most 16 bytes) and returns its
 * length; an id outside the vocabulary or a reserved special gives 0. */
size_t tok_piece(int32_t id, char out[16]);
/* Appends the text of ids[0..n) to b. Returns -ERANGE (b unaltered past
 * what was appended) when an id is outside the vocabulary. */
int tok_decode(const int32_t *ids, size_t n, struct buf *b);
static inline int tok_is_valid(int64_t id)
{
    return id >= 0 && id < TOK_VOCAB && (id < 9 || id >= TOK_NSPECIAL);
}

#endif
