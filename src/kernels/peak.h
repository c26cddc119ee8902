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
//   bf16 tile product (AMX tdpbf16ps)               16×16 sums × 16 pairs × 2 products × 2 FLOP
//
// each where CPUID (and the OS's saved vector state, or for the tiles its
// permission) says the CPU has it. Intel's cores run vdpbf16ps at half the
// rate of their fp32 FMAs; their bf16 unit is the tile unit.
// Zen 5 doubles its fp32 rate from 256 to 512 bits and doubles it again
// with the bf16 dot; Zen 4 runs 512-bit operations in two halves, so there
// its two fp32 peaks are equal. The probes take ~60 ms together.
#ifndef TSR_KERNELS_PEAK_H
#define TSR_KERNELS_PEAK_H

#include "core/half.h"

typedef struct {
    int has_fma, has_avx512, has_bf16;   // the CPU has FMA3/AVX2, AVX-512F(+BW/VL), AVX512_BF16 (CPUID and XCR0)
    int has_amx;             // AMX-BF16 tiles, the OS permitting (amx_usable())
    int threads;             // the threads the peaks are for
    double fp32_256, fp32_512, bf16, amx;   // GFLOP/s of those threads together; 0 where the CPU lacks it
} Peaks;

// What the CPU has, without measuring (the peaks left 0).
void peak_cpu(Peaks *p);

// Measures every peak the CPU has on `threads` threads at once (the best of
// a few short repeats: a busy moment only slows one).
void peak_probe(Peaks *p, int threads);

// The fp32 peak: the widest vector the CPU has.
double peak_fp32(const Peaks *p);

// 1 when the unit gemm_bf16 multiplies on (kernels/gemm_bf16.h) outruns the
// fp32 FMAs here, so a bf16 run's products go there; 0 where they are
// better widened to fp32 (no bf16 kernel, or a dot product slower than the
// FMAs: Intel's vdpbf16ps without the tiles).
int peak_bf16_pays(const Peaks *p);

// The peak of the arithmetic a run's products use: under bf16 the unit
// gemm_bf16 multiplies on (the tiles or the dot product) where it pays, the
// fp32 peak otherwise (fp16 and widened bf16 multiply in fp32).
double peak_for(const Peaks *p, Precision prec);

// "fp32 FMA, 512-bit", "bf16 dot product (vdpbf16ps)" or "bf16 tiles (AMX
// tdpbf16ps)": what peak_for(p, prec) measured.
const char *peak_for_name(const Peaks *p, Precision prec);

// "AVX-512 + AVX512_BF16 + AMX-BF16", "AVX-512 + AVX512_BF16", "AVX-512", "AVX2/FMA" or "SSE2".
const char *peak_isa(const Peaks *p);

#endif
