// kernels/attention_bf16 — the attention products on the bf16 units: the
// same blocks as kernels/attention, with every product's operands rounded
// to bf16 as they are packed (kernels/gemm_bf16) and summed in fp32. The
// scores, softmax, log-sum-exp and gradients of the scores stay fp32; the
// probabilities are rounded to bf16 as they enter the product with the
// values, as flash attention does under bf16.
//
// One thread runs one (batch, head) in forward and one (batch, key/value
// head) in backward, its products single-threaded, so results do not
// depend on the thread count. Each thread packs the key and value forms of
// its head once and reuses them for every block of queries.
#include "kernels/attention.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/prof.h"
#include "kernels/gemm_bf16.h"

static int kp(int k) { return (k + 1) / 2; }

// Per-thread bf16 scratch (in values) for head size HS and T positions:
// four packed key/value forms (pairs along HS or along T) and the packed
// operands of one block of queries.
static size_t thread_values(int T, int HS) {
    size_t forms = 4 * (size_t)2 * kp(T) * 2 * kp(HS);
    size_t rows = 2 * (size_t)ATT_BQ * 2 * kp(HS) + (size_t)ATT_BQ * 2 * kp(T);
    size_t cols = 2 * (size_t)(2 * kp(T)) * 2 * kp(ATT_BQ) + 2 * (size_t)2 * kp(ATT_BQ) * HS;
    return (forms + rows + cols + 64) & ~(size_t)31;
}

// The scratch of every thread, kept on the calling thread and grown on demand.
static _Thread_local void *g_buf;
static _Thread_local size_t g_bytes;

static uint16_t *thread_scratch(int T, int HS, int threads) {
    return mem_grow(&g_buf, &g_bytes, MEM_WORKSPACE, (size_t)threads * thread_values(T, HS) * sizeof(uint16_t));
}

// S (nq, nk) = scale · q (nq,HS) · k^T, then the causal softmax rows
// (kernels/attention's, the scale applied there: row i sees columns lo[i]
// .. q0 + i); aq is scratch for q's rows, kt k's pairs along HS from the
// block's first key on (T keys apart).
static void scores(float *S, uint16_t *aq, const float *q, int ldq, const uint16_t *kt, int T, int nq, int nk, int HS,
                   float scale, int q0, const int *lo, float *lse_out, const float *lse_in) {
    bf16_pack_rows(aq, 2 * kp(HS), q, ldq, nq, HS);
    gemm_bf16(nq, nk, kp(HS), aq, 2 * kp(HS), kt, T, S, nk, 0);
    attention_softmax_rows(S, nq, nk, q0, lo, scale, lse_out, lse_in);
}

// Under document masking a block's keys start at an even key (kt, vp and
// kpr hold them in pairs along T), the masked column before it zero.
int attention_forward_bf16(float *out, float *lse, const float *qkv, const int *start, float *scratch, int B, int T,
                           int NH, int NKV, int HS) {
    int nth = omp_get_max_threads();
    uint16_t *buf = thread_scratch(T, HS, nth);
    if (!buf) return -1;
    double t0 = prof_begin();
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    size_t per = thread_values(T, HS);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / group, th = omp_get_thread_num(), lo[ATT_BQ];
        const int *st = start ? start + (size_t)b * T : NULL;
        float *S = scratch + (size_t)th * 2 * ATT_BQ * T;
        const float *row = qkv + (size_t)b * T * ld, *q = row + h * HS, *k = row + C + g * HS, *v = k + NKV * HS;
        float *o = out + (size_t)b * T * C + h * HS;
        float *l = lse + ((size_t)b * NH + h) * T;
        uint16_t *kt = buf + (size_t)th * per;                     // k's pairs along HS (kp(HS), T, 2)
        uint16_t *vp = kt + (size_t)2 * kp(HS) * 2 * kp(T);        // v's pairs along T (kp(T), HS, 2)
        uint16_t *aq = vp + (size_t)2 * kp(T) * 2 * kp(HS);        // a block's queries (ATT_BQ, 2·kp(HS))
        uint16_t *ap = aq + (size_t)ATT_BQ * 2 * kp(HS);           // its probabilities (ATT_BQ, 2·kp(T))
        bf16_pack_pairs_t(kt, k, ld, HS, T);
        bf16_pack_pairs(vp, v, ld, T, HS);
        for (int q0 = 0; q0 < T; q0 += ATT_BQ) {
            int nq = T - q0 < ATT_BQ ? T - q0 : ATT_BQ, k0 = attention_block_keys(st, q0, nq, 2, lo), nk = q0 + nq - k0;
            scores(S, aq, q + (size_t)q0 * ld, ld, kt + 2 * (size_t)k0, T, nq, nk, HS, scale, q0 - k0, st ? lo : NULL,
                   l + q0, NULL);
            bf16_pack_rows(ap, 2 * kp(nk), S, nk, nq, nk);
            gemm_bf16(nq, HS, kp(nk), ap, 2 * kp(nk), vp + (size_t)k0 * HS, HS, o + (size_t)q0 * C, C, 0);
        }
    }
    prof_end(t0, PROF_ATTENTION, 4.0 * NH * attention_pairs(start, B, T) * HS, 0);
    return 0;
}

// The packed forms of one key/value head for backward (per thread).
typedef struct Forms {
    uint16_t *kt, *vt;     // k's and v's pairs along HS (kp(HS), T, 2): the scores, dP = dO · v^T
    uint16_t *kpr;         // k's pairs along T (kp(T), HS, 2): dq = dS · k
    uint16_t *aq, *ado;    // a block's queries and output gradients as rows (ATT_BQ, 2·kp(HS))
    uint16_t *ads;         // its dS rows (ATT_BQ, 2·kp(T))
    uint16_t *at;          // dS^T or P^T rows (2·kp(T), 2·kp(ATT_BQ))
    uint16_t *bq;          // the block's queries or output gradients in pairs along its rows (kp(ATT_BQ), HS, 2)
} Forms;

static Forms forms_of(uint16_t *base, int T, int HS) {
    Forms f;
    f.kt = base;
    f.vt = f.kt + (size_t)2 * kp(HS) * 2 * kp(T);
    f.kpr = f.vt + (size_t)2 * kp(HS) * 2 * kp(T);
    f.aq = f.kpr + (size_t)2 * kp(T) * 2 * kp(HS);
    f.ado = f.aq + (size_t)ATT_BQ * 2 * kp(HS);
    f.ads = f.ado + (size_t)ATT_BQ * 2 * kp(HS);
    f.at = f.ads + (size_t)ATT_BQ * 2 * kp(T);
    f.bq = f.at + (size_t)2 * kp(T) * 2 * kp(ATT_BQ);
    return f;
}

// d (nk, HS) += at (nk, 2·kp(nq)) · bq (kp(nq), HS, 2) on rows [0, had), d := the
// product on the rest: the key rows a head's diagonal block reaches first are
// written, no zeroing pass before (the same bits: the sums start from 0 either way).
static void kv_rows(float *d, int ldd, const uint16_t *at, int nq, const uint16_t *bq, int nk, int had, int HS) {
    int a = 2 * kp(nq);
    gemm_bf16(had, HS, kp(nq), at, a, bq, HS, d, ldd, 1);
    gemm_bf16(nk - had, HS, kp(nq), at + (size_t)had * a, a, bq, HS, d + (size_t)had * ldd, ldd, 0);
}

// One block of nq queries from q0 of query head h: dq written, dk and dv
// added to (the group's first head writes the block's own key rows); st the
// row's document starts or NULL.
static void backward_block(const Forms *f, float *P, float *dP, const float *q, float *dq, int ld, const float *o,
                           const float *dO, int C, float *dk, float *dv, const float *l, int T, int HS, float scale,
                           const int *st, int q0, int nq, int first) {
    int lo[ATT_BQ], k0 = attention_block_keys(st, q0, nq, 2, lo), nk = q0 + nq - k0;
    int had = first ? q0 - k0 : nk;   // key rows [k0, k0 + had) hold earlier blocks' sums, the rest none yet
    scores(P, f->aq, q + (size_t)q0 * ld, ld, f->kt + 2 * (size_t)k0, T, nq, nk, HS, scale, q0 - k0, st ? lo : NULL,
           NULL, l + q0);
    bf16_pack_rows(f->ado, 2 * kp(HS), dO + (size_t)q0 * C, C, nq, HS);
    gemm_bf16(nq, nk, kp(HS), f->ado, 2 * kp(HS), f->vt + 2 * (size_t)k0, T, dP, nk, 0);
    // dS with the scale of both its products in it
    attention_ds_rows(dP, P, o + (size_t)q0 * C, dO + (size_t)q0 * C, C, nq, nk, HS, scale);
    // dq = dS · k
    bf16_pack_rows(f->ads, 2 * kp(nk), dP, nk, nq, nk);
    gemm_bf16(nq, HS, kp(nk), f->ads, 2 * kp(nk), f->kpr + (size_t)k0 * HS, HS, dq + (size_t)q0 * ld, ld, 0);
    // dk += dS^T · q
    bf16_pack_rows_t(f->at, 2 * kp(nq), dP, nk, nk, nq);
    bf16_pack_pairs(f->bq, q + (size_t)q0 * ld, ld, nq, HS);
    kv_rows(dk + (size_t)k0 * ld, ld, f->at, nq, f->bq, nk, had, HS);
    // dv += P^T · dO
    bf16_pack_rows_t(f->at, 2 * kp(nq), P, nk, nk, nq);
    bf16_pack_pairs(f->bq, dO + (size_t)q0 * C, C, nq, HS);
    kv_rows(dv + (size_t)k0 * ld, ld, f->at, nq, f->bq, nk, had, HS);
}

int attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const int *start, const float *out,
                            const float *lse, float *scratch, int B, int T, int NH, int NKV, int HS) {
    int nth = omp_get_max_threads();
    uint16_t *buf = thread_scratch(T, HS, nth);
    if (!buf) return -1;
    double t0 = prof_begin();
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    size_t per = thread_values(T, HS);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV, th = omp_get_thread_num();
        float *P = scratch + (size_t)th * 2 * ATT_BQ * T, *dP = P + (size_t)ATT_BQ * T;
        size_t row = (size_t)b * T * ld, kv = row + C + (size_t)g * HS;
        const float *k = qkv + kv, *v = k + NKV * HS;
        float *dk = dqkv + kv, *dv = dk + NKV * HS;
        const int *st = start ? start + (size_t)b * T : NULL;
        Forms f = forms_of(buf + (size_t)th * per, T, HS);
        bf16_pack_pairs_t(f.kt, k, ld, HS, T);
        bf16_pack_pairs_t(f.vt, v, ld, HS, T);
        bf16_pack_pairs(f.kpr, k, ld, T, HS);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *q = qkv + row + h * HS, *o = out + (size_t)b * T * C + h * HS;
            const float *dO = dout + (size_t)b * T * C + h * HS, *l = lse + ((size_t)b * NH + h) * T;
            float *dq = dqkv + row + h * HS;
            for (int q0 = 0; q0 < T; q0 += ATT_BQ)
                backward_block(&f, P, dP, q, dq, ld, o, dO, C, dk, dv, l, T, HS, scale, st, q0,
                               T - q0 < ATT_BQ ? T - q0 : ATT_BQ, h == g * group);
        }
    }
    prof_end(t0, PROF_ATTENTION, 8.0 * NH * attention_pairs(start, B, T) * HS, 0);
    return 0;
}
