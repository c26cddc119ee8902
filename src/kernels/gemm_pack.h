// kernels/gemm_pack — tessera's cache-blocked fp32 SGEMM for the products
// of many rows: operands packed into the layouts the register tile reads,
// in blocks sized to the caches (the Goto/BLIS scheme), for the input and
// weight gradients of the linear layers and the head (kernels/matmul says
// where it runs).
//
// kernels/gemm reads its operands in place, which wins at few rows; past a
// few hundred rows the panels it reads spread over L1's sets and its tiles
// reach 57–62% of the fp32 peak (Intel's cores). Here each block of the
// reduction (KC steps) of B is packed once into strips of 48 columns
// ([k][48], a core's L2 holds the block), each block of A into panels of
// 8 rows (L1), and an 8 × 48 register tile (24 accumulators) runs over
// them: per k three vectors of B and eight broadcasts of A.
//
// Shapes: C (M,N) = A (M,K) · B (K,N), + C when accumulate; A's element
// (i,k) at A[i·ars + k·acs], B's (k,j) at B[k·brs + j·bcs] (a transposed
// operand is a pair of strides), C row-major with row stride ldc. Every
// element of C is summed over k in ascending order, in blocks of KC, by
// one thread: the bits do not depend on the thread count.
#ifndef TSR_KERNELS_GEMM_PACK_H
#define TSR_KERNELS_GEMM_PACK_H

// 1 when the kernel is compiled in (AVX-512), else gemm_pack returns -1.
int gemm_pack_own(void);

// The product above on kernels_threads() threads (one inside a parallel
// region); with sq given, *sq = the sum of squares (float64) of C as the
// product leaves it, each 8 × 48 tile's taken as it is stored last and
// added in tile order: the same for every thread count (a weight
// gradient's part of the gradient norm, with no pass reading it again).
// 0, or -1 with C and *sq untouched when the product is empty, the kernel
// is not built in, or a thread's packing buffers (about 1.1 MiB, kept and
// reused) are not to be had: the caller runs another path.
int gemm_pack(int M, int N, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs, float *C,
              long ldc, int accumulate, double *sq);

#endif
