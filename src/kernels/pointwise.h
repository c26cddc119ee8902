// kernels/pointwise — elementwise kernels: GELU (tanh form), SwiGLU,
// residual adds.
#ifndef TSR_KERNELS_POINTWISE_H
#define TSR_KERNELS_POINTWISE_H

#include <stddef.h>
#include <stdint.h>

// out (n) = gelu(inp), tanh approximation as GPT-2:
// 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))), computed as x·sigmoid(2u).
void gelu_forward(float *out, const float *inp, size_t n);
// dinp (n) = gelu'(inp) · dout; dinp may alias dout.
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
// The same with 16-bit stores (bf16), for activations kept in them alone:
// inp rounded into inp16 and out16 = bf16(gelu(the rounded inp)), no floats
// written; the backward reads inp16. The bits of rounding inp in place,
// gelu_forward and packing out, and of gelu_backward on the widened inp16.
// inp NULL: inp16 holds the input already (a product wrote it there).
void gelu_forward16(uint16_t *out16, uint16_t *inp16, const float *inp, size_t n);
void gelu_backward16(float *dinp, const uint16_t *inp16, const float *dout, size_t n);
// gelu_backward16 for products that read their output gradient in bf16
// (N rows of F, F even): each row's d(inp) stored in bf16 at the start of
// its own row of dout (uint16 rows 2F apart), rounded as the tiles' packers
// round fp32 (bf16_round_row), and dbias (F) += the column sums of the
// floats before that rounding, by kernels/chunks. The bits of
// gelu_backward16 and then colsum_add, and the products' operands the
// values their packers would have rounded the floats to; dout is read once.
void gelu_backward16_rows(float *dout, float *dbias, const uint16_t *inp16, int N, int F);

// SwiGLU (Shazeer 2020): out (N,F) = silu(gate) · up, for gu (N,2F) whose
// rows are F gate values then F up values; silu(x) = x·sigmoid(x).
void swiglu_forward(float *out, const float *gu, int N, int F);
// dgu (N,2F) = the gradients of gate and up, given dout (N,F).
void swiglu_backward(float *dgu, const float *gu, const float *dout, int N, int F);
// The same with 16-bit stores, as gelu_forward16 and gelu_backward16.
void swiglu_forward16(uint16_t *out16, uint16_t *gu16, const float *gu, int N, int F);
void swiglu_backward16(float *dgu, const uint16_t *gu16, const float *dout, int N, int F);
// swiglu_backward16's gradients in bf16 (dgu16 (N,2F), rows 2F apart),
// rounded as the tiles' packers round fp32 (bf16_round_row): the values
// the products would have rounded its floats to.
void swiglu_backward16_rows(uint16_t *dgu16, const uint16_t *gu16, const float *dout, int N, int F);

// out (N,C) = x + y + bias (bias (C) may be NULL); out may alias x or y.
void residual_forward(float *out, const float *x, const float *y, const float *bias, int N, int C);

#endif
