// kernels/embedding — token + position embedding.
//
// The token table may be a vocabulary slice: rows [v0, v0+Vl) of the full
// table (vocab-parallel); tokens outside it contribute zero on this rank.
#ifndef TSR_KERNELS_EMBEDDING_H
#define TSR_KERNELS_EMBEDDING_H

#include <stdint.h>

// Positions: row (b,t) takes position t, or with pos (B,T) given, pos[b·T + t]
// (its place in its document under document masking).
//
// out (B,T,C) = wte[tok - v0] (if v0 <= tok < v0+Vl, else 0) + wpe[position] (wpe may be NULL).
// wte (Vl,C), wpe (≥T,C), tokens (B,T).
void embedding_forward(float *out, const int *tokens, const int *pos, const float *wte, const float *wpe,
                       int B, int T, int C, int v0, int Vl);
// The same from the table's bf16 values, each row widened as it is read (a
// bf16 stage's 16-bit copy: the table is never widened whole).
void embedding_forward16(float *out, const int *tokens, const int *pos, const uint16_t *wte16, const float *wpe,
                         int B, int T, int C, int v0, int Vl);

// out (Ns,C) = in (Ns,C) + wpe[(s0 + i) mod T] (with pos: wpe[pos[s0 + i]])
// for each row i, rows s0.. of the (B,T) micro-batch (wpe NULL: a copy).
// The position half of the lookup, after a vocabulary-parallel token
// lookup has been summed over its ranks; out may be in.
void embedding_add_positions(float *out, const float *in, const float *wpe, const int *pos, int Ns, int s0, int T,
                             int C);

// dwte (Vl,C) += dout rows by token, dwpe (T,C) += dout rows by position
// (either may be NULL). Each output row is accumulated in (b,t) order,
// independent of the thread count.
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, const int *pos,
                        int B, int T, int C, int v0, int Vl);

#endif
