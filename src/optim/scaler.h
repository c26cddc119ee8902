// optim/scaler — the dynamic loss scale of fp16 training (Micikevicius et
// al. 2018), with PyTorch GradScaler's semantics and defaults and the
// hysteresis of Megatron-LM and DeepSpeed:
//
//   the loss's gradient is multiplied by `scale` before backward, so small
//   gradients survive fp16; the optimizer divides it out again. A step
//   whose gradients hold an inf or a NaN on any rank is skipped by every
//   rank (no update, the moments untouched); then, once `hysteresis`
//   overflows have been seen since the scale last grew, the scale halves
//   (and halves again on every overflow after that). After `window` steps
//   in a row without an overflow it doubles and the hysteresis count
//   starts again. A scale that falls below `min` stops the run: training
//   on would skip every step or learn from zeros (DeepSpeed issue #697).
#ifndef TSR_OPTIM_SCALER_H
#define TSR_OPTIM_SCALER_H

#include "core/check.h"
#include "core/json.h"

typedef struct ScalerConfig {
    double init;      // first scale (GradScaler: 2^16)
    int window;       // overflow-free steps before the scale doubles (GradScaler: 2000)
    int hysteresis;   // overflows before the first halving (GradScaler: 1; Megatron-LM: 2)
    double min;       // the floor (1)
} ScalerConfig;

typedef struct LossScaler {
    ScalerConfig cfg;
    double scale;
    int good;         // overflow-free steps since the scale last changed (GradScaler's growth tracker)
    int left;         // overflows still tolerated before a halving
} LossScaler;

void scaler_init(LossScaler *s, const ScalerConfig *c);
// The step's verdict: overflow (any rank saw inf/NaN) or not; moves the
// scale. 0, or -1 with err when the scale fell below the floor.
int scaler_update(LossScaler *s, int overflow, int step, Err *err);

// The state in a checkpoint: a JSON object's text, {"scale", "good", "left"}
// (free() it), and read back from one (where names it in errors).
char *scaler_state_json(const LossScaler *s);
int scaler_state_read(LossScaler *s, const Json *j, const char *where, Err *err);

#endif
