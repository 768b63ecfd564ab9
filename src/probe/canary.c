/*
 * canary: the part of an endpoint's fingerprint that its info endpoints
 * cannot hide. A server restarted on the same URL with other settings (a
 * context limit, a sliding window, another reasoning policy) answers
 * /v1/models and /get_server_info the same, and its stored results would
 * be reused. The canary is a fixed needle case near the run's longest
 * length, sent at temperature 0: its usage.prompt_tokens and its answer
 * change when such a setting changes. It is sent twice; a server that
 * answers it two ways is nondeterministic and is fingerprinted by the
 * prompt token count alone.
 */
#include <stdio.h>
#include <string.h>

#include "core/hash.h"
#include "core/xalloc.h"
#include "probe/probe_int.h"

#define CANARY_SEED 0xca4a27ULL
#define CANARY_MAX_TOKENS 32

static void rehash(struct probe_endpoint *e)
{
    char *s = xasprintf("%s|canary|%u|%ld|%ld|%s", e->info_fp, e->canary_length,
                        e->canary_status, e->canary_prompt_tokens,
                        e->canary_deterministic ? e->canary_answer
                                                : "(nondeterministic)");
    hash_hex(hash64(s, strlen(s), 0xca4aULL), e->fp);
    free(s);
}

int probe_canary_run(struct probe_endpoint *e, struct http_client *c,
                     unsigned target, struct diag *d)
{
    struct probe_spec s = {.kind = PROBE_NEEDLE,
                           .length = target,
                           .target = target,
                           .depth = 50,
                           .temperature = 0,
                           .seed = CANARY_SEED};
    struct probe_case pc;
    struct probe_reply rep[2];
    unsigned tok;
    memset(&pc, 0, sizeof(pc));
    int r = probe_size_case(e, c, &s, &pc, &tok, NULL, d);
    if (r)
        goto out;
    probe_case_drop_cache(&pc);
    for (int i = 0; i < 2; i++)
        probe_chat(e, c, &pc, CANARY_MAX_TOKENS, &rep[i], NULL);
    e->canary_length = target;
    e->canary_status = rep[0].status;
    e->canary_prompt_tokens = rep[0].prompt_tokens;
    snprintf(e->canary_answer, sizeof(e->canary_answer), "%s",
             rep[0].content ? rep[0].content : "");
    e->canary_deterministic = rep[0].status == rep[1].status &&
                              rep[0].prompt_tokens == rep[1].prompt_tokens &&
                              !strcmp(rep[0].content ? rep[0].content : "",
                                      rep[1].content ? rep[1].content : "");
    e->canary_done = true;
    rehash(e);
    for (int i = 0; i < 2; i++)
        probe_reply_release(&rep[i]);
out:
    probe_case_release(&pc);
    return r;
}
