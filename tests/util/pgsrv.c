/*
 * pgsrv: a PostgreSQL server for the store tests (see pgsrv.h).
 */
#include "util/pgsrv.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/need.h"
#include "util/proc.h"

static char bindir[256];
static char dir[64];     /* the server's directory: socket and data */
static pid_t postmaster; /* 0: not running */
static uid_t run_uid;    /* nobody, when the tests run as root */
static gid_t run_gid;
static int dbs; /* databases made */
static bool exit_hooked;

static bool is_dir_with(const char *d, const char *prog)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", d, prog);
    return access(p, X_OK) == 0;
}

/* The folder of initdb and postgres, or "" when there is none. */
static const char *find_bindir(void)
{
    if (*bindir)
        return bindir;
    FILE *f = popen("pg_config --bindir 2>/dev/null", "r");
    if (f) {
        if (fgets(bindir, sizeof(bindir), f))
            bindir[strcspn(bindir, "\n")] = 0;
        pclose(f);
        if (!is_dir_with(bindir, "initdb") || !is_dir_with(bindir, "postgres"))
            *bindir = 0;
    }
    if (!*bindir) {
        glob_t g;
        if (glob("/usr/lib/postgresql/*/bin", 0, NULL, &g) == 0) {
            /* the last: the newest version */
            for (size_t i = g.gl_pathc; i-- > 0;) {
                if (is_dir_with(g.gl_pathv[i], "initdb") &&
                    is_dir_with(g.gl_pathv[i], "postgres")) {
                    snprintf(bindir, sizeof(bindir), "%s", g.gl_pathv[i]);
                    break;
                }
            }
            globfree(&g);
        }
    }
    return bindir;
}

bool pgsrv_available(void)
{
    return *find_bindir() != 0;
}

/* In a child: becomes the server's user. */
static void become_user(void)
{
    if (run_uid && (setgroups(0, NULL) || setgid(run_gid) || setuid(run_uid)))
        _exit(126);
}

/* Runs bindir/prog with argv (NULL-terminated, after the program) as the
 * server's user, its output into DIR/log; its exit status or -1. */
static int run_prog(const char *prog, const char *const argv[])
{
    char path[512], log[128];
    snprintf(path, sizeof(path), "%s/%s", bindir, prog);
    snprintf(log, sizeof(log), "%s/log", dir);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        become_user();
        const char *av[32];
        int n = 0;
        av[n++] = path;
        for (int i = 0; argv[i] && n < 31; i++)
            av[n++] = argv[i];
        av[n] = NULL;
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (in >= 0)
            dup2(in, 0);
        if (chdir(dir))
            _exit(126);
        execv(path, (char *const *)av);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void print_log(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "tail -n 20 '%s/log' >&2", dir);
    if (system(cmd)) {
        /* nothing to show */
    }
}

/* "host=DIR dbname=NAME user=fid" connection to the server. */
static PGconn *connect_db(const char *name)
{
    char conninfo[256];
    snprintf(conninfo, sizeof(conninfo), "host=%s dbname=%s user=fid", dir,
             name);
    return PQconnectdb(conninfo);
}

static void on_exit_stop(void)
{
    pgsrv_stop();
}

/* Removes what a test binary killed before its exit left: a server
 * directory of /tmp older than a minute whose postmaster (data/
 * postmaster.pid) is not running; its postgres processes went with the
 * test process (the parent-death signal). */
static void sweep(void)
{
    glob_t g;
    if (glob("/tmp/fidelity-pg-*", GLOB_ONLYDIR, NULL, &g))
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char pidfile[128], cmd[160];
        struct stat st;
        if (stat(g.gl_pathv[i], &st) || time(NULL) - st.st_mtime < 60)
            continue;
        snprintf(pidfile, sizeof(pidfile), "%s/data/postmaster.pid",
                 g.gl_pathv[i]);
        FILE *f = fopen(pidfile, "r");
        long pid = 0;
        if (f) {
            if (fscanf(f, "%ld", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
            continue;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g.gl_pathv[i]);
        if (system(cmd)) {
            /* left for the next sweep */
        }
    }
    globfree(&g);
}

static bool launch(void);

/* Starts the server; false (its log printed) when it does not. */
static bool start(void)
{
    sweep();
    char data[128];
    snprintf(dir, sizeof(dir), "/tmp/fidelity-pg-XXXXXX");
    if (!mkdtemp(dir))
        return false;
    snprintf(data, sizeof(data), "%s/data", dir);
    run_uid = 0;
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");
        if (!pw)
            return false;
        run_uid = pw->pw_uid;
        run_gid = pw->pw_gid;
        if (chown(dir, run_uid, run_gid))
            return false;
    }
    if (!exit_hooked) {
        atexit(on_exit_stop);
        exit_hooked = true;
    }
    const char *init[] = {"-D", data,   "-A",         "trust",     "-U", "fid",
                          "-E", "UTF8", "--locale=C", "--no-sync", NULL};
    if (run_prog("initdb", init) != 0) {
        print_log();
        return false;
    }
    return launch();
}

/* Starts the postmaster on the initialized directory and waits until it
 * answers; false (its log printed) when it does not. */
static bool launch(void)
{
    char data[128], path[512], log[128];
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(path, sizeof(path), "%s/postgres", bindir);
    snprintf(log, sizeof(log), "%s/log", dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        become_user();
        /* after the change of user, which clears it: the postmaster gets
         * an immediate shutdown when the test process dies */
        prctl(PR_SET_PDEATHSIG, SIGQUIT);
        if (getppid() != parent)
            _exit(0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (in >= 0)
            dup2(in, 0);
        if (chdir(dir))
            _exit(126);
        setsid();
        execl(path, path, "-D", data, "-k", dir, "-c",
              "listen_addresses=", "-c", "fsync=off", "-c",
              "full_page_writes=off", "-c", "synchronous_commit=off", "-c",
              "max_connections=50", (char *)0);
        _exit(127);
    }
    postmaster = pid;
    /* ready within 30 s */
    char conninfo[256];
    snprintf(conninfo, sizeof(conninfo), "host=%s dbname=postgres user=fid",
             dir);
    for (int i = 0; i < 3000; i++) {
        if (PQping(conninfo) == PQPING_OK)
            return true;
        int st;
        if (waitpid(postmaster, &st, WNOHANG) == postmaster) {
            postmaster = 0;
            break;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    print_log();
    return false;
}

void pgsrv_db(char *url, size_t size)
{
    if (!pgsrv_available())
        need_missing("PostgreSQL's server (the postgresql package)");
    if (!postmaster && !start()) {
        pgsrv_stop();
        fail_msg("the test PostgreSQL server did not start");
    }
    char name[32], sql[96];
    snprintf(name, sizeof(name), "t%d", ++dbs);
    PGconn *c = connect_db("postgres");
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pgsrv: %s", PQerrorMessage(c));
        PQfinish(c);
        fail_msg("cannot connect to the test PostgreSQL server");
    }
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s TEMPLATE template0%s", name,
             PQserverVersion(c) >= 150000 ? " STRATEGY FILE_COPY" : "");
    PGresult *r = PQexec(c, sql);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "pgsrv: %s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    if (!ok)
        fail_msg("cannot create a test database");
    int n = snprintf(url, size, "postgresql://fid@/%s?host=%s", name, dir);
    if (n < 0 || (size_t)n >= size)
        fail_msg("the test database's URL does not fit");
}

void pgsrv_pause(void)
{
    if (!postmaster)
        fail_msg("pgsrv_pause: the test PostgreSQL server is not running");
    kill(postmaster, SIGINT); /* fast shutdown */
    int st;
    for (int i = 0; i < 3000; i++) {
        if (waitpid(postmaster, &st, WNOHANG) == postmaster) {
            postmaster = 0;
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pgsrv_stop();
    fail_msg("the test PostgreSQL server did not stop within 30 s");
}

void pgsrv_resume(void)
{
    if (postmaster)
        return;
    if (!*dir)
        fail_msg("pgsrv_resume: no test PostgreSQL server was started");
    if (!launch()) {
        pgsrv_stop();
        fail_msg("the test PostgreSQL server did not start again");
    }
}

void pgsrv_stop(void)
{
    if (postmaster) {
        kill(postmaster, SIGQUIT); /* immediate shutdown */
        int st;
        for (int i = 0; i < 500; i++) {
            if (waitpid(postmaster, &st, WNOHANG) == postmaster)
                break;
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            if (i == 499) {
                kill(postmaster, SIGKILL);
                waitpid(postmaster, &st, 0);
            }
        }
        postmaster = 0;
    }
    if (*dir) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd)) {
            /* left behind in /tmp */
        }
        *dir = 0;
    }
}

void pgsrv_db_password(char *url, size_t size, const char *pw)
{
    char plain[512];
    pgsrv_db(plain, sizeof(plain));
    static const char user[] = "postgresql://fid@";
    assert_memory_equal(plain, user, sizeof(user) - 1);
    snprintf(url, size, "postgresql://fid:%s@%s", pw, plain + sizeof(user) - 1);
}

int pgsrv_enter_dir(char *into, const char *tmpl, char *home)
{
    char bin[PATH_MAX];
    if (!realpath(fidelity_bin(), bin) || !getcwd(home, PATH_MAX))
        return -1;
    setenv("FIDELITY_BIN", bin, 1);
    snprintf(into, 64, "%s", tmpl);
    if (!mkdtemp(into) || chdir(into))
        return -1;
    return 0;
}

int pgsrv_leave_dir(const char *into, const char *home)
{
    if (chdir(home))
        return -1;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", into);
    return system(cmd);
}
