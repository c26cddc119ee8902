#include "kernels/adamw.h"

#include <math.h>

#include "core/prof.h"

// Threads take blocks of this many parameters; each block's 16-bit copy is
// written right after its update, past the cache (read at the next forward).
enum { ADAMW_BLOCK = 4096 };

void adamw_update(float *param, const float *grad, float *m, float *v, uint16_t *param16, size_t n,
                  const AdamWArgs *a) {
    double t0 = prof_begin();
    const float b1 = a->beta1, b2 = a->beta2, lr = a->lr, eps = a->eps, wd = a->weight_decay;
    const float ibc1 = 1.0f / a->bc1, ibc2 = 1.0f / a->bc2, gs = a->grad_scale;
    long nb = (long)((n + ADAMW_BLOCK - 1) / ADAMW_BLOCK);
    #pragma omp parallel for schedule(static)
    for (long b = 0; b < nb; b++) {
        size_t lo = (size_t)b * ADAMW_BLOCK, hi = lo + ADAMW_BLOCK < n ? lo + ADAMW_BLOCK : n;
        #pragma omp simd
        for (size_t i = lo; i < hi; i++) {
            float g = gs * grad[i];
            float mi = b1 * m[i] + (1.0f - b1) * g;
            float vi = b2 * v[i] + (1.0f - b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            param[i] -= lr * ((mi * ibc1) / (sqrtf(vi * ibc2) + eps) + wd * param[i]);
        }
        if (param16) half_pack_stream(a->prec16, param16 + lo, param + lo, hi - lo);
    }
    prof_end(t0, PROF_OPTIMIZER, 0, (param16 ? 30.0 : 28.0) * n);
}
