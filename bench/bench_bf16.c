// bench_bf16 — the linear layers' three products at gpt2-124m's shapes,
// tessera's fp32 dispatch against its bf16 products (kernels/gemm_bf16,
// operands packed per call), each quoted against the register-only peak of
// its arithmetic (kernels/peak) for the same threads; "bound" reads the
// weight from its 16-bit copy, as a bf16 stage binds it (matmul_bind16).
//
//   bench_bf16 THREADS [ROWS ...]     (default rows: 256 2048)
//
// Operands are evicted from cache before each call (a 48 MiB sweep); the
// best of 5 timed calls is quoted.
#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/half.h"
#include "core/timer.h"
#include "kernels/gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"

enum { REPS = 5 };

static float *g_sweep;
static void evict(void) {
    for (size_t i = 0; i < ((size_t)12 << 20); i += 16) g_sweep[i] += 1.0f;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u + seed) % 1000) * 1e-3f - 0.5f;
}

// GFLOP/s of the best of REPS calls: 0 forward, 1 input gradient, 2 weight gradient;
// with w16, the weight bound to its 16-bit copy (as a bf16 stage runs them).
static double run(int what, int N, int C, int OC, float *x, float *w, const uint16_t *w16, float *y, float *dy,
                  float *dx, float *dw) {
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        evict();
        if (w16) matmul_bind16(1, w, w16, (size_t)OC * C);
        double t0 = timer_now();
        if (what == 0) linear_forward(y, x, w, NULL, N, C, OC);
        else if (what == 1) linear_backward(dx, NULL, NULL, dy, x, w, N, C, OC, 0);
        else linear_backward(NULL, dw, NULL, dy, x, w, N, C, OC, 0);
        double t = timer_now() - t0;
        matmul_unbind16(1);
        if (t < best) best = t;
    }
    return 2.0 * N * (double)C * OC / best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1, nrows = argc > 2 ? argc - 2 : 2;
    int rows[16] = {256, 2048};
    for (int i = 0; i < nrows && i < 16 && argc > 2; i++) rows[i] = atoi(argv[2 + i]);
    kernels_set_threads(threads);
    if (!gemm_bf16_own()) {
        printf("bench_bf16: the bf16 kernel is not built in (no AVX512_BF16)\n");
        return 0;
    }
    Peaks pk;
    peak_probe(&pk, threads);
    double pbf = gemm_bf16_unit() == BF16_AMX ? pk.amx : pk.bf16;   // the unit gemm_bf16 runs on
    static const struct { const char *name; int C, OC; } layers[] = {
        {"qkv", 768, 2304}, {"attn.proj", 768, 768}, {"fc", 768, 3072}, {"mlp.proj", 3072, 768}, {"head", 768, 50304},
    };
    int nmax = 0;
    for (int i = 0; i < nrows; i++) nmax = rows[i] > nmax ? rows[i] : nmax;
    g_sweep = mem_alloc(MEM_WORKSPACE, ((size_t)12 << 20) * sizeof(float));
    size_t xmax = (size_t)nmax * 3072, wmax = (size_t)50304 * 768, ymax = (size_t)nmax * 50304;
    float *x = mem_alloc(MEM_WORKSPACE, xmax * 4), *w = mem_alloc(MEM_WORKSPACE, wmax * 4);
    float *y = mem_alloc(MEM_WORKSPACE, ymax * 4), *dy = mem_alloc(MEM_WORKSPACE, ymax * 4);
    float *dx = mem_alloc(MEM_WORKSPACE, xmax * 4), *dw = mem_alloc(MEM_WORKSPACE, wmax * 4);
    if (!g_sweep || !x || !w || !y || !dy || !dx || !dw) {
        fprintf(stderr, "bench_bf16: out of memory\n");
        return 1;
    }
    fill(x, xmax, 1); fill(w, wmax, 2); fill(dy, ymax, 3);
    uint16_t *w16 = mem_alloc(MEM_WORKSPACE, wmax * sizeof *w16);
    if (!w16) {
        fprintf(stderr, "bench_bf16: out of memory\n");
        return 1;
    }
    half_pack(PREC_BF16, w16, w, wmax);
    printf("  %d thread%s: fp32 peak %.0f GFLOP/s, bf16 peak %.0f (%s); each product's GFLOP/s and %% of its peak\n", threads,
           threads == 1 ? "" : "s", peak_fp32(&pk), pbf, gemm_bf16_unit_name());
    printf("  %-10s %5s %-14s | %32s | %32s | %21s\n", "layer", "rows", "C -> OC", "forward", "input gradient",
           "weight gradient");
    printf("  %-10s %5s %-14s | %10s %10s %10s | %10s %10s %10s | %10s %10s\n", "", "", "", "fp32", "bf16", "bound",
           "fp32", "bf16", "bound", "fp32", "bf16");
    for (int r = 0; r < nrows; r++)
        for (size_t l = 0; l < sizeof layers / sizeof layers[0]; l++) {
            int N = rows[r], C = layers[l].C, OC = layers[l].OC;
            char shape[32];
            snprintf(shape, sizeof shape, "%d -> %d", C, OC);
            printf("  %-10s %5d %-14s |", layers[l].name, N, shape);
            for (int what = 0; what < 3; what++) {
                double f = run(what, N, C, OC, x, w, NULL, y, dy, dx, dw);
                int prev = matmul_set_bf16(1);
                double h = run(what, N, C, OC, x, w, NULL, y, dy, dx, dw);
                double b = what < 2 ? run(what, N, C, OC, x, w, w16, y, dy, dx, dw) : 0;
                matmul_set_bf16(prev);
                printf(" %4.0f %4.0f%% %4.0f %4.0f%%", f, 100 * f / peak_fp32(&pk), h, 100 * h / pbf);
                if (what < 2) printf(" %4.0f %4.0f%%", b, 100 * b / pbf);
                printf(" |");
            }
            printf("\n");
            fflush(stdout);
        }
    return 0;
}
