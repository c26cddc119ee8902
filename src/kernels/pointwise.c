#include "kernels/pointwise.h"

#include "kernels/vmath_impl.h"

#define GELU_K 0.7978845608028654f   // sqrt(2/pi)

void gelu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + vexpf(-2.0f * u));
    }
}

void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float s = 1.0f / (1.0f + vexpf(-2.0f * u));           // (1 + tanh u) / 2
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        float grad = s + x * 2.0f * s * (1.0f - s) * du;
        dinp[i] = grad * dout[i];
    }
}

void residual_forward(float *out, const float *x, const float *y, const float *bias, int N, int C) {
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
}
