/*
 * tok: encoding and decoding for the simulator's tokenizer.
 */
#include "sim/tok.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static const char *const specials[] = {
    "<|bos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
    "<|end|>", "<think>",    "</think>", "<|tool_call|>",
};
#define NSPEC (sizeof(specials) / sizeof(specials[0]))

/* off(L): the number of pieces shorter than L characters. */
static const int32_t word_off[5] = {0, 0, 62, 62 + 3844, 62 + 3844 + 238328};

static const char alnum[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

void tok_vec_init(struct tok_vec *t)
{
    t->v = NULL;
    t->n = 0;
    t->cap = 0;
}

void tok_vec_release(struct tok_vec *t)
{
    free(t->v);
    tok_vec_init(t);
}

void tok_vec_push(struct tok_vec *t, int32_t id)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
    }
    t->v[t->n++] = id;
}

static int alnum_index(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'Z')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 36;
    return -1;
}

static size_t match_special(const char *p, size_t left, int32_t *id)
{
    if (p[0] != '<')
        return 0;
    for (size_t i = 0; i < NSPEC; i++) {
        size_t n = strlen(specials[i]);
        if (n <= left && !memcmp(p, specials[i], n)) {
            *id = (int32_t)i;
            return n;
        }
    }
    return 0;
}

static bool byte_level;

void tok_set_byte_level(bool on)
{
    byte_level = on;
}

void tok_encode(const char *text, size_t len, struct tok_vec *out)
{
    size_t i = 0;
    while (i < len) {
        int32_t id;
        size_t n = match_special(text + i, len - i, &id);
        if (n) {
            tok_vec_push(out, id);
            i += n;
            continue;
        }
        if (byte_level) {
            tok_vec_push(out, TOK_BYTE0 + (unsigned char)text[i]);
            i++;
            continue;
        }
        int space = text[i] == ' ' && i + 1 < len &&
                    alnum_index((unsigned char)text[i + 1]) >= 0;
        size_t j = i + (size_t)space, L = 0;
        int32_t idx = 0, mul = 1;
        while (j + L < len && L < 4) {
            int c = alnum_index((unsigned char)text[j + L]);
            if (c < 0)
                break;
            idx += c * mul;
            mul *= 62;
            L++;
        }
        if (L == 0) {
            tok_vec_push(out, TOK_BYTE0 + (unsigned char)text[i]);
            i++;
            continue;
        }
        tok_vec_push(out, TOK_WORD0 + space * TOK_WORD_N + word_off[L] + idx);
        i = j + L;
    }
}

size_t tok_piece(int32_t id, char out[16])
{
    if (id < 0 || id >= TOK_VOCAB)
        return 0;
    if (id < TOK_NSPECIAL) {
        if ((size_t)id >= NSPEC)
            return 0;
        size_t n = strlen(specials[id]);
        memcpy(out, specials[id], n);
        return n;
    }
    if (id < TOK_WORD0) {
        out[0] = (char)(id - TOK_BYTE0);
        return 1;
    }
    int32_t r = id - TOK_WORD0;
    size_t n = 0;
    if (r >= TOK_WORD_N) {
        out[n++] = ' ';
        r -= TOK_WORD_N;
    }
    int L = 4;
    while (L > 1 && r < word_off[L])
        L--;
    r -= word_off[L];
    for (int k = 0; k < L; k++) {
        out[n++] = alnum[r % 62];
        r /= 62;
    }
    return n;
}

int tok_decode(const int32_t *ids, size_t n, struct buf *b)
{
    char piece[16];
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= TOK_VOCAB)
            return -ERANGE;
        size_t k = tok_piece(ids[i], piece);
        if (buf_add(b, piece, k))
            return -ENOBUFS;
    }
    return 0;
}
