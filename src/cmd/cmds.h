/*
 * cmds: entry points and help texts of the subcommands listed in
 * commands.c. One cmd_<name>.c defines each.
 */
#ifndef CMD_CMDS_H
#define CMD_CMDS_H

int cmd_drift(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_audit(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

extern const char CMD_DRIFT_HELP[];
extern const char CMD_HELP_HELP[];
extern const char CMD_SIM_HELP[];
extern const char CMD_RECORD_HELP[];
extern const char CMD_AUDIT_HELP[];
extern const char CMD_SESSIONS_HELP[];
extern const char CMD_SHOW_HELP[];
extern const char CMD_PROBE_HELP[];
extern const char CMD_BISECT_HELP[];
extern const char CMD_INSPECT_HELP[];

#endif
