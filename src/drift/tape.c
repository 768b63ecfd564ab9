/*
 * drift tape: the saved golden's file (tape.h). Recording splits each
 * answer as it comes into its text with the numbers taken out (the
 * exchange section) and two number sections (other numbers as text;
 * plain integers as varints), kept in memory and written, compressed, at
 * commit; loading reads the whole file, checks it, puts every answer back
 * together byte for byte and indexes the answers by the XXH64 of the
 * request (method, path and body), each key's answers in the order they
 * were made. Version 1 files (answers as JSON strings) are read too.
 */
#include <ctype.h>
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

/* In an answer's text in the exchange section: a number from the numbers
 * section, a plain integer from the integers section, and the escape of
 * an answer's own byte 1, 2 or 3. */
#define TAPE_NUM '\001'
#define TAPE_INT '\002'
#define TAPE_ESC '\003'

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
    struct buf lines; /* recording: the exchange section */
    struct buf nums;  /* recording: numbers as text, each ended by ',' */
    struct buf ints;  /* recording: plain integers, LEB128 varints */
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
    buf_init(&t->nums, 0);
    buf_init(&t->ints, 0);
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
    buf_release(&t->nums);
    buf_release(&t->ints);
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

/* The length of the number at a[i..n) ('-'? digits ('.' digits)?
 * ([eE] [-+]? digits)?), 0 when none starts there. */
static size_t number_at(const unsigned char *a, size_t i, size_t n)
{
    size_t j = i;
    if (j < n && a[j] == '-')
        j++;
    size_t d = j;
    while (j < n && isdigit(a[j]))
        j++;
    if (j == d)
        return 0;
    if (j + 1 < n && a[j] == '.' && isdigit(a[j + 1])) {
        j++;
        while (j < n && isdigit(a[j]))
            j++;
    }
    if (j < n && (a[j] == 'e' || a[j] == 'E')) {
        size_t k = j + 1;
        if (k < n && (a[k] == '-' || a[k] == '+'))
            k++;
        if (k < n && isdigit(a[k])) {
            while (k < n && isdigit(a[k]))
                k++;
            j = k;
        }
    }
    return j - i;
}

/* A plain integer: digits only, no leading zero, below 10^18. */
static bool plain_int(const unsigned char *a, size_t len, uint64_t *v)
{
    if (len > 18 || (a[0] == '0' && len > 1))
        return false;
    *v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit(a[i]))
            return false;
        *v = *v * 10 + (uint64_t)(a[i] - '0');
    }
    return true;
}

static void put_varint(struct buf *b, uint64_t v)
{
    do {
        unsigned char c = v & 0x7f;
        v >>= 7;
        buf_addch(b, (char)(v ? c | 0x80 : c));
    } while (v);
}

/* The answer's text into sk with every number that does not continue a
 * word taken out: a plain integer as TAPE_INT (its varint into ints),
 * any other as TAPE_NUM (its text and ',' into nums); a byte
 * TAPE_NUM, TAPE_INT or TAPE_ESC of the answer as TAPE_ESC and itself. */
static void split_answer(const unsigned char *a, size_t n, struct buf *sk,
                         struct buf *nums, struct buf *ints)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = a[i];
        bool word = i && (isalnum(a[i - 1]) || a[i - 1] == '.');
        size_t len = word ? 0 : number_at(a, i, n);
        uint64_t v;
        if (len && plain_int(a + i, len, &v)) {
            buf_addch(sk, TAPE_INT);
            put_varint(ints, v);
        } else if (len) {
            buf_addch(sk, TAPE_NUM);
            buf_add(nums, a + i, len);
            buf_addch(nums, ',');
        } else {
            if (c == TAPE_NUM || c == TAPE_INT || c == TAPE_ESC)
                buf_addch(sk, TAPE_ESC);
            buf_addch(sk, (char)c);
            len = 1;
        }
        i += len;
    }
}

void drift_tape_put(struct drift_tape *t, const char *method, const char *path,
                    const char *body, long status, const char *answer,
                    size_t answer_len)
{
    char k[17];
    hex64(k, req_key(method, path, body));
    struct buf sk = BUF_INIT;
    pthread_mutex_lock(&t->lock);
    split_answer((const unsigned char *)(answer ? answer : ""),
                 answer ? answer_len : 0, &sk, &t->nums, &t->ints);
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:I, s:I}", "k", k, "m", method, "p", path,
                  "s", (json_int_t)status, "n", (json_int_t)sk.len);
    char *line = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    buf_adds(&t->lines, line);
    buf_addch(&t->lines, '\n');
    buf_add(&t->lines, sk.data ? sk.data : "", sk.len);
    buf_addch(&t->lines, '\n');
    t->n++;
    pthread_mutex_unlock(&t->lock);
    free(line);
    buf_release(&sk);
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
    XXH64_update(st, t->nums.data ? t->nums.data : "", t->nums.len);
    XXH64_update(st, t->ints.data ? t->ints.data : "", t->ints.len);
    XXH64_update(st, "\n", 1);
    char sum[17];
    hex64(sum, XXH64_digest(st));
    XXH64_freeState(st);
    json_t *tr = json_pack("{s:b, s:I, s:I, s:I, s:s}", "end", 1, "exchanges",
                           (json_int_t)t->n, "numbers", (json_int_t)t->nums.len,
                           "integers", (json_int_t)t->ints.len, "xxh64", sum);
    char *trailer = json_dumps(tr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(tr);
    int rc = 0;
    gzFile f = gzopen(tmp, "wb6");
    if (!f)
        rc = diag_set(d, errno ? errno : EIO, "cannot write '%s': %s", path,
                      strerror(errno ? errno : EIO));
    else if (gz_put(f, head, strlen(head)) || gz_put(f, "\n", 1) ||
             gz_put(f, t->lines.data ? t->lines.data : "", t->lines.len) ||
             gz_put(f, t->nums.data ? t->nums.data : "", t->nums.len) ||
             gz_put(f, t->ints.data ? t->ints.data : "", t->ints.len) ||
             gz_put(f, "\n", 1) || gz_put(f, trailer, strlen(trailer)) ||
             gz_put(f, "\n", 1)) {
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
    /* gzerror's text lives in f: copied before gzclose frees it */
    char why[128] = "gzip error";
    if (n < 0) {
        const char *m = gzerror(f, &err);
        size_t pl = strlen(path);
        /* zlib's text starts with the path, which the message names */
        if (m && !strncmp(m, path, pl) && !strncmp(m + pl, ": ", 2))
            m += pl + 2;
        if (m && *m)
            snprintf(why, sizeof(why), "%s", m);
    }
    gzclose(f);
    if (n < 0)
        return diag_set(d, EBADMSG,
                        "'%s' is damaged (%s): save the golden again", path,
                        why);
    return 0;
}

static struct slot *slot_for(struct drift_tape *t, uint64_t key)
{
    size_t j = key & (t->cap - 1);
    while (t->map[j].used && t->map[j].key != key)
        j = (j + 1) & (t->cap - 1);
    return &t->map[j];
}

/* Appends the answer ans (taken, len bytes, NUL after them) to key's. */
static void add_exchange(struct drift_tape *t, uint64_t key, long status,
                         char *ans, size_t len)
{
    struct xe *e = &t->x[t->n];
    e->key = key;
    e->status = status;
    e->next = SIZE_MAX;
    e->ans = ans;
    e->len = len;
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
}

/* Version 1: one JSON line per exchange, the answer a JSON string. */
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
    size_t len;
    char *ans;
    if (a) {
        len = json_string_length(a);
        ans = xmalloc(len + 1);
        memcpy(ans, json_string_value(a), len);
        ans[len] = '\0';
    } else {
        const char *h = json_string_value(ax);
        len = strlen(h) / 2;
        ans = xmalloc(len + 1);
        for (size_t i = 0; i < len; i++) {
            unsigned v;
            sscanf(h + 2 * i, "%2x", &v);
            ans[i] = (char)v;
        }
        ans[len] = '\0';
    }
    add_exchange(t, key, (long)json_integer_value(s), ans, len);
    return 0;
}

static int load_v1(struct drift_tape *t, const char *path, char *p,
                   const char *end, size_t count, struct diag *d)
{
    json_error_t je;
    int rc = 0;
    for (size_t lineno = 2; p < end && !rc; lineno++) {
        char *e = memchr(p, '\n', (size_t)(end - p));
        size_t len = e ? (size_t)(e - p) : (size_t)(end - p);
        json_t *line = json_loadb(p, len, 0, &je);
        if (t->n >= count)
            rc = diag_set(d, EBADMSG,
                          "'%s' holds more exchanges than its trailer "
                          "says (%zu): save the golden again",
                          path, count);
        else
            rc = index_line(t, path, lineno, line, d);
        json_decref(line);
        p += len + 1;
    }
    return rc;
}

/* One answer of version 2 from its text sk (n bytes), taking its numbers
 * from *num (up to nend) and *ints (up to iend); -1 when they run out. */
static int rebuild(const unsigned char *sk, size_t n, const char **num,
                   const char *nend, const unsigned char **ints,
                   const unsigned char *iend, struct buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (sk[i] == TAPE_NUM) {
            const char *c = memchr(*num, ',', (size_t)(nend - *num));
            if (!c)
                return -1;
            buf_add(out, *num, (size_t)(c - *num));
            *num = c + 1;
        } else if (sk[i] == TAPE_INT) {
            uint64_t v = 0;
            unsigned sh = 0;
            for (;; sh += 7) {
                if (*ints >= iend || sh > 63)
                    return -1;
                unsigned char c = *(*ints)++;
                v |= (uint64_t)(c & 0x7f) << sh;
                if (!(c & 0x80))
                    break;
            }
            buf_printf(out, "%llu", (unsigned long long)v);
        } else if (sk[i] == TAPE_ESC) {
            if (++i == n)
                return -1;
            buf_addch(out, (char)sk[i]);
        } else {
            buf_addch(out, (char)sk[i]);
        }
    }
    return 0;
}

/* Version 2: the exchange section (a JSON line per exchange, with n, then
 * its answer's text, n bytes, and a newline), the numbers section
 * (nnum bytes), the integers section (nint bytes) and a newline, up to
 * end (the trailer). */
static int load_v2(struct drift_tape *t, const char *path, const char *p,
                   const char *end, size_t nnum, size_t nint, size_t count,
                   struct diag *d)
{
    if (end <= p || end[-1] != '\n' || nnum + nint > (size_t)(end - 1 - p))
        return diag_set(d, EBADMSG,
                        "'%s' has number sections longer than the file: "
                        "save the golden again",
                        path);
    const unsigned char *ints = (const unsigned char *)end - 1 - nint;
    const unsigned char *iend = (const unsigned char *)end - 1;
    const char *num = (const char *)ints - nnum, *nend = (const char *)ints;
    const char *xend = num;
    struct buf a = BUF_INIT;
    json_error_t je;
    int rc = 0;
    for (size_t i = 1; p < xend && !rc; i++) {
        const char *nl = memchr(p, '\n', (size_t)(xend - p));
        json_t *o = nl ? json_loadb(p, (size_t)(nl - p), 0, &je) : NULL;
        uint64_t key;
        json_t *s = json_object_get(o, "s"), *n = json_object_get(o, "n");
        size_t len = (size_t)json_integer_value(n);
        buf_reset(&a);
        if (!o || unhex64(json_string_value(json_object_get(o, "k")), &key) ||
            !json_is_integer(s) || !json_is_integer(n) ||
            json_integer_value(n) < 0 || len >= (size_t)(xend - (nl + 1)) ||
            nl[1 + len] != '\n' ||
            rebuild((const unsigned char *)nl + 1, len, &num, nend, &ints, iend,
                    &a))
            rc = diag_set(d, EBADMSG,
                          "'%s' exchange %zu is not a saved exchange: save "
                          "the golden again",
                          path, i);
        else if (t->n >= count)
            rc = diag_set(d, EBADMSG,
                          "'%s' holds more exchanges than its trailer "
                          "says (%zu): save the golden again",
                          path, count);
        else {
            buf_addch(&a, '\0');
            size_t alen = a.len - 1;
            add_exchange(t, key, (long)json_integer_value(s),
                         buf_detach(&a, NULL), alen);
        }
        json_decref(o);
        if (!rc)
            p = nl + 1 + len + 1;
    }
    if (!rc && (num != nend || ints != iend))
        rc = diag_set(d, EBADMSG,
                      "'%s' has numbers no answer takes: save the golden "
                      "again",
                      path);
    buf_release(&a);
    return rc;
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
    json_int_t version = json_integer_value(ver);
    if (!json_is_integer(ver) || version < 1 || version > DRIFT_TAPE_VERSION) {
        rc = diag_set(d, EPROTONOSUPPORT,
                      "'%s' is a saved golden of version %lld, written by "
                      "fidelity %s; this fidelity reads versions 1 to %d: "
                      "save the golden again with this version",
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
    json_int_t nnum = json_integer_value(json_object_get(tr, "numbers"));
    json_int_t nint = json_integer_value(json_object_get(tr, "integers"));
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
    if (version == 1)
        rc = load_v1(t, path, nl + 1, data + tstart, count, d);
    else if (nnum < 0 || nint < 0)
        rc = diag_set(d, EBADMSG,
                      "'%s' has a trailer without its number sections: save "
                      "the golden again",
                      path);
    else
        rc = load_v2(t, path, nl + 1, data + tstart, (size_t)nnum, (size_t)nint,
                     count, d);
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
