#include "kernels/crossentropy.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/vmath_impl.h"

void crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, int Vp,
                          float dscale) {
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
}
