/*
 * db_pg: the PostgreSQL backend of the store interface (not built yet).
 */
#include <errno.h>
#include <stdlib.h>

#include "core/url.h"
#include "store/db_int.h"

int db_pg_open(const char *url, struct db **db, struct diag *d)
{
    *db = NULL;
    char *shown = url_mask(url);
    diag_set(d, ENOTSUP, "cannot open '%s': PostgreSQL stores are not built",
             shown);
    free(shown);
    return -EIO;
}
