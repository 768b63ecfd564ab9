/*
 * answer: facts, questions and answers over the visible prompt text.
 */
#include "sim/answer.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/xalloc.h"
#include "sim/tok.h"

const char ANSWER_NOT_SEEN[] =
    "I don't see any earlier message about that; this looks like the start "
    "of our conversation.";
const char ANSWER_FIRST_MESSAGE[] =
    "This is the very first message of our conversation, so I don't know "
    "what \"that\" refers to.";

/* A message as the model saw it: its role and text, with the token index
 * of every byte so visibility can be judged per fact. */
struct seg {
    int role;
    struct buf text;
    uint32_t *at; /* token index of text[i] */
    size_t at_cap;
};

struct view {
    struct seg *segs;
    size_t n, cap;
    size_t ntok, window;
};

static struct seg *seg_new(struct view *v, int role)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 16;
        v->segs = xrealloc(v->segs, v->cap * sizeof(*v->segs));
    }
    struct seg *s = &v->segs[v->n++];
    s->role = role;
    buf_init(&s->text, 0);
    s->at = NULL;
    s->at_cap = 0;
    return s;
}

static void seg_add(struct seg *s, const char *p, size_t k, uint32_t tok)
{
    if (s->text.len + k > s->at_cap) {
        s->at_cap = (s->text.len + k) * 2 + 64;
        s->at = xrealloc(s->at, s->at_cap * sizeof(*s->at));
    }
    for (size_t i = 0; i < k; i++)
        s->at[s->text.len + i] = tok;
    buf_add(&s->text, p, k);
}

static void view_build(struct view *v, const int32_t *toks, size_t n,
                       size_t window)
{
    struct seg *cur = NULL;
    char piece[16];
    memset(v, 0, sizeof(*v));
    v->ntok = n;
    v->window = window;
    for (size_t i = 0; i < n; i++) {
        int32_t t = toks[i];
        if (t >= TOK_SYSTEM && t <= TOK_TOOL) {
            cur = seg_new(v, t);
            continue;
        }
        if (t == TOK_END || t == TOK_BOS) {
            cur = NULL;
            continue;
        }
        if (!cur)
            cur = seg_new(v, -1); /* text cut from its role marker */
        size_t k = t == TOK_THINK || t == TOK_THINK_END || t == TOK_TOOL_CALL
                       ? (piece[0] = '\n', 1)
                       : tok_piece(t, piece);
        seg_add(cur, piece, k, (uint32_t)i);
    }
}

static void view_release(struct view *v)
{
    for (size_t i = 0; i < v->n; i++) {
        buf_release(&v->segs[i].text);
        free(v->segs[i].at);
    }
    free(v->segs);
}

static bool visible(const struct view *v, uint32_t tok)
{
    return !v->window || v->ntok - tok <= v->window;
}

/* Lowercase, single spaces, no leading "the ". */
static char *norm(const char *p, size_t n)
{
    char *o = xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = (char)tolower((unsigned char)p[i]);
        if (isspace((unsigned char)c)) {
            if (k && o[k - 1] != ' ')
                o[k++] = ' ';
        } else {
            o[k++] = c;
        }
    }
    while (k && o[k - 1] == ' ')
        k--;
    o[k] = '\0';
    if (!strncmp(o, "the ", 4))
        memmove(o, o + 4, k - 3);
    return o;
}

static const char *find_ci(const char *h, const char *end, const char *n)
{
    size_t k = strlen(n);
    for (const char *p = h; p + k <= end; p++)
        if (!strncasecmp(p, n, k))
            return p;
    return NULL;
}

/* Splits "ATTR for|of ENTITY" at its first " for " or " of ". */
static bool split_attr(const char *p, const char *end, char **attr, char **ent)
{
    const char *f = find_ci(p, end, " for "), *o = find_ci(p, end, " of ");
    const char *s = f && (!o || f < o) ? f : o;
    if (!s || s == p)
        return false;
    size_t skip = s == f ? 5 : 4;
    if (s + skip >= end)
        return false;
    *attr = norm(p, (size_t)(s - p));
    *ent = norm(s + skip, (size_t)(end - s - skip));
    if (**attr && **ent)
        return true;
    free(*attr);
    free(*ent);
    return false;
}

struct fact {
    char *attr, *ent, *value;
    uint32_t tok;
};

struct facts {
    struct fact *v;
    size_t n, cap;
};

static void facts_release(struct facts *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].attr);
        free(f->v[i].ent);
        free(f->v[i].value);
    }
    free(f->v);
}

static bool is_stop(char c)
{
    return c == '.' || c == '?' || c == '!' || c == '\n' || c == '\0';
}

/* The value after " is ": up to a full stop that ends the sentence. */
static size_t value_len(const char *p, const char *end)
{
    size_t k = 0;
    while (p + k < end && k < 100) {
        char c = p[k];
        if (c == '\n' || c == '?' || c == '"')
            break;
        /* a full stop ends the value unless a digit or letter follows, so
         * "3.14" stays whole and "214.\"" (inside JSON) ends at 214 */
        if (c == '.' && (p + k + 1 == end || !isalnum((unsigned char)p[k + 1])))
            break;
        k++;
    }
    return k;
}

static void scan_statement(struct facts *fs, const struct seg *s, size_t i)
{
    const char *t = buf_str(&s->text), *end = t + s->text.len, *p = t + i + 4;
    const char *stop = p, *is;
    while (stop < end && !is_stop(*stop))
        stop++;
    is = find_ci(p, stop, " is ");
    if (!is)
        return;
    char *attr, *ent;
    if (!split_attr(p, is, &attr, &ent))
        return;
    size_t vl = value_len(is + 4, end);
    if (vl == 0) {
        free(attr);
        free(ent);
        return;
    }
    if (fs->n == fs->cap) {
        fs->cap = fs->cap ? fs->cap * 2 : 16;
        fs->v = xrealloc(fs->v, fs->cap * sizeof(*fs->v));
    }
    fs->v[fs->n++] = (struct fact){attr, ent, xstrndup(is + 4, vl), s->at[i]};
}

static void collect_facts(const struct view *v, struct facts *fs)
{
    memset(fs, 0, sizeof(*fs));
    for (size_t k = 0; k < v->n; k++) {
        const struct seg *s = &v->segs[k];
        const char *t = buf_str(&s->text);
        for (size_t i = 0; i + 4 < s->text.len; i++) {
            if ((t[i] != 'T' && t[i] != 't') || strncmp(t + i + 1, "he ", 3))
                continue;
            if (i && isalnum((unsigned char)t[i - 1]))
                continue;
            if (visible(v, s->at[i]))
                scan_statement(fs, s, i);
        }
    }
}

/* "2nd", "second", "last" ...: 1-based index, -1 for last, 0 for none;
 * *len gets the length of the word and its space. */
static int ordinal(const char *p, const char *end, size_t *len)
{
    static const char *const words[] = {"first", "second", "third",   "fourth",
                                        "fifth", "sixth",  "seventh", "eighth",
                                        "ninth", "tenth",  NULL};
    size_t w = 0;
    while (p + w < end && isalnum((unsigned char)p[w]))
        w++;
    if (p + w >= end || p[w] != ' ')
        return 0;
    for (int i = 0; words[i]; i++)
        if (strlen(words[i]) == w && !strncasecmp(p, words[i], w))
            return (*len = w + 1), i + 1;
    if (w == 4 && !strncasecmp(p, "last", 4))
        return (*len = w + 1), -1;
    if (w >= 3 && isdigit((unsigned char)p[0])) {
        char *e;
        long n = strtol(p, &e, 10);
        if (n > 0 && n < 100000 && (size_t)(e - p) == w - 2 &&
            (!strncasecmp(e, "st", 2) || !strncasecmp(e, "nd", 2) ||
             !strncasecmp(e, "rd", 2) || !strncasecmp(e, "th", 2)))
            return (*len = w + 1), (int)n;
    }
    return 0;
}

static bool is_ident(const char *p, size_t n)
{
    if (!n || !(isalpha((unsigned char)p[0]) || p[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)p[i]) && p[i] != '_')
            return false;
    return true;
}

/* The latest visible "Let NAME = VALUE." assignment of name, or NULL. */
static char *assignment(const struct view *v, const char *name)
{
    char *best = NULL;
    size_t nl = strlen(name);
    for (size_t k = 0; k < v->n; k++) {
        const struct seg *s = &v->segs[k];
        const char *t = buf_str(&s->text), *end = t + s->text.len;
        for (const char *p = t; (p = find_ci(p, end, "let ")); p += 4) {
            const char *q = p + 4;
            if ((p > t && isalnum((unsigned char)p[-1])) ||
                (size_t)(end - q) < nl + 4 || strncmp(q, name, nl) ||
                strncmp(q + nl, " = ", 3) || !visible(v, s->at[p - t]))
                continue;
            const char *val = q + nl + 3, *e = val;
            while (e < end && (isalnum((unsigned char)*e) || *e == '_'))
                e++;
            if (e == val)
                continue;
            free(best);
            best = xstrndup(val, (size_t)(e - val));
        }
    }
    return best;
}

static void answer_variable(const struct view *v, const char *name,
                            struct buf *out)
{
    char *cur = xstrdup(name);
    for (int depth = 0; depth < 64; depth++) {
        char *val = assignment(v, cur);
        free(cur);
        if (!val) {
            buf_adds(out, ANSWER_NOT_SEEN);
            return;
        }
        if (!is_ident(val, strlen(val)) || isdigit((unsigned char)val[0])) {
            buf_printf(out, "The value of %s is %s.", name, val);
            free(val);
            return;
        }
        cur = val;
    }
    free(cur);
    buf_adds(out, ANSWER_NOT_SEEN);
}

static const char *ord_suffix(int n)
{
    if (n % 100 >= 11 && n % 100 <= 13)
        return "th";
    return n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
}

static void answer_fact(const struct view *v, const char *q, const char *end,
                        struct buf *out)
{
    size_t olen = 0;
    int ord = ordinal(q, end, &olen);
    char *attr, *ent;
    const char *as = q + olen;
    if (!split_attr(as, end, &attr, &ent)) {
        buf_adds(out, ANSWER_NOT_SEEN);
        return;
    }
    /* Answer in the question's own words: "ATTR for ENTITY" as asked. */
    const char *f = find_ci(as, end, " for "), *o = find_ci(as, end, " of ");
    const char *sep = f && (!o || f < o) ? f : o;
    int alen = (int)(sep - as);
    const char *es = sep + (sep == f ? 5 : 4);
    int elen = (int)(end - es);
    struct facts fs;
    collect_facts(v, &fs);
    size_t match[4096], n = 0;
    for (size_t i = 0; i < fs.n && n < 4096; i++)
        if (!strcmp(fs.v[i].attr, attr) && !strcmp(fs.v[i].ent, ent))
            match[n++] = i;
    if (n == 0) {
        buf_adds(out, ANSWER_NOT_SEEN);
    } else if (ord > 0 && (size_t)ord > n) {
        buf_printf(out, "I only see %zu %.*s for %.*s.", n, alen, as, elen, es);
    } else {
        size_t pick = ord > 0 ? match[ord - 1] : match[n - 1];
        if (ord > 0)
            buf_printf(out, "The %d%s %.*s for %.*s is %s.", ord,
                       ord_suffix(ord), alen, as, elen, es, fs.v[pick].value);
        else
            buf_printf(out, "The %.*s for %.*s is %s.", alen, as, elen, es,
                       fs.v[pick].value);
    }
    facts_release(&fs);
    free(attr);
    free(ent);
}

/* Index of the last segment with this role (excluding the generation
 * prompt), or -1. */
static long last_seg(const struct view *v, int role)
{
    for (size_t i = v->n; i-- > 0;)
        if (v->segs[i].role == role)
            return (long)i;
    return -1;
}

static long first_user(const struct view *v, long before)
{
    for (long i = 0; i < before; i++) {
        const struct seg *s = &v->segs[i];
        if (s->role == TOK_USER && s->text.len && visible(v, s->at[0]))
            return i;
    }
    return -1;
}

static void quote(struct buf *out, const struct buf *text, size_t max)
{
    size_t n = text->len < max ? text->len : max;
    for (size_t i = 0; i < n; i++) {
        char c = text->data[i];
        buf_addch(out, c == '\n' || c == '"' ? ' ' : c);
    }
    if (text->len > max)
        buf_adds(out, "...");
}

static bool is_follow_up(const char *t)
{
    static const char *const starts[] = {"Now ", "Also ", "Then ", "And ",
                                         NULL};
    if (islower((unsigned char)t[0]))
        return true;
    for (int i = 0; starts[i]; i++)
        if (!strncmp(t, starts[i], strlen(starts[i])))
            return true;
    return false;
}

/* The arguments of the trigger: the JSON object as written, or, when the
 * harness passed the prompt on quoted (Continue and Kilo wrap it in
 * literal quotes and escape the quotes inside: {\"key\": \"v\"}), the
 * object with that escaping undone. NULL when neither parses. */
static json_t *trigger_args(const char *args, size_t n)
{
    json_t *a = json_loadb(args, n, 0, NULL);
    if (a || !memchr(args, '\\', n))
        return a;
    char *u = xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (args[i] == '\\' && i + 1 < n &&
            (args[i + 1] == '"' || args[i + 1] == '\\'))
            i++;
        u[k++] = args[i];
    }
    a = json_loadb(u, k, 0, NULL);
    free(u);
    return a;
}

static bool tool_call(const struct answer_in *in, const struct seg *q,
                      struct answer_out *out)
{
    const char *t = buf_str(&q->text), *end = t + q->text.len;
    const char *p = find_ci(t, end, "Call the ");
    if (!p || !json_is_array(in->tools))
        return false;
    const char *name = p + 9, *sp = name;
    while (sp < end && *sp != ' ')
        sp++;
    const char *with = find_ci(sp, end, " tool with ");
    const char *close = end;
    while (close > sp && *close != '}')
        close--;
    if (with != sp || close <= with)
        return false;
    size_t i;
    json_t *tool;
    json_array_foreach(in->tools, i, tool)
    {
        json_t *n = json_object_get(json_object_get(tool, "function"), "name");
        if (!json_is_string(n) ||
            strlen(json_string_value(n)) != (size_t)(sp - name) ||
            strncmp(json_string_value(n), name, (size_t)(sp - name)))
            continue;
        const char *args = with + 11;
        json_t *a = trigger_args(args, (size_t)(close + 1 - args));
        if (!a)
            return false;
        out->tool_name = xstrndup(name, (size_t)(sp - name));
        out->tool_args = json_dumps(a, JSON_COMPACT);
        json_decref(a);
        return true;
    }
    return false;
}

/* A summary request's answer: each fact the visible conversation states,
 * once (its latest value), as "The ATTR for ENTITY is VALUE."; false, and
 * nothing written, when it states none. */
static bool summarise(const struct view *v, struct buf *out)
{
    struct facts fs;
    size_t said = 0;
    collect_facts(v, &fs);
    for (size_t i = 0; i < fs.n; i++) {
        bool later = false;
        for (size_t j = i + 1; j < fs.n && !later; j++)
            later = !strcmp(fs.v[j].attr, fs.v[i].attr) &&
                    !strcmp(fs.v[j].ent, fs.v[i].ent);
        if (later)
            continue;
        buf_adds(out, said++ ? " " : "Summary of our conversation: ");
        buf_printf(out, "The %s for %s is %s.", fs.v[i].attr, fs.v[i].ent,
                   fs.v[i].value);
    }
    facts_release(&fs);
    return said > 0;
}

static void answer(const struct answer_in *in, const struct view *v,
                   struct answer_out *out)
{
    long qi = last_seg(v, TOK_USER), ti = last_seg(v, TOK_TOOL);
    struct buf *c = &out->content;
    if (ti > qi) {
        buf_adds(c, "The tool returned: ");
        quote(c, &v->segs[ti].text, 80);
        buf_adds(c, ".");
        return;
    }
    if (qi < 0) {
        buf_adds(c, ANSWER_NOT_SEEN);
        return;
    }
    const struct seg *q = &v->segs[qi];
    const char *t = buf_str(&q->text), *end = t + q->text.len;
    const char *w = find_ci(t, end, "what is the ");
    const char *qm = w ? memchr(w, '?', (size_t)(end - w)) : NULL;
    long first = first_user(v, qi);
    if (tool_call(in, q, out))
        return;
    if (in->summary && summarise(v, c))
        return;
    if (find_ci(t, end, "first message") && memchr(t, '?', q->text.len)) {
        if (first < 0) {
            buf_adds(c, ANSWER_NOT_SEEN);
            return;
        }
        buf_adds(c, "Your first message asked: \"");
        quote(c, &v->segs[first].text, 200);
        buf_adds(c, "\".");
    } else if (w && qm && find_ci(w, qm, "what is the value of ") == w &&
               is_ident(w + 21, (size_t)(qm - w - 21))) {
        char *name = xstrndup(w + 21, (size_t)(qm - w - 21));
        answer_variable(v, name, c);
        free(name);
    } else if (w && qm) {
        answer_fact(v, w + 12, qm, c);
    } else if (is_follow_up(t) && first < 0) {
        buf_adds(c, ANSWER_FIRST_MESSAGE);
    } else if (first >= 0) {
        buf_adds(c, "Continuing from your first request (\"");
        quote(c, &v->segs[first].text, 60);
        buf_adds(c, "\"): done.");
    } else {
        buf_adds(c, "Here is my answer to \"");
        quote(c, &q->text, 60);
        buf_adds(c, "\".");
    }
}

void answer_out_init(struct answer_out *r)
{
    buf_init(&r->content, 0);
    buf_init(&r->reasoning, 0);
    r->tool_name = NULL;
    r->tool_args = NULL;
}

void answer_out_release(struct answer_out *r)
{
    buf_release(&r->content);
    buf_release(&r->reasoning);
    free(r->tool_name);
    free(r->tool_args);
}

void answer_write(const struct answer_in *in, struct answer_out *out)
{
    static const char *const prefixes[] = {"", "Sure. ",
                                           "From what you said: "};
    struct view v;
    view_build(&v, in->toks, in->n, in->window);
    buf_adds(&out->content, prefixes[in->variant % 3]);
    answer(in, &v, out);
    if (out->tool_name)
        buf_reset(&out->content); /* a tool call carries no prose */
    if (in->want_reasoning) {
        size_t users = 0;
        for (size_t i = 0; i < v.n; i++)
            users += v.segs[i].role == TOK_USER;
        buf_printf(&out->reasoning,
                   "I look through the %zu user messages I can see and "
                   "answer the last one.",
                   users);
    }
    view_release(&v);
}
