/*
 * cmd_record: `fidelity record`, the recording proxy. Parses options,
 * starts src/record/ on the listen address, prints the one line tests and
 * scripts wait for, and reports what was stored when it stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "core/clock.h"
#include "core/plural.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "record/record.h"
#include "record/redact.h"
#include "store/store.h"

const char CMD_RECORD_HELP[] =
    "usage: fidelity record --upstream URL [--listen HOST:PORT] [--db STORE]\n"
    "                       [--intake FILE] [--spill FILE] [--max-body BYTES]\n"
    "                       [--timeout S]\n"
    "                       [--upstream-cacert FILE] [--insecure]\n"
    "                       [--header-timeout S] [--idle-timeout S]\n"
    "                       [--max-conns N] [--allow-remote]\n"
    "                       [--redact-key NAME]...\n"
    "\n"
    "A transparent reverse proxy between a harness (opencode, a script, an\n"
    "SDK) and an OpenAI-compatible server. Every method and path is\n"
    "forwarded with its bytes untouched; server-sent events pass chunk by\n"
    "chunk. Each exchange is appended to the store's intake log\n"
    "(--intake) before the client receives its last byte, and committed\n"
    "to the store moments later, off the client's\n"
    "path: request headers (Authorization, api-key and similar redacted),\n"
    "body (the string values of keys such as api_key, password, secret,\n"
    "access_token redacted, keeping their length), response, the reply "
    "reassembled from the stream, timings on both\n"
    "sides and how it ended. After a crash or kill -9, the next fidelity\n"
    "command that opens the store commits what the log still holds.\n"
    "Messages are stored once, content-addressed and compressed. If the\n"
    "store fails, exchanges go to the spill file (JSON lines) and proxying\n"
    "continues; while a PostgreSQL server cannot be reached they wait in\n"
    "the intake log and are committed once it is back. Read the\n"
    "recordings with 'fidelity sessions', 'fidelity show' and 'fidelity\n"
    "audit'. docs/RECORD.md describes the storage, the intake log and the\n"
    "classification.\n"
    "\n"
    "options:\n"
    "  --upstream URL      the server to forward to (http:// or https://;\n"
    "                      a path prefix is kept: http://h:8000/api)\n"
    "  --listen HOST:PORT  where to listen (default 127.0.0.1:8080; port 0\n"
    "                      picks a free one; IPv6 as [::1]:PORT). An address\n"
    "                      that is not loopback needs --allow-remote\n"
    "  --allow-remote      listen on a non-loopback address (0.0.0.0, [::],\n"
    "                      a LAN address). The proxy has no authentication:\n"
    "                      whoever reaches the port uses the upstream and any\n"
    "                      key it trusts; a warning says so on stderr\n"
    "  --db STORE          the store: a SQLite file, or a PostgreSQL URL\n"
    "                      (postgresql://USER@HOST/DB) that several records\n"
    "                      share (default $FIDELITY_DB or fidelity.db)\n"
    "  --intake FILE       this record's intake log (default FILE-intake\n"
    "                      beside a SQLite --db; for a URL,\n"
    "                      fidelity-HASH-intake in the current folder). Each\n"
    "                      record needs its own: give one per record when\n"
    "                      several on one host share a database\n"
    "  --spill FILE        where exchanges go when the store fails\n"
    "                      (default FILE.spill.jsonl beside a SQLite --db;\n"
    "                      fidelity-HASH.spill.jsonl for a URL)\n"
    "  --max-body BYTES    largest request body; 413 above (default 64M;\n"
    "                      suffixes K, M, G)\n"
    "  --timeout S         whole-exchange upstream timeout in seconds, 0 for\n"
    "                      none (default 600)\n"
    "  --upstream-cacert FILE  trust the CA certificate(s) in FILE (PEM) for\n"
    "                      an https:// upstream, e.g. a self-signed server\n"
    "  --insecure          do not verify the https:// upstream's certificate\n"
    "                      (the traffic is still encrypted)\n"
    "  --header-timeout S  a request head must arrive within S seconds of\n"
    "                      the connection (or of its first byte after a\n"
    "                      keep-alive wait), a body must not pause longer;\n"
    "                      else 408 and the close (default 30)\n"
    "  --idle-timeout S    close a keep-alive connection idle S seconds\n"
    "                      between requests (default 75). A response that\n"
    "                      is still streaming is never cut, however quiet\n"
    "  --max-conns N       client connections at once; one more gets 503\n"
    "                      with a JSON error and is closed (default: half of\n"
    "                      what the descriptor limit leaves after 64, e.g.\n"
    "                      480 with ulimit -n 1024, at least 16). When\n"
    "                      descriptors run out anyway, record pauses\n"
    "                      accepting and logs it at most once a second\n"
    "  --redact-key NAME   also redact the string values of request-body\n"
    "                      keys named NAME (any case, any depth;\n"
    "                      repeatable); the upstream still gets them\n"
    "\n"
    "The first line on standard output is\n"
    "  fidelity record: listening on http://HOST:PORT -> URL\n"
    "SIGINT or SIGTERM stops it after in-flight exchanges finish (at most\n"
    "5 s), with every finished exchange committed and the intake log\n"
    "removed.\n"
    "\n"
    "A second after the last exchange it committed, record keeps the\n"
    "listing of 'fidelity sessions' up to date for a SQLite store of up to\n"
    "64 MiB: it runs 'fidelity sessions' once, at low priority, so that a\n"
    "listing reads the kept rows instead of every exchange.\n"
    "\n"
    "examples:\n"
    "  # record opencode talking to a local vLLM\n"
    "  fidelity record --listen 127.0.0.1:8081 --upstream "
    "http://127.0.0.1:8000 \\\n"
    "      --db opencode.db\n"
    "  # then point the provider's baseURL at http://127.0.0.1:8081/v1\n"
    "\n"
    "  # record against the built-in simulator, then audit\n"
    "  fidelity sim --listen 127.0.0.1:9000 &\n"
    "  fidelity record --listen 127.0.0.1:9001 --upstream "
    "http://127.0.0.1:9000\n"
    "  fidelity audit --db fidelity.db\n"
    "\n"
    "exit status: 0 stopped cleanly, 2 bad option, 4 store or listen\n"
    "failure (or exchanges lost because both store and spill failed, or\n"
    "left in the intake log for the next start to commit).\n";

static void log_line(void *ud, const char *msg)
{
    (void)ud;
    fprintf(stderr, "fidelity record: %s\n", msg);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (end == s || *s == '-')
        return -1;
    if (*end == 'k' || *end == 'K')
        mul = 1ULL << 10;
    else if (*end == 'm' || *end == 'M')
        mul = 1ULL << 20;
    else if (*end == 'g' || *end == 'G')
        mul = 1ULL << 30;
    else if (*end)
        return -1;
    if (mul > 1 && end[1])
        return -1;
    if (v == 0 || v > (1ULL << 40) / mul)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static const struct option OPTS[] = {
    {"upstream", required_argument, NULL, 'u'},
    {"listen", required_argument, NULL, 'l'},
    {"db", required_argument, NULL, 'd'},
    {"spill", required_argument, NULL, 's'},
    {"intake", required_argument, NULL, 'i'},
    {"max-body", required_argument, NULL, 'm'},
    {"timeout", required_argument, NULL, 't'},
    {"upstream-cacert", required_argument, NULL, 'c'},
    {"insecure", no_argument, NULL, 'k'},
    {"header-timeout", required_argument, NULL, 'H'},
    {"idle-timeout", required_argument, NULL, 'I'},
    {"max-conns", required_argument, NULL, 'M'},
    {"allow-remote", no_argument, NULL, 'R'},
    {"redact-key", required_argument, NULL, 'K'},
    {NULL, 0, NULL, 0},
};

/* Seconds (a decimal fraction allowed) into milliseconds, > 0. */
static int parse_secs(const char *s, long *ms)
{
    double v;
    if (cli_parse_double(s, 0.001, 86400, &v))
        return -1;
    *ms = (long)(v * 1000 + 0.5);
    return 0;
}

/* A listen address that is not loopback needs --allow-remote: record
 * forwards whatever reaches it to the upstream, with no authentication of
 * its own, so it must not become an open proxy without a word
 * (cli_check_listen). */
/*
 * The keeper: the listing of `fidelity sessions` kept up to date while
 * record serves (store/slist.h). A second after the last exchange record
 * committed, `fidelity sessions --db DB` runs in a child process at low
 * priority and keeps its rows beside the store; a listing then reads them
 * instead of every exchange. The child is this executable, so the rows are
 * the ones a listing would compute (it keeps nothing when an exchange was
 * committed during its load). Not for a PostgreSQL store (no mark) nor
 * above KEEPER_MAX_BYTES of store, where the load would take the memory of
 * an audit in the background unasked; and at most a tenth of the time: the
 * next run waits nine times as long as the last one took.
 */
#define KEEPER_MAX_BYTES ((off_t)64 << 20)
#define KEEPER_QUIET_S 1.0
#define KEEPER_TICK_MS 200

struct keeper {
    const struct record *r;
    const char *db, *spill;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, started;
    pid_t child;
};

/* The child: this executable's `sessions`, its output discarded, nothing
 * of record's open (its sockets, the store) passed on. */
static pid_t keeper_spawn(const struct keeper *k)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid)
        return pid;
    /* killed with record (kill -9 included): no listing outlives it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    syscall(SYS_close_range, 3U, ~0U, 0U);
    setpriority(PRIO_PROCESS, 0, 10);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execl("/proc/self/exe", "fidelity", "sessions", "--db", k->db, "--spill",
          k->spill, (char *)NULL);
    _exit(127);
}

static bool keeper_fits(const struct keeper *k)
{
    struct stat st;
    return stat(k->db, &st) == 0 && st.st_size <= KEEPER_MAX_BYTES;
}

static void *keeper_main(void *arg)
{
    struct keeper *k = arg;
    uint64_t seen = record_stored(k->r), done = seen;
    double changed = clock_now_s(), not_before = 0;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += KEEPER_TICK_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&k->cv, &k->mu, &until);
        if (k->stop)
            break;
        uint64_t n = record_stored(k->r);
        double now = clock_now_s();
        if (n != seen) {
            seen = n;
            changed = now;
            continue;
        }
        if (n == done || now - changed < KEEPER_QUIET_S || now < not_before)
            continue;
        done = n;
        if (!keeper_fits(k))
            continue;
        k->child = keeper_spawn(k);
        if (k->child < 0) {
            k->child = 0;
            continue;
        }
        pid_t pid = k->child;
        double t0 = now;
        pthread_mutex_unlock(&k->mu);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        pthread_mutex_lock(&k->mu);
        k->child = 0;
        now = clock_now_s();
        not_before = now + 9 * (now - t0);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void keeper_start(struct keeper *k, const struct record *r,
                         const char *db, const char *spill)
{
    memset(k, 0, sizeof(*k));
    if (db_is_url(db))
        return;
    k->r = r;
    k->db = db;
    k->spill = spill;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->started = pthread_create(&k->th, NULL, keeper_main, k) == 0;
}

/* Stops the keeper; a listing it has under way is stopped and its
 * temporary file removed (the next listing computes the rows). */
static void keeper_stop(struct keeper *k)
{
    if (!k->started)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pid_t pid = k->child;
    if (pid > 0)
        kill(pid, SIGKILL);
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->th, NULL);
    if (pid > 0) {
        char *tmp = xasprintf("%s-sessions.%ld.tmp", k->db, (long)pid);
        unlink(tmp);
        free(tmp);
    }
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
}

static void warn_remote(const char *host, int port, const char *upstream)
{
    char *h = cli_url_host(host);
    fprintf(stderr,
            "fidelity record: warning: listening on %s:%d, which is not a "
            "loopback address; the proxy has no authentication: anyone who "
            "can reach this port uses '%s' and any key it trusts\n",
            h, port, upstream);
    free(h);
}

int cmd_record(int argc, char **argv)
{
    struct record_opts o = {0};
    const char *listen = "127.0.0.1:8080";
    char *spill = NULL, *host = NULL;
    const char *redact[REDACT_KEYS_MAX];
    size_t nredact = 0;
    struct diag d = {{0}};
    long timeout_s = 600, max_conns = 0;
    bool allow_remote = false, remote;
    int c, rc;

    o.max_body = (size_t)64 << 20;
    o.db_path = cli_default_db();
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":", OPTS, NULL)) != -1) {
        switch (c) {
        case 'u':
            o.upstream = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'd':
            o.db_path = optarg;
            break;
        case 's':
            o.spill_path = optarg;
            break;
        case 'i':
            o.intake_path = optarg;
            break;
        case 'm':
            if (parse_size(optarg, &o.max_body))
                return cli_usage_error("record",
                                       "--max-body '%s' is not a size in "
                                       "bytes (e.g. 1048576 or 64M)",
                                       optarg);
            break;
        case 't':
            if (cli_parse_long(optarg, 0, 86400, &timeout_s))
                return cli_usage_error(
                    "record", "--timeout '%s' must be 0-86400 seconds", optarg);
            break;
        case 'c':
            if (access(optarg, R_OK))
                return cli_usage_error("record",
                                       "--upstream-cacert '%s': %s (give a "
                                       "readable PEM file)",
                                       optarg, strerror(errno));
            o.cacert = optarg;
            break;
        case 'k':
            o.insecure = true;
            break;
        case 'H':
            if (parse_secs(optarg, &o.header_timeout_ms))
                return cli_usage_error("record",
                                       "--header-timeout '%s' must be "
                                       "0.001-86400 seconds",
                                       optarg);
            break;
        case 'I':
            if (parse_secs(optarg, &o.idle_timeout_ms))
                return cli_usage_error("record",
                                       "--idle-timeout '%s' must be "
                                       "0.001-86400 seconds",
                                       optarg);
            break;
        case 'M':
            if (cli_parse_long(optarg, 1, 1000000, &max_conns))
                return cli_usage_error(
                    "record", "--max-conns '%s' must be 1-1000000", optarg);
            o.max_conns = (size_t)max_conns;
            break;
        case 'R':
            allow_remote = true;
            break;
        case 'K':
            if (!redact_name_ok(optarg))
                return cli_usage_error("record",
                                       "--redact-key '%s' must be 1-%d bytes",
                                       optarg, REDACT_NAME_MAX);
            if (nredact == REDACT_KEYS_MAX)
                return cli_usage_error("record",
                                       "--redact-key given more than %d times",
                                       REDACT_KEYS_MAX);
            redact[nredact++] = optarg;
            break;
        default:
            return cli_bad_option("record", c, argv);
        }
    }
    if (optind < argc)
        return cli_usage_error("record", "unexpected argument '%s'",
                               argv[optind]);
    if (!o.upstream)
        return cli_usage_error("record", "--upstream URL is required (the "
                                         "server to forward to)");
    if (strncmp(o.upstream, "http://", 7) &&
        strncmp(o.upstream, "https://", 8)) {
        char *shown = url_mask(o.upstream);
        rc = cli_usage_error("record",
                             "--upstream '%s' must start with http:// or "
                             "https://",
                             shown);
        free(shown);
        return rc;
    }
    if (cli_check_base_url("record", "--upstream", o.upstream))
        return EXIT_USAGE;
    if (cli_parse_listen(listen, &host, &o.port, &d))
        return cli_usage_error("record", "--listen %s", d.msg);
    rc = cli_check_listen("record", listen, host, allow_remote, &remote);
    if (rc)
        goto out;
    if (!o.spill_path)
        o.spill_path = spill = store_local_path(o.db_path, ".spill.jsonl");
    /* before listening: the store and the spill file must be usable */
    rc = cli_check_store("record", o.db_path);
    if (!rc)
        rc = cli_check_output("record", "--spill", o.spill_path);
    if (!rc && o.intake_path)
        rc = cli_check_output("record", "--intake", o.intake_path);
    if (rc)
        goto out;
    o.host = host;
    o.redact_keys = redact;
    o.n_redact_keys = nredact;
    o.timeout_ms = timeout_s * 1000;
    o.handle_signals = 1;
    /* undocumented in --help: forward http:// through libcurl as well, to
     * compare the two clients (docs/RECORD.md) */
    o.via_libcurl = getenv("FIDELITY_RECORD_LIBCURL") != NULL;
    /* docs/RECORD.md: percentiles of where the time goes, logged at the
     * stop; any value but empty and "0" */
    const char *timing = getenv("FIDELITY_RECORD_TIMING");
    o.timing = timing && *timing && strcmp(timing, "0");
    o.log = log_line;
    signal(SIGPIPE, SIG_IGN);

    struct record *r;
    rc = record_new(&o, &r, &d);
    if (rc) {
        rc = cli_error("record", EXIT_INTERNAL, "%s", d.msg);
        goto out;
    }
    char *uh = cli_url_host(host), *shown = url_mask(o.upstream);
    if (remote)
        warn_remote(host, record_port(r), shown);
    printf("fidelity record: listening on http://%s:%d -> %s\n", uh,
           record_port(r), shown);
    fflush(stdout);
    free(uh);
    free(shown);
    struct keeper kp;
    keeper_start(&kp, r, o.db_path, o.spill_path);
    rc = record_run(r, &d);
    keeper_stop(&kp);
    struct record_stats st;
    record_get_stats(r, &st);
    record_free(r);
    fprintf(stderr,
            "fidelity record: stopped; %llu exchange%s, %llu stored, %llu "
            "spilled to '%s', %llu lost",
            (unsigned long long)st.exchanges, plural_s(st.exchanges),
            (unsigned long long)st.stored, (unsigned long long)st.spilled,
            o.spill_path, (unsigned long long)st.lost);
    if (st.in_log) {
        char *log = o.intake_path ? xstrdup(o.intake_path)
                                  : store_local_path(o.db_path, "-intake");
        fprintf(stderr,
                ", %llu in the intake log '%s' (recoverable: the next "
                "start commits them)",
                (unsigned long long)st.in_log, log);
        free(log);
    }
    fputc('\n', stderr);
    if (rc)
        rc = cli_error("record", EXIT_INTERNAL, "%s", d.msg);
    else
        rc = st.lost || st.in_log ? EXIT_INTERNAL : EXIT_PASS;
out:
    free(spill);
    free(host);
    return rc;
}
