/*
 * cmds: entry points and help texts of the subcommands listed in
 * commands.c. One cmd_<name>.c defines each.
 */
#ifndef CMD_CMDS_H
#define CMD_CMDS_H

#include <jansson.h>

int cmd_drift(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_audit(int argc, char **argv);
int cmd_sessions(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_report(int argc, char **argv);

/* The --report FILE hook of probe, drift and audit (cmd_report.c): writes
 * the page of the documents given (NULL: section left out), the command
 * line taken from argv with secrets redacted. 0, or EXIT_INTERNAL after
 * the message. */
int cmd_report_hook(const char *cmd, const char *path, int argc, char **argv,
                    const json_t *probe, const json_t *drift,
                    const json_t *audit);
/* The same for probe --live: the page of a fidelity-probe-live/1 document
 * (its "Live sessions" section). */
int cmd_report_live_hook(const char *cmd, const char *path, int argc,
                         char **argv, const json_t *live);

/* `fidelity help --completion bash|zsh` (completion.c): the completion
 * script of that shell on stdout, from cli_help_opts of every command. */
int cli_completion(const char *shell);

extern const char CMD_DRIFT_HELP[];
extern const char CMD_HELP_HELP[];
extern const char CMD_SIM_HELP[];
extern const char CMD_RECORD_HELP[];
extern const char CMD_AUDIT_HELP[];
extern const char CMD_SESSIONS_HELP[];
extern const char CMD_SHOW_HELP[];
extern const char CMD_EXPORT_HELP[];
extern const char CMD_PROBE_HELP[];
extern const char CMD_BISECT_HELP[];
extern const char CMD_INSPECT_HELP[];
extern const char CMD_REPORT_HELP[];

#endif
