// kernels/attention — fused causal self-attention, memory-efficient, with
// grouped-query attention (Ainslie et al. 2023).
//
// Layout: qkv (B,T,(NH + 2·NKV)·HS) holds for every token the queries of NH
// heads, then the keys of NKV heads, then their values, each head HS wide;
// query head h reads key/value head h / (NH/NKV) (NKV = NH: multi-head
// attention, as GPT-2), without the shared heads being copied. out
// (B,T,NH·HS).
// Each (batch, head) is processed in blocks of ATT_BQ query rows: the block's
// scores against the keys it may see (at most ATT_BQ × T floats of per-thread
// scratch) are computed with kernels/gemm (each thread transposes its head's
// keys and values once into scratch of its own, and a block's score
// gradients and probabilities for the key and value gradients), softmaxed,
// and multiplied into the values.
// Only the log-sum-exp of each row (B,NH,T) is kept for the backward pass,
// which recomputes the probabilities — no T×T matrix is ever stored.
//
// Document masking: start (B,T), or NULL for plain causal attention, gives
// for each position the first position (within its row) of its document,
// nondecreasing along a row with start[t] <= t; position t then attends to
// keys start[t] .. t only. A block of queries computes its scores from its
// first query's start on, so the keys of earlier documents cost nothing.
// NULL runs exactly the arithmetic of the causal kernel.
#ifndef TSR_KERNELS_ATTENTION_H
#define TSR_KERNELS_ATTENTION_H

#include <stddef.h>

enum { ATT_BQ = 64 };

// Floats of scratch that attention_forward/backward need for T and `threads`.
size_t attention_scratch_floats(int T, int threads);

// out (B,T,NH·HS), lse (B,NH,T) from qkv and start (B,T) or NULL; scratch
// from attention_scratch_floats with at least omp_get_max_threads()
// threads. NKV divides NH.
void attention_forward(float *out, float *lse, const float *qkv, const int *start, float *scratch, int B, int T,
                       int NH, int NKV, int HS);

// dqkv (B,T,(NH + 2·NKV)·HS) is overwritten with the gradient given dout,
// the forward's inputs and lse. A key/value head's gradient sums its query
// heads' in head order, whatever the thread count.
void attention_backward(float *dqkv, const float *dout, const float *qkv, const int *start, const float *out,
                        const float *lse, float *scratch, int B, int T, int NH, int NKV, int HS);

// The (query, key) pairs the kernels compute for start (B,T), or NULL:
// B·T(T+1)/2 unmasked, the sum of L(L+1)/2 over the documents masked.
double attention_pairs(const int *start, int B, int T);

// P := softmax of the causal rows of scale·S (nq × nk, row i sees keys
// lo[i]..q0+i, lo NULL: from 0), in place, masked entries set to 0. With lse_in given
// (backward), exp(score − lse); otherwise (forward) each row's exps over
// their sum, one exp per score, and its log-sum-exp into lse_out. The fp32 and bf16 blocks
// share it (the fp32 products have the scale in them already: 1).
void attention_softmax_rows(float *S, int nq, int nk, int q0, const int *lo, float scale, float *lse_out,
                            const float *lse_in);

// The first key a block of nq queries from q0 computes its scores from: its
// first query's document start (start: the row's (T) starts, NULL: 0),
// rounded down to a multiple of align (the bf16 operands come in pairs of
// keys); lo[i] := start[q0 + i] − that key, each query's first column.
int attention_block_keys(const int *start, int q0, int nq, int align, int *lo);

// dP := scale · P ∘ (dP − D), D_i = dO_i · O_i (the rows' gradient of the
// scores, nq × nk), o and dO rows ldo apart, HS wide.
void attention_ds_rows(float *dP, const float *P, const float *o, const float *dO, int ldo, int nq, int nk, int HS,
                       float scale);

// Under bf16 on the bf16 units (matmul_bf16(): a bf16 stage's passes),
// attention_forward and attention_backward run these instead: the same
// blocks with the products on the bf16 units (kernels/attention_bf16),
// each product's operands rounded to bf16, the softmax and its statistics
// fp32. 0, or -1 when their scratch cannot be had (then fp32 runs). Both
// paths read qkv through kernels/matmul's bound inputs: where a bf16 pass
// bound it (its 16-bit store alone, matmul_bind_input16_only), the bf16
// products read the store and the fp32 path widens it.
int attention_forward_bf16(float *out, float *lse, const float *qkv, const int *start, float *scratch, int B, int T,
                           int NH, int NKV, int HS);
int attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const int *start, const float *out,
                            const float *lse, float *scratch, int B, int T, int NH, int NKV, int HS);

// Incremental decoding, one sequence: out (T,NH·HS) for T new positions
// pos .. pos+T-1 whose queries are the first NH·HS values of each of the T
// rows of q (ldq apart), each attending to the cached keys and values kc,
// vc (S,NKV·HS) of positions 0 .. its own (the new ones already stored),
// or with start (T) given, of positions start[t] .. its own (its
// document's). Query head h reads key/value head h / (NH/NKV).
void attention_decode(float *out, const float *q, int ldq, const float *kc, const float *vc, const int *start, int T,
                      int pos, int NH, int NKV, int HS);

#endif
