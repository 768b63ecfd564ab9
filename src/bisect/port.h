/*
 * bisect/port: who holds a TCP port on this host, so that bisect measures
 * only servers it started. The listening sockets come from the kernel's
 * tables (/proc/net/tcp and /proc/net/tcp6, state LISTEN), their owners
 * from the descriptors of each process (/proc/PID/fd, "socket:[INODE]"),
 * where this user may read them. A process belongs to a launch when it is
 * the launch's root (its watchdog), descends from it, or is in its session.
 *
 * Names here carry the bisect_port_ prefix. Nothing here prints or exits.
 */
#ifndef BISECT_PORT_H
#define BISECT_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct bisect_listener {
    unsigned long inode;
    unsigned uid;
    pid_t pid;     /* its owner; 0 when /proc does not say */
    char comm[32]; /* the owner's command name, "" when unknown */
};

/* The listening TCP sockets (IPv4 and IPv6, any address) on port, at most
 * max of them in out, owners filled where /proc says. Their count (may
 * exceed max), or -errno when /proc/net/tcp cannot be read. */
int bisect_port_listeners(int port, struct bisect_listener *out, size_t max);
/* The same, the owners looked for first among the descriptors of
 * pids[0..np) (a launch's watchdog and server), and in every process only
 * for the listeners none of them holds: what a launch checks once its
 * server answers, where its own server is the usual owner. */
int bisect_port_listeners_near(int port, const pid_t *pids, size_t np,
                               struct bisect_listener *out, size_t max);

/* True when pid is root, descends from it, or is in the session root
 * leads. */
bool bisect_port_in_tree(pid_t pid, pid_t root);

/* The port of url ("http://host:port/...", "[v6]:port"; the scheme's
 * default when none) and whether its host is this machine's loopback
 * ("localhost", 127.0.0.0/8, ::1) or a wildcard (0.0.0.0, ::). -1 when
 * url has no readable port. */
int bisect_port_of_url(const char *url, bool *local);

/* Whether a listening socket could be bound on 127.0.0.1:port now (a
 * test bind, closed at once): false when the port is taken. */
bool bisect_port_bindable(int port);

/* A TCP port for a server started next, free now (no listener, and
 * 127.0.0.1:port bindable): picked at random below the kernel's ephemeral
 * range, so that no outgoing connection (drift's and probe's own) and no
 * program's bind to port 0 takes it before the server binds it, and not
 * one this process gave in its last 64 picks (two slots launching at
 * once). Where there is no room below the range (under 1,000 ports above
 * 10000), one the kernel gives for port 0. 0 when none could be had. */
int bisect_port_pick(void);

#endif
