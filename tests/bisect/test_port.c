/*
 * Tests for bisect/port: the listeners of a port and their owners. A
 * socket this test listens on (IPv4 and IPv6) is found with this process as
 * its owner, whether the owners are looked for among given pids first or
 * in every process; a port nobody listens on has no listener; a listener
 * the given pids do not hold is still found, its owner named. The ports
 * picked for servers are free, below the kernel's ephemeral range, and
 * not given twice in a row.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "bisect/port.h"
#include "util/need.h"

/* A socket listening on 127.0.0.1 (or ::1) at a free port; *port gets it. */
static int listen_on(int family, int *port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof(*a);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 4))
        return -1;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

static void owned_by_me(int family)
{
    int port = 0, fd = listen_on(family, &port);
    if (fd < 0 && family == AF_INET6)
        need_missing("an IPv6 loopback address (::1) to listen on");
    assert_true(fd >= 0);
    struct bisect_listener l[4];
    pid_t me = getpid(), other = getppid();
    /* among the given pids first */
    assert_int_equal(bisect_port_listeners_near(port, &me, 1, l, 4), 1);
    assert_int_equal(l[0].pid, me);
    assert_int_equal(l[0].uid, getuid());
    assert_true(l[0].inode > 0);
    unsigned long ino = l[0].inode;
    /* in every process */
    assert_int_equal(bisect_port_listeners(port, l, 4), 1);
    assert_int_equal(l[0].pid, me);
    assert_true(l[0].inode == ino);
    /* a pid that does not hold it: found all the same */
    assert_int_equal(bisect_port_listeners_near(port, &other, 1, l, 4), 1);
    assert_int_equal(l[0].pid, me);
    if (family == AF_INET)
        assert_false(bisect_port_bindable(port));
    close(fd);
    assert_int_equal(bisect_port_listeners(port, l, 4), 0);
}

static void test_ipv4_listener(void **state)
{
    (void)state;
    owned_by_me(AF_INET);
}

static void test_ipv6_listener(void **state)
{
    (void)state;
    owned_by_me(AF_INET6);
}

/* A listener of a child process: its pid, not ours, whichever way. */
static void test_child_listener(void **state)
{
    (void)state;
    int port = 0, fd = listen_on(AF_INET, &port), p[2];
    assert_true(fd >= 0);
    assert_int_equal(pipe(p), 0);
    pid_t kid = fork();
    if (kid == 0) {
        char c;
        close(p[1]);
        (void)!read(p[0], &c, 1); /* until the parent is done */
        _exit(0);
    }
    close(fd); /* only the child holds it now */
    close(p[0]);
    struct bisect_listener l[4];
    pid_t me = getpid();
    assert_int_equal(bisect_port_listeners_near(port, &me, 1, l, 4), 1);
    assert_int_equal(l[0].pid, kid);
    pid_t both[2] = {kid, me};
    assert_int_equal(bisect_port_listeners_near(port, both, 2, l, 4), 1);
    assert_int_equal(l[0].pid, kid);
    assert_true(bisect_port_in_tree(kid, me));
    close(p[1]);
    waitpid(kid, NULL, 0);
}

/* Picks for servers: 100 of them, each free (bindable, no listener),
 * below the ephemeral range where there is room (no connect() takes it),
 * none given twice in a row of 64. */
static void test_pick(void **state)
{
    (void)state;
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f && fscanf(f, "%d %d", &lo, &hi) != 2)
        lo = 32768, hi = 60999;
    if (f)
        fclose(f);
    bool room = lo - 10000 >= 1000;
    int got[100];
    for (int i = 0; i < 100; i++) {
        got[i] = bisect_port_pick();
        assert_true(got[i] > 0 && got[i] < 65536);
        assert_true(bisect_port_bindable(got[i]));
        assert_int_equal(bisect_port_listeners(got[i], NULL, 0), 0);
        if (room)
            assert_true(got[i] >= 10000 && got[i] < lo);
        for (int k = i - 1; k >= 0 && k > i - 64; k--)
            assert_int_not_equal(got[k], got[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4_listener),
        cmocka_unit_test(test_ipv6_listener),
        cmocka_unit_test(test_child_listener),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
