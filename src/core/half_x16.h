// core/half_x16 — bf16 rounding on 16 AVX-512 lanes, for the packers that
// write 16 values at a time: core/half's, and the tiles' bf16 output in
// kernels/gemm_amx. The rule of f32_to_bf16 (core/half.h), lane by lane.
#ifndef TSR_CORE_HALF_X16_H
#define TSR_CORE_HALF_X16_H

#if defined(__x86_64__)
#include <immintrin.h>

// Each lane's fp32 bits rounded to bf16 (nearest even, a NaN quieted), the
// result in the lane's low half. AVX-512 callers only.
__attribute__((target("avx512f"))) static inline __m512i f32_to_bf16_x16(__m512i b) {
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
    return _mm512_srli_epi32(_mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x400000)), 16);
}
#endif

#endif
