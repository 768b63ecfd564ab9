/*
 * main: argv -> command table -> cmd_*.c, nothing else.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "version.h"

static int usage(void)
{
    fputs("usage: fidelity <command> [options]\n"
          "hint: see 'fidelity help' for the commands\n",
          stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("fidelity %s\n", FIDELITY_VERSION);
        return EXIT_PASS;
    }
    if (!strcmp(name, "--help") || !strcmp(name, "-h"))
        name = "help";
    const struct cmd *c = cmd_find(name);
    if (!c) {
        fprintf(stderr, "fidelity: '%s' is not a fidelity command\n", name);
        return usage();
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return cli_help(c->name);
    }
    signal(SIGINT, cli_sigint_exit); /* exit 130, in every command */
    /* each stdout line goes out before a later stderr line, also when both
     * go to one file */
    setvbuf(stdout, NULL, _IOLBF, 0);
    return c->run(argc - 1, argv + 1);
}
