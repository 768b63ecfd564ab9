/*
 * End-to-end: places where `fidelity sim` disagrees with docs/SIM.md and
 * the sim is at fault. Each test states the contract; it fails until the
 * sim is fixed, and then moves to the file of its subject as a regression
 * test. Kept apart so the rest of tests/sim stays green meanwhile.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "util/simtest.h"

/* Sends one raw request and returns the body of the answer. */
static json_t *raw_get(const struct proc *p, const char *request)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)p->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, request, strlen(request)),
                     (ssize_t)strlen(request));
    struct buf b = BUF_INIT;
    char tmp[4096];
    ssize_t n;
    while ((n = read(fd, tmp, sizeof(tmp))) > 0)
        buf_add(&b, tmp, (size_t)n);
    close(fd);
    const char *body = strstr(buf_str(&b), "\r\n\r\n");
    assert_non_null(body);
    assert_non_null(strstr(buf_str(&b), " 404 "));
    json_t *j = json_loads(body + 4, 0, NULL);
    buf_release(&b);
    assert_non_null(j);
    return j;
}

/*
 * SIM.md, "Endpoints": 404 for unknown paths in the OpenAI error shape, and
 * (project rule) a message naming the input. A path with bytes that are not
 * UTF-8 gets "message": "": sim_jstr() in src/sim/handle.c passes
 * sequences jansson rejects (lead byte F5), json_stringn() fails, and the
 * fallback is "". The fuzz input is tests/fuzz/known_bugs/
 * sim_request-404-empty-message-non-utf8-path.
 */
static void test_404_for_non_utf8_path_has_a_message(void **state)
{
    struct simt *t = *state;
    struct proc *p = simt_start(t, NULL);
    json_t *j = raw_get(p, "GET /\xf5\x90\x80\x80 HTTP/1.1\r\nHost: x\r\n"
                           "Connection: close\r\n\r\n");
    const char *m = json_string_value(
        json_object_get(json_object_get(j, "error"), "message"));
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", m ? m : "(none)");
    json_decref(j);
    if (strlen(msg) == 0 || !strstr(msg, "GET"))
        fail_msg("404 message '%s' does not name the request", msg);
    simt_assert_alive(t, p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, simt_setup, simt_teardown)
        T(test_404_for_non_utf8_path_has_a_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
