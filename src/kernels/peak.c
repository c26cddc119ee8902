#include "kernels/peak.h"

#include <omp.h>

#include "core/timer.h"
#include "kernels/gemm_amx.h"
#include "kernels/gemm_bf16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TSR_X86 1
#endif

// Independent accumulator chains per loop: enough to cover the latency of
// two pipes (4–6 cycles each) with room to spare, few enough to stay in
// registers with the two operands — 16 of AVX2's, 32 of AVX-512's. The
// 512-bit loops keep twice as many: with 12, Zen 5's bf16 dot product read
// 10% under a GEMM tile that loads its operands as well.
enum { CHAINS = 12, CHAINS512 = 24, REPEATS = 5 };

#ifdef TSR_X86
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

void peak_cpu(Peaks *p) {
    *p = (Peaks){0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return;   // no OSXSAVE: no AVX state at all
    unsigned long long xcr0 = xgetbv0();
    int ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xE6) == 0xE6;
    int fma = c >> 12 & 1;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    p->has_fma = ymm && fma && (b >> 5 & 1);
    p->has_avx512 = p->has_fma && zmm && (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1);
    __cpuid_count(7, 1, a, b, c, d);
    p->has_bf16 = p->has_avx512 && (a >> 5 & 1);
    p->has_amx = p->has_bf16 && amx_usable();
}

__attribute__((target("avx2,fma"))) static float loop_fp32_256(long iters) {
    __m256 acc[CHAINS], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps(1e-3f * (float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    for (int i = 1; i < CHAINS; i++) acc[0] = _mm256_add_ps(acc[0], acc[i]);
    return _mm256_cvtss_f32(acc[0]);
}

__attribute__((target("avx512f"))) static float loop_fp32_512(long iters) {
    __m512 acc[CHAINS512], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < CHAINS512; i++) acc[i] = _mm512_set1_ps(1e-3f * (float)i);
    for (long it = 0; it < iters; it++)
        _Pragma("GCC unroll 24")
        for (int i = 0; i < CHAINS512; i++) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    for (int i = 1; i < CHAINS512; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]);
    return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx512f,avx512bf16"))) static float loop_bf16(long iters) {
    __m512 acc[CHAINS512];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3F80), y = (__m512bh)_mm512_set1_epi16(0x3400);   // 1.0, 2^-23
    for (int i = 0; i < CHAINS512; i++) acc[i] = _mm512_set1_ps(1e-3f * (float)i);
    for (long it = 0; it < iters; it++)
        _Pragma("GCC unroll 24")
        for (int i = 0; i < CHAINS512; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    for (int i = 1; i < CHAINS512; i++) acc[0] = _mm512_add_ps(acc[0], acc[i]);
    return _mm512_reduce_add_ps(acc[0]);
}

// Four independent 16×16 sums, each tdpbf16ps 16 pairs deep: the tile unit
// takes one every 16 cycles or so, and four cover its latency.
__attribute__((target("amx-tile,amx-bf16"))) static float loop_amx(long iters) {
    amx_configure();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (long it = 0; it < iters; it++) {
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

// Iterations per second of f on every thread at once, summed over the
// threads, each timed over its own loop after a barrier (waking the threads
// is not counted; a thread that shares its core with another runs at half
// the rate). *shortest is the shortest thread's seconds.
static double rate(float (*f)(long), int threads, long iters, double *shortest) {
    enum { MAXT = 256 };
    double sec[MAXT];
    int team = 1;
    volatile float sink = 0;
    if (threads > MAXT) threads = MAXT;
    #pragma omp parallel num_threads(threads)
    {
        int me = omp_get_thread_num();
        if (me == 0) team = omp_get_num_threads();
        #pragma omp barrier
        double t0 = timer_now();
        float v = f(iters);
        sec[me] = timer_now() - t0;
        if (v == 12345.0f) sink = v;   // never true: the result is used
    }
    (void)sink;
    double sum = 0;
    *shortest = sec[0];
    for (int i = 0; i < team; i++) {
        sum += (double)iters / sec[i];
        if (sec[i] < *shortest) *shortest = sec[i];
    }
    return sum;
}

// GFLOP/s of f's loop on `threads` threads: grown until every thread's loop
// takes 1 ms or more, then the best of REPEATS (a busy moment only slows one).
static double measure(float (*f)(long), int threads, double flops_per_iter) {
    long iters = 20000;
    double shortest, best;
    rate(f, threads, iters, &shortest);   // starts the threads and wakes the units
    best = rate(f, threads, iters, &shortest);
    while (shortest < 1e-3 && iters < (1L << 40)) best = rate(f, threads, iters *= 4, &shortest);
    for (int r = 1; r < REPEATS; r++) {
        double x = rate(f, threads, iters, &shortest);
        if (x > best) best = x;
    }
    return flops_per_iter * best * 1e-9;
}

void peak_probe(Peaks *p, int threads) {
    peak_cpu(p);
    p->threads = threads < 1 ? 1 : threads;
    if (p->has_fma) p->fp32_256 = measure(loop_fp32_256, p->threads, CHAINS * 8 * 2);
    if (p->has_avx512) p->fp32_512 = measure(loop_fp32_512, p->threads, CHAINS512 * 16 * 2);
    if (p->has_bf16) p->bf16 = measure(loop_bf16, p->threads, CHAINS512 * 16 * 2 * 2);
    if (p->has_amx) p->amx = measure(loop_amx, p->threads, 4.0 * 16 * 16 * 16 * 2 * 2);
}
#else
void peak_cpu(Peaks *p) { *p = (Peaks){0}; }
void peak_probe(Peaks *p, int threads) {
    peak_cpu(p);
    p->threads = threads < 1 ? 1 : threads;
}
#endif

double peak_fp32(const Peaks *p) { return p->fp32_512 > p->fp32_256 ? p->fp32_512 : p->fp32_256; }

int peak_bf16_pays(const Peaks *p) {
    double unit = gemm_bf16_unit() == BF16_AMX ? p->amx : p->bf16;
    return gemm_bf16_own() && unit > peak_fp32(p);
}

// 2: a bf16 run's products on the tiles, 1: on the dot product, 0: in fp32.
static int bf16_unit(const Peaks *p, Precision prec) {
    if (prec != PREC_BF16 || !peak_bf16_pays(p)) return 0;
    return gemm_bf16_unit() == BF16_AMX ? 2 : 1;
}

double peak_for(const Peaks *p, Precision prec) {
    int u = bf16_unit(p, prec);
    return u == 2 ? p->amx : u == 1 ? p->bf16 : peak_fp32(p);
}

const char *peak_for_name(const Peaks *p, Precision prec) {
    int u = bf16_unit(p, prec);
    if (u == 2) return "bf16 tiles (AMX tdpbf16ps)";
    if (u == 1) return "bf16 dot product (vdpbf16ps)";
    return p->fp32_512 > p->fp32_256 ? "fp32 FMA, 512-bit" : p->fp32_256 > 0 ? "fp32 FMA, 256-bit" : "none measured";
}

const char *peak_isa(const Peaks *p) {
    return p->has_amx ? "AVX-512 + AVX512_BF16 + AMX-BF16" : p->has_bf16 ? "AVX-512 + AVX512_BF16" : p->has_avx512 ? "AVX-512" : p->has_fma ? "AVX2/FMA" : "SSE2";
}
