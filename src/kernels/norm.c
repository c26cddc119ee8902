#include "kernels/norm.h"

#include <math.h>
#include <stddef.h>

#include "core/prof.h"

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / C;
        float v = 0.0f;
        #pragma omp simd reduction(+:v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / C + 1e-5f);
        #pragma omp simd
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * r * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = r;
    }
    prof_end(t0, PROF_NORM, 0, 2.0 * N * (double)C * sizeof(float));
}

void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float v = 0.0f;
        #pragma omp simd reduction(+:v)
        for (int c = 0; c < C; c++) v += x[c] * x[c];
        float r = 1.0f / sqrtf(v / C + eps);
        #pragma omp simd
        for (int c = 0; c < C; c++) y[c] = (x[c] * r) * weight[c];
        rstd[n] = r;
    }
    prof_end(t0, PROF_NORM, 0, 2.0 * N * (double)C * sizeof(float));
}

// y = x·r·w, r = (mean x² + eps)^(−1/2): dx = r·w·dy − x·r³·mean(w·dy·x).
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                      const float *rstd, int N, int C) {
    double t0 = prof_begin();
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float r = rstd[n], dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (int c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
            float k = dot / C * r * r * r;
            #pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += weight[c] * dy[c] * r - x[c] * k;
        }
        int nblk = (C + 63) / 64;
        #pragma omp for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
            float dw[64] = {0};
            for (int n = 0; n < N; n++) {
                const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
                float r = rstd[n];
                #pragma omp simd
                for (int c = c0; c < c1; c++) dw[c - c0] += dy[c] * (x[c] * r);
            }
            for (int c = c0; c < c1; c++) dweight[c] += dw[c - c0];
        }
    }
    prof_end(t0, PROF_NORM, 0, 3.0 * N * (double)C * sizeof(float));
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C) {
    double t0 = prof_begin();
    #pragma omp parallel
    {
        // Input gradient: rows are independent.
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            #pragma omp simd reduction(+:dnorm_mean, dnorm_norm_mean)
            for (int c = 0; c < C; c++) {
                float dn = weight[c] * dy[c];
                dnorm_mean += dn;
                dnorm_norm_mean += dn * (x[c] - m) * r;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * r;
                dx[c] += (weight[c] * dy[c] - dnorm_mean - xhat * dnorm_norm_mean) * r;
            }
        }
        // Parameter gradients: columns in blocks, rows summed in order.
        int nblk = (C + 63) / 64;
        #pragma omp for schedule(static)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
            float dw[64] = {0}, db[64] = {0};
            for (int n = 0; n < N; n++) {
                const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
                float m = mean[n], r = rstd[n];
                #pragma omp simd
                for (int c = c0; c < c1; c++) {
                    dw[c - c0] += dy[c] * (x[c] - m) * r;
                    db[c - c0] += dy[c];
                }
            }
            for (int c = c0; c < c1; c++) { dweight[c] += dw[c - c0]; dbias[c] += db[c - c0]; }
        }
    }
    prof_end(t0, PROF_NORM, 0, 3.0 * N * (double)C * sizeof(float));
}
