/*
 * Tests for drift/pipe: the prefill arms on worker threads. Answers are
 * sglang texts built in memory (no server), for sequences of very
 * different lengths so that workers finish out of order; the analysis,
 * the stream of per-position records and the first error must be the same
 * with one thread and with several.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/hash.h"
#include "core/rng.h"
#include "drift/drift.h"

#define NSEQ 12

/* An sglang answer for ids[0..n) with top-5 lists, noise scaled by
 * position so that every arm differs. */
static char *answer(const uint32_t *ids, size_t n, double noise, uint64_t seed)
{
    struct rng r;
    struct buf top = BUF_INIT, tok = BUF_INIT, b = BUF_INIT;
    rng_seed(&r, seed);
    buf_adds(&top, "\"input_top_logprobs\":[null");
    buf_printf(&tok, "\"input_token_logprobs\":[[null,%u,null]", ids[0]);
    for (size_t t = 1; t < n; t++) {
        double z = 0, lg[5];
        for (int k = 0; k < 5; k++) {
            lg[k] =
                2.0 - 0.5 * k + noise * (double)t / 100 * (rng_unit(&r) - 0.5);
            z += exp(lg[k]);
        }
        buf_adds(&top, ",[");
        for (int k = 0; k < 5; k++) {
            uint32_t id = k == 2 ? ids[t] : (uint32_t)(900 + (t + k) % 50);
            double lp = lg[k] - log(z * 1.1);
            buf_printf(&top, "%s[%.17g,%u,null]", k ? "," : "", lp, id);
            if (k == 2)
                buf_printf(&tok, ",[%.17g,%u,null]", lp, id);
        }
        buf_adds(&top, "]");
    }
    buf_printf(&b, "{\"meta_info\":{%s],%s]}}", buf_str(&tok), buf_str(&top));
    buf_release(&top);
    buf_release(&tok);
    return buf_detach(&b, NULL);
}

struct src {
    struct drift_corpus corpus;
    char *text[NSEQ][DRIFT_PASSES];
    int fail_fetch, fail_parse; /* sequence numbers, -1 none */
    int fail_pass;              /* the pass fail_fetch fails; -1 every */
    bool one_server;            /* drift_pipe.one_server */
    pthread_mutex_t mu;
    size_t next[2]; /* checks the fetch order, per server */
    bool order_ok;
    int busy[2], most[2], most_both; /* requests in flight, per server */
    unsigned nap_us;                 /* each fetch takes this long */
    bool lent; /* the fetch lends s->text (drift_pipe.lent) */
};

/* Server of pass k: the golden's passes 0, 1 and the candidate's 2, 3,
 * or one server for all. */
static int server_of(const struct src *s, int pass)
{
    return s->one_server ? 0 : pass >= 2;
}

static int fetch(void *ud, size_t i, int pass, const struct drift_lp *golden,
                 char **text, size_t *len, struct diag *d)
{
    struct src *s = ud;
    int sv = server_of(s, pass);
    int per = s->one_server ? DRIFT_PASSES : 2;
    (void)golden;
    pthread_mutex_lock(&s->mu);
    size_t want = s->next[sv]++;
    if (want / (size_t)per != i ||
        (int)(want % (size_t)per) + (sv && !s->one_server ? 2 : 0) != pass)
        s->order_ok = false;
    s->busy[sv]++;
    if (s->busy[sv] > s->most[sv])
        s->most[sv] = s->busy[sv];
    if (s->busy[0] + s->busy[1] > s->most_both)
        s->most_both = s->busy[0] + s->busy[1];
    pthread_mutex_unlock(&s->mu);
    if (s->nap_us)
        usleep(s->nap_us);
    pthread_mutex_lock(&s->mu);
    s->busy[sv]--;
    pthread_mutex_unlock(&s->mu);
    if ((int)i == s->fail_fetch && (s->fail_pass < 0 || s->fail_pass == pass))
        return diag_set(d, ECONNREFUSED, "seq %zu pass %d unreachable", i,
                        pass);
    if ((int)i == s->fail_parse && pass == 2) {
        *text = strdup("{\"meta_info\":{}}");
        *len = strlen(*text);
        return 0;
    }
    *len = strlen(s->text[i][pass]);
    *text = s->lent ? s->text[i][pass] : strdup(s->text[i][pass]);
    return 0;
}

static void src_init(struct src *s)
{
    memset(s, 0, sizeof(*s));
    drift_corpus_init(&s->corpus);
    for (size_t i = 0; i < NSEQ; i++) {
        struct drift_item *it = drift_corpus_push(&s->corpus);
        it->n = i % 2 ? 40 + i : 3000 - 100 * i; /* long, short, ... */
        it->ids = malloc(it->n * sizeof(*it->ids));
        for (size_t t = 0; t < it->n; t++)
            it->ids[t] = (uint32_t)(100 + (t * 7 + i) % 500);
        snprintf(it->name, sizeof(it->name), "mem#%zu", i);
        for (int k = 0; k < DRIFT_PASSES; k++)
            s->text[i][k] = answer(it->ids, it->n, k < 2 ? 0.01 * k : 0.3,
                                   1 + i * 4 + (uint64_t)k);
    }
    s->fail_fetch = s->fail_parse = s->fail_pass = -1;
    pthread_mutex_init(&s->mu, NULL);
}

static void src_release(struct src *s)
{
    for (size_t i = 0; i < NSEQ; i++)
        for (int k = 0; k < DRIFT_PASSES; k++)
            free(s->text[i][k]);
    drift_corpus_release(&s->corpus);
    pthread_mutex_destroy(&s->mu);
}

struct recs {
    uint64_t hash, n;
};

static void on_rec(void *ud, const struct drift_rec *r)
{
    struct recs *x = ud;
    char line[256];
    int n = snprintf(line, sizeof(line), "%s %u %u %llu %a %a %a %d", r->arm,
                     r->seq, r->pos, (unsigned long long)r->token, r->m->kl,
                     r->m->dlp, r->m->dp, r->m->top1_agree);
    x->hash = hash64(line, (size_t)n, x->hash);
    x->n++;
}

struct out {
    struct drift_analysis an;
    struct recs recs;
    uint64_t positions;
    int ret;
    char msg[512];
};

static void run(struct src *s, unsigned threads, struct out *o)
{
    struct drift_side g, c;
    struct drift_opts opts;
    drift_side_init(&g, "golden");
    drift_side_init(&c, "candidate");
    g.dialect = c.dialect = DRIFT_DIALECT_SGLANG;
    g.top_k = c.top_k = 20;
    drift_opts_default(&opts);
    opts.on_rec = on_rec;
    opts.ud = &o->recs;
    memset(o, 0, sizeof(*o));
    drift_analysis_init(&o->an, 64, 3000, NULL, 0, 50, NULL);
    struct drift_pipe p = {.corpus = &s->corpus,
                           .side = {&g, &g, &c, &c},
                           .has_control = true,
                           .has_self = true,
                           .threads = threads,
                           .lent = s->lent,
                           .one_server = s->one_server,
                           .fetch = fetch,
                           .ud = s};
    struct diag d = {{0}};
    s->next[0] = s->next[1] = 0;
    s->most[0] = s->most[1] = s->most_both = 0;
    s->order_ok = true;
    o->ret = drift_pipe_run(&p, &o->an, &opts, &o->positions, &d);
    snprintf(o->msg, sizeof(o->msg), "%s", d.msg);
    drift_side_release(&g);
    drift_side_release(&c);
}

static void same(const struct out *a, const struct out *b)
{
    assert_int_equal(a->ret, b->ret);
    assert_string_equal(a->msg, b->msg);
    assert_true(a->positions == b->positions);
    assert_true(a->recs.n == b->recs.n && a->recs.hash == b->recs.hash);
    assert_int_equal(a->an.n_seq, b->an.n_seq);
    assert_memory_equal(a->an.acc, b->an.acc, sizeof(a->an.acc));
    assert_memory_equal(a->an.skipped, b->an.skipped, sizeof(a->an.skipped));
    assert_int_equal(a->an.n_worst, b->an.n_worst);
    assert_memory_equal(a->an.worst, b->an.worst,
                        a->an.n_worst * sizeof(a->an.worst[0]));
    size_t stride = a->an.n_buckets * DRIFT_ARMS * DRIFT_SEQ_F;
    assert_memory_equal(a->an.seq_sums, b->an.seq_sums,
                        a->an.n_seq * stride * sizeof(double));
}

static void test_threads_fold_identically(void **state)
{
    (void)state;
    struct src s;
    struct out one, many;
    src_init(&s);
    run(&s, 1, &one);
    assert_int_equal(one.ret, 0);
    assert_true(s.order_ok);
    assert_int_equal(one.an.n_seq, NSEQ);
    assert_true(one.recs.n == 3 * one.positions);
    struct drift_acc tot;
    drift_analysis_total(&one.an, DRIFT_ARM_CAND, &tot);
    assert_true(tot.n == one.positions && tot.kl_sum > 0);
    for (unsigned th = 2; th <= 5; th += 3) {
        run(&s, th, &many);
        assert_true(s.order_ok); /* requests in the same order */
        same(&one, &many);
        drift_analysis_release(&many.an);
    }
    drift_analysis_release(&one.an);
    src_release(&s);
}

/* The first failing sequence is reported, whichever thread meets it
 * first; the sequences before it are folded, none after. */
static void test_first_error_wins(void **state)
{
    (void)state;
    struct src s;
    struct out one, many;
    src_init(&s);
    s.fail_parse = 4;
    s.fail_fetch = 7;
    run(&s, 1, &one);
    assert_int_equal(one.ret, -EBADMSG);
    assert_non_null(strstr(one.msg, "mem#4"));
    assert_int_equal(one.an.n_seq, 5);
    run(&s, 4, &many);
    same(&one, &many);
    drift_analysis_release(&many.an);
    drift_analysis_release(&one.an);
    s.fail_parse = 9;
    s.fail_fetch = 3;
    run(&s, 1, &one);
    assert_int_equal(one.ret, -ECONNREFUSED);
    assert_non_null(strstr(one.msg, "mem#3: seq 3 pass 0 unreachable"));
    run(&s, 3, &many);
    same(&one, &many);
    drift_analysis_release(&many.an);
    drift_analysis_release(&one.an);
    src_release(&s);
}

/* Lent answers (the pipe reads them where they are) fold exactly as
 * owned ones; an answer the reader refuses as it is (a bare NaN: it is
 * sanitized in a copy) stops both alike, as the server's fault, with the
 * same message, and the lent texts are left as they were. */
static void test_lent_answers_read_alike(void **state)
{
    (void)state;
    struct src s;
    struct out owned, lent;
    src_init(&s);
    run(&s, 1, &owned);
    assert_int_equal(owned.ret, 0);
    s.lent = true;
    run(&s, 3, &lent);
    same(&owned, &lent);
    drift_analysis_release(&lent.an);
    drift_analysis_release(&owned.an);
    s.lent = false;
    /* a bare NaN for the first top logprob of sequence 5's candidate */
    char *t = strstr(s.text[5][2], "\"input_top_logprobs\":[null,[[");
    assert_non_null(t);
    t += strlen("\"input_top_logprobs\":[null,[[");
    size_t w = strcspn(t, ",");
    assert_true(w >= 3);
    memset(t, ' ', w);
    memcpy(t, "NaN", 3);
    char *before[NSEQ][DRIFT_PASSES];
    for (size_t i = 0; i < NSEQ; i++)
        for (int k = 0; k < DRIFT_PASSES; k++)
            before[i][k] = strdup(s.text[i][k]);
    run(&s, 1, &owned);
    assert_int_equal(owned.ret, -EBADMSG);
    assert_non_null(strstr(owned.msg, ": top-logprob NaN"));
    s.lent = true;
    for (unsigned th = 1; th <= 3; th += 2) {
        run(&s, th, &lent);
        assert_int_equal(lent.ret, owned.ret);
        assert_string_equal(lent.msg, owned.msg);
        drift_analysis_release(&lent.an);
    }
    for (size_t i = 0; i < NSEQ; i++)
        for (int k = 0; k < DRIFT_PASSES; k++) {
            assert_string_equal(s.text[i][k], before[i][k]);
            free(before[i][k]);
        }
    drift_analysis_release(&owned.an);
    src_release(&s);
}

/* Each server gets one request at a time, in the serial order, and the
 * golden's and the candidate's requests are in flight together; with
 * one_server, one request at a time over both. Either way the analysis
 * and the records are those of one server answering in turn. */
static void test_servers_answer_at_once(void **state)
{
    (void)state;
    struct src s;
    struct out serial, both;
    src_init(&s);
    s.one_server = true;
    s.nap_us = 2000;
    run(&s, 1, &serial);
    assert_int_equal(serial.ret, 0);
    assert_true(s.order_ok);
    assert_int_equal(s.most_both, 1);
    for (unsigned th = 1; th <= 4; th += 3) {
        s.one_server = false;
        run(&s, th, &both);
        assert_true(s.order_ok); /* each server's order, as serial */
        assert_int_equal(s.most[0], 1);
        assert_int_equal(s.most[1], 1);
        assert_int_equal(s.most_both, 2); /* and at once */
        same(&serial, &both);
        drift_analysis_release(&both.an);
    }
    drift_analysis_release(&serial.an);
    src_release(&s);
}

/* When the golden's and the candidate's answers of one sequence both
 * fail, the golden's error is the one reported, as the serial order
 * meets it first; a candidate failure alone is reported as such. */
static void test_golden_error_first(void **state)
{
    (void)state;
    struct src s;
    struct out serial, both;
    src_init(&s);
    s.fail_fetch = 5;
    s.fail_pass = 1; /* the control pass, in flight with the candidate's */
    s.one_server = true;
    run(&s, 1, &serial);
    assert_int_equal(serial.ret, -ECONNREFUSED);
    assert_non_null(strstr(serial.msg, "mem#5: seq 5 pass 1 unreachable"));
    s.one_server = false;
    run(&s, 3, &both);
    same(&serial, &both);
    drift_analysis_release(&both.an);
    drift_analysis_release(&serial.an);
    s.fail_pass = 3;
    s.one_server = true;
    run(&s, 1, &serial);
    assert_non_null(strstr(serial.msg, "mem#5: seq 5 pass 3 unreachable"));
    s.one_server = false;
    run(&s, 2, &both);
    same(&serial, &both);
    drift_analysis_release(&both.an);
    drift_analysis_release(&serial.an);
    src_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_fold_identically),
        cmocka_unit_test(test_first_error_wins),
        cmocka_unit_test(test_lent_answers_read_alike),
        cmocka_unit_test(test_servers_answer_at_once),
        cmocka_unit_test(test_golden_error_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
