// kernels/bf16_impl.h — the register shuffles the bf16 packers share
// (kernels/gemm_bf16's layouts, kernels/gemm_amx's panels), and the sums of
// squares both kernels, and kernels/gemm_pack's fp32 tiles, take of a weight
// gradient's tiles; and the tile width both vector kernels (gemm_bf16's and
// kernels/gemm's) choose for a product's columns. x86-64 only; each
// function carries the instruction sets it needs, so a file built for an
// older target may still hold packers that run only on newer CPUs.
#ifndef TSR_KERNELS_BF16_IMPL_H
#define TSR_KERNELS_BF16_IMPL_H

#include <immintrin.h>
#include <stdlib.h>

#define BF16_PACK_FN __attribute__((target("avx512f,avx512bw,avx512bf16")))

// Two rows' 16 values each, as [even row | odd row] 16-bit lanes, to 16
// pairs: element 2j is the even row's value j, element 2j+1 the odd row's.
BF16_PACK_FN static inline __m512i bf16_interleave(__m512i both) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(idx, both);
}

// 16 pairs from two fp32 rows of 16, rounded to bf16 (nearest even).
BF16_PACK_FN static inline __m512i bf16_pairs32(__m512 even, __m512 odd) {
    return bf16_interleave((__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

// 16 pairs from two bf16 rows of 16.
BF16_PACK_FN static inline __m512i bf16_pairs16v(__m256i even, __m256i odd) {
    return bf16_interleave(_mm512_inserti64x4(_mm512_castsi256_si512(even), odd, 1));
}

// 32 fp32 values (the lanes of lo, then hi, masked) rounded to 32 bf16 in order: 16 pairs.
BF16_PACK_FN static inline __m512i bf16_row32(const float *s, __mmask16 lo, __mmask16 hi) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + 16), _mm512_maskz_loadu_ps(lo, s));
}

// r[0..16) = the 16×16 matrix of 32-bit elements in r transposed: pairs of
// rows interleaved by 32 and 64 bits, then the 128-bit lanes gathered.
BF16_PACK_FN static inline void bf16_transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {   // u[g+j], lane l: column 4l+j of rows g..g+3
        u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    for (int j = 0; j < 4; j++) {   // row 4l+j of the result: lane l of u[j], u[4+j], u[8+j], u[12+j]
        __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
        r[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
    }
}

// The sum of squares (float64) of a tile of C as a product just stored it:
// rows × cols floats, rows ld apart, each row 16 lanes at a time into 8
// float64 lanes, the lanes added in a fixed order. The gradient norm's part
// of a weight gradient's last product (gemm_bf16_op_sq), read while the
// tile is in L1. AVX-512F alone: kernels/gemm_pack's fp32 tiles take it too.
__attribute__((target("avx512f"))) static inline double bf16_tile_squares(const float *c, size_t ld, int rows,
                                                                         int cols) {
    __m512d acc = _mm512_setzero_pd();
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j += 16) {
            int n = cols - j < 16 ? cols - j : 16;
            __m512 x = _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), c + (size_t)r * ld + j);
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
            __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
            acc = _mm512_fmadd_pd(lo, lo, acc);
            acc = _mm512_fmadd_pd(hi, hi, acc);
        }
    double v[8], s = 0;
    _mm512_storeu_pd(v, acc);
    for (int i = 0; i < 8; i++) s += v[i];
    return s;
}

// The tile width for NC columns, in vectors of 16: 32, 48 or 64 columns,
// the one that wastes the fewest lanes on NC, the widest on a tie.
static inline int tile_vectors(int NC) {
    int nv = 4, waste = 1 << 30;
    for (int v = 4; v >= 2; v--) {
        int w = (NC + 16 * v - 1) / (16 * v) * 16 * v - NC;
        if (w < waste) waste = w, nv = v;
    }
    return nv;
}

// The sum of squares (float64) of a register tile's sums c[i][v], i < mr,
// v < NV, taken as they are stored — read back from C, each masked store
// waits to be forwarded, and one chain of float64 adds made it 7% of a bf16
// step at 256 rows (Zen 5): a chain per column vector and half, over the
// rows, then the chains added in order. Lanes past the tile's columns hold
// 0 (the kernels read B's and C's lanes there as 0). gemm_bf16's vector
// tiles and kernels/gemm's fp32 tiles take it.
#define TILE_REG_SQUARES(NV, MRMAX)                                                                            \
    __attribute__((target("avx512f"), always_inline)) static inline double tile_reg_squares_##NV(             \
        __m512 c[MRMAX][NV], int mr) {                                                                         \
        __m512d s[2 * NV];                                                                                     \
        _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NV; v++) s[v] = _mm512_setzero_pd();                   \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                                  \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                             \
                __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(c[i][v]));                                 \
                __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c[i][v]), 1))); \
                s[2 * v] = _mm512_fmadd_pd(lo, lo, s[2 * v]);                                                  \
                s[2 * v + 1] = _mm512_fmadd_pd(hi, hi, s[2 * v + 1]);                                          \
            }                                                                                                  \
        _Pragma("GCC unroll 8") for (int v = 1; v < 2 * NV; v++) s[0] = _mm512_add_pd(s[0], s[v]);             \
        double l[8], sum = 0;                                                                                  \
        _mm512_storeu_pd(l, s[0]);                                                                             \
        for (int k = 0; k < 8; k++) sum += l[k];                                                               \
        return sum;                                                                                            \
    }
TILE_REG_SQUARES(2, 12)
TILE_REG_SQUARES(3, 8)
TILE_REG_SQUARES(4, 6)

// *sq = the tiles' sums of squares (bf16_tile_squares) added in tile order,
// the same for every thread count; frees them. Nothing where part is NULL
// (its room was not to be had: *sq stays as it was).
static inline void bf16_sum_parts(double *part, long tiles, double *sq) {
    if (!part) return;
    double s = 0;
    for (long x = 0; x < tiles; x++) s += part[x];
    *sq = s;
    free(part);
}

#endif
