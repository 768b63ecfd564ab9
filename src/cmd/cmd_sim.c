/*
 * cmd_sim: placeholder until the simulator lands (see docs/SIM.md).
 */
#include "cmd/cmd.h"
#include "cmd/cmds.h"

const char CMD_SIM_HELP[] = "usage: fidelity sim [options]\n";

int cmd_sim(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("sim", EXIT_INTERNAL, "not built yet");
}
