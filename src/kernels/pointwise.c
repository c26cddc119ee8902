#include "kernels/pointwise.h"

#include <string.h>

#include "core/half.h"
#include "core/prof.h"
#include "kernels/chunks.h"
#include "kernels/gemm_bf16.h"
#include "kernels/vmath_impl.h"

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

// Threads take blocks of BLK elements (SwiGLU: rows, in spans of BLK); the
// per-element arithmetic is one span function per kernel, so the 16-bit
// variants, which widen and round around it block by block, give the bits
// of the fp32 kernels on the same values.
enum { BLK = 4096 };
// The backward passes that leave bf16 for the products widen, compute and
// round a span this long at a time: their four spans stay in L1 (with spans
// of BLK they spilled to L2 and ran 20% slower than the fp32 passes).
enum { SPAN = 512 };

#if defined(__AVX512F__)
// sigmoid(2u), u = √(2/π)·(x + 0.044715x³): gelu(x) = x·sigmoid(2u), on 16 lanes.
static inline __m512 gelu_sig16(__m512 x, __m512 x2) {
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x2), x, x));
    return vrecip16(_mm512_add_ps(_mm512_set1_ps(1.0f), vexp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
}

// sigmoid(x) on 16 lanes.
static inline __m512 sigmoid16(__m512 x) {
    return vrecip16(_mm512_add_ps(_mm512_set1_ps(1.0f), vexp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
#endif

// y [0, m) = gelu(x). On AVX-512 the last vector is masked: every element by the same arithmetic.
static void gelu_span(float *y, const float *x, int m) {
#if defined(__AVX512F__)
    for (int i = 0; i < m; i += 16) {
        __mmask16 k = vlanes16((size_t)(m - i));
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(v, gelu_sig16(v, _mm512_mul_ps(v, v))));
    }
#else
    #pragma omp simd
    for (int i = 0; i < m; i++) {
        float u = GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        y[i] = x[i] / (1.0f + vexpf(-2.0f * u));
    }
#endif
}

// dx [0, m) = gelu'(x) · dy; dx may alias dy.
static void gelu_grad_span(float *dx, const float *x, const float *dy, int m) {
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < m; i += 16) {   // gelu' = s + 2x·s(1 − s)·u', s = sigmoid(2u)
        __mmask16 k = vlanes16((size_t)(m - i));
        __m512 v = _mm512_maskz_loadu_ps(k, x + i), g = _mm512_maskz_loadu_ps(k, dy + i), v2 = _mm512_mul_ps(v, v);
        __m512 s = gelu_sig16(v, v2);
        __m512 du = _mm512_mul_ps(_mm512_set1_ps(GELU_K), _mm512_fmadd_ps(_mm512_set1_ps(3.0f * 0.044715f), v2, one));
        __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(v, v), s), _mm512_mul_ps(_mm512_sub_ps(one, s), du));
        _mm512_mask_storeu_ps(dx + i, k, _mm512_mul_ps(_mm512_add_ps(s, t), g));
    }
#else
    #pragma omp simd
    for (int i = 0; i < m; i++) {
        float u = GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        float s = 1.0f / (1.0f + vexpf(-2.0f * u));           // (1 + tanh u) / 2
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
        dx[i] = (s + x[i] * 2.0f * s * (1.0f - s) * du) * dy[i];
    }
#endif
}

// y [0, m) = silu(g)·u.
static void swiglu_span(float *y, const float *g, const float *u, int m) {
#if defined(__AVX512F__)
    for (int i = 0; i < m; i += 16) {
        __mmask16 k = vlanes16((size_t)(m - i));
        __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vu = _mm512_maskz_loadu_ps(k, u + i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_mul_ps(vg, sigmoid16(vg)), vu));
    }
#else
    #pragma omp simd
    for (int i = 0; i < m; i++) y[i] = g[i] / (1.0f + vexpf(-g[i])) * u[i];
#endif
}

// dg, du [0, m): the gradients of gate and up given dy; each element read before written (dg may be g).
static void swiglu_grad_span(float *dg, float *du, const float *g, const float *u, const float *dy, int m) {
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < m; i += 16) {
        __mmask16 k = vlanes16((size_t)(m - i));
        __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vu = _mm512_maskz_loadu_ps(k, u + i);
        __m512 vy = _mm512_maskz_loadu_ps(k, dy + i), s = sigmoid16(vg);
        __m512 d = _mm512_mul_ps(s, _mm512_fmadd_ps(vg, _mm512_sub_ps(one, s), one));   // silu' = s·(1 + g·(1 − s))
        _mm512_mask_storeu_ps(du + i, k, _mm512_mul_ps(_mm512_mul_ps(vg, s), vy));
        _mm512_mask_storeu_ps(dg + i, k, _mm512_mul_ps(_mm512_mul_ps(vu, vy), d));
    }
#else
    #pragma omp simd
    for (int i = 0; i < m; i++) {
        float s = 1.0f / (1.0f + vexpf(-g[i]));   // silu' = s·(1 + g·(1 − s))
        float gi = g[i], ui = u[i], yi = dy[i];
        du[i] = gi * s * yi;
        dg[i] = ui * yi * s * (1.0f + gi * (1.0f - s));
    }
#endif
}

// dst [0, m) = the bf16 values at src, widened.
static void widen(float *dst, const uint16_t *src, int m) {
    #pragma omp simd
    for (int i = 0; i < m; i++) dst[i] = bf16_to_f32(src[i]);
}

// x [0, m) rounded to bf16 into x16, and back into t: the values the fp32 path rounds in place.
static void round16(uint16_t *x16, float *t, const float *x, int m) {
    half_pack_serial(PREC_BF16, x16, x, (size_t)m);
    widen(t, x16, m);
}

// Elements in block b of n.
static int blk_len(size_t n, size_t b) { return (int)(n - b * BLK < BLK ? n - b * BLK : BLK); }

void gelu_forward(float *out, const float *inp, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) gelu_span(out + b * BLK, inp + b * BLK, blk_len(n, b));
    prof_end(t0, PROF_POINTWISE, 0, 2.0 * n * sizeof(float));
}

void gelu_forward16(uint16_t *out16, uint16_t *inp16, const float *inp, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        float t[BLK];
        if (inp) round16(inp16 + b * BLK, t, inp + b * BLK, blk_len(n, b));
        else widen(t, inp16 + b * BLK, blk_len(n, b));
        gelu_span(t, t, blk_len(n, b));
        half_pack_serial(PREC_BF16, out16 + b * BLK, t, (size_t)blk_len(n, b));
    }
    prof_end(t0, PROF_POINTWISE, 0, (inp ? 8.0 : 4.0) * n);
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++)
        gelu_grad_span(dinp + b * BLK, inp + b * BLK, dout + b * BLK, blk_len(n, b));
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * n * sizeof(float));
}

void gelu_backward16(float *dinp, const uint16_t *inp16, const float *dout, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        float t[BLK];
        widen(t, inp16 + b * BLK, blk_len(n, b));
        gelu_grad_span(dinp + b * BLK, t, dout + b * BLK, blk_len(n, b));
    }
    prof_end(t0, PROF_POINTWISE, 0, 10.0 * n);
}

void gelu_backward16_rows(float *dout, float *dbias, const uint16_t *inp16, int N, int F) {
    if (N <= 0 || F <= 0) return;
    double t0 = prof_begin();
    int nc;
    float *part = chunk_room(N, (size_t)F, &nc);
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int k = 0; k < nc; k++) {
            float *p = part + (size_t)k * F;
            int n0 = chunk_lo(N, nc, k);
            for (int n = n0; n < chunk_lo(N, nc, k + 1); n++)
                for (int c = 0; c < F; c += SPAN) {   // the span's floats all read before its bf16 is stored
                    float t[SPAN], u[SPAN];
                    int m = F - c < SPAN ? F - c : SPAN;
                    float *row = dout + (size_t)n * F;
                    widen(t, inp16 + (size_t)n * F + c, m);
                    gelu_grad_span(u, t, row + c, m);
                    if (n == n0) memcpy(p + c, u, (size_t)m * sizeof *u);
                    else {
                        #pragma omp simd
                        for (int j = 0; j < m; j++) p[c + j] += u[j];
                    }
                    bf16_round_row((uint16_t *)row + c, u, (size_t)m);
                }
        }
        chunks_add(dbias, part, nc, (size_t)F, F);
    }
    prof_end(t0, PROF_POINTWISE, 0, 8.0 * N * (double)F);
}

void swiglu_forward(float *out, const float *gu, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) swiglu_span(out + (size_t)n * F, gu + (size_t)n * 2 * F, gu + (size_t)n * 2 * F + F, F);
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * N * (double)F * sizeof(float));
}

void swiglu_forward16(uint16_t *out16, uint16_t *gu16, const float *gu, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < F; c += BLK) {
            float tg[BLK], tu[BLK];
            int m = F - c < BLK ? F - c : BLK;
            size_t g = (size_t)n * 2 * F + c, u = g + F;
            if (gu) round16(gu16 + g, tg, gu + g, m), round16(gu16 + u, tu, gu + u, m);
            else widen(tg, gu16 + g, m), widen(tu, gu16 + u, m);
            swiglu_span(tg, tg, tu, m);
            half_pack_serial(PREC_BF16, out16 + (size_t)n * F + c, tg, (size_t)m);
        }
    prof_end(t0, PROF_POINTWISE, 0, (gu ? 12.0 : 6.0) * N * (double)F);
}

void swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F;
        float *dg = dgu + (size_t)n * 2 * F;
        swiglu_grad_span(dg, dg + F, g, g + F, dout + (size_t)n * F, F);
    }
    prof_end(t0, PROF_POINTWISE, 0, 5.0 * N * (double)F * sizeof(float));
}

void swiglu_backward16(float *dgu, const uint16_t *gu16, const float *dout, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < F; c += BLK) {
            float tg[BLK], tu[BLK];
            int m = F - c < BLK ? F - c : BLK;
            size_t g = (size_t)n * 2 * F + c;
            widen(tg, gu16 + g, m);
            widen(tu, gu16 + g + F, m);
            swiglu_grad_span(dgu + g, dgu + g + F, tg, tu, dout + (size_t)n * F + c, m);
        }
    prof_end(t0, PROF_POINTWISE, 0, 16.0 * N * (double)F);
}

void swiglu_backward16_rows(uint16_t *dgu16, const uint16_t *gu16, const float *dout, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < F; c += SPAN) {
            float tg[SPAN], tu[SPAN], dg[SPAN], du[SPAN];
            int m = F - c < SPAN ? F - c : SPAN;
            size_t g = (size_t)n * 2 * F + c;
            widen(tg, gu16 + g, m);
            widen(tu, gu16 + g + F, m);
            swiglu_grad_span(dg, du, tg, tu, dout + (size_t)n * F + c, m);
            bf16_round_row(dgu16 + g, dg, (size_t)m);
            bf16_round_row(dgu16 + g + F, du, (size_t)m);
        }
    prof_end(t0, PROF_POINTWISE, 0, 12.0 * N * (double)F);
}

void residual_forward(float *out, const float *x, const float *y, const float *bias, int N, int C) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        if (bias) {
            #pragma omp simd
            for (int c = 0; c < C; c++) out[o + c] = x[o + c] + y[o + c] + bias[c];
        } else {
            #pragma omp simd
            for (int c = 0; c < C; c++) out[o + c] = x[o + c] + y[o + c];
        }
    }
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * N * (double)C * sizeof(float));
}
