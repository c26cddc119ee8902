#include "kernels/crossentropy.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/prof.h"
#include "kernels/gemm_bf16.h"
#include "kernels/vmath_impl.h"

void crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, int Vp, float dscale,
                          int out16) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vp;
        int tgt = targets[n];
        if (tgt < 0) {
            losses[n] = 0.0f;
            if (dscale != 0.0f) memset(x, 0, (size_t)Vp * (out16 ? sizeof(uint16_t) : sizeof(float)));
            continue;
        }
        float m = vmax_row(x, V, -INFINITY), xt = x[tgt];
        // With a gradient: keep exp(x − m) in place, then scale it to
        // dscale · softmax — one exponential per logit.
        float sum = vexp_row(dscale != 0.0f ? x : NULL, x, V, 1.0f, m);
        losses[n] = m + logf(sum) - xt;
        if (dscale == 0.0f) continue;
        vscale_row(x, V, dscale / sum);
        x[tgt] -= dscale;
        for (int v = V; v < Vp; v++) x[v] = 0.0f;
        if (out16) bf16_round_row((uint16_t *)x, x, (size_t)Vp);   // while the row is in cache
    }
    prof_end(t0, PROF_LOSS, 0, (dscale != 0.0f ? 2.0 : 1.0) * N * (double)Vp * sizeof(float));
}

void crossentropy_local_max(const float *logits, float *mx, const int *targets, int N, int Vr, int Vl) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        mx[n] = targets[n] >= 0 ? vmax_row(x, Vr, -INFINITY) : 0.0f;
    }
    prof_end(t0, PROF_LOSS, 0, N * (double)Vl * sizeof(float));
}

void crossentropy_local_sum(float *logits, float *stats, const float *mx, const int *targets, int N, int Vr, int Vl,
                            int v0, int keep) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vl;
        int tgt = targets[n], t = tgt - v0;
        if (tgt < 0) {
            stats[2 * n] = stats[2 * n + 1] = 0.0f;
            continue;
        }
        stats[2 * n + 1] = t >= 0 && t < Vr ? x[t] : 0.0f;   // before keep overwrites it
        stats[2 * n] = vexp_row(keep ? x : NULL, x, Vr, 1.0f, mx[n]);
    }
    prof_end(t0, PROF_LOSS, 0, (keep ? 2.0 : 1.0) * N * (double)Vl * sizeof(float));
}

void crossentropy_finish(float *logits, float *losses, const float *stats, const float *mx, const int *targets, int N,
                         int Vr, int Vl, int v0, float dscale, int out16) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vl;
        int tgt = targets[n], t = tgt - v0;
        if (tgt < 0) {
            losses[n] = 0.0f;
            if (dscale != 0.0f) memset(x, 0, (size_t)Vl * (out16 ? sizeof(uint16_t) : sizeof(float)));
            continue;
        }
        float sum = stats[2 * n];
        losses[n] = mx[n] + logf(sum) - stats[2 * n + 1];
        if (dscale == 0.0f) continue;
        vscale_row(x, Vr, dscale / sum);
        if (t >= 0 && t < Vr) x[t] -= dscale;
        for (int v = Vr; v < Vl; v++) x[v] = 0.0f;
        if (out16) bf16_round_row((uint16_t *)x, x, (size_t)Vl);
    }
    prof_end(t0, PROF_LOSS, 0, (dscale != 0.0f ? 2.0 : 0.0) * N * (double)Vl * sizeof(float));
}
