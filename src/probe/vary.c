/*
 * vary: parsing `--vary KEY=V1,V2`, the product of the varied fields, and
 * setting dotted paths in a request body. Values go through
 * audit_expect_add, the one parser of "KEY=VALUE" (JSON when it parses,
 * else a string), so `--vary` and `audit --expect` read values alike.
 */
#include "probe/vary.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "core/buf.h"
#include "core/xalloc.h"

void probe_vary_init(struct probe_vary *v)
{
    memset(v, 0, sizeof(*v));
}

void probe_vary_release(struct probe_vary *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free(v->key[i]);
        json_decref(v->vals[i]);
    }
    memset(v, 0, sizeof(*v));
}

static bool good_path(const char *k)
{
    size_t n = strlen(k);
    return n && k[0] != '.' && k[n - 1] != '.' && !strstr(k, "..");
}

/* One value through audit's KEY=VALUE rule; new reference or NULL. */
static json_t *read_value(const char *key, const char *text, struct diag *d)
{
    json_t *tmp = json_object();
    char *arg = xasprintf("%s=%s", key, text);
    json_t *v = NULL;
    if (!audit_expect_add(tmp, arg, d))
        v = json_incref(json_object_get(tmp, key));
    free(arg);
    json_decref(tmp);
    return v;
}

int probe_vary_add(struct probe_vary *v, const char *arg, struct diag *d)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1])
        return diag_set(d, EINVAL,
                        "'%s' is not KEY=V1,V2,... (e.g. "
                        "reasoning_effort=high,max)",
                        arg);
    char *key = xstrndup(arg, (size_t)(eq - arg));
    int r = 0;
    json_t *vals = json_array();
    if (!good_path(key)) {
        r = diag_set(d, EINVAL, "'%s': empty part in the path '%s'", arg, key);
        goto out;
    }
    if (probe_vary_has(v, key)) {
        r = diag_set(d, EEXIST, "'%s' is varied twice", key);
        goto out;
    }
    if (v->n >= PROBE_VARY_KEYS) {
        r = diag_set(d, E2BIG, "at most %d varied fields", PROBE_VARY_KEYS);
        goto out;
    }
    for (const char *p = eq + 1;;) {
        const char *c = strchr(p, ',');
        char *t = c ? xstrndup(p, (size_t)(c - p)) : xstrdup(p);
        json_t *x = *t ? read_value(key, t, d) : NULL;
        if (!*t)
            diag_set(d, EINVAL, "'%s': empty value", arg);
        free(t);
        if (!x) {
            r = -EINVAL;
            goto out;
        }
        json_array_append_new(vals, x);
        if (json_array_size(vals) > 64) {
            r = diag_set(d, E2BIG, "'%s': at most 64 values", arg);
            goto out;
        }
        if (!c)
            break;
        p = c + 1;
    }
    v->key[v->n] = key;
    v->vals[v->n++] = vals;
    return 0;
out:
    free(key);
    json_decref(vals);
    return r;
}

bool probe_vary_has(const struct probe_vary *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->key[i], key))
            return true;
    return false;
}

json_t *probe_vary_take(struct probe_vary *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->key[i], key))
            continue;
        json_t *vals = v->vals[i];
        free(v->key[i]);
        memmove(&v->key[i], &v->key[i + 1], (v->n - i - 1) * sizeof(char *));
        memmove(&v->vals[i], &v->vals[i + 1],
                (v->n - i - 1) * sizeof(json_t *));
        v->n--;
        return vals;
    }
    return NULL;
}

char *probe_vary_label(const json_t *cell)
{
    struct buf b = BUF_INIT;
    const char *k;
    json_t *x;
    buf_adds(&b, "");
    json_object_foreach((json_t *)cell, k, x)
    {
        char *t = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY |
                                    JSON_REAL_PRECISION(12));
        if (b.len)
            buf_addch(&b, ' ');
        buf_printf(&b, "%s=%s", k, t ? t : "null");
        free(t);
    }
    return buf_detach(&b, NULL);
}

void probe_vary_cells_build(const struct probe_vary *v,
                            struct probe_vary_cells *c)
{
    size_t n = 1;
    for (size_t i = 0; i < v->n; i++)
        n *= json_array_size(v->vals[i]);
    c->n = n;
    c->cell = xcalloc(n, sizeof(*c->cell));
    c->label = xcalloc(n, sizeof(*c->label));
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object();
        size_t rest = i;
        /* the last key varies fastest */
        size_t idx[PROBE_VARY_KEYS];
        for (size_t k = v->n; k-- > 0;) {
            size_t m = json_array_size(v->vals[k]);
            idx[k] = rest % m;
            rest /= m;
        }
        for (size_t k = 0; k < v->n; k++)
            json_object_set(o, v->key[k], json_array_get(v->vals[k], idx[k]));
        c->cell[i] = o;
        c->label[i] = probe_vary_label(o);
    }
}

void probe_vary_cells_release(struct probe_vary_cells *c)
{
    for (size_t i = 0; i < c->n; i++) {
        json_decref(c->cell[i]);
        free(c->label[i]);
    }
    free(c->cell);
    free(c->label);
    memset(c, 0, sizeof(*c));
}

void probe_vary_apply(json_t *body, const json_t *cell)
{
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)cell, k, x)
    {
        json_t *o = body;
        const char *p = k, *dot;
        while ((dot = strchr(p, '.'))) {
            char *part = xstrndup(p, (size_t)(dot - p));
            json_t *next = json_object_get(o, part);
            if (!json_is_object(next)) {
                next = json_object();
                json_object_set_new(o, part, next);
            }
            free(part);
            o = next;
            p = dot + 1;
        }
        json_object_set(o, p, x);
    }
}

void probe_vary_expand(const struct probe_spec *s, size_t n,
                       const struct probe_vary_cells *c,
                       struct probe_spec **out, size_t *nout)
{
    size_t m = c->n ? c->n : 1;
    struct probe_spec *v = xcalloc(n * m + 1, sizeof(*v));
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < m; k++) {
            struct probe_spec *x = &v[i * m + k];
            *x = s[i];
            if (c->n && json_object_size(c->cell[k])) {
                x->vary = c->cell[k];
                x->vary_key = c->label[k];
            }
        }
    *out = v;
    *nout = n * m;
}
