// kernels/matmul_impl.h — which path runs an fp32 linear product, shared
// by kernels/matmul (the products) and kernels/matmul_path (the choice, and
// what the linked BLAS says of itself). Internal to kernels/.
#ifndef TSR_KERNELS_MATMUL_IMPL_H
#define TSR_KERNELS_MATMUL_IMPL_H

// Up to this many rows a linear layer runs on kernels/gemm rather than
// OpenBLAS (bench_gemm): at 64 rows gemm's forward and input gradient reach
// 87–106% of the 1-thread SGEMM ceiling where OpenBLAS's per-call packing
// holds it to 64–81%; at 256 rows its input gradient is ahead, the forward
// and the weight gradient even; at 512 rows and more OpenBLAS's AVX-512
// kernels are as fast or faster, but its Haswell kernels (what
// OPENBLAS_CORETYPE=Haswell picks) reach half the own kernel's rate there.
enum { OWN_MAX_ROWS = 256, OWN_OC_BLOCK = 1536 };

enum { PATH_BLAS, PATH_OWN, PATH_DNNL, PATH_PACK };
enum { PROD_FWD = 1, PROD_DINP = 2, PROD_DWEIGHT = 4 };

// The path of product (PROD_*) of N rows, input width C, output width OC.
int matmul_fp32_path(int product, int N, int C, int OC);

#endif
