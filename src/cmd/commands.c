/*
 * commands: the table of subcommands, as git.c's commands[]. Each row names
 * its cmd_<name>.c entry point, a summary line and the full help text.
 */
#include "cmd/cmd.h"
#include "cmd/cmds.h"

const struct cmd commands[] = {
    {"record", cmd_record,
     "record what a harness sends and a server answers (a proxy)",
     CMD_RECORD_HELP},
    {"audit", cmd_audit,
     "find history rewrites, truncation and more in recorded traffic",
     CMD_AUDIT_HELP},
    {"sessions", cmd_sessions, "list recorded sessions", CMD_SESSIONS_HELP},
    {"show", cmd_show, "show one recorded session turn by turn", CMD_SHOW_HELP},
    {"export", cmd_export,
     "write recorded exchanges as HAR 1.2, JSONL or OpenAI-style messages",
     CMD_EXPORT_HELP},
    {"probe", cmd_probe, "multi-turn context-fidelity tests of an endpoint",
     CMD_PROBE_HELP},
    {"drift", cmd_drift,
     "teacher-forced logprob comparison of a candidate with a golden server",
     CMD_DRIFT_HELP},
    {"bisect", cmd_bisect,
     "launch server configurations, measure each patch, rank the culprits",
     CMD_BISECT_HELP},
    {"inspect", cmd_inspect,
     "what servers say about themselves, and how they differ",
     CMD_INSPECT_HELP},
    {"report", cmd_report,
     "write one self-contained HTML page of the stored runs and sessions",
     CMD_REPORT_HELP},
    {"sim", cmd_sim, "run a built-in OpenAI-compatible server with faults",
     CMD_SIM_HELP},
    {"help", cmd_help, "show help for fidelity or one command", CMD_HELP_HELP},
    {NULL, NULL, NULL, NULL},
};
