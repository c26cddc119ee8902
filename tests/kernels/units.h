// The bf16 units a test runs its cases on: each one the CPU has, in turn —
// the vector units' vdpbf16ps, then AMX's tiles — the unit gemm_bf16 had
// chosen restored after. Only where gemm_bf16_own().
#ifndef TSR_TESTS_KERNELS_UNITS_H
#define TSR_TESTS_KERNELS_UNITS_H

#include <stdio.h>

#include "kernels/gemm_bf16.h"

static void each_bf16_unit(void (*cases)(void)) {
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
