/*
 * drift metrics: KL lower bound, forced-token deltas, top-1 agreement and
 * top-k overlap of one position. See metrics.h for the contract.
 */
#include "drift/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/hash.h"

void drift_tok_sort(struct drift_tok *t, size_t n)
{
    /* servers list top-k in order: then nothing moves (the insertion sort
     * below would not move anything either) */
    size_t i = 1;
    while (i < n && !(t[i - 1].lp < t[i].lp ||
                      (t[i - 1].lp == t[i].lp && t[i - 1].key > t[i].key)))
        i++;
    for (; i < n; i++) {
        struct drift_tok v = t[i];
        size_t j = i;
        while (j > 0 && (t[j - 1].lp < v.lp ||
                         (t[j - 1].lp == v.lp && t[j - 1].key > v.key))) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = v;
    }
}

uint64_t drift_key_text(const char *text, size_t len)
{
    static const char pfx[] = "token_id:";
    size_t pl = sizeof(pfx) - 1;
    if (len > pl && len < pl + 20 && !memcmp(text, pfx, pl)) {
        uint64_t v = 0;
        size_t i;
        for (i = pl; i < len && text[i] >= '0' && text[i] <= '9'; i++)
            v = v * 10 + (uint64_t)(text[i] - '0');
        if (i == len)
            return v;
    }
    return DRIFT_KEY_TEXT | (hash64(text, len, 0x6472696674ULL) >> 1);
}

/*
 * exp(x) for the logprobs of a position (x <= 0), about twice as fast as
 * libm's, within 0.52 ulp of the exact value (tests/drift/test_metrics.c,
 * test_exp_accuracy, checks 0.52 ulp against long double expl on random and
 * edge arguments). x = (k / 128) ln 2 + r with |r| <= ln 2 / 256 (ln 2 / 128
 * in two parts, the first with 33 significant bits so k times it is exact),
 * exp(x) = 2^(k >> 7) * 2^((k & 127) / 128) * exp(r): the table holds
 * 2^(j / 128) as a double plus the double nearest the rest (computed once
 * to 80 decimal digits, Python's decimal module), exp(r) - 1 is Taylor's
 * polynomial of degree 5 (the first term left out is below 2^-60 of the
 * result). The only roundings that reach the result are the last addition's
 * (0.5 ulp) and those of the small correction terms. The same argument
 * gives the same bits on every run (the metrics' "identical inputs, KL 0"
 * needs nothing more). Arguments outside [-707, 0] (none in a valid
 * position but -inf) and NaN go to libm.
 */
static const double exp_tab[128][2] = {
    {0x1.0000000000000p+0, 0x0.0p+0},
    {0x1.0163da9fb3335p+0, 0x1.b61299ab8cdb7p-54},
    {0x1.02c9a3e778061p+0, -0x1.19083535b085dp-56},
    {0x1.04315e86e7f85p+0, -0x1.0a31c1977c96ep-54},
    {0x1.059b0d3158574p+0, 0x1.d73e2a475b465p-55},
    {0x1.0706b29ddf6dep+0, -0x1.c91dfe2b13c27p-55},
    {0x1.0874518759bc8p+0, 0x1.186be4bb284ffp-57},
    {0x1.09e3ecac6f383p+0, 0x1.1487818316136p-54},
    {0x1.0b5586cf9890fp+0, 0x1.8a62e4adc610bp-54},
    {0x1.0cc922b7247f7p+0, 0x1.01edc16e24f71p-54},
    {0x1.0e3ec32d3d1a2p+0, 0x1.03a1727c57b53p-59},
    {0x1.0fb66affed31bp+0, -0x1.b9bedc44ebd7bp-57},
    {0x1.11301d0125b51p+0, -0x1.6c51039449b3ap-54},
    {0x1.12abdc06c31ccp+0, -0x1.1b514b36ca5c7p-58},
    {0x1.1429aaea92de0p+0, -0x1.32fbf9af1369ep-54},
    {0x1.15a98c8a58e51p+0, 0x1.2406ab9eeab0ap-55},
    {0x1.172b83c7d517bp+0, -0x1.19041b9d78a76p-55},
    {0x1.18af9388c8deap+0, -0x1.11023d1970f6cp-54},
    {0x1.1a35beb6fcb75p+0, 0x1.e5b4c7b4968e4p-55},
    {0x1.1bbe084045cd4p+0, -0x1.95386352ef607p-54},
    {0x1.1d4873168b9aap+0, 0x1.e016e00a2643cp-54},
    {0x1.1ed5022fcd91dp+0, -0x1.1df98027bb78cp-54},
    {0x1.2063b88628cd6p+0, 0x1.dc775814a8495p-55},
    {0x1.21f49917ddc96p+0, 0x1.2a97e9494a5eep-55},
    {0x1.2387a6e756238p+0, 0x1.9b07eb6c70573p-54},
    {0x1.251ce4fb2a63fp+0, 0x1.ac155bef4f4a4p-55},
    {0x1.26b4565e27cddp+0, 0x1.2bd339940e9d9p-55},
    {0x1.284dfe1f56381p+0, -0x1.a4c3a8c3f0d7ep-54},
    {0x1.29e9df51fdee1p+0, 0x1.612e8afad1255p-55},
    {0x1.2b87fd0dad990p+0, -0x1.10adcd6381aa4p-59},
    {0x1.2d285a6e4030bp+0, 0x1.0024754db41d5p-54},
    {0x1.2ecafa93e2f56p+0, 0x1.1ca0f45d52383p-56},
    {0x1.306fe0a31b715p+0, 0x1.6f46ad23182e4p-55},
    {0x1.32170fc4cd831p+0, 0x1.a9ce78e18047cp-55},
    {0x1.33c08b26416ffp+0, 0x1.32721843659a6p-54},
    {0x1.356c55f929ff1p+0, -0x1.b5cee5c4e4628p-55},
    {0x1.371a7373aa9cbp+0, -0x1.63aeabf42eae2p-54},
    {0x1.38cae6d05d866p+0, -0x1.e958d3c9904bdp-54},
    {0x1.3a7db34e59ff7p+0, -0x1.5e436d661f5e3p-56},
    {0x1.3c32dc313a8e5p+0, -0x1.efff8375d29c3p-54},
    {0x1.3dea64c123422p+0, 0x1.ada0911f09ebcp-55},
    {0x1.3fa4504ac801cp+0, -0x1.7d023f956f9f3p-54},
    {0x1.4160a21f72e2ap+0, -0x1.ef3691c309278p-58},
    {0x1.431f5d950a897p+0, -0x1.1c7dde35f7999p-55},
    {0x1.44e086061892dp+0, 0x1.89b7a04ef80d0p-59},
    {0x1.46a41ed1d0057p+0, 0x1.c944bd1648a76p-54},
    {0x1.486a2b5c13cd0p+0, 0x1.3c1a3b69062f0p-56},
    {0x1.4a32af0d7d3dep+0, 0x1.9cb62f3d1be56p-54},
    {0x1.4bfdad5362a27p+0, 0x1.d4397afec42e2p-56},
    {0x1.4dcb299fddd0dp+0, 0x1.8ecdbbc6a7833p-54},
    {0x1.4f9b2769d2ca7p+0, -0x1.4b309d25957e3p-54},
    {0x1.516daa2cf6642p+0, -0x1.f768569bd93efp-55},
    {0x1.5342b569d4f82p+0, -0x1.07abe1db13cadp-55},
    {0x1.551a4ca5d920fp+0, -0x1.d689cefede59bp-55},
    {0x1.56f4736b527dap+0, 0x1.9bb2c011d93adp-54},
    {0x1.58d12d497c7fdp+0, 0x1.295e15b9a1de8p-55},
    {0x1.5ab07dd485429p+0, 0x1.6324c054647adp-54},
    {0x1.5c9268a5946b7p+0, 0x1.c4b1b816986a2p-60},
    {0x1.5e76f15ad2148p+0, 0x1.ba6f93080e65ep-54},
    {0x1.605e1b976dc09p+0, -0x1.3e2429b56de47p-54},
    {0x1.6247eb03a5585p+0, -0x1.383c17e40b497p-54},
    {0x1.6434634ccc320p+0, -0x1.c483c759d8933p-55},
    {0x1.6623882552225p+0, -0x1.bb60987591c34p-54},
    {0x1.68155d44ca973p+0, 0x1.038ae44f73e65p-57},
    {0x1.6a09e667f3bcdp+0, -0x1.bdd3413b26456p-54},
    {0x1.6c012750bdabfp+0, -0x1.2895667ff0b0dp-56},
    {0x1.6dfb23c651a2fp+0, -0x1.bbe3a683c88abp-57},
    {0x1.6ff7df9519484p+0, -0x1.83c0f25860ef6p-55},
    {0x1.71f75e8ec5f74p+0, -0x1.16e4786887a99p-55},
    {0x1.73f9a48a58174p+0, -0x1.0a8d96c65d53cp-54},
    {0x1.75feb564267c9p+0, -0x1.0245957316dd3p-54},
    {0x1.780694fde5d3fp+0, 0x1.866b80a02162dp-54},
    {0x1.7a11473eb0187p+0, -0x1.41577ee04992fp-55},
    {0x1.7c1ed0130c132p+0, 0x1.f124cd1164dd6p-54},
    {0x1.7e2f336cf4e62p+0, 0x1.05d02ba15797ep-56},
    {0x1.80427543e1a12p+0, -0x1.27c86626d972bp-54},
    {0x1.82589994cce13p+0, -0x1.d4c1dd41532d8p-54},
    {0x1.8471a4623c7adp+0, -0x1.8d684a341cdfbp-55},
    {0x1.868d99b4492edp+0, -0x1.fc6f89bd4f6bap-54},
    {0x1.88ac7d98a6699p+0, 0x1.994c2f37cb53ap-54},
    {0x1.8ace5422aa0dbp+0, 0x1.6e9f156864b27p-54},
    {0x1.8cf3216b5448cp+0, -0x1.0d55e32e9e3aap-56},
    {0x1.8f1ae99157736p+0, 0x1.5cc13a2e3976cp-55},
    {0x1.9145b0b91ffc6p+0, -0x1.dd6792e582524p-54},
    {0x1.93737b0cdc5e5p+0, -0x1.75fc781b57ebcp-57},
    {0x1.95a44cbc8520fp+0, -0x1.64b7c96a5f039p-56},
    {0x1.97d829fde4e50p+0, -0x1.d185b7c1b85d1p-54},
    {0x1.9a0f170ca07bap+0, -0x1.173bd91cee632p-54},
    {0x1.9c49182a3f090p+0, 0x1.c7c46b071f2bep-56},
    {0x1.9e86319e32323p+0, 0x1.824ca78e64c6ep-56},
    {0x1.a0c667b5de565p+0, -0x1.359495d1cd533p-54},
    {0x1.a309bec4a2d33p+0, 0x1.6305c7ddc36abp-54},
    {0x1.a5503b23e255dp+0, -0x1.d2f6edb8d41e1p-54},
    {0x1.a799e1330b358p+0, 0x1.bcb7ecac563c7p-54},
    {0x1.a9e6b5579fdbfp+0, 0x1.0fac90ef7fd31p-54},
    {0x1.ac36bbfd3f37ap+0, -0x1.f9234cae76cd0p-55},
    {0x1.ae89f995ad3adp+0, 0x1.7a1cd345dcc81p-54},
    {0x1.b0e07298db666p+0, -0x1.bdef54c80e425p-54},
    {0x1.b33a2b84f15fbp+0, -0x1.2805e3084d708p-57},
    {0x1.b59728de5593ap+0, -0x1.c71dfbbba6de3p-54},
    {0x1.b7f76f2fb5e47p+0, -0x1.5584f7e54ac3bp-56},
    {0x1.ba5b030a1064ap+0, -0x1.efcd30e54292ep-54},
    {0x1.bcc1e904bc1d2p+0, 0x1.23dd07a2d9e84p-55},
    {0x1.bf2c25bd71e09p+0, -0x1.efdca3f6b9c73p-54},
    {0x1.c199bdd85529cp+0, 0x1.11065895048ddp-55},
    {0x1.c40ab5fffd07ap+0, 0x1.b4537e083c60ap-54},
    {0x1.c67f12e57d14bp+0, 0x1.2884dff483cadp-54},
    {0x1.c8f6d9406e7b5p+0, 0x1.1acbc48805c44p-56},
    {0x1.cb720dcef9069p+0, 0x1.503cbd1e949dbp-56},
    {0x1.cdf0b555dc3fap+0, -0x1.dd83b53829d72p-55},
    {0x1.d072d4a07897cp+0, -0x1.cbc3743797a9cp-54},
    {0x1.d2f87080d89f2p+0, -0x1.d487b719d8578p-54},
    {0x1.d5818dcfba487p+0, 0x1.2ed02d75b3707p-55},
    {0x1.d80e316c98398p+0, -0x1.11ec18beddfe8p-54},
    {0x1.da9e603db3285p+0, 0x1.c2300696db532p-54},
    {0x1.dd321f301b460p+0, 0x1.2da5778f018c3p-54},
    {0x1.dfc97337b9b5fp+0, -0x1.1a5cd4f184b5cp-54},
    {0x1.e264614f5a129p+0, -0x1.7b627817a1496p-54},
    {0x1.e502ee78b3ff6p+0, 0x1.39e8980a9cc8fp-55},
    {0x1.e7a51fbc74c83p+0, 0x1.2d522ca0c8de2p-54},
    {0x1.ea4afa2a490dap+0, -0x1.e9c23179c2893p-54},
    {0x1.ecf482d8e67f1p+0, -0x1.c93f3b411ad8cp-54},
    {0x1.efa1bee615a27p+0, 0x1.dc7f486a4b6b0p-54},
    {0x1.f252b376bba97p+0, 0x1.3a1a5bf0d8e43p-54},
    {0x1.f50765b6e4540p+0, 0x1.9d3e12dd8a18bp-54},
    {0x1.f7bfdad9cbe14p+0, -0x1.dbb12d006350ap-54},
    {0x1.fa7c1819e90d8p+0, 0x1.74853f3a5931ep-55},
    {0x1.fd3c22b8f71f1p+0, 0x1.2eb74966579e7p-57},
};

static inline double fexp(double x)
{
    if (__builtin_expect(!(x >= -707.0 && x <= 0), 0))
        return exp(x);
    const double shift = 0x1.8p52, inv = 0x1.71547652b82fep+7,
                 ln2hi = 0x1.62e42fef00000p-8, ln2lo = 0x1.473de6af278edp-41;
    double kd = x * inv + shift;
    uint64_t kb, sb;
    memcpy(&kb, &kd, sizeof(kb));
    memcpy(&sb, &shift, sizeof(sb));
    int64_t k = (int64_t)(kb - sb); /* kd = shift + k exactly */
    kd -= shift;
    double r = (x - kd * ln2hi) - kd * ln2lo;
    double p =
        r + r * r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120))));
    const double *t = exp_tab[k & 127];
    uint64_t eb = (uint64_t)(1023 + (k >> 7)) << 52;
    double scale;
    memcpy(&scale, &eb, sizeof(scale));
    return (t[0] + (t[0] * p + t[1])) * scale;
}

double drift_exp(double x)
{
    return fexp(x);
}

/* fexp(a) and fexp(b) at once: the same operations in the same order on
 * the two lanes of SSE2 registers (each lane rounds as the scalar
 * operation does), so the same bits (test_exp_accuracy checks). */
#if defined(__SSE2__) && defined(__x86_64__)
/* fexp's constants, in both lanes. Not const: a constant the compiler
 * can see it rebuilt in every round of the callers' loops (a scalar load
 * and a shuffle, twenty instructions an exp pair); this table it reads as
 * the operand of the arithmetic. Nothing writes it. */
__m128d drift_exp_c2[10];
__m128d drift_exp_c2[10] = {{0x1.8p52, 0x1.8p52},
                            {0x1.71547652b82fep+7, 0x1.71547652b82fep+7},
                            {0x1.62e42fef00000p-8, 0x1.62e42fef00000p-8},
                            {0x1.473de6af278edp-41, 0x1.473de6af278edp-41},
                            {1.0 / 120, 1.0 / 120},
                            {1.0 / 24, 1.0 / 24},
                            {1.0 / 6, 1.0 / 6},
                            {0.5, 0.5},
                            {-707.0, -707.0},
                            {0.0, 0.0}};
#define EXP_C2(i) drift_exp_c2[i]
#endif

static inline void fexp2(double a, double b, double *ea, double *eb)
{
#if defined(__SSE2__) && defined(__x86_64__)
    __m128d x = _mm_set_pd(b, a);
    /* both in [-707, 0] (false for NaN) */
    __m128d in =
        _mm_and_pd(_mm_cmpge_pd(x, EXP_C2(8)), _mm_cmple_pd(x, EXP_C2(9)));
    if (__builtin_expect(_mm_movemask_pd(in) != 3, 0)) {
        *ea = fexp(a);
        *eb = fexp(b);
        return;
    }
    __m128d kd = _mm_add_pd(_mm_mul_pd(x, EXP_C2(1)), EXP_C2(0));
    __m128i k =
        _mm_sub_epi64(_mm_castpd_si128(kd), _mm_castpd_si128(EXP_C2(0)));
    kd = _mm_sub_pd(kd, EXP_C2(0));
    __m128d r = _mm_sub_pd(_mm_sub_pd(x, _mm_mul_pd(kd, EXP_C2(2))),
                           _mm_mul_pd(kd, EXP_C2(3)));
    __m128d q = _mm_add_pd(EXP_C2(5), _mm_mul_pd(r, EXP_C2(4)));
    q = _mm_add_pd(EXP_C2(6), _mm_mul_pd(r, q));
    q = _mm_add_pd(EXP_C2(7), _mm_mul_pd(r, q));
    __m128d p = _mm_add_pd(r, _mm_mul_pd(_mm_mul_pd(r, r), q));
    int64_t k0 = _mm_cvtsi128_si64(k),
            k1 = _mm_cvtsi128_si64(_mm_unpackhi_epi64(k, k));
    __m128d t0 = _mm_loadu_pd(exp_tab[k0 & 127]),
            t1 = _mm_loadu_pd(exp_tab[k1 & 127]);
    __m128d hi = _mm_unpacklo_pd(t0, t1), lo = _mm_unpackhi_pd(t0, t1);
    /* 2^(k >> 7) from the low 32 bits of each lane (|k| < 2^18) */
    __m128i e = _mm_add_epi32(_mm_srai_epi32(k, 7), _mm_set1_epi32(1023));
    __m128d scale = _mm_castsi128_pd(_mm_slli_epi64(e, 52));
    __m128d y =
        _mm_mul_pd(_mm_add_pd(hi, _mm_add_pd(_mm_mul_pd(hi, p), lo)), scale);
    _mm_storel_pd(ea, y);
    _mm_storeh_pd(eb, y);
#else
    *ea = fexp(a);
    *eb = fexp(b);
#endif
}

void drift_exp2(double a, double b, double *ea, double *eb)
{
    fexp2(a, b, ea, eb);
}

static bool bad_lp(double lp)
{
    return isnan(lp) || lp > 1e-6;
}

static double clamp_lp(double lp)
{
    return lp > 0 ? 0 : lp;
}

/* A top-k list by key: an open-addressing hash of the entries' keys (the
 * first entry with a key wins, as a stable sort and a lower-bound search
 * did), for the lookups of the golden's keys. */
#define INDEX_MAX (2 * DRIFT_TOPK_MAX)
#define INDEX_SLOTS 256 /* > 2 * INDEX_MAX: short probe runs */
struct index {
    uint64_t key[INDEX_MAX];
    double lp[INDEX_MAX];
    bool top[INDEX_MAX];
    uint32_t n;
    uint8_t slot[INDEX_SLOTS]; /* entry + 1; 0 empty */
};

static inline unsigned slot_of(uint64_t key)
{
    return (unsigned)((key * 0x9E3779B97F4A7C15ULL) >> 56);
}

static void index_build(struct index *ix, const struct drift_pos *p)
{
    uint32_t n = p->n_known > p->n_top ? p->n_known : p->n_top;
    ix->n = 0;
    memset(ix->slot, 0, sizeof(ix->slot));
    for (uint32_t i = 0; i < n && ix->n < INDEX_MAX; i++) {
        if (i >= p->n_top && i - p->n_top >= DRIFT_TOPK_MAX)
            break;
        if (i < p->n_top && i >= DRIFT_TOPK_MAX)
            continue;
        uint64_t key = p->top[i].key;
        unsigned h = slot_of(key);
        while (ix->slot[h] && ix->key[ix->slot[h] - 1] != key)
            h = (h + 1) & (INDEX_SLOTS - 1);
        if (ix->slot[h])
            continue; /* a later duplicate: never found */
        uint32_t j = ix->n++;
        ix->slot[h] = (uint8_t)(j + 1);
        ix->key[j] = key;
        ix->lp[j] = clamp_lp(p->top[i].lp);
        ix->top[j] = i < p->n_top;
    }
}

/* Index of key in ix, or -1. */
static int index_find(const struct index *ix, uint64_t key)
{
    unsigned h = slot_of(key);
    while (ix->slot[h]) {
        if (ix->key[ix->slot[h] - 1] == key)
            return ix->slot[h] - 1;
        h = (h + 1) & (INDEX_SLOTS - 1);
    }
    return -1;
}

static int validate(const struct drift_pos *p)
{
    if (p->checked)
        return 0; /* the reader checked the same */
    if (bad_lp(p->forced_lp))
        return -EINVAL;
    uint32_t n = p->n_known > p->n_top ? p->n_known : p->n_top;
    for (uint32_t i = 0; i < n; i++)
        if (bad_lp(p->top[i].lp))
            return -EINVAL;
    return 0;
}

/* One term p * (lp - lq) of the KL sum; 0 when p is 0. p = exp(lp) and
 * q = exp(lq), which the caller has already computed. */
static double kl_term(double lp, double lq, double p, double q)
{
    if (p == 0)
        return 0;
    if (lq == lp)
        return 0;
    if (!(q > DRIFT_Q_FLOOR))
        lq = log(DRIFT_Q_FLOOR);
    return p * (lp - lq);
}

/* exp() values kl_bound has computed, for drift_pos_compare to reuse (the
 * same argument gives the same bits). */
struct exps {
    double px, qx;    /* exp(lp(x)), exp(lq(x)) */
    double lp_top[2]; /* golden top-1 and top-2 clamped logprobs ... */
    double p_top[2];  /* ... and their exp, when have_top[i] */
    bool have_top[2];
};

/*
 * The candidate's entry for key, which the golden lists at rank i: its
 * clamped logprob in *lq and whether it is in the candidate's top in *top;
 * false when the candidate does not know key. When the candidate lists the
 * same key at the same rank inside its top, and its top keys are distinct
 * (c->checked), that entry is the one the index would find (the first with
 * the key): the index is built only when that shortcut fails.
 */
static inline bool lookup(const struct drift_pos *c, struct index *cix,
                          bool *built, uint32_t same, uint32_t i, uint64_t key,
                          double *lq, bool *top)
{
    /* same: c->checked ? min(c->n_top, DRIFT_TOPK_MAX) : 0 */
    if (i < same && c->top[i].key == key) {
        *lq = clamp_lp(c->top[i].lp);
        *top = true;
        return true;
    }
    if (!*built) {
        index_build(cix, c);
        *built = true;
    }
    int k = index_find(cix, key);
    if (k < 0)
        return false;
    *lq = cix->lp[k];
    *top = cix->top[k];
    return true;
}

static double kl_bound(const struct drift_pos *g, const struct drift_pos *c,
                       struct index *cix, uint32_t *overlap, struct exps *ex)
{
    bool built = false;
    double kl = 0, sp = 0, sq = 0, lpx = clamp_lp(g->forced_lp);
    double lqx = clamp_lp(c->forced_lp);
    bool x_in_top = false;
    uint32_t n = g->n_top < DRIFT_TOPK_MAX ? g->n_top : DRIFT_TOPK_MAX;
    uint32_t same = !c->checked                 ? 0
                    : c->n_top < DRIFT_TOPK_MAX ? c->n_top
                                                : DRIFT_TOPK_MAX;
    uint32_t ov = 0;
    ex->have_top[0] = ex->have_top[1] = false;
    for (uint32_t i = 0; i < n; i++) {
        double lp = clamp_lp(g->top[i].lp), lq, lqk = 0;
        bool in_top = false;
        bool known =
            lookup(c, cix, &built, same, i, g->top[i].key, &lqk, &in_top);
        if (known && in_top)
            ov++;
        bool forced = g->top[i].key == g->forced;
        if (forced) {
            x_in_top = true;
            lp = lpx; /* the forced entry is authoritative */
            lq = lqx;
        } else if (known) {
            lq = lqk;
        } else {
            continue; /* unknown on the candidate: merged into the tail */
        }
        double ep, eq;
        fexp2(lp, lq, &ep, &eq);
        if (i < 2) {
            ex->lp_top[i] = lp;
            ex->p_top[i] = ep;
            ex->have_top[i] = true;
        }
        if (forced) {
            ex->px = ep;
            ex->qx = eq;
        }
        sp += ep;
        sq += eq;
        kl += kl_term(lp, lq, ep, eq);
    }
    if (!x_in_top) {
        double ep, eq;
        fexp2(lpx, lqx, &ep, &eq);
        ex->px = ep;
        ex->qx = eq;
        sp += ep;
        sq += eq;
        kl += kl_term(lpx, lqx, ep, eq);
    }
    *overlap = ov;
    double pt = 1 - sp, qt = 1 - sq;
    if (pt > 0 && pt != qt) {
        if (!(qt > DRIFT_Q_FLOOR))
            qt = DRIFT_Q_FLOOR;
        kl += pt * log(pt / qt);
    }
    return kl > 0 ? kl : 0;
}

/* exp(clamp(lp)) of golden top entry i, from kl_bound when it computed it */
static double p_top(const struct drift_pos *g, const struct exps *ex,
                    uint32_t i)
{
    double lp = clamp_lp(g->top[i].lp);
    return ex->have_top[i] && ex->lp_top[i] == lp ? ex->p_top[i] : fexp(lp);
}

int drift_pos_compare(const struct drift_pos *g, const struct drift_pos *c,
                      double flip_margin, struct drift_pm *out)
{
    struct index cix;
    struct exps ex;
    uint32_t ov;

    if (validate(g) || validate(c))
        return -EINVAL;
    memset(out, 0, sizeof(*out));
    out->lp_g = clamp_lp(g->forced_lp);
    out->lp_c = clamp_lp(c->forced_lp);
    out->dlp = out->lp_c == out->lp_g ? 0 : out->lp_c - out->lp_g;
    out->kl = kl_bound(g, c, &cix, &ov, &ex);
    /* exp(lp_c) and exp(lp_g) are exp(lqx) and exp(lpx) of kl_bound */
    out->dp = out->dlp == 0 ? 0 : ex.qx - ex.px;
    out->has_top = g->n_top > 0 && c->n_top > 0;
    out->top1_agree = true;
    out->overlap = 1;
    if (!out->has_top)
        return 0;
    out->top1_g = g->top[0].key;
    out->top1_c = c->top[0].key;
    out->top1_agree = out->top1_g == out->top1_c;
    double p1 = p_top(g, &ex, 0);
    double p2 = g->n_top > 1 ? p_top(g, &ex, 1) : 0;
    out->margin = p1 - p2;
    out->decisive_flip = !out->top1_agree && out->margin > flip_margin;
    uint32_t kmin = g->n_top < c->n_top ? g->n_top : c->n_top;
    if (kmin > DRIFT_TOPK_MAX)
        kmin = DRIFT_TOPK_MAX;
    out->overlap = (double)(ov < kmin ? ov : kmin) / kmin;
    return 0;
}
