/*
 * fuzz_drift_parse: the drift response parsers (every dialect's prompt and
 * decode shapes, the NaN/Infinity sanitizer and the corpus line reader)
 * on arbitrary bytes. Invariants checked beyond "does not crash": the
 * sanitizer keeps the length and leaves no bare NaN outside strings that
 * jansson would reject, and changes nothing in a text the fast reader
 * accepts unsanitized; n_returned never exceeds the ids sent; every valid
 * entry has a finite logprob <= 1e-6 and a top list sorted by logprob;
 * comparing a parsed answer with itself gives KL 0 exactly; and when the
 * allocation-free reader (fastparse.c) and the jansson parser both accept
 * an answer, they read the same positions bit for bit.
 * The first byte picks the dialect; the rest is the answer.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "drift/corpus.h"
#include "drift/dialect.h"
#include "drift/fastparse.h"
#include "drift/metrics.h"

#define CHECK(x)                                                               \
    do {                                                                       \
        if (!(x))                                                              \
            abort();                                                           \
    } while (0)

static void same_lp(const struct drift_lp *a, const struct drift_lp *b)
{
    CHECK(a->n == b->n && a->n_returned == b->n_returned);
    for (uint32_t i = 0; i < a->n; i++) {
        CHECK(a->valid[i] == b->valid[i]);
        CHECK(a->mismatch[i] == b->mismatch[i]);
        if (!a->valid[i])
            continue;
        const struct drift_pos *p = &a->pos[i], *q = &b->pos[i];
        CHECK(p->forced == q->forced && p->n_top == q->n_top &&
              p->n_known == q->n_known);
        CHECK(!memcmp(&p->forced_lp, &q->forced_lp, sizeof(double)));
        for (uint32_t k = 0; k < p->n_known; k++)
            CHECK(p->top[k].key == q->top[k].key &&
                  !memcmp(&p->top[k].lp, &q->top[k].lp, sizeof(double)));
    }
}

static void check_lp(const struct drift_lp *lp, uint32_t n)
{
    CHECK(lp->n_returned <= n);
    for (uint32_t i = 0; i < lp->n; i++) {
        if (!lp->valid[i])
            continue;
        const struct drift_pos *p = &lp->pos[i];
        CHECK(!isnan(p->forced_lp) && p->forced_lp <= 1e-6);
        CHECK(p->n_top <= p->n_known);
        for (uint32_t k = 1; k < p->n_top; k++)
            CHECK(p->top[k - 1].lp >= p->top[k].lp);
        struct drift_pm m;
        CHECK(drift_pos_compare(p, p, 0.2, &m) == 0);
        CHECK(m.kl == 0 && m.dlp == 0 && m.top1_agree);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t ids[6] = {0, 300, 301, 302, 7, 9};
    if (size < 1)
        return 0;
    enum drift_dialect dl = (enum drift_dialect)(1 + data[0] % 4);
    size_t len = size - 1;
    char *text = malloc(len + 1);
    memcpy(text, data + 1, len);
    text[len] = '\0';

    struct drift_item it;
    struct diag d;
    if (!drift_corpus_parse_line(text, len, "fuzz", &it, &d)) {
        CHECK(it.messages || it.n >= 2);
        json_decref(it.messages);
        free(it.ids);
    }

    {
        /* drift_parse_prompt_text skips the sanitizer when the reader takes
         * the text as it is: then sanitizing must change nothing */
        struct drift_req r0 = {.ids =
                                   (const uint32_t[]){0, 300, 301, 302, 7, 9},
                               .n = 6,
                               .top_k = 20,
                               .max_new = 1,
                               .prompt_logprobs = true};
        struct drift_lp raw;
        drift_lp_init(&raw);
        if (!drift_fast_prompt(dl, text, len, &r0, &raw)) {
            char *copy = malloc(len + 1);
            memcpy(copy, text, len + 1);
            CHECK(drift_json_sanitize(copy, len) == 0);
            CHECK(!memcmp(copy, text, len + 1));
            free(copy);
        }
        drift_lp_release(&raw);
    }
    drift_json_sanitize(text, len);
    CHECK(strlen(text) <= len);
    json_error_t e;
    json_t *j = json_loadb(text, len, 0, &e);
    if (j) {
        struct drift_req r = {.ids = ids,
                              .n = 6,
                              .top_k = 20,
                              .max_new = 1,
                              .prompt_logprobs = true};
        struct drift_lp lp, fast;
        drift_lp_init(&lp);
        drift_lp_init(&fast);
        int slow_ok = !drift_parse_prompt(dl, j, &r, &lp, &d);
        if (slow_ok)
            check_lp(&lp, 6);
        if (!drift_fast_prompt(dl, text, len, &r, &fast)) {
            check_lp(&fast, 6);
            if (slow_ok)
                same_lp(&fast, &lp);
        }
        drift_lp_release(&fast);
        if (!drift_parse_decode(dl, j, &lp, &d))
            check_lp(&lp, lp.n);
        drift_lp_release(&lp);
        json_decref(j);
    }
    free(text);
    return 0;
}
