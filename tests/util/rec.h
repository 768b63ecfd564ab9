/*
 * rec: starting `fidelity record` (and sim) for end-to-end tests. Its first
 * line, "fidelity record: listening on http://H:P -> UPSTREAM", holds two
 * URLs, so the port is read from the first one (proc_start reads the last
 * colon of the line). Also small helpers the record tests share.
 */
#ifndef TESTS_UTIL_REC_H
#define TESTS_UTIL_REC_H

#include <stddef.h>

#include "core/buf.h"
#include "util/proc.h"

/* Starts `fidelity ARGV...`; stderr goes to err_path (NULL: inherited).
 * Returns 0 and fills p (proc_stop stops it), or -1. */
int rec_start(struct proc *p, const char *const argv[], const char *err_path);
/* Starts record in front of upstream with --db db (plus extra args,
 * NULL-terminated, may be NULL). */
int rec_start_record(struct proc *p, const char *upstream, const char *db,
                     const char *const extra[]);
/* A fresh temporary directory; rec_rmdir removes it and its files. */
char *rec_tmpdir(void);
void rec_rmdir(char *dir);
/* Reads a whole file into b (appending). -1 when it cannot be opened. */
int rec_read_file(const char *path, struct buf *b);
/* True when needle (n bytes) occurs in the n_hay bytes of hay. */
int rec_contains(const char *hay, size_t n_hay, const char *needle);

/* A raw HTTP exchange with libcurl (no decoding, no added headers but
 * Host). body may be NULL (GET). abort_after: when > 0, the transfer is
 * abandoned (connection closed) after that many body bytes. Returns the
 * CURLcode; status, resp body and header block are filled. */
struct rec_resp {
    long status;
    struct buf body;
    struct buf headers;
};
void rec_resp_init(struct rec_resp *r);
void rec_resp_release(struct rec_resp *r);
int rec_fetch(const char *url, const char *body, size_t body_len,
              const char *const headers[], size_t abort_after,
              struct rec_resp *r);

/* Opens the store read-only and returns every exchange as xchg_to_json
 * objects in id order (new array), or NULL. */
#include <jansson.h>
json_t *rec_load(const char *db);

#endif
