// kernels/matmul_path — the fp32 linear products' path, chosen per product
// by what the CPU and the linked BLAS run, and the BLAS's own SGEMM rate
// (the ceiling MFU falls back to where no FMA unit can be probed).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/dnnl.h"
#include "kernels/gemm.h"
#include "kernels/gemm_pack.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"

#ifdef TSR_OPENBLAS
char *openblas_get_config(void);
char *openblas_get_corename(void);
int openblas_get_parallel(void);
#endif

// Whether the linked BLAS runs 512-bit kernels. OpenBLAS says which core's
// kernels it chose: a CPU with AVX-512 held to its Haswell kernels (as
// OPENBLAS_CORETYPE=Haswell does) multiplies at half the rate the own
// kernel reaches, at every shape. Another CBLAS is taken at its word.
static int blas_512(void) {
    static int known = -1;
    if (known < 0) {
#ifdef TSR_OPENBLAS
        static const char *wide[] = {"skylakex", "cooperlake", "sapphirerapids"};
        const char *core = openblas_get_corename();
        known = 0;
        for (size_t i = 0; core && i < sizeof wide / sizeof *wide; i++) known |= strcasecmp(core, wide[i]) == 0;
#else
        known = 1;
#endif
    }
    return known;
}

// Intel's cores (CPUID's vendor): oneDNN's brgemm outruns the own kernel
// there (below).
static int intel_cpu(void) {
    static int known = -1;
    if (known < 0) {
        known = 0;
#if defined(__x86_64__)
        unsigned a, b, c, d;
        if (__get_cpuid(0, &a, &b, &c, &d)) known = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;   // "GenuineIntel"
#endif
    }
    return known;
}

// Which path runs an fp32 product of N rows (input width C, output width
// OC), chosen per product by what the CPU and the linked BLAS run, from
// bench/bench_dnnl and the step's shapes measured side by side (gpt2-124m,
// 2 threads, Zen 5):
// - the own kernel up to OWN_MAX_ROWS rows, where it packs nothing;
// - kernels/gemm_pack for the input gradients past that: at B=8 T=256 in
//   the step, 5–11% faster than the own kernel reading both operands in
//   place (all of them 1,399–1,532 against 1,531–1,728 ms), the step 0.5–1%
//   faster with OpenBLAS held to Haswell and 2–3.5% with nothing set; the
//   same bits (each element's sum over k in order, in fp32 FMAs). At 256
//   rows and fewer it is no faster;
// - the linked BLAS when it runs 512-bit kernels (OpenBLAS's reach 78–85%
//   on the forward and weight gradient);
// - otherwise oneDNN, whose cache-blocked brgemm reaches 75–90% there
//   where OpenBLAS's Haswell kernels reach half of that; but the own kernel
//   for a weight gradient whose output is narrower than its input (C > OC),
//   where it is 7–10% ahead of oneDNN, and kernels/gemm_pack for one eight
//   times taller (the head), 12–16% faster than the own kernel in the step
//   (B=8 T=256: 454 against 514–542 ms), as fast as oneDNN, and taking the
//   gradient's sum of squares as it stores it (oneDNN leaves the norm a
//   pass over it: 3–4 ms).
// On Intel's cores (a Xeon with AMX, 2 threads) the own kernel's tiles,
// tuned on Zen 5, reach 59–69% at 256 rows where oneDNN reaches 76–84%; at
// 64 rows (a pipeline's one-sequence micro-batches) the own kernel's
// forward is ahead, 61–67% against 53–65%, and the step's stages ran at
// 53–54% on it against 43% on oneDNN. There:
// - kernels/gemm_pack runs every weight gradient but the head's past 512
//   rows (at B=4 T=64 2–17% faster than oneDNN's and, for mlp.proj,
//   OpenBLAS's; at B=8 T=256 level with them; at 4–64 rows, pipeline
//   stages' micro-batches adding into the gradient, 11–45% faster than the
//   own unpacked kernel, which waits on C's rows; and its sums of squares
//   save the norm's read: 15 → 5 ms a step at B=8 T=256);
// past 64 rows:
// - oneDNN runs the forwards;
// - kernels/gemm_pack the input gradients (gpt2-124m in the step, against
//   oneDNN's: 5–14% faster at B=4 T=64, 1–5% at B=8 T=256);
// - oneDNN the head's weight gradient past 512 rows, where gemm_pack ran
//   4–10% behind.
int matmul_fp32_path(int product, int N, int C, int OC) {
    if (!gemm_own() || N < 2) return PATH_BLAS;
    if (intel_cpu() && gemm_pack_own() && product == PROD_DWEIGHT && (N <= 512 || OC < 8 * C)) return PATH_PACK;
    if (intel_cpu() && N > 64) {
        if (gemm_pack_own() && product == PROD_DINP) return PATH_PACK;
        if (dnnl_own()) return PATH_DNNL;   // the forwards, and the head's weight gradient
    }
    if (product == PROD_DINP && N > OWN_MAX_ROWS && gemm_pack_own()) return PATH_PACK;
    if (N <= OWN_MAX_ROWS || product == PROD_DINP) return PATH_OWN;
    if (blas_512()) return PATH_BLAS;
    if (product == PROD_DWEIGHT && OC >= 8 * C && gemm_pack_own()) return PATH_PACK;
    if (!dnnl_own() || (product == PROD_DWEIGHT && (C > OC || OC >= 8 * C))) return PATH_OWN;
    return PATH_DNNL;
}

int matmul_fp32_sumsq(int N, int C, int OC) {
    int path = matmul_fp32_path(PROD_DWEIGHT, N, C, OC);
    return path == PATH_PACK || path == PATH_OWN;
}

// The BLAS and, where oneDNN or the own packed kernel runs some of the fp32
// products, which.
const char *kernels_blas_info(void) {
    static char buf[512];
#ifdef TSR_OPENBLAS
    static const char *par[] = {"sequential", "pthreads", "openmp"};
    int p = openblas_get_parallel();
    snprintf(buf, sizeof buf, "%s (%s)", openblas_get_config(), p >= 0 && p <= 2 ? par[p] : "?");
#else
    snprintf(buf, sizeof buf, "CBLAS");
#endif
    size_t n = strlen(buf);
    if (matmul_fp32_path(PROD_FWD, 65, 1, 1) == PATH_DNNL)   // Intel's cores: oneDNN from 65 rows on
        snprintf(buf + n, sizeof buf - n, "; %s for fp32 forwards of more than 64 rows and the head's weight gradient "
                 "of more than 512", dnnl_info());
    else if (matmul_fp32_path(PROD_FWD, OWN_MAX_ROWS + 1, 1, 1) == PATH_DNNL)
        snprintf(buf + n, sizeof buf - n, "; %s for fp32 forward and weight-gradient products of more than %d rows",
                 dnnl_info(), OWN_MAX_ROWS);
    n = strlen(buf);
    if (matmul_fp32_path(PROD_DINP, 65, 1, 1) == PATH_PACK)
        snprintf(buf + n, sizeof buf - n, "; the own packed kernel for the other fp32 weight gradients and the input "
                 "gradients of more than 64 rows");
    else if (matmul_fp32_path(PROD_DINP, OWN_MAX_ROWS + 1, 1, 1) == PATH_PACK)
        snprintf(buf + n, sizeof buf - n, "; the own packed kernel for fp32 input gradients%s of more than %d rows",
                 matmul_fp32_path(PROD_DWEIGHT, OWN_MAX_ROWS + 1, 1, 8) == PATH_PACK ? " and the head's weight gradient"
                                                                                    : "",
                 OWN_MAX_ROWS);
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kernels_sgemm_gflops(int n, int reps) {
    size_t nn = (size_t)n * n;
    float *a = mem_alloc(MEM_WORKSPACE, 3 * nn * sizeof(float));
    if (!a || reps < 1 || reps > 64) { mem_free(a); return 0.0; }
    float *b = a + nn, *c = b + nn;
    for (size_t i = 0; i < 2 * nn; i++) a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    double t[64];
    for (int w = 0; w < 2; w++)   // warm-up: threads started, caches and frequency settled
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = timer_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = timer_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    mem_free(a);
    return 2.0 * n * (double)n * n / t[0] * 1e-9;   // the best repeat: a busy moment only slows one
}
