#include "kernels/pointwise.h"

#include "core/prof.h"
#include "kernels/vmath_impl.h"

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

// Threads take blocks of BLK elements; the loop inside a block is the one
// the compiler vectorizes.
enum { BLK = 4096 };

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

void gelu_forward(float *out, const float *inp, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const float *x = inp + b * BLK;
        float *y = out + b * BLK;
        int m = (int)(n - b * BLK < BLK ? n - b * BLK : BLK);
#if defined(__AVX512F__)
        for (int i = 0; i < m; i += 16) {   // the last vector masked: every element by the same arithmetic
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
    prof_end(t0, PROF_POINTWISE, 0, 2.0 * n * sizeof(float));
}

void swiglu_forward(float *out, const float *gu, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
#if defined(__AVX512F__)
        for (int i = 0; i < F; i += 16) {
            __mmask16 k = vlanes16((size_t)(F - i));
            __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vu = _mm512_maskz_loadu_ps(k, u + i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_mul_ps(vg, sigmoid16(vg)), vu));
        }
#else
        #pragma omp simd
        for (int i = 0; i < F; i++) y[i] = g[i] / (1.0f + vexpf(-g[i])) * u[i];
#endif
    }
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * N * (double)F * sizeof(float));
}

void swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
#if defined(__AVX512F__)
        const __m512 one = _mm512_set1_ps(1.0f);
        for (int i = 0; i < F; i += 16) {   // each vector read whole before written: dgu may be gu
            __mmask16 k = vlanes16((size_t)(F - i));
            __m512 vg = _mm512_maskz_loadu_ps(k, g + i), vu = _mm512_maskz_loadu_ps(k, u + i);
            __m512 vy = _mm512_maskz_loadu_ps(k, dy + i), s = sigmoid16(vg);
            __m512 d = _mm512_mul_ps(s, _mm512_fmadd_ps(vg, _mm512_sub_ps(one, s), one));   // silu' = s·(1 + g·(1 − s))
            _mm512_mask_storeu_ps(du + i, k, _mm512_mul_ps(_mm512_mul_ps(vg, s), vy));
            _mm512_mask_storeu_ps(dg + i, k, _mm512_mul_ps(_mm512_mul_ps(vu, vy), d));
        }
#else
        #pragma omp simd
        for (int i = 0; i < F; i++) {
            float s = 1.0f / (1.0f + vexpf(-g[i]));   // silu' = s·(1 + g·(1 − s))
            du[i] = g[i] * s * dy[i];
            dg[i] = u[i] * dy[i] * s * (1.0f + g[i] * (1.0f - s));
        }
#endif
    }
    prof_end(t0, PROF_POINTWISE, 0, 5.0 * N * (double)F * sizeof(float));
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const float *x = inp + b * BLK, *dy = dout + b * BLK;
        float *dx = dinp + b * BLK;
        int m = (int)(n - b * BLK < BLK ? n - b * BLK : BLK);
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
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * n * sizeof(float));
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
