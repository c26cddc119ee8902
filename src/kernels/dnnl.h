// kernels/dnnl — fp32 products on oneDNN's matmul primitive (Debian's
// libdnnl, the library PyTorch's CPU path runs on), where kernels/matmul
// chooses it: oneDNN's brgemm kernels pack their operands in blocks sized
// to the caches and reach a higher share of the fp32 peak than the own
// register tiles or OpenBLAS on some of the linear layers' shapes
// (bench/bench_dnnl measures them side by side).
//
// A primitive is made once per shape and stride set and kept; calls bind
// the operands' addresses to it. The products are deterministic for a
// given thread count (oneDNN splits the work by the thread count, so its
// sums may differ between counts). Built when dnnl.h is found (the Makefile
// defines TSR_DNNL and links -ldnnl); elsewhere dnnl_own() is 0.
#ifndef TSR_KERNELS_DNNL_H
#define TSR_KERNELS_DNNL_H

// 1 when oneDNN is linked in and works on this CPU.
int dnnl_own(void);

// C (M,NC) = A (M,K) · B (K,NC), + C when accumulate, + bias (NC floats,
// every row) where bias is not NULL, added as the products' sums are
// stored: fp32, A's element (i,k) at A[i·ars + k·acs], B's (k,j) at
// B[k·brs + j·bcs], C row-major with row stride ldc. 0, or -1 when oneDNN
// is not linked in or refuses the product (the caller runs another path).
int dnnl_gemm_f32(int M, int NC, int K, const float *A, long ars, long acs, const float *B, long brs, long bcs,
                  float *C, long ldc, int accumulate, const float *bias);

// The oneDNN version and the instruction set it runs ("oneDNN 2.6.3
// (avx512_core_bf16)"), or NULL when it is not linked in.
const char *dnnl_info(void);

#endif
