#include "kernels/adamw.h"

#include <math.h>

#include "core/prof.h"

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *a) {
    double t0 = prof_begin();
    const float b1 = a->beta1, b2 = a->beta2, lr = a->lr, eps = a->eps, wd = a->weight_decay;
    const float ibc1 = 1.0f / a->bc1, ibc2 = 1.0f / a->bc2, gs = a->grad_scale;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gs * grad[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] -= lr * ((mi * ibc1) / (sqrtf(vi * ibc2) + eps) + wd * param[i]);
    }
    prof_end(t0, PROF_OPTIMIZER, 0, 7.0 * n * sizeof(float));
}
