/*
 * fastparse: the allocation-free reader of vllm and sglang prompt answers
 * (fastparse.c), which drift_parse_prompt_text in dialect.c tries first.
 */
#ifndef DRIFT_FASTPARSE_H
#define DRIFT_FASTPARSE_H

#include <stddef.h>

#include "drift/dialect.h"
#include "drift/lp.h"

/*
 * The fast path of drift_parse_prompt_text() for the vllm and sglang
 * dialects: validates the whole text (len bytes followed by a NUL) as
 * JSON (RFC 8259 grammar, UTF-8, jansson's limits) without building a
 * tree, then reads the one array it needs. Returns 0 with lp filled exactly as
 * the jansson parser would, or -EAGAIN for anything it does not handle (the
 * caller falls back).
 */
int drift_fast_prompt(enum drift_dialect d, const char *text, size_t len,
                      const struct drift_req *r, struct drift_lp *lp);

#endif
