/*
 * degen: rule 6. Degenerate replies: text that compresses far better than
 * prose (zlib ratio), a high share of repeated word 4-grams, and reasoning
 * out of proportion to the answer. Thresholds are in audit_thresholds and
 * appear in every finding.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "audit/audit_int.h"
#include "core/hash.h"
#include "core/xalloc.h"

double audit_gzip_ratio(const char *s, size_t len)
{
    uLongf out = compressBound((uLong)len);
    Bytef *buf = xmalloc(out);
    double r = 1.0;
    if (compress2(buf, &out, (const Bytef *)s, (uLong)len, 9) == Z_OK &&
        out > 0)
        r = (double)len / (double)out;
    free(buf);
    return r;
}

/* Word hashes of s (lowercase ASCII alphanumerics; other bytes split). */
static size_t words(const char *s, size_t len, uint64_t **out)
{
    size_t n = 0, alloc = 64;
    uint64_t *w = xmalloc(alloc * sizeof(*w));
    for (size_t i = 0; i < len;) {
        while (i < len && !isalnum((unsigned char)s[i]))
            i++;
        size_t st = i;
        uint64_t h = 1469598103934665603ULL;
        while (i < len && isalnum((unsigned char)s[i]))
            h = (h ^ (uint64_t)tolower((unsigned char)s[i++])) *
                1099511628211ULL;
        if (i == st)
            break;
        if (n == alloc)
            w = xrealloc(w, (alloc *= 2) * sizeof(*w));
        w[n++] = h;
    }
    *out = w;
    return n;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double audit_ngram_share(const char *s, size_t len)
{
    uint64_t *w;
    size_t n = words(s, len, &w);
    if (n < 8) {
        free(w);
        return 0;
    }
    size_t g = n - 3, rep = 0;
    uint64_t *h = xmalloc(g * sizeof(*h));
    for (size_t i = 0; i < g; i++)
        h[i] =
            hash_mix2(hash_mix2(w[i], w[i + 1]), hash_mix2(w[i + 2], w[i + 3]));
    qsort(h, g, sizeof(*h), cmp_u64);
    for (size_t i = 1; i < g; i++)
        rep += h[i] == h[i - 1];
    free(h);
    free(w);
    return (double)rep / (double)g;
}

static void judge(struct actx *c, const struct areq *r, const char *what,
                  const char *text)
{
    const struct audit_thresholds *th = &c->o->th;
    size_t len = text ? strlen(text) : 0;
    if (len < th->degen_min_bytes)
        return;
    double gz = audit_gzip_ratio(text, len), ng = audit_ngram_share(text, len);
    if (gz < th->gzip_ratio && ng < th->ngram_share)
        return;
    audit_finding_add(
        c, AUDIT_WARN, "degeneration.repetition", r,
        json_pack("{s:s, s:I, s:f, s:f, s:f, s:f, s:s}", "field", what, "bytes",
                  (json_int_t)len, "gzip_ratio", gz, "gzip_threshold",
                  th->gzip_ratio, "ngram_share", ng, "ngram_threshold",
                  th->ngram_share, "finish_reason", r->finish ? r->finish : ""),
        "%s of %zu bytes looks degenerate: zlib ratio %.1f "
        "(threshold %.1f), repeated 4-grams %.0f%% (threshold %.0f%%)",
        what, len, gz, th->gzip_ratio, 100 * ng, 100 * th->ngram_share);
}

static void reasoning_share(struct actx *c, const struct areq *r)
{
    const struct audit_thresholds *th = &c->o->th;
    size_t rb = r->reasoning ? strlen(r->reasoning) : 0;
    size_t cb = r->content ? strlen(r->content) : 0;
    bool calls = json_array_size(r->tool_calls) > 0;
    if (rb < th->reasoning_min_bytes)
        return;
    double ratio = cb ? (double)rb / (double)cb : (double)rb;
    if (cb && ratio < th->reasoning_ratio)
        return;
    if (!cb && calls)
        return;
    audit_finding_add(
        c, cb ? AUDIT_INFO : AUDIT_WARN, "degeneration.reasoning", r,
        json_pack("{s:I, s:I, s:f, s:f, s:I, s:s}", "reasoning_bytes",
                  (json_int_t)rb, "content_bytes", (json_int_t)cb, "ratio",
                  ratio, "threshold", th->reasoning_ratio, "threshold_bytes",
                  (json_int_t)th->reasoning_min_bytes, "finish_reason",
                  r->finish ? r->finish : ""),
        cb ? "reasoning %zu bytes for a %zu-byte answer (ratio %.0f, "
             "threshold %.0f)"
           : "reasoning %zu bytes and no answer (%zu bytes of content, "
             "ratio %.0f, threshold %.0f)",
        rb, cb, ratio, th->reasoning_ratio);
}

void audit_rule_degeneration(struct actx *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const struct areq *r = &c->r[i];
        judge(c, r, "content", r->content);
        judge(c, r, "reasoning", r->reasoning);
        reasoning_share(c, r);
    }
}
