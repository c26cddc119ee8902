#include "kernels/crossentropy.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/prof.h"
#include "kernels/vmath_impl.h"

void crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, int Vp,
                          float dscale) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vp;
        int tgt = targets[n];
        if (tgt < 0) {
            losses[n] = 0.0f;
            if (dscale != 0.0f) memset(x, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        float m = -INFINITY;
        #pragma omp simd reduction(max:m)
        for (int v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
        float xt = x[tgt];
        if (dscale == 0.0f) {
            float sum = 0.0f;
            #pragma omp simd reduction(+:sum)
            for (int v = 0; v < V; v++) sum += vexpf(x[v] - m);
            losses[n] = m + logf(sum) - xt;
            continue;
        }
        // With a gradient: keep exp(x − m) in place, then scale it to
        // dscale · softmax — one exponential per logit.
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int v = 0; v < V; v++) {
            float e = vexpf(x[v] - m);
            x[v] = e;
            sum += e;
        }
        losses[n] = m + logf(sum) - xt;
        float k = dscale / sum;
        #pragma omp simd
        for (int v = 0; v < V; v++) x[v] *= k;
        x[tgt] -= dscale;
        for (int v = V; v < Vp; v++) x[v] = 0.0f;
    }
    prof_end(t0, PROF_LOSS, 0, (dscale != 0.0f ? 2.0 : 1.0) * N * (double)Vp * sizeof(float));
}

void crossentropy_local_max(const float *logits, float *mx, const int *targets, int N, int Vr, int Vl) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float m = -INFINITY;
        if (targets[n] >= 0) {
            #pragma omp simd reduction(max:m)
            for (int v = 0; v < Vr; v++) m = x[v] > m ? x[v] : m;
        }
        mx[n] = targets[n] >= 0 ? m : 0.0f;
    }
    prof_end(t0, PROF_LOSS, 0, N * (double)Vl * sizeof(float));
}

void crossentropy_local_sum(float *logits, float *stats, const float *mx, const int *targets, int N, int Vr, int Vl,
                            int v0, int keep) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vl, m = mx[n], sum = 0.0f;
        int tgt = targets[n], t = tgt - v0;
        if (tgt < 0) {
            stats[2 * n] = stats[2 * n + 1] = 0.0f;
            continue;
        }
        stats[2 * n + 1] = t >= 0 && t < Vr ? x[t] : 0.0f;   // before keep overwrites it
        if (keep) {
            #pragma omp simd reduction(+:sum)
            for (int v = 0; v < Vr; v++) {
                float e = vexpf(x[v] - m);
                x[v] = e;
                sum += e;
            }
        } else {
            #pragma omp simd reduction(+:sum)
            for (int v = 0; v < Vr; v++) sum += vexpf(x[v] - m);
        }
        stats[2 * n] = sum;
    }
    prof_end(t0, PROF_LOSS, 0, (keep ? 2.0 : 1.0) * N * (double)Vl * sizeof(float));
}

void crossentropy_finish(float *logits, float *losses, const float *stats, const float *mx, const int *targets, int N,
                         int Vr, int Vl, int v0, float dscale) {
    double t0 = prof_begin();
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * Vl;
        int tgt = targets[n], t = tgt - v0;
        if (tgt < 0) {
            losses[n] = 0.0f;
            if (dscale != 0.0f) memset(x, 0, (size_t)Vl * sizeof(float));
            continue;
        }
        float sum = stats[2 * n];
        losses[n] = mx[n] + logf(sum) - stats[2 * n + 1];
        if (dscale == 0.0f) continue;
        float k = dscale / sum;
        #pragma omp simd
        for (int v = 0; v < Vr; v++) x[v] *= k;
        if (t >= 0 && t < Vr) x[t] -= dscale;
        for (int v = Vr; v < Vl; v++) x[v] = 0.0f;
    }
    prof_end(t0, PROF_LOSS, 0, (dscale != 0.0f ? 2.0 : 0.0) * N * (double)Vl * sizeof(float));
}
