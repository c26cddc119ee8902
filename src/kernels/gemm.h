// kernels/gemm — tessera's own SGEMM for the skinny products of small
// batches: 64–256 rows against a whole weight, the shapes pipeline
// micro-batches and tensor-parallel halves create; and, since it reads
// both operands in place, the input gradients at every row count and
// attention's small per-head products (kernels/matmul says which).
//
// OpenBLAS packs both operands on every call. At 64 rows a weight is packed
// for only 128 FLOPs per element, and packing costs a quarter to a third of
// the product (60–77% of the ceiling at 64 rows, against 95% at 2048). This
// kernel packs nothing: the broadcast operand A is read in place a row at a
// time, the vector operand B a row of 16-float vectors at a time, and each
// tile of C stays in registers for a whole block of the reduction.
//
// Shapes (row-major): C (R,NC) = A (R,K) · B (K,NC), lda/ldb/ldc the row
// strides. Every element of C is summed over k in ascending order, in blocks
// of the same size whatever the thread count, so results do not depend on
// it. Built with AVX-512 (-march=native on such a machine) it runs its own
// register tiles; otherwise gemm_nn is cblas_sgemm and gemm_own() is 0.
#ifndef TSR_KERNELS_GEMM_H
#define TSR_KERNELS_GEMM_H

// 1 when the own kernel is compiled in (AVX-512), 0 when gemm_nn is CBLAS.
int gemm_own(void);

// C (R,NC) = A (R,K) · B (K,NC), + C when accumulate. Threads split the
// tiles of C (kernels_threads(), or one inside a parallel region, where
// it runs without entering OpenMP at all).
void gemm_nn(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
             int accumulate);
// gemm_nn, and *sq = the sum of squares (float64) of C as the product
// leaves it, each tile's taken from its registers as it is stored last and
// the tiles' added in tile order, the same for every thread count (a weight
// gradient's part of the gradient norm). 0, or -1 with nothing done where
// the kernel is not built in, the product is empty or the tiles' sums have
// no room: the caller runs gemm_nn.
int gemm_nn_sq(int R, int NC, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
               int accumulate, double *sq);

// dst (C,R) = src (R,C)^T, + bias (R) per row of dst when bias is not NULL
// (dst[c][r] = src[r][c] + bias[r]); ldd/lds the row strides.
void transpose_add(float *dst, int ldd, const float *src, int lds, const float *bias, int R, int C);

#endif
