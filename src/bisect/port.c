/*
 * bisect/port: the listeners of a TCP port and their owners, read from
 * /proc (see the header). Used by the local launcher before a server is
 * started (its port must be free) and once it answers (the listener must
 * be one of its own processes).
 */
#define _GNU_SOURCE
#include "bisect/port.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* Appends the LISTEN sockets of table path on port to out; -errno when
 * the table cannot be read. */
static int scan_table(const char *path, int port, struct bisect_listener *out,
                      size_t max, size_t *n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char line[512];
    if (!fgets(line, sizeof(line), f)) { /* the header */
        fclose(f);
        return 0;
    }
    while (fgets(line, sizeof(line), f)) {
        unsigned lport, st, uid;
        unsigned long inode;
        if (sscanf(line, " %*s %*[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %u %*u %lu",
                   &lport, &st, &uid, &inode) != 4)
            continue;
        if (st != 0x0A || (int)lport != port) /* 0A: TCP_LISTEN */
            continue;
        if (*n < max)
            out[*n] = (struct bisect_listener){.inode = inode, .uid = uid};
        (*n)++;
    }
    fclose(f);
    return 0;
}

/* Appends the LISTEN sockets of family on port to out from the kernel's
 * socket diagnostics (netlink: only the listening table is walked, where
 * /proc/net/tcp walks every connection, milliseconds on a busy host);
 * -errno when netlink cannot answer (the caller reads /proc then). */
static int scan_diag(int family, int port, struct bisect_listener *out,
                     size_t max, size_t *n)
{
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -errno;
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } req = {.nh = {.nlmsg_len = sizeof(req),
                    .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                    .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
             .r = {.sdiag_family = (uint8_t)family,
                   .sdiag_protocol = IPPROTO_TCP,
                   .idiag_states = 1u << 10}}; /* TCP_LISTEN */
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (sendto(fd, &req, sizeof(req), 0, (struct sockaddr *)&sa, sizeof(sa)) <
        0) {
        int err = errno;
        close(fd);
        return -err;
    }
    size_t found = 0;
    for (;;) {
        long buf[8192 / sizeof(long)];
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int err = k < 0 ? errno : EIO;
            close(fd);
            *n -= found; /* a partial answer: /proc decides */
            return -err;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, k);
             h = NLMSG_NEXT(h, k)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                close(fd);
                return 0;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                close(fd);
                *n -= found;
                return -EPROTO;
            }
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            if (ntohs(m->id.idiag_sport) != port || m->idiag_state != 10)
                continue;
            if (*n < max)
                out[*n] = (struct bisect_listener){.inode = m->idiag_inode,
                                                   .uid = m->idiag_uid};
            (*n)++;
            found++;
        }
    }
}

static void read_comm(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, out, len - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (k < 0)
        k = 0;
    out[k] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

/* Fills the owners of l[0..n) held by the process named pid (a /proc
 * entry) from its descriptors; *left counts those still without one. */
static void owners_of(const char *pid, struct bisect_listener *l, size_t n,
                      size_t *left)
{
    char path[300];
    snprintf(path, sizeof(path), "/proc/%s/fd", pid);
    DIR *fd = opendir(path);
    struct dirent *fe;
    while (fd && *left && (fe = readdir(fd))) {
        char lp[600], tgt[64];
        snprintf(lp, sizeof(lp), "%s/%s", path, fe->d_name);
        ssize_t k = readlink(lp, tgt, sizeof(tgt) - 1);
        unsigned long ino;
        if (k <= 0)
            continue;
        tgt[k] = '\0';
        if (sscanf(tgt, "socket:[%lu]", &ino) != 1)
            continue;
        for (size_t i = 0; i < n; i++)
            if (!l[i].pid && l[i].inode == ino) {
                l[i].pid = (pid_t)atoi(pid);
                read_comm(l[i].pid, l[i].comm, sizeof(l[i].comm));
                (*left)--;
            }
    }
    if (fd)
        closedir(fd);
}

/* Fills the owners of l[0..n): first from the descriptors of pids[0..np)
 * (a launch's own processes: a few readlinks), then, for what none of
 * them holds, from every process's descriptors (a walk of /proc that
 * costs tens of milliseconds on a busy host). */
static void find_owners(struct bisect_listener *l, size_t n, const pid_t *pids,
                        size_t np)
{
    size_t left = n;
    for (size_t i = 0; i < np && left; i++) {
        char name[24];
        if (pids[i] <= 0)
            continue;
        snprintf(name, sizeof(name), "%d", (int)pids[i]);
        owners_of(name, l, n, &left);
    }
    DIR *d = left ? opendir("/proc") : NULL;
    struct dirent *de;
    while (d && left && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        owners_of(de->d_name, l, n, &left);
    }
    if (d)
        closedir(d);
}

int bisect_port_listeners_near(int port, const pid_t *pids, size_t np,
                               struct bisect_listener *out, size_t max)
{
    size_t n = 0;
    int rc = scan_diag(AF_INET, port, out, max, &n);
    if (!rc && scan_diag(AF_INET6, port, out, max, &n) == -EPROTO)
        rc = 0; /* no IPv6: none */
    if (rc) {   /* no socket diagnostics here: the kernel's tables */
        n = 0;
        rc = scan_table("/proc/net/tcp", port, out, max, &n);
        if (rc)
            return rc;
        scan_table("/proc/net/tcp6", port, out, max, &n); /* no IPv6: none */
    }
    find_owners(out, n < max ? n : max, pids, np);
    return (int)n;
}

int bisect_port_listeners(int port, struct bisect_listener *out, size_t max)
{
    return bisect_port_listeners_near(port, NULL, 0, out, max);
}

/* pid's parent and session from /proc/PID/stat; -1 when gone. */
static int stat_of(pid_t pid, pid_t *ppid, pid_t *sid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (k <= 0)
        return -1;
    buf[k] = '\0';
    const char *p = strrchr(buf, ')'); /* comm may hold spaces */
    int pp, pg, ss;
    if (!p || sscanf(p + 1, " %*c %d %d %d", &pp, &pg, &ss) != 3)
        return -1;
    *ppid = pp;
    *sid = ss;
    return 0;
}

bool bisect_port_in_tree(pid_t pid, pid_t root)
{
    for (int depth = 0; pid > 1 && depth < 64; depth++) {
        pid_t pp, sid;
        if (pid == root)
            return true;
        if (stat_of(pid, &pp, &sid))
            return false;
        if (sid == root)
            return true;
        pid = pp;
    }
    return false;
}

int bisect_port_of_url(const char *url, bool *local)
{
    const char *h = strstr(url, "://");
    int port = !strncmp(url, "https://", 8) ? 443 : 80;
    h = h ? h + 3 : url;
    size_t hl = strcspn(h, "/?#");
    char host[256];
    snprintf(host, sizeof(host), "%.*s", (int)hl, h);
    char *at = strrchr(host, '@');
    char *hp = at ? at + 1 : host;
    char *colon = NULL;
    if (*hp == '[') {
        char *rb = strchr(hp, ']');
        if (!rb)
            return -1;
        *rb = '\0';
        colon = rb[1] == ':' ? rb + 1 : NULL;
        hp++;
    } else if ((colon = strrchr(hp, ':')))
        *colon = '\0';
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 1 || p > 65535)
            return -1;
        port = (int)p;
    }
    *local = !strcasecmp(hp, "localhost") || !strncmp(hp, "127.", 4) ||
             !strcmp(hp, "::1") || !strcmp(hp, "0.0.0.0") ||
             !strcmp(hp, "::") || !*hp;
    return port;
}

bool bisect_port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true; /* cannot tell: the listener table decides */
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1; /* connections in TIME_WAIT do not hold the port */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool ok = !bind(fd, (struct sockaddr *)&a, sizeof(a));
    int err = errno;
    close(fd);
    return ok || err != EADDRINUSE;
}

/* Where the kernel's ephemeral ports start (net.ipv4.ip_local_port_range):
 * a connect() or a bind to port 0 takes its local port from there up. */
static int ephemeral_low(void)
{
    int lo = 32768, a, b; /* Linux's default */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f && fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a)
        lo = a;
    if (f)
        fclose(f);
    return lo;
}

/* Below the ephemeral range, from here up: above the ports services are
 * usually given (5432, 8000, 8080, ...), though some sit here too (an
 * sglang server's default 30000): each port is checked free before it is
 * given. */
#define PICK_FLOOR 10000
#define PICK_TRIES 64
#define PICK_RECENT 64

static int pick_below_range(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int recent[PICK_RECENT];
    static size_t nrecent;
    int lo = ephemeral_low();
    if (lo - PICK_FLOOR < 1000)
        return 0; /* no room below it: the caller binds to port 0 */
    uint32_t r[PICK_TRIES];
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        for (int i = 0; i < PICK_TRIES; i++)
            r[i] = (uint32_t)getpid() * 2654435761u + (uint32_t)i * 40503u;
    pthread_mutex_lock(&mu);
    int port = 0;
    for (int i = 0; i < PICK_TRIES && !port; i++) {
        int p = PICK_FLOOR + (int)(r[i] % (uint32_t)(lo - PICK_FLOOR));
        bool given = false;
        for (size_t k = 0; k < PICK_RECENT && k < nrecent; k++)
            given |= recent[k] == p;
        if (!given && bisect_port_listeners(p, NULL, 0) == 0 &&
            bisect_port_bindable(p))
            port = p;
    }
    if (port)
        recent[nrecent++ % PICK_RECENT] = port;
    pthread_mutex_unlock(&mu);
    return port;
}

int bisect_port_pick(void)
{
    int port = pick_below_range();
    if (port)
        return port;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, len) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}
