/*
 * sim: the simulator's request handling, independent of the network. The
 * server (server.c) and the fuzz harness both call sim_handle(): one parsed
 * HTTP request in, one response (a JSON body or a list of SSE events) out.
 * Everything here is deterministic given the config, the request and the
 * request counter.
 */
#ifndef SIM_SIM_H
#define SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "sim/cache.h"
#include "sim/config.h"

struct sim {
    struct sim_config cfg;     /* current faults (POST /sim/config) */
    struct sim_config initial; /* as started ({"reset": true}) */
    uint64_t counter;          /* model requests served */
    uint64_t stats[16];        /* by endpoint, see sim_endpoint_names */
    uint64_t injected;         /* errors injected by rate faults */
    struct sim_cache *cache;   /* prefix cache (cache.c); NULL until used */
    struct sim_cache_use use;  /* what the cache gave the current request */
    bool use_skip;             /* the current request bypasses the cache */
    uint64_t cached_total;     /* tokens served from the cache */
    uint64_t flushes;          /* flush endpoint calls that emptied it */
    uint64_t longest;          /* the longest model request: prompt + completion
                                  tokens asked for */
    uint64_t over_context;     /* model requests past the context limit */
    struct buf last_chat;      /* body of the last chat request, for
                                  GET /sim/last-request */
};

struct sim_req {
    const char *method;
    const char *path; /* without the query string */
    const char *body;
    size_t len;
    unsigned batch;   /* requests served together (batch-variance); 1 alone */
    unsigned running; /* other model requests in flight (sglang's
                         /flush_cache refuses while there are any) */
};

struct sim_resp {
    int status;
    const char *reason;
    struct buf body; /* JSON body when !stream */
    bool stream;     /* text/event-stream: send events */
    char **events;   /* each a full "data: ...\n\n" event */
    size_t nevents;
    long latency_ms;   /* delay before the first byte */
    long interval_ms;  /* delay between events */
    long cut_after;    /* close after this many body bytes; 0: never */
    const char *ctype; /* Content-Type of a body; NULL: application/json;
                          "": none (as FastAPI's bare Response) */
};

void sim_init(struct sim *s, const struct sim_config *c);
/* Frees what the sim holds (the last request's body, its prefix
 * cache). */
void sim_release(struct sim *s);
void sim_resp_init(struct sim_resp *r);
void sim_resp_release(struct sim_resp *r);
/* Fills out for rq. Never fails: bad requests get 4xx bodies. */
void sim_handle(struct sim *s, const struct sim_req *rq, struct sim_resp *out);
/* Whether the path is a model endpoint (counted, rate faults, batching). */
bool sim_is_model_path(const char *path);

/*
 * Runs the HTTP server on host:port until SIGINT or SIGTERM. on_ready gets
 * the bound port once listening. Returns 0, or -errno with d set when the
 * address cannot be bound.
 */
int sim_serve(struct sim *s, const char *host, int port,
              void (*on_ready)(int port, void *ud), void *ud, struct diag *d);

#endif
