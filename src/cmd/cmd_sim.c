/*
 * cmd_sim: `fidelity sim`, the built-in OpenAI-compatible server with
 * injectable faults (docs/SIM.md). Parses the listen address, presets and
 * fault options through the sim config table, then serves until a signal.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "sim/sim.h"

const char CMD_SIM_HELP[] =
    "usage: fidelity sim [--listen HOST:PORT] [--allow-remote] [--model NAME]\n"
    "                    [--preset P,...] [fault options]\n"
    "\n"
    "A deterministic OpenAI-compatible server (chat, completions, sglang and\n"
    "TGI /generate, /tokenize) that answers questions about facts stated in\n"
    "the conversation it can see, and fails on purpose in the ways real\n"
    "deployments fail. The default target for trying every command.\n"
    "\n"
    "  --listen HOST:PORT     where to listen (default 127.0.0.1:8000;\n"
    "                         port 0 picks a free one). Prints\n"
    "                         'fidelity sim: listening on http://HOST:PORT'.\n"
    "                         An address that is not loopback needs\n"
    "                         --allow-remote\n"
    "  --allow-remote         listen on a non-loopback address (0.0.0.0,\n"
    "                         [::], a LAN address); a warning says so\n"
    "  --model NAME           model id to report (default fidelity-sim)\n"
    "  --preset LIST          presets, comma-separated (below)\n"
    "\n"
    "Presets play the four patches of the README's case, each as the fault\n"
    "it causes (later options override a preset's values):\n"
    "  mhc-bf16        prefill noise, grows with length: mHC mixing in bf16 "
    "not fp32\n"
    "  splitk-decode   decode-only noise: a split-K decode attention kernel\n"
    "  sparse-indexer  sees only the last 2048 tokens: a sparse-attention "
    "indexer\n"
    "  routed-scaling  every logit times 1.02: a changed MoE routed-scaling "
    "factor\n"
    "\n"
    "Faults (also settable at run time with POST /sim/config):\n"
    "  --max-model-len N      --context-limit N\n"
    "  --byte-tokens          one token per byte (a byte-level tokenizer)\n"
    "  --overflow error|oldest|middle|newest\n"
    "  --keep-last-turns N    --ignore-system\n"
    "  --reasoning-history keep|drop|keep-with-tools\n"
    "  --forget-after N       --prefill-noise S   --decode-noise S\n"
    "  --noise-growth P       --noise-from N      --noise-saturate N\n"
    "  --logit-scale F        --nondeterminism S\n"
    "  --batch-variance S     --batch-window-ms N --collapse-after N\n"
    "  --ignore-temperature   --no-prompt-logprobs\n"
    "  --latency-ms N         --token-interval-ms N\n"
    "  --rate-429 R  --rate-500 R  --rate-503 R   --cut-stream-after N\n"
    "  --reasoning            --seed N            --max-body BYTES\n"
    "  --hide-faults          /get_server_info and /sim/config show no fault\n"
    "                         (a server whose settings its info hides)\n"
    "  --feedback-base N      --feedback-growth G --feedback-budget N\n"
    "  --feedback-window N    --feedback-max N    --feedback-jitter J\n"
    "  --lose-summary\n"
    "  --noise-recall-limit S --pair-a  --pair-b  --pair-noise S\n"
    "Prefix cache (cached_tokens in usage.prompt_tokens_details and\n"
    "sglang's meta_info):\n"
    "  --cache-tokens N       capacity (default 65536; 0: no cache)\n"
    "  --cache-block N        tokens per block (default 16)\n"
    "  --flush-endpoints both|sglang|vllm|none\n"
    "                         POST /flush_cache, POST /reset_prefix_cache\n"
    "  --no-cache-report      report no cache figures\n"
    "  --warm-noise S         noise on the path served from the cache\n"
    "  --recompute-noise S    noise when an evicted prefix is recomputed\n"
    "  --no-cache-output      generated tokens are never cached\n"
    "  --cache-collapse-after N  from turn N+1, 40% of the reuse\n"
    "See docs/SIM.md for what each one does and which real failure it\n"
    "stands for.\n"
    "\n"
    "examples:\n"
    "  fidelity sim\n"
    "  fidelity sim --listen 127.0.0.1:0 --context-limit 8192 "
    "--overflow middle\n"
    "  fidelity sim --preset mhc-bf16,splitk-decode\n"
    "  curl -s localhost:8000/sim/config -d '{\"forget_after\": 4096}'\n";

static void ready(int port, void *ud)
{
    char *h = cli_url_host(ud); /* [::1] for IPv6 */
    printf("fidelity sim: listening on http://%s:%d\n", h, port);
    fflush(stdout);
    free(h);
}

static int parse(int argc, char **argv, struct sim_config *c, char **host,
                 int *port, const char **listen, bool *allow_remote)
{
    struct diag d = {""};
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *val = NULL, name[64];
        if (strncmp(a, "--", 2) || strlen(a) < 3)
            return cli_usage_error("sim", "unexpected argument '%s'", a);
        char *eq = strchr(a, '=');
        snprintf(name, sizeof(name), "%.*s",
                 (int)(eq ? eq - a - 2 : (long)strlen(a) - 2), a + 2);
        if (!strcmp(name, "allow-remote")) {
            if (eq)
                return cli_usage_error("sim", "--allow-remote takes no value");
            *allow_remote = true;
            continue;
        }
        bool flag = sim_config_is_flag(name);
        if (eq)
            val = eq + 1;
        else if (!flag && i + 1 < argc)
            val = argv[++i];
        if (!flag && strcmp(name, "listen") && strcmp(name, "preset") &&
            !sim_config_has(name))
            return cli_unknown_option("sim", a);
        if (!flag && !val)
            return cli_usage_error("sim", "option '--%s' needs a value", name);
        int r = 0;
        if (!strcmp(name, "listen")) {
            *listen = val;
            free(*host);
            r = cli_parse_listen(val, host, port, &d);
        } else if (!strcmp(name, "preset")) {
            r = sim_config_preset(c, val, &d);
        } else {
            r = sim_config_set(c, name, val, &d);
            if (r == -ENOENT)
                return cli_usage_error("sim", "unknown option '--%s'", name);
        }
        if (r)
            return cli_usage_error("sim", "%s", d.msg);
    }
    return 0;
}

int cmd_sim(int argc, char **argv)
{
    struct sim_config c;
    struct sim *s;
    struct diag d = {""};
    char *host = strdup("127.0.0.1");
    int port = 8000, r;
    const char *listen = "127.0.0.1:8000";
    bool allow_remote = false, remote;
    sim_config_defaults(&c);
    if ((r = parse(argc, argv, &c, &host, &port, &listen, &allow_remote)) ||
        (r = cli_check_listen("sim", listen, host, allow_remote, &remote))) {
        free(host);
        return r;
    }
    if (remote)
        fprintf(stderr,
                "fidelity sim: warning: --listen '%s' is not a loopback "
                "address; anyone who can reach it can use the simulator\n",
                listen);
    s = calloc(1, sizeof(*s));
    sim_init(s, &c);
    r = sim_serve(s, host, port, ready, host, &d);
    sim_release(s);
    free(s);
    free(host);
    if (r)
        return cli_error("sim", EXIT_INTERNAL, "%s", d.msg);
    return EXIT_PASS;
}
