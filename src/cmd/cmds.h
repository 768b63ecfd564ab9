/*
 * cmds: entry points and help texts of the subcommands listed in
 * commands.c. One cmd_<name>.c defines each.
 */
#ifndef CMD_CMDS_H
#define CMD_CMDS_H

int cmd_drift(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_sim(int argc, char **argv);

extern const char CMD_DRIFT_HELP[];
extern const char CMD_HELP_HELP[];
extern const char CMD_SIM_HELP[];

#endif
