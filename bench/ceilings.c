// ceilings — what a GEMM's inner loop reaches on this machine when its
// operands come from L1, and when they stream from L2: a register tile of
// each arithmetic over packed operands, loads and products together, on
// THREADS threads at once. kernels/peak times the units on registers alone;
// a product has to load its operands too, and these loops time that with no
// packing, no edge and no C to store: no GEMM built of these tiles runs
// faster here, and one whose panels do not fit L1 runs no faster than the
// L2 figure.
//
//   ceilings THREADS  ->  "fp32 L1|fp32 L2|bf16 dot L1|bf16 dot L2|AMX L1|AMX L2"
//                         in GFLOP/s (0: the CPU lacks it)
//
// fp32: a 12 × 32 tile, per k two vectors of B and twelve broadcasts of A
// into 24 FMAs (the own kernel's widest tile, kernels/gemm). bf16 dot: the
// same tile on vdpbf16ps, a k-pair per step. AMX: a 2 × 2 supertile of
// 16 × 16 sums, per chunk of 16 pairs two tiles of A and two of B loaded
// (64-byte rows, as gemm_amx packs them) into four tdpbf16ps. In L1 the
// operands take 33 KiB (a reduction of 192 steps, 8 chunks), from L2 1 MiB.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "kernels/gemm_amx.h"
#include "kernels/matmul.h"
#include "kernels/peak.h"

enum {
    MR = 12, NV = 2, REPEATS = 5,
    KC_L1 = 192, CHUNKS_L1 = 8,      // 33 KiB of operands: L1
    KC_L2 = 5952, CHUNKS_L2 = 256,   // 1 MiB: past L1, within L2
    BYTES = 1 << 20,
};

// Each loop: iters passes over its operands in buf, a reduction of len steps
// (chunks for the tiles); returns a sum so the work is not optimized away.
typedef float (*Loop)(long iters, const void *buf, int len);

__attribute__((target("avx512f"))) static float loop_fp32(long iters, const void *buf, int len) {
    const float *A = buf, *B = A + (size_t)MR * len;   // A [k][12], B [k][32]
    __m512 c[MR][NV];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) c[i][v] = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) {
        const float *a = A, *b = B;
        for (int k = 0; k < len; k++, a += MR, b += 16 * NV) {
            __m512 y0 = _mm512_load_ps(b), y1 = _mm512_load_ps(b + 16);
            _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {
                __m512 x = _mm512_set1_ps(a[i]);
                c[i][0] = _mm512_fmadd_ps(x, y0, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(x, y1, c[i][1]);
            }
        }
    }
    for (int i = 1; i < MR; i++) c[0][0] = _mm512_add_ps(c[0][0], _mm512_add_ps(c[i][0], c[i][1]));
    return _mm512_reduce_add_ps(c[0][0]);
}

__attribute__((target("avx512f,avx512bf16"))) static float loop_dot(long iters, const void *buf, int len) {
    const int *A = buf;                                           // A [k-pair][12] pairs
    const __m512bh *B = (const __m512bh *)(A + (size_t)MR * len);   // B [k-pair][32 columns] pairs
    __m512 c[MR][NV];
    for (int i = 0; i < MR; i++)
        for (int v = 0; v < NV; v++) c[i][v] = _mm512_setzero_ps();
    for (long it = 0; it < iters; it++) {
        const int *a = A;
        const __m512bh *b = B;
        for (int k = 0; k < len; k++, a += MR, b += NV) {
            __m512bh y0 = b[0], y1 = b[1];
            _Pragma("GCC unroll 12") for (int i = 0; i < MR; i++) {
                __m512bh x = (__m512bh)_mm512_set1_epi32(a[i]);
                c[i][0] = _mm512_dpbf16_ps(c[i][0], x, y0);
                c[i][1] = _mm512_dpbf16_ps(c[i][1], x, y1);
            }
        }
    }
    for (int i = 1; i < MR; i++) c[0][0] = _mm512_add_ps(c[0][0], _mm512_add_ps(c[i][0], c[i][1]));
    return _mm512_reduce_add_ps(c[0][0]);
}

__attribute__((target("amx-tile,amx-bf16"))) static float loop_amx(long iters, const void *buf, int len) {
    const char *A = buf, *B = A + (size_t)len * 2048;   // per chunk: two 1 KiB tiles of each
    amx_configure();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long it = 0; it < iters; it++)
        for (int q = 0; q < len; q++) {
            _tile_loadd(4, A + q * 2048, 64);
            _tile_loadd(5, A + q * 2048 + 1024, 64);
            _tile_loadd(6, B + q * 2048, 64);
            _tile_loadd(7, B + q * 2048 + 1024, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    float out[256];
    _tile_stored(0, out, 64);
    amx_release();
    return out[0];
}

// Passes per second of f on every thread at once, summed; *shortest the
// shortest thread's seconds. Each thread's operands are its own, small
// values (no denormal, no overflow in any number of passes).
static double rate(Loop f, int len, int threads, long iters, double *shortest) {
    enum { MAXT = 256 };
    double sec[MAXT];
    int team = 1;
    volatile float sink = 0;
    #pragma omp parallel num_threads(threads)
    {
        int me = omp_get_thread_num();
        if (me == 0) team = omp_get_num_threads();
        unsigned short *buf = aligned_alloc(64, BYTES);
        for (int i = 0; buf && i < BYTES / 2; i++) buf[i] = i % 2 ? 0x3A83 : 0;   // floats 1e-3; bf16 pairs (0, 1e-3)
        #pragma omp barrier
        double t0 = timer_now();
        float v = buf ? f(iters, buf, len) : 0.0f;
        sec[me < MAXT ? me : 0] = timer_now() - t0;
        if (v == 12345.0f) sink = v;
        free(buf);
    }
    (void)sink;
    double sum = 0;
    *shortest = sec[0];
    for (int i = 0; i < team && i < MAXT; i++) {
        sum += (double)iters / sec[i];
        if (sec[i] < *shortest) *shortest = sec[i];
    }
    return sum;
}

// GFLOP/s of f: passes grown until every thread's loop takes 5 ms, then the
// best of REPEATS.
static double measure(Loop f, int len, int threads, double flops_per_pass) {
    long iters = 4;
    double shortest, best;
    rate(f, len, threads, iters, &shortest);
    best = rate(f, len, threads, iters, &shortest);
    while (shortest < 5e-3 && iters < (1L << 40)) best = rate(f, len, threads, iters *= 4, &shortest);
    for (int r = 1; r < REPEATS; r++) {
        double x = rate(f, len, threads, iters, &shortest);
        if (x > best) best = x;
    }
    return flops_per_pass * best * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (threads < 1 || threads > 256) return 2;
    kernels_set_threads(threads);
    Peaks p;
    peak_cpu(&p);
    double g[6] = {0};
    for (int l2 = 0; l2 < 2; l2++) {
        int kc = l2 ? KC_L2 : KC_L1, chunks = l2 ? CHUNKS_L2 : CHUNKS_L1;
        if (p.has_avx512) g[l2] = measure(loop_fp32, kc, threads, 2.0 * MR * 16 * NV * kc);
        if (p.has_bf16) g[2 + l2] = measure(loop_dot, kc, threads, 4.0 * MR * 16 * NV * kc);
        if (p.has_amx) g[4 + l2] = measure(loop_amx, chunks, threads, 4.0 * chunks * 16 * 16 * 16 * 2 * 2);
    }
    printf("%.1f|%.1f|%.1f|%.1f|%.1f|%.1f\n", g[0], g[1], g[2], g[3], g[4], g[5]);
    return 0;
}
