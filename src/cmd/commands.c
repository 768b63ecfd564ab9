/*
 * commands: the table of subcommands, as git.c's commands[]. Each row names
 * its cmd_<name>.c entry point, a summary line and the full help text.
 */
#include "cmd/cmd.h"
#include "cmd/cmds.h"

const struct cmd commands[] = {
    {"sim", cmd_sim, "run a built-in OpenAI-compatible server with faults",
     CMD_SIM_HELP},
    {"drift", cmd_drift,
     "compare a candidate server with a golden one, position by position",
     CMD_DRIFT_HELP},
    {"help", cmd_help, "show help for fidelity or one command", CMD_HELP_HELP},
    {NULL, NULL, NULL, NULL},
};
