// kernels/vmath_impl.h — vectorizable elementwise math shared by the kernels.
// Internal to kernels/. The loops that call these carry `#pragma omp simd`,
// so they must stay branch-free.
#ifndef TSR_KERNELS_VMATH_IMPL_H
#define TSR_KERNELS_VMATH_IMPL_H

#include <math.h>
#include <stdint.h>

// exp(x) for x in [-87, 88], relative error below 2e-7: x = n·ln2 + r with
// a two-part ln2 (Cody-Waite), a degree-6 polynomial for exp(r) (Cephes),
// and 2^n built in the exponent field. Inputs are clamped to that range, so
// exp of a very negative number is ~1e-38, not 0 — callers that need an
// exact zero (masked logits) write it themselves. A NaN input is clamped
// like −inf (to −87), so that the conversion to an integer below is always
// defined; the callers' NaNs still reach their results by other paths
// (a NaN logit is the target's, or the row maximum is).
static inline float vexpf(float x) {
    // Ternaries, not fminf/fmaxf: their NaN rules keep GCC from vectorizing.
    x = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // 2^n in the exponent field (a union: C11 defines type punning through
    // one, and unlike memcpy it does not stop the loop from vectorizing).
    union { int32_t i; float f; } scale = {.i = (int32_t)((uint32_t)((int32_t)n + 127) << 23)};
    return p * scale.f;
}

#endif
