/*
 * body: a JSON writer for request bodies. A 128k-token case is about half
 * a megabyte of message text; jansson's json_dumps escapes it a code point
 * at a time, which costs more CPU than everything else probe does for the
 * case. This writer copies runs of bytes that need no escape with memcpy.
 * Output is compact JSON equal in meaning to json_dumps(j, JSON_COMPACT).
 */
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "probe/probe_int.h"

/* 1 for the bytes a JSON string must escape (RFC 8259 section 7). */
static const unsigned char must_escape[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
};

/* Writes s as a JSON string: memcpy of each run that needs no escape. */
void probe_json_put_string(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    if (buf_grow(b, n + 2))
        return;
    buf_addch(b, '"');
    while (p < end) {
        const unsigned char *q = p;
        while (q < end && !must_escape[*q])
            q++;
        if (buf_add(b, p, (size_t)(q - p)))
            return;
        if (q == end)
            break;
        char e[6] = {'\\', (char)*q, 0, 0, 0, 0};
        size_t el = 2;
        switch (*q) {
        case '\n':
            e[1] = 'n';
            break;
        case '\t':
            e[1] = 't';
            break;
        case '\r':
            e[1] = 'r';
            break;
        case '"':
        case '\\':
            break;
        default:
            memcpy(e + 1, "u00", 3);
            e[4] = hex[*q >> 4];
            e[5] = hex[*q & 15];
            el = 6;
        }
        if (buf_add(b, e, el))
            return;
        p = q + 1;
    }
    buf_addch(b, '"');
}

static void put(struct buf *b, const json_t *j)
{
    const char *k;
    json_t *v;
    size_t i;
    char num[40];
    bool first = true;

    switch (json_typeof(j)) {
    case JSON_OBJECT:
        buf_addch(b, '{');
        json_object_foreach((json_t *)j, k, v)
        {
            if (!first)
                buf_addch(b, ',');
            first = false;
            probe_json_put_string(b, k, strlen(k));
            buf_addch(b, ':');
            put(b, v);
        }
        buf_addch(b, '}');
        break;
    case JSON_ARRAY:
        buf_addch(b, '[');
        json_array_foreach(j, i, v)
        {
            if (i)
                buf_addch(b, ',');
            put(b, v);
        }
        buf_addch(b, ']');
        break;
    case JSON_STRING:
        probe_json_put_string(b, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        break;
    case JSON_REAL:
        snprintf(num, sizeof(num), "%.17g", json_real_value(j));
        if (!strpbrk(num, ".eEn"))
            strcat(num, ".0");
        buf_adds(b, num);
        break;
    case JSON_TRUE:
        buf_adds(b, "true");
        break;
    case JSON_FALSE:
        buf_adds(b, "false");
        break;
    default:
        buf_adds(b, "null");
    }
}

char *probe_json_dump(const json_t *j, size_t hint, size_t *len)
{
    struct buf b = BUF_INIT;
    if (hint)
        buf_grow(&b, hint + hint / 8 + 1024);
    put(&b, j);
    return buf_detach(&b, len);
}
