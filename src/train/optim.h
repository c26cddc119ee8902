// train/optim — AdamW over a parameter table, the learning-rate schedule,
// and the global gradient norm used for clipping.
#ifndef TSR_TRAIN_OPTIM_H
#define TSR_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "model/params.h"

typedef enum { LR_COSINE, LR_CONSTANT } LrSchedule;

typedef struct OptimConfig {
    float lr, min_lr;          // peak and floor learning rate
    int warmup;                // linear warmup steps
    int steps;                 // total optimizer steps (cosine horizon)
    LrSchedule schedule;
    float beta1, beta2, eps, weight_decay;
    float clip;                // max global gradient norm; 0 disables clipping
} OptimConfig;

// Learning rate of optimizer step `step` (0-based): linear warmup from
// lr/warmup to lr over the first `warmup` steps, then cosine from lr down to
// min_lr at step `steps` (or constant lr).
float lr_at(const OptimConfig *o, int step);

typedef struct AdamW {
    float *m, *v;      // first and second moments (MEM_OPTIM), n floats each
    size_t n;
    int64_t t;         // updates done
} AdamW;

int adamw_init(AdamW *a, size_t n, Err *err);
void adamw_free(AdamW *a);
// One update of every tensor in the table: weight decay only on tensors
// without PARAM_NO_DECAY; gradients multiplied by grad_scale first.
void adamw_step(AdamW *a, const ParamTable *t, float *params, const float *grads, float lr,
                const OptimConfig *o, float grad_scale);

// A piece of the flat buffer that one rank updates (a ZeRO shard is one
// piece per segment): the values of params and grads of [lo, hi), and its
// moments at AdamW.m/v + opt_off.
typedef struct OptPiece {
    size_t lo, hi;
    float *params;
    const float *grads;
    size_t opt_off;
} OptPiece;

// One update of the pieces only (weight decay as adamw_step).
void adamw_step_pieces(AdamW *a, const ParamTable *t, const OptPiece *pc, int npc, float lr, const OptimConfig *o,
                       float grad_scale);
// The same in parts: adamw_begin_step counts the update, then
// adamw_update_pieces applies it to some pieces at a time (so a caller can
// send each piece on as soon as it is updated).
void adamw_begin_step(AdamW *a);
void adamw_update_pieces(const AdamW *a, const ParamTable *t, const OptPiece *pc, int npc, float lr,
                         const OptimConfig *o, float grad_scale);

// Sum of squares of g (n) in double, in a fixed order (blocks summed in
// order), so the value does not depend on the thread count.
double sum_squares(const float *g, size_t n);

#endif
