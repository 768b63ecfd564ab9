/*
 * Tests for wire/coding: gzip (one member and two), zlib and raw deflate
 * bodies inflated whole, the cap cutting one short, and bytes of another
 * format refused with the buffer left as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "core/buf.h"
#include "wire/coding.h"

/* Compresses text with windowBits wb (31 gzip, 15 zlib, -15 raw). */
static size_t squeeze(const char *text, int wb, unsigned char *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, wb, 8, Z_DEFAULT_STRATEGY),
                     Z_OK);
    z.next_in = (Bytef *)text;
    z.avail_in = (uInt)strlen(text);
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    return n;
}

static void test_each_format_whole(void **state)
{
    (void)state;
    static const char text[] = "{\"api_key\":\"sk-123\",\"n\":1}";
    static const struct {
        int wb;
        const char *coding;
    } f[] = {{31, "gzip"}, {31, "X-Gzip"}, {15, "deflate"}, {-15, "deflate"}};
    for (size_t i = 0; i < sizeof(f) / sizeof(*f); i++) {
        unsigned char z[256];
        size_t n = squeeze(text, f[i].wb, z, sizeof(z));
        struct buf out = BUF_INIT;
        assert_int_equal(coding_inflate((char *)z, n, f[i].coding, &out), 0);
        assert_string_equal(buf_str(&out), text);
        buf_release(&out);
    }
}

/* Two gzip members one after the other read as one body (RFC 1952). */
static void test_gzip_members(void **state)
{
    (void)state;
    unsigned char z[512];
    size_t n = squeeze("first,", 31, z, sizeof(z));
    n += squeeze("second", 31, z + n, sizeof(z) - n);
    struct buf out = BUF_INIT;
    assert_int_equal(coding_inflate((char *)z, n, "gzip", &out), 0);
    assert_string_equal(buf_str(&out), "first,second");
    buf_release(&out);
}

static void test_cap_and_other_format(void **state)
{
    (void)state;
    char big[100001];
    memset(big, '0', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    static unsigned char z[4096];
    size_t n = squeeze(big, 31, z, sizeof(z));
    struct buf out;
    buf_init(&out, 50000);
    assert_int_equal(coding_inflate((char *)z, n, "gzip", &out), 1);
    assert_true(out.len <= 50000);
    buf_release(&out);

    buf_init(&out, 0);
    buf_adds(&out, "kept");
    assert_int_equal(coding_inflate("{\"a\":1}", 7, "gzip", &out), -2);
    assert_string_equal(buf_str(&out), "kept");
    buf_release(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_format_whole),
        cmocka_unit_test(test_gzip_members),
        cmocka_unit_test(test_cap_and_other_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
