// What the bf16 kernels' tests share: operands drawn from normal
// distributions, a stream per draw; and the units a test runs its cases
// on: each one the CPU has, in turn — the vector units' vdpbf16ps, then
// AMX's tiles — the unit gemm_bf16 had chosen restored after (only where
// gemm_bf16_own()).
#ifndef TSR_TESTS_KERNELS_UNITS_H
#define TSR_TESTS_KERNELS_UNITS_H

#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "kernels/gemm_bf16.h"

static uint64_t draw_stream = 1;

// n values of N(0, std²), a fresh stream each call (one float of slack past the end).
static inline float *randn(size_t n, float std) {
    float *x = calloc(n + 1, sizeof *x);
    uint64_t s = draw_stream++;
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * rng_normal(11, s, i));
    return x;
}

static inline void each_bf16_unit(void (*cases)(void)) {
    Bf16Unit units[] = {BF16_DOT, BF16_AMX}, chosen = gemm_bf16_unit();
    for (int u = 0; u < 2; u++) {
        if (!gemm_bf16_use(units[u])) {
            printf("     no AMX tiles here (CPU or OS): the products run on vdpbf16ps only\n");
            continue;
        }
        printf("     products on %s\n", gemm_bf16_unit_name());
        cases();
    }
    gemm_bf16_use(chosen);
}

#endif
