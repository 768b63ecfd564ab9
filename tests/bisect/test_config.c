/*
 * Tests for bisect/config: a complete config is read field by field, and
 * each kind of bad config (unknown key, missing or unknown placeholder,
 * duplicated toggle, bad value, unreadable file) stops with the file, the
 * line and what to fix.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bisect/config.h"

static const char good[] = "# a comment\n"
                           "[server]\n"
                           "command = sglang --port {port} \\\n"
                           "          --base-gpu-id {slot}\n"
                           "env = CUDA_VISIBLE_DEVICES={slot}\n"
                           "env = HF_HOME=/cache\n"
                           "workdir = /srv\n"
                           "ready_url = http://127.0.0.1:{port}/health\n"
                           "ready_timeout = 900\n"
                           "stop_signal = SIGINT\n"
                           "stop_grace = 5\n"
                           "\n"
                           "[measure]\n"
                           "profile = test\n"
                           "drift_args = --sequences 2\n"
                           "\n"
                           "[toggle mhc-bf16]\n"
                           "env = SGLANG_MHC_BF16=1\n"
                           "description = mixing weights in bf16\n"
                           "path = decode\n"
                           "\n"
                           "[toggle splitk]\n"
                           "args = --enable-split-k\n"
                           "path = both\n";

static int parse(struct bisect_config *c, const char *text, struct diag *d)
{
    return bisect_config_parse(c, "t.ini", text, strlen(text), d);
}

static void test_good_config_read(void **state)
{
    (void)state;
    struct bisect_config c;
    struct diag d = {0};
    assert_int_equal(parse(&c, good, &d), 0);
    assert_string_equal(c.command,
                        "sglang --port {port}            --base-gpu-id {slot}");
    assert_int_equal(c.command_line, 3);
    assert_int_equal(c.n_env, 2);
    assert_string_equal(c.env[0], "CUDA_VISIBLE_DEVICES={slot}");
    assert_string_equal(c.workdir, "/srv");
    assert_string_equal(c.ready_url, "http://127.0.0.1:{port}/health");
    assert_true(c.ready_timeout == 900);
    assert_int_equal(c.stop_signal, SIGINT);
    assert_true(c.stop_grace == 5);
    assert_null(c.golden_url);
    assert_string_equal(c.profile, "test");
    assert_string_equal(c.drift_args, "--sequences 2");
    assert_string_equal(c.probe_args, "");
    assert_int_equal(c.n_toggles, 2);
    assert_string_equal(c.toggles[0].name, "mhc-bf16");
    assert_string_equal(c.toggles[0].args, "");
    assert_int_equal(c.toggles[0].n_env, 1);
    assert_int_equal(c.toggles[0].path, BISECT_PATH_DECODE);
    assert_int_equal(c.toggles[0].line, 17);
    assert_string_equal(c.toggles[1].args, "--enable-split-k");
    assert_int_equal(c.toggles[1].path, BISECT_PATH_BOTH);
    char *e = bisect_expand(c.env[0], 8001, 3);
    assert_string_equal(e, "CUDA_VISIBLE_DEVICES=3");
    free(e);
    bisect_config_release(&c);
}

static void test_defaults(void **state)
{
    (void)state;
    struct bisect_config c;
    struct diag d = {0};
    assert_int_equal(parse(&c,
                           "[server]\ncommand=srv {port}\n[golden]\nurl = "
                           "http://gpu1:8000\n[toggle a]\nargs=-a\n",
                           &d),
                     0);
    assert_string_equal(c.ready_url, "http://127.0.0.1:{port}/v1/models");
    assert_int_equal(c.stop_signal, SIGTERM);
    assert_true(c.stop_grace == 30 && c.ready_timeout == 600);
    assert_string_equal(c.profile, "quick");
    assert_string_equal(c.golden_url, "http://gpu1:8000");
    assert_int_equal(c.toggles[0].path, BISECT_PATH_UNKNOWN);
    bisect_config_release(&c);
}

/* The message for text is exactly want. */
static void bad(const char *text, const char *want)
{
    struct bisect_config c;
    struct diag d = {0};
    assert_int_equal(parse(&c, text, &d), -EINVAL);
    assert_string_equal(d.msg, want);
    assert_null(c.command); /* released */
}

static void test_unknown_key(void **state)
{
    (void)state;
    bad("[server]\ncommand = s {port}\n\nready_timout = 5\n",
        "t.ini:4: unknown key 'ready_timout' in [server]; the keys there are "
        "command, env, workdir, ready_url, ready_timeout, stop_signal, "
        "stop_grace, port, launcher");
    bad("[server]\ncommand = s {port}\n[toggle a]\nargs = -a\nclaims = "
        "prefill\n",
        "t.ini:5: unknown key 'claims' in [toggle NAME]; the keys there are "
        "args, env, description, path");
    bad("[servers]\n", "t.ini:1: unknown section '[servers]'; the sections "
                       "are [server], [golden], [measure], [slurm] and "
                       "[toggle NAME]");
}

/* [golden] file: a saved golden, relative to the config's directory;
 * url and file exclude each other. */
static void test_golden_file(void **state)
{
    (void)state;
    struct bisect_config c;
    struct diag d = {0};
    const char *text = "[server]\ncommand=srv {port}\n[golden]\nfile = "
                       "ref.fgold\n[toggle a]\nargs=-a\n";
    assert_int_equal(
        bisect_config_parse(&c, "conf/b.ini", text, strlen(text), &d), 0);
    assert_string_equal(c.golden_file, "conf/ref.fgold");
    assert_null(c.golden_url);
    bisect_config_release(&c);
    assert_int_equal(parse(&c, text, &d), 0);
    assert_string_equal(c.golden_file, "ref.fgold");
    bisect_config_release(&c);
    const char *abs = "[server]\ncommand=srv {port}\n[golden]\nfile = "
                      "/data/ref.fgold\n[toggle a]\nargs=-a\n";
    assert_int_equal(
        bisect_config_parse(&c, "conf/b.ini", abs, strlen(abs), &d), 0);
    assert_string_equal(c.golden_file, "/data/ref.fgold");
    bisect_config_release(&c);
    bad("[server]\ncommand=srv {port}\n[golden]\nurl = http://g:1\nfile = "
        "ref.fgold\n",
        "t.ini:5: [golden] has both 'url' and 'file'; keep one: a running "
        "golden, or a saved golden file");
    bad("[server]\ncommand=srv {port}\n[golden]\nfile =\n",
        "t.ini:4: 'file' is empty; give the path of a saved golden "
        "('fidelity drift --golden URL --save-golden FILE')");
    bad("[golden]\nport = 1\n",
        "t.ini:2: unknown key 'port' in [golden]; the keys there are url, "
        "file");
}

/* The Slurm launcher's settings: [server] launcher and [slurm]. */
static void test_slurm_section(void **state)
{
    (void)state;
    struct bisect_config c;
    struct diag d = {0};
    assert_int_equal(parse(&c,
                           "[server]\ncommand=srv {port}\nlauncher = slurm\n"
                           "[slurm]\npartition = gpu-h100\naccount = llm\n"
                           "nodes = 2\ngpus_per_node = 8\ntime = 02:00:00\n"
                           "sbatch = --exclusive\nsbatch = --qos=high\n"
                           "host = $(hostname -f)\nqueue_timeout = 900\n"
                           "[toggle a]\nargs=-a\n",
                           &d),
                     0);
    assert_int_equal(c.launcher, BISECT_LAUNCH_SLURM);
    assert_string_equal(c.slurm.partition, "gpu-h100");
    assert_string_equal(c.slurm.account, "llm");
    assert_int_equal(c.slurm.nodes, 2);
    assert_int_equal(c.slurm.gpus_per_node, 8);
    assert_string_equal(c.slurm.time, "02:00:00");
    assert_int_equal(c.slurm.n_sbatch, 2);
    assert_string_equal(c.slurm.sbatch[1], "--qos=high");
    assert_string_equal(c.slurm.host, "$(hostname -f)");
    assert_true(c.slurm.queue_timeout == 900);
    bisect_config_release(&c);
    assert_int_equal(
        parse(&c, "[server]\ncommand=srv {port}\n[toggle a]\nargs=-a\n", &d),
        0);
    assert_int_equal(c.launcher, BISECT_LAUNCH_LOCAL);
    assert_int_equal(c.slurm.nodes, 1);
    assert_true(c.slurm.queue_timeout == 3600);
    assert_null(c.slurm.partition);
    bisect_config_release(&c);
    bad("[server]\ncommand = s {port}\nlauncher = k8s\n",
        "t.ini:3: unknown launcher 'k8s'; use local or slurm");
    bad("[server]\ncommand = s {port}\n[slurm]\nnodes = 0\n",
        "t.ini:4: 'nodes' must be 1 or more");
    bad("[server]\ncommand = s {port}\n[slurm]\ngpus_per_node = eight\n",
        "t.ini:4: 'gpus_per_node' must be a whole number, 0 to 1024");
    bad("[server]\ncommand = s {port}\n[slurm]\nqueue = 5\n",
        "t.ini:4: unknown key 'queue' in [slurm]; the keys there are "
        "partition, account, nodes, gpus_per_node, time, sbatch, host, "
        "queue_timeout");
}

static void test_missing_placeholder(void **state)
{
    (void)state;
    bad("# x\n[server]\ncommand = sglang --port 8000\n[toggle a]\nargs=-a\n",
        "t.ini:3: command has no '{port}' placeholder; put {port} where the "
        "server's port goes (e.g. --port {port})");
    bad("[server]\ncommand = s {port} --gpu {gpu}\n",
        "t.ini:2: unknown placeholder '{gpu}' in 'command'; the "
        "placeholders are {port} and {slot}");
    bad("[server]\ncommand = s {port}\n[toggle a]\nenv = X={slot\n",
        "t.ini:4: unknown placeholder '{' in 'env'; the placeholders are "
        "{port} and {slot}");
}

static void test_duplicated_toggle(void **state)
{
    (void)state;
    bad("[server]\ncommand = s {port}\n[toggle fp8]\nargs=-a\n\n[toggle "
        "fp8]\nargs=-b\n",
        "t.ini:6: toggle 'fp8' defined twice (first on line 3); rename or "
        "merge one");
}

static void test_bad_values(void **state)
{
    (void)state;
    bad("[server]\ncommand = s {port}\ncommand = t {port}\n",
        "t.ini:3: 'command' set twice in this section (first on line 2); "
        "keep one");
    bad("[golden]\nurl = http://a\n[server]\ncommand = s {port}\n[golden]\n"
        "url = http://b\n",
        "t.ini:5: [golden] appears twice (first on line 1); keep one");
    bad("[server]\ncommand = s {port}\n[toggle a]\npath = attention\n",
        "t.ini:4: unknown path 'attention' for toggle 'a'; use prefill, "
        "decode, both or unknown");
    bad("[server]\ncommand = s {port}\n[toggle a]\ndescription = x\n",
        "t.ini:3: toggle 'a' changes nothing; give it 'args' or 'env'");
    bad("[server]\ncommand = s {port}\nstop_signal = SIGFOO\n",
        "t.ini:3: unknown stop_signal 'SIGFOO'; use SIGTERM, SIGINT, "
        "SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2 or a number");
    bad("[server]\ncommand = s {port}\nready_timeout = soon\n",
        "t.ini:3: 'ready_timeout' must be a number of seconds, 0 to 86400");
    bad("[server]\ncommand = s {port}\nenv = 1X=2\n",
        "t.ini:3: env '1X=2' is not NAME=VALUE; write e.g. 'env = "
        "CUDA_VISIBLE_DEVICES={slot}'");
    bad("[golden]\nurl = gpu1:8000\n",
        "t.ini:2: 'url' must start with http:// or https://");
    bad("command = s {port}\n",
        "t.ini:1: 'command' outside a section; start with [server], "
        "[golden], [measure] or [toggle NAME]");
    bad("[server]\ncommand = s {port}\n",
        "t.ini: no [toggle NAME] sections; add the patches to bisect");
    bad("[toggle a]\nargs = -a\n", "t.ini: no [server] command; add one with "
                                   "{port} where the server's port goes");
    bad("[server]\ncommand = s {port}\n[toggle a]\nargs -a\n",
        "t.ini:4: 'args -a' is not 'key = value' or a [section]");
}

static void test_unreadable_file(void **state)
{
    (void)state;
    struct bisect_config c;
    struct diag d = {0};
    assert_int_equal(bisect_config_load(&c, "/nonexistent/b.ini", &d), -ENOENT);
    assert_string_equal(d.msg,
                        "cannot read '/nonexistent/b.ini': No such file or "
                        "directory; give the path of a bisect config "
                        "(docs/BISECT.md)");
    assert_int_equal(bisect_config_load(&c, "/", &d), -EISDIR);
    assert_string_equal(d.msg, "cannot read '/': Is a directory");
}

static void test_signals(void **state)
{
    (void)state;
    assert_int_equal(bisect_signal_parse("SIGTERM"), SIGTERM);
    assert_int_equal(bisect_signal_parse("INT"), SIGINT);
    assert_int_equal(bisect_signal_parse("9"), 9);
    assert_int_equal(bisect_signal_parse("0"), 0);
    assert_string_equal(bisect_signal_name(SIGQUIT), "SIGQUIT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_config_read),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_slurm_section),
        cmocka_unit_test(test_golden_file),
        cmocka_unit_test(test_missing_placeholder),
        cmocka_unit_test(test_duplicated_toggle),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_unreadable_file),
        cmocka_unit_test(test_signals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
