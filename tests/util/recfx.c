/*
 * recfx: record in front of the scripted upstream (recfx.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/xalloc.h"
#include "util/rec.h"
#include "util/recfx.h"
#include "util/upstream.h"

struct recfx *recfx_start(const char *const extra[], const char *upstream)
{
    struct recfx *f = xcalloc(1, sizeof(*f));
    f->up = upstream_start();
    f->dir = rec_tmpdir();
    if (!f->up || !f->dir)
        goto fail;
    snprintf(f->db, sizeof(f->db), "%s/r.db", f->dir);
    snprintf(f->spill, sizeof(f->spill), "%s/r.db.spill.jsonl", f->dir);
    if (rec_start_record(&f->rec, upstream ? upstream : upstream_url(f->up),
                         f->db, extra))
        goto fail;
    snprintf(f->url, sizeof(f->url), "http://127.0.0.1:%d", f->rec.port);
    return f;
fail:
    recfx_stop(f);
    return NULL;
}

void recfx_stop(struct recfx *f)
{
    if (!f)
        return;
    if (f->rec.pid > 0)
        proc_stop(&f->rec);
    if (f->up)
        upstream_stop(f->up);
    if (f->dir)
        rec_rmdir(f->dir);
    free(f);
}
