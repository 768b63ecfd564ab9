/*
 * cmd_inspect: `fidelity inspect URL [URL ...]`, what servers say about
 * themselves (src/bisect/inspect.c) as one normalised fingerprint each,
 * and with two or more URLs the fields that differ. See docs/BISECT.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bisect/inspect.h"
#include "cmd/cmd.h"
#include "cmd/cmds.h"
#include "core/xalloc.h"
#include "http/client.h"

const char CMD_INSPECT_HELP[] =
    "usage: fidelity inspect URL [URL ...] [options]\n"
    "\n"
    "Asks each server what it says about itself (sglang /get_server_info,\n"
    "vLLM /version and /v1/models, TGI /info, llama.cpp /props) and prints\n"
    "one normalised fingerprint: server, model, dtype, KV-cache dtype,\n"
    "attention and MoE backends, chunked prefill, context length, version,\n"
    "and every flag reported. With two or more URLs: only the fields that\n"
    "differ.\n"
    "\n"
    "options:\n"
    "  --json FILE      fingerprints (and differences) as JSON ('-' = stdout)\n"
    "  --timeout SEC    per request (default 10)\n"
    "\n"
    "exit status: 0 printed (also when the servers differ), 2 usage,\n"
    "3 a server did not answer or is not an LLM server, 130 interrupted.\n"
    "\n"
    "examples:\n"
    "  fidelity inspect http://127.0.0.1:30000\n"
    "  fidelity inspect http://gpu1:8000 http://gpu2:8000\n";

enum { OPT_JSON = 256, OPT_TIMEOUT };

static void print_value(const json_t *v)
{
    if (json_is_string(v))
        printf("%s", json_string_value(v));
    else if (json_is_null(v) || !v)
        printf("-");
    else {
        char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT |
                                    JSON_REAL_PRECISION(12));
        printf("%s", s ? s : "?");
        free(s);
    }
}

static void print_one(const json_t *fp)
{
    static const char *const f[] = {"server",
                                    "model",
                                    "dtype",
                                    "kv_cache_dtype",
                                    "attention_backend",
                                    "moe_backend",
                                    "chunked_prefill",
                                    "context_length",
                                    "version"};
    printf("%s\n", json_string_value(json_object_get(fp, "url")));
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        printf("  %-18s ", f[i]);
        print_value(json_object_get(fp, f[i]));
        printf("\n");
    }
    const char *k;
    json_t *v;
    printf("  flags:\n");
    json_object_foreach(json_object_get(fp, "flags"), k, v)
    {
        printf("    %s = ", k);
        print_value(v);
        printf("\n");
    }
}

static void print_diff(json_t *const *fps, const json_t *diff, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("[%zu] %s\n", i + 1,
               json_string_value(json_object_get(fps[i], "url")));
    if (!json_array_size(diff)) {
        printf("no difference in what the %zu servers report\n", n);
        return;
    }
    printf("%zu field%s:\n", json_array_size(diff),
           json_array_size(diff) == 1 ? " differs" : "s differ");
    size_t i;
    json_t *d;
    json_array_foreach(diff, i, d)
    {
        printf("  %s:", json_string_value(json_object_get(d, "field")));
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(d, "values"), j, v)
        {
            printf(" [%zu] ", j + 1);
            print_value(v);
        }
        printf("\n");
    }
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option lo[] = {
        {"json", required_argument, NULL, OPT_JSON},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *json = NULL;
    long timeout = 10;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == OPT_JSON)
            json = optarg;
        else if (c == OPT_TIMEOUT) {
            if (cli_parse_long(optarg, 1, 3600, &timeout))
                return cli_usage_error("inspect",
                                       "--timeout wants seconds (1-3600), "
                                       "not '%s'",
                                       optarg);
        } else if (c == 'h')
            return cli_help("inspect");
        else
            return cli_bad_option("inspect", c, argv);
    }
    size_t n = (size_t)(argc - optind);
    if (!n)
        return cli_usage_error("inspect", "give at least one URL");
    int rc = cli_check_output("inspect", "--json", json);
    for (int i = optind; i < argc && !rc; i++)
        rc = cli_check_base_url("inspect", "URL", argv[i]);
    if (rc)
        return rc;
    json_t **fps = xcalloc(n, sizeof(*fps));
    struct http_client *hc = http_client_new();
    struct diag d = {0};
    for (size_t i = 0; i < n && rc == EXIT_PASS; i++) {
        const char *url = argv[optind + (int)i];
        json_t *a;
        if (inspect_fetch(hc, url, timeout * 1000, &a, &d)) {
            rc = cli_error("inspect", EXIT_UNREACHABLE, "%s", d.msg);
            break;
        }
        fps[i] = inspect_normalise(url, a);
        json_decref(a);
        const char *kind = json_string_value(json_object_get(fps[i], "server"));
        if (kind && !strcmp(kind, "none")) {
            /* answered, but no endpoint gave JSON: say what it is */
            rc = cli_ready("inspect", url, url, NULL, timeout * 1000);
            if (!rc)
                rc = cli_error("inspect", EXIT_UNREACHABLE,
                               "'%s' answered, but none of /get_server_info, "
                               "/version, /v1/models, /info and /props gave "
                               "a JSON object: not an LLM server",
                               url);
            break;
        }
    }
    if (rc == EXIT_PASS) {
        json_t *out = json_object();
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append(arr, fps[i]);
        json_object_set_new(out, "schema", json_string("fidelity.inspect/1"));
        json_object_set_new(out, "fingerprints", arr);
        json_t *diff = n > 1 ? inspect_diff(fps, n) : NULL;
        if (diff)
            json_object_set(out, "differences", diff);
        bool to_stdout = json && !strcmp(json, "-");
        if (!to_stdout && n == 1)
            print_one(fps[0]);
        else if (!to_stdout)
            print_diff(fps, diff, n);
        if (json && cli_json_write(out, json, &d))
            rc = cli_error("inspect", EXIT_INTERNAL, "%s", d.msg);
        json_decref(diff);
        json_decref(out);
    }
    for (size_t i = 0; i < n; i++)
        json_decref(fps[i]);
    free(fps);
    http_client_free(hc);
    return rc;
}
