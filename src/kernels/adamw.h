// kernels/adamw — the fused AdamW update (Loshchilov & Hutter), one pass over
// parameters, gradients and both moments.
#ifndef TSR_KERNELS_ADAMW_H
#define TSR_KERNELS_ADAMW_H

#include <stddef.h>

typedef struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2;      // bias corrections 1 − β1^t, 1 − β2^t
    float grad_scale;    // multiplies every gradient first (clipping, loss-scale undo)
} AdamWArgs;

// For each i: g = grad_scale·grad[i]; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
// param -= lr · (m/bc1 / (sqrt(v/bc2) + eps) + weight_decay · param).
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *a);

#endif
