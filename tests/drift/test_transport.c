/*
 * Tests for drift/transport: which sides are one server (drift sends
 * those one request at a time, never both at once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <cmocka.h>

#include "drift/transport.h"

static bool share(const char *a, const char *b)
{
    struct drift_side g, c;
    struct diag d;
    drift_side_init(&g, "golden");
    drift_side_init(&c, "candidate");
    if (a)
        assert_int_equal(drift_side_set_url(&g, a, &d), 0);
    if (b)
        assert_int_equal(drift_side_set_url(&c, b, &d), 0);
    bool same = drift_sides_share_server(&g, &c);
    drift_side_release(&g);
    drift_side_release(&c);
    return same;
}

static void test_one_server_by_host_and_port(void **state)
{
    (void)state;
    assert_true(share("http://127.0.0.1:8000", "http://127.0.0.1:8000/"));
    assert_true(share("http://127.0.0.1:8000/a", "http://127.0.0.1:8000/b"));
    assert_true(share("http://Ref:8000", "http://ref:8000"));
    assert_true(share("http://u:p@ref:8000", "http://ref:8000/v1"));
    assert_false(share("http://127.0.0.1:8000", "http://127.0.0.1:8001"));
    assert_false(share("http://a:8000", "http://b:8000"));
    assert_false(share("http://ref:8000", "https://ref:8000"));
    assert_false(share("http://ref:80", "http://ref:8000"));
    /* a side without a URL: the safe answer, one at a time */
    assert_true(share(NULL, "http://ref:8000"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_server_by_host_and_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
