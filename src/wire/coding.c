/*
 * coding: inflating gzip and deflate content codings into a capped
 * buffer with zlib; see coding.h.
 */
#include "wire/coding.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

/* One try with windowBits wb: 0, 1 past the cap, -2 not that format. */
static int inflate_wb(const char *src, size_t len, int wb, struct buf *out)
{
    z_stream z;
    unsigned char tmp[16384];
    int rc = 0;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, wb) != Z_OK)
        return -2;
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)len;
    for (;;) {
        z.next_out = tmp;
        z.avail_out = sizeof(tmp);
        int zr = inflate(&z, Z_NO_FLUSH);
        size_t got = sizeof(tmp) - z.avail_out;
        if (got && buf_add(out, tmp, got)) {
            rc = 1;
            break;
        }
        if (zr == Z_STREAM_END && z.avail_in) { /* gzip members, RFC 1952 */
            inflateReset(&z);
            continue;
        }
        if (zr == Z_STREAM_END || (zr == Z_BUF_ERROR && !z.avail_in))
            break;
        if (zr != Z_OK) {
            rc = got || z.total_out ? 0 : -2;
            break;
        }
    }
    inflateEnd(&z);
    return rc;
}

static void cut(struct buf *b, size_t len)
{
    b->len = len;
    if (b->data)
        b->data[len] = '\0';
}

int coding_inflate(const char *src, size_t len, const char *coding,
                   struct buf *out)
{
    if (len > UINT32_MAX) /* zlib's avail_in is 32 bits */
        return -2;
    size_t mark = out->len;
    /* 15 + 32: zlib or gzip by their header */
    int rc = inflate_wb(src, len, 15 + 32, out);
    if (rc == -2 && coding && !strcasecmp(coding, "deflate")) {
        cut(out, mark);
        rc = inflate_wb(src, len, -15, out);
    }
    if (rc == -2)
        cut(out, mark);
    return rc;
}
