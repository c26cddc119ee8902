// kernels/matmul — the linear layers: CBLAS (row-major), the own fp32 and
// bf16 kernels and oneDNN, chosen per product; on kernels/threads' count.
//
// Shapes: N rows (B·T), C input channels, OC output channels.
// weight (OC,C) row-major, so out = inp · weight^T (llm.c's convention;
// Hugging Face Conv1D stores the transpose, io/ converts).
#ifndef TSR_KERNELS_MATMUL_H
#define TSR_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/threads.h"

// Human-readable name of the linked BLAS and its threading ("OpenBLAS 0.3.21 (openmp)").
const char *kernels_blas_info(void);

// Under bf16 the linear layers multiply on the CPU's bf16 units
// (kernels/gemm_bf16): operands rounded to bf16 as they are packed, products
// summed in fp32, outputs and gradients fp32. matmul_set_bf16(1) turns it on
// for the calling thread where the kernel is built in (and is a no-op
// elsewhere); it returns the previous setting, to restore after a pass.
int matmul_set_bf16(int on);
int matmul_bf16(void);
// Process-wide, before the passes: 0 keeps every later matmul_set_bf16 a
// no-op (the trainer's choice where the bf16 unit is slower than the fp32
// FMAs: peak_bf16_pays()); 1, the default, allows it.
void matmul_bf16_allow(int on);

// Between matmul_hold(weight, version, uses) and matmul_release(), calls
// that pass this weight (unchanged meanwhile) pack it for the bf16 products
// once, not once a call: the output head, run in chunks of rows, holds its
// weight. A nonzero version names the weight's values: a later hold of the
// same weight and version reuses the forms already packed (the head of
// every micro-batch of a step, packed once a step). 0: packed anew at each
// hold. uses: the calls of each product (forward, input gradient) the
// caller expects while the version lasts, 0 where it cannot tell. On the
// tiles a weight used once is not held: its product reads it in place, as
// any unheld weight's does, which costs less than a pass that packs all of
// its panels first and a product that reads them (gpt2-124m's head at 256
// rows, in the step: 17-18 against 19-21 ms forward, 19-20 against 26-27
// input gradient); the bits are the same.
void matmul_hold(const float *weight, uint64_t version, int uses);
void matmul_release(void);

// From matmul_keep16(version) on (nonzero: the bound 16-bit copy's values,
// the same for the step's micro-batches), the input gradient of a bound
// weight (matmul_bind16) of at most 256 rows reads the weight's panels (on
// the tiles) or strips (on the vector units) packed once per version and
// kept (MEM_WORKSPACE: about the bound weights' bytes again), not packed
// from its rows in every call, where a micro-batch's few rows make that
// packing most of the product (gpt2-124m's, 64 rows a micro-batch: 2x
// faster on the tiles). 0 stops it; the forms stay for the next version.
// The bits are the same.
void matmul_keep16(uint64_t version);

// A weight of n floats at w whose bf16 values are at src16: until
// matmul_unbind16(key), the linear layers read it from src16 (the bf16
// products pack it from there; the fp32 paths widen it into scratch) and
// never read the floats at w, which need not hold it. A stage binds the
// 16-bit copy of its linear layers' weights this way rather than widening
// them into the buffer it passes. Calling-thread only; key > 0 names the
// caller's group of bindings, and matmul_unbind16(0) drops them all.
void matmul_bind16(int key, const float *w, const uint16_t *src16, size_t n);
void matmul_unbind16(int key);
// The bf16 values bound for the n floats at w, or NULL where none are: for
// a pass that reads a bound table other than by a product (the embedding
// lookup).
const uint16_t *matmul_bound16(const float *w, size_t n);

// An input of n floats at x that already holds bf16 values, those values
// also at x16 in the same layout (an activation its 16-bit store holds):
// until matmul_unbind_inputs16(), a bf16 forward product whose input lies
// in it reads x16 as its operand instead of packing the floats (the same
// values, so the same bits). The caller must not change the floats while
// bound. Calling thread only.
void matmul_bind_input16(const float *x, const uint16_t *x16, size_t n);
// The same for an input whose floats do not hold the values (its 16-bit
// store is all there is): every product reads x16, and a path in fp32
// widens it first.
void matmul_bind_input16_only(const float *x, const uint16_t *x16, size_t n);
void matmul_unbind_inputs16(void);
// The bf16 values of the n floats at x where they lie in a bound input
// (either kind), else NULL: for a pass other than a product that reads the
// store (the attention on the bf16 units reads q, k and v from it).
const uint16_t *matmul_input16(const float *x, size_t n);
// The floats of such an input for a pass in fp32: x itself, or where the
// floats do not hold the values (matmul_bind_input16_only), the store
// widened into per-thread scratch; NULL when that scratch is not to be had.
const float *matmul_input_fp32(const float *x, size_t n);

// A weight gradient not yet written this step: the next linear_backward
// into dweight writes it (dout^T · inp, no addition) instead of adding to
// it; later ones add. A stage marks its linear layers' gradients so at the
// start of a step instead of zeroing them first (Stage: stage_grads_begin).
// Calling thread only; matmul_grads_unwritten() counts marks not yet used
// but those of gradients with rows queued (matmul_defer): these write them.
void matmul_grad_fresh(float *dweight);
int matmul_grads_unwritten(void);

// A weight gradient whose next linear_backward is its last write of the
// step, *sq negative: where that product runs on the bf16 units, or in
// fp32 on kernels/gemm_pack or the own kernel (matmul_fp32_sumsq), it
// stores the gradient's sum of squares (float64, gemm_bf16_op_sq,
// gemm_pack or gemm_nn_sq; never negative)
// in *sq as it writes it, so the gradient norm need not read it again;
// other paths leave *sq as it was. One product may write neighbouring
// marked tensors at once (LLaMA's q, k and v): the first one's *sq gets
// the sum of all, the others' 0. Calling thread only;
// matmul_grad_sumsq_clear() drops the marks not used.
void matmul_grad_sumsq(float *dweight, double *sq);
void matmul_grad_sumsq_clear(void);
// 1 where the fp32 weight gradient of a layer of N rows, input width C and
// output width OC takes its sum of squares so (its product on
// kernels/gemm_pack or kernels/gemm), else 0.
int matmul_fp32_sumsq(int N, int C, int OC);

// Weight gradients over several micro-batches in one product. A
// micro-batch of a pipeline stage (or of gradient accumulation) of 64 rows
// adds 2·64 FLOP to each element of a weight gradient that lives in memory:
// its products wait on memory (68-73% of the fp32 peak on one thread of
// Zen 5, where 256 rows reach 85-90%). With matmul_defer(mb) in force (mb:
// the micro-batch the passes are of), linear_backward and
// linear_backward16 queue a weight gradient's rows — the output gradient's
// and the input's, copied in the form the product reads (bf16 under
// matmul_set_bf16) — and every g-th micro-batch of the gradient
// (kernels/matmul_defer: the gradients take turns) multiplies the queued
// rows and its own in one product of at most 256 rows; so does every call
// with matmul_defer(-1). Only where that product is the same arithmetic as
// the ones it replaces: the own fp32 kernel, or vdpbf16ps, each element's
// sum running over the rows in order from the stored gradient, so the
// gradients come out bit for bit as without it (elsewhere every call
// multiplies at once). A gradient's first product and its sum of squares
// (matmul_grad_fresh, matmul_grad_sumsq) move with its rows. Calling
// thread only. The caller turns it off (-1) before the pass whose
// gradients must be whole (a step's last micro-batch), and around a
// gradient that something else adds to between micro-batches (a tied
// head's, which the embedding lookup's rows join); it returns the setting
// it replaces. matmul_deferred() counts the gradients with rows still
// queued (0 after a pass with it off).
// MATMUL_DEFER_ALL: every gradient queues its rows, whatever its turn, as
// long as one product can still take them and as many again; the caller
// then runs the queued products with matmul_defer_flush() (a pipeline
// stage, after it has sent the last micro-batch's input gradient on:
// the previous stage need not wait for them).
enum { MATMUL_DEFER_ALL = -2 };
int matmul_defer(int mb);
int matmul_deferred(void);
void matmul_defer_flush(void);
// The most rows one product gathers for a weight gradient of N rows a
// call, input width C and output width OC under the current precision (0:
// none, every call multiplies at once).
int matmul_defer_rows(int N, int C, int OC);
// Process-wide, before the passes: 0 makes every call multiply at once
// (tests compare the two).
void matmul_defer_allow(int on);

// Measured SGEMM throughput in GFLOP/s on n×n×n products with the current
// threads (the best of `reps` timed calls after two warm-up calls, so a
// busy moment does not lower it): the machine's practical ceiling that MFU
// is quoted against.
double kernels_sgemm_gflops(int n, int reps);

// out (N,OC) = inp (N,C) · weight (OC,C)^T + bias (OC); bias may be NULL.
void linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                    int N, int C, int OC);
// The same output straight into its 16-bit store: out16 (N,OC) = the bf16
// values half_pack gives linear_forward's out, under matmul_set_bf16 on
// the bf16 units (gemm_bf16_op16), out only their room. 0, or -1 with
// nothing written where the product cannot run so (one row, the transposed
// forward of few rows): then linear_forward and a pack.
int linear_forward16(uint16_t *out16, float *out, const float *inp, const float *weight, const float *bias, int N,
                     int C, int OC);

// dinp (N,C) = dout (N,OC) · weight (OC,C), overwritten (accumulate=0) or added to;
// dweight (OC,C) += dout^T · inp (written, where marked unwritten: matmul_grad_fresh); dbias (OC) += column sums of dout (NULL skips it).
// dinp may be NULL (first layer of a stage that needs no input gradient), and
// dweight NULL (no weight gradient: a frozen weight, or timing dinp alone).
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int C, int OC, int accumulate);

// Whether linear_backward16 reads a bf16 output gradient as it lies: under
// matmul_set_bf16 where the bf16 kernel is built in — the tiles' panels
// read its rows or columns, the vector units its rows as the input
// gradient's A and its transpose packed for the weight gradient's (from
// half the bytes the floats would take).
int matmul_grad16(void);
// linear_backward (no bias) from an output gradient already in bf16: dout
// (N,OC) rows ld values apart, OC even. The bits of linear_backward on the
// widened floats under matmul_set_bf16, which rounds them to the same
// values as it packs them. Where the bf16 units cannot run it
// (matmul_grad16() is 0, or the memory for their panels or packed operands
// is not to be had) dout is widened first.
void linear_backward16(float *dinp, float *dweight, const uint16_t *dout, int ld, const float *inp,
                       const float *weight, int N, int C, int OC, int accumulate);

// colsum (M) += column sums of a (N,M), by kernels/chunks: the result does
// not depend on the thread count.
void colsum_add(float *colsum, const float *a, int N, int M);

#endif
