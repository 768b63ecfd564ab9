/*
 * tmpdb: a store with record's tables in a fresh temporary directory, for
 * the store tests; tmpdb_close closes it and removes the directory.
 */
#ifndef TESTS_UTIL_TMPDB_H
#define TESTS_UTIL_TMPDB_H

#include "store/db.h"

struct tmpdb {
    char dir[64];
    char path[128];
    struct db *db;
};

/* Opens t->path in a new directory /tmp/fidelity-NAME-XXXXXX (NAME at most
 * 24 bytes) and creates the exchange tables; fails the test otherwise. */
void tmpdb_open(struct tmpdb *t, const char *name);
void tmpdb_close(struct tmpdb *t);

#endif
