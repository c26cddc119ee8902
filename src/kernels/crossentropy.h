// kernels/crossentropy — fused softmax + cross-entropy over logits rows.
#ifndef TSR_KERNELS_CROSSENTROPY_H
#define TSR_KERNELS_CROSSENTROPY_H

// logits (N,Vp): only the first V columns are real tokens (the rest is
// vocabulary padding and is ignored). targets (N) in [0,V), or -1 to skip
// the row (loss 0, gradient 0).
// losses (N) = -log softmax(logits)[target].
// When dscale != 0, logits is overwritten with its gradient
// dscale · (softmax − onehot(target)), padding columns set to 0 — the
// logits are never kept next to a separate probability buffer. With out16
// the gradient is stored in bf16 (bf16_round_row, gemm_bf16.h: the bits
// the tiles' packers would round the floats to), each row's Vp values at
// the start of its own row: ((uint16_t *)logits)[n·2·Vp + v]. (out16 needs
// the bf16 kernel built in: gemm_bf16_own.)
void crossentropy_forward(float *logits, float *losses, const int *targets, int N, int V, int Vp, float dscale,
                          int out16);

// The same loss over a vocabulary slice (model/tp), in three passes around
// two exchanges the caller makes between them. logits (N,Vl) are one
// rank's columns [v0, v0+Vl) of the whole logits; the first Vr of them are
// real tokens (Vr may be 0: a slice of padding only). Rows whose target is
// −1 are skipped throughout (statistics 0, loss 0, gradient 0).
// mx (N) = the maximum of the row's real logits (−inf when there are none).
void crossentropy_local_max(const float *logits, float *mx, const int *targets, int N, int Vr, int Vl);
// Given mx (N), the maxima over every slice: stats (N,2) = the sum of
// exp(x − mx) over the real columns, and the target's logit when this
// slice holds it (else 0). With keep, the real logits become exp(x − mx).
void crossentropy_local_sum(float *logits, float *stats, const float *mx, const int *targets, int N, int Vr, int Vl,
                            int v0, int keep);
// Given stats summed over every slice: losses (N) = mx + log(sum) − x[target];
// with dscale != 0 (after local_sum with keep) the slice's logits become
// dscale · (softmax − onehot(target)), padding columns 0; with out16 in
// bf16 as crossentropy_forward stores them.
void crossentropy_finish(float *logits, float *losses, const float *stats, const float *mx, const int *targets, int N,
                         int Vr, int Vl, int v0, float dscale, int out16);

#endif
