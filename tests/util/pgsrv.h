/*
 * pgsrv: a PostgreSQL server of the test binary's own, for the tests of
 * the PostgreSQL store. initdb and postgres (from `pg_config --bindir`,
 * else /usr/lib/postgresql/N/bin) run in a fresh temporary directory,
 * listening only on a Unix socket there, with trust authentication for the
 * user fid. PostgreSQL refuses to run as root: as root both run as the
 * user nobody, on a directory that is theirs. One server per test binary,
 * started at the first pgsrv_db and stopped at exit (atexit; and, as the
 * postmaster is this process's child with a parent-death signal, also
 * when the test process is killed; the directory such a binary leaves is
 * removed by the next start); a database per test.
 */
#ifndef TESTS_UTIL_PGSRV_H
#define TESTS_UTIL_PGSRV_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the PostgreSQL server programs are installed. */
bool pgsrv_available(void);
/*
 * Writes into url (size bytes) the URL of a new, empty database on the
 * server, starting the server first if need be: "postgresql://fid@/tN?
 * host=DIR". When PostgreSQL is not installed the test ends through
 * need_missing; when the server does not start it fails.
 */
void pgsrv_db(char *url, size_t size);
/* pgsrv_db with pw as the URL's password ("postgresql://fid:PW@/tN?..."),
 * which the server (trust) does not ask for: for tests that check nothing
 * prints it. */
void pgsrv_db_password(char *url, size_t size, const char *pw);
/*
 * For a test that runs record on a URL, which names its intake log and
 * spill file in the current directory: makes into (from tmpl, ending in
 * XXXXXX; at most 64 bytes) and enters it, keeping the directory it left
 * in home (PATH_MAX bytes), with FIDELITY_BIN made absolute first. 0, or
 * -1. pgsrv_leave_dir goes back to home and removes into: 0, or nonzero.
 */
int pgsrv_enter_dir(char *into, const char *tmpl, char *home);
int pgsrv_leave_dir(const char *into, const char *home);
/* Stops the server as an administrator would (fast shutdown: sessions
 * are ended, the socket removed) and waits until it has exited, keeping
 * its directory and databases; pgsrv_resume starts it again on the same
 * directory and socket, so the URLs pgsrv_db gave work again. Either
 * fails the test when the server does not stop or start in 30 s. */
void pgsrv_pause(void);
void pgsrv_resume(void);
/* Stops the server (immediate shutdown) and removes its directory; also
 * run at exit. */
void pgsrv_stop(void);

#endif
