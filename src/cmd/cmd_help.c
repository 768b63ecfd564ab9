/*
 * cmd_help: `fidelity help [COMMAND]`, the command list and each command's
 * full help with examples.
 */
#include <stdio.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"

const char CMD_HELP_HELP[] =
    "usage: fidelity help [COMMAND]\n"
    "\n"
    "Without COMMAND, lists the commands. With one, prints its options and\n"
    "examples; 'fidelity COMMAND --help' prints the same.\n";

static void list(FILE *out)
{
    fputs("usage: fidelity <command> [options]\n"
          "       fidelity --version\n\n"
          "fidelity finds out why an LLM deployment forgets: what the harness\n"
          "sent, what the server kept, where recall breaks, and which patch\n"
          "moved the numbers.\n\ncommands:\n",
          out);
    for (const struct cmd *c = commands; c->name; c++)
        fprintf(out, "  %-10s %s\n", c->name, c->summary);
    fputs("\nSee 'fidelity help COMMAND' for one command's options and "
          "examples.\n",
          out);
}

int cmd_help(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        list(stdout);
        return EXIT_PASS;
    }
    if (argc > 2)
        return cli_usage_error("help", "takes one command name, got %d",
                               argc - 1);
    return cli_help(argv[1]);
}
