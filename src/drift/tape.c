/*
 * drift tape: the saved golden's file (tape.h). Recording keeps the
 * exchange lines in memory and writes them, compressed, at commit;
 * loading reads the whole file, checks it and indexes the answers by the
 * XXH64 of the request (method, path and body), each key's answers in the
 * order they were made.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>
#include <zlib.h>

#include "core/xalloc.h"
#include "drift/tape.h"
#include "version.h"

struct slot {
    uint64_t key;
    size_t first, next_use; /* exchange indices; next_use: cursor */
    bool used;
};

struct xe {
    uint64_t key;
    long status;
    char *ans;
    size_t len;
    size_t next; /* the next exchange with the same key, or SIZE_MAX */
};

struct drift_tape {
    bool replay;
    pthread_mutex_t lock;
    json_t *header;
    struct buf lines; /* recording: the exchange lines */
    size_t n, used;
    /* replay */
    struct xe *x;
    struct slot *map;
    size_t cap;
};

static uint64_t req_key(const char *method, const char *path, const char *body)
{
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0x601de9);
    XXH64_update(st, method, strlen(method) + 1);
    XXH64_update(st, path, strlen(path) + 1);
    if (body)
        XXH64_update(st, body, strlen(body));
    uint64_t k = XXH64_digest(st);
    XXH64_freeState(st);
    return k ? k : 1;
}

struct drift_tape *drift_tape_new_record(void)
{
    struct drift_tape *t = xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    buf_init(&t->lines, 0);
    return t;
}

void drift_tape_free(struct drift_tape *t)
{
    if (!t)
        return;
    for (size_t i = 0; t->x && i < t->n; i++)
        free(t->x[i].ans);
    free(t->x);
    free(t->map);
    buf_release(&t->lines);
    json_decref(t->header);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

bool drift_tape_is_replay(const struct drift_tape *t)
{
    return t && t->replay;
}

json_t *drift_tape_header(const struct drift_tape *t)
{
    return t ? t->header : NULL;
}

size_t drift_tape_count(const struct drift_tape *t)
{
    return t ? t->n : 0;
}

size_t drift_tape_used(const struct drift_tape *t)
{
    return t ? t->used : 0;
}

static void hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016llx", (unsigned long long)v);
}

static int unhex64(const char *s, uint64_t *v)
{
    char *end;
    if (!s || strlen(s) != 16)
        return -1;
    errno = 0;
    *v = strtoull(s, &end, 16);
    return errno || *end ? -1 : 0;
}

void drift_tape_put(struct drift_tape *t, const char *method, const char *path,
                    const char *body, long status, const char *answer,
                    size_t answer_len)
{
    char k[17];
    hex64(k, req_key(method, path, body));
    json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "k", k, "m", method, "p",
                          path, "s", (json_int_t)status);
    json_t *a = json_stringn(answer ? answer : "", answer ? answer_len : 0);
    if (a) {
        json_object_set_new(o, "a", a);
    } else {
        /* not UTF-8: the bytes in hex, as they came */
        char *h = xmalloc(2 * answer_len + 1);
        for (size_t i = 0; i < answer_len; i++)
            snprintf(h + 2 * i, 3, "%02x", (unsigned char)answer[i]);
        json_object_set_new(o, "ax", json_string(h));
        free(h);
    }
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    pthread_mutex_lock(&t->lock);
    buf_adds(&t->lines, line);
    buf_addch(&t->lines, '\n');
    t->n++;
    pthread_mutex_unlock(&t->lock);
    free(line);
}

static int gz_put(gzFile f, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        int w = gzwrite(f, c, chunk);
        if (w <= 0)
            return -EIO;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int drift_tape_commit(struct drift_tape *t, json_t *header, const char *path,
                      struct diag *d)
{
    json_decref(t->header);
    t->header = header;
    json_object_set_new(header, "format", json_string(DRIFT_TAPE_FORMAT));
    json_object_set_new(header, "version", json_integer(DRIFT_TAPE_VERSION));
    json_object_set_new(header, "fidelity", json_string(FIDELITY_VERSION));
    char *head = json_dumps(header, JSON_COMPACT | JSON_SORT_KEYS);
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, head, strlen(head));
    XXH64_update(st, "\n", 1);
    XXH64_update(st, t->lines.data ? t->lines.data : "", t->lines.len);
    char sum[17];
    hex64(sum, XXH64_digest(st));
    XXH64_freeState(st);
    json_t *tr = json_pack("{s:b, s:I, s:s}", "end", 1, "exchanges",
                           (json_int_t)t->n, "xxh64", sum);
    char *trailer = json_dumps(tr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(tr);
    int rc = 0;
    gzFile f = gzopen(tmp, "wb6");
    if (!f)
        rc = diag_set(d, errno ? errno : EIO, "cannot write '%s': %s", path,
                      strerror(errno ? errno : EIO));
    else if (gz_put(f, head, strlen(head)) || gz_put(f, "\n", 1) ||
             gz_put(f, t->lines.data ? t->lines.data : "", t->lines.len) ||
             gz_put(f, trailer, strlen(trailer)) || gz_put(f, "\n", 1)) {
        gzclose(f);
        rc = diag_set(d, EIO, "cannot write '%s': %s", path, strerror(EIO));
    } else if (gzclose(f) != Z_OK) {
        rc = diag_set(d, EIO, "cannot write '%s': %s", path, strerror(EIO));
    } else if (rename(tmp, path)) {
        rc = diag_set(d, errno, "cannot write '%s': %s", path, strerror(errno));
    }
    if (rc)
        unlink(tmp);
    free(tmp);
    free(head);
    free(trailer);
    return rc;
}

/* The whole decompressed file into b; -EBADMSG when the gzip stream is
 * damaged or ends early. */
static int read_all(const char *path, struct buf *b, struct diag *d)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return diag_set(d, errno ? errno : EIO, "cannot read '%s': %s", path,
                        strerror(errno ? errno : EIO));
    char chunk[1 << 16];
    int n, err = 0;
    while ((n = gzread(f, chunk, sizeof(chunk))) > 0)
        buf_add(b, chunk, (size_t)n);
    const char *why = n < 0 ? gzerror(f, &err) : NULL;
    gzclose(f);
    if (n < 0)
        return diag_set(d, EBADMSG,
                        "'%s' is damaged (%s): save the golden again", path,
                        why ? why : "gzip error");
    return 0;
}

static struct slot *slot_for(struct drift_tape *t, uint64_t key)
{
    size_t j = key & (t->cap - 1);
    while (t->map[j].used && t->map[j].key != key)
        j = (j + 1) & (t->cap - 1);
    return &t->map[j];
}

static int index_line(struct drift_tape *t, const char *path, size_t lineno,
                      json_t *o, struct diag *d)
{
    uint64_t key;
    json_t *a = json_object_get(o, "a"), *ax = json_object_get(o, "ax");
    json_t *s = json_object_get(o, "s");
    if (unhex64(json_string_value(json_object_get(o, "k")), &key) ||
        !json_is_integer(s) || (!json_is_string(a) && !json_is_string(ax)))
        return diag_set(d, EBADMSG,
                        "'%s' line %zu is not a saved exchange: save the "
                        "golden again",
                        path, lineno);
    struct xe *e = &t->x[t->n];
    e->key = key;
    e->status = (long)json_integer_value(s);
    e->next = SIZE_MAX;
    if (a) {
        e->len = json_string_length(a);
        e->ans = xmalloc(e->len + 1);
        memcpy(e->ans, json_string_value(a), e->len);
        e->ans[e->len] = '\0';
    } else {
        const char *h = json_string_value(ax);
        e->len = strlen(h) / 2;
        e->ans = xmalloc(e->len + 1);
        for (size_t i = 0; i < e->len; i++) {
            unsigned v;
            sscanf(h + 2 * i, "%2x", &v);
            e->ans[i] = (char)v;
        }
        e->ans[e->len] = '\0';
    }
    struct slot *sl = slot_for(t, key);
    if (!sl->used) {
        sl->used = true;
        sl->key = key;
        sl->first = sl->next_use = t->n;
    } else {
        size_t j = sl->first;
        while (t->x[j].next != SIZE_MAX)
            j = t->x[j].next;
        t->x[j].next = t->n;
    }
    t->n++;
    return 0;
}

struct drift_tape *drift_tape_load(const char *path, struct diag *d)
{
    struct buf b = BUF_INIT;
    struct drift_tape *t = NULL;
    json_t *o = NULL;
    json_error_t je;
    int rc = read_all(path, &b, d);
    if (rc)
        goto out;
    char *data = b.data ? b.data : (char *)"";
    char *nl = memchr(data, '\n', b.len);
    o = nl ? json_loadb(data, (size_t)(nl - data), 0, &je) : NULL;
    const char *fmt = json_string_value(json_object_get(o, "format"));
    if (!fmt || strcmp(fmt, DRIFT_TAPE_FORMAT)) {
        rc = diag_set(d, EBADMSG,
                      "'%s' is not a saved golden (no '%s' header): make "
                      "one with 'fidelity drift --golden URL --save-golden "
                      "FILE'",
                      path, DRIFT_TAPE_FORMAT);
        goto out;
    }
    json_t *ver = json_object_get(o, "version");
    if (!json_is_integer(ver) ||
        json_integer_value(ver) != DRIFT_TAPE_VERSION) {
        rc = diag_set(d, EPROTONOSUPPORT,
                      "'%s' is a saved golden of version %lld, written by "
                      "fidelity %s; this fidelity reads version %d: save the "
                      "golden again with this version",
                      path, (long long)json_integer_value(ver),
                      json_string_value(json_object_get(o, "fidelity"))
                          ?: "(unknown)",
                      DRIFT_TAPE_VERSION);
        goto out;
    }
    /* the trailer: the last line */
    size_t end = b.len;
    if (end && data[end - 1] == '\n')
        end--;
    size_t tstart = end;
    while (tstart > 0 && data[tstart - 1] != '\n')
        tstart--;
    json_t *tr = tstart > (size_t)(nl - data)
                     ? json_loadb(data + tstart, end - tstart, 0, &je)
                     : NULL;
    if (!json_is_true(json_object_get(tr, "end"))) {
        json_decref(tr);
        rc = diag_set(d, EBADMSG,
                      "'%s' ends before its trailer: the file is truncated; "
                      "save the golden again",
                      path);
        goto out;
    }
    char sum[17], want[17] = "";
    hex64(sum, XXH64(data, tstart, 0));
    const char *w = json_string_value(json_object_get(tr, "xxh64"));
    snprintf(want, sizeof(want), "%s", w ? w : "");
    size_t count = (size_t)json_integer_value(json_object_get(tr, "exchanges"));
    json_decref(tr);
    if (strcmp(want, sum)) {
        rc = diag_set(d, EBADMSG,
                      "'%s' fails its checksum (xxh64 %s, the trailer says "
                      "%s): the file was changed or damaged; save the golden "
                      "again",
                      path, sum, *want ? want : "nothing");
        goto out;
    }
    t = xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    buf_init(&t->lines, 0);
    t->replay = true;
    t->header = o;
    o = NULL;
    t->x = xcalloc(count + 1, sizeof(*t->x));
    for (t->cap = 16; t->cap < 2 * (count + 1);)
        t->cap *= 2;
    t->map = xcalloc(t->cap, sizeof(*t->map));
    size_t lineno = 1;
    for (char *p = nl + 1; p < data + tstart && !rc; lineno++) {
        char *e = memchr(p, '\n', (size_t)(data + tstart - p));
        size_t len = e ? (size_t)(e - p) : (size_t)(data + tstart - p);
        json_t *line = json_loadb(p, len, 0, &je);
        if (t->n >= count)
            rc = diag_set(d, EBADMSG,
                          "'%s' holds more exchanges than its trailer "
                          "says (%zu): save the golden again",
                          path, count);
        else
            rc = index_line(t, path, lineno + 1, line, d);
        json_decref(line);
        p += len + 1;
    }
    if (!rc && t->n != count)
        rc = diag_set(d, EBADMSG,
                      "'%s' holds %zu exchanges, its trailer says %zu: save "
                      "the golden again",
                      path, t->n, count);
out:
    json_decref(o);
    buf_release(&b);
    if (rc) {
        drift_tape_free(t);
        return NULL;
    }
    return t;
}

int drift_tape_get(struct drift_tape *t, const char *method, const char *path,
                   const char *body, long *status, struct buf *ans,
                   struct diag *d)
{
    uint64_t key = req_key(method, path, body);
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    struct slot *sl = slot_for(t, key);
    if (!sl->used || sl->next_use == SIZE_MAX) {
        rc = diag_set(d, ENOENT,
                      "the saved golden has %s answer to %s %s (request "
                      "%016llx): this run asks what the saving run did not "
                      "(another corpus, option or fidelity version)",
                      sl->used ? "no more" : "no", method, path,
                      (unsigned long long)key);
    } else {
        const struct xe *e = &t->x[sl->next_use];
        *status = e->status;
        buf_add(ans, e->ans, e->len);
        sl->next_use = e->next;
        t->used++;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}
