// kernels/attention — fused causal self-attention, memory-efficient.
//
// Layout: qkv (B,T,3·C) holds for every token the queries of NH heads, then
// the keys, then the values, each head HS = C/NH wide. out (B,T,C).
// Each (batch, head) is processed in blocks of ATT_BQ query rows: the block's
// scores against the keys it may see (at most ATT_BQ × T floats of per-thread
// scratch) are computed with SGEMM, softmaxed, and multiplied into the values.
// Only the log-sum-exp of each row (B,NH,T) is kept for the backward pass,
// which recomputes the probabilities — no T×T matrix is ever stored.
#ifndef TSR_KERNELS_ATTENTION_H
#define TSR_KERNELS_ATTENTION_H

#include <stddef.h>

enum { ATT_BQ = 64 };

// Floats of scratch that attention_forward/backward need for T and `threads`.
size_t attention_scratch_floats(int T, int threads);

// out (B,T,C), lse (B,NH,T) from qkv (B,T,3C); scratch from attention_scratch_floats
// with at least omp_get_max_threads() threads.
void attention_forward(float *out, float *lse, const float *qkv, float *scratch,
                       int B, int T, int C, int NH);

// dqkv (B,T,3C) is overwritten with the gradient given dout (B,T,C), the
// forward's inputs and lse.
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                        const float *lse, float *scratch, int B, int T, int C, int NH);

#endif
