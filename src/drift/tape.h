/*
 * drift tape: a saved golden. Every HTTP exchange drift has with the golden
 * server (method, path, request body; status, answer body) written once by
 * `drift --save-golden FILE` and answered from the file by `drift
 * --golden-file FILE`, so a comparison against the file parses the very
 * bytes a live golden sent and gives the same figures.
 *
 * The file (docs/DRIFT.md, "Saved goldens") is gzip-compressed: a header
 * line (format, version, fidelity's version, the golden's masked URL and
 * model, its fingerprint, the tokenizer's identity and the options that
 * shape the requests); the exchange section, per exchange in the order
 * they were made a JSON line (request key, method, path, status, n) and
 * the answer's bytes with its numbers taken out (n bytes, then a newline);
 * the numbers section (each number's text, ended by ','); the integers
 * section (plain integers as LEB128 varints); a newline; and a trailer
 * with the exchange count, both sections' lengths and the XXH64 of every
 * uncompressed byte before it. Taking the numbers out loses nothing (each
 * comes back as the very bytes the server sent) and lets the compressor
 * see the answers' repeated structure apart from their digits. Version 1
 * files (each answer a JSON string on its exchange's line) are read too.
 * A file that ends early, was edited or has an unknown version is refused
 * before any request is sent.
 *
 * Recording and replay are safe from several threads (one lock). A request
 * asked several times (the control arm's second pass, the determinism
 * check) is answered with its saved answers in the order they were made.
 */
#ifndef DRIFT_TAPE_H
#define DRIFT_TAPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/diag.h"

#define DRIFT_TAPE_FORMAT "fidelity.golden"
#define DRIFT_TAPE_VERSION 2

struct drift_tape;

/* A tape to record into path. Nothing is written until drift_tape_commit:
 * the exchanges are kept in memory, compressed. */
struct drift_tape *drift_tape_new_record(void);

/* Reads and checks path whole (gzip, version, checksum, every line). On
 * error NULL, with d naming the file and what is wrong: -ENOENT/-EACCES
 * (cannot open), -EBADMSG (not a saved golden, damaged, checksum),
 * -EPROTONOSUPPORT (another version). */
struct drift_tape *drift_tape_load(const char *path, struct diag *d);

void drift_tape_free(struct drift_tape *t);

bool drift_tape_is_replay(const struct drift_tape *t);

/* The header: the object given to drift_tape_commit, or the file's.
 * Borrowed. */
json_t *drift_tape_header(const struct drift_tape *t);

/* Records one exchange (recording tapes only). */
void drift_tape_put(struct drift_tape *t, const char *method, const char *path,
                    const char *body, long status, const char *answer,
                    size_t answer_len);

/* The next saved answer to this request into *status and ans (appended).
 * -ENOENT when the file holds no (more) answer to it, with d saying so. */
int drift_tape_get(struct drift_tape *t, const char *method, const char *path,
                   const char *body, long *status, struct buf *ans,
                   struct diag *d);

/* Writes header (taken), the exchanges and the trailer to path through a
 * temporary file beside it. -errno with d naming path on error. */
int drift_tape_commit(struct drift_tape *t, json_t *header, const char *path,
                      struct diag *d);

/* Exchanges recorded or loaded; answers handed out by drift_tape_get. */
size_t drift_tape_count(const struct drift_tape *t);
size_t drift_tape_used(const struct drift_tape *t);

#endif
