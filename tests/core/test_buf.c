/*
 * Tests for core/buf: growth, the hard cap, printf and detach.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/buf.h"

static void test_append_and_terminate(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_adds(&b, "hello"), 0);
    assert_int_equal(buf_addch(&b, ' '), 0);
    assert_int_equal(buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_string_equal(b.data, "hello 42-x");
    assert_int_equal(b.len, 10);
    for (int i = 0; i < 10000; i++)
        assert_int_equal(buf_addch(&b, 'a'), 0);
    assert_int_equal(b.len, 10010);
    assert_int_equal(b.data[b.len], '\0');
    buf_release(&b);
    assert_null(b.data);
}

static void test_cap_leaves_buffer_unaltered(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 8);
    assert_int_equal(buf_adds(&b, "12345678"), 0);
    assert_int_equal(buf_addch(&b, '9'), -ENOBUFS);
    assert_int_equal(buf_printf(&b, "%s", "more"), -ENOBUFS);
    assert_string_equal(b.data, "12345678");
    assert_int_equal(b.len, 8);
    buf_release(&b);
}

static void test_detach(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    size_t len;
    buf_adds(&b, "abc");
    char *p = buf_detach(&b, &len);
    assert_string_equal(p, "abc");
    assert_int_equal(len, 3);
    assert_null(b.data);
    free(p);
    p = buf_detach(&b, &len);
    assert_string_equal(p, "");
    free(p);
}

/* buf_reuse keeps what was allocated up to keep bytes, gives back more,
 * and leaves the cap either way. */
static void test_reuse(void **state)
{
    (void)state;
    struct buf b;
    buf_init(&b, 1000);
    assert_int_equal(buf_add(&b, "0123456789", 10), 0);
    char *kept = b.data;
    size_t alloc = b.alloc;
    buf_reuse(&b, alloc);
    assert_ptr_equal(b.data, kept);
    assert_int_equal(b.alloc, alloc);
    assert_int_equal(b.len, 0);
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_add(&b, "ab", 2), 0);
    buf_reuse(&b, alloc - 1);
    assert_null(b.data);
    assert_int_equal(b.alloc, 0);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.max, 1000);
    char big[1001];
    memset(big, 'x', sizeof(big));
    assert_int_not_equal(buf_add(&b, big, sizeof(big)), 0);
    buf_release(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_and_terminate),
        cmocka_unit_test(test_cap_leaves_buffer_unaltered),
        cmocka_unit_test(test_detach),
        cmocka_unit_test(test_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
