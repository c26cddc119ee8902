// bench_gemm — the linear layers' three products at gpt2-124m's skinny
// shapes, OpenBLAS against tessera's dispatch (kernels/matmul: the own
// SGEMM at <= 256 rows), each against the SGEMM ceiling (2048³) measured
// just before its shape.
//
//   bench_gemm THREADS
//
// Each product runs with its operands evicted from cache first (a 48 MiB
// sweep), as in a training step where every layer's weight comes from
// memory; the best of 9 timed calls is quoted.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"
#include "kernels/matmul.h"

enum { REPS = 9 };

static float *g_sweep;
static void evict(void) {
    size_t n = (size_t)12 << 20;   // 48 MiB: more than the L3
    for (size_t i = 0; i < n; i += 16) g_sweep[i] += 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u + seed) % 1000) * 1e-3f - 0.5f;
}

// GFLOP/s of the best of REPS calls of one product: 0 forward, 1 input gradient, 2 weight gradient;
// blas: straight to CBLAS, else through linear_forward / linear_backward.
static double run(int what, int blas, int N, int C, int OC, float *x, float *w, float *y, float *dy, float *dx,
                  float *dw) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        evict();
        double t0 = timer_now();
        if (what == 0 && blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, x, C, w, C, 0.0f, y, OC);
        else if (what == 0)
            linear_forward(y, x, w, NULL, N, C, OC);
        else if (what == 1 && blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dy, OC, w, C, 0.0f, dx, C);
        else if (what == 1)
            linear_backward(dx, NULL, NULL, dy, x, w, N, C, OC, 0);
        else if (blas)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dy, OC, x, C, 1.0f, dw, C);
        else
            linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
        double t = timer_now() - t0;
        if (t < best) best = t;
    }
    return 2.0 * N * (double)C * OC / best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    kernels_set_threads(threads);
    static const struct { const char *name; int C, OC; } layers[] = {
        {"qkv", 768, 2304}, {"attn.proj", 768, 768}, {"fc", 768, 3072}, {"mlp.proj", 3072, 768},
        {"qkv (tp=2)", 768, 1152}, {"attn.proj (tp=2)", 384, 768}, {"head", 768, 50304},
    };
    static const int rows[] = {64, 256};
    g_sweep = mem_alloc(MEM_WORKSPACE, ((size_t)12 << 20) * sizeof(float));
    size_t xmax = 256 * 3072, wmax = (size_t)50304 * 768, ymax = (size_t)256 * 50304;
    float *x = mem_alloc(MEM_WORKSPACE, xmax * 4), *w = mem_alloc(MEM_WORKSPACE, wmax * 4);
    float *y = mem_alloc(MEM_WORKSPACE, ymax * 4), *dy = mem_alloc(MEM_WORKSPACE, ymax * 4);
    float *dx = mem_alloc(MEM_WORKSPACE, xmax * 4), *dw = mem_alloc(MEM_WORKSPACE, wmax * 4);
    if (!g_sweep || !x || !w || !y || !dy || !dx || !dw) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    fill(x, xmax, 1); fill(w, wmax, 2); fill(dy, ymax, 3);
    printf("  %-17s %5s %-14s %8s | %17s | %17s | %17s\n", "layer", "rows", "C -> OC", "ceiling", "forward",
           "input gradient", "weight gradient");
    printf("  %-17s %5s %-14s %8s | %8s %8s | %8s %8s | %8s %8s\n", "", "", "", "GFLOP/s", "OpenBLAS", "tessera",
           "OpenBLAS", "tessera", "OpenBLAS", "tessera");
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
            int N = rows[r], C = layers[l].C, OC = layers[l].OC;
            double ceil = kernels_sgemm_gflops(2048, 3);
            char shape[32];
            snprintf(shape, sizeof shape, "%d -> %d", C, OC);
            printf("  %-17s %5d %-14s %8.1f |", layers[l].name, N, shape, ceil);
            for (int what = 0; what < 3; what++) {
                double b = run(what, 1, N, C, OC, x, w, y, dy, dx, dw);
                double t = run(what, 0, N, C, OC, x, w, y, dy, dx, dw);
                printf(" %7.1f%% %7.1f%% |", 100 * b / ceil, 100 * t / ceil);
            }
            printf("\n");
            fflush(stdout);
        }
    return 0;
}
