#include "kernels/pointwise.h"

#include "core/prof.h"
#include "kernels/vmath_impl.h"

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

// Threads take blocks of BLK elements; the loop inside a block is the one
// the compiler vectorizes.
enum { BLK = 4096 };

void gelu_forward(float *out, const float *inp, size_t n) {
    double t0 = prof_begin();
    size_t nb = (n + BLK - 1) / BLK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        const float *x = inp + b * BLK;
        float *y = out + b * BLK;
        int m = (int)(n - b * BLK < BLK ? n - b * BLK : BLK);
        #pragma omp simd
        for (int i = 0; i < m; i++) {
            float u = GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
            y[i] = x[i] / (1.0f + vexpf(-2.0f * u));
        }
    }
    prof_end(t0, PROF_POINTWISE, 0, 2.0 * n * sizeof(float));
}

void swiglu_forward(float *out, const float *gu, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
        #pragma omp simd
        for (int i = 0; i < F; i++) y[i] = g[i] / (1.0f + vexpf(-g[i])) * u[i];
    }
    prof_end(t0, PROF_POINTWISE, 0, 3.0 * N * (double)F * sizeof(float));
}

void swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
        #pragma omp simd
        for (int i = 0; i < F; i++) {
            float s = 1.0f / (1.0f + vexpf(-g[i]));   // silu' = s·(1 + g·(1 − s))
            du[i] = g[i] * s * dy[i];
            dg[i] = u[i] * dy[i] * s * (1.0f + g[i] * (1.0f - s));
        }
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
        #pragma omp simd
        for (int i = 0; i < m; i++) {
            float u = GELU_K * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
            float s = 1.0f / (1.0f + vexpf(-2.0f * u));           // (1 + tanh u) / 2
            float du = GELU_K * (1.0f + 3.0f * 0.044715f * x[i] * x[i]);
            dx[i] = (s + x[i] * 2.0f * s * (1.0f - s) * du) * dy[i];
        }
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
