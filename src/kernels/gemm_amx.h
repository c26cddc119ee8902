// kernels/gemm_amx — gemm_bf16's products on the AMX tile unit.
//
// Where the CPU has AMX (amx-tile, amx-bf16: Intel Xeon from Sapphire
// Rapids on), one tdpbf16ps multiplies a 16-row tile of A (16 k-pairs) by a
// tile of B (16 pairs × 16 columns) into 16×16 fp32 sums: 16,384 FLOP per
// instruction, 8–16 times what the vector units do per cycle. It takes the
// operands of gemm_bf16_op in the forms the callers hold them (fp32 or bf16
// rows, either read transposed, gemm_bf16's pairs) and packs its tile panels
// from them directly, or reads B as panels packed once for many products;
// the choice of unit is made per call by gemm_bf16 (kernels/gemm_bf16.h),
// never by the callers.
//
// Each element of C is its pairs' products added in chunks of 16 pairs in
// ascending order, in reduction blocks whose length depends on KP alone:
// the bits do not depend on the thread count. They differ from the vector
// kernel's (the tile unit adds within a chunk in its own order).
#ifndef TSR_KERNELS_GEMM_AMX_H
#define TSR_KERNELS_GEMM_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/gemm_bf16.h"

// 1 when the CPU has AMX-BF16 and the OS lets this process use the tiles
// (asked once, on the first call); 0 otherwise.
int amx_usable(void);

// Loads the kernel's tile configuration on the calling thread / gives the tiles back.
void amx_configure(void);
void amx_release(void);

// gemm_bf16_op's product on the tiles: C (R,NC) = [bias +] A (R,K) · B (K,NC)
// [+ C when accumulate], on nt threads (1: the caller's own), the panels
// packed from a and b in their forms. With C16 given, the sums go there in
// bf16 (half_pack's rounding, ldc apart) instead, C holding only a longer
// reduction's partial sums. Only when amx_usable(). 0, or -1 with C and C16
// untouched when a thread's workspace (up to about 1.2 MiB) is not to be had:
// gemm_bf16 then runs the vector kernel. With sq given (C16 NULL), *sq =
// the sum of squares of C's values as the product leaves them, each 32 × 32
// supertile's read as it is stored, the supertiles' added in tile order:
// the same for every thread count (left as it was where the room for the
// supertiles' sums is not to be had).
int gemm_amx(int R, int NC, int K, Bf16Op a, Bf16Op b, float *C, int ldc, int accumulate, const float *bias,
             uint16_t *C16, int nt, double *sq);

// B (K,NC) as whole panels (gemm_bf16_panels): their length in bf16 values,
// the packing, and where row k0, column c0 (multiples of 32) begins in them.
size_t amx_panels_len(int K, int NC);
void amx_panels(uint16_t *dst, Bf16Op b, int K, int NC);
size_t amx_panels_offset(int K, int k0, int c0);

#endif
