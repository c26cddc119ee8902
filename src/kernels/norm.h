// kernels/norm — LayerNorm (GPT-2) and RMSNorm (LLaMA) over the last
// dimension.
#ifndef TSR_KERNELS_NORM_H
#define TSR_KERNELS_NORM_H

// out (N,C) = (inp - mean) · rstd · weight + bias, per row; saves mean (N)
// and rstd (N) for the backward pass. eps = 1e-5 as GPT-2.
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C);

// Adds to dinp (N,C), dweight (C), dbias (C), reading each row once;
// dweight and dbias summed by kernels/chunks, independent of the thread count.
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C);

// RMSNorm (Zhang & Sennrich 2019) as Hugging Face's LLaMA computes it:
// out (N,C) = (inp · rstd) · weight per row, rstd = 1/√(mean(inp²) + eps);
// saves rstd (N).
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps);

// Adds to dinp (N,C) and dweight (C), reading each row once; dweight summed
// by kernels/chunks, independent of the thread count.
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                      const float *rstd, int N, int C);

#endif
