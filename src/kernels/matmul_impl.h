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

// A weight gradient's rows: dout (rows, OC) ldo values apart and inp
// (rows, C) C apart, each fp32 or bf16 (dout16, inp16).
typedef struct WRows {
    const void *dout, *inp;
    int ldo, rows, dout16, inp16;
} WRows;

// The queue of dweight (OC,C) under matmul_defer (kernels/matmul_defer): 1
// where r's rows joined it (nothing to multiply now); else 0, r left as it
// is where none were queued, or replaced by the queued rows with its own
// after them (the queue then empty again). limit: the rows one product may
// gather (0: none queued); bf16: the rows kept in bf16 (rounded as the
// packers round), else fp32. 0 with r as it was where the copy's memory
// is wanting and nothing was queued before.
int defer_take(float *dweight, int OC, int C, int limit, int bf16, WRows *r);
// A queue with rows, taken (emptied): its gradient, shape and form, and
// its rows as r; 0 where none is left.
int defer_next(float **dweight, int *OC, int *C, int *bf16, WRows *r);
// Whether the float at w lies in a gradient with rows queued.
int defer_holds(const float *w);

#endif
