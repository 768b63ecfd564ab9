/*
 * fuzz_reply: the in-place reply reader (wire/jscan.h behind reply_chunk
 * and reply_from_body) against the jansson reference on arbitrary bytes.
 * The input is split at '\x1e' into SSE data payloads; invariants: the
 * reply accumulated by reply_chunk and by reply_chunk_jansson is the same
 * text, byte for byte, and so are reply_from_body and
 * reply_from_body_jansson on the whole input; whatever jscan_doc accepts,
 * jansson accepts too, and jscan_json builds the value json_loadb builds
 * (same text, key order included); reply_text_from_body, where it
 * answers, writes the reference reply's text; reply_finish_text writes
 * the accumulated reply's text; and where reply_may_call_tools says no,
 * the reply has no tool calls (the recorder then does not build it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/jdump.h"
#include "wire/jscan.h"
#include "wire/reply.h"

static char *text_of(json_t *v)
{
    char *s = v ? jdump_str(v, false, NULL) : NULL;
    json_decref(v);
    return s;
}

static void same(char *a, char *b)
{
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b)))
        abort();
    free(a);
    free(b);
}

static void check_doc(const char *s, size_t n)
{
    struct jspan v;
    if (jscan_doc(s, n, &v))
        return;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (!j)
        abort();
    same(text_of(j), text_of(jscan_json(&v)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct reply_acc fast, ref;
    reply_init(&fast);
    reply_init(&ref);
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && s[i] != '\x1e')
            continue;
        /* payloads are NUL-terminated, as the SSE parser hands them out */
        char *ev = malloc(i - start + 1);
        memcpy(ev, s + start, i - start);
        ev[i - start] = '\0';
        reply_chunk(&fast, ev, i - start, 0);
        reply_chunk_jansson(&ref, ev, i - start, 0);
        check_doc(ev, i - start);
        free(ev);
        start = i + 1;
    }
    if (fast.chunks != ref.chunks || fast.bad != ref.bad)
        abort();
    same(text_of(reply_finish(&fast)), text_of(reply_finish(&ref)));
    struct buf ft = BUF_INIT;
    char *fwant = text_of(reply_finish(&fast));
    if (reply_finish_text(&fast, &ft) || strcmp(fwant, buf_str(&ft)))
        abort();
    free(fwant);
    buf_release(&ft);
    reply_release(&fast);
    reply_release(&ref);
    check_doc(s, size);
    same(text_of(reply_from_body(s, size)),
         text_of(reply_from_body_jansson(s, size)));
    if (!reply_may_call_tools(s, size)) {
        json_t *r = reply_from_body_jansson(s, size);
        if (json_array_size(json_object_get(r, "tool_calls")))
            abort();
        json_decref(r);
    }
    /* the reply column's text without the object, where it is written */
    struct buf t;
    buf_init(&t, 0);
    if (!reply_text_from_body(s, size, &t)) {
        char *want = text_of(reply_from_body_jansson(s, size));
        if (!want || strcmp(want, t.data))
            abort();
        free(want);
    }
    buf_release(&t);
    return 0;
}
