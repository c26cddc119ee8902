// kernels/peak — the arithmetic peaks of the machine in hand, measured.
//
// MFU is model FLOPs over a peak. A BLAS call is not a peak: it measures one
// library under one setting (OpenBLAS held to AVX2 by OPENBLAS_CORETYPE
// reaches half of what the same CPU does at 512 bits), and a faster kernel
// then reads above 100%. These probes run chains of independent
// multiply-adds on registers only, one loop on each of the run's threads at
// once, so what they time is the arithmetic units and nothing else:
//
//   fp32 FMA on 256-bit vectors (vfmadd…ps ymm)      8 lanes × 2 FLOP
//   fp32 FMA on 512-bit vectors (vfmadd…ps zmm)     16 lanes × 2 FLOP
//   bf16 dot product (vdpbf16ps zmm)                16 lanes × 2 products × 2 FLOP
//
// each where CPUID (and the OS's saved vector state) says the CPU has it.
// Zen 5 doubles its fp32 rate from 256 to 512 bits and doubles it again
// with the bf16 dot; Zen 4 runs 512-bit operations in two halves, so there
// its two fp32 peaks are equal. The probes take ~60 ms together.
#ifndef TSR_KERNELS_PEAK_H
#define TSR_KERNELS_PEAK_H

#include "core/half.h"

typedef struct {
    int has_fma, has_avx512, has_bf16;   // the CPU has FMA3/AVX2, AVX-512F(+BW/VL), AVX512_BF16 (CPUID and XCR0)
    int threads;             // the threads the peaks are for
    double fp32_256, fp32_512, bf16;   // GFLOP/s of those threads together; 0 where the CPU lacks it
} Peaks;

// What the CPU has, without measuring (the peaks left 0).
void peak_cpu(Peaks *p);

// Measures every peak the CPU has on `threads` threads at once (the best of
// a few short repeats: a busy moment only slows one).
void peak_probe(Peaks *p, int threads);

// The fp32 peak: the widest vector the CPU has.
double peak_fp32(const Peaks *p);

// The peak of the arithmetic a run's products use: the bf16 dot product when
// the run is bf16 and its products run on it (gemm_bf16_own()), the fp32
// peak otherwise (fp16 and widened bf16 multiply in fp32).
double peak_for(const Peaks *p, Precision prec);

// "fp32 FMA 512-bit" or "bf16 dot (vdpbf16ps)": what peak_for(p, prec) measured.
const char *peak_for_name(const Peaks *p, Precision prec);

// "AVX-512 + AVX512_BF16", "AVX-512", "AVX2/FMA" or "SSE2".
const char *peak_isa(const Peaks *p);

#endif
