// optim/adamw — the optimizer state below the parallel layer: AdamW
// (Loshchilov & Hutter) moments over pieces of the flat buffers, the fused
// update, and the fixed-order sum of squares behind the global gradient
// norm. It knows the parameter table (which tensors decay) and nothing of
// layouts: the data-parallel module hands it the pieces a rank owns, the
// checkpoint writer sees its moments as named sections of flat pieces.
#ifndef TSR_OPTIM_ADAMW_H
#define TSR_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "core/json.h"
#include "model/params.h"

// Hyper-parameters as given (double); the update computes in float, as
// its kernel does.
typedef struct AdamWConfig {
    double beta1, beta2, eps, weight_decay;
} AdamWConfig;

typedef struct AdamW {
    float *m, *v;      // first and second moments (MEM_OPTIM), n floats each
    size_t n;
    int64_t t;         // updates done
} AdamW;

// Zeroed moments for n floats (a rank's shard: its pieces one after another).
int adamw_init(AdamW *a, size_t n, Err *err);
void adamw_free(AdamW *a);

// A piece of the flat buffer that one rank updates: the values of params
// and grads of [lo, hi), and its moments at AdamW.m/v + opt_off. A ZeRO
// shard is one piece per segment; without sharding one piece is the
// whole buffer.
typedef struct OptPiece {
    size_t lo, hi;
    float *params;
    const float *grads;
    size_t opt_off;
    uint16_t *params16;   // the 16-bit copy of [lo, hi), written as the update goes (NULL: none)
    Precision prec16;     // its format
    float *m, *v;         // the piece's moments, hi − lo floats each, in place of AdamW.m/v + opt_off
                          // (the optimizer offload's buffers; NULL: AdamW's own)
} OptPiece;

// One update in parts: adamw_begin_step counts it, then adamw_update_pieces
// applies it to some pieces at a time (so a caller can send each piece on
// as soon as it is updated). Weight decay only on tensors without
// PARAM_NO_DECAY; gradients multiplied by grad_scale first (clipping).
void adamw_begin_step(AdamW *a);
void adamw_update_pieces(const AdamW *a, const ParamTable *t, const OptPiece *pc, int npc, float lr,
                         const AdamWConfig *o, float grad_scale);
// begin + update of the whole buffer as one piece.
void adamw_step(AdamW *a, const ParamTable *t, float *params, const float *grads, float lr, const AdamWConfig *o,
                float grad_scale);

// In a checkpoint the moments are two sections beside the parameters
// (their tensors named "exp_avg/NAME" and "exp_avg_sq/NAME", as PyTorch
// names them), and the step count is meta.json's "adam_t".
extern const char *const adamw_sections[2];
// The state as a JSON object's text for the checkpoint's meta.json
// ({"optimizer": true, "adam_t": t}); free() it.
char *adamw_state_json(const AdamW *a);
// Reads the step count back from a checkpoint's meta.json (dir names it
// in errors); -1 with err when missing.
int adamw_state_read(AdamW *a, const Json *meta, const char *dir, Err *err);

// Sum of squares of g (n) in double, in a fixed order (blocks summed in
// order), so the value does not depend on the thread count.
double sum_squares(const float *g, size_t n);
// The same of the flat range [lo, hi) of a table's gradients at g
// (element lo), each tensor whose sum was taken as its gradient was last
// written (tsq[i] ≥ 0: stage_grad_sumsq) counted by it and the stretches
// between such tensors read (tsq NULL: one read of the whole range); the
// floats read are added to *nread.
double sum_squares_taken(const ParamTable *t, const float *g, size_t lo, size_t hi, const double *tsq, size_t *nread);

#endif
