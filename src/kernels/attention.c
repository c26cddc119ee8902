#include "kernels/attention.h"

#include <math.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>

#include "core/alloc.h"
#include "core/check.h"
#include "core/prof.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/vmath_impl.h"

size_t attention_scratch_floats(int T, int threads) {
    // Per thread: the score/probability block and the dP block.
    return (size_t)threads * 2 * ATT_BQ * (size_t)T;
}

void attention_softmax_rows(float *S, int nq, int nk, int q0, const int *lo, float scale, float *lse_out,
                            const float *lse_in) {
    for (int i = 0; i < nq; i++) {
        float *s = S + (size_t)i * nk;
        int j0 = lo ? lo[i] : 0, nv = q0 + i + 1;
        for (int j = 0; j < j0; j++) s[j] = 0.0f;
        for (int j = nv; j < nk; j++) s[j] = 0.0f;
        if (lse_in) {   // backward: the probabilities from the forward's log-sum-exp
            vexp_row(s + j0, s + j0, nv - j0, scale, lse_in[i]);
            continue;
        }
        // forward: one exp per score, the row then scaled by its sum (the
        // scale is positive: the largest scaled score is the largest score's)
        float m = vmax_row(s + j0, nv - j0, -INFINITY) * scale;
        float sum = vexp_row(s + j0, s + j0, nv - j0, scale, m);
        lse_out[i] = m + logf(sum);
        vscale_row(s + j0, nv - j0, 1.0f / sum);
    }
}

int attention_block_keys(const int *start, int q0, int nq, int align, int *lo) {
    if (!start) return 0;
    int k0 = start[q0] - start[q0] % align;
    for (int i = 0; i < nq; i++) lo[i] = start[q0 + i] - k0;
    return k0;
}

double attention_pairs(const int *start, int B, int T) {
    if (!start) return (double)B * T * (T + 1) / 2;
    double n = 0;
    for (size_t i = 0; i < (size_t)B * T; i++) n += (double)((int)(i % (size_t)T) - start[i] + 1);
    return n;
}

void attention_ds_rows(float *dP, const float *P, const float *o, const float *dO, int ldo, int nq, int nk, int HS,
                       float scale) {
    for (int i = 0; i < nq; i++) {
        // D_i = sum_j P_ij dP_ij = dO_i · O_i
        const float *oi = o + (size_t)i * ldo, *di = dO + (size_t)i * ldo;
        float D = 0.0f;
        #pragma omp simd reduction(+:D)
        for (int d = 0; d < HS; d++) D += oi[d] * di[d];
        const float *p = P + (size_t)i * nk;
        float *dp = dP + (size_t)i * nk;
        #pragma omp simd
        for (int j = 0; j < nk; j++) dp[j] = scale * (p[j] * (dp[j] - D));
    }
}

// The transposed key and value heads and a transposed block of one thread
// (kernels/gemm multiplies row-major operands as they lie: k^T is the
// vector operand of the scores, dS^T and P^T the broadcast operands of the
// key and value gradients), kept on the calling thread and grown on demand.
static _Thread_local void *g_buf;
static _Thread_local size_t g_bytes;

static size_t thread_floats(int T, int HS) { return ((size_t)2 * HS * T + (size_t)T * ATT_BQ + 15) & ~(size_t)15; }

static float *thread_scratch(int T, int HS, int threads) {
    return mem_grow(&g_buf, &g_bytes, MEM_WORKSPACE, (size_t)threads * thread_floats(T, HS) * sizeof(float));
}

void attention_forward(float *out, float *lse, const float *qkv, const int *start, float *scratch, int B, int T,
                       int NH, int NKV, int HS) {
    if (matmul_bf16() && !attention_forward_bf16(out, lse, qkv, start, scratch, B, T, NH, NKV, HS)) return;
    float *buf = thread_scratch(T, HS, omp_get_max_threads());
    CHECKF(buf, "out of memory for attention's scratch (T %d, head size %d)", T, HS);
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    qkv = matmul_input_fp32(qkv, (size_t)B * T * ld);   // the floats, where only a 16-bit store holds them
    CHECKF(qkv, "out of memory widening attention's input (T %d, width %d)", T, ld);
    double t0 = prof_begin();
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, g = h / group, th = omp_get_thread_num(), lo[ATT_BQ];
        float *S = scratch + (size_t)th * 2 * ATT_BQ * T, *kt = buf + (size_t)th * thread_floats(T, HS);
        const float *row = qkv + (size_t)b * T * ld, *q = row + h * HS, *k = row + C + g * HS, *v = k + NKV * HS;
        const int *st = start ? start + (size_t)b * T : NULL;
        float *o = out + (size_t)b * T * C + h * HS;
        float *l = lse + ((size_t)b * NH + h) * T;
        transpose_add(kt, T, k, ld, NULL, T, HS);   // k^T (HS, T)
        for (int q0 = 0; q0 < T; q0 += ATT_BQ) {
            int nq = T - q0 < ATT_BQ ? T - q0 : ATT_BQ, k0 = attention_block_keys(st, q0, nq, 1, lo), nk = q0 + nq - k0;
            gemm_nn(nq, nk, HS, q + (size_t)q0 * ld, ld, kt + k0, T, S, nk, 0);
            attention_softmax_rows(S, nq, nk, q0 - k0, st ? lo : NULL, scale, l + q0, NULL);
            gemm_nn(nq, HS, nk, S, nk, v + (size_t)k0 * ld, ld, o + (size_t)q0 * C, C, 0);
        }
    }
    prof_end(t0, PROF_ATTENTION, 4.0 * NH * attention_pairs(start, B, T) * HS, 0);
}

// d (nk, HS) += a (nk, nq) · b (nq, HS) on rows [0, had), d := the product on
// the rest: the key rows a head's diagonal block reaches first are written,
// no zeroing pass before (the same bits: the sums start from 0 either way).
static void kv_rows(float *d, int ldd, const float *a, int nq, const float *b, int ldb, int nk, int had, int HS) {
    gemm_nn(had, HS, nq, a, nq, b, ldb, d, ldd, 1);
    gemm_nn(nk - had, HS, nq, a + (size_t)had * nq, nq, b, ldb, d + (size_t)had * ldd, ldd, 0);
}

// One block of nq queries from q0 of one query head: dq written, dk and dv
// added to (the group's first head writes the block's own key rows). kt, vt:
// the key/value head transposed (HS, T); at: scratch for a transposed block
// (nk, nq).
static void backward_block(float *P, float *dP, float *at, const float *kt, const float *vt, const float *k,
                           const float *q, float *dq, int ld, const float *o, const float *dO, int C, float *dk,
                           float *dv, const float *l, int T, int HS, float scale, const int *st, int q0, int nq,
                           int first) {
    int lo[ATT_BQ], k0 = attention_block_keys(st, q0, nq, 1, lo), nk = q0 + nq - k0;
    int had = first ? q0 - k0 : nk;   // key rows [k0, k0 + had) hold earlier blocks' sums, the rest none yet
    gemm_nn(nq, nk, HS, q + (size_t)q0 * ld, ld, kt + k0, T, P, nk, 0);
    attention_softmax_rows(P, nq, nk, q0 - k0, st ? lo : NULL, scale, NULL, l + q0);
    gemm_nn(nq, nk, HS, dO + (size_t)q0 * C, C, vt + k0, T, dP, nk, 0);
    attention_ds_rows(dP, P, o + (size_t)q0 * C, dO + (size_t)q0 * C, C, nq, nk, HS, scale);   // dS, scaled
    gemm_nn(nq, HS, nk, dP, nk, k + (size_t)k0 * ld, ld, dq + (size_t)q0 * ld, ld, 0);       // dq = dS · k
    transpose_add(at, nq, dP, nk, NULL, nq, nk);
    kv_rows(dk + (size_t)k0 * ld, ld, at, nq, q + (size_t)q0 * ld, ld, nk, had, HS);          // dk += dS^T · q
    transpose_add(at, nq, P, nk, NULL, nq, nk);
    kv_rows(dv + (size_t)k0 * ld, ld, at, nq, dO + (size_t)q0 * C, C, nk, had, HS);           // dv += P^T · dO
}

// One thread per (batch, key/value head): its query heads one after
// another, so their key/value gradients add up in head order.
void attention_backward(float *dqkv, const float *dout, const float *qkv, const int *start, const float *out,
                        const float *lse, float *scratch, int B, int T, int NH, int NKV, int HS) {
    if (matmul_bf16() && !attention_backward_bf16(dqkv, dout, qkv, start, out, lse, scratch, B, T, NH, NKV, HS)) return;
    float *buf = thread_scratch(T, HS, omp_get_max_threads());
    CHECKF(buf, "out of memory for attention's scratch (T %d, head size %d)", T, HS);
    int C = NH * HS, ld = (NH + 2 * NKV) * HS, group = NH / NKV;
    qkv = matmul_input_fp32(qkv, (size_t)B * T * ld);   // the floats, where only a 16-bit store holds them
    CHECKF(qkv, "out of memory widening attention's input (T %d, width %d)", T, ld);
    double t0 = prof_begin();
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bg = 0; bg < B * NKV; bg++) {
        int b = bg / NKV, g = bg % NKV, th = omp_get_thread_num();
        float *P = scratch + (size_t)th * 2 * ATT_BQ * T, *dP = P + (size_t)ATT_BQ * T;
        float *kt = buf + (size_t)th * thread_floats(T, HS), *vt = kt + (size_t)HS * T, *at = vt + (size_t)HS * T;
        size_t row = (size_t)b * T * ld, kv = row + C + (size_t)g * HS;
        const float *k = qkv + kv, *v = k + NKV * HS;
        const int *st = start ? start + (size_t)b * T : NULL;
        float *dk = dqkv + kv, *dv = dk + NKV * HS;
        transpose_add(kt, T, k, ld, NULL, T, HS);
        transpose_add(vt, T, v, ld, NULL, T, HS);
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *q = qkv + row + h * HS, *o = out + (size_t)b * T * C + h * HS;
            const float *dO = dout + (size_t)b * T * C + h * HS, *l = lse + ((size_t)b * NH + h) * T;
            float *dq = dqkv + row + h * HS;
            for (int q0 = 0; q0 < T; q0 += ATT_BQ)
                backward_block(P, dP, at, kt, vt, k, q, dq, ld, o, dO, C, dk, dv, l, T, HS, scale, st, q0,
                               T - q0 < ATT_BQ ? T - q0 : ATT_BQ, h == g * group);
        }
    }
    prof_end(t0, PROF_ATTENTION, 8.0 * NH * attention_pairs(start, B, T) * HS, 0);
}

void attention_decode(float *out, const float *q, int ldq, const float *kc, const float *vc, const int *start, int T,
                      int pos, int NH, int NKV, int HS) {
    double t0 = prof_begin();
    int C = NH * HS, KV = NKV * HS, group = NH / NKV, S = pos + T;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel
    {
        float *p = malloc((size_t)S * sizeof *p);
        #pragma omp for schedule(static)
        for (int th = 0; th < T * NH; th++) {
            int t = th / NH, h = th % NH, g = h / group, nv = pos + t + 1, j0 = start ? start[t] : 0;
            const float *qi = q + (size_t)t * ldq + h * HS;
            float m = -INFINITY;
            for (int j = j0; j < nv; j++) {   // scores against keys j0 .. pos + t
                const float *kj = kc + (size_t)j * KV + g * HS;
                float s = 0.0f;
                for (int d = 0; d < HS; d++) s += qi[d] * kj[d];
                p[j] = s * scale;
                m = p[j] > m ? p[j] : m;
            }
            float sum = 0.0f;
            for (int j = j0; j < nv; j++) {
                p[j] = vexpf(p[j] - m);
                sum += p[j];
            }
            float *o = out + (size_t)t * C + h * HS, inv = 1.0f / sum;
            for (int d = 0; d < HS; d++) o[d] = 0.0f;
            for (int j = j0; j < nv; j++) {
                const float *vj = vc + (size_t)j * KV + g * HS;
                float w = p[j] * inv;
                for (int d = 0; d < HS; d++) o[d] += w * vj[d];
            }
        }
        free(p);
    }
    prof_end(t0, PROF_ATTENTION, 4.0 * T * NH * (double)S * HS, 0);
}
