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

#if defined(__AVX512F__)
#include <immintrin.h>

// vexpf on 16 lanes at once, for loops written with intrinsics: the same
// reduction and polynomial, its steps fused into FMAs (so not vexpf's bits),
// 2^n applied by vscalefps.
static inline __m512 vexp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                    _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

// 1/d on 16 lanes for d ≥ 1: the 14-bit estimate and one Newton step, a few
// ulp from the quotient, in place of a division (a 512-bit vdivps issues
// every 10-16 cycles, which made GELU compute-bound).
static inline __m512 vrecip16(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

// The lanes [0, n) of 16 (none for n <= 0).
static inline __mmask16 vlanes16(long n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
#endif

// Rows of a softmax (attention's scores, the head's logits): the largest
// value, the exps with their sum, a scaling. On AVX-512 by 16 lanes with
// vexp16, the last vector masked, the sums kept per lane and added at the
// end; elsewhere vexpf in loops the compiler vectorizes.

// The largest of x[0, n) and m, NaNs passed over (as `x > m ? x : m` does).
static inline float vmax_row(const float *x, int n, float m) {
#if defined(__AVX512F__)
    __m512 acc = _mm512_set1_ps(m);
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = vlanes16((size_t)(n - i));
        acc = _mm512_mask_max_ps(acc, k, _mm512_maskz_loadu_ps(k, x + i), acc);   // a NaN lane keeps acc
    }
    return _mm512_reduce_max_ps(acc);
#else
    #pragma omp simd reduction(max:m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
#endif
}

// dst[i] = exp(x[i]·a − b) for i in [0, n) (dst may be x, or NULL to keep
// none), and their sum.
static inline float vexp_row(float *dst, const float *x, int n, float a, float b) {
#if defined(__AVX512F__)
    __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = vlanes16((size_t)(n - i));
        __m512 e = vexp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb));
        if (dst) _mm512_mask_storeu_ps(dst + i, k, e);
        sum = _mm512_mask_add_ps(sum, k, sum, e);
    }
    return _mm512_reduce_add_ps(sum);
#else
    float sum = 0.0f;
    if (!dst) {
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < n; i++) sum += vexpf(x[i] * a - b);
        return sum;
    }
    #pragma omp simd reduction(+:sum)
    for (int i = 0; i < n; i++) {
        float e = vexpf(x[i] * a - b);
        dst[i] = e;
        sum += e;
    }
    return sum;
#endif
}

// x[0, n) *= k.
static inline void vscale_row(float *x, int n, float k) {
#if defined(__AVX512F__)
    __m512 vk = _mm512_set1_ps(k);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = vlanes16((size_t)(n - i));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vk));
    }
#else
    #pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= k;
#endif
}

#endif
