// kernels/adamw — the fused AdamW update (Loshchilov & Hutter), one pass over
// parameters, gradients and both moments.
#ifndef TSR_KERNELS_ADAMW_H
#define TSR_KERNELS_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/half.h"

typedef struct AdamWArgs {
    float lr, beta1, beta2, eps, weight_decay;
    float bc1, bc2;      // bias corrections 1 − β1^t, 1 − β2^t
    float grad_scale;    // multiplies every gradient first (clipping, loss-scale undo)
    Precision prec16;    // with param16: the 16-bit copy's format (PREC_BF16 or PREC_FP16)
} AdamWArgs;

// For each i: g = grad_scale·grad[i]; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
// param -= lr · (m/bc1 / (sqrt(v/bc2) + eps) + weight_decay · param);
// and where param16 is not NULL, param16[i] = param rounded to prec16, in
// the same pass (a block at a time, while it is in cache).
void adamw_update(float *param, const float *grad, float *m, float *v, uint16_t *param16, size_t n,
                  const AdamWArgs *a);

#endif
