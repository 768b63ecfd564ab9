/*
 * db_pg: the PostgreSQL backend of the store interface, through libpq.
 *
 * The code's SQL is SQLite's; what PostgreSQL spells differently is
 * translated here, once per prepare or exec, outside quoted strings,
 * quoted identifiers and comments: `?` and `?N` placeholders become `$N`;
 * the column types INTEGER, REAL and BLOB become BIGINT (SQLite's integers
 * are 64-bit), DOUBLE PRECISION (PostgreSQL's REAL has 4 bytes) and BYTEA;
 * `INTEGER PRIMARY KEY` becomes an identity column that takes explicit
 * values too; `BEGIN IMMEDIATE` is `BEGIN`; `INSERT OR IGNORE` and `INSERT
 * OR REPLACE` become `ON CONFLICT` clauses on the table's primary key
 * (read from the catalog, once per table and connection); `rowid` is
 * `ctid`; ifnull and instr are coalesce and strpos. PRAGMA statements are
 * SQLite's own and refused.
 *
 * Parameters go with their types (int8, float8, bytea; text as unknown,
 * which the server infers from the column) in text format, blobs in binary
 * format; results come in text format and are converted on reading, a
 * bytea column decoded from its hex form. A persistent statement is
 * prepared on the server at its first step and executed by name after.
 *
 * SQLite keeps a transaction open after one of its statements fails;
 * PostgreSQL aborts the whole transaction. Inside a transaction, every
 * statement that is not persistent runs in a savepoint of its own, so that
 * its failure undoes it alone, as in SQLite. Persistent statements (the
 * record writer's) run without one, for speed: their callers undo a
 * failure themselves (a savepoint of theirs, or the whole transaction).
 * A COMMIT that PostgreSQL turns into a rollback fails here.
 */
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/url.h"
#include "core/xalloc.h"
#include "store/db_int.h"

/* Type oids (PostgreSQL's catalog/pg_type_d.h, not in libpq-dev). */
enum {
    OID_BOOL = 16,
    OID_BYTEA = 17,
    OID_INT8 = 20,
    OID_INT2 = 21,
    OID_INT4 = 23,
    OID_OID = 26,
    OID_FLOAT4 = 700,
    OID_FLOAT8 = 701,
    OID_NUMERIC = 1700,
};

/* A table's columns, for INSERT OR REPLACE and the id an INSERT gives. */
struct table {
    struct table *next;
    char *name;
    int ncols;
    char **cols;
    bool *pk;
    const char *id_col; /* the single integer primary key column, or NULL */
};

struct pg {
    struct db head;
    PGconn *c;
    char *shown;  /* the URL, password masked */
    char *secret; /* the URL's password, never shown; NULL when none */
    char *err;
    int64_t last_id;
    int changes;
    unsigned long names; /* server-side statement names given */
    unsigned gen;        /* connections made: 1 is the first */
    bool txn;            /* inside a transaction when last seen */
    /* the last failure was the server's going away; kept through the
     * reconnection (the caller's ROLLBACK makes it) until a statement
     * other than BEGIN, COMMIT, ROLLBACK or a savepoint succeeds */
    bool gone;
    int lock_ms;
    struct table *tables;
    /* Taken by every call that talks to the server: one connection may
     * be shared by threads (probe's workers), as SQLite's serialized mode
     * allows, and libpq's connection is not for two at once. */
    pthread_mutex_t mu;
};

enum kind {
    K_OTHER,
    K_QUERY,
    K_INSERT,
    K_WRITE, /* UPDATE, DELETE */
    K_DDL,
    K_TXN, /* BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, END */
    K_COMMIT,
    K_PRAGMA,
};

struct param {
    Oid type;
    const char *val; /* NULL: SQL NULL */
    int len;
    int fmt;   /* 0 text, 1 binary */
    void *own; /* freed with free() */
    void *del; /* handed to how() */
    db_destructor how;
    char num[40];
};

struct pg_stmt {
    struct db_stmt head;
    struct pg *db;
    char *sql; /* translated */
    enum kind kind;
    bool persistent;
    bool returning; /* RETURNING id_col was added */
    int np;
    struct param *p;
    /* the parameters as libpq takes them, np each */
    Oid *a_types;
    const char **a_vals;
    int *a_lens, *a_fmts;
    /* server-side statement (persistent) */
    char name[32];
    unsigned prep_gen;
    Oid *prep_types;
    /* result */
    PGresult *res;
    int row, nrows;
    bool ran;
    unsigned char **dec; /* decoded bytea per column of the current row */
    size_t *declen;
    int ncols;
};

#define PG(db) ((struct pg *)(db))
#define ST(st) ((struct pg_stmt *)(st))

static const struct db_ops ops;

/* ---- messages ---- */

/* Sets db's message to s with the URL's password, should libpq ever quote
 * it, replaced; trailing new lines cut. */
static void set_err(struct pg *db, const char *s)
{
    struct buf b = BUF_INIT;
    const char *p = s ? s : "unknown error";
    size_t sl = db->secret ? strlen(db->secret) : 0;
    while (*p) {
        if (sl && !strncmp(p, db->secret, sl)) {
            buf_adds(&b, "***");
            p += sl;
        } else {
            buf_addch(&b, *p++);
        }
    }
    while (b.len && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == ' '))
        b.data[--b.len] = 0;
    free(db->err);
    db->err = buf_detach(&b, NULL);
    if (!db->err)
        db->err = xstrdup("");
}

/* The URL's password (percent-encoded as given), or NULL. */
static char *url_secret(const char *url)
{
    const char *a = strstr(url, "://");
    a = a ? a + 3 : url;
    size_t n = strcspn(a, "/?#");
    const char *at = NULL;
    for (const char *q = a; q < a + n; q++)
        if (*q == '@')
            at = q;
    if (!at)
        return NULL;
    const char *colon = memchr(a, ':', (size_t)(at - a));
    if (!colon || colon + 1 == at)
        return NULL;
    return xstrndup(colon + 1, (size_t)(at - colon - 1));
}

/* SQLite's code for a PostgreSQL error state. */
static int code_of(const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!s)
        return DB_ERROR;
    if (!strncmp(s, "23", 2))
        return DB_CONSTRAINT;
    if (!strcmp(s, "40001") || !strcmp(s, "40P01") || !strcmp(s, "55P03") ||
        !strcmp(s, "57014"))
        return DB_BUSY;
    if (!strcmp(s, "25006"))
        return DB_READONLY;
    return DB_ERROR;
}

/* Whether a PostgreSQL error state is the server's going away: class 08
 * (connection exception), or 57P01-57P03 (an administrator's shutdown, a
 * crash shutdown, not accepting connections now). */
static bool state_gone(const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return s && (!strncmp(s, "08", 2) || !strcmp(s, "57P01") ||
                 !strcmp(s, "57P02") || !strcmp(s, "57P03"));
}

static int fail_res(struct pg *db, PGresult *r)
{
    const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    set_err(db, m ? m : PQerrorMessage(db->c));
    db->gone = state_gone(r) || PQstatus(db->c) != CONNECTION_OK;
    int rc = code_of(r);
    PQclear(r);
    return rc;
}

/* ---- connection ---- */

static void note_txn(struct pg *db)
{
    PGTransactionStatusType t = PQtransactionStatus(db->c);
    /* a connection lost says PQTRANS_UNKNOWN: a transaction open on it
     * stays open for ready() until the caller's ROLLBACK, so that no
     * statement of it runs on a new connection, outside it (committed at
     * once, with the rows it refers to gone) */
    if (t != PQTRANS_UNKNOWN)
        db->txn = t == PQTRANS_INTRANS || t == PQTRANS_INERROR;
}

static int setup(struct pg *db)
{
    char sql[64];
    snprintf(sql, sizeof(sql), "SET lock_timeout = %d", db->lock_ms);
    PGresult *r = PQexec(db->c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        return fail_res(db, r);
    PQclear(r);
    return DB_OK;
}

static bool is_rollback(const char *sql);

/* Before a statement: a connection that was lost is made again, unless a
 * transaction was open on it (its statements are gone: the caller must
 * roll back first, which then succeeds). */
static int ready(struct pg *db, enum kind k, const char *sql)
{
    if (PQstatus(db->c) == CONNECTION_OK)
        return DB_OK;
    if (db->txn) {
        if (k == K_TXN && is_rollback(sql)) {
            db->txn = false;
            return DB_DONE; /* nothing to undo on a new connection */
        }
        set_err(db, "the connection to the server was lost during a "
                    "transaction");
        db->gone = true;
        return DB_ERROR;
    }
    PQreset(db->c);
    if (PQstatus(db->c) != CONNECTION_OK) {
        set_err(db, PQerrorMessage(db->c));
        db->gone = true;
        return DB_ERROR;
    }
    db->gen++;
    return setup(db);
}

/* The server's notices (a CREATE TABLE IF NOT EXISTS of a table that
 * exists) are not errors: nothing is printed. */
static void quiet(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

int db_pg_open(const char *url, struct db **out, struct diag *d)
{
    *out = NULL;
    /* in order, the last of a key winning: what comes before the URL is
     * a default that the URL may override, what comes after it is not.
     * Over TCP, a server that is gone without a word (its host down, the
     * network cut) is found in about 10 s, not in the kernel's hours: a
     * statement sent but not acknowledged for 10 s (tcp_user_timeout), or
     * an idle wait for an answer whose peer misses 3 keepalive probes
     * after 5 s (keepalives_*, all libpq's keywords, ignored on a Unix
     * socket). The connection is then lost as for a reset (db_is_lost),
     * instead of record's writer waiting for it. */
    const char *keys[] = {"connect_timeout",  "keepalives",
                          "keepalives_idle",  "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout",
                          "application_name", "dbname",
                          "client_encoding",  NULL};
    const char *vals[] = {"10",    "1",        "5", "2",    "3",
                          "10000", "fidelity", url, "UTF8", NULL};
    struct pg *db = xcalloc(1, sizeof(*db));
    db->head.ops = &ops;
    db->shown = url_mask(url);
    db->secret = url_secret(url);
    db->lock_ms = 5000;
    db->gen = 1;
    pthread_mutex_init(&db->mu, NULL);
    db->c = PQconnectdbParams(keys, vals, 1);
    if (!db->c || PQstatus(db->c) != CONNECTION_OK) {
        set_err(db, db->c ? PQerrorMessage(db->c) : "out of memory");
        diag_set(d, EIO, "cannot open '%s': %s", db->shown, db->err);
        db->head.ops->close(&db->head);
        return -EIO;
    }
    PQsetNoticeProcessor(db->c, quiet, NULL);
    if (setup(db) != DB_OK) {
        diag_set(d, EIO, "cannot open '%s': %s", db->shown, db->err);
        db->head.ops->close(&db->head);
        return -EIO;
    }
    *out = &db->head;
    return 0;
}

/* ---- the catalog ---- */

static void tables_free(struct pg *db)
{
    while (db->tables) {
        struct table *t = db->tables;
        db->tables = t->next;
        for (int i = 0; i < t->ncols; i++)
            free(t->cols[i]);
        free(t->cols);
        free(t->pk);
        free(t->name);
        free(t);
    }
}

/* Table name's columns, from this connection's cache or the catalog; NULL
 * when there is no such table. */
static struct table *table_get(struct pg *db, const char *name)
{
    for (struct table *t = db->tables; t; t = t->next)
        if (!strcmp(t->name, name))
            return t;
    const char *v[1] = {name};
    PGresult *r = PQexecParams(
        db->c,
        "SELECT a.attname, COALESCE(a.attnum = ANY(i.indkey), false),"
        " a.atttypid FROM pg_attribute a LEFT JOIN pg_index i"
        " ON i.indrelid = a.attrelid AND i.indisprimary"
        " WHERE a.attrelid = (SELECT c.oid FROM pg_class c"
        " WHERE c.relname = $1 AND pg_table_is_visible(c.oid) LIMIT 1)"
        " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        1, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) == 0) {
        PQclear(r);
        return NULL;
    }
    struct table *t = xcalloc(1, sizeof(*t));
    t->name = xstrdup(name);
    t->ncols = PQntuples(r);
    t->cols = xcalloc((size_t)t->ncols, sizeof(*t->cols));
    t->pk = xcalloc((size_t)t->ncols, sizeof(*t->pk));
    int npk = 0, id = -1;
    for (int i = 0; i < t->ncols; i++) {
        t->cols[i] = xstrdup(PQgetvalue(r, i, 0));
        t->pk[i] = PQgetvalue(r, i, 1)[0] == 't';
        if (t->pk[i]) {
            npk++;
            Oid ty = (Oid)strtoul(PQgetvalue(r, i, 2), NULL, 10);
            if (ty == OID_INT8 || ty == OID_INT4 || ty == OID_INT2)
                id = i;
        }
    }
    if (npk == 1 && id >= 0)
        t->id_col = t->cols[id];
    PQclear(r);
    t->next = db->tables;
    db->tables = t;
    return t;
}

/* ---- translation ---- */

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           (unsigned char)c >= 0x80;
}

static bool is_word(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && !strncasecmp(s, w, n);
}

/* Skips white space and comments. */
static const char *skip_ws(const char *p)
{
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (p[0] == '-' && p[1] == '-') {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

/* The next word at p (after white space): its start and length; 0 when
 * what follows is not a word. */
static size_t next_word(const char *p, const char **w)
{
    p = skip_ws(p);
    *w = p;
    size_t n = 0;
    while (word_char(p[n]))
        n++;
    return n;
}

/* Whether sql is a ROLLBACK of the whole transaction ([WORK|TRANSACTION],
 * not TO a savepoint, which leaves the transaction open). */
static bool is_rollback(const char *sql)
{
    const char *w;
    size_t n = next_word(sql, &w);
    if (!is_word(w, n, "ROLLBACK"))
        return false;
    const char *p = w + n;
    n = next_word(p, &w);
    if (is_word(w, n, "WORK") || is_word(w, n, "TRANSACTION"))
        p = w + n;
    p = skip_ws(p);
    return *p == '\0' || *p == ';';
}

struct xl {
    struct buf out;
    enum kind kind;
    int np;             /* highest parameter number */
    int conflict;       /* 0, 'I' ignore, 'R' replace */
    char table[64];     /* INSERT's table, folded as PostgreSQL folds */
    bool has_returning; /* the statement has its own RETURNING */
    bool pragma;        /* translate: one of the statements is a PRAGMA */
};

static enum kind kind_of(const char *w, size_t n)
{
    if (is_word(w, n, "SELECT") || is_word(w, n, "WITH") ||
        is_word(w, n, "VALUES"))
        return K_QUERY;
    if (is_word(w, n, "INSERT") || is_word(w, n, "REPLACE"))
        return K_INSERT;
    if (is_word(w, n, "UPDATE") || is_word(w, n, "DELETE"))
        return K_WRITE;
    if (is_word(w, n, "CREATE") || is_word(w, n, "ALTER") ||
        is_word(w, n, "DROP"))
        return K_DDL;
    if (is_word(w, n, "COMMIT") || is_word(w, n, "END"))
        return K_COMMIT;
    if (is_word(w, n, "BEGIN") || is_word(w, n, "ROLLBACK") ||
        is_word(w, n, "SAVEPOINT") || is_word(w, n, "RELEASE"))
        return K_TXN;
    if (is_word(w, n, "PRAGMA"))
        return K_PRAGMA;
    return K_OTHER;
}

/* Reads the table name after INTO at p into x->table. */
static void take_table(struct xl *x, const char *p)
{
    p = skip_ws(p);
    size_t n = 0;
    if (*p == '"') {
        const char *e = strchr(p + 1, '"');
        n = e ? (size_t)(e - p - 1) : 0;
        p++;
        if (n < sizeof(x->table)) {
            memcpy(x->table, p, n);
            x->table[n] = 0;
        }
        return;
    }
    while (word_char(p[n]) || p[n] == '.')
        n++;
    const char *dot = memchr(p, '.', n); /* schema.table: the table */
    if (dot) {
        n -= (size_t)(dot + 1 - p);
        p = dot + 1;
    }
    if (n >= sizeof(x->table))
        n = 0;
    for (size_t i = 0; i < n; i++)
        x->table[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
    x->table[n] = 0;
}

/* Translates one statement from *pp up to its ';' (consumed, not copied)
 * or the end into x->out. */
static void translate_one(const char **pp, struct xl *x)
{
    const char *p = skip_ws(*pp);
    const char *w;
    size_t wn = next_word(p, &w);
    x->kind = kind_of(w, wn);
    bool first = true;
    while (*p && *p != ';') {
        char c = *p;
        if (c == '\'' || c == '"') { /* a string or a quoted identifier */
            const char *s = p++;
            while (*p) {
                if (*p == c && p[1] == c)
                    p += 2;
                else if (*p == c) {
                    p++;
                    break;
                } else
                    p++;
            }
            buf_add(&x->out, s, (size_t)(p - s));
            continue;
        }
        if ((c == '-' && p[1] == '-') || (c == '/' && p[1] == '*')) {
            const char *e = skip_ws(p);
            buf_addch(&x->out, ' ');
            p = e;
            continue;
        }
        if (c == '?') {
            p++;
            int n = 0;
            if (*p >= '0' && *p <= '9') {
                while (*p >= '0' && *p <= '9')
                    n = n * 10 + (*p++ - '0');
            } else {
                n = x->np + 1;
            }
            if (n > x->np)
                x->np = n;
            buf_printf(&x->out, "$%d", n);
            continue;
        }
        if (!word_char(c) || (c >= '0' && c <= '9')) {
            if (c >= '0' && c <= '9') /* a number, as it is */
                while (word_char(*p) || *p == '.')
                    buf_addch(&x->out, *p++);
            else
                buf_addch(&x->out, *p++);
            continue;
        }
        size_t n = 0;
        while (word_char(p[n]))
            n++;
        const char *tok = p;
        p += n;
        bool was_first = first;
        first = false;
        if (x->kind == K_DDL && is_word(tok, n, "INTEGER")) {
            const char *w1, *w2;
            size_t n1 = next_word(p, &w1);
            size_t n2 = n1 ? next_word(w1 + n1, &w2) : 0;
            if (is_word(w1, n1, "PRIMARY") && is_word(w2, n2, "KEY")) {
                buf_adds(&x->out, "BIGINT GENERATED BY DEFAULT AS IDENTITY"
                                  " PRIMARY KEY");
                p = w2 + n2;
            } else {
                buf_adds(&x->out, "BIGINT");
            }
        } else if (is_word(tok, n, "INTEGER")) {
            buf_adds(&x->out, "BIGINT");
        } else if (is_word(tok, n, "REAL")) {
            buf_adds(&x->out, "DOUBLE PRECISION");
        } else if (is_word(tok, n, "BLOB")) {
            buf_adds(&x->out, "BYTEA");
        } else if (is_word(tok, n, "rowid")) {
            buf_adds(&x->out, "ctid");
        } else if (is_word(tok, n, "ifnull") && *skip_ws(p) == '(') {
            buf_adds(&x->out, "coalesce");
        } else if (is_word(tok, n, "instr") && *skip_ws(p) == '(') {
            buf_adds(&x->out, "strpos");
        } else if (x->kind == K_TXN && is_word(tok, n, "BEGIN")) {
            buf_adds(&x->out, "BEGIN");
            const char *w1;
            size_t n1 = next_word(p, &w1);
            if (is_word(w1, n1, "IMMEDIATE") || is_word(w1, n1, "DEFERRED") ||
                is_word(w1, n1, "EXCLUSIVE"))
                p = w1 + n1;
        } else if (x->kind == K_INSERT && was_first &&
                   is_word(tok, n, "REPLACE")) { /* REPLACE INTO */
            buf_adds(&x->out, "INSERT");
            x->conflict = 'R';
        } else if (x->kind == K_INSERT && was_first) {
            buf_adds(&x->out, "INSERT");
            const char *w1, *w2;
            size_t n1 = next_word(p, &w1);
            size_t n2 = n1 ? next_word(w1 + n1, &w2) : 0;
            if (is_word(w1, n1, "OR") && n2) {
                if (is_word(w2, n2, "IGNORE"))
                    x->conflict = 'I';
                else if (is_word(w2, n2, "REPLACE"))
                    x->conflict = 'R';
                p = w2 + n2;
            }
        } else if (x->kind == K_INSERT && !x->table[0] &&
                   is_word(tok, n, "INTO")) {
            buf_add(&x->out, tok, n);
            take_table(x, p);
        } else {
            if (is_word(tok, n, "RETURNING"))
                x->has_returning = true;
            buf_add(&x->out, tok, n);
        }
    }
    if (*p == ';')
        p++;
    *pp = p;
    /* trailing white space off, for the clauses appended after */
    while (x->out.len && (x->out.data[x->out.len - 1] == ' ' ||
                          x->out.data[x->out.len - 1] == '\n'))
        x->out.data[--x->out.len] = 0;
}

/* The ON CONFLICT and RETURNING clauses of an INSERT; *returning says
 * whether RETURNING of the id column was added. */
static void insert_tail(struct pg *db, struct xl *x, bool *returning)
{
    struct table *t = x->table[0] ? table_get(db, x->table) : NULL;
    *returning = false;
    if (x->conflict == 'I') {
        buf_adds(&x->out, " ON CONFLICT DO NOTHING");
    } else if (x->conflict == 'R' && t) {
        buf_adds(&x->out, " ON CONFLICT (");
        bool any = false, set = false;
        for (int i = 0; i < t->ncols; i++) {
            if (t->pk[i]) {
                buf_printf(&x->out, "%s\"%s\"", any ? ", " : "", t->cols[i]);
                any = true;
            }
        }
        buf_adds(&x->out, ")");
        for (int i = 0; i < t->ncols; i++) {
            if (!t->pk[i]) {
                buf_printf(&x->out, "%s\"%s\" = EXCLUDED.\"%s\"",
                           set ? ", " : " DO UPDATE SET ", t->cols[i],
                           t->cols[i]);
                set = true;
            }
        }
        if (!set)
            buf_adds(&x->out, " DO NOTHING");
        if (!any) { /* no primary key: no conflict to resolve */
            x->out.len = 0;
        }
    }
    if (t && t->id_col && !x->has_returning) {
        buf_printf(&x->out, " RETURNING \"%s\"", t->id_col);
        *returning = true;
    }
}

/* Translates sql. Returns the first statement's kind; for a single
 * statement (prepare) the INSERT clauses are added. */
static char *translate(struct pg *db, const char *sql, bool many, struct xl *x0,
                       bool *returning)
{
    struct buf all = BUF_INIT;
    const char *p = sql;
    bool first = true, pragma = false;
    *returning = false;
    memset(x0, 0, sizeof(*x0));
    while (*(p = skip_ws(p))) {
        struct xl x;
        memset(&x, 0, sizeof(x));
        translate_one(&p, &x);
        if (x.kind == K_DDL)
            tables_free(db); /* columns may change */
        if (x.kind == K_PRAGMA)
            pragma = true;
        if (x.kind == K_INSERT) {
            size_t keep = x.out.len;
            char *save = xstrdup(buf_str(&x.out));
            bool ret;
            insert_tail(db, &x, &ret);
            if (!x.out.len && keep) { /* REPLACE without a key: plain */
                buf_adds(&x.out, save);
                ret = false;
            }
            free(save);
            if (first)
                *returning = ret;
        }
        if (first) {
            *x0 = x;
            x0->out = (struct buf)BUF_INIT;
        }
        if (all.len)
            buf_adds(&all, ";\n");
        buf_add(&all, buf_str(&x.out), x.out.len);
        buf_release(&x.out);
        first = false;
        if (!many)
            break;
    }
    x0->pragma = pragma;
    char *s = buf_detach(&all, NULL);
    return s ? s : xstrdup("");
}

/* ---- statements ---- */

static void param_clear(struct param *p)
{
    free(p->own);
    if (p->del && p->how && p->how != DB_TRANSIENT)
        p->how(p->del);
    memset(p, 0, sizeof(*p));
}

static void result_clear(struct pg_stmt *s)
{
    for (int i = 0; s->dec && i < s->ncols; i++)
        free(s->dec[i]);
    free(s->dec);
    free(s->declen);
    s->dec = NULL;
    s->declen = NULL;
    s->ncols = 0;
    PQclear(s->res);
    s->res = NULL;
    s->row = s->nrows = 0;
    s->ran = false;
}

static int prepare_(struct db *dbh, const char *sql, bool persistent,
                    struct db_stmt **out)
{
    struct pg *db = PG(dbh);
    struct xl x;
    bool returning;
    *out = NULL;
    if (!*skip_ws(sql)) {
        set_err(db, "not an SQL statement");
        return 21; /* SQLITE_MISUSE */
    }
    char *t = translate(db, sql, false, &x, &returning);
    if (x.kind == K_PRAGMA) {
        set_err(db, "PRAGMA is SQLite's: a PostgreSQL store has none");
        free(t);
        return DB_ERROR;
    }
    struct pg_stmt *s = xcalloc(1, sizeof(*s));
    s->head.ops = &ops;
    s->db = db;
    s->sql = t;
    s->kind = x.kind;
    s->persistent = persistent;
    s->returning = returning;
    s->np = x.np;
    size_t np = (size_t)(s->np ? s->np : 1);
    s->p = xcalloc(np, sizeof(*s->p));
    s->a_types = xcalloc(np, sizeof(*s->a_types));
    s->a_vals = xcalloc(np, sizeof(*s->a_vals));
    s->a_lens = xcalloc(np, sizeof(*s->a_lens));
    s->a_fmts = xcalloc(np, sizeof(*s->a_fmts));
    *out = &s->head;
    return DB_OK;
}

static struct param *slot(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (i < 1 || i > s->np)
        return NULL;
    struct param *p = &s->p[i - 1];
    param_clear(p);
    return p;
}

#define DB_RANGE 25

static int bind_int64(struct db_stmt *st, int i, int64_t v)
{
    struct param *p = slot(st, i);
    if (!p)
        return DB_RANGE;
    p->type = OID_INT8;
    p->len = snprintf(p->num, sizeof(p->num), "%" PRId64, v);
    p->val = p->num;
    return DB_OK;
}

static int bind_null(struct db_stmt *st, int i)
{
    return slot(st, i) ? DB_OK : DB_RANGE;
}

static int bind_double(struct db_stmt *st, int i, double v)
{
    if (isnan(v)) /* as SQLite: NaN is stored as NULL */
        return bind_null(st, i);
    struct param *p = slot(st, i);
    if (!p)
        return DB_RANGE;
    p->type = OID_FLOAT8;
    if (isinf(v))
        p->len =
            snprintf(p->num, sizeof(p->num), "%sInfinity", v < 0 ? "-" : "");
    else
        p->len = snprintf(p->num, sizeof(p->num), "%.17g", v);
    p->val = p->num;
    return DB_OK;
}

static int bind_text(struct db_stmt *st, int i, const char *s, int n,
                     db_destructor how)
{
    struct param *p = slot(st, i);
    if (!p) {
        if (s && how && how != DB_TRANSIENT)
            how((void *)s);
        return DB_RANGE;
    }
    if (!s)
        return DB_OK;
    p->type = 0; /* the server infers it */
    if (n < 0) {
        p->len = (int)strlen(s);
        if (how == DB_TRANSIENT) {
            p->own = xstrdup(s);
            p->val = p->own;
        } else {
            p->val = s;
            p->del = (void *)s;
            p->how = how;
        }
    } else {
        /* text parameters are NUL-terminated: a copy */
        p->own = xstrndup(s, (size_t)n);
        p->val = p->own;
        p->len = (int)strlen(p->own);
        if (how && how != DB_TRANSIENT)
            how((void *)s);
    }
    return DB_OK;
}

static int bind_blob(struct db_stmt *st, int i, const void *b, int n,
                     db_destructor how)
{
    struct param *p = slot(st, i);
    if (!p) {
        if (b && how && how != DB_TRANSIENT)
            how((void *)b);
        return DB_RANGE;
    }
    if (!b)
        return DB_OK;
    p->type = OID_BYTEA;
    p->fmt = 1;
    p->len = n < 0 ? 0 : n;
    if (how == DB_TRANSIENT) {
        p->own = xmalloc((size_t)p->len + 1);
        memcpy(p->own, b, (size_t)p->len);
        p->val = p->own;
    } else {
        p->val = b;
        p->del = (void *)b;
        p->how = how;
    }
    return DB_OK;
}

/* Whether the statement prepared on the server takes the bound types. */
static bool types_fit(const struct pg_stmt *s)
{
    for (int i = 0; i < s->np; i++) {
        const struct param *p = &s->p[i];
        Oid want = s->prep_types[i];
        if (!p->val || p->type == want)
            continue;
        if (p->fmt) /* binary: only as what it is */
            return false;
        /* text the server parses as its type; but a double is no integer */
        if (p->type == OID_FLOAT8 &&
            (want == OID_INT8 || want == OID_INT4 || want == OID_INT2))
            return false;
    }
    return true;
}

/* Runs the statement, its result in s->res. */
static PGresult *run(struct pg_stmt *s)
{
    struct pg *db = s->db;
    int n = s->np;
    Oid *types = s->a_types;
    const char **vals = s->a_vals;
    int *lens = s->a_lens, *fmts = s->a_fmts;
    for (int i = 0; i < n; i++) {
        types[i] = s->p[i].val ? s->p[i].type : 0;
        vals[i] = s->p[i].val;
        lens[i] = s->p[i].len;
        fmts[i] = s->p[i].fmt;
    }
    if (s->persistent) {
        if (s->prep_gen != db->gen) {
            snprintf(s->name, sizeof(s->name), "fid_%lu", ++db->names);
            PGresult *r = PQprepare(db->c, s->name, s->sql, n, types);
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                return r;
            PQclear(r);
            /* the types the server took or inferred (a NULL's, say, from
             * its column), which later uses are checked against */
            free(s->prep_types);
            s->prep_types = xmalloc(sizeof(Oid) * (size_t)(n ? n : 1));
            memcpy(s->prep_types, types, sizeof(Oid) * (size_t)n);
            r = PQdescribePrepared(db->c, s->name);
            if (PQresultStatus(r) == PGRES_COMMAND_OK && PQnparams(r) == n)
                for (int i = 0; i < n; i++)
                    s->prep_types[i] = PQparamtype(r, i);
            PQclear(r);
            s->prep_gen = db->gen;
        }
        if (types_fit(s))
            return PQexecPrepared(db->c, s->name, n, vals, lens, fmts, 0);
    }
    return PQexecParams(db->c, s->sql, n, types, vals, lens, fmts, 0);
}

static PGresult *exec_simple(struct pg *db, const char *sql)
{
    return PQexec(db->c, sql);
}

/* Whether a statement of kind k runs in a savepoint of its own. */
static bool guarded(struct pg *db, enum kind k, bool persistent)
{
    return !persistent && k != K_TXN && k != K_COMMIT &&
           PQtransactionStatus(db->c) == PQTRANS_INTRANS;
}

static void unguard(struct pg *db, bool ok)
{
    PQclear(exec_simple(db, ok ? "RELEASE fid_stmt"
                               : "ROLLBACK TO fid_stmt; RELEASE fid_stmt"));
}

/* Takes what an executed statement's result tells; DB_OK or an error. */
static int took(struct pg *db, enum kind k, PGresult *r)
{
    ExecStatusType es = PQresultStatus(r);
    if (es != PGRES_COMMAND_OK && es != PGRES_TUPLES_OK)
        return DB_ERROR;
    if (k == K_COMMIT && !strcmp(PQcmdStatus(r), "ROLLBACK")) {
        set_err(db, "the transaction was rolled back, as a statement in it "
                    "failed");
        return DB_ABORT;
    }
    if (k == K_INSERT || k == K_WRITE)
        db->changes = atoi(PQcmdTuples(r));
    if (k != K_TXN && k != K_COMMIT)
        db->gone = false;
    return DB_OK;
}

static int step_(struct db_stmt *st)
{
    struct pg_stmt *s = ST(st);
    struct pg *db = s->db;
    if (s->ran) {
        if (s->row + 1 < s->nrows) {
            s->row++;
            for (int i = 0; s->dec && i < s->ncols; i++) {
                free(s->dec[i]);
                s->dec[i] = NULL;
            }
            return DB_ROW;
        }
        result_clear(s); /* done: the next step runs it again */
        return DB_DONE;
    }
    result_clear(s);
    int rc = ready(db, s->kind, s->sql);
    if (rc != DB_OK) {
        s->ran = rc == DB_DONE;
        return rc == DB_DONE ? DB_DONE : rc;
    }
    bool g = guarded(db, s->kind, s->persistent);
    if (g) {
        PGresult *r = exec_simple(db, "SAVEPOINT fid_stmt");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = fail_res(db, r);
            note_txn(db);
            return rc;
        }
        PQclear(r);
    }
    PGresult *r = run(s);
    rc = took(db, s->kind, r);
    if (rc == DB_ERROR) {
        rc = fail_res(db, r);
        r = NULL;
    } else if (rc != DB_OK) {
        PQclear(r);
        r = NULL;
    }
    if (g)
        unguard(db, rc == DB_OK);
    note_txn(db);
    if (rc != DB_OK)
        return rc;
    if (s->returning) {
        if (PQntuples(r) > 0)
            db->last_id = strtoll(PQgetvalue(r, PQntuples(r) - 1, 0), NULL, 10);
        PQclear(r);
        return DB_DONE;
    }
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) == 0) {
        PQclear(r);
        return DB_DONE;
    }
    s->res = r;
    s->ran = true;
    s->nrows = PQntuples(r);
    s->row = 0;
    s->ncols = PQnfields(r);
    s->dec = xcalloc((size_t)s->ncols, sizeof(*s->dec));
    s->declen = xcalloc((size_t)s->ncols, sizeof(*s->declen));
    return DB_ROW;
}

/* ---- columns ---- */

static bool col_ok(struct pg_stmt *s, int i)
{
    return s->res && i >= 0 && i < s->ncols;
}

static bool col_null(struct pg_stmt *s, int i)
{
    return !col_ok(s, i) || PQgetisnull(s->res, s->row, i);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Column i's bytes: a bytea decoded (cached for the row), else its text. */
static const char *col_bytes(struct pg_stmt *s, int i, size_t *len)
{
    const char *v = PQgetvalue(s->res, s->row, i);
    Oid t = PQftype(s->res, i);
    if (t == OID_BOOL) {
        *len = 1;
        return v[0] == 't' ? "1" : "0";
    }
    if (t != OID_BYTEA) {
        *len = (size_t)PQgetlength(s->res, s->row, i);
        return v;
    }
    if (!s->dec[i]) {
        size_t n = (size_t)PQgetlength(s->res, s->row, i);
        if (n >= 2 && v[0] == '\\' && v[1] == 'x') {
            unsigned char *o = xmalloc((n - 2) / 2 + 1);
            size_t k = 0;
            for (size_t j = 2; j + 1 < n; j += 2) {
                int hi = hexval(v[j]), lo = hexval(v[j + 1]);
                if (hi < 0 || lo < 0)
                    break;
                o[k++] = (unsigned char)(hi << 4 | lo);
            }
            o[k] = 0;
            s->dec[i] = o;
            s->declen[i] = k;
        } else { /* the escape format */
            size_t k = 0;
            unsigned char *u = PQunescapeBytea((const unsigned char *)v, &k);
            unsigned char *o = xmalloc(k + 1);
            if (u)
                memcpy(o, u, k);
            else
                k = 0;
            o[k] = 0;
            PQfreemem(u);
            s->dec[i] = o;
            s->declen[i] = k;
        }
    }
    *len = s->declen[i];
    return (const char *)s->dec[i];
}

static bool looks_float(const char *v)
{
    return strpbrk(v, ".eEnN") != NULL; /* NaN, Infinity, 1.5, 1e300 */
}

static int64_t column_int64(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return 0;
    size_t n;
    const char *v = col_bytes(s, i, &n);
    if (looks_float(v))
        return (int64_t)strtod(v, NULL);
    return strtoll(v, NULL, 10);
}

static double column_double(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return 0;
    size_t n;
    return strtod(col_bytes(s, i, &n), NULL);
}

static const unsigned char *column_text(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return NULL;
    size_t n;
    return (const unsigned char *)col_bytes(s, i, &n);
}

static const void *column_blob(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return NULL;
    size_t n;
    const char *v = col_bytes(s, i, &n);
    return n ? v : NULL; /* as SQLite: an empty blob is NULL */
}

static int column_bytes(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return 0;
    size_t n;
    col_bytes(s, i, &n);
    return (int)n;
}

static int column_type(struct db_stmt *st, int i)
{
    struct pg_stmt *s = ST(st);
    if (col_null(s, i))
        return DB_NULL;
    switch (PQftype(s->res, i)) {
    case OID_BOOL:
    case OID_INT2:
    case OID_INT4:
    case OID_INT8:
    case OID_OID:
        return DB_INTEGER;
    case OID_FLOAT4:
    case OID_FLOAT8:
        return DB_FLOAT;
    case OID_NUMERIC:
        return looks_float(PQgetvalue(s->res, s->row, i)) ? DB_FLOAT
                                                          : DB_INTEGER;
    case OID_BYTEA:
        return DB_BLOB;
    default:
        return DB_TEXT;
    }
}

static int reset(struct db_stmt *st)
{
    result_clear(ST(st));
    return DB_OK;
}

static int clear_bindings(struct db_stmt *st)
{
    struct pg_stmt *s = ST(st);
    for (int i = 0; i < s->np; i++)
        param_clear(&s->p[i]);
    return DB_OK;
}

static int finalize_(struct db_stmt *st)
{
    struct pg_stmt *s = ST(st);
    result_clear(s);
    clear_bindings(st);
    if (s->persistent && s->prep_gen == s->db->gen &&
        PQstatus(s->db->c) == CONNECTION_OK &&
        PQtransactionStatus(s->db->c) != PQTRANS_INERROR) {
        char sql[64];
        snprintf(sql, sizeof(sql), "DEALLOCATE %s", s->name);
        PQclear(exec_simple(s->db, sql));
    }
    free(s->prep_types);
    free(s->p);
    free(s->a_types);
    free(s->a_vals);
    free(s->a_lens);
    free(s->a_fmts);
    free(s->sql);
    free(s);
    return DB_OK;
}

/* ---- the connection's own calls ---- */

static int exec_(struct db *dbh, const char *sql, char **err)
{
    struct pg *db = PG(dbh);
    struct xl x;
    bool returning;
    char *t = translate(db, sql, true, &x, &returning);
    int rc = DB_OK;
    if (x.pragma) {
        set_err(db, "PRAGMA is SQLite's: a PostgreSQL store has none");
        rc = DB_ERROR;
        goto out;
    }
    if (!*t)
        goto out;
    rc = ready(db, x.kind, t);
    if (rc == DB_DONE) {
        rc = DB_OK;
        goto out;
    }
    if (rc != DB_OK)
        goto out;
    bool g = guarded(db, x.kind, false);
    PGresult *r;
    if (g) { /* apart, so that r is the statement's own result */
        r = exec_simple(db, "SAVEPOINT fid_stmt");
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            rc = fail_res(db, r);
            note_txn(db);
            goto out;
        }
        PQclear(r);
    }
    r = exec_simple(db, t);
    rc = took(db, x.kind, r);
    if (rc == DB_ERROR) {
        rc = fail_res(db, r);
    } else {
        if (rc == DB_OK && returning && PQresultStatus(r) == PGRES_TUPLES_OK &&
            PQntuples(r) > 0)
            db->last_id = strtoll(PQgetvalue(r, PQntuples(r) - 1, 0), NULL, 10);
        PQclear(r);
    }
    if (g)
        unguard(db, rc == DB_OK);
    note_txn(db);
out:
    if (rc != DB_OK && err)
        *err = xstrdup(db->err ? db->err : db_errstr(rc));
    free(t);
    return rc;
}

static const char *errmsg(struct db *dbh)
{
    struct pg *db = PG(dbh);
    return db->err ? db->err : "not an error";
}

static int64_t last_insert_rowid(struct db *dbh)
{
    return PG(dbh)->last_id;
}

static int changes(struct db *dbh)
{
    return PG(dbh)->changes;
}

/* SQLite's busy timeout is how long a statement waits for another
 * writer's lock: PostgreSQL's lock_timeout. */
static void busy_timeout_(struct db *dbh, int ms)
{
    struct pg *db = PG(dbh);
    db->lock_ms = ms < 0 ? 0 : ms;
    if (PQstatus(db->c) == CONNECTION_OK &&
        PQtransactionStatus(db->c) != PQTRANS_INERROR)
        setup(db);
}

static bool query_bool_(struct pg *db, const char *sql, const char *arg)
{
    const char *v[1] = {arg};
    if (PQstatus(db->c) != CONNECTION_OK)
        return false;
    PGresult *r = PQexecParams(db->c, sql, arg ? 1 : 0, NULL, v, NULL, NULL, 0);
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0 &&
               PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return yes;
}

static bool query_bool(struct pg *db, const char *sql, const char *arg);

static bool is_readonly(struct db *dbh)
{
    return query_bool(PG(dbh),
                      "SELECT current_setting('transaction_read_only') = 'on'"
                      " OR pg_is_in_recovery()",
                      NULL);
}

static bool has_table(struct db *dbh, const char *name)
{
    return query_bool(PG(dbh),
                      "SELECT true FROM pg_class c WHERE c.relname = $1"
                      " AND c.relkind IN ('r', 'p')"
                      " AND pg_table_is_visible(c.oid)",
                      name);
}

static bool has_column_(struct db *dbh, const char *table, const char *column)
{
    struct pg *db = PG(dbh);
    const char *v[2] = {table, column};
    if (PQstatus(db->c) != CONNECTION_OK)
        return false;
    PGresult *r = PQexecParams(
        db->c,
        "SELECT true FROM pg_attribute a JOIN pg_class c"
        " ON c.oid = a.attrelid WHERE c.relname = $1 AND a.attname = $2"
        " AND a.attnum > 0 AND NOT a.attisdropped"
        " AND pg_table_is_visible(c.oid)",
        2, NULL, v, NULL, NULL, 0);
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    PQclear(r);
    return yes;
}

/* PostgreSQL has no counter of changes a client could read cheaply. */
static unsigned int data_version(struct db *dbh)
{
    (void)dbh;
    return 0;
}

static bool is_lost(struct db *dbh)
{
    struct pg *db = PG(dbh);
    pthread_mutex_lock(&db->mu);
    bool lost = db->gone || PQstatus(db->c) != CONNECTION_OK;
    pthread_mutex_unlock(&db->mu);
    return lost;
}

static int wal_hook(struct db *dbh, int (*fn)(void *arg, int pages), void *arg)
{
    (void)dbh;
    (void)fn;
    (void)arg;
    return -ENOTSUP;
}

static int checkpoint(struct db *dbh)
{
    (void)dbh;
    return -ENOTSUP;
}

static void close_db(struct db *dbh)
{
    struct pg *db = PG(dbh);
    PQfinish(db->c);
    tables_free(db);
    free(db->shown);
    free(db->secret);
    free(db->err);
    pthread_mutex_destroy(&db->mu);
    free(db);
}

/* ---- the calls that talk to the server, one thread at a time ---- */

static int prepare(struct db *dbh, const char *sql, bool persistent,
                   struct db_stmt **out)
{
    pthread_mutex_lock(&PG(dbh)->mu);
    int rc = prepare_(dbh, sql, persistent, out);
    pthread_mutex_unlock(&PG(dbh)->mu);
    return rc;
}

static int step(struct db_stmt *st)
{
    struct pg *db = ST(st)->db;
    pthread_mutex_lock(&db->mu);
    int rc = step_(st);
    pthread_mutex_unlock(&db->mu);
    return rc;
}

static int finalize(struct db_stmt *st)
{
    struct pg *db = ST(st)->db;
    pthread_mutex_lock(&db->mu);
    int rc = finalize_(st);
    pthread_mutex_unlock(&db->mu);
    return rc;
}

static int exec(struct db *dbh, const char *sql, char **err)
{
    pthread_mutex_lock(&PG(dbh)->mu);
    int rc = exec_(dbh, sql, err);
    pthread_mutex_unlock(&PG(dbh)->mu);
    return rc;
}

static void busy_timeout(struct db *dbh, int ms)
{
    pthread_mutex_lock(&PG(dbh)->mu);
    busy_timeout_(dbh, ms);
    pthread_mutex_unlock(&PG(dbh)->mu);
}

static bool query_bool(struct pg *db, const char *sql, const char *arg)
{
    pthread_mutex_lock(&db->mu);
    bool yes = query_bool_(db, sql, arg);
    pthread_mutex_unlock(&db->mu);
    return yes;
}

static bool has_column(struct db *dbh, const char *table, const char *column)
{
    pthread_mutex_lock(&PG(dbh)->mu);
    bool yes = has_column_(dbh, table, column);
    pthread_mutex_unlock(&PG(dbh)->mu);
    return yes;
}

static const struct db_ops ops = {
    .backend = DB_POSTGRES,
    .prepare = prepare,
    .bind_int64 = bind_int64,
    .bind_double = bind_double,
    .bind_text = bind_text,
    .bind_blob = bind_blob,
    .bind_null = bind_null,
    .step = step,
    .column_int64 = column_int64,
    .column_double = column_double,
    .column_text = column_text,
    .column_blob = column_blob,
    .column_bytes = column_bytes,
    .column_type = column_type,
    .reset = reset,
    .clear_bindings = clear_bindings,
    .finalize = finalize,
    .exec = exec,
    /* one snapshot for every statement until COMMIT (READ COMMITTED,
     * PostgreSQL's default, takes one per statement) */
    .read_begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    .errmsg = errmsg,
    .last_insert_rowid = last_insert_rowid,
    .changes = changes,
    .busy_timeout = busy_timeout,
    .is_readonly = is_readonly,
    .has_table = has_table,
    .has_column = has_column,
    .data_version = data_version,
    .is_lost = is_lost,
    .wal_hook = wal_hook,
    .checkpoint = checkpoint,
    .close = close_db,
};
