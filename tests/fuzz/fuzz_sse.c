/*
 * fuzz_sse: the SSE parser and the reply assembler on arbitrary bytes. The
 * first byte picks a split point; invariants: the events seen when the
 * input arrives in two pieces equal those seen when it arrives whole (the
 * parser is chunking-independent), each event's data is NUL-terminated at
 * its length, and the reply assembled from those events is a JSON object
 * whose text fields are strings; reply_finish_text writes what jdump writes for
 * that object, byte for byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "wire/jdump.h"
#include "wire/reply.h"
#include "wire/sse.h"

struct seen {
    struct buf log;
    struct reply_acc acc;
};

static int on_event(const char *event, const char *data, size_t len, void *ud)
{
    struct seen *s = ud;
    if (data[len] != '\0')
        abort();
    buf_printf(&s->log, "%zu:%s:", len, event);
    buf_add(&s->log, data, len);
    reply_chunk(&s->acc, data, len, 0);
    return 0;
}

static void run(const uint8_t *d, size_t n, size_t cut, struct seen *s)
{
    struct sse_parser p;
    buf_init(&s->log, 0);
    reply_init(&s->acc);
    sse_init(&p, 4096);
    int rc1 = sse_feed(&p, (const char *)d, cut, on_event, s);
    int rc2 =
        rc1 ? rc1 : sse_feed(&p, (const char *)d + cut, n - cut, on_event, s);
    buf_printf(&s->log, "rc=%d", rc2 ? -1 : 0);
    sse_release(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = size > 1 ? data[0] % size : 0;
    struct seen whole, split;
    run(data + 1, size - 1, 0, &whole);
    run(data + 1, size - 1, cut > 0 ? cut - 1 : 0, &split);
    if (whole.log.len != split.log.len ||
        memcmp(buf_str(&whole.log), buf_str(&split.log), whole.log.len))
        abort();
    json_t *r = reply_finish(&whole.acc);
    if (!json_is_object(r) || !json_is_string(json_object_get(r, "content")) ||
        !json_is_array(json_object_get(r, "tool_calls")))
        abort();
    char *want = jdump_str(r, false, NULL);
    struct buf t = BUF_INIT;
    if (!want || reply_finish_text(&whole.acc, &t) || strcmp(want, buf_str(&t)))
        abort();
    free(want);
    buf_release(&t);
    json_decref(r);
    buf_release(&whole.log);
    buf_release(&split.log);
    reply_release(&whole.acc);
    reply_release(&split.acc);
    return 0;
}
