/*
 * redact: which header and query parameter names are secrets, and secret
 * values inside a JSON request body, hidden in place (redact.h). The
 * body's walk is lexical: outside a string every '"' opens one, and a
 * string followed by ':' is a key, so any depth is covered in one pass of
 * memchr over the strings, without building the document.
 */
#include "record/redact.h"

#include <ctype.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "wire/coding.h"
#include "wire/jscan.h"

static const char MARK[] = REDACT_MARK;

/* Headers (lower case): whole names, then parts of names; then query
 * parameters (any case). */
static const char *const SECRET_NAMES[] = {
    "authorization", "proxy-authorization", "cookie", "set-cookie",
    "api-key",       "x-api-key",           NULL};
static const char *const SECRET_PARTS[] = {
    "api-key",  "apikey", "api_key",       "token", "secret",
    "password", "auth",   "session-token", NULL};
static const char *const SECRET_PARAMS[] = {
    "key",          "api_key",  "apikey", "api-key", "token",
    "access_token", "password", "secret", "sig",     "signature",
    "auth",         "code",     NULL};

/* Lower-case names; a key is decoded and lowered before it is compared. */
static const char *const SECRET_KEYS[] = {
    "api_key",  "apikey",        "api-key",      "password",
    "secret",   "client_secret", "access_token", "refresh_token",
    "id_token", "authorization",
};

struct scan {
    char *s; /* the text walked */
    size_t len;
    const char *const *extra;
    size_t nextra;
    /* A tool call's arguments: s is the decoded string, and byte i of s
     * came from src + map[i] (map[len]: the end of the string's text). */
    char *src;
    const size_t *map;
    size_t hidden;
};

bool redact_is_secret_header(const char *name)
{
    char low[128];
    size_t n = strlen(name);
    if (n >= sizeof(low))
        n = sizeof(low) - 1; /* a longer name is judged by its start */
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[n] = '\0';
    if (strstr(low, "ratelimit")) /* x-ratelimit-remaining-tokens */
        return false;
    for (int i = 0; SECRET_NAMES[i]; i++)
        if (!strcmp(low, SECRET_NAMES[i]))
            return true;
    for (int i = 0; SECRET_PARTS[i]; i++)
        if (strstr(low, SECRET_PARTS[i]))
            return true;
    return false;
}

static bool is_secret_param(const char *name, size_t n)
{
    for (int i = 0; SECRET_PARAMS[i]; i++)
        if (strlen(SECRET_PARAMS[i]) == n &&
            !strncasecmp(name, SECRET_PARAMS[i], n))
            return true;
    return false;
}

static bool name_eq(const char *lower, size_t n, const char *name);

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A form or query name name[0..n) with its percent escapes and '+'
 * decoded (RFC 3986 section 2.1; the form encoding's space), lowered,
 * into out (REDACT_NAME_MAX + 1 bytes): false when longer than that. */
static bool form_name(const char *name, size_t n, char *out, size_t *on)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int hi, lo;
        if (c == '%' && i + 2 < n && (hi = hexval(name[i + 1])) >= 0 &&
            (lo = hexval(name[i + 2])) >= 0) {
            c = (char)(hi << 4 | lo);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (k == REDACT_NAME_MAX)
            return false;
        out[k++] = c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
    }
    out[k] = '\0';
    *on = k;
    return true;
}

/* Whether a query or form name (raw, escapes and all) names a secret: a
 * query parameter's name, a JSON body's secret key, or an extra name. */
static bool is_secret_form_name(const char *name, size_t n,
                                const char *const *extra, size_t nextra)
{
    char low[REDACT_NAME_MAX + 1];
    size_t k;
    if (!form_name(name, n, low, &k))
        return false;
    if (is_secret_param(low, k))
        return true;
    for (size_t i = 0; i < sizeof(SECRET_KEYS) / sizeof(*SECRET_KEYS); i++)
        if (name_eq(low, k, SECRET_KEYS[i]))
            return true;
    for (size_t i = 0; extra && i < nextra; i++)
        if (name_eq(low, k, extra[i]))
            return true;
    return false;
}

char *redact_path(const char *path)
{
    const char *q = strchr(path, '?');
    if (!q)
        return xstrdup(path);
    struct buf b = BUF_INIT;
    buf_add(&b, path, (size_t)(q - path) + 1);
    const char *p = q + 1;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq && is_secret_form_name(p, (size_t)(eq - p), NULL, 0)) {
            buf_add(&b, p, (size_t)(eq - p) + 1);
            buf_adds(&b, REDACT_MARK);
        } else {
            buf_add(&b, p, len);
        }
        if (!amp)
            break;
        buf_addch(&b, '&');
        p = amp + 1;
    }
    return buf_detach(&b, NULL);
}

bool redact_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= REDACT_NAME_MAX;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t i, size_t len)
{
    while (i < len && is_ws(s[i]))
        i++;
    return i;
}

/* The index of the quote that closes the string opened at s[i], or len. */
static size_t str_end(const char *s, size_t i, size_t len)
{
    size_t j = i + 1;
    while (j < len) {
        const char *q = memchr(s + j, '"', len - j);
        if (!q)
            return len;
        size_t k = (size_t)(q - s), bs = 0;
        while (k - bs > i + 1 && s[k - bs - 1] == '\\')
            bs++;
        if (!(bs & 1))
            return k;
        j = k + 1;
    }
    return len;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Decodes the escape at s[i] (s[i] == '\\') into out (up to 4 bytes):
 * how many bytes it wrote, and *used the source bytes it took. A broken
 * escape gives '?' (the caller validates what it decodes). */
static size_t unescape(const char *s, size_t i, size_t end, char *out,
                       size_t *used)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    *used = 2;
    if (i + 1 >= end) {
        *used = 1;
        out[0] = '?';
        return 1;
    }
    const char *k = memchr(from, s[i + 1], sizeof(from) - 1);
    if (k) {
        out[0] = to[k - from];
        return 1;
    }
    int cp = s[i + 1] == 'u' && i + 6 <= end ? hex4(s + i + 2) : -1;
    if (cp < 0) {
        out[0] = '?';
        return 1;
    }
    *used = 6;
    if (cp >= 0xd800 && cp < 0xdc00 && i + 12 <= end && s[i + 6] == '\\' &&
        s[i + 7] == 'u') {
        int lo = hex4(s + i + 8);
        if (lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            *used = 12;
        }
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The key s[a..b) decoded and lowered into out: false when it is longer
 * than REDACT_NAME_MAX (no secret's name is). */
static bool key_lower(const char *s, size_t a, size_t b, char *out, size_t *n)
{
    size_t k = 0;
    for (size_t i = a; i < b;) {
        char c[4];
        size_t w = 1, used = 1;
        if (s[i] == '\\')
            w = unescape(s, i, b, c, &used);
        else
            c[0] = s[i];
        if (k + w > REDACT_NAME_MAX)
            return false;
        for (size_t j = 0; j < w; j++)
            out[k++] = c[j] >= 'A' && c[j] <= 'Z' ? (char)(c[j] | 0x20) : c[j];
        i += used;
    }
    *n = k;
    return true;
}

static bool name_eq(const char *lower, size_t n, const char *name)
{
    size_t m = strlen(name);
    if (m != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c =
            name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] | 0x20) : name[i];
        if (c != lower[i])
            return false;
    }
    return true;
}

static bool is_secret_key(const struct scan *sc, const char *k, size_t n)
{
    /* the built-in names are 6 to 13 bytes long */
    if (n >= 6 && n <= 13)
        for (size_t i = 0; i < sizeof(SECRET_KEYS) / sizeof(*SECRET_KEYS); i++)
            if (name_eq(k, n, SECRET_KEYS[i]))
                return true;
    for (size_t i = 0; i < sc->nextra; i++)
        if (name_eq(k, n, sc->extra[i]))
            return true;
    return false;
}

/* Writes the marker over p[0..n). */
static void mark(char *p, size_t n)
{
    size_t m = n >= sizeof(MARK) - 1 ? sizeof(MARK) - 1 : 0;
    memcpy(p, MARK, m);
    memset(p + m, '*', n - m);
}

/* Hides the string content s[a..b) (between its quotes). */
static void hide(struct scan *sc, size_t a, size_t b)
{
    if (a >= b)
        return;
    if (sc->map)
        mark(sc->src + sc->map[a], sc->map[b] - sc->map[a]);
    else
        mark(sc->s + a, b - a);
    sc->hidden++;
}

static void walk(struct scan *sc);

/* A tool call's "arguments" string s[a..b): when its decoded text is a
 * JSON object or array, the secrets in that text are hidden in s. */
static void walk_arguments(struct scan *sc, size_t a, size_t b)
{
    size_t cap = b - a, n = 0;
    char *d = xmalloc(cap + 1);
    size_t *map = xmalloc((cap + 1) * sizeof(*map));
    for (size_t i = a; i < b;) {
        size_t w = 1, used = 1;
        if (sc->s[i] == '\\') {
            w = unescape(sc->s, i, b, d + n, &used);
        } else {
            d[n] = sc->s[i];
        }
        for (size_t j = 0; j < w; j++)
            map[n + j] = i;
        n += w;
        i += used;
    }
    map[n] = b;
    d[n] = '\0';
    size_t f = skip_ws(d, 0, n);
    struct jspan v;
    json_t *j = NULL;
    bool json = f < n && (d[f] == '{' || d[f] == '[') &&
                (!jscan_doc(d, n, &v) ||
                 (j = json_loadb(d, n, JSON_ALLOW_NUL, NULL)) != NULL);
    json_decref(j);
    if (json) {
        struct scan in = {.s = d,
                          .len = n,
                          .extra = sc->extra,
                          .nextra = sc->nextra,
                          .src = sc->s,
                          .map = map};
        walk(&in);
        sc->hidden += in.hidden;
    }
    free(map);
    free(d);
}

static void walk(struct scan *sc)
{
    const char *s = sc->s;
    size_t len = sc->len, i = 0;
    while (i < len) {
        const char *q = memchr(s + i, '"', len - i);
        if (!q)
            return;
        size_t ks = (size_t)(q - s), ke = str_end(s, ks, len);
        if (ke >= len)
            return;
        size_t c = skip_ws(s, ke + 1, len);
        i = ke + 1;
        if (c >= len || s[c] != ':')
            continue; /* a value */
        size_t vs = skip_ws(s, c + 1, len);
        if (vs >= len || s[vs] != '"')
            continue; /* not a string: walked into */
        size_t ve = str_end(s, vs, len);
        if (ve >= len)
            return;
        char k[REDACT_NAME_MAX];
        size_t kn;
        if (key_lower(s, ks + 1, ke, k, &kn)) {
            if (is_secret_key(sc, k, kn))
                hide(sc, vs + 1, ve);
            else if (!sc->map && kn == 9 && !memcmp(k, "arguments", 9))
                walk_arguments(sc, vs + 1, ve);
        }
        i = ve + 1;
    }
}

size_t redact_body(char *body, size_t len, const char *const *extra, size_t n)
{
    size_t f = skip_ws(body, 0, len);
    if (f >= len || (body[f] != '{' && body[f] != '['))
        return 0;
    struct scan sc = {
        .s = body, .len = len, .extra = extra, .nextra = extra ? n : 0};
    walk(&sc);
    return sc.hidden;
}

bool redact_is_form(const char *ct)
{
    static const char form[] = "application/x-www-form-urlencoded";
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return !strncasecmp(ct, form, sizeof(form) - 1) &&
           (!ct[sizeof(form) - 1] || ct[sizeof(form) - 1] == ';' ||
            ct[sizeof(form) - 1] == ' ');
}

size_t redact_form(char *body, size_t len, const char *const *extra, size_t n)
{
    size_t hidden = 0, i = 0;
    while (i < len) {
        char *amp = memchr(body + i, '&', len - i);
        size_t end = amp ? (size_t)(amp - body) : len;
        char *eq = memchr(body + i, '=', end - i);
        if (eq &&
            is_secret_form_name(body + i, (size_t)(eq - body - i), extra, n)) {
            size_t v = (size_t)(eq - body) + 1;
            if (v < end) {
                mark(body + v, end - v);
                hidden++;
            }
        }
        i = end + 1;
    }
    return hidden;
}

/* ---- compressed bodies ---- */

const char *redact_coding(const char *value)
{
    static const char *const known[] = {"gzip", "x-gzip", "deflate"};
    if (!value)
        return NULL;
    value += strspn(value, " \t");
    size_t n = strcspn(value, " \t");
    if (value[n + strspn(value + n, " \t")])
        return NULL; /* more than one word */
    for (size_t i = 0; i < sizeof(known) / sizeof(*known); i++)
        if (strlen(known[i]) == n && !strncasecmp(value, known[i], n))
            return known[i];
    return NULL;
}

int redact_inflate(const char *src, size_t len, const char *coding, size_t cap,
                   struct buf *out)
{
    buf_reset(out);
    size_t old = out->max;
    out->max = cap;
    int rc = coding_inflate(src, len, coding, out);
    out->max = old;
    if (rc < 0) {
        buf_reset(out);
        return -1;
    }
    return rc;
}
