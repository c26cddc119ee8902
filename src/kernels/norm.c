#include "kernels/norm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/prof.h"
#include "kernels/chunks.h"

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
// The backward passes read each row once: its input gradient, then its
// terms of the parameters' gradients into its chunk's sums (kernels/chunks)
// while the row is in L1. A second pass down the columns read dout and inp
// again from memory at 2,048 rows.
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                      const float *rstd, int N, int C) {
    if (N <= 0) return;
    double t0 = prof_begin();
    int nc;
    float *dw = chunk_room(N, (size_t)C, &nc);
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int k = 0; k < nc; k++) {
            float *pw = dw + (size_t)k * C;
            memset(pw, 0, (size_t)C * sizeof *pw);
            for (int n = chunk_lo(N, nc, k); n < chunk_lo(N, nc, k + 1); n++) {
                const float *dy = dout + (size_t)n * C, *x = inp + (size_t)n * C;
                float *dx = dinp + (size_t)n * C;
                float r = rstd[n], dot = 0.0f;
                #pragma omp simd reduction(+:dot)
                for (int c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
                float q = dot / C * r * r * r;
                #pragma omp simd
                for (int c = 0; c < C; c++) {
                    dx[c] += weight[c] * dy[c] * r - x[c] * q;
                    pw[c] += dy[c] * (x[c] * r);
                }
            }
        }
        chunks_add(dweight, dw, nc, (size_t)C, C);
    }
    prof_end(t0, PROF_NORM, 0, 3.0 * N * (double)C * sizeof(float));
}

void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C) {
    if (N <= 0) return;
    double t0 = prof_begin();
    int nc;
    float *part = chunk_room(N, 2 * (size_t)C, &nc);   // chunk k: its weight's sums, then its bias's
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int k = 0; k < nc; k++) {
            float *pw = part + (size_t)k * 2 * C, *pb = pw + C;
            memset(pw, 0, 2 * (size_t)C * sizeof *pw);
            for (int n = chunk_lo(N, nc, k); n < chunk_lo(N, nc, k + 1); n++) {
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
                    pw[c] += dy[c] * xhat;
                    pb[c] += dy[c];
                }
            }
        }
        chunks_add(dweight, part, nc, 2 * (size_t)C, C);
        chunks_add(dbias, part + C, nc, 2 * (size_t)C, C);
    }
    prof_end(t0, PROF_NORM, 0, 3.0 * N * (double)C * sizeof(float));
}
